"""The thread that owns the live lab and performs its PyTorch ops, and the one that computes surfaces.

Every request (build, step, reset, fetch, plan) arrives as a queued signal and
is answered with a signal carrying immutable data: records of numpy copies,
never tensors. torch is first imported here, after the window is on screen.

Loss surfaces over planes are split in two: the lab's thread makes the plane
and a loss evaluator from the live run (milliseconds: the evaluator holds
copies of the modules and the dataset, never the live weights), and a second
thread evaluates it over the grid, coarse first, cancellable, so stepping goes
on while a surface is computed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import QObject, Signal, Slot

from gradviz.gui.surface_path import PlanePath
from gradviz.gui.window_history import (
    LabInfo,
    PlaneRequest,
    PlaneSurface,
    StepResult,
    describe_lab,
    entries_since,
)

if TYPE_CHECKING:
    from gradviz.engine.lab import Lab
    from gradviz.engine.landscape import Plane, PointLoss
    from gradviz.engine.lesson import Lesson
    from gradviz.engine.record import OpRecord
    from gradviz.engine.scenario import Scenario

Extent = tuple[tuple[float, float], tuple[float, float]]

# Grid points per axis: the evaluated surface, and the loss curve of a one-parameter model.
PLANE_POINTS = {"closed-form": 101, "matmul": 101, "vmap": 61}
CURVE_POINTS = 401
# The loss curve's preview: every tenth of its points, part of the full curve.
CURVE_COARSE = 41
# Li et al. draw filter-normalised planes over [-1, 1]: a step of the weights' own size.
RANDOM_HALF_WIDTH = 1.0


def validated(scenario: Scenario) -> Scenario:
    """Check an edited scenario as strictly as a file: write it as TOML and read it back."""
    from dataclasses import replace

    from gradviz.engine.scenario import dumps_scenario, loads_scenario

    where = str(scenario.path or scenario.name)
    return replace(loads_scenario(dumps_scenario(scenario), where, scenario.name), path=scenario.path)


@dataclass(frozen=True)
class PlaneJob:
    """A plane and the evaluator of its loss, made on the lab's thread and evaluated on another."""

    kind: str
    plane: Plane
    extent: Extent
    loss: PointLoss
    n: int
    note: str
    loss_name: str
    paths: tuple[PlanePath, ...] | None = None


def plane_kinds(info: LabInfo) -> list[tuple[str, str]]:
    """The plane kinds that make sense for a lab's model, as (kind, label), the default first.

    The scenario's lesson picks the default: the plane along the two parameters it
    names, or a kind; a lesson that leaves the surface out gets none.
    """
    lesson = info.scenario.lesson
    if info.surface is not None or (lesson is not None and lesson.surface == "none"):
        return []
    n = info.parameter_count
    if n <= 1:
        return [("curve", "Loss curve over the parameter")]
    kinds = []
    run = info.runs[0]
    x, y = axes_of(run.names, run.shapes, lesson)
    if x is not None and y is not None:
        kinds.append(("axes", f"{x} × {y} (the rest fixed)"))
    kinds.append(("random", "Random directions (filter-normalised)"))
    kinds.append(("pca", "Principal components of the path"))
    if len(info.runs) >= 2:
        kinds.append(("three-points", f"Start, {run.name}, {info.runs[1].name}"))
    if lesson is not None and lesson.surface in dict(kinds):
        kinds.sort(key=lambda k: k[0] != lesson.surface)
    return kinds


def axes_of(
    names: Sequence[str], shapes: Sequence[tuple[int, ...]], lesson: Lesson | None
) -> tuple[str | None, str | None]:
    """The two one-element parameters an axes plane is drawn along: the lesson's, or the first two."""
    scalars = [name for name, shape in zip(names, shapes, strict=True) if int(np.prod(shape)) == 1]
    if lesson is not None and lesson.surface_axes and all(a in scalars for a in lesson.surface_axes):
        return lesson.surface_axes
    if len(scalars) == len(names) and len(scalars) >= 2:
        return scalars[0], scalars[1]
    return None, None


