"""One run: a live model and optimizer, stepped one op at a time by real PyTorch calls."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from itertools import compress
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from gradviz.engine.copying import EMPTY, HeldGrads, byte_views, flat_copy, numpy_views
from gradviz.engine.footprint import Footprint, SavedBytes, can_count_saved, graph_nodes, wanted
from gradviz.engine.loop import OpSlot, build_program
from gradviz.engine.record import Entry, GradData, Layout, Snapshot, Weights
from gradviz.engine.scenario import RunSpec, Scenario
from gradviz.engine.zoo import Batch, Phase, build_task

if TYPE_CHECKING:
    from gradviz.engine.graph import GraphCapture

Mode = Literal["replay", "bare", "light", "full"]

_GRAD = operator.attrgetter("grad")
_STATE = operator.attrgetter("state")
_LR = operator.itemgetter("lr")


class Run:
    """The live state of one run: its task (model and data), optimizers, and position.

    ``execute`` performs one op exactly as user code would and, in ``full``
    mode, returns an :class:`OpRecord` made of copies of the real tensors.
    """

    # Set to watch the autograd graph of each forward and backward (see engine/graph.py).
    graph_observer: GraphCapture | None = None

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
        self._state_cache: tuple[list[int], list[dict], list[Any], tuple, tuple] | None = None
        # The optimizer-state tensors the views of parameters and state were made with.
        self._views: tuple[list[torch.Tensor], list[memoryview] | None] = ([], None)
        self._held: list[HeldGrads] = []
        self._nones = (None,) * len(self.tensors)
        self._nones_present = (False,) * len(self.tensors)
        self._all_present = (True,) * len(self.tensors)
        # Parameters are only ever changed in place, so views of them stay valid.
        self._param_views = numpy_views(self.tensors)
        self._on_gpu = device.type != "cpu"
        self._grad_writers = self._ops_writing_grads()
        self._first_groups = [opt.param_groups[0] for opt in self.optimizers.values()]
        # The learning rates last read, raw and as recorded (one dictionary while they hold).
        self._lrs: tuple[list[Any], dict[str, float]] = ([], {"lr": spec.optimizer.lr})
        self.current = self.capture()
        # What autograd holds and walks, measured where the lesson asks (see engine/footprint.py).
        self._saved = SavedBytes()
        self.measures = wanted(scenario)
        self._count_saved = can_count_saved(self.loop.order)
        self._walked: int | None = None

    def _ops_writing_grads(self) -> frozenset[str]:
        """The ops that may write a ``.grad`` tensor in place, so that one held must be copied first.

        ``backward`` adds to an existing ``.grad``; zeroing without
        ``set_to_none`` zeroes it. torch.optim's multi-tensor and fused steps
        (the default off the CPU) may use ``.grad`` as scratch: SGD with
        Nesterov momentum adds the momentum into it.
        """
        ops = {"backward"}
        if not self.loop.set_to_none:
            ops.add("zero_grad")
        device = self.tensors[0].device.type
        for opt in self.optimizers.values():
            for group in opt.param_groups:
                foreach, fused = group.get("foreach"), group.get("fused")
                if fused or foreach or (foreach is None and device != "cpu"):
                    ops.add("step")
        return frozenset(ops)

    @property
    def current(self) -> Snapshot:
        """The state of this run after its last op."""
        return Snapshot(self.weights, self.grad_data, self.grad_present)

    @current.setter
    def current(self, snap: Snapshot) -> None:
        self.weights, self.grad_data, self.grad_present = snap.weights, snap.grad_data, snap.grad_present

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

    def _perform(self, slot: OpSlot, iteration: int, measure: bool = False) -> None:
        phase = self.phases[slot.phase]
        if slot.op == "zero_grad":
            self._zero_grad(phase)
        elif slot.op == "forward":
            batch = self._micro_batch(iteration, slot.micro)
            if slot.micro == 0:
                self.task.start_batch()
            # Counted in every mode: a replay rebuilds graphs that later records must see held.
            if self.measures and self._count_saved:
                with self._saved.hooks(self.tensors):
                    loss = self.task.loss(phase, batch, iteration, self.loop)
            else:
                loss = self.task.loss(phase, batch, iteration, self.loop)
            self._live_loss[phase.name] = loss
            if self.graph_observer is not None:
                self.graph_observer.forward(self, slot, iteration, loss)
            self.last_loss = float(loss.item())
        elif slot.op == "backward":
            # The loss stays for the backward calls after this one through the same graph.
            last = slot.again == self.loop.backwards - 1
            loss = self._live_loss.pop(phase.name) if last else self._live_loss[phase.name]
            self._fresh.clear()
            retain = self.loop.retain_graph
            if measure:
                self._walked = graph_nodes(loss)
            if self.graph_observer is None:
                loss.backward(retain_graph=retain)
            else:
                with self.graph_observer.backward(self, slot, iteration, loss):
                    loss.backward(retain_graph=retain)
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
        if self._held and slot.op in self._grad_writers:
            self._copy_live_held()
        if slot.op == "backward":
            # Hooks are needed only where the call adds to an existing .grad (see OpRecord.fresh).
            adding = mode == "full" and any(map(operator.is_not, map(_GRAD, self.tensors), self._nones))
            if adding != bool(self._hooks):
                self._catch_fresh_grads(adding)
        measure = mode == "full" and self.measures
        if measure:
            self._walked = None
            if self._on_gpu:
                torch.cuda.reset_peak_memory_stats(self.tensors[0].device)
        try:
            self._perform(slot, iteration, measure)
        except Exception as exc:
            self.status = "error"
            self.error = f"{type(exc).__name__}: {exc}"
            self._live_loss.clear()
        if mode == "replay":
            return None
        if slot.op == "forward" and self.last_loss is not None and not math.isfinite(self.last_loss):
            self.status = "diverged"
        if mode == "full":
            return self._capture_op(slot, iteration, tick)
        if mode == "bare":
            if slot.op == "step" and not math.isfinite(self._param_norm()):
                self.status = "diverged"
            return None
        self._measure(slot.op)
        return None

    # ------------------------------------------------------------ recording
    # Recording runs right after PyTorch's calls, with the processor's caches full of
    # PyTorch: each Python frame and library call costs several times what it costs
    # alone, so the code below keeps to few frames (map and C-level helpers, no
    # comprehensions) and copies a step's state with one bytes join.

    def _weights_now(self, cached: bool = False) -> Weights:
        """Parameters, optimizer state and learning rates now, copied into one flat array.

        With ``cached`` the copy goes through views kept while the optimizer's
        state tensors stay the same objects: parameters and state are changed in
        place, so the views stay valid for a whole run and a step's copy is one
        ``bytes.join``.
        """
        sizes = list(map(len, map(_STATE, self.optimizers.values())))
        layout = self._state_cache
        if layout is None or layout[0] != sizes:
            layout = self._state_cache = (sizes, *self._state_layout())
        _, dicts, names, keys, other = layout
        state = list(map(operator.getitem, dicts, names))
        lr_now = list(map(_LR, self._first_groups))
        if lr_now != self._lrs[0]:
            self._lrs = (lr_now, dict(zip(self.optimizers, map(float, lr_now), strict=True)))
        lrs = self._lrs[1]
        if not cached:
            return Weights(self.layout, flat_copy(self.tensors + state), keys, other, lrs)
        known, views = self._views
        if len(known) != len(state) or not all(map(operator.is_, known, state)):
            views = byte_views(self.tensors + state)
            self._views = (state, views)
        data = b"".join(views) if views is not None else flat_copy(self.tensors + state)
        return Weights(self.layout, data, keys, other, lrs)

    def _grads(self, hold: bool = False) -> tuple[GradData, tuple[bool, ...]]:
        """Every ``.grad`` now: copied, or with ``hold`` kept by reference (see :meth:`_copy_live_held`)."""
        maybe = list(map(_GRAD, self.tensors))
        present = tuple(map(operator.is_not, maybe, self._nones))
        if present == self._nones_present:
            self._held.clear()  # no held tensor can be any parameter's .grad now
            return EMPTY, self._nones_present
        grads = maybe if present == self._all_present else list(compress(maybe, present))
        if not hold:
            return flat_copy(grads), present
        held = HeldGrads(grads)
        self._held.append(held)
        return held, present

    def _copy_held(self) -> None:
        for held in self._held:
            held.flat()
        self._held.clear()

    def _copy_live_held(self) -> None:
        """Copy the held ``.grad`` tensors that are still some parameter's ``.grad``; forget the rest.

        Called before an op that may write a ``.grad`` in place. A tensor that is
        no longer any parameter's ``.grad`` (``zero_grad`` set it to ``None``) is
        out of PyTorch's reach, so the reference stays as good as a copy: a
        standard loop records every ``.grad`` without copying it at all.
        """
        live = set(map(id, map(_GRAD, self.tensors)))
        for held in self._held:
            if held.holds_any(live):
                held.flat()
        self._held.clear()

    def _state_layout(self) -> tuple[list[dict], list[Any], tuple, tuple]:
        """Where each optimizer-state tensor lives: its entry dictionary and key, and what the
        snapshot calls it; and the state that is not a tensor.

        Made again only when entries appear, which happens at the first steps.
        """
        dicts: list[dict] = []
        names: list[Any] = []
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
                            dicts.append(entries)
                            names.append(key)
                        else:
                            other.append((name, key, value))
        return dicts, names, tuple(keys), tuple(other)

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
        return Snapshot(self._weights_now(), grad_flat, present)

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

    def _capture_op(self, slot: OpSlot, iteration: int, tick: int) -> Entry:
        """What the history keeps of ``slot``'s op, just performed (see :data:`Entry`)."""
        op = slot.op
        fresh: tuple | bool | None = None
        prior = None
        if self._held and self._on_gpu:
            self._copy_held()  # so that the history keeps no device memory
        if op == "backward":
            prior = (self.grad_data, self.grad_present)
            if not self._hooks:
                fresh = True
            else:
                # The hook's tensors are never written again (holding them stops autograd
                # from reusing them as .grad), so references are as good as copies.
                fresh = tuple(map(self._fresh.get, range(len(self.tensors))))
                if self._on_gpu:
                    fresh = tuple(_cpu(t) for t in fresh)
        # zero_grad and backward change .grad; a step only where it may use .grad as scratch.
        if op == "zero_grad" or op == "backward" or op in self._grad_writers:
            self.grad_data, self.grad_present = self._grads(hold=True)
        if op == "step":
            self.weights = self._weights_now(cached=True)
            if not math.isfinite(self._param_norm()):
                self.status = "diverged"
        footprint = None
        if self.measures:
            peak = torch.cuda.max_memory_allocated(self.tensors[0].device) if self._on_gpu else None
            footprint = Footprint(self._saved.live if self._count_saved else None, self._walked, peak)
        return (
            slot, iteration, tick, self.last_loss, self.status == "diverged", self.error,
            self.weights, self.grad_data, self.grad_present, fresh, prior, footprint,
        )  # fmt: skip

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
