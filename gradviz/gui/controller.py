"""The controller: turns user requests into worker jobs and keeps the cursor the views draw.

Requests made while the worker is busy are dropped rather than queued, so a
burst of key presses never leaves a backlog of stale ops. During Play the next
op is asked for only when the previous one is back. At full speed the worker
performs as many ops as fit in what is left of a frame, and is asked again only
once the window has shown that frame: drawing and stepping take turns instead of
competing for the interpreter, and the ops between two frames are never drawn one by one.
While Play runs the garbage collector's full collections wait for the pause (see
:mod:`gradviz.engine.collector`), and the heap's free pages go back to the system every half
a minute and at the pause (:mod:`gradviz.gui.heap`).

Surfaces over planes go the other way: a new request supersedes the one in
flight (its generation number rises, the old evaluation stops at its next
chunk, and anything it still sends is dropped).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QThread, QTimer, Signal

from gradviz.engine.collector import hold_full_collections
from gradviz.gui.heap import release_freed
from gradviz.gui.window_history import LabInfo, Moment, PlaneRequest, StepResult, WindowHistory
from gradviz.gui.worker import LabWorker, SurfaceWorker

if TYPE_CHECKING:
    from gradviz.engine.scenario import Scenario
    from gradviz.watch.replay import Replay

SPEEDS = (1, 2, 4, 8, 15, 30, 0)  # ops per second; 0: as fast as the worker goes
# At full speed the worker steps for what is left of each frame once it is drawn and the ops are
# handed over, so that frames come at the screen's rate; and for at least this share of the time a
# frame took to draw, and this least share of a frame: Play goes on however slow drawing is.
WORKER_SHARE = 0.5
WORKER_LEAST = 0.25
# How fast the estimate of a hand-over (the worker's last op and reply, and its signal) follows
# the newest measure: slowly enough that one late reply does not shrink the next batch much.
HANDOVER_WEIGHT = 0.2
# How long the worker waits for a frame to be shown before it steps on regardless (a hidden
# window paints nothing), and how long it then steps.
FRAME_WAIT = 0.1
BATCH_LEAST = 0.002
# While Play runs, the heap's free pages go back to the system this often (see gui/heap.py).
RELEASE_EVERY = 30.0


class Controller(QObject):
    """Owns the worker (on its own thread, or inline for offscreen rendering) and the cursor.

    Parameters
    ----------
    threaded:
        Run ops on a worker thread (the app) or inline, synchronously (snapshots).
    """

    lab_changed = Signal(object)
    changed = Signal()
    busy_changed = Signal(bool)
    playing_changed = Signal(bool)
    failed = Signal(str)
    plane_ready = Signal(object)
    plane_failed = Signal(str)
    plane_busy = Signal(bool)
    revealed = Signal(object)
    graph_replayed = Signal(object)

    _build = Signal(object, int, int, object)
    _step = Signal(int, int, float)
    _reset = Signal(int)
    _fetch = Signal(object, int)
    _plan = Signal(object, int, int, str)
    _evaluate = Signal(object, int)
    _reveal = Signal(object, int)
    _capture = Signal(bool)
    _replay_graph = Signal(object, int)
    _warm = Signal()

    def __init__(self, threaded: bool = True, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.worker = LabWorker()
        self.lab_thread: QThread | None = None
        if threaded:
            self.lab_thread = QThread()
            self.lab_thread.setObjectName("gradviz-lab")
            self.worker.moveToThread(self.lab_thread)
            self.lab_thread.start()
            self._warm.connect(self.worker.warm)
        self.surface_worker = SurfaceWorker()
        self.surface_thread: QThread | None = None
        if threaded:
            self.surface_thread = QThread()
            self.surface_thread.setObjectName("gradviz-surface")
            self.surface_worker.moveToThread(self.surface_thread)
            self.surface_thread.start()
        self._plan.connect(self.worker.plan)
        self._evaluate.connect(self.surface_worker.compute)
        self.worker.planned.connect(self._on_planned)
        self.worker.plan_failed.connect(self._on_plane_failed)
        self.surface_worker.computed.connect(self._on_plane)
        self.surface_worker.failed.connect(self._on_plane_failed)
        self.plane_generation = 0
        self.plane_pending = False
        self._build.connect(self.worker.build)
        self._step.connect(self.worker.step)
        self._reset.connect(self.worker.reset)
        self._fetch.connect(self.worker.fetch)
        self.worker.built.connect(self._on_built)
        self.worker.stepped.connect(self._on_stepped)
        self.worker.was_reset.connect(self._on_reset)
        self.worker.fetched.connect(self._on_fetched)
        self.worker.failed.connect(self._on_failed)
        self._reveal.connect(self.worker.reveal)
        self.worker.revealed.connect(self._on_revealed)
        self._capture.connect(self.worker.capture_graphs)
        self._replay_graph.connect(self.worker.replay_graph)
        self.worker.graph_replayed.connect(self._on_graph_replayed)
        self._play_until: int | None = None

        self.info: LabInfo | None = None
        self.history: WindowHistory | None = None
        # A recording replayed: its history is whole from the start, no lab behind it.
        self.replay: Replay | None = None
        self.cursor = -1
        self.generation = 0
        self._lab_generation = 0
        self.busy = False
        self.playing = False
        self.speed = 4
        self._fetching = False
        self._fetched_for = -1  # the cursor the records being rebuilt are for
        self._replaying = False
        self._last_play_step = 0.0
        self._play_timer = QTimer(self)
        self._play_timer.setSingleShot(True)
        self._play_timer.timeout.connect(self._play_next)
        # Full-speed Play: seconds of ops the next request may take, and whether it waits for a frame.
        self._batch = BATCH_LEAST
        self._handover = BATCH_LEAST  # about how long after its batch the worker's ops come
        self._awaiting_frame = False
        self._frame_wait = QTimer(self)
        self._frame_wait.setSingleShot(True)
        self._frame_wait.timeout.connect(lambda: self.frame_shown(0.0, BATCH_LEAST))
        self._release = QTimer(self)
        self._release.setInterval(int(RELEASE_EVERY * 1000))
        self._release.timeout.connect(release_freed)

    # ------------------------------------------------------------ lifetime
    def shutdown(self) -> None:
        """Stop playing and end the worker threads (waits for the op in flight)."""
        self.pause()
        self.cancel_plane()
        for thread in (self.lab_thread, self.surface_thread):
            if thread is not None:
                thread.quit()
                thread.wait(5000)
        self.lab_thread = self.surface_thread = None

    def capture_graphs(self, on: bool) -> None:
        """Have the worker capture autograd graphs from the next op on (a graph view is shown), or stop."""
        self._capture.emit(on)

    def warm(self) -> None:
        """Have the worker import torch and ``torch._dynamo`` now (the window calls it once it shows)."""
        if self.lab_thread is not None:
            self._warm.emit()

    def _set_busy(self, busy: bool) -> None:
        if busy != self.busy:
            self.busy = busy
            self.busy_changed.emit(busy)

    # ---------------------------------------------------------------- labs
    def open(
        self,
        source: str | Scenario,
        replay_iterations: int = 0,
        restore: dict[str, tuple[str, ...]] | None = None,
    ) -> None:
        """Build a new lab from a name, a path or a Scenario; optionally step it ``replay_iterations``.

        ``restore`` maps run names to the loop order used when zero_grad is switched back on.
        A recording of ``gradviz watch`` (see :func:`gradviz.watch.replay.is_recording`) is replayed.
        """
        from gradviz.watch.replay import is_recording

        if is_recording(source):
            assert isinstance(source, str)
            self.open_recording(source)
            return
        self.pause()
        self.cancel_plane()
        self.generation += 1
        self._set_busy(True)
        until = -1
        if replay_iterations > 0 and self.info is not None:
            until = replay_iterations * self.info.ticks_per_iteration - 1
        self._replaying = until >= 0
        self._build.emit(source, self.generation, until, dict(restore or {}))

    def open_recording(self, path: str) -> None:
        """Replay the recording at ``path``: every op is in the history at once; stepping moves the cursor.

        A bad recording is one sentence through :attr:`failed`; whatever was open stays.
        """
        from gradviz.engine.errors import UserError
        from gradviz.watch.replay import load_replay

        self.pause()
        self.cancel_plane()
        try:
            replay = load_replay(path)
        except UserError as exc:
            self.failed.emit(str(exc))
            return
        self.generation += 1
        self._lab_generation = self.generation
        self.replay = replay
        self.info, self.history, self.cursor = replay.info, replay.history, -1
        self._set_busy(False)
        self.lab_changed.emit(replay.info)
        self.changed.emit()

    def restart_with(self, scenario: Scenario, restore: dict[str, tuple[str, ...]] | None = None) -> None:
        """Rebuild with an edited scenario, from the same initial weights, back at this iteration."""
        if self.replay is not None:
            return  # a recording has no scenario to edit
        iterations = 0
        if self.info is not None and self.cursor >= 0:
            iterations = (
                self.cursor + 1 + self.info.ticks_per_iteration - 1
            ) // self.info.ticks_per_iteration
        self.open(scenario, iterations, restore)

    def _on_built(self, info: LabInfo, generation: int) -> None:
        if generation != self.generation:
            return
        self._lab_generation = generation
        self.replay = None
        self.info = info
        self.history = WindowHistory(info)
        self.cursor = -1
        # When the worker steps on to replay the old iteration, the lab stays busy until it is back.
        self._set_busy(self._replaying)
        self._replaying = False
        self.lab_changed.emit(info)
        self.changed.emit()

    def _on_failed(self, message: str, generation: int) -> None:
        if generation != self.generation:
            return
        # A failed build leaves the previous lab in place: keep talking to it.
        self.generation = self._lab_generation
        self.pause()
        self._set_busy(False)
        self.failed.emit(message)

    # -------------------------------------------------------------- moving
    def moment(self) -> Moment | None:
        """The moment the views should draw now, or None before a lab is built."""
        if self.info is None or self.history is None:
            return None
        return Moment(self.info, self.history, self.cursor, self.playing)

    @property
    def at_end(self) -> bool:
        return self.history is None or self.cursor >= self.history.last_tick

    @property
    def last_tick(self) -> int:
        """The scenario's last tick: stepping stops there (its iterations set how long a lab runs)."""
        if self.info is None:
            return -1
        return self.info.scenario.iterations * self.info.ticks_per_iteration - 1

    @property
    def finished(self) -> bool:
        """True when every op of the scenario's iterations has been performed and shown."""
        return self.history is not None and self.at_end and self.history.last_tick >= self.last_tick

    def _can_step_on(self) -> bool:
        """Whether the lab may perform another op: not every run stopped, not past the scenario's end."""
        assert self.history is not None
        return not self.history.stopped and not self.finished

    def _move(self, tick: int) -> None:
        if tick != self.cursor:
            self.cursor = tick
            self._stop_where_asked()
            self.changed.emit()
            self._fetch_missing()

    def _stop_where_asked(self) -> None:
        """Pause on arriving where :meth:`play_until` was asked to go."""
        if self.playing and self._play_until is not None and self.cursor >= self._play_until:
            self.pause()

    def next_op(self) -> bool:
        """Show the next op: from history after scrubbing back, else perform it. False if busy."""
        if self.history is None or self.busy:
            return False
        if not self.at_end:
            nxt = self.history.next_op_tick(self.cursor)
            if nxt is not None:
                self._move(nxt)
            return True
        if not self._can_step_on():
            return False
        self._submit(-1)
        return True

    def next_iteration(self) -> bool:
        """Show or perform ops up to the end of the current iteration."""
        if self.history is None or self.info is None or self.busy:
            return False
        tpi = self.info.ticks_per_iteration
        end = min(((self.cursor + 1) // tpi + 1) * tpi - 1, self.last_tick)
        if self.history.last_tick >= end:
            self._move(self.history.snap(end))
            return True
        self._move(self.history.last_tick)
        if not self._can_step_on():
            return False
        self._submit(end)
        return True

    def prev_op(self) -> bool:
        """Go back one op (history stays; stepping on shows it again)."""
        if self.history is None or self.busy or self.cursor < 0:
            return False
        self._move(self.history.prev_op_tick(self.cursor))
        return True

    def seek(self, tick: float) -> None:
        """Show the moment just after the op at (or before) ``tick``."""
        if self.history is None:
            return
        self._move(self.history.snap(min(tick, self.history.last_tick)))

    def reset(self) -> None:
        """Back to the start: same weights, same batches; the history is forgotten."""
        if self.info is None:
            return
        self.pause()
        if self.replay is not None:
            self._move(-1)
            return
        self._set_busy(True)
        self._reset.emit(self.generation)

    def _on_reset(self, generation: int) -> None:
        if generation != self.generation or self.history is None:
            return
        self.history.clear()
        self.cursor = -1
        self._set_busy(False)
        self.changed.emit()

    def _submit(self, until_tick: int, budget: float = 0.0) -> None:
        self._set_busy(True)
        self._step.emit(until_tick, self.generation, budget)

    def _on_stepped(self, result: StepResult, generation: int) -> None:
        if generation != self.generation or self.history is None:
            return
        self.history.extend(result)
        self.cursor = self.history.last_tick
        self._set_busy(False)
        self._stop_where_asked()
        self.changed.emit()
        if self.playing:
            if not self._can_step_on():
                self.pause()
            elif self._batching:
                # How long after its batch the ops came: the worker's last op and reply, and the signal.
                late = time.perf_counter() - self._last_play_step - self._batch
                self._handover += HANDOVER_WEIGHT * (min(max(late, 0.0), FRAME_WAIT) - self._handover)
                # The next ops wait until the window has shown these (or briefly, if it shows nothing).
                self._awaiting_frame = True
                self._frame_wait.start(int(FRAME_WAIT * 1000))
            else:
                self._schedule_play()
        else:
            self._fetch_missing()

    @property
    def _batching(self) -> bool:
        """Full-speed Play on a worker thread: many ops per request, in turns with the frames."""
        return self.speed <= 0 and self.lab_thread is not None

    def frame_shown(self, spent: float, interval: float) -> None:
        """The window has painted a frame that took it ``spent`` seconds; frames come every ``interval``.

        At full speed the worker steps on for what is left of the interval once this frame
        and the hand-over of the ops (measured, turn by turn) are taken out, so its ops arrive
        in time for the next frame; and for at least :data:`WORKER_SHARE` of ``spent`` and
        :data:`WORKER_LEAST` of the interval, so Play goes on however slowly frames are drawn.
        Where no frame came in time the worker is called with ``spent`` 0, and steps for ``interval``.
        """
        if not self._awaiting_frame:
            return
        self._awaiting_frame = False
        self._frame_wait.stop()
        if spent <= 0:
            self._batch = interval
        else:
            left = interval - spent - self._handover
            self._batch = max(left, WORKER_SHARE * spent, WORKER_LEAST * interval)
        self._play_next()

    # ----------------------------------------------------------------- fetch
    def _fetch_missing(self) -> None:
        if self.history is None or self._fetching:
            return
        if self.playing and not self.history.info.full_records:
            return  # rebuilding every op of a large model would hold Play back
        keys = self.history.missing(self.cursor)
        if keys:
            self._fetching = True
            self._fetched_for = self.cursor
            self._fetch.emit(keys, self.generation)

    def _on_fetched(self, records: dict[Any, Any], generation: int) -> None:
        self._fetching = False
        if generation != self.generation or self.history is None:
            return
        self.history.add_fetched(records)
        self.changed.emit()
        if self.cursor != self._fetched_for:  # it moved on meanwhile: what it is at now
            self._fetch_missing()

    # ------------------------------------------------------------------ play
    def set_speed(self, ops_per_second: int) -> None:
        """Play speed in ops per second; 0 plays as fast as the worker can step."""
        self.speed = ops_per_second

    def play(self) -> None:
        """Step on by itself until paused, or until every run stopped, or the scenario's length."""
        if self.playing or self.info is None or self.history is None:
            return
        if self.finished or (self.at_end and self.history.stopped):
            return
        self.playing = True
        hold_full_collections(True)
        self._release.start()
        self.playing_changed.emit(True)
        self._last_play_step = 0.0
        self._batch = BATCH_LEAST
        self._play_next()

    def play_until(self, tick: int) -> None:
        """Play (at the set speed) until the moment after ``tick``; a lesson moves between stops so."""
        if self.history is None or self.cursor >= tick:
            return
        self._play_until = tick
        self.play()

    def request_reveal(self, stop: int, answers: list[Any]) -> None:
        """Ask the lab for the reveals of stop ``stop``'s questions; :attr:`revealed` brings them."""
        self._reveal.emit((stop, list(answers)), self.generation)

    def _on_revealed(self, result: Any, generation: int) -> None:
        if generation == self.generation:
            self.revealed.emit(result)

    def request_graph(self, run: str, tick: int) -> None:
        """Have the lab walk again the graph of ``run``'s backward at ``tick`` (one that raised while
        no graph was captured); :attr:`graph_replayed` brings ``(run, tick, graph or None)``."""
        if self.replay is not None:  # a recording has no lab to walk it in
            self.graph_replayed.emit((run, tick, None))
            return
        self._replay_graph.emit((run, tick), self.generation)

    def _on_graph_replayed(self, result: Any, generation: int) -> None:
        if generation == self.generation:
            self.graph_replayed.emit(result)

    def pause(self) -> None:
        self._play_until = None
        if not self.playing:
            return
        self.playing = False
        hold_full_collections(False)
        self._release.stop()
        release_freed()
        self._play_timer.stop()
        self._awaiting_frame = False
        self._frame_wait.stop()
        self.playing_changed.emit(False)
        self._fetch_missing()
        self.changed.emit()

    def toggle_play(self) -> None:
        if self.playing:
            self.pause()
        else:
            self.play()

    def _schedule_play(self) -> None:
        interval = 0.0 if self.speed <= 0 else 1.0 / self.speed
        wait = max(0.0, interval - (time.perf_counter() - self._last_play_step))
        self._play_timer.start(int(wait * 1000))

    def _play_next(self) -> None:
        if not self.playing or self.history is None:
            return
        if self.finished or (self._play_until is not None and self.cursor >= self._play_until):
            self.pause()
            return
        self._last_play_step = time.perf_counter()
        if not self.at_end:
            nxt = self.history.next_op_tick(self.cursor)
            if nxt is not None:
                self._move(nxt)
            self._schedule_play()
            return
        if not self._can_step_on():
            self.pause()
            return
        if not self.busy:
            if not self._batching:
                self._submit(-1)
            else:
                until = -1 if self._play_until is None else self._play_until
                self._submit(until, self._batch)

    # --------------------------------------------------------------- planes
    def request_plane(self, request: PlaneRequest, fallback: str = "random") -> int:
        """Compute the loss over a plane for the current lab; supersedes any surface in flight.

        Parameters
        ----------
        request:
            The plane kind (or an existing plane with a new range).
        fallback:
            The kind used instead when ``request``'s plane does not exist yet.

        Returns
        -------
        int
            The request's generation; :attr:`plane_ready` carries only surfaces of the newest.
        """
        self.plane_generation += 1
        self.surface_worker.latest = self.plane_generation
        if self.replay is not None:
            self._replay_plane(request)
            return self.plane_generation
        self._set_plane_pending(True)
        self._plan.emit(request, self.plane_generation, self.generation, fallback)
        return self.plane_generation

    def _replay_plane(self, request: PlaneRequest) -> None:
        """A recording's plane: its path's principal components, with no loss over it."""
        from dataclasses import replace

        import numpy as np

        from gradviz.engine.errors import UserError
        from gradviz.watch.replay import path_surface

        assert self.replay is not None
        try:
            surface = path_surface(self.replay)
        except UserError as exc:
            self.plane_failed.emit(str(exc))
            return
        if request.plane is not None and request.extent is not None:  # the path left the range
            (x0, x1), (y0, y1) = request.extent
            xs, ys = np.linspace(x0, x1, 3), np.linspace(y0, y1, 3)
            surface = replace(surface, plane=request.plane, xs=xs, ys=ys)
        self.plane_ready.emit(surface)

    def cancel_plane(self) -> None:
        """Stop the surface in flight; whatever it still sends is dropped."""
        self.plane_generation += 1
        self.surface_worker.latest = self.plane_generation
        self._set_plane_pending(False)

    def _set_plane_pending(self, pending: bool) -> None:
        if pending != self.plane_pending:
            self.plane_pending = pending
            self.plane_busy.emit(pending)

    def _on_planned(self, job: Any, generation: int) -> None:
        if generation == self.plane_generation:
            self._evaluate.emit(job, generation)

    def _on_plane(self, surface: Any, generation: int) -> None:
        if generation != self.plane_generation:
            return
        if surface.final:
            self._set_plane_pending(False)
        self.plane_ready.emit(surface)

    def _on_plane_failed(self, message: str, generation: int) -> None:
        if generation != self.plane_generation:
            return
        self._set_plane_pending(False)
        self.plane_failed.emit(message)
