"""One run: a live model and optimizer, stepped one op at a time by real PyTorch calls."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from gradviz.engine.copying import flat_copy, join, numpy_views
from gradviz.engine.footprint import Footprint, SavedBytes, can_count_saved, graph_nodes, wanted
from gradviz.engine.loop import OpSlot, build_program
from gradviz.engine.record import Grads, Layout, OpRecord, RunStatus, Snapshot, StateKey, Weights, floats
from gradviz.engine.scenario import RunSpec, Scenario
from gradviz.engine.zoo import Batch, Phase, build_task

if TYPE_CHECKING:
    from gradviz.engine.graph import GraphCapture

Mode = Literal["bare", "light", "full"]

# A diverging run's single-precision norm overflows; _norm then redoes it in double. Numpy's
# warning about it would fill the terminal during a long Play, and a context that silences it
# costs more than the norm itself, so it is filtered here, for this module's calls only.
warnings.filterwarnings("ignore", "overflow encountered in dot", RuntimeWarning, r"gradviz\.engine\.run")


class Run:
    """The live state of one run: its task (model and data), optimizers, and position.

    ``execute`` performs one op exactly as user code would and, in ``full``
    mode, copies what it changed from the real tensors: the attributes a
    history keeps (:class:`~gradviz.engine.record.RecordedRun`), of which
    :meth:`record` makes the op's :class:`OpRecord`.
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
        self._delivered: dict[int, torch.Tensor] = {}  # what each backward delivered, as hooks caught it
        self._hooks: list[Any] = []
        self._live_loss: dict[str, torch.Tensor] = {}
        self.last_loss: float | None = None
        self.status: RunStatus = "running"
        self.error: str | None = None
        self.grad_norm = 0.0
        self.param_norm = 0.0
        self._state_layout: StateLayout | None = None
        self._no_grads = Grads(b"", (False,) * len(self.tensors))
        self._all_present = (True,) * len(self.tensors)
        # Parameters are only ever changed in place, so views of them stay valid.
        self._param_views = numpy_views(self.tensors)
        self._grad_writers = self._ops_writing_grads()
        # The learning rates as last read, and as recorded: one dictionary shared by the
        # snapshots while they hold (a manual loop's fixed ``lr`` has no optimizer to read).
        self._lr_read: list[Any] = []
        self._lrs: dict[str, float] = {"lr": spec.optimizer.lr}
        # True once an op ran unrecorded (light, bare or replayed): the state copied is then out
        # of date, and is copied again (recapture) before the next op recorded in full.
        self._unrecorded = False
        # What the last op recorded in full left, copied: the state after it (shared with the ops
        # before that changed neither part), a backward's fresh and prior, a measured footprint.
        self.weights: Weights
        self.grad_copy: Grads
        self.recapture()
        self.fresh: Grads | None = None
        self.prior: Grads | None = None
        self.footprint: Footprint | None = None
        # What autograd holds and walks, measured where the lesson asks (see engine/footprint.py).
        self._saved = SavedBytes()
        self.measures = wanted(scenario)
        self._count_saved = can_count_saved(self.loop.order)
        self._walked: int | None = None
        self._on_gpu = self.tensors[0].device.type != "cpu"

    def _ops_writing_grads(self) -> frozenset[str]:
        """The ops that may change a ``.grad``, after which a record copies them again.

        ``backward`` fills or adds to ``.grad``; ``zero_grad`` sets it to
        ``None`` or zeroes it. torch.optim's multi-tensor and fused steps (the
        default off the CPU) may use ``.grad`` as scratch: SGD with Nesterov
        momentum adds the momentum into it.
        """
        ops = {"backward", "zero_grad"}
        device = self.tensors[0].device.type
        for opt in self.optimizers.values():
            for group in opt.param_groups:
                foreach, fused = group.get("foreach"), group.get("fused")
                if fused or foreach or (foreach is None and device != "cpu"):
                    ops.add("step")
        return frozenset(ops)

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
            self._delivered[i] = grad

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
            self._delivered.clear()
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

    def execute(self, slot: OpSlot, iteration: int, mode: Mode) -> None:
        """Perform ``slot``'s op for real; record it as ``mode`` asks.

        An exception from PyTorch (for example ``p.grad`` being ``None`` in a
        manual loop) stops this run with that error, as it would stop the
        user's program; a non-finite loss or parameter marks it diverged.
        In ``full`` mode the op's copies are kept in this run's attributes until the next op
        (:meth:`record` makes its record of them); a run whose last op ran unrecorded copies its
        state first, as the record's before.
        """
        if mode == "full" and self._unrecorded:
            self.recapture()
        if slot.op == "backward":
            # Hooks are needed only where the call adds to an existing .grad (see OpRecord.fresh);
            # a full record's snapshot says whether one exists.
            adding = mode == "full" and True in self.grad_copy.present
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
            self._stop(exc)
        if slot.op == "forward" and self.last_loss is not None and not math.isfinite(self.last_loss):
            self.status = "diverged"
        if mode == "full":
            self._copy_changes(slot.op)
            return
        self._unrecorded = True
        if mode == "bare":
            if slot.op == "step" and not math.isfinite(self._param_norm()):
                self.status = "diverged"
            return
        self._measure(slot.op)

    def replay(self, slot: OpSlot, iteration: int) -> None:
        """Perform ``slot``'s op again, as it ran the first time: nothing recorded, nothing checked
        (a replay repeats ops already checked); an exception stops the run as it did then."""
        if self._hooks:  # only a full record reads what they catch
            self._catch_fresh_grads(False)
        self._unrecorded = True
        try:
            self._perform(slot, iteration)
        except Exception as exc:
            self._stop(exc)

    def _stop(self, exc: Exception) -> None:
        """Stop this run with ``exc``, as the exception would stop the user's program."""
        self.status = "error"
        self.error = f"{type(exc).__name__}: {exc}"
        self._live_loss.clear()

    # ------------------------------------------------------------ recording
    def _copy_changes(self, op: str) -> None:
        """Copy what ``op``, just performed, changed; share the rest with the op before."""
        prior = self.grad_copy
        self.fresh = self.prior = self.footprint = None
        if op in self._grad_writers:
            self.grad_copy = self._copy_grads()
            self.grad_norm = _copy_norm(self.grad_copy.values)
        if op == "step":
            self.weights = self._weights_now()
            # The norm of the copy just made: the same numbers as the live parameters'.
            self.param_norm = _copy_norm(self.weights.values, self.layout.total)
            if not math.isfinite(self.param_norm):
                self.status = "diverged"
        if op == "backward":
            self.prior = prior
            # Where every .grad was None, autograd made .grad exactly what it delivered.
            self.fresh = self._fresh_copy() if self._hooks else self.grad_copy
        if self.measures:
            peak = torch.cuda.max_memory_allocated(self.tensors[0].device) if self._on_gpu else None
            self.footprint = Footprint(self._saved.live if self._count_saved else None, self._walked, peak)

    def record(self, index: int, tick: int) -> OpRecord:
        """The record of this run's op ``index`` at ``tick``, just performed in ``full`` mode."""
        ops = self.program.ops
        return OpRecord(
            self.name, index, tick, index // len(ops), ops[index % len(ops)], self.last_loss,
            self.status == "diverged", self.error, self.current, self.fresh, self.prior, self.footprint,
        )  # fmt: skip

    @property
    def current(self) -> Snapshot:
        """The state as the last op recorded in full (or a restore, or a capture) left it, copied."""
        return Snapshot(self.weights, self.grad_copy)

    def _copy_grads(self) -> Grads:
        """Every ``.grad`` now, copied; ``None`` ones marked absent."""
        grads = [p.grad for p in self.tensors]
        present = tuple([g is not None for g in grads])
        if present == self._all_present:
            return Grads(flat_copy(grads), self._all_present)  # type: ignore[arg-type]  # none is None
        if True not in present:
            return self._no_grads
        return Grads(flat_copy([g for g in grads if g is not None]), present)

    def _fresh_copy(self) -> Grads:
        """What the last backward delivered to each parameter (hooks caught it), copied; then let go."""
        caught = [self._delivered.get(i) for i in range(len(self.tensors))]
        self._delivered.clear()
        present = tuple(t is not None for t in caught)
        return Grads(flat_copy([t for t in caught if t is not None]), present)

    def _weights_now(self) -> Weights:
        """Parameters, optimizer state and learning rates now, copied into one flat array.

        The copy goes through numpy views of the tensors, kept while the
        optimizer's state tensors stay the same objects: parameters and state
        change in place, so a step's copy is one :func:`~gradviz.engine.copying.join`.
        """
        layout = self._state_layout
        if layout is None or not layout.holds(self.optimizers.values()):
            layout = self._state_layout = StateLayout.of(self.optimizers.values(), self.tensors, self._by_id)
        lr_now = [opt.param_groups[0]["lr"] for opt in self.optimizers.values()]
        if lr_now != self._lr_read:
            self._lr_read = lr_now
            self._lrs = {name: float(lr) for name, lr in zip(self.optimizers, lr_now, strict=True)}
        values = join(layout.views) if layout.views is not None else flat_copy(self.tensors + layout.tensors)
        return Weights(self.layout, values, layout.keys, layout.other_now(), self._lrs)

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

    def recapture(self) -> None:
        """Copy the state now into ``current``, where ops ran unrecorded since it was made."""
        self.weights, self.grad_copy = self._weights_now(), self._copy_grads()
        self._unrecorded = False

    def capture(self, grads: bool = True) -> Snapshot:
        """A full snapshot of this run now, copied from the real tensors.

        With ``grads=False`` every ``.grad`` is recorded as ``None`` (see
        :attr:`grads_unread_at_iteration_start`).
        """
        return Snapshot(self._weights_now(), self._copy_grads() if grads else self._no_grads)

    def param_copy(self) -> np.ndarray:
        """The parameters now, copied end to end into one float32 array (the layout's order)."""
        views = self._param_views
        return floats(join(views) if views is not None else flat_copy(self.tensors))

    def _param_norm(self) -> float:
        """Norm of all parameters now; inf or nan when one of them is."""
        views = self._param_views
        return _norm(views) if views is not None else _torch_norm(self.tensors)

    def norms(self) -> tuple[float, float]:
        """The norms of every ``.grad`` and of the parameters in ``current``, as a full record's op
        computes them (a light run's, from the tensors one by one, may differ in the last bit)."""
        return _copy_norm(self.grad_copy.values), _copy_norm(self.weights.values, self.layout.total)

    def _measure(self, op: str) -> None:
        """The norms the timeline plots, from the live tensors (all a light run records)."""
        if op in ("zero_grad", "backward"):
            grads = [p.grad for p in self.tensors if p.grad is not None]
            views = numpy_views(grads)
            self.grad_norm = _norm(views) if views is not None else _torch_norm(grads)
        elif op == "step":
            self.param_norm = self._param_norm()
            if not math.isfinite(self.param_norm):
                self.status = "diverged"

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
        self._state_layout = None
        self._live_loss.clear()
        self._delivered.clear()
        self.last_loss = loss
        self.status = "running"
        self.error = None
        self.weights, self.grad_copy = snap.weights, snap.grad_copy
        self._unrecorded = False
        self.grad_norm, self.param_norm = self.norms()