def make_plane(lab: Lab, kind: str, run: str) -> Plane:
    """A plane of ``kind`` through ``run``'s weights; reads the live run (call it on the lab's thread).

    Raises
    ------
    UserError
        When the plane does not exist yet (a path that has not moved, runs on one line).
    """
    from gradviz.engine import landscape
    from gradviz.engine.errors import UserError

    layout = lab.run(run).layout
    if kind == "curve":
        # One parameter: its own axis; the second direction is zero, so coordinates are (w, 0).
        return landscape.Plane("curve", layout, np.zeros(1), np.array([[1.0], [0.0]]), (layout.names[0], ""))
    if kind == "axes":
        names = axes_of(layout.names, layout.shapes, lab.scenario.lesson)
        if names[0] is None or names[1] is None:
            raise UserError("This model has no two one-number parameters to draw a plane along.")
        starts = np.cumsum((0, *layout.sizes))
        at = [int(starts[layout.names.index(n)]) for n in names]
        centre = landscape.current_params(lab.run(run))
        dirs = np.zeros((2, layout.total))
        dirs[0, at[0]] = dirs[1, at[1]] = 1.0
        # The two axes keep their own values: the centre is zero along them.
        centre[at] = 0.0
        return landscape.Plane("axes", layout, centre, dirs, (names[0], names[1]))
    return landscape.plane_for(lab, run, kind)  # type: ignore[arg-type]


def fit_range(lab: Lab, plane: Plane, kind: str) -> Extent:
    """A range of plane coordinates that holds every run's recorded path, with a margin."""
    from gradviz.engine import landscape

    coords = [landscape.project(plane, landscape.trajectory(lab, r.name)).coords for r in lab.runs]
    pts = np.concatenate(coords)
    # Before the first step a path is one point: show a neighbourhood the size of its distance travelled
    # so far, at least a unit of the parameters themselves (axes, curve) or a tenth of the weights' norm.
    scale = float(np.linalg.norm(plane.centre)) if kind in ("pca", "three-points") else 10.0
    (x0, x1), (y0, y1) = landscape.fit_extent(pts, margin=0.3, minimum=max(0.05, 0.1 * scale))
    if kind == "random":
        x0, x1 = min(x0, -RANDOM_HALF_WIDTH), max(x1, RANDOM_HALF_WIDTH)
        y0, y1 = min(y0, -RANDOM_HALF_WIDTH), max(y1, RANDOM_HALF_WIDTH)
    if kind == "curve":
        half = max((x1 - x0) / 2, 0.5)
        mid = (x0 + x1) / 2
        return (mid - half, mid + half), (0.0, 0.0)
    return (x0, x1), (y0, y1)


def plane_path(lab: Lab, run: str, plane: Plane) -> PlanePath:
    """``run``'s whole path so far projected onto ``plane``: the start, then the parameters after
    every step (the thinned past's replayed), and the point each op leaves the run at."""
    from gradviz.engine import landscape

    h = lab.history[run]
    r = lab.runs.index(lab.run(run))
    steps_at = np.array([getattr(row[r], "op", None) == "step" for row in lab.schedule])
    ticks = np.asarray(h.ticks, dtype=np.int64)
    op_points = np.cumsum(steps_at[ticks % lab.ticks_per_iteration])
    start = landscape.project(plane, lab.initial(run).param_flat)
    parts = [start, *(landscape.project(plane, block) for block in lab.step_params(run))]
    coords = np.concatenate([p.coords for p in parts])
    residuals = np.concatenate([p.residuals for p in parts])
    return PlanePath(op_points, coords, residuals)


def plan_job(lab: Lab, request: PlaneRequest, fallback: str) -> PlaneJob:
    """The plane (new, or the request's) and its loss evaluator; falls back to ``fallback`` on UserError."""
    from gradviz.engine import landscape
    from gradviz.engine.errors import UserError

    run = lab.runs[0]
    note = ""
    kind = request.kind
    plane = request.plane
    if plane is None:
        try:
            plane = make_plane(lab, kind, run.name)
        except UserError as exc:
            if kind == fallback:
                raise
            note = f"{exc} Showing {fallback} directions meanwhile."
            kind = fallback
            plane = make_plane(lab, kind, run.name)
    extent = request.extent or fit_range(lab, plane, kind)
    loss = landscape.point_loss(lab, run.name, plane, iteration=lab.iteration)
    phases = list(run.phases)
    loss_name = f"{phases[0]}'s loss" if len(phases) > 1 and phases[0] else "loss"
    n = CURVE_POINTS if kind == "curve" else PLANE_POINTS.get(loss.method, 61)
    # A new plane: the window redraws every path on it, from the lab's own (it keeps the recent past only).
    paths = None
    if request.plane is None and lab.mode == "full":
        paths = tuple(plane_path(lab, r.name, plane) for r in lab.runs)
    return PlaneJob(kind, plane, extent, loss, n, note, loss_name, paths)


