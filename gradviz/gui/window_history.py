"""The GUI's copy of a lab's history, and the moment of it that the views draw.

The live :class:`~gradviz.engine.lab.Lab` belongs to the worker thread. After
each op the worker sends the new history entries (immutable records of numpy
copies) and the GUI appends them here, so views never read a structure that
another thread is changing. Nothing here imports Qt or torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import numpy as np

from gradviz.engine.columns import WHOLE, Increasing, PeakColumn, Scheduled, ScheduledTicks

if TYPE_CHECKING:
    from gradviz.engine.lab import Lab
    from gradviz.engine.landscape import Plane
    from gradviz.engine.loop import OpSlot
    from gradviz.engine.record import OpRecord, Snapshot
    from gradviz.engine.scenario import RunSpec, Scenario
    from gradviz.engine.surface import SurfaceModel


@dataclass(frozen=True)
class RunInfo:
    """What the GUI needs to know about one run that does not change while it steps."""

    name: str
    note: str
    source: str
    ops: tuple[OpSlot, ...]
    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    spec: RunSpec
    # Lines that toggling zero_grad back on would insert: (0-based source line they go before, lines).
    ghost: tuple[tuple[int, tuple[str, ...]], ...] = ()
    # The parameters of each part of an iteration with its own loss and optimizer (the GAN has two).
    phases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The file its source is, where that is not the run's own (a recording's op in another file).
    file: str = ""

    def phase_of(self, param: str) -> str:
        """The phase whose optimizer holds ``param`` ("" for one-phase models)."""
        return next((p for p, names in self.phases.items() if param in names), "")


@dataclass(frozen=True)
class LabInfo:
    """A freshly built lab, described for the GUI."""

    scenario: Scenario
    runs: tuple[RunInfo, ...]
    ticks_per_iteration: int
    schedule: tuple[tuple[OpSlot | None, ...], ...]
    device: str
    devices: Mapping[str, str | None]
    surface: SurfaceModel | None
    full_records: bool
    initial: Mapping[str, Snapshot]
    parameter_count: int
    # The lesson's stops on the lab's ticks (gradviz.engine.quiz.PlacedStop), in time order.
    stops: tuple[Any, ...] = ()
    # Where the moment after a tick is, in words, for a lab with units of its own (a replayed
    # recording: "op 7 of 20 · after update 3 of 10"); None: iterations and ops.
    position: Callable[[int], str] | None = None
    # The lab as the code panel shows it after a tick, for one whose ops ran in several files (a
    # replayed recording): its run's source is the file of that op. None: one source throughout.
    code_at: Callable[[int], LabInfo] | None = None
    # Full records the lab keeps per run (its recent past); None: every one (a recording, whole).
    recent: int | None = None
    # A replayed recording: no model or data, so no other plane to choose and nothing to step.
    recorded: bool = False

    def run_index(self, name: str) -> int:
        return next(i for i, r in enumerate(self.runs) if r.name == name)

    def run(self, name: str) -> RunInfo:
        return self.runs[self.run_index(name)]


def describe_lab(lab: Lab, restore: Mapping[str, tuple[str, ...]] | None = None) -> LabInfo:
    """What the GUI needs to know of a freshly built lab (call it where the lab lives).

    ``restore`` maps run names to the loop order that re-enabling zero_grad gives
    (the code panel shows those lines greyed out where they would go).
    """
    from gradviz.engine.devices import device_status
    from gradviz.engine.lab import parameter_count
    from gradviz.engine.quiz import resolve_stops
    from gradviz.engine.surface import surface_model

    restore = restore or {}
    runs = tuple(
        RunInfo(
            name=r.name,
            note=r.spec.note,
            source=r.program.source,
            ops=r.program.ops,
            names=r.layout.names,
            shapes=r.layout.shapes,
            spec=r.spec,
            ghost=_ghost_lines(r, restore.get(r.name)),
            phases={name: phase.params for name, phase in r.phases.items()},
        )
        for r in lab.runs
    )
    return LabInfo(
        scenario=lab.scenario,
        runs=runs,
        ticks_per_iteration=lab.ticks_per_iteration,
        schedule=tuple(tuple(row) for row in lab.schedule),
        device=str(lab.device),
        devices=device_status(),
        surface=surface_model(lab),
        full_records=lab.mode == "full",
        initial={r.name: lab.initial(r.name) for r in lab.runs},
        parameter_count=parameter_count(lab),
        stops=resolve_stops(lab) if lab.scenario.lesson is not None else (),
        recent=lab.history[lab.runs[0].name].recent_limit,
    )


def _ghost_lines(run: Any, restore: tuple[str, ...] | None) -> tuple[tuple[int, tuple[str, ...]], ...]:
    """Where the zero_grad lines a run skips would stand, rendered by the same loop renderer."""
    import difflib
    from dataclasses import replace

    from gradviz.engine.loop import build_program

    loop = run.spec.loop
    if "zero_grad" in loop.order:
        return ()
    order = restore if restore and "zero_grad" in restore else ("zero_grad", *loop.order)
    alt = build_program(run.task, replace(run.spec, loop=replace(loop, order=tuple(order))))
    old, new = run.program.lines, alt.lines
    out = []
    for tag, i1, _i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag == "insert":
            out.append((i1, tuple(new[j1:j2])))
    return tuple(out)


@dataclass(frozen=True)
class Entry:
    """One op of one run as the worker reports it."""

    tick: int
    op: str
    line: int
    loss: float
    grad_norm: float
    param_norm: float  # the lab's; no view draws it, so the window's history does not keep it
    status: str
    record: OpRecord | None
    # The autograd graph a forward built or a backward walked (gradviz.engine.graph.Graph), while captured.
    graph: Any = None


def entries_since(
    lab: Lab, known: Mapping[str, int], graphs: dict[tuple[str, int], Any] | None = None
) -> dict[str, tuple[Entry, ...]]:
    """Each run's ops from op ``known[run]`` on (0 where absent), as the window keeps them.

    ``graphs`` holds captured autograd graphs by (run, tick); each one taken goes with its op.
    Call it where the lab lives; records and scalars are copies, so the result can cross threads.
    """
    tpi = lab.ticks_per_iteration
    out: dict[str, tuple[Entry, ...]] = {}
    for r, run in enumerate(lab.runs):
        h = lab.history[run.name]
        new = []
        for i in range(known.get(run.name, 0), len(h)):
            tick = h.ticks[i]
            slot = lab.schedule[tick % tpi][r]
            rec = h.records[i] if h.keep_records else None  # rebuilt by replay where no longer kept
            if rec is not None:
                status = "error" if rec.error else ("diverged" if rec.diverged else "running")
            else:
                status = run.status if i == len(h) - 1 else "running"
            op, line = (slot.op, slot.line) if slot else ("forward", 0)
            graph = graphs.pop((run.name, tick), None) if graphs else None
            loss, grad_norm, param_norm = h.scalars(i)
            new.append(Entry(tick, op, line, loss, grad_norm, param_norm, status, rec, graph))
        out[run.name] = tuple(new)
    return out


@dataclass(frozen=True)
class StepResult:
    """The new part of the history after one request to the worker."""

    entries: Mapping[str, tuple[Entry, ...]]
    distance: tuple[tuple[int, tuple[float, ...]], ...]
    errors: Mapping[str, str | None]
    preview_tick: int
    previews: Mapping[str, dict[str, np.ndarray]]
    stopped: bool
    # Full records of the newest ops of a lab that keeps none, made as they ran (run, op index).
    records: Mapping[tuple[str, int], OpRecord] = field(default_factory=dict)


@dataclass(frozen=True)
class PlaneRequest:
    """What the surface view asks for: a plane of ``kind``, or a new range on an existing ``plane``.

    Attributes
    ----------
    kind:
        ``"axes"``, ``"random"``, ``"pca"``, ``"three-points"`` or ``"curve"`` (one parameter).
    plane:
        Keep this plane and evaluate over ``extent`` (a path left the range); ``None`` makes a new plane.
    extent:
        ``((x0, x1), (y0, y1))`` in plane coordinates; ``None`` fits the runs' paths.
    """

    kind: str
    plane: Plane | None = None
    extent: tuple[tuple[float, float], tuple[float, float]] | None = None


@dataclass(frozen=True)
class PlaneSurface:
    """The loss over a plane through weight space, as computed off the GUI thread.

    Attributes
    ----------
    kind:
        The plane kind asked for (see :class:`PlaneRequest`).
    plane:
        The plane; paths are projected onto it.
    xs, ys, Z:
        Coordinates along the plane's directions and ``Z[i, j]``, the loss at ``(xs[i], ys[j])``.
    final:
        False for the coarse preview.
    note:
        A sentence for the caption (for example why another plane kind was used).
    loss_name:
        Which loss is shown (``"loss"``, or a phase's for models with several).
    elapsed:
        Seconds the evaluation took so far.
    method:
        How the points were evaluated (``"closed-form"``, ``"matmul"``, ``"vmap"``).
    paths:
        For a new plane, every run's whole path projected onto it (``PlanePath``), else None.
    title:
        The view's title where this surface says it of itself (a recording's, which has no loss).
    """

    kind: str
    plane: Plane
    xs: np.ndarray
    ys: np.ndarray
    Z: np.ndarray
    final: bool
    note: str = ""
    loss_name: str = "loss"
    elapsed: float = 0.0
    method: str = ""
    # Each run's path projected onto a new plane by the lab (gradviz.gui.surface_path.PlanePath).
    paths: tuple[Any, ...] | None = None
    title: str = ""

    @property
    def extent(self) -> tuple[tuple[float, float], tuple[float, float]]:
        return (float(self.xs[0]), float(self.xs[-1])), (float(self.ys[0]), float(self.ys[-1]))


T = TypeVar("T")

# Captured autograd graphs the window keeps per run: those of its last few ops only (a graph holds
# the values on every edge, and each parameter's whole gradient); stepping back a few ops draws them
# at once, and the graph view has the lab walk any other again from its keyframe.
GRAPHS_KEPT = 16
# Records rebuilt by the lab for a moment gone back to, kept while the cursor stays near them.
FETCHED_KEPT = 64


class Recent(Sequence[T | None], Generic[T]):
    """One value per op, kept for the newest ``limit`` ops only (every op when ``limit`` is None).

    Indexed by op like a list of every op; an op no longer kept reads as ``None``.
    Dropped a slice at a time, so each drop's cost is spread over many ops.
    """

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self._trim_at = None if limit is None else limit + max(1, limit // 8)
        self.first = 0  # the op index of the oldest value kept
        self._kept: list[T | None] = []

    def __len__(self) -> int:
        return self.first + len(self._kept)

    @overload
    def __getitem__(self, i: int) -> T | None: ...
    @overload
    def __getitem__(self, i: slice) -> list[T | None]: ...
    def __getitem__(self, i: int | slice) -> T | list[T | None] | None:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._kept[i - self.first] if i >= self.first else None

    def append(self, value: T | None) -> None:
        self._kept.append(value)
        if self._trim_at is not None and self.limit is not None and len(self._kept) >= self._trim_at:
            drop = len(self._kept) - self.limit
            del self._kept[:drop]
            self.first += drop

    def truncate(self, keep: int) -> None:
        """Forget every op from index ``keep`` on."""
        del self._kept[max(keep - self.first, 0) :]
        self.first = min(self.first, keep)


class HeldBackwards:
    """How many ``backward()`` calls ``.grad`` holds after each op of a run (none since the last
    ``zero_grad``), worked out from the ops of one iteration: nothing is stored per op."""

    def __init__(self, ops: Sequence[str]) -> None:
        self.per_iteration = ops.count("backward")
        self.clears = "zero_grad" in ops
        # Within an iteration, after each of its ops: backwards so far, and since its last zero_grad.
        self._upto: list[int] = []
        self._since: list[int | None] = []
        upto, since = 0, None
        for op in ops:
            upto += op == "backward"
            since = 0 if op == "zero_grad" else (None if since is None else since + (op == "backward"))
            self._upto.append(upto)
            self._since.append(since)
        # What an iteration leaves in .grad for the next: the backwards after its last zero_grad.
        self._carried = since or 0

    def at(self, index: int) -> int:
        """After op ``index`` of the run."""
        iteration, slot = divmod(index, len(self._upto))
        since = self._since[slot]
        if since is not None:
            return since
        if self.clears:
            return (self._carried if iteration else 0) + self._upto[slot]
        return iteration * self.per_iteration + self._upto[slot]


class WindowRunHistory:
    """The columns of one run's ops, in the order they happened, in bounded memory.

    Ticks and how many backward calls ``.grad`` holds are worked out from the lab's schedule
    (the run's ops follow it); its op, line and status are kept only where they differ from
    what the schedule foretells (:class:`Scheduled`: a status other than "running", a line in
    another file of a recording); its loss and ``.grad`` norm as the timeline draws them
    (:class:`PeakColumn`: exact for the newest ops, each bucket's lowest and highest further
    back). Full records and captured graphs are kept for the recent past only:
    ``records_kept`` (the lab's own recent past, so the window holds the lab's records rather
    than copies) and :data:`GRAPHS_KEPT`; older records, and with them every number shown at
    a moment, are rebuilt by the lab when a moment needs them (:meth:`WindowHistory.missing`).
    """

    def __init__(
        self,
        name: str,
        schedule: Sequence[Sequence[OpSlot | None]],
        run: int,
        records_kept: int | None = None,
        whole: int = WHOLE,
    ) -> None:
        self.name = name
        self.ticks = ScheduledTicks.of_schedule(schedule, run)
        slots = [slot for row in schedule if (slot := row[run]) is not None]
        self.ops: Scheduled[str] = Scheduled([slot.op for slot in slots])
        self.lines: Scheduled[int] = Scheduled([slot.line for slot in slots])
        self.loss = PeakColumn("d", whole)  # as PyTorch gave it
        self.grad_norm = PeakColumn("f", whole)  # the lab keeps the norm in single precision
        self.statuses: Scheduled[str] = Scheduled(["running"])
        self.records: Recent[OpRecord] = Recent(records_kept)
        self.graphs: Recent[Any] = Recent(GRAPHS_KEPT if records_kept is not None else None)
        self._held = HeldBackwards(self.ops.pattern)
        self.error: str | None = None

    def __len__(self) -> int:
        return len(self.ticks)

    def append(self, e: Entry) -> None:
        """Add one op as the worker reported it (the run's next op in the lab's schedule)."""
        self.ticks.append(e.tick)
        self.ops.append(e.op)
        self.lines.append(e.line)
        self.loss.append(e.loss)
        self.grad_norm.append(e.grad_norm)
        self.statuses.append(e.status)
        self.records.append(e.record)
        self.graphs.append(e.graph)

    def backwards(self, index: int) -> int:
        """How many backward calls ``.grad`` holds after op ``index`` (none since the last zero_grad)."""
        return self._held.at(index)

    def index_at(self, tick: int) -> int:
        """Index of the last op at or before ``tick``; -1 when there is none."""
        return self.ticks.index_at(tick)

    def truncate(self, tick: int) -> None:
        keep = self.index_at(tick) + 1
        self.ticks.truncate(keep)
        for column in (self.loss, self.grad_norm, self.ops, self.lines, self.statuses):
            column.truncate(keep)
        self.records.truncate(keep)
        self.graphs.truncate(keep)

    def needed(self, index: int) -> list[int]:
        """The ops whose records a moment just after op ``index`` reads: the op, the one before,
        the backward whose gradient ``.grad`` still holds, and the step that follows."""
        out = [j for j in (index - 1, index) if j >= 0]
        j = index
        while j >= 0 and self.ops[j] not in ("backward", "zero_grad"):
            j -= 1
        if j >= 0 and self.ops[j] == "backward" and j not in out:
            out.append(j)
        if index + 1 < len(self) and self.ops[index + 1] == "step":
            out.append(index + 1)
        return out


class WindowHistory:
    """Every run's ops as the GUI has received them, addressable by tick."""

    def __init__(self, info: LabInfo, whole: int = WHOLE) -> None:
        """``whole``: ops whose loss, ``.grad`` norm and distance are kept exactly (:class:`PeakColumn`)."""
        self.info = info
        self.runs = {
            r.name: WindowRunHistory(r.name, info.schedule, i, info.recent, whole)
            for i, r in enumerate(info.runs)
        }
        # The distances between the runs' weights, for the ticks the worker measured them at.
        self.distance_ticks = Increasing()
        self.distance = [PeakColumn("d", whole) for _ in info.runs[1:]]
        self.preview_tick = -2
        self.previews: Mapping[str, dict[str, np.ndarray]] = {}
        self.fetched: dict[tuple[str, int], OpRecord] = {}
        # The records the worker made of its newest ops, those the newest moment reads.
        self.newest: dict[tuple[str, int], OpRecord] = {}
        self.stopped = False

    @property
    def last_tick(self) -> int:
        """The newest tick with an op; -1 before the first op."""
        return max((rt.ticks[-1] for rt in self.runs.values() if len(rt)), default=-1)

    @property
    def op_ticks(self) -> np.ndarray:
        """Every tick at which some run had an op, in order (worked out from the runs' ticks)."""
        return np.unique(np.concatenate([rt.ticks[:] for rt in self.runs.values()]))

    def extend(self, result: StepResult) -> None:
        """Append the worker's new entries."""
        for name, entries in result.entries.items():
            rt = self.runs[name]
            for e in entries:
                rt.append(e)
            rt.error = result.errors.get(name, rt.error)
        for tick, values in result.distance:
            self.distance_ticks.append(tick)
            for column, v in zip(self.distance, values, strict=True):
                column.append(v)
        self.preview_tick = result.preview_tick
        self.previews = result.previews
        self.stopped = result.stopped
        if result.records or self.newest:
            wanted = {(name, j) for name, rt in self.runs.items() for j in rt.needed(len(rt) - 1)}
            made = {**self.newest, **result.records}
            self.newest = {key: rec for key, rec in made.items() if key in wanted}

    def clear(self) -> None:
        """Forget every op (after a reset to the start)."""
        for rt in self.runs.values():
            rt.truncate(-1)
            rt.error = None
        self.distance_ticks.truncate(0)
        for column in self.distance:
            column.truncate(0)
        self.fetched.clear()
        self.newest.clear()
        self.preview_tick = -2
        self.previews = {}
        self.stopped = False

    def add_fetched(self, records: Mapping[tuple[str, int], OpRecord]) -> None:
        """Keep records the lab rebuilt, and only the newest :data:`FETCHED_KEPT` of them."""
        self.fetched.update(records)
        for key in list(self.fetched)[: max(0, len(self.fetched) - FETCHED_KEPT)]:
            del self.fetched[key]

    # ------------------------------------------------------------- lookups
    def record(self, run: str, index: int) -> OpRecord | None:
        """The full record of op ``index`` of ``run``; None while it is still being fetched."""
        if index < 0:
            return None
        rec = self.runs[run].records[index]
        if rec is not None:
            return rec
        return self.newest.get((run, index)) or self.fetched.get((run, index))

    def record_at(self, run: str, tick: int) -> OpRecord | None:
        """The record of ``run``'s last op at or before ``tick``."""
        return self.record(run, self.runs[run].index_at(tick))

    def missing(self, tick: int) -> list[tuple[str, int]]:
        """Records the views need at ``tick`` that only the worker can rebuild."""
        out = []
        for name, rt in self.runs.items():
            for j in rt.needed(rt.index_at(tick)):
                if self.record(name, j) is None:
                    out.append((name, j))
        return out

    def next_op_tick(self, tick: int) -> int | None:
        """The first tick after ``tick`` at which some run had an op; None after the last."""
        later = [rt.ticks[j] for rt in self.runs.values() if (j := rt.index_at(tick) + 1) < len(rt)]
        return min(later, default=None)

    def prev_op_tick(self, tick: int) -> int:
        """The last tick before ``tick`` at which some run had an op (-1 before the first)."""
        return self.snap(tick - 1)

    def snap(self, tick: float) -> int:
        """The op tick at or before ``tick`` (-1 before the first)."""
        t = math.floor(tick)
        return max((rt.ticks[j] for rt in self.runs.values() if (j := rt.index_at(t)) >= 0), default=-1)


@dataclass(frozen=True)
class Moment:
    """One moment of the lab as every view draws it: the history read at ``tick``.

    Attributes
    ----------
    info, history:
        The lab and what the GUI holds of its history.
    tick:
        The op this moment comes just after (-1: the start).
    playing:
        Whether Play is on (views may then redraw less often).
    hide_future:
        Draw nothing the history holds after ``tick``. The window shows a scrubbed-back
        moment against the whole history recorded so far; an export frame (whose lab
        was stepped to the end beforehand) shows only what has happened by then.
    """

    info: LabInfo
    history: WindowHistory
    tick: int
    playing: bool = False
    hide_future: bool = False

    @property
    def horizon(self) -> int:
        """The newest tick the views may draw: ``tick`` when the future is hidden, else the history's last."""
        return self.tick if self.hide_future else self.history.last_tick

    def run_names(self) -> list[str]:
        return [r.name for r in self.info.runs]

    def record(self, run: str) -> OpRecord | None:
        """The run's last record at or before this moment."""
        return self.history.record_at(run, self.tick)

    def state(self, run: str) -> Any:
        """The run's record, or its initial snapshot before its first op."""
        rec = self.record(run)
        if rec is not None:
            return rec
        if self.history.runs[run].index_at(self.tick) < 0:
            return self.info.initial[run]
        return None

    def op_record(self, run: str) -> OpRecord | None:
        """The run's record when it had an op at exactly this tick."""
        rec = self.record(run)
        return rec if rec is not None and rec.tick == self.tick else None

    def previous(self, run: str) -> Any:
        """The state just before the run's last op (a record or the initial snapshot)."""
        i = self.history.runs[run].index_at(self.tick)
        if i <= 0:
            return self.info.initial[run]
        return self.history.record(run, i - 1)

    def status(self, run: str) -> str:
        rt = self.history.runs[run]
        i = rt.index_at(self.tick)
        return rt.statuses[i] if i >= 0 else "running"

    def iteration(self) -> int:
        """The iteration of the op at this moment (0 before the first op)."""
        return max(self.tick, 0) // self.info.ticks_per_iteration

    def next_slot(self, run: str) -> OpSlot | None:
        """The slot the run performs next (None when it has stopped, or after the scenario's last op)."""
        if self.status(run) != "running":
            return None
        r = self.info.run_index(run)
        tpi = self.info.ticks_per_iteration
        for k in range(1, min(tpi, self.info.scenario.iterations * tpi - 1 - self.tick) + 1):
            slot = self.info.schedule[(self.tick + k) % tpi][r]
            if slot is not None:
                return slot
        return None

    def last_backward(self, run: str) -> OpRecord | None:
        """The run's newest backward whose gradient is still in ``.grad`` (no zero_grad since)."""
        rt = self.history.runs[run]
        i = rt.index_at(self.tick)
        while i >= 0:
            op = rt.ops[i]
            if op == "zero_grad":
                return None
            if op == "backward":
                return self.history.record(run, i)
            i -= 1
        return None

    def graph(self, run: str) -> tuple[Any, int]:
        """The autograd graph of the run's newest forward or backward at or before this moment, and
        the tick of that op: ``(None, tick)`` where the window keeps no graph of it (not captured,
        or no longer kept), ``(None, -1)`` before the run's first forward."""
        rt = self.history.runs[run]
        i = rt.index_at(self.tick)
        while i >= 0:
            if rt.ops[i] in ("forward", "backward"):
                return rt.graphs[i], rt.ticks[i]
            i -= 1
        return None, -1

    def backward_count(self, run: str) -> int:
        """How many backward calls have added to ``.grad`` since it was last cleared."""
        rt = self.history.runs[run]
        i = rt.index_at(self.tick)
        return rt.backwards(i) if i >= 0 else 0

    def next_step(self, run: str) -> dict[str, np.ndarray] | None:
        """Parameters after the run's next op when it is a step: recorded, or previewed at the live end."""
        slot = self.next_slot(run)
        if slot is None or slot.op != "step":
            return None
        rt = self.history.runs[run]
        i = rt.index_at(self.tick)
        if i + 1 < len(rt) and rt.ops[i + 1] == "step":
            rec = self.history.record(run, i + 1)
            return None if rec is None else rec.params
        if self.tick == self.history.preview_tick:
            return self.history.previews.get(run)
        return None


def code_lab(moment: Moment) -> LabInfo | None:
    """For a lab whose ops ran in several files (see ``LabInfo.code_at``): the lab as the code panel
    shows it at ``moment``, with the file of its op. None for any other lab."""
    info = moment.info
    return info.code_at(moment.tick) if info.code_at is not None else None