@dataclass(frozen=True, eq=False)
class StateLayout:
    """Where each optimizer-state tensor lives and what a snapshot calls it, with numpy views
    of the parameters and those tensors for a step's copy.

    Optimizers create their state at the first steps and then change it in
    place, so one layout serves a whole run; :meth:`holds` says when it no longer does.
    """

    tensors: list[torch.Tensor]
    places: list[tuple[dict[str, Any], str]]  # each tensor's state entry and key
    keys: tuple[StateKey, ...]
    others: list[tuple[str, dict[str, Any], str]]  # state that is not a tensor: parameter, entry, key
    populated: int  # parameters with state
    views: list[np.ndarray] | None

    @classmethod
    def of(
        cls,
        optimizers: Iterable[torch.optim.Optimizer],
        params: Sequence[torch.Tensor],
        names: dict[int, str],
    ) -> StateLayout:
        """The layout of the optimizers' state now, in the order of their parameter groups."""
        tensors: list[torch.Tensor] = []
        places: list[tuple[dict[str, Any], str]] = []
        keys: list[StateKey] = []
        others: list[tuple[str, dict[str, Any], str]] = []
        populated = 0
        for opt in optimizers:
            populated += len(opt.state)
            for group in opt.param_groups:
                for p in group["params"]:
                    entries = opt.state.get(p, {})
                    for key, value in entries.items():
                        if isinstance(value, torch.Tensor):
                            where = "cpu" if value.device.type == "cpu" else "param"
                            keys.append((names[id(p)], key, tuple(value.shape), f"{value.dtype}@{where}"))
                            tensors.append(value)
                            places.append((entries, key))
                        else:
                            others.append((names[id(p)], entries, key))
        return cls(tensors, places, tuple(keys), others, populated, numpy_views([*params, *tensors]))

    def holds(self, optimizers: Iterable[torch.optim.Optimizer]) -> bool:
        """True while the optimizers keep exactly these state tensors."""
        return sum([len(opt.state) for opt in optimizers]) == self.populated and all(
            [entries.get(key) is t for (entries, key), t in zip(self.places, self.tensors, strict=True)]
        )

    def other_now(self) -> tuple[tuple[str, str, Any], ...]:
        """The state that is not a tensor, as it is now."""
        return tuple([(name, key, entries[key]) for name, entries, key in self.others])


