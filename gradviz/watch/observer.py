"""The observer: PyTorch's public hooks and a few light wrappers, installed for the first N updates.

What it installs, and removes again after ``steps`` updates (or when the watch ends):

- the global optimizer step pre- and post-hooks
  (``torch.optim.optimizer.register_optimizer_step_pre_hook`` / ``_post_hook``);
- ``Tensor.register_post_accumulate_grad_hook`` on every parameter an optimizer holds
  (found at its first step), every parameter of a module whose ``zero_grad`` runs, and
  every leaf a ``backward`` reaches (found by walking its graph before it runs);
- wrappers of ``torch.optim.Optimizer.zero_grad``, ``torch.nn.Module.zero_grad``,
  ``torch.Tensor.backward`` and ``torch.autograd.backward`` that note the caller's file
  and line: the first frame outside torch, gradviz and the standard library.

A manual update (``p -= lr * p.grad`` under ``no_grad``) is seen as a leaf's version
counter, or its values, moving between two events.

Each parameter's ``.grad`` is followed as a little state machine: which backwards filled
it since it was last cleared, whether an update has used what it holds, whether it was
cleared to zeros. The findings fall out of those states at each update.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

import numpy as np

from gradviz.watch.findings import Finding

FULL_VALUES = 4096  # a parameter of at most this many elements is recorded whole ...
WHOLE_VALUES = 4096  # ... while those recorded whole hold at most this many together;
SAMPLE_SIZE = 32  # others by this many elements at fixed, evenly spaced flat indices
MAX_EVENTS = 20000  # events kept at most; past them the observer stops
MAX_PARAMS = 4096  # tensors followed at most; past them the observer stops
LATE_LEAVES = 100  # backwards past the third that bring new leaves, at most; then the observer stops
SOURCE_LINES = 5000  # lines kept per user file at most
SOURCE_LINE_CHARS = 500  # characters kept per line at most
SOURCE_FILES = 50
NAME_CHARS = 200  # characters of a tensor's name kept at most
PATH_CHARS = 4096  # the longest path a file of the user's has (Linux's PATH_MAX)
MAX_CALLERS = 8  # other user files an op's callers are kept for, at most

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _skipped_prefixes() -> tuple[str, ...]:
    import torch

    prefixes = {os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, _HERE}
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            prefixes.add(os.path.abspath(path) + os.sep)
    return tuple(prefixes)


@dataclass(eq=False, slots=True)
class Event:
    index: int
    op: str  # "backward", "zero_grad", "step", "update"
    file: str
    line: int
    step: int  # updates seen before this event
    who: str = ""  # the optimizer ("SGD #0") or the module's class
    filled: list[int] = field(default_factory=list)  # parameter ids a backward filled
    params: list[int] = field(default_factory=list)  # parameters a zero_grad or update concerned
    zeros: list[int] = field(default_factory=list)  # parameters a zero_grad left holding zeros, not None
    loss: Ref | None = None  # a backward's loss (one number), copied off the device
    grads: dict[int, Ref] = field(default_factory=dict)  # the .grad a backward left, by parameter id
    # (file, line) of each other user file it was called from, innermost first
    calls: list[tuple[str, int]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op": self.op, "file": self.file, "line": self.line, "step": self.step}
        if self.who:
            out["who"] = self.who
        if self.op == "backward":
            out["filled"] = self.filled
            if self.loss is not None:
                out["loss"] = self.loss.floats()[0]
            if self.grads:
                out["grads"] = {str(pid): g.floats() for pid, g in self.grads.items()}
        elif self.params:
            out["params"] = self.params
        if self.zeros:
            out["zeros"] = self.zeros
        if self.calls:
            out["calls"] = [[file, line] for file, line in self.calls]
        return out


@dataclass
class Param:
    """What the observer follows about one leaf tensor."""

    id: int
    tensor: Any
    name: str
    shape: list[int]
    numel: int
    sample: Any = None  # flat indices recorded, or None: every value
    device: str = "cpu"
    optimizer: int | None = None
    fills: list[int] = field(default_factory=list)  # backward events since the last clearing
    used_by: int | None = None  # the update event that used what .grad holds, since the last clearing
    carried: tuple[int, int] | None = None  # (backward, update): a backward added to a used .grad
    lost: tuple[int, int] | None = None  # (backward, clearing): cleared before any update used it
    zeros: bool = False  # cleared to a tensor of zeros, nothing added since
    grad_mark: tuple[int, int] | None = None  # (id, _version) of .grad when last seen
    value_mark: tuple[int, Any] | None = None  # (_version, values) when last seen
    ledger: tuple[tuple[int, int], Ref] | None = None  # (id, _version) of the .grad a backward left; its copy
    ever_filled: bool = False
    handle: Any = None


@dataclass
class Optim:
    id: int
    obj: Any
    name: str
    params: list[int]
    first_step: Event | None = None
    steps: int = 0
    k_counts: set[int] = field(default_factory=set)
    k_lines: set[tuple[str, int]] = field(default_factory=set)


class Observer:
    """Follows the ``.grad`` of every parameter through the first ``steps`` updates."""

    def __init__(self, steps: int = 50) -> None:
        self.limit = steps
        self.updates = 0
        self.events: list[Event] = []
        self.params: dict[int, Param] = {}  # by id(tensor)
        self.order: list[Param] = []
        self.optims: dict[int, Optim] = {}  # by id(optimizer)
        self.records: list[dict[str, Any]] = []
        self.final: dict[int, Any] = {}  # values (or samples) when the watch ended, by parameter id
        self.findings: list[Finding] = []
        self._seen: set[tuple[str, int, str]] = set()
        self.installed = False
        self.stopped_early = ""
        self._closing = False
        self._busy = 0
        self._current: Event | None = None
        self._loss: Any = None  # the loss of the backward running, until its ledger is copied
        self._restore: list[Callable[[], None]] = []
        self._handles: list[Any] = []
        self._module_clears: list[tuple[int, set[int], str]] = []  # (event, params, class)
        self._pending: dict[int, tuple[Any, bool]] = {}  # params cleared to zeros, before a step
        self._skip: tuple[str, ...] = ()
        self._users: dict[Any, bool] = {}  # code object -> whether it is the user's
        self._calls: tuple[str, list[tuple[str, int]]] = ("", [])  # the last place found, its callers
        self.files: list[str] = []
        self._whole = 0  # elements of the parameters recorded whole
        self._backwards = 0
        self._quiet = 0  # backwards in a row whose graph held no new leaf
        self._late = 0  # backwards after the first three whose graph held new leaves

    # ------------------------------------------------------------ install

    def install(self) -> None:
        import torch
        from torch.optim import optimizer as optmod

        self._skip = _skipped_prefixes()
        self._handles.append(optmod.register_optimizer_step_pre_hook(self._step_pre))
        self._handles.append(optmod.register_optimizer_step_post_hook(self._step_post))
        self._wrap(torch.optim.Optimizer, "zero_grad", self._wrap_zero_grad(optimizer=True))
        self._wrap(torch.nn.Module, "zero_grad", self._wrap_zero_grad(optimizer=False))
        self._wrap(torch.Tensor, "backward", self._wrap_backward(tensor_method=True))
        self._wrap(torch.autograd, "backward", self._wrap_backward(tensor_method=False))
        self.installed = True

    def _wrap(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        wrapper = make(original)
        setattr(owner, name, wrapper)

        def restore() -> None:
            if getattr(owner, name) is wrapper:
                setattr(owner, name, original)

        self._restore.append(restore)

    def uninstall(self) -> None:
        """Remove every hook and wrapper; check what only the end can tell."""
        if not self.installed:
            return
        self.installed = False
        for handle in self._handles:
            handle.remove()
        for p in self.order:
            if p.handle is not None:
                p.handle.remove()
                p.handle = None
        for restore in reversed(self._restore):
            restore()
        self._handles.clear()
        self._restore.clear()
        try:
            self._finish()
        except Exception as exc:
            self._broken(exc)
        try:
            self.final = self._final_values()
            _wait_for_copies(self.order)  # every queued copy off the GPU lands here, once
        except Exception as exc:
            self._broken(exc)
        for p in self.order:  # let the script's tensors go
            p.tensor = None
            p.value_mark = None
        for o in self.optims.values():
            o.obj = None

    def _maybe_close(self) -> None:
        if self._closing and self.installed:
            self.uninstall()

    # -------------------------------------------------------------- where

    def _where(self) -> tuple[str, int, Any]:
        """The user's file and line that led here, and its frame: the first frame outside torch,
        gradviz and the standard library (whether a function's code is the user's is decided once).
        The user's frames further out, in other files, are kept for the event made next
        (:attr:`Event.calls`): the line of each file that called into the op's."""
        f: Any = sys._getframe(1)
        users = self._users
        while f is not None:
            code = f.f_code
            mine = users.get(code)
            if mine is None:
                mine = self._mine(code)
            if mine:
                file = code.co_filename
                self._calls = (file, self._callers(f.f_back, file))
                return file, f.f_lineno, f
            f = f.f_back
        self._calls = ("", [])
        return "<unknown>", 0, None

    def _mine(self, code: Any) -> bool:
        mine = self._users.get(code)
        if mine is None:
            name = code.co_filename
            # A name longer than any path is no file of the user's (code compiled from a string).
            mine = not name.startswith(self._skip) and not name.startswith("<") and len(name) <= PATH_CHARS
            self._users[code] = mine
            if mine and name not in self.files and len(self.files) < SOURCE_FILES:
                self.files.append(name)
        return mine

    def _callers(self, f: Any, file: str) -> list[tuple[str, int]]:
        """The innermost line of each other user file among the frames from ``f`` outwards."""
        out: list[tuple[str, int]] = []
        seen = {file}
        users = self._users
        while f is not None:
            code = f.f_code
            name = code.co_filename
            if name not in seen:
                mine = users.get(code)
                if mine or (mine is None and self._mine(code)):
                    seen.add(name)
                    out.append((name, f.f_lineno))
                    if len(out) == MAX_CALLERS:
                        break
            f = f.f_back
        return out

    def _event(self, op: str, file: str, line: int, **kw: Any) -> Event | None:
        if len(self.events) >= MAX_EVENTS:
            self.stopped_early = f"more than {MAX_EVENTS:,} events"
            self._closing = True
            return None
        ev = Event(len(self.events), op, file, line, self.updates, **kw)
        if self._calls[0] == file:
            ev.calls = self._calls[1]
        self.events.append(ev)
        return ev

    def _report(self, at: Event, severity: str, message: str, key: str) -> None:
        """A finding at the user's line of the op ``at`` (once per line and kind)."""
        if (at.file, at.line, key) in self._seen:
            return
        self._seen.add((at.file, at.line, key))
        self.findings.append(Finding(at.file, at.line, severity, message, at.index))

    # -------------------------------------------------------------- track

    def _track(self, tensors: Iterable[Any], frame: Any) -> list[Param]:
        new = [t for t in tensors if id(t) not in self.params]
        if not new:
            return [self.params[id(t)] for t in tensors]
        if len(self.order) + len(new) > MAX_PARAMS:
            self.stopped_early = f"more than {MAX_PARAMS:,} tensors to follow (a new leaf every iteration?)"
            self._closing = True
            return [self.params[id(t)] for t in tensors if id(t) in self.params]
        names = _names(new, frame)
        for t in new:
            pid = len(self.order)
            numel = t.numel()
            name = names.get(id(t), f"param{pid}")[:NAME_CHARS]
            p = Param(pid, t, name, list(t.shape), numel, device=str(t.device))
            if numel > FULL_VALUES or self._whole + numel > WHOLE_VALUES:
                import torch

                n = min(SAMPLE_SIZE, numel)
                p.sample = torch.linspace(0, numel - 1, n, device=t.device).round().long()
            else:
                self._whole += numel
            p.handle = t.register_post_accumulate_grad_hook(self._filled)
            g = t.grad
            p.grad_mark = None if g is None else (id(g), g._version)
            p.value_mark = self._fingerprint(p)
            self.params[id(t)] = p
            self.order.append(p)
        return [self.params[id(t)] for t in tensors]

    def _values(self, p: Param) -> Any:
        """A copy of the values recorded of ``p``: all of them, or its sample."""
        t = p.tensor.detach()
        return t.take(p.sample) if p.sample is not None else t.reshape(-1).clone()

    def _fingerprint(self, p: Param) -> tuple[int, Any]:
        # An optimizer's parameters move in place (their version counter tells); a manual loop's may
        # move through .data, which the counter misses: their values are compared too.
        return (p.tensor._version, None if p.optimizer is not None else self._values(p))

    def _moved(self, p: Param) -> bool:
        t = p.tensor
        assert p.value_mark is not None
        if t._version != p.value_mark[0]:
            return True
        if p.value_mark[1] is None:
            return False
        import torch

        t = t.detach()
        now = t.take(p.sample) if p.sample is not None else t.reshape(-1)
        return not torch.equal(now, p.value_mark[1])

    def _zeroed_before_update(self, p: Param) -> bool:
        """A manual loop's leaf written in place (its version moved) to the same values, its ``.grad``
        now all zeros where the last backward had left a gradient that is not: the update used a
        ``.grad`` zeroed before it (``W.grad.zero_()`` above ``W -= lr * W.grad``)."""
        if p.optimizer is not None or not p.fills or p.ledger is None or p.value_mark is None:
            return False
        t, before = p.tensor, p.value_mark[1]
        g = t.grad
        if before is None or g is None or t._version == p.value_mark[0]:
            return False
        import torch

        now = t.detach()
        now = now.take(p.sample) if p.sample is not None else now.reshape(-1)
        return (
            torch.equal(now, before)
            and not bool(g.detach().any())
            and bool(torch.as_tensor(p.ledger[1].read()).any())
        )

    def _sync(self, ps: Iterable[Param], clearing: Event | None) -> None:
        """Bring each parameter's state up to date with its ``.grad`` as it is now."""
        changed = []
        for p in ps:
            g = p.tensor.grad
            if g is None:
                if p.grad_mark is not None:
                    self._cleared(p, clearing, zeros=False)
                continue
            mark = (id(g), g._version)
            if mark != p.grad_mark:
                p.grad_mark = mark
                changed.append((p, g))
        if changed:
            import torch

            # One read for all of them: on a GPU each bool() alone would wait for the device.
            nonzero = torch.stack([g.detach().any() for _, g in changed]).tolist()
            for (p, _), any_set in zip(changed, nonzero, strict=True):
                if not any_set:
                    self._cleared(p, clearing, zeros=True)

    def _cleared(self, p: Param, clearing: Event | None, *, zeros: bool) -> None:
        g = p.tensor.grad
        p.grad_mark = None if g is None else (id(g), g._version)
        if clearing is not None and p.fills and p.used_by is None:
            p.lost = (p.fills[-1], clearing.index)
        p.fills = []
        p.used_by = None
        p.carried = None
        p.zeros = zeros

    # ------------------------------------------------------------- events

    def _broken(self, exc: BaseException) -> None:
        """An error inside the observer: it stops watching; the script never sees the error."""
        self.stopped_early = f"an internal error ({type(exc).__name__}: {exc})"[:300]
        self._closing = True
        self._current = None

    def _filled(self, t: Any) -> None:
        try:
            self._filled_body(t)
        except Exception as exc:
            self._broken(exc)

    def _filled_body(self, t: Any) -> None:
        p = self.params.get(id(t))
        ev = self._current
        if p is None or ev is None or not self.installed:
            return
        b = ev.index
        if p.used_by is not None and p.carried is None:
            p.carried = (b, p.used_by)
        p.fills.append(b)
        p.ever_filled = True
        p.zeros = False
        p.lost = None
        g = t.grad
        p.grad_mark = None if g is None else (id(g), g._version)
        ev.filled.append(p.id)

    def _before_backward(self, roots: Any) -> Event | None:
        file, line, frame = self._where()
        self._check_manual(file, line)
        ev = self._event("backward", file, line)
        if ev is not None:
            self._loss = _loss_of(roots)
            # The graph is walked for new leaves at each backward until three in a row found none,
            # then at every tenth: a loop's leaves are the same from one iteration to the next.
            self._backwards += 1
            if self._quiet < 3 or self._backwards % 10 == 0:
                known = len(self.order)
                self._track(_leaves(roots), frame)
                self._quiet = 0 if len(self.order) > known else self._quiet + 1
                if self._quiet == 0 and self._backwards > 3:
                    self._late += 1  # a loop that makes new leaves each iteration: too many to follow
                    if self._late > LATE_LEAVES:
                        self.stopped_early = f"new leaf tensors at more than {LATE_LEAVES} backward() calls"
                        self._closing = True
            self._sync(self.order, None)
        return ev

    def _after_backward(self, ev: Event, done: bool) -> None:
        """The ledger of one backward: its loss and each ``.grad`` it filled, as it left it (values or
        sample), in one copy; only the loss when it raised. An update that finds a ``.grad``
        untouched since reads this copy."""
        loss, self._loss = self._loss, None
        order = self.order
        batch = Batch()
        for pid in ev.filled if done else ():
            p = order[pid]
            g = None if p.tensor is None else p.tensor.grad
            if g is None:
                continue
            ref = batch.add(g, p.sample)
            ev.grads[pid] = ref
            p.ledger = ((id(g), g._version), ref)
        if loss is not None:
            ev.loss = batch.add(loss, scalar=True)
        batch.copy()

    def _wrap_backward(self, *, tensor_method: bool) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            def backward(*args: Any, **kwargs: Any) -> Any:
                if self._busy or not self.installed:
                    return original(*args, **kwargs)
                try:
                    ev = self._before_backward(args[0] if args else kwargs.get("tensors"))
                except Exception as exc:
                    self._broken(exc)
                    ev = None
                self._current = ev
                self._busy += 1
                done = False
                try:
                    out = original(*args, **kwargs)
                    done = True
                finally:
                    self._busy -= 1
                    self._current = None
                    if ev is not None:
                        try:
                            self._after_backward(ev, done)
                        except Exception as exc:
                            self._broken(exc)
                self._maybe_close()
                return out

            backward.__wrapped__ = original  # type: ignore[attr-defined]
            backward.__doc__ = original.__doc__
            return backward

        return make

    def _wrap_zero_grad(self, *, optimizer: bool) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            def zero_grad(obj: Any, *args: Any, **kwargs: Any) -> Any:
                if self._busy or not self.installed:
                    return original(obj, *args, **kwargs)
                try:
                    ev, ps = self._before_zero_grad(obj, optimizer)
                except Exception as exc:
                    self._broken(exc)
                    ev, ps = None, []
                self._busy += 1
                try:
                    return original(obj, *args, **kwargs)
                finally:
                    self._busy -= 1
                    if ev is not None:
                        try:
                            self._after_zero_grad(ev, ps, optimizer)
                        except Exception as exc:
                            self._broken(exc)
                    self._maybe_close()

            zero_grad.__wrapped__ = original  # type: ignore[attr-defined]
            zero_grad.__doc__ = original.__doc__
            return zero_grad

        return make

    def _before_zero_grad(self, obj: Any, optimizer: bool) -> tuple[Event | None, list[Param]]:
        file, line, frame = self._where()
        self._check_manual(file, line)
        if optimizer:
            tensors = [t for g in obj.param_groups for t in g["params"]]
            who = self._optim(obj, frame).name
        else:
            tensors = list(obj.parameters())
            who = type(obj).__name__
        ps = self._track(tensors, frame)
        self._sync(self.order, None)
        return self._event("zero_grad", file, line, who=who, params=[p.id for p in ps]), ps

    def _after_zero_grad(self, ev: Event, ps: list[Param], optimizer: bool) -> None:
        for p in ps:
            g = p.tensor.grad
            if g is None or (id(g), g._version) != p.grad_mark:
                self._cleared(p, ev, zeros=g is not None)
            if g is not None:
                ev.zeros.append(p.id)
        if not optimizer:
            self._module_clears.append((ev.index, {p.id for p in ps}, ev.who))

    def _optim(self, obj: Any, frame: Any) -> Optim:
        o = self.optims.get(id(obj))
        if o is None:
            tensors = [t for g in obj.param_groups for t in g["params"]]
            ps = self._track(tensors, frame)
            o = Optim(len(self.optims), obj, f"{type(obj).__name__} #{len(self.optims)}", [p.id for p in ps])
            for p in ps:
                if p.optimizer is None:
                    p.optimizer = o.id
            self.optims[id(obj)] = o
        return o

    def _step_pre(self, obj: Any, args: Any, kwargs: Any) -> None:
        if not self.installed or self._busy:
            return
        try:
            self._step_pre_body(obj)
        except Exception as exc:
            self._broken(exc)
        self._busy += 1

    def _step_post(self, obj: Any, args: Any, kwargs: Any) -> None:
        if not self.installed:
            return
        self._busy = max(self._busy - 1, 0)
        try:
            self._step_post_body(obj)
        except Exception as exc:
            self._broken(exc)

    def _step_pre_body(self, obj: Any) -> None:
        file, line, frame = self._where()
        self._check_manual(file, line)
        o = self._optim(obj, frame)
        ps = [self.order[i] for i in o.params]
        self._sync(self.order, None)
        ev = self._event("step", file, line, who=o.name, params=list(o.params))
        if ev is None:
            return
        if o.first_step is None:
            o.first_step = ev
        self._before_update(ps, ev, o)
        # A parameter cleared to zeros that the step may still move (momentum, weight decay).
        self._pending = {p.id: (self._values(p), True) for p in ps if p.zeros and p.tensor.grad is not None}
        self._record(ps, ev, optimizer=obj)

    def _step_post_body(self, obj: Any) -> None:
        o = self.optims.get(id(obj))
        if o is None or not self.events or self.events[-1].op != "step":
            return
        ev = self.events[-1]
        ps = [self.order[i] for i in o.params]
        moved: list[str] = []
        for p in ps:
            if p.id in self._pending:
                before = self._pending[p.id][0]
                import torch

                t = p.tensor.detach()
                now = t.take(p.sample) if p.sample is not None else t.reshape(-1)
                if not torch.equal(now, before):
                    moved.append(p.name)
            p.value_mark = self._fingerprint(p)
        if moved:
            names = ", ".join(moved[:4]) + (f" and {len(moved) - 4} more" if len(moved) > 4 else "")
            one = len(moved) == 1
            self._report(
                ev,
                "info",
                f"step() moved {names} although {'its' if one else 'their'} .grad "
                f"{'was' if one else 'were'} zeros, not None: momentum or weight decay still acts on "
                f"{'it' if one else 'them'} (zero_grad(set_to_none=True) would leave "
                f"{'it' if one else 'them'} alone)",
                "zeros-moved",
            )
        self._pending = {}
        self._after_update(ps, ev, o)

    def _check_manual(self, file: str, line: int) -> None:
        """Leaves that received gradients and changed since last seen: a manual update."""
        # The version counter first (one attribute read); values only where the counter may miss a move.
        moved = [
            p
            for p in self.order
            if p.ever_filled
            and p.tensor is not None
            and p.value_mark is not None
            and (p.tensor._version != p.value_mark[0] or (p.value_mark[1] is not None and self._moved(p)))
        ]
        if not moved:
            return
        where = _update_line(file, line, moved)
        zeroed = [p for p in moved if self._zeroed_before_update(p)]
        ev = self._event("update", where[0], where[1], params=[p.id for p in moved])
        if ev is None:
            return
        if zeroed:
            b = self.events[zeroed[0].fills[-1]]
            zeroed.sort(key=lambda p: _update_line(ev.file, 0, [p])[1])  # as the code has them
            names = " and ".join(f"{_short(p.name)}.grad" for p in zeroed[:3])
            them = "it" if len(zeroed) == 1 else "them"
            self._report(
                ev,
                "warning",
                f"the update here moved nothing: {names} had been zeroed since backward() at {_at(b, ev)} "
                f"filled {them}, so the update used zeros and nothing is learned (zero .grad after the "
                "update, not before)",
                "lost",
            )
        self._before_update(moved, ev, None)
        self._record(moved, ev)
        for p in moved:
            p.value_mark = self._fingerprint(p)
        self._after_update(moved, ev, None)
        # Whatever cleared .grad since the last event is taken to have come after the update.
        self._sync(moved, None)

    # ------------------------------------------------------------ updates

    def _before_update(self, ps: list[Param], ev: Event, o: Optim | None) -> None:
        """Findings from the states of ``ps`` just before the update ``ev`` uses their ``.grad``."""
        e = ev.index
        what = "step()" if ev.op == "step" else "the update"
        self._report_carried([p for p in ps if p.carried is not None])
        foreign: dict[int, tuple[Event, list[str]]] = {}
        for p in ps:
            if p.lost is not None and not p.fills:
                b, c = self.events[p.lost[0]], self.events[p.lost[1]]
                seen = "zeros" if p.zeros else "None"
                self._report(
                    c,
                    "warning",
                    f"{c.op}() cleared the .grad that backward() at {_at(b, c)} had filled, before "
                    f"{what} at {_at(ev, c)} used it; {what} sees {seen}: nothing is learned",
                    "lost",
                )
                p.lost = None
            # A backward filled this .grad, then another optimizer stepped; this one steps on it uncleared.
            if o is not None and len(p.fills) > 1 and p.carried is None:
                for b_index in p.fills[:-1]:
                    other = self._other_step(b_index, e, o)
                    if other is not None:
                        foreign.setdefault(b_index, (other, []))[1].append(p.name)
                        p.fills = [f for f in p.fills if f != b_index]
                        break
        for b_index, (other, names) in foreign.items():
            b = self.events[b_index]
            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            self._report(
                b,
                "warning",
                f"backward() filled the .grad of parameters of another optimizer ({shown}), which "
                f"steps on them at {_at(ev, b)} without clearing them first: this loss, meant for "
                f"the step at {_at(other, b)}, leaks into that update (detach() the input the two "
                "losses share?)",
                "foreign",
            )
        if o is not None and ps:
            # Accumulation: one backward line run k times before a step. Different losses' backwards
            # (lines of their own) add up by design and get no note.
            filled = [p for p in ps if p.fills and p.carried is None]
            lines = {(self.events[f].file, self.events[f].line) for p in filled for f in p.fills}
            ks = [len(p.fills) for p in filled]
            if ks and max(ks) > 1 and len(lines) == 1:
                o.k_counts.add(max(ks))
                o.k_lines |= lines

    def _report_carried(self, ps: list[Param]) -> None:
        """Finding 1 for each backward that added to a used ``.grad``; finding 3 where a module's
        zero_grad() ran in between but left the parameter out."""
        plain: dict[tuple[int, int], list[Param]] = {}
        for p in ps:
            assert p.carried is not None
            module = self._module_missed(p, p.carried[1], p.carried[0])
            if module is None:
                plain.setdefault(p.carried, []).append(p)
                continue
            z, cls = module
            o = next(op for op in self.optims.values() if op.id == p.optimizer)
            stepped = o.first_step if o.first_step is not None else self.events[p.carried[1]]
            self._report(
                z,
                "warning",
                f"{cls}.zero_grad() clears only its module's parameters; {p.name} is held by the "
                f"optimizer stepped at {_at(stepped, z)} but lies outside the module, so its .grad carries "
                "over from step to step (call the optimizer's zero_grad())",
                "module-missed",
            )
        for (b_index, u_index), group in plain.items():
            b, u = self.events[b_index], self.events[u_index]
            if u.op == "step":
                used, fix = f"the step at {_at(u, b)}", "optimizer.zero_grad()"
            else:
                used = f"the update at {_at(u, b)}"
                group = sorted(group, key=lambda p: _update_line(u.file, 0, [p])[1])  # as the code has them
                fix = " and ".join(f"{_short(p.name)}.grad.zero_()" for p in group[:3])
            self._report(
                b,
                "warning",
                f"backward() added to .grad that still held the gradient used by {used}; "
                f"nothing cleared it in between (missing {fix}?)",
                "carried",
            )

    def _after_update(self, ps: list[Param], ev: Event, o: Optim | None) -> None:
        e = ev.index
        for p in ps:
            g = p.tensor.grad
            if g is not None:
                p.used_by = e
                p.carried = None
        if o is not None:
            o.steps += 1
        self.updates += 1
        counts = [op.steps for op in self.optims.values()]
        if max(counts, default=self.updates) >= self.limit:
            self._closing = True

    def _module_missed(self, p: Param, update: int, backward: int) -> tuple[Event, str] | None:
        o = next((op for op in self.optims.values() if op.id == p.optimizer), None)
        if o is None:
            return None
        held = set(o.params)
        for z, members, cls in self._module_clears:
            if update < z < backward and p.id not in members and members & held:
                return self.events[z], cls
        return None

    def _other_step(self, b_index: int, now: int, o: Optim) -> Event | None:
        filled = set(self.events[b_index].filled)
        for ev in self.events[b_index + 1 : now]:
            if ev.op == "step" and ev.who != o.name and filled & set(ev.params):
                return ev
        return None

    def _record(self, ps: list[Param], ev: Event, *, optimizer: Any = None) -> None:
        """Values (or samples) of ``ps``, their ``.grad``, the optimizer's state and lr, and the norms
        of sampled tensors, in one copy kept until saved (off a GPU: queued, never waited for).
        A ``.grad`` untouched since a backward's ledger copied it is read from that copy."""
        batch = Batch()
        values = [batch.add(p.tensor, p.sample) for p in ps]
        gvalues: dict[int, Ref] = {}
        for i, p in enumerate(ps):
            g = p.tensor.grad
            if g is None:
                continue
            if p.ledger is not None and p.ledger[0] == (id(g), g._version):
                gvalues[i] = p.ledger[1]
            else:
                gvalues[i] = batch.add(g, p.sample)
        lrs: dict[int, float] = {}
        states: dict[int, dict[str, Any]] = {}
        if optimizer is not None:
            lrs, states = _optimizer_side(optimizer, ps, batch)
        norms: dict[int, Ref] = {}
        gnorms: dict[int, Ref] = {}
        sampled = [i for i, p in enumerate(ps) if p.sample is not None]
        if sampled:  # a sample's norm is not its tensor's: taken here (whole tensors' when saved)
            import torch

            with_grad = [i for i in sampled if i in gvalues]
            found = torch._foreach_norm(
                [ps[i].tensor.detach() for i in sampled] + [ps[i].tensor.grad.detach() for i in with_grad]
            )
            for i, n in zip(sampled, found[: len(sampled)], strict=True):
                norms[i] = batch.add(n, scalar=True)
            for i, n in zip(with_grad, found[len(sampled) :], strict=True):
                gnorms[i] = batch.add(n, scalar=True)
        batch.copy()
        self.records.append(
            {
                "event": ev.index,
                "step": self.updates,
                "op": ev.op,
                "ids": [p.id for p in ps],
                "whole": [p.sample is None for p in ps],
                "values": values,
                "gvalues": gvalues,
                "norms": norms,
                "gnorms": gnorms,
                "lr": lrs,
                "state": states,
            }
        )

    def _final_values(self) -> dict[int, Any]:
        """The values of every parameter still alive as the watch ends: what the last update left."""
        batch = Batch()
        alive = [p for p in self.order if p.tensor is not None]
        out: dict[int, Any] = {p.id: {"values": batch.add(p.tensor, p.sample)} for p in alive}
        for o in self.optims.values():
            ps = [self.order[i] for i in o.params if self.order[i].tensor is not None]
            if o.obj is None or not ps:
                continue
            _, states = _optimizer_side(o.obj, ps, batch)
            for i, state in states.items():
                out[ps[i].id]["state"] = state
        batch.copy()
        return out

    def final_record(self) -> dict[str, Any]:
        """:attr:`final` as plain JSON values."""
        out = {}
        for pid, kept in self.final.items():
            key = "values" if self.order[pid].sample is None else "sample"
            entry: dict[str, Any] = {key: kept["values"].floats()}
            if "state" in kept:
                entry["state"] = _state_json(kept["state"])
            out[str(pid)] = entry
        return out

    def update_records(self) -> list[dict[str, Any]]:
        """The records of each update as plain JSON values."""
        import torch

        out = []
        for r in self.records:
            whole = [
                (i, kind, ref)
                for i in range(len(r["ids"]))
                for kind, ref, known in (
                    ("norm", r["values"][i], r["norms"]),
                    ("grad", r["gvalues"].get(i), r["gnorms"]),
                )
                if ref is not None and i not in known
            ]
            # The norms of whole tensors, from their copies: one conversion to decimals for all of them.
            norms: dict[tuple[int, str], float] = {}
            if whole:
                found = _floats(torch.stack([torch.linalg.vector_norm(ref.read()) for _, _, ref in whole]))
                norms = dict(zip([(i, kind) for i, kind, _ in whole], found, strict=True))
            params: dict[str, Any] = {}
            for i, pid in enumerate(r["ids"]):
                v, g = r["values"][i], r["gvalues"].get(i)
                norm = r["norms"][i].floats()[0] if i in r["norms"] else norms[(i, "norm")]
                if g is None:
                    gnorm: Any = "none"
                else:
                    gnorm = r["gnorms"][i].floats()[0] if i in r["gnorms"] else norms[(i, "grad")]
                entry: dict[str, Any] = {"norm": norm, "grad": gnorm}
                key = "values" if r["whole"][i] else "sample"
                entry[key] = v.floats()
                if g is not None:
                    entry["grad_" + key] = g.floats()
                if i in r["lr"]:
                    entry["lr"] = r["lr"][i]
                if r["state"].get(i):
                    entry["state"] = _state_json(r["state"][i])
                params[str(pid)] = entry
            out.append({"event": r["event"], "step": r["step"], "op": r["op"], "params": params})
        return out

    # --------------------------------------------------------------- end

    def _finish(self) -> None:
        if self.events and self.order:
            self._check_manual_end()
        if self._closing:  # the script goes on: a carried .grad will be used by the next update
            self._report_carried([p for p in self.order if p.carried is not None and p.tensor is not None])
        for o in self.optims.values():
            if o.first_step is None:
                continue
            never = [self.order[i] for i in o.params if not self.order[i].ever_filled]
            if never and any(ev.op == "backward" for ev in self.events):
                names = ", ".join(p.name for p in never[:4]) + (
                    f" and {len(never) - 4} more" if len(never) > 4 else ""
                )
                n = len(never)
                self._report(
                    o.first_step,
                    "info",
                    f"the optimizer stepped here holds {n} parameter{'s' if n != 1 else ''} that never "
                    f"received a gradient in the observed steps ({names})",
                    f"never:{o.id}",
                )
            if o.k_counts and o.first_step is not None:
                ks = sorted(o.k_counts)
                k = str(ks[0]) if len(ks) == 1 else f"{ks[0]} to {ks[-1]}"
                lines = sorted({ln for _, ln in o.k_lines})
                at = ", ".join(map(str, lines[:4]))
                divide = f"by {ks[0]}" if len(ks) == 1 else "by their number"
                self._report(
                    o.first_step,
                    "info",
                    f"{k} backward() calls (line{'s' if len(lines) > 1 else ''} {at}) add into .grad "
                    f"before each step() here; if the loss is meant as an average over them, divide each "
                    f"loss {divide}",
                    f"k:{o.id}",
                )

    def _check_manual_end(self) -> None:
        if not any(p.ever_filled for p in self.order if p.tensor is not None):
            return
        last = self.events[-1]
        self._check_manual(last.file, last.line)
        # A .grad carried into an update that only the end can tell: nothing more is coming.


