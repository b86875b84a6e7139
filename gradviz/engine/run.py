"""One run: a live model and optimizer, stepped one op at a time by real PyTorch calls."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch

from gradviz.engine.copying import EMPTY, HeldGrads, flat_copy, join, numpy_views
from gradviz.engine.loop import OpSlot, build_program
from gradviz.engine.record import Entry, Layout, Snapshot, _make
from gradviz.engine.scenario import RunSpec, Scenario
from gradviz.engine.zoo import Batch, Phase, build_task

Mode = Literal["replay", "bare", "light", "full"]


class Run:
    """The live state of one run: its task (model and data), optimizers, and position.

    ``execute`` performs one op exactly as user code would and, in ``full``
    mode, returns an :class:`OpRecord` made of copies of the real tensors.
    """

    def __init__(self, spec: RunSpec, scenario: Scenario, device: torch.device) -> None:
        self.spec = spec
        self.name = spec.name
        self.loop = spec.loop
        self.task = build_task(scenario, device)
        self.phases = {p.name: p for p in self.task.phases()}
        self.program = build_program(self.task, spec)
        self.names = tuple(self.task.params)
        self.tensors = list(self.task.params.values())
        self.layout = Layout(self.names, tuple(tuple(p.shape) for p in self.tensors))
        self._by_id = {id(p): name for name, p in self.task.params.items()}
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self._phase_tensors = {
            name: [self.task.params[n] for n in phase.params] for name, phase in self.phases.items()
        }
        if spec.optimizer.kind != "manual":
            cls = getattr(torch.optim, spec.optimizer.kind)
            for name, phase in self.phases.items():
                self.optimizers[phase.optimizer] = cls(
                    self._phase_tensors[name], lr=spec.optimizer.lr, **spec.optimizer.options
                )
        self._fresh: dict[int, torch.Tensor] = {}
        self._hooks: list[Any] = []
        self._live_loss: dict[str, torch.Tensor] = {}
        self.last_loss: float | None = None
        self.status: Literal["running", "diverged", "error"] = "running"
        self.error: str | None = None
        self.grad_norm = 0.0
        self.param_norm = 0.0
        self._state_cache: tuple[tuple[int, ...], Any] | None = None
        self._views: tuple[list[torch.Tensor], list[np.ndarray] | None] = ([], None)
        self._held: list[HeldGrads] = []
        # Parameters are only ever changed in place, so views of them stay valid.
        self._param_views = numpy_views(self.tensors)
        self._on_gpu = device.type != "cpu"
        self.current = self.capture()

    def _catch_fresh_grads(self, on: bool) -> None:
        """Register (or remove) the hooks that keep what each backward delivers.

        Only full records show it; elsewhere the hooks would cost a Python call
        per parameter per backward, and holding the delivered tensor makes
        autograd copy it into ``.grad`` instead of taking it.
        """
        if on:
            self._hooks = [p.register_hook(self._hook(i)) for i, p in enumerate(self.tensors)]
        else:
            for handle in self._hooks:
                handle.remove()
            self._hooks = []

    def _hook(self, i: int) -> Any:
        def keep(grad: torch.Tensor) -> None:
            # What this backward delivers to the parameter, before it is added to .grad.
            self._fresh[i] = grad

        return keep

    @property
    def active(self) -> bool:
        return self.status == "running"

    def lrs(self) -> dict[str, float]:
        if not self.optimizers:
            return {"lr": self.spec.optimizer.lr}
        return {name: float(opt.param_groups[0]["lr"]) for name, opt in self.optimizers.items()}

    # ------------------------------------------------------------------ ops
    def _micro_batch(self, iteration: int, micro: int) -> Batch:
        batch = self.task.batch(iteration)
        k = self.loop.accumulate
        if k == 1:
            return batch
        return tuple(t.chunk(k)[micro] for t in batch)

    def _zero_grad(self, phase: Phase) -> None:
        via = self.loop.zero_grad
        if via == "optimizer":
            self.optimizers[phase.optimizer].zero_grad(set_to_none=self.loop.set_to_none)
        elif via == "model":
            self.task.modules[phase.module].zero_grad(set_to_none=self.loop.set_to_none)
        else:
            for p in self._phase_tensors[phase.name]:
                if self.loop.set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()  # type: ignore[union-attr]  # None raises, as in user code

    def _step(self, phase: Phase) -> None:
        if self.optimizers:
            self.optimizers[phase.optimizer].step()
            return
        lr = self.spec.optimizer.lr
        with torch.no_grad():
            for p in self._phase_tensors[phase.name]:
                p -= lr * p.grad  # type: ignore[operator,misc]  # None raises, as in user code

    def _perform(self, slot: OpSlot, iteration: int) -> None:
        phase = self.phases[slot.phase]
        if slot.op == "zero_grad":
            self._zero_grad(phase)
        elif slot.op == "forward":
            batch = self._micro_batch(iteration, slot.micro)
            loss = self.task.loss(phase, batch, iteration, self.loop)
            self._live_loss[phase.name] = loss
            self.last_loss = float(loss.item())
        elif slot.op == "backward":
            loss = self._live_loss.pop(phase.name)
            self._fresh.clear()
            loss.backward()
        else:
            self._step(phase)

    def execute(self, slot: OpSlot, iteration: int, tick: int, mode: Mode) -> Entry | None:
        """Perform ``slot``'s op for real; record it as ``mode`` asks.

        An exception from PyTorch (for example ``p.grad`` being ``None`` in a
        manual loop) stops this run with that error, as it would stop the
        user's program; a non-finite loss or parameter marks it diverged.
        ``replay`` mode repeats ops already checked, so it skips the checks.
        In ``full`` mode the result is what the history keeps of the op.
        """
        prior = self.current
        if self._held and (slot.op == "backward" or (slot.op == "zero_grad" and not self.loop.set_to_none)):
            self._copy_held()  # the op may write them in place
        if slot.op == "backward":
            # Hooks are needed only where the call adds to an existing .grad (see OpRecord.fresh).
            adding = mode == "full" and any(p.grad is not None for p in self.tensors)
            if adding != bool(self._hooks):
                self._catch_fresh_grads(adding)
        try:
            self._perform(slot, iteration)
        except Exception as exc:
            self.status = "error"
            self.error = f"{type(exc).__name__}: {exc}"
            self._live_loss.clear()
        if mode == "replay":
            return None
        if slot.op == "forward" and self.last_loss is not None and not math.isfinite(self.last_loss):
            self.status = "diverged"
        if mode == "full":
            return self._capture_op(slot, iteration, tick, prior)
        if mode == "bare":
            if slot.op == "step" and not math.isfinite(self._param_norm()):
                self.status = "diverged"
            return None
        self._measure(slot.op)
        return None

    # ------------------------------------------------------------ recording
    def _copy(self, tensors: list[torch.Tensor]) -> np.ndarray:
        """:func:`flat_copy`, through numpy views kept while ``tensors`` stay the same objects.

        Parameters and optimizer state are changed in place, so their views
        stay valid for a whole run; the copy is then one numpy call.
        """
        known, views = self._views
        if len(known) != len(tensors) or not all(map(operator.is_, known, tensors)):
            views = numpy_views(tensors)
            self._views = (tensors, views)
        if views is None:
            return flat_copy(tensors)
        return join(views) if views else EMPTY

    def _grads(self, hold: bool = False) -> tuple[np.ndarray | HeldGrads, tuple[bool, ...]]:
        """Every ``.grad`` now: copied, or with ``hold`` kept by reference until the next op."""
        maybe = [p.grad for p in self.tensors]
        present = tuple([g is not None for g in maybe])
        grads = [g for g in maybe if g is not None]
        if not hold or not grads:
            return flat_copy(grads), present
        self._held.append(HeldGrads(grads))
        return self._held[-1], present

    def _copy_held(self) -> None:
        for held in self._held:
            held.flat()
        self._held.clear()

    def _state_layout(self) -> tuple[list[tuple[Any, Any]], tuple, tuple]:
        """Where each optimizer-state tensor lives.

        Rebuilt only when entries appear, which happens at the first steps.
        """
        sizes = tuple(len(opt.state) for opt in self.optimizers.values())
        if self._state_cache is not None and self._state_cache[0] == sizes:
            return self._state_cache[1]
        refs: list[tuple[Any, Any]] = []
        keys: list[tuple[str, str, tuple[int, ...], str]] = []
        other: list[tuple[str, str, Any]] = []
        for opt in self.optimizers.values():
            for group in opt.param_groups:
                for p in group["params"]:
                    entries = opt.state.get(p, {})
                    name = self._by_id[id(p)]
                    for key, value in entries.items():
                        if isinstance(value, torch.Tensor):
                            where = "cpu" if value.device.type == "cpu" else "param"
                            keys.append((name, key, tuple(value.shape), f"{value.dtype}@{where}"))
                            refs.append((entries, key))
                        else:
                            other.append((name, key, value))
        layout = (refs, tuple(keys), tuple(other))
        self._state_cache = (sizes, layout)
        return layout

    @staticmethod
    def _state_tensors(refs: list[tuple[Any, Any]]) -> list[torch.Tensor]:
        return [entries[key] for entries, key in refs]

    @property
    def grads_unread_at_iteration_start(self) -> bool:
        """True when every iteration begins by setting every ``.grad`` to ``None``.

        The ``.grad`` values left by the previous iteration are then never seen
        again, so a keyframe at an iteration start need not keep them.
        """
        first = self.program.ops[0]
        return (
            first.op == "zero_grad"
            and len(self.phases) == 1
            and self.loop.set_to_none
            and (self.loop.zero_grad != "model" or not self.task.outside)
        )

    def capture(self, grads: bool = True) -> Snapshot:
        """A full snapshot of this run now, copied from the real tensors.

        With ``grads=False`` every ``.grad`` is recorded as ``None`` (see
        :attr:`grads_unread_at_iteration_start`).
        """
        grad_flat, present = self._grads() if grads else (EMPTY, (False,) * len(self.tensors))
        refs, keys, other = self._state_layout()
        state_flat = flat_copy(self._state_tensors(refs))
        params = flat_copy(self.tensors)
        return _make(Snapshot, self.layout, params, grad_flat, present, keys, state_flat, other, self.lrs())

    def _param_norm(self) -> float:
        """Norm of all parameters now; inf or nan when one of them is."""
        views = self._param_views
        return _norm(views) if views is not None else _torch_norm(self.tensors)

    def _measure(self, op: str) -> None:
        """Light recording: only the norms the timeline plots."""
        if op in ("zero_grad", "backward"):
            grads = [p.grad for p in self.tensors if p.grad is not None]
            views = numpy_views(grads)
            self.grad_norm = _norm(views) if views is not None else _torch_norm(grads)
        elif op == "step":
            self.param_norm = self._param_norm()
            if not math.isfinite(self.param_norm):
                self.status = "diverged"

    def _capture_op(self, slot: OpSlot, iteration: int, tick: int, prior: Snapshot) -> Entry:
        op = slot.op
        fresh: tuple | bool | None = None
        snap = p = prior
        if self._held:
            self._copy_held()
        if op in ("zero_grad", "backward"):
            grads, present = self._grads(hold=True)
            if present != p.grad_present or any(present):
                snap = _make(
                    Snapshot, p.layout, p.param_flat, grads, present, p.state_keys, p.state_flat,
                    p.state_other, p.lr,
                )  # fmt: skip
            if op == "backward" and not self._hooks:
                fresh = True
            elif op == "backward":
                # The hook's tensors are never written again (holding them stops autograd
                # from reusing them as .grad), so references are as good as copies.
                fresh = tuple(map(self._fresh.get, range(len(self.tensors))))
                if self._on_gpu:
                    fresh = tuple(_cpu(t) for t in fresh)
        elif op == "step":
            refs, keys, other = self._state_layout()
            both = self._copy(self.tensors + self._state_tensors(refs))
            params, state_flat = both[: self.layout.total], both[self.layout.total :]
            if not math.isfinite(_norm((params,))):
                self.status = "diverged"
            lrs = self.lrs()
            snap = _make(
                Snapshot, p.layout, params, p.grad_data, p.grad_present, keys, state_flat, other,
                p.lr if lrs == p.lr else lrs,
            )  # fmt: skip
        self.current = snap
        prior_snap = prior if op == "backward" else None
        return (
            slot,
            iteration,
            tick,
            self.last_loss,
            self.status == "diverged",
            self.error,
            snap,
            fresh,
            prior_snap,
        )

    # -------------------------------------------------------------- restore
    def restore(self, snap: Snapshot, loss: float | None) -> None:
        """Put this run back into the state ``snap`` was copied from (at an iteration start)."""
        device = self.tensors[0].device
        with torch.no_grad():
            for p, value in zip(self.tensors, snap.params.values(), strict=True):
                p.copy_(torch.from_numpy(value.copy()))
            for p, g in zip(self.tensors, snap.grads.values(), strict=True):
                p.grad = None if g is None else torch.from_numpy(g.copy()).to(device)
        params = self.task.params
        owner = {
            id(p): opt for opt in self.optimizers.values() for g in opt.param_groups for p in g["params"]
        }
        for opt in self.optimizers.values():
            opt.state.clear()
        offset = 0
        for pname, key, shape, kind in snap.state_keys:
            dtype_name, where = kind.split("@")
            size = math.prod(shape)
            value = snap.state_flat[offset : offset + size].reshape(shape).copy()
            offset += size
            t = torch.from_numpy(value).to(getattr(torch, dtype_name.removeprefix("torch.")))
            p = params[pname]
            owner[id(p)].state[p][key] = t if where == "cpu" else t.to(device)
        for pname, key, other in snap.state_other:
            p = params[pname]
            owner[id(p)].state[p][key] = other
        for name, opt in self.optimizers.items():
            for group in opt.param_groups:
                group["lr"] = snap.lr[name]
        self._state_cache = None
        self._held.clear()
        self._live_loss.clear()
        self._fresh.clear()
        self.last_loss = loss
        self.status = "running"
        self.error = None
        self.grad_norm = float(np.linalg.norm(snap.grad_flat))
        self.param_norm = float(np.linalg.norm(snap.param_flat))
        self.current = snap


def _cpu(t: torch.Tensor | None) -> torch.Tensor | None:
    return t if t is None or t.device.type == "cpu" else t.cpu()


def _norm(views: Sequence[np.ndarray]) -> float:
    """Euclidean norm of all ``views`` together.

    Single-precision dot products, redone in double where one overflows, so
    the result is inf or nan only when an element is.
    """
    total = 0.0
    for v in views:
        square = float(v.dot(v))
        if not math.isfinite(square):
            wide = v.astype(np.float64)
            square = float(wide.dot(wide))
        total += square
    return math.sqrt(total)


def _torch_norm(tensors: Sequence[torch.Tensor]) -> float:
    """Euclidean norm of all ``tensors`` together (where numpy cannot see them: GPU, bfloat16)."""
    if not tensors:
        return 0.0
    with torch.no_grad():
        return float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(list(tensors)))))
