"""One export, read as a straight line: plan the frames, step the lab, draw each frame, encode.

:class:`ExportJob` is that line, written as a generator (:meth:`ExportJob.work`)
so that whoever drives it decides what happens between its steps: the command
line checks for Ctrl+C and draws its progress bar (:func:`export_animation`);
the window's Export dialog runs one step per turn of its event loop while
the lab is stepped and the plane computed on the controller's worker threads,
and the GIF is encoded on a thread of its own, so the window never blocks.

The pieces: :mod:`gradviz.export.plan` plans the frames;
:class:`~gradviz.gui.export_renderer.FrameRenderer` steps the lab and chooses
the views that fit; :class:`~gradviz.gui.export_frame.ExportFrame` draws a
moment with the shared layout; :mod:`gradviz.gui.export_lesson` turns a lesson
into shots; :mod:`gradviz.export` encodes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtGui import QImage

from gradviz.export.base import FrameWriter, Progress
from gradviz.export.interrupt import check_interrupt
from gradviz.export.plan import plan_frames
from gradviz.gui.display import frames_application
from gradviz.gui.export_frame import ExportFrame, FrameStyle, frame_colours, rgb_image
from gradviz.gui.export_lesson import Shot, lesson_shots, lesson_ticks
from gradviz.gui.export_renderer import FrameRenderer
from gradviz.gui.theme import theme_named

if TYPE_CHECKING:
    from gradviz.engine.scenario import Scenario

# A backward in an export with the graph view: at most this many frames, the last the whole traversal.
BACKWARD_FRAMES = 8

__all__ = ["ExportFrame", "ExportJob", "ExportRange", "FrameRenderer", "FrameStyle", "export_animation"]


@dataclass(frozen=True)
class ExportRange:
    """Which frames to export, as the command line's options give them (see :func:`plan_frames`).

    ``lesson`` exports the scenario's lesson instead: its stops, questions and reveals.
    """

    per_frame: str = "op"
    first: int | None = None
    last: int | None = None
    ops: int | None = None
    iterations: int | None = None
    lesson: bool = False


class ExportJob:
    """One export; :meth:`work` does it a step at a time, :meth:`cancel` stops it.

    Nothing appears at ``output`` before the work is done, and a previous file
    there stays intact until then.

    Parameters
    ----------
    scenario:
        A built-in name, a scenario file, or a Scenario (the window passes its edited one).
    output:
        ``*.gif``, ``*.mp4``, ``*.webm`` or a folder for numbered PNGs.
    style:
        How the frames look.
    fps:
        Frames per second.
    frames:
        Which ops or iterations become frames, or the lesson.
    threaded:
        Step the lab, compute the plane and encode on threads (a window); inline
        otherwise (the command line).
    preview:
        Stop after the first frame and write nothing.

    Raises
    ------
    UserError
        At once for an output that cannot be written or a frame rate a GIF cannot
        play; from :meth:`work` for a scenario that cannot be built, a bad range, a
        scenario without a lesson, or a size too small for the views.
    """

    def __init__(
        self,
        scenario: str | Scenario,
        output: str | Path,
        *,
        style: FrameStyle,
        fps: float,
        frames: ExportRange = ExportRange(),
        threaded: bool = False,
        preview: bool = False,
    ) -> None:
        from gradviz.engine.errors import UserError
        from gradviz.export import MAX_GIF_FPS, check_output

        self.output = check_output(output)
        if not 0 < fps <= 60:
            raise UserError(f"--fps must be more than 0 and at most 60, not {fps:g}.")
        if self.output.kind == "gif" and fps > MAX_GIF_FPS:
            raise UserError(
                f"GIFs play at most {MAX_GIF_FPS:g} frames per second (browsers slow faster ones down); "
                f"use --fps {MAX_GIF_FPS:g} or less, or an .mp4."
            )
        self.scenario = scenario
        self.style = style
        self.fps = fps
        self.range = frames
        self.threaded = threaded
        self.preview_only = preview
        frames_application(style.views, style.theme, style.point_size)
        self.renderer = FrameRenderer(scenario, style, threaded=threaded)
        self.writer: FrameWriter | None = None
        self.first_frame: np.ndarray | None = None
        self.shots: list[Shot] = []  # what the frames show, known once the lab is built
        self.total = 0  # frames planned, known once the lab is built
        self.done = 0
        self.phase = "prepare"  # then "render", "encode"
        self.written: Path | None = None
        self.closed = False
        self._cancelled = False
        self._first_tick = -1
        self._notes: list[str] = []  # sentences for stderr about what the export changed
        self._encoder: threading.Thread | None = None

    # ------------------------------------------------------------ the line
    def work(self, progress: Progress | None = None) -> Generator[None, None, None]:
        """Do the export, yielding between steps; :attr:`written` holds the output at the end.

        ``progress(done, total)`` is told of every frame encoded; it may raise to cancel.
        """
        try:
            renderer = self.renderer
            yield from renderer.open()
            shots = yield from self._plan()
            yield from renderer.prepare(sorted({s.tick for s in shots}))
            shots = yield from self._within_backwards(shots)
            if not self.preview_only:
                self.writer = self._open_writer()
            self.phase = "render"
            yield from self._draw(shots)
            if self.preview_only:
                return
            self.phase = "encode"
            yield from self._encode(progress)
        except BaseException:
            self.cancel()
            raise
        finally:
            self.close()

    def _plan(self) -> Generator[None, None, list[Shot]]:
        """The frames to draw: the range asked for, one per op or iteration, or the lesson's shots."""
        r = self.range
        renderer = self.renderer
        if r.lesson:
            stops = renderer.info.stops
            if not stops:
                from gradviz.engine.errors import UserError

                name = renderer.info.scenario.name
                raise UserError(f"{name} has no lesson stops to export; leave out --lesson.")
            yield from renderer.step_to(lesson_ticks(stops))
            for i, placed in enumerate(stops):
                if placed.stop.questions and placed.tick <= renderer.last_tick:
                    yield from renderer.reveals(i)
            history = renderer.controller.history
            assert history is not None
            reached = [p for p in stops if p.tick <= renderer.last_tick]
            shots = lesson_shots(reached, history.snap, renderer.revealed, self.fps)
        else:
            plan = plan_frames(
                renderer.ticks_per_iteration,
                per_frame=r.per_frame,
                first=r.first,
                last=r.last,
                ops=r.ops,
                iterations=r.iterations,
                default_iterations=renderer.info.scenario.iterations,
            )
            self._first_tick = plan.tick_of(plan.first)
            end = renderer.controller.last_tick
            scenario = renderer.info.scenario
            ticks = list(plan.ticks())
            # A range wholly past the end is left as asked: drawing it says why nothing can be drawn.
            shots = [Shot(t) for t in ticks if t <= end] or [Shot(t) for t in ticks]
            if len(shots) < len(ticks):
                runs = "iteration" if scenario.iterations == 1 else "iterations"
                self._notes.append(
                    f"{scenario.name} has {end + 1} ops ({scenario.iterations} {runs}); "
                    "the export stops at its last op."
                )
        self.total = sum(s.hold for s in shots)
        self.shots = shots
        return shots

    def _within_backwards(self, shots: list[Shot]) -> Generator[None, None, list[Shot]]:
        """Frames within each backward the graph view shows, in PyTorch's order: one per node ran,
        at most ``BACKWARD_FRAMES``, before the frame of the whole traversal (not in a lesson)."""
        graph = self.renderer.frame.shown_views().get("graph")
        if graph is None or self.range.lesson:
            return shots
        moment = self.renderer.moment()
        out = []
        for shot in shots:
            at = replace(moment, tick=shot.tick)
            while graph.wants_graph(at):  # type: ignore[attr-defined]  # one the window no longer keeps
                yield
            ran = graph.backward_length(at)  # type: ignore[attr-defined]
            parts = min(ran, BACKWARD_FRAMES)
            out += [replace(shot, hold=1, part=(k, parts)) for k in range(1, parts)]
            out.append(shot)
        self.total = sum(s.hold for s in out)
        self.shots = out
        return out

    def _open_writer(self) -> FrameWriter:
        from gradviz.export import open_writer

        return open_writer(
            self.output,
            self.style.size,
            self.fps,
            fixed_colours=frame_colours(theme_named(self.style.theme)),
            expected=self.total,
        )

    def _draw(self, shots: list[Shot]) -> Iterator[None]:
        """Draw each shot with the shared layout; stops early when every run has stopped."""
        from gradviz.engine.errors import UserError

        renderer = self.renderer
        end = renderer.last_tick
        shown: int | None = None
        graph = renderer.frame.shown_views().get("graph")
        for shot in shots:
            if graph is not None:
                graph.show_part(shot.part)  # type: ignore[attr-defined]
            tick = shot.tick
            if tick > end:
                # Every run diverged or failed before this frame: end on the moment it happened.
                if self.range.lesson or shown == end or end <= self._first_tick:
                    break
                tick = end
            yield from renderer.show(tick)
            self._add(renderer.render(shot.card, shot.caption, shot.reads), shot.hold)
            shown = tick
            if self.preview_only or tick != shot.tick:
                break
            yield
        if self.done == 0:
            scenario_end = renderer.controller.last_tick
            if end < scenario_end:
                raise UserError(
                    f"Every run stopped (diverged or failed) at op {end + 1}, before the first frame; "
                    "choose an earlier --from."
                )
            raise UserError(
                f"{renderer.info.scenario.name} ends at op {scenario_end + 1}, before the range asked for "
                "starts; choose an earlier --from."
            )

    def _add(self, frame: np.ndarray, hold: int) -> None:
        if self.first_frame is None:
            self.first_frame = frame
        if self.writer is not None:
            for _ in range(hold):
                self.writer.add(frame)
        self.done += hold

    def _encode(self, progress: Progress | None) -> Iterator[None]:
        """Encode what was drawn and put the output in place (a GIF on a thread of its own, threaded)."""
        writer = self.writer
        assert writer is not None

        def told(done: int, total: int) -> None:
            if self._cancelled:
                from gradviz.export import ExportCancelled

                raise ExportCancelled()
            if progress is not None:
                progress(done, total)

        if not self.threaded:
            self.written = writer.commit(told)
            return
        result: list[Path] = []
        failed: list[BaseException] = []

        def encode() -> None:
            try:
                result.append(writer.commit(told))
            except BaseException as exc:  # handed to the GUI thread, which raises it
                failed.append(exc)

        self._encoder = thread = threading.Thread(target=encode, name="gradviz-encode", daemon=True)
        thread.start()
        while thread.is_alive():
            yield
        thread.join()
        if failed:
            raise failed[0]
        self.written = result[0]

    # ------------------------------------------------------------ control
    def preview(self) -> QImage | None:
        """The first frame as an image; None when none was drawn."""
        return None if self.first_frame is None else rgb_image(self.first_frame)

    @property
    def notes(self) -> list[str]:
        """Sentences the user should read about how the output differs from what was asked."""
        return [*self._notes, *self.renderer.notes, *(self.writer.notes if self.writer is not None else ())]

    def cancel(self) -> None:
        """Stop: drop every frame and temporary file; the output path stays as it was."""
        self._cancelled = True
        if self._encoder is not None:
            self._encoder.join()  # it stops at its next frame, leaving no file behind
        if self.writer is not None:
            self.writer.abort()
        self.close()

    def close(self) -> None:
        """Release the renderer (the written output, if any, stays)."""
        if not self.closed:
            self.closed = True
            self.renderer.close()