# ------------------------------------------------------------------ helpers


def _off(t: Any) -> Any:
    """A CPU copy of a GPU tensor, queued on its stream (pinned memory, not waited for); others as they are.

    The copy runs in stream order, before anything the script does to the tensor later; the
    values are read once the watch ends (:func:`_wait_for_copies`).
    """
    if t.device.type != "cuda":
        return t
    import torch

    out = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    out.copy_(t, non_blocking=True)
    return out


def _wait_for_copies(order: list[Param]) -> None:
    if any(p.device.startswith("cuda") for p in order):
        import torch

        torch.cuda.synchronize()


def _loss_of(roots: Any) -> Any:
    """The loss a backward starts from, when it is one number (copied with the ledger); else None."""
    import torch

    if isinstance(roots, torch.Tensor) and roots.numel() == 1 and roots.is_floating_point():
        return roots.detach()
    return None


def _optimizer_side(
    optimizer: Any, ps: list[Param], batch: Batch
) -> tuple[dict[int, float], dict[int, dict[str, Any]]]:
    """Each parameter's learning rate and its optimizer state: numbers as they are, tensors (like the
    parameter's values or sample, or one number) added to ``batch``."""
    import torch

    tensor = torch.Tensor
    where = {id(p.tensor): i for i, p in enumerate(ps)}
    lrs: dict[int, float] = {}
    for group in optimizer.param_groups:
        lr = group.get("lr")
        if isinstance(lr, (int, float, tensor)):
            lr = float(lr)
            for t in group["params"]:
                i = where.get(id(t))
                if i is not None:
                    lrs[i] = lr
    states: dict[int, dict[str, Any]] = {}
    add = batch.add
    # The state's own items, matched by id: a tensor's hash is a Python-level call; and an exact type
    # check before isinstance, which goes through torch.Tensor's metaclass.
    for t, st in optimizer.state.items():
        i = where.get(id(t))
        if i is None:
            continue
        p = ps[i]
        kept: dict[str, Any] = {}
        for key, v in st.items():
            name = key if type(key) is str else str(key)
            if type(v) is tensor or isinstance(v, tensor):
                n = v.numel()
                if n == p.numel and v.is_floating_point():
                    kept[name] = add(v, p.sample)
                elif n == 1:
                    kept[name] = add(v, scalar=True)
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                kept[name] = float(v)
        if kept:
            states[i] = kept
    return lrs, states


