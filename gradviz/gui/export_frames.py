"""Frames for animated exports: the window's own views, offscreen, in one frame with a caption.

A :class:`FrameRenderer` owns a lab stepped synchronously (the same controller
and worker classes as the window, inline instead of on a thread) and an
:class:`ExportFrame` holding fresh instances of the chosen views. Every frame
draws one moment of the tape with those views, so an export looks exactly
like the window at that moment.

Models that are not two-parameter get their surface over a plane through weight
space, computed once before the first frame, inline, and kept for the whole
animation. The 3-D surface (``surface3d``) needs OpenGL: it is offered only
where :func:`~gradviz.gui.display.gl_unavailable` finds it, on the real display
platform, and nothing else imports ``pyqtgraph.opengl``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import QEvent, QPoint, QRect, Qt
from PySide6.QtGui import QFontMetrics, QImage, QPainter
from PySide6.QtWidgets import QApplication, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from gradviz.export.base import FrameWriter, Progress
from gradviz.export.interrupt import check_interrupt
from gradviz.export.palette import RGB, hex_rgb
from gradviz.export.plan import FramePlan, plan_frames
from gradviz.gui.display import frames_application
from gradviz.gui.layout import DEFAULT_VIEWS, PRESENTATION_MIN_SCALE, VIEWS, WINDOW_LAYOUT, position_text
from gradviz.gui.narration import narrate
from gradviz.gui.tape import LabInfo, Moment, PlaneRequest, PlaneSurface
from gradviz.gui.theme import (
    BASE_POINT_SIZE,
    OP_COLORS,
    RUN_COLORS,
    Theme,
    palette,
    presentation_points,
    style_sheet,
    theme_named,
)
from gradviz.gui.views.surface import SurfaceView
from gradviz.gui.widgets import fix_lines

if TYPE_CHECKING:
    from gradviz.engine.scenario import Scenario
    from gradviz.gui.controller import Controller
    from gradviz.gui.views.surface3d import Surface3DView

CAPTION_LINES = 2
MIN_CAPTION_POINTS = 7.0
# The plane of a model that is not two-parameter: the principal components of the exported path.
# Known in advance here (unlike in the window), they hold the path's largest moves, so it lies
# nearly in the plane (small residuals) and visibly descends; random directions through the start
# would show little more than a dot. The window's own default stands in when PCA cannot be made.
EXPORT_PLANE = "pca"
DRAG_HINT = " Drag to rotate, wheel to zoom."
FALLBACK_PLANE = "random"


@dataclass(frozen=True)
class FrameStyle:
    """How export frames look.

    Attributes
    ----------
    size:
        Width and height of a frame in pixels.
    views:
        Which views to show, from ``surface``, ``grads``, ``code``, ``timeline``, and
        ``surface3d`` (the 3-D surface; it needs OpenGL, see :func:`~gradviz.gui.display.gl_refusal`).
    caption:
        Show the narration sentence (and the op counter) above the views.
    presentation:
        Large type, as in the window's presentation mode.
    theme:
        ``"light"`` or ``"dark"``.
    """

    size: tuple[int, int] = (640, 480)
    views: tuple[str, ...] = DEFAULT_VIEWS
    caption: bool = True
    presentation: bool = False
    theme: str = "light"

    @property
    def point_size(self) -> float:
        return presentation_points(self.size[1]) if self.presentation else float(BASE_POINT_SIZE)


def caption_text(moment: Moment, run: str | None = None) -> str:
    """The sentence over a frame: the window's narration of ``run``, without its keyboard hints."""
    if moment.tick < 0:
        scenario = moment.info.scenario
        return f"Before the first op. {scenario.summary or scenario.title}"
    return narrate(moment, run)


