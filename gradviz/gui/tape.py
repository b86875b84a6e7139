"""The GUI's copy of a lab's history, and the moment of it that the views draw.

The live :class:`~gradviz.engine.lab.Lab` belongs to the worker thread. After
each op the worker sends the new history entries (immutable records of numpy
copies) and the GUI appends them here, so views never read a structure that
another thread is changing. Nothing here imports Qt or torch.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

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
    param_norm: float
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
            tick = h.ticks[i - h.forgotten]
            slot = lab.schedule[tick % tpi][r]
            rec = h.records[i] if h.keep_records else None  # rebuilt by replay where no longer kept
            if rec is not None:
                status = "error" if rec.error else ("diverged" if rec.diverged else "running")
            else:
                status = run.status if i == len(h) - 1 else "running"
            j = i - h.forgotten
            op, line = (slot.op, slot.line) if slot else ("forward", 0)
            graph = graphs.pop((run.name, tick), None) if graphs else None
            new.append(Entry(tick, op, line, h.loss[j], h.grad_norm[j], h.param_norm[j], status, rec, graph))
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

    @property
    def extent(self) -> tuple[tuple[float, float], tuple[float, float]]:
        return (float(self.xs[0]), float(self.xs[-1])), (float(self.ys[0]), float(self.ys[-1]))


@dataclass
class RunTape:
    """The columns of one run's ops, in the order they happened."""

    name: str
    ticks: list[int] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    param_norm: list[float] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    records: list[OpRecord | None] = field(default_factory=list)
    graphs: list[Any] = field(default_factory=list)
    # How many backward() calls .grad holds after each op (none since the last zero_grad).
    backwards: list[int] = field(default_factory=list)
    error: str | None = None

    def __len__(self) -> int:
        return len(self.ticks)

    def index_at(self, tick: int) -> int:
        """Index of the last op at or before ``tick``; -1 when there is none."""
        return bisect.bisect_right(self.ticks, tick) - 1

    def truncate(self, tick: int) -> None:
        keep = self.index_at(tick) + 1
        for column in (
            self.ticks,
            self.ops,
            self.lines,
            self.loss,
            self.grad_norm,
            self.param_norm,
            self.statuses,
            self.records,
            self.graphs,
            self.backwards,
        ):
            del column[keep:]


class Tape:
    """Every run's ops as the GUI has received them, addressable by tick."""

    def __init__(self, info: LabInfo) -> None:
        self.info = info
        self.runs = {r.name: RunTape(r.name) for r in info.runs}
        self.op_ticks: list[int] = []
        self.distance_ticks: list[int] = []
        self.distance: list[list[float]] = [[] for _ in info.runs[1:]]
        self.preview_tick = -2
        self.previews: Mapping[str, dict[str, np.ndarray]] = {}
        self.fetched: dict[tuple[str, int], OpRecord] = {}
        self.stopped = False

    @property
    def last_tick(self) -> int:
        """The newest tick with an op; -1 before the first op."""
        return self.op_ticks[-1] if self.op_ticks else -1

    def extend(self, result: StepResult) -> None:
        """Append the worker's new entries."""
        ticks = set()
        for name, entries in result.entries.items():
            rt = self.runs[name]
            for e in entries:
                rt.ticks.append(e.tick)
                rt.ops.append(e.op)
                rt.lines.append(e.line)
                rt.loss.append(e.loss)
                rt.grad_norm.append(e.grad_norm)
                rt.param_norm.append(e.param_norm)
                rt.statuses.append(e.status)
                rt.records.append(e.record)
                rt.graphs.append(e.graph)
                held = rt.backwards[-1] if rt.backwards else 0
                rt.backwards.append(0 if e.op == "zero_grad" else held + (e.op == "backward"))
                ticks.add(e.tick)
            rt.error = result.errors.get(name, rt.error)
        self.op_ticks.extend(sorted(t for t in ticks if t > self.last_tick))
        for tick, values in result.distance:
            self.distance_ticks.append(tick)
            for column, v in zip(self.distance, values, strict=True):
                column.append(v)
        self.preview_tick = result.preview_tick
        self.previews = result.previews
        self.stopped = result.stopped

    def clear(self) -> None:
        """Forget every op (after a reset to the start)."""
        for rt in self.runs.values():
            rt.truncate(-1)
            rt.error = None
        self.op_ticks.clear()
        self.distance_ticks.clear()
        for column in self.distance:
            column.clear()
        self.fetched.clear()
        self.preview_tick = -2
        self.previews = {}
        self.stopped = False

    # ------------------------------------------------------------- lookups
    def record(self, run: str, index: int) -> OpRecord | None:
        """The full record of op ``index`` of ``run``; None while it is still being fetched."""
        if index < 0:
            return None
        rec = self.runs[run].records[index]
        return rec if rec is not None else self.fetched.get((run, index))

    def record_at(self, run: str, tick: int) -> OpRecord | None:
        """The record of ``run``'s last op at or before ``tick``."""
        return self.record(run, self.runs[run].index_at(tick))

    def missing(self, tick: int) -> list[tuple[str, int]]:
        """Records the views need at ``tick`` that only the worker can rebuild."""
        out = []
        for name, rt in self.runs.items():
            i = rt.index_at(tick)
            for j in (i - 1, i):
                if j >= 0 and rt.records[j] is None and (name, j) not in self.fetched:
                    out.append((name, j))
        return out

    def next_op_tick(self, tick: int) -> int | None:
        i = bisect.bisect_right(self.op_ticks, tick)
        return self.op_ticks[i] if i < len(self.op_ticks) else None

    def prev_op_tick(self, tick: int) -> int:
        i = bisect.bisect_left(self.op_ticks, tick)
        return self.op_ticks[i - 1] if i > 0 else -1

    def snap(self, tick: float) -> int:
        """The op tick at or before ``tick`` (-1 before the first)."""
        i = bisect.bisect_right(self.op_ticks, math.floor(tick))
        return self.op_ticks[i - 1] if i > 0 else -1