def evaluate_job(job: PlaneJob, cancelled: Callable[[], bool]) -> Iterator[PlaneSurface]:
    """The loss over the job's grid: a coarse grid first, then the full one; stops when cancelled."""
    from gradviz.engine.landscape import evaluate_grid

    curve = job.kind == "curve"
    grids = evaluate_grid(
        job.loss,
        job.plane.labels,
        job.n,
        job.extent,
        progressive=True,
        coarse=CURVE_COARSE if curve else None,
        cancelled=cancelled,
        curve=curve,
    )
    for grid in grids:
        yield PlaneSurface(
            kind=job.kind,
            plane=job.plane,
            xs=grid.xs,
            ys=grid.ys,
            Z=grid.Z,
            final=grid.final,
            note=job.note,
            loss_name=job.loss_name,
            elapsed=grid.elapsed,
            method=grid.method,
            paths=job.paths,
        )


class SurfaceWorker(QObject):
    """Evaluates plane jobs on its own thread; a newer request cancels the one in progress.

    ``latest`` is written by the GUI thread (a plain int, so the write is atomic);
    the evaluation checks it between chunks of grid points.
    """

    computed = Signal(object, int)
    failed = Signal(str, int)

    def __init__(self) -> None:
        super().__init__()
        self.latest = 0

    @Slot(object, int)
    def compute(self, job: Any, generation: int) -> None:
        """Evaluate ``job`` and emit each grid; results of a superseded ``generation`` are not sent."""
        try:
            for surface in evaluate_job(job, lambda: self.latest != generation):
                if self.latest != generation:
                    return
                self.computed.emit(surface, generation)
        except Exception as exc:
            self.failed.emit(f"The surface could not be computed ({type(exc).__name__}: {exc}).", generation)