def _state_json(state: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, v in state.items():
        if isinstance(v, Ref):
            values = v.floats()
            out[key] = values[0] if v.scalar else values
        else:
            out[key] = v
    return out


class Batch:
    """Tensors copied together: :meth:`add` each, then :meth:`copy` once.

    One ``cat`` per device (one copy off a GPU) instead of a clone per tensor, which costs several
    times as much for a small model; the copy is taken apart only when read, as the recording is
    written. Values are kept as float32, the precision a recording writes. Tensors may be added as
    they are (parameters too): the copy runs with autograd off, so it never joins a graph.
    """

    __slots__ = ("_copies", "_decoded", "_flats", "_sampled", "_samples", "_sizes", "_tensors", "_where")

    def __init__(self) -> None:
        self._tensors: list[Any] = []
        self._samples: list[Any] = []
        self._sampled = False
        self._flats: list[Any] = []
        # Made when the recording is written: a batch is kept per op, so it holds little until then.
        self._decoded: dict[int, list[float]] | None = None
        self._sizes: list[int] = []  # elements of each tensor added, in order ...
        self._copies: list[int] | None = None  # ... and the copy each is in (None: all in one)
        self._where: list[tuple[int, int, int]] | None = None

    def add(self, tensor: Any, sample: Any = None, *, scalar: bool = False) -> Ref:
        """Queue ``tensor`` (whole, or at its ``sample``'s flat indices) for the copy."""
        self._tensors.append(tensor)
        self._samples.append(sample)
        if sample is not None:
            self._sampled = True
        return _new_ref((self, len(self._tensors) - 1, scalar))

    def copy(self) -> None:
        """Copy every queued tensor now, and let the originals go."""
        import torch

        tensors, samples = self._tensors, self._samples
        self._tensors = self._samples = []  # let the originals go
        if not tensors:
            return
        grad_mode = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        try:
            pieces = tensors
            if self._sampled:
                pieces = [t if s is None else t.take(s) for t, s in zip(tensors, samples, strict=True)]
            groups: list[list[Any]] = [pieces]
            if len({t.device for t in pieces}) > 1:
                by_device = _by_device([t.device for t in pieces])
                groups = [[pieces[j] for j in js] for js in by_device]
                self._copies = [0] * len(pieces)
                for k, js in enumerate(by_device):
                    for j in js:
                        self._copies[j] = k
            for group in groups:
                # One call into C++ that flattens and joins; one tensor alone comes back as a view.
                flat = torch._C._nn.flatten_dense_tensors(group) if len(group) > 1 else group[0].reshape(-1)
                flat = flat.float() if flat.dtype != torch.float32 else flat
                if len(group) == 1 and flat.data_ptr() == group[0].data_ptr():
                    flat = flat.clone()
                self._flats.append(_off(flat))
            self._sizes = [t.numel() for t in pieces]
        finally:
            torch._C._set_grad_enabled(grad_mode)

    def _place(self, j: int) -> tuple[int, int, int]:
        if self._where is None:  # offsets worked out once, when first read
            self._where = []
            copies = self._copies or [0] * len(self._sizes)
            starts = [0] * len(self._flats)
            for k, n in zip(copies, self._sizes, strict=True):
                self._where.append((k, starts[k], n))
                starts[k] += n
        return self._where[j]

    def read(self, j: int) -> Any:
        """The copy of the ``j``-th tensor added: a flat float32 CPU tensor."""
        k, start, n = self._place(j)
        return self._flats[k][start : start + n]

    def floats(self, j: int) -> list[float]:
        """The ``j``-th tensor's values as short decimals (see :func:`shortest_float32`); each of the
        batch's copies is turned into numbers once, whole."""
        k, start, n = self._place(j)
        if self._decoded is None:
            self._decoded = {}
        if k not in self._decoded:
            self._decoded[k] = shortest_float32(self._flats[k].numpy())
        return self._decoded[k][start : start + n]


def _by_device(devices: list[Any]) -> list[list[int]]:
    groups: dict[Any, list[int]] = {}
    for j, device in enumerate(devices):
        groups.setdefault(device, []).append(j)
    return list(groups.values())


class Ref(NamedTuple):
    """One tensor's place in a :class:`Batch`; ``scalar``: written as one number, not a list."""

    batch: Batch
    at: int
    scalar: bool = False

    def read(self) -> Any:
        return self.batch.read(self.at)

    def floats(self) -> list[float]:
        return self.batch.floats(self.at)


_new_ref = partial(tuple.__new__, Ref)  # a Ref made without NamedTuple's own __new__, called per tensor


def _floats(t: Any) -> list[float]:
    """A tensor's values as the shortest decimals that give back its float32 values."""
    return shortest_float32(t.detach().float().cpu().numpy().reshape(-1))


def shortest_float32(values: Any) -> list[float]:
    """Each float32 of ``values`` as the Python float of its shortest decimal that reads back as it
    (what ``str(numpy.float32(v))`` writes), for the whole array at once: digit by digit, each value
    rounded to that many significant digits, kept where that gives back the float32."""
    x = np.asarray(values, dtype=np.float32).reshape(-1)
    with np.errstate(all="ignore"):
        wide = x.astype(np.float64)
        out = wide.copy()  # 0, infinities and NaN are their own shortest form
        todo = np.isfinite(wide) & (wide != 0)
        exponent = np.floor(np.log10(np.abs(np.where(todo, wide, 1.0))))
        # Powers of ten up to 1e22 are exact floats, so k / 10^d and k * 10^d round once: to the
        # float64 nearest the decimal, whose repr it is. Values needing more are done one by one.
        exact = todo & (exponent > -14) & (exponent < 14)
        slow = todo & ~exact
        todo = exact
        for digits in range(1, 10):
            if not todo.any():
                break
            scale = digits - 1 - exponent  # decimals kept (negative: tens, hundreds... dropped)
            power = 10.0 ** np.abs(np.where(todo, scale, 0))
            candidate = np.where(scale >= 0, np.rint(wide * power) / power, np.rint(wide / power) * power)
            fits = todo & (candidate.astype(np.float32) == x)
            out[fits] = candidate[fits]
            todo &= ~fits
    for j in np.flatnonzero(slow | todo):
        out[j] = float(str(x[j]))
    return out.tolist()


def _leaves(roots: Any) -> list[Any]:
    """The leaf tensors a backward from ``roots`` accumulates into (its graph's AccumulateGrad nodes)."""
    import torch

    if roots is None:
        return []
    if isinstance(roots, torch.Tensor):
        roots = [roots]
    try:
        roots = list(roots)
    except TypeError:
        return []
    out: list[Any] = []
    seen_nodes: set[int] = set()
    seen_leaves: set[int] = set()
    stack = []
    for r in roots:
        if isinstance(r, torch.Tensor):
            if r.grad_fn is not None:
                stack.append(r.grad_fn)
            elif r.requires_grad and r.is_leaf and id(r) not in seen_leaves:
                seen_leaves.add(id(r))
                out.append(r)
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        var = getattr(node, "variable", None)
        if var is not None:
            if id(var) not in seen_leaves:
                seen_leaves.add(id(var))
                out.append(var)
            continue
        for nxt, _ in node.next_functions:
            if nxt is not None:
                stack.append(nxt)
    return out


def _names(tensors: list[Any], frame: Any) -> dict[int, str]:
    """Names for tensors from the caller's variables: ``W`` or ``model.fc.weight``."""
    import torch

    wanted = {id(t) for t in tensors}
    names: dict[int, str] = {}
    f = frame
    depth = 0
    while f is not None and depth < 3 and len(names) < len(wanted):
        for scope in (f.f_locals, f.f_globals):
            for var, value in list(scope.items()):
                if var.startswith("__"):
                    continue
                if isinstance(value, torch.Tensor):
                    if id(value) in wanted and id(value) not in names:
                        names[id(value)] = var
                elif isinstance(value, torch.nn.Module):
                    try:
                        for pname, t in value.named_parameters():
                            if id(t) in wanted and id(t) not in names:
                                names[id(t)] = f"{var}.{pname}"
                    except Exception:
                        continue
        f = f.f_back
        depth += 1
    return names


def _at(ev: Event, finding: Event) -> str:
    """Where ``ev`` ran, as a finding at ``finding`` says it: "line 7", or "line 7 of helpers.py"
    when it ran in another file."""
    if ev.file == finding.file:
        return f"line {ev.line}"
    return f"line {ev.line} of {os.path.basename(ev.file)}"


def _short(name: str) -> str:
    return name if name.isidentifier() else "p"


def _update_line(file: str, line: int, moved: list[Param]) -> tuple[str, int]:
    """Where a manual update most likely is: a line of ``file`` that updates a moved leaf in place."""
    try:
        with open(file, encoding="utf-8", errors="replace") as fh:
            lines = fh.readlines()[:SOURCE_LINES]
    except OSError:
        return file, line
    found: list[int] = []
    for p in moved:
        name = re.escape(p.name)
        pattern = re.compile(rf"(^|[^\w.]){name}(\.data)?\s*(-=|\+=|\*=|\.(sub_|add_|copy_|mul_|addcmul_)\()")
        for i, text in enumerate(lines, 1):
            if pattern.search(text) and not text.lstrip().startswith("#"):
                found.append(i)
                break
    return (file, min(found)) if found else (file, line)


def read_sources(files: list[str]) -> dict[str, list[str]]:
    """The lines of the user's files that ran, read from the files, bounded in size."""
    out: dict[str, list[str]] = {}
    for path in files[:SOURCE_FILES]:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                lines = []
                for i, text in enumerate(fh):
                    if i >= SOURCE_LINES:
                        break
                    lines.append(text.rstrip("\r\n")[:SOURCE_LINE_CHARS])
        except OSError:
            continue
        out[path] = lines
    return out