@dataclass(frozen=True)
class Moment:
    """One moment of the lab as every view draws it: the tape read at ``tick``.

    Attributes
    ----------
    info, tape:
        The lab and what the GUI holds of its history.
    tick:
        The op this moment comes just after (-1: the start).
    playing:
        Whether Play is on (views may then redraw less often).
    hide_future:
        Draw nothing the tape holds after ``tick``. The window shows a scrubbed-back
        moment against the whole history recorded so far; an export frame (whose lab
        was stepped to the end beforehand) shows only what has happened by then.
    """

    info: LabInfo
    tape: Tape
    tick: int
    playing: bool = False
    hide_future: bool = False

    @property
    def horizon(self) -> int:
        """The newest tick the views may draw: ``tick`` when the future is hidden, else the tape's last."""
        return self.tick if self.hide_future else self.tape.last_tick

    def run_names(self) -> list[str]:
        return [r.name for r in self.info.runs]

    def record(self, run: str) -> OpRecord | None:
        """The run's last record at or before this moment."""
        return self.tape.record_at(run, self.tick)

    def state(self, run: str) -> Any:
        """The run's record, or its initial snapshot before its first op."""
        rec = self.record(run)
        if rec is not None:
            return rec
        if self.tape.runs[run].index_at(self.tick) < 0:
            return self.info.initial[run]
        return None

    def op_record(self, run: str) -> OpRecord | None:
        """The run's record when it had an op at exactly this tick."""
        rec = self.record(run)
        return rec if rec is not None and rec.tick == self.tick else None

    def previous(self, run: str) -> Any:
        """The state just before the run's last op (a record or the initial snapshot)."""
        i = self.tape.runs[run].index_at(self.tick)
        if i <= 0:
            return self.info.initial[run]
        return self.tape.record(run, i - 1)

    def status(self, run: str) -> str:
        rt = self.tape.runs[run]
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
        rt = self.tape.runs[run]
        i = rt.index_at(self.tick)
        while i >= 0:
            op = rt.ops[i]
            if op == "zero_grad":
                return None
            if op == "backward":
                return self.tape.record(run, i)
            i -= 1
        return None

    def graph(self, run: str) -> tuple[Any, int]:
        """The run's newest captured autograd graph at or before this moment, and the tick of its op
        (``(None, -1)`` when none was captured since the last forward)."""
        rt = self.tape.runs[run]
        i = rt.index_at(self.tick)
        while i >= 0:
            if rt.graphs[i] is not None:
                return rt.graphs[i], rt.ticks[i]
            if rt.ops[i] == "forward":
                return None, -1
            i -= 1
        return None, -1

    def backward_count(self, run: str) -> int:
        """How many backward calls have added to ``.grad`` since it was last cleared."""
        rt = self.tape.runs[run]
        i = rt.index_at(self.tick)
        return rt.backwards[i] if i >= 0 else 0

    def next_step(self, run: str) -> dict[str, np.ndarray] | None:
        """Parameters after the run's next op when it is a step: recorded, or previewed at the live end."""
        slot = self.next_slot(run)
        if slot is None or slot.op != "step":
            return None
        rt = self.tape.runs[run]
        i = rt.index_at(self.tick)
        if i + 1 < len(rt) and rt.ops[i + 1] == "step":
            rec = self.tape.record(run, i + 1)
            return None if rec is None else rec.params
        if self.tick == self.tape.preview_tick:
            return self.tape.previews.get(run)
        return None


def code_lab(moment: Moment) -> LabInfo | None:
    """For a lab whose ops ran in several files (see ``LabInfo.code_at``): the lab as the code panel
    shows it at ``moment``, with the file of its op. None for any other lab."""
    info = moment.info
    return info.code_at(moment.tick) if info.code_at is not None else None