class LabWorker(QObject):
    """Owns one :class:`~gradviz.engine.lab.Lab` at a time; lives on the worker thread."""

    built = Signal(object, int)
    stepped = Signal(object, int)
    was_reset = Signal(int)
    fetched = Signal(object, int)
    failed = Signal(str, int)
    planned = Signal(object, int)
    plan_failed = Signal(str, int)
    revealed = Signal(object, int)
    graph_replayed = Signal(object, int)

    def __init__(self) -> None:
        super().__init__()
        self.lab: Lab | None = None
        self.info: LabInfo | None = None
        self.generation = -1
        self._known: dict[str, int] = {}
        self.capturing = False
        # (run, tick) -> the graph its forward built or its backward walked, until sent.
        self._graphs: dict[tuple[str, int], Any] = {}

    # --------------------------------------------------------------- build
    @Slot()
    def warm(self) -> None:
        """Import torch and ``torch._dynamo`` ahead of the first lab, while the window paints.

        The first optimizer a process builds imports ``torch._dynamo`` (over a second);
        done here first, a lab asked for later is built that much sooner. What the imports
        left is then set aside from the garbage collector
        (:func:`~gradviz.engine.collector.set_aside_imports`).
        """
        import torch._dynamo  # noqa: F401

        from gradviz.engine.collector import set_aside_imports

        set_aside_imports()

    @Slot(object, int, int, object)
    def build(self, source: Any, generation: int, until_tick: int, restore: Any) -> None:
        """Load ``source`` (a name, a path or a Scenario), build its lab, step to ``until_tick``.

        ``restore`` maps run names to the loop order that re-enabling zero_grad gives
        (the code panel shows those lines greyed out where they would go).
        """
        from gradviz.engine.errors import UserError

        try:
            self._build(source, restore or {})
        except UserError as exc:
            self.failed.emit(str(exc), generation)
            return
        except Exception as exc:
            self.failed.emit(f"The scenario could not be built ({type(exc).__name__}: {exc}).", generation)
            return
        # Only a lab that was built replaces the one the controller is stepping.
        self.generation = generation
        self.built.emit(self.info, generation)
        if until_tick >= 0:
            self.step(until_tick, generation)

    def _build(self, source: Any, restore: dict[str, tuple[str, ...]]) -> None:
        from gradviz.engine.lab import Lab, set_threads
        from gradviz.engine.scenario import Scenario, load_scenario

        # One intra-op thread: faster for small models and leaves a core to the GUI.
        set_threads(1)
        scenario = validated(source) if isinstance(source, Scenario) else load_scenario(str(source))
        lab = Lab(scenario)
        self.lab = lab
        self._known = {r.name: 0 for r in lab.runs}
        self.info = describe_lab(lab, restore)
        self.capture_graphs(self.capturing)

    @Slot(bool)
    def capture_graphs(self, on: bool) -> None:
        """Watch (or stop watching) every run's autograd graphs: only while a graph is shown."""
        from gradviz.engine.graph import VIEW_VALUES, GraphCapture

        self.capturing = on
        self._graphs.clear()
        for run in self.lab.runs if self.lab is not None else ():
            if run.graph_observer is not None:
                run.graph_observer.close()  # its hooks go with it
            run.graph_observer = GraphCapture(values=VIEW_VALUES, lazy=True) if on else None

    def _keep_graphs(self, since: int) -> None:
        """Make the graph of each run's newest forward or backward since the last call (plain data, no
        tensors) and keep it with that op's tick, where it lies at or after tick ``since`` (this
        request's ops); the graphs of the ops before it are not made."""
        lab = self.lab
        assert lab is not None
        tpi = lab.ticks_per_iteration
        for r, run in enumerate(lab.runs):
            capture = run.graph_observer
            got = capture.newest() if capture is not None else None
            if got is None:
                continue
            iteration, slot, graph = got
            tick = next(t for t in range(tpi) if lab.schedule[t][r] is slot) + iteration * tpi
            if tick >= since:
                self._graphs[(run.name, tick)] = graph

    # ---------------------------------------------------------------- step
    @Slot(int, int, float)
    def step(self, until_tick: int, generation: int, budget: float = 0.0) -> None:
        """Perform one tick (``until_tick < 0``) or every tick up to ``until_tick``.

        With a ``budget`` (seconds), go on tick after tick until it is spent, stopping
        at ``until_tick`` all the same; one result carries them all.
        """
        lab = self.lab
        if lab is None or generation != self.generation:
            return
        distance: list[tuple[int, tuple[float, ...]]] = []
        # The scenario's iterations are as far as a lab goes.
        tpi = lab.ticks_per_iteration
        end = lab.scenario.iterations * tpi
        deadline = time.perf_counter() + budget
        # One op at a time, or up to a tick (an iteration, an export's ops): each op's graph is made;
        # at full-speed Play (a budget) only each run's newest, once the ops are done: it is all a
        # frame draws, and the graph view has the lab walk again any other it comes to show.
        every = self.capturing and budget <= 0
        since = lab.tick
        # A lab that keeps no full records records the ops the window is about to show as they
        # run: a request's last op and, at full speed, once the budget is spent, the whole next
        # iteration (every record a moment after its last op reads).
        light = lab.mode == "light"
        recorded_from: int | None = None
        made: dict[tuple[str, int], OpRecord] = {}
        try:
            while not lab.stopped and lab.tick < end:
                last = (until_tick >= 0 and lab.tick >= until_tick) or (budget <= 0 and until_tick < 0)
                if light and (last or (recorded_from is not None and lab.tick >= recorded_from)):
                    made.update({(rec.run, rec.index): rec for rec in lab.step(end)})
                else:
                    lab.advance(end)
                if every:
                    self._keep_graphs(since)
                distance.append((lab.tick - 1, self._distances()))
                if 0 <= until_tick < lab.tick or (budget <= 0 and until_tick < 0):
                    break
                if budget > 0 and recorded_from is None and time.perf_counter() >= deadline:
                    if not light:
                        break
                    recorded_from = -(-lab.tick // tpi) * tpi  # the next iteration's first tick
                if recorded_from is not None and lab.tick >= recorded_from + tpi:
                    break
            if self.capturing and not every:
                self._keep_graphs(since)
            result = self._result(distance, made)
        except Exception as exc:
            self.failed.emit(f"The op failed inside gradviz ({type(exc).__name__}: {exc}).", generation)
            return
        self.stepped.emit(result, generation)

    def _distances(self) -> tuple[float, ...]:
        """Each run's distance in weight space from the first run, after every tick."""
        import torch

        assert self.lab is not None
        runs = self.lab.runs
        if len(runs) == 1:  # nothing to measure: no copy of a (maybe large) model's weights each tick
            return ()
        with torch.no_grad():
            base = torch.cat([p.detach().reshape(-1).double() for p in runs[0].tensors])
            return tuple(
                float(
                    torch.linalg.vector_norm(
                        torch.cat([p.detach().reshape(-1).double() for p in r.tensors]) - base
                    )
                )
                for r in runs[1:]
            )

    def _result(
        self, distance: list[tuple[int, tuple[float, ...]]], made: dict[tuple[str, int], OpRecord]
    ) -> StepResult:
        from gradviz.engine.surface import preview_step

        lab = self.lab
        info = self.info
        assert lab is not None and info is not None
        tpi = lab.ticks_per_iteration
        entries = entries_since(lab, self._known, self._graphs)
        previews = {}
        for r, run in enumerate(lab.runs):
            self._known[run.name] = len(lab.history[run.name])
            if info.surface is not None and run.active:
                nxt = lab.schedule[lab.tick % tpi][r]
                if nxt is not None and nxt.op == "step":
                    preview = preview_step(run)
                    if preview is not None:
                        previews[run.name] = preview
        return StepResult(
            entries=entries,
            distance=tuple(distance),
            errors={r.name: r.error for r in lab.runs},
            preview_tick=lab.tick - 1,
            previews=previews,
            stopped=lab.stopped,
            records=made,
        )

    # --------------------------------------------------------------- reset
    @Slot(int)
    def reset(self, generation: int) -> None:
        """Go back to the start of the lab (the same initial weights and batches)."""
        if self.lab is None or generation != self.generation:
            return
        self.lab.seek(-1)
        self._known = {r.name: 0 for r in self.lab.runs}
        self.capture_graphs(self.capturing)  # fresh captures: nothing seen before the reset is kept
        self.was_reset.emit(generation)

    # --------------------------------------------------------------- fetch
    @Slot(object, int)
    def fetch(self, keys: Any, generation: int) -> None:
        """Rebuild full records (run name, op index) that a large model keeps only as scalars."""
        lab = self.lab
        if lab is None or generation != self.generation:
            return
        out = {}
        # In order, so that each rebuild goes on from the one before (see Lab.record).
        for run, index in sorted(keys):
            if index < len(lab.history[run]):
                out[(run, index)] = lab.record(run, index)
        self.fetched.emit(out, generation)

    # -------------------------------------------------------------- reveal
    @Slot(object, int)
    def reveal(self, request: Any, generation: int) -> None:
        """The reveals of a stop's questions: ``request`` is (stop index, answers by question).

        Computed here, from the lab's own records, once the lab has performed the stop.
        """
        from gradviz.engine.quiz import reveal

        lab, info = self.lab, self.info
        if lab is None or info is None or generation != self.generation:
            return
        index, answers = request
        placed = info.stops[index]
        try:
            out = tuple(
                reveal(lab, placed, q, answers[i] if i < len(answers) else None)
                for i, q in enumerate(placed.stop.questions)
            )
        except Exception as exc:
            self.failed.emit(f"The answers could not be computed ({type(exc).__name__}: {exc}).", generation)
            return
        self.revealed.emit((index, out), generation)

    # --------------------------------------------------------- graph replay
    @Slot(object, int)
    def replay_graph(self, request: Any, generation: int) -> None:
        """Walk again the graph of the forward or backward ``request = (run, tick)`` performed, on a copy
        of the run (:func:`~gradviz.engine.graph.replay_graph`); answers ``(run, tick, graph or None)``."""
        from gradviz.engine.graph import VIEW_VALUES, replay_graph

        lab = self.lab
        if lab is None or generation != self.generation:
            return
        run, tick = request
        graph = None
        if tick < lab.tick:  # not forgotten by a reset since it was asked for
            try:
                graph = replay_graph(lab, run, tick, VIEW_VALUES)  # as the view's capture makes it
            except Exception:
                graph = None  # the view then says what the records tell
        self.graph_replayed.emit((run, tick, graph), generation)

    # ---------------------------------------------------------------- plan
    @Slot(object, int, int, str)
    def plan(self, request: Any, plane_generation: int, lab_generation: int, fallback: str) -> None:
        """Make the plane and loss evaluator of ``request`` for the current lab."""
        from gradviz.engine.errors import UserError

        lab = self.lab
        if lab is None or lab_generation != self.generation:
            return
        try:
            job = plan_job(lab, request, fallback)
        except UserError as exc:
            self.plan_failed.emit(str(exc), plane_generation)
            return
        except Exception as exc:
            self.plan_failed.emit(f"No plane could be made ({type(exc).__name__}: {exc}).", plane_generation)
            return
        self.planned.emit(job, plane_generation)