# Up to this many values, a norm is taken by math.hypot over a list of them, in double: that costs
# less than one numpy call. Beyond it, numpy's single-precision dot products cost less.
HYPOT_VALUES = 24


def _norm(views: Sequence[np.ndarray]) -> float:
    """Euclidean norm of all ``views`` (flat arrays) together; inf or nan only when an element is.

    Few values (a small model's): ``math.hypot`` of them all, the same however they are split into
    views. More: single-precision dot products, redone in double where one overflows.
    """
    if len(views) == 1:
        if views[0].size <= HYPOT_VALUES:
            return math.hypot(*views[0].tolist())
    elif sum([v.size for v in views]) <= HYPOT_VALUES:
        return math.hypot(*[x for v in views for x in v.tolist()])
    total = 0.0
    for v in views:
        square = float(v.dot(v))
        if not math.isfinite(square):
            wide = v.astype(np.float64)
            square = float(wide.dot(wide))
        total += square
    return math.sqrt(total)


def _copy_norm(values: bytes, count: int | None = None) -> float:
    """:func:`_norm` of the first ``count`` float32 values of a copy (all of them by default), with
    no array made of a small model's copy."""
    view = memoryview(values).cast("f")[:count]
    if len(view) <= HYPOT_VALUES:
        return math.hypot(*view)
    return _norm([floats(values)[:count]])


def _torch_norm(tensors: Sequence[torch.Tensor]) -> float:
    """Euclidean norm of all ``tensors`` together (where numpy cannot see them: GPU, bfloat16)."""
    if not tensors:
        return 0.0
    with torch.no_grad():
        return float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(list(tensors)))))