def export_animation(
    scenario: str | Scenario,
    output: str | Path,
    *,
    style: FrameStyle,
    fps: float,
    frames: ExportRange = ExportRange(),
    progress: Callable[[str, int, int], None] | None = None,
    note: Callable[[str], None] | None = None,
) -> tuple[Path, int]:
    """Export an animation in one call (the command line's path).

    Parameters
    ----------
    progress:
        Called as ``progress(phase, done, total)`` with phase ``"render"`` per frame and
        ``"encode"`` while a GIF is encoded; it may raise (say ExportCancelled) to stop.
    note:
        Called, once the output is in place, with each sentence the user should read about
        how it differs from what was asked (an odd video size made even, say).

    Returns
    -------
    (path, frames)
        What was written and how many frames it holds.
    """
    check_interrupt()  # a Ctrl+C during start-up stops here, before the lab is built
    job = ExportJob(scenario, output, style=style, fps=fps, frames=frames)
    encode = None if progress is None else (lambda done, total: progress("encode", done, total))
    for _ in job.work(encode):
        check_interrupt()  # between frames, never inside a paint Qt is calling
        if progress is not None and job.phase == "render":
            progress("render", job.done, job.total)
    assert job.written is not None
    if note is not None:
        for sentence in job.notes:
            note(sentence)
    return job.written, job.done