def frame_colours(theme: Theme) -> list[RGB]:
    """Colours the views draw flat and a GIF palette should keep exactly."""
    named = [
        theme.base,
        theme.window,
        theme.text,
        theme.muted,
        theme.grid,
        theme.accent,
        theme.highlight,
        theme.none_bg,
        theme.code_ran,
        theme.code_next,
        theme.surface_low,
        theme.surface_high,
        theme.contour,
        theme.diverged,
        *RUN_COLORS,
        *OP_COLORS.values(),
    ]
    return [hex_rgb(c) for c in named]


def rgb_image(frame: np.ndarray) -> QImage:
    """A ``(height, width, 3)`` uint8 RGB frame as a QImage (a copy, safe to keep)."""
    h, w, _ = frame.shape
    data = np.ascontiguousarray(frame)
    return QImage(data.data, w, h, 3 * w, QImage.Format.Format_RGB888).copy()


class ExportFrame(QWidget):
    """The chosen views laid out as in the window, under a caption, at one fixed size.

    Parameters
    ----------
    style:
        Size, views, caption and type size of the frame.
    """

    def __init__(self, style: FrameStyle, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.frame_style = style
        self.theme = theme_named(style.theme)
        # Styled here rather than through the application, so an export made from a
        # window in presentation mode (or not) looks the same as one from the command line.
        self.setStyleSheet(style_sheet(self.theme, style.point_size) + self._caption_rules())
        self.setPalette(palette(self.theme))
        self.setAutoFillBackground(True)
        self.views: dict[str, Any] = {}
        for key in style.views:
            if key != "surface3d":
                self.views[key] = VIEWS[key].widget_class()()
        # The 3-D view draws the 2-D view's grid and paths; a frame without the 2-D view keeps one unseen.
        self.source: SurfaceView | None = self.views.get("surface")
        self.hidden_source = False
        if "surface3d" in style.views:
            from gradviz.gui.views.surface3d import Surface3DView

            if self.source is None:
                self.source = SurfaceView()
                self.hidden_source = True
            view3d = Surface3DView(self.source)
            view3d.activate()
            self.views["surface3d"] = view3d
        for view in self._all_views():
            view.set_theme(self.theme)

        self.caption = QLabel("")
        self.caption.setObjectName("exportCaption")
        self.caption.setWordWrap(True)
        self.caption.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        self.counter = QLabel("")
        self.counter.setObjectName("exportCounter")
        self.counter.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        head = QHBoxLayout()
        head.setContentsMargins(0, 0, 0, 0)
        head.addWidget(self.caption, 1)
        head.addWidget(self.counter)
        self._caption_points = style.point_size + 2

        body = QHBoxLayout()
        body.setContentsMargins(0, 0, 0, 0)
        body.setSpacing(6)
        # The window's layout, in boxes instead of splitters.
        for column in WINDOW_LAYOUT.arrange(self.views):
            rows = QVBoxLayout()
            rows.setSpacing(6)
            for cell in column.cells:
                row = QHBoxLayout()
                row.setSpacing(6)
                for key in cell.views:
                    row.addWidget(self.views[key], 1)
                rows.addLayout(row, cell.stretch)
            body.addLayout(rows, column.stretch)

        self._box = box = QVBoxLayout(self)
        box.setContentsMargins(6, 4, 6, 4)
        box.setSpacing(4)
        box.addLayout(head)
        box.addLayout(body, 1)
        self._set_minimums()
        self.caption.setVisible(style.caption)
        self.counter.setVisible(style.caption)

    def _all_views(self) -> list[Any]:
        """The laid-out views and an unseen 2-D source of the 3-D view (drawn first, as it feeds it)."""
        return ([self.source] if self.hidden_source else []) + list(self.views.values())

    def _caption_rules(self) -> str:
        t = self.theme
        return (
            f"QLabel#exportCaption {{ padding: 4px 8px; border-radius: 4px; background: {t.base};"
            f" color: {t.text}; border: 1px solid {t.grid}; }}\n"
            f"QLabel#exportCounter {{ color: {t.muted}; padding-left: 6px; }}\n"
        )

    def _set_minimums(self) -> None:
        scale = PRESENTATION_MIN_SCALE if self.frame_style.presentation else 1.0
        for key, view in self.views.items():
            w, h = VIEWS[key].min_size
            view.setMinimumSize(int(w * scale), int(h * scale))
        if self.frame_style.presentation:
            for view in self._all_views():
                if hasattr(view, "set_point_size"):
                    view.set_point_size(self.frame_style.point_size)
        self._set_caption_points(self._caption_points)
        # A fixed height for two lines: frames whose sentence is short keep the views in place.
        fix_lines(self.caption, CAPTION_LINES)

    def _set_caption_points(self, points: float) -> None:
        self._caption_points = points
        self.caption.setStyleSheet(f"font-size: {points:g}pt;")
        self.counter.setStyleSheet(f"font-size: {self.frame_style.point_size:g}pt;")
        self.caption.ensurePolished()

    def too_small(self) -> tuple[int, int] | None:
        """The smallest size that draws every view readably, when the frame's size is below it."""
        self._box.activate()
        need = self.minimumSizeHint()
        w, h = self.frame_style.size
        if w < need.width() or h < need.height():
            return max(w, need.width()), max(h, need.height())
        return None

    def set_lab(self, info: LabInfo) -> None:
        """Prepare every view for a newly built lab.

        A model that is not two-parameter asks for a plane here; the frame's owner
        answers with :meth:`set_plane_surface` (or :meth:`drop_surface`).
        """
        # The 3-D view first: a surface handed to the 2-D view reaches it at once.
        for view in sorted(self._all_views(), key=lambda v: v is self.source):
            view.set_lab(info)
        if self.source is not None:
            # The plane picker and Recompute are for the window; on a slide the caption names the plane.
            self.source.controls.setVisible(False)
        if "grads" in self.views:
            self.views["grads"].fit_columns()

    @property
    def wants_plane(self) -> bool:
        """Whether the surface is drawn over a plane (or curve) that has yet to be computed."""
        s = self.source
        return s is not None and s.mode in ("plane", "curve") and s.plane_surface is None

    def set_plane_surface(self, surface: PlaneSurface) -> None:
        """Hand a computed plane surface to the 2-D view (and through it to the 3-D one)."""
        if self.source is not None:
            self.source.set_plane_surface(surface)

    def drop_surface(self, info: LabInfo, reason: str) -> None:
        """Give the surfaces' space to the other views when no plane could be computed.

        Raises
        ------
        UserError
            When the surfaces are the only views asked for.
        """
        from gradviz.engine.errors import UserError

        surfaces = [k for k in ("surface", "surface3d") if k in self.views]
        if len(surfaces) == len(self.views):
            raise UserError(
                f"{info.scenario.name} has no loss surface to draw ({reason.rstrip('.')}); "
                "choose other views, such as grads,code,timeline."
            )
        # The window shows a placeholder here; a frame for slides gives the space to the other views.
        for key in surfaces:
            self.views[key].hide()

    def draw(self, moment: Moment) -> None:
        """Draw ``moment`` in every view and set its caption."""
        # The frame is never shown, so nothing lays it out but this (the caption's fit needs its width).
        self._box.activate()
        for view in self._all_views():
            view.draw(moment)
        view3d = self.views.get("surface3d")
        if view3d is not None:
            # A frame cannot be rotated: drop the view's hint on how to.
            view3d.caption.setText(view3d.caption.text().replace(DRAG_HINT, ""))
        if self.frame_style.caption:
            code = self.views.get("code")
            self._fit_caption(caption_text(moment, code.run_name if code is not None else None))
            self.counter.setText(position_text(moment.tick, moment.info.ticks_per_iteration))

    def reserve_counter(self, widest: str) -> None:
        """Fix the counter's width to fit ``widest``, so the caption's box keeps one size in every frame."""
        self.counter.ensurePolished()  # the style sheet's type size applies from here on
        fm = QFontMetrics(self.counter.font())
        self.counter.setFixedWidth(fm.horizontalAdvance(widest) + 12)

    def _fit_caption(self, text: str) -> None:
        """Show ``text`` in the caption's lines, in smaller type when it would not fit."""
        points = self.frame_style.point_size + 2
        self.caption.setText(text)
        width = max(self.caption.contentsRect().width() - 16, 50)
        height = self.caption.contentsRect().height() - 8
        font = self.caption.font()
        while points > MIN_CAPTION_POINTS:
            font.setPointSizeF(points)
            needed = QFontMetrics(font).boundingRect(
                QRect(0, 0, width, 10_000), Qt.TextFlag.TextWordWrap, text
            )
            if needed.height() <= height:
                break
            points -= 0.5
        if points != self._caption_points:
            self._set_caption_points(points)

    def _paint_gl(self, image: QImage) -> None:
        """Paint the 3-D view's OpenGL framebuffer over its place in ``image``.

        ``QWidget.render`` does not draw an OpenGL widget of a window that is never
        shown, so its scene is rendered into its own framebuffer and copied in.
        """
        view3d: Surface3DView | None = self.views.get("surface3d")
        if view3d is None or view3d.view is None or not view3d.isVisibleTo(self):
            return
        gl = view3d.view
        scene = view3d.frame()
        if scene is None or scene.isNull():
            return
        painter = QPainter(image)
        painter.drawImage(QRect(gl.mapTo(self, QPoint(0, 0)), gl.size()), scene)
        painter.end()

    def render_rgb(self) -> np.ndarray:
        """The frame as a ``(height, width, 3)`` uint8 RGB array at exactly the style's size."""
        w, h = self.frame_style.size
        # The frame is never shown: showing it would paint it once more per frame for nobody.
        self._box.activate()
        # Rendering into an image of device pixel ratio 1 gives the requested size even
        # when the app runs on a high-DPI screen (grab() would double it).
        image = QImage(w, h, QImage.Format.Format_RGB32)
        image.setDevicePixelRatio(1.0)
        image.fill(0)
        self.render(image)
        self._paint_gl(image)
        rgb = image.convertToFormat(QImage.Format.Format_RGB888)
        stride = rgb.bytesPerLine()
        data = np.frombuffer(rgb.constBits(), dtype=np.uint8, count=stride * h)
        return data.reshape(h, stride)[:, : w * 3].reshape(h, w, 3).copy()


class FrameRenderer:
    """Steps a scenario's lab synchronously and renders the frames of a plan.

    Parameters
    ----------
    scenario:
        A built-in name, a scenario file, or a :class:`~gradviz.engine.scenario.Scenario`.
    style:
        How the frames look.

    Raises
    ------
    UserError
        When the scenario cannot be built or the size is too small for the views.
    """

    def __init__(self, scenario: str | Scenario, style: FrameStyle) -> None:
        from gradviz.engine.errors import UserError
        from gradviz.gui.controller import Controller

        self.app = QApplication.instance()
        if not isinstance(self.app, QApplication):
            raise RuntimeError("FrameRenderer needs a QApplication; use gradviz.gui.render.application()")
        self.style = style
        self.frame = ExportFrame(style)
        small = self.frame.too_small()
        if small is not None:
            self.close()
            w, h = style.size
            views = ", ".join(style.views)
            raise UserError(
                f"{w}x{h} is too small to draw {views}{' with a caption' if style.caption else ''} "
                f"readably: it needs at least {small[0]}x{small[1]}; choose a larger size or fewer views."
            )
        self.frame.resize(*style.size)
        errors: list[str] = []
        self.controller: Controller = Controller(threaded=False)
        self.controller.failed.connect(errors.append)
        self.controller.open(scenario)
        if self.controller.info is None:
            self.close()
            raise UserError(errors[-1] if errors else f"The scenario {scenario!r} could not be opened.")
        self.info: LabInfo = self.controller.info
        self.frame.set_lab(self.info)
        self._plane_error = ""
        self._prepared = False
        self.controller.plane_ready.connect(self._on_plane)
        self.controller.plane_failed.connect(self._on_plane_failed)

    def prepare_surface(self, last_tick: int) -> None:
        """Compute the plane of a model that is not two-parameter, once, before the first frame.

        The runs are stepped to ``last_tick`` (the export's last frame) so the plane
        can be the principal components of the whole exported path; the cursor then
        goes back to the start. Afterwards the view asks for the same plane over a
        wider range only when a path leaves it, as in the window.

        Raises
        ------
        UserError
            When no plane could be made and the surfaces are the only views.
        """
        if self._prepared:
            return
        self._prepared = True
        frame = self.frame
        if not frame.wants_plane:
            return
        assert frame.source is not None
        source = frame.source
        kind = EXPORT_PLANE if source.mode == "plane" else "curve"
        if kind == EXPORT_PLANE:
            self.step_to(last_tick)
        self.controller.request_plane(PlaneRequest(kind), fallback=FALLBACK_PLANE)
        self.controller.seek(-1)
        if source.plane_surface is None:
            frame.drop_surface(self.info, self._plane_error or "no plane could be made")
            return
        source.plane_requested.connect(self._widen)

    def _widen(self, request: PlaneRequest) -> None:
        # Only the same plane over a wider range: the plane itself stays for the whole animation.
        if request.plane is not None:
            self.controller.request_plane(request, fallback=FALLBACK_PLANE)

    def _on_plane(self, surface: PlaneSurface) -> None:
        # The inline controller sends a coarse grid, then the full one: a frame only ever shows the full one.
        if surface.final:
            # The worker's note on a fallback plane ("... meanwhile") is for the window, which may
            # recompute; here the plane is final and the caption already names its kind.
            self.frame.set_plane_surface(replace(surface, note=""))

    def _on_plane_failed(self, message: str) -> None:
        self._plane_error = message

    @property
    def ticks_per_iteration(self) -> int:
        return self.info.ticks_per_iteration

    def step_to(self, tick: int) -> bool:
        """Perform ops until the moment after ``tick``; False when every run stopped before it."""
        c = self.controller
        while c.cursor < tick:
            if not c.next_op():
                return False
        return True

    def render(self) -> np.ndarray:
        """The current moment as an RGB frame."""
        moment = self.controller.moment()
        assert moment is not None
        self.frame.draw(moment)
        return self.frame.render_rgb()

    def frames(self, plan: FramePlan) -> Iterator[np.ndarray]:
        """Step and render every frame of ``plan``; stops early when every run has stopped."""
        ticks = plan.ticks()
        if ticks:
            self.prepare_surface(ticks[-1])
            self.frame.reserve_counter(position_text(ticks[-1], plan.ticks_per_iteration))
        shown = None
        for tick in ticks:
            if not self.step_to(tick):
                # Every run diverged or failed before this frame: end on the moment it happened.
                if self.controller.cursor != shown and self.controller.cursor > plan.tick_of(plan.first):
                    yield self.render()
                return
            shown = tick
            yield self.render()

    def close(self) -> None:
        """Release the frame's widgets and the lab."""
        if hasattr(self, "controller"):
            self.controller.shutdown()
        self.frame.close()
        self.frame.deleteLater()
        # Delete the views now rather than at the next turn of an event loop the command line
        # never runs; unlike processEvents this cannot re-enter a window's own handlers.
        QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)

    def __enter__(self) -> FrameRenderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class ExportRange:
    """Which frames to export, as the command line's options give them (see :func:`plan_frames`)."""

    per_frame: str = "op"
    first: int | None = None
    last: int | None = None
    ops: int | None = None
    iterations: int | None = None


class ExportJob:
    """One export, driven a frame at a time so a window can show progress and offer Cancel.

    Use :meth:`render_next` until it returns False, then :meth:`finish`; or
    :meth:`cancel` at any point. Nothing appears at ``output`` before
    :meth:`finish` returns, and a previous file there stays intact until then.

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
        Which ops or iterations become frames.

    Raises
    ------
    UserError
        For an output that cannot be written, a frame rate a GIF cannot play, a
        scenario that cannot be built, a size too small for the views, or a bad range.
    """

    def __init__(
        self,
        scenario: str | Scenario,
        output: str | Path,
        *,
        style: FrameStyle,
        fps: float,
        frames: ExportRange = ExportRange(),
    ) -> None:
        from gradviz.engine.errors import UserError
        from gradviz.export import MAX_GIF_FPS, check_output, open_writer

        self.output = check_output(output)
        if not 0 < fps <= 60:
            raise UserError(f"--fps must be more than 0 and at most 60, not {fps:g}.")
        if self.output.kind == "gif" and fps > MAX_GIF_FPS:
            raise UserError(
                f"GIFs play at most {MAX_GIF_FPS:g} frames per second (browsers slow faster ones down); "
                f"use --fps {MAX_GIF_FPS:g} or less, or an .mp4."
            )
        self.style = style
        self.fps = fps
        frames_application(style.views, style.theme, style.point_size)
        self.renderer = FrameRenderer(scenario, style)
        try:
            self.plan = plan_frames(
                self.renderer.ticks_per_iteration,
                per_frame=frames.per_frame,
                first=frames.first,
                last=frames.last,
                ops=frames.ops,
                iterations=frames.iterations,
                default_iterations=self.renderer.info.scenario.iterations,
            )
            # Before the writer exists: a model without a plane fails here, leaving nothing behind.
            self.renderer.prepare_surface(self.plan.ticks()[-1])
            self.writer: FrameWriter = open_writer(
                self.output,
                style.size,
                fps,
                fixed_colours=frame_colours(theme_named(style.theme)),
                expected=len(self.plan),
            )
        except BaseException:
            self.renderer.close()
            raise
        self._frames = self.renderer.frames(self.plan)
        self.first_frame: np.ndarray | None = None
        self.done = 0
        self.closed = False

    @property
    def total(self) -> int:
        """Frames planned (fewer are written when every run stops early)."""
        return len(self.plan)

    def render_next(self) -> bool:
        """Render and add the next frame; False when there are no more."""
        frame = next(self._frames, None)
        if frame is None:
            return False
        self.writer.add(frame)
        if self.done == 0:
            self.first_frame = frame
        self.done += 1
        return True

    def preview(self) -> QImage | None:
        """The export's first frame (rendered now if it was not yet); None when there is none."""
        if self.done == 0:
            self.render_next()
        return None if self.first_frame is None else rgb_image(self.first_frame)

    def finish(self, progress: Progress | None = None) -> Path:
        """Encode what was rendered and put the output in place; ``progress`` may raise to cancel."""
        from gradviz.engine.errors import UserError

        try:
            while self.render_next():
                pass
            if self.done == 0:
                last = self.renderer.controller.cursor + 1
                raise UserError(
                    f"Every run stopped (diverged or failed) at op {last}, before the first frame; "
                    "choose an earlier --from."
                )
            return self.writer.commit(progress)
        except BaseException:
            self.cancel()
            raise
        finally:
            self.close()

    def cancel(self) -> None:
        """Stop: drop every frame and temporary file; the output path stays as it was."""
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
    try:
        while job.render_next():
            check_interrupt()  # between frames, never inside a paint Qt is calling
            if progress is not None:
                progress("render", job.done, job.total)
        encode = None if progress is None else (lambda done, total: progress("encode", done, total))
        path = job.finish(encode)
    except BaseException:
        job.cancel()
        raise
    if note is not None:
        for sentence in job.writer.notes:
            note(sentence)
    return path, job.done
