"""Frames for animated exports: the window's own views, offscreen, in one frame with a caption.

A :class:`FrameRenderer` owns a lab stepped synchronously (the same controller
and worker classes as the window, inline instead of on a thread) and an
:class:`ExportFrame` holding fresh instances of the chosen views. Every frame
draws one moment of the tape with those views, so an export looks exactly
like the window at that moment, less what has not happened yet.

Before the first frame the lab is stepped to the last one and every moment is
drawn once: the axes then keep the ranges that hold the whole export, wrapped
labels and the inspector's rows the room of their tallest content, and the
code panel its scroll position, so nothing moves from frame to frame. Whether
the size holds the views readably is checked on the frame so laid out
(:meth:`ExportFrame.problems`); default views give way to a small size.

Models that are not two-parameter get their surface over a plane through weight
space, computed once before the first frame, inline, and kept for the whole
animation. The 3-D surface (``surface3d``) needs OpenGL: it is offered only
where :func:`~gradviz.gui.display.gl_unavailable` finds it, on the real display
platform, and nothing else imports ``pyqtgraph.opengl``.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import QEvent, QPoint, QRect, QSize, Qt
from PySide6.QtGui import QFontMetrics, QImage, QPainter, QRegion
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QApplication,
    QGraphicsView,
    QHBoxLayout,
    QLabel,
    QLayout,
    QStackedLayout,
    QTableWidget,
    QVBoxLayout,
    QWidget,
)

from gradviz.export.base import FrameWriter, Progress
from gradviz.export.interrupt import check_interrupt
from gradviz.export.palette import RGB, hex_rgb
from gradviz.export.plan import FramePlan, plan_frames
from gradviz.gui.display import frames_application
from gradviz.gui.layout import (
    DEFAULT_VIEWS,
    PRESENTATION_MIN_SCALE,
    SURFACES,
    VIEWS,
    WINDOW_LAYOUT,
    position_text,
    views_for,
)
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
    from gradviz.engine.lesson import Lesson
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
# Room kept around the paths on a true surface, a share of its range on each side.
SURFACE_MARGIN = 0.04
# Code lines narrower than this many characters wrap too often to read.
MIN_CODE_CHARS = 20
# How many moments an export draws beforehand to learn the tallest text and rows it will show.
RESERVE_SAMPLES = 400
# The largest frame the command line takes (see cli.SIZES).
LARGEST = (7680, 4320)
# Which default views a size that cannot hold them all keeps longest.
KEEP_FIRST = ("surface", "code", "grads", "timeline")
KEEP_FIRST_GRADS = ("surface", "grads", "code", "timeline")


def keep_order(views: Sequence[str], lesson: Lesson | None) -> tuple[str, ...]:
    """``views`` from the one kept longest to the one left out first when a frame is too small.

    The surface and the code stay longest, then the ``.grad`` inspector, then the
    timeline; a lesson that leads with ``.grad`` quantities of named parameters
    keeps the inspector before the code.
    """
    leads_grads = lesson is not None and bool(lesson.show) and bool(lesson.params)
    order = KEEP_FIRST_GRADS if leads_grads else KEEP_FIRST
    return (*(v for v in order if v in views), *(v for v in views if v not in order))


def fit_candidates(views: Sequence[str], lesson: Lesson | None) -> list[tuple[str, ...]]:
    """The view sets a default export tries, in order: ``views`` less what the lesson leaves out,
    then fewer, each set before any that lacks a view it keeps longer (see :func:`keep_order`).

    With the usual order that is every view; no timeline; no ``.grad`` inspector (a timeline
    may still fit where the inspector does not); neither; and only then sets without the code,
    and last without the surface. Each set keeps the layout's order.
    """
    shown = views_for(lesson, views) or tuple(views)
    ranked = keep_order(shown, lesson)
    n = len(ranked)
    out = []
    # Counting down in binary over the ranked views: the first view is the highest bit.
    for mask in range(2**n - 1, 0, -1):
        kept = {v for i, v in enumerate(ranked) if mask >> (n - 1 - i) & 1}
        out.append(tuple(v for v in shown if v in kept))
    return out


def spoken_list(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _rect_in(widget: QWidget, ancestor: QWidget) -> QRect:
    return QRect(widget.mapTo(ancestor, QPoint(0, 0)), widget.size())


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
    fit:
        ``views`` are a default rather than a request: those the size cannot hold
        readably are left out, in :func:`keep_order`'s order, and the scenario's
        lesson leaves out what it has no use for (its surface).
    """

    size: tuple[int, int] = (640, 480)
    views: tuple[str, ...] = DEFAULT_VIEWS
    caption: bool = True
    presentation: bool = False
    theme: str = "light"
    fit: bool = False

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


def _least(fits: Callable[[int], bool], lo: int, hi: int) -> int:
    """The least value in ``[lo, hi]`` for which ``fits`` holds (it holds at ``hi`` and above what fits)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def _laid_out(layout: QLayout) -> list[QWidget]:
    """The widgets ``layout`` and the layouts inside it place (the shown page only, of a stack)."""
    if isinstance(layout, QStackedLayout):
        current = layout.currentWidget()
        return [current] if current is not None else []
    out: list[QWidget] = []
    for i in range(layout.count()):
        item = layout.itemAt(i)
        if item is None:
            continue
        widget, inner = item.widget(), item.layout()
        if widget is not None:
            out.append(widget)
        elif inner is not None:
            out += _laid_out(inner)
    return out


def _widget_problems(widget: QWidget, name: str) -> list[str]:
    """Text a widget cuts off: a label's lines, a table's rows or columns, a code line."""
    if isinstance(widget, QLabel):
        if not widget.text():
            return []
        if widget.wordWrap():
            if widget.height() < widget.heightForWidth(widget.width()):
                return [f"{name} cuts its text off below"]
        elif widget.width() < widget.sizeHint().width():
            return [f"{name} cuts its text off at the side"]
        return []
    if isinstance(widget, QTableWidget):
        # Measured rather than read off the scroll bars, which follow only on a later layout pass.
        out = []
        edge = 2 * widget.frameWidth()
        rows = sum(widget.rowHeight(r) for r in range(widget.rowCount()) if not widget.isRowHidden(r))
        if rows + widget.horizontalHeader().height() + edge > widget.height():
            out.append(f"{name} has rows out of sight")
        columns = sum(
            widget.columnWidth(c) for c in range(widget.columnCount()) if not widget.isColumnHidden(c)
        )
        if columns + edge > widget.width():
            out.append(f"{name} has columns out of sight")
        return out
    if not isinstance(widget, QAbstractScrollArea) or isinstance(widget, QGraphicsView):
        return []
    if widget.horizontalScrollBar().isVisibleTo(widget):
        return [f"{name} cuts lines off at the side"]
    return []


def _layout_problems(top: QWidget, layout: QLayout | None, bounds: QRect) -> list[str]:
    """Overlaps, overflows and cut text among the widgets ``layout`` places, within ``bounds`` of ``top``."""
    if layout is None:
        return []
    out: list[str] = []
    placed: list[tuple[str, QRect]] = []
    for widget in _laid_out(layout):
        if not widget.isVisibleTo(top):
            continue
        name = widget.objectName() or type(widget).__name__
        box = _rect_in(widget, top)
        if not bounds.contains(box):
            out.append(f"{name} runs out of its place")
        out += _widget_problems(widget, name)
        placed.append((name, box))
        if not isinstance(widget, (QAbstractScrollArea, QLabel)) and widget.layout() is not None:
            out += _layout_problems(top, widget.layout(), box)
    for (a, ra), (b, rb) in itertools.combinations(placed, 2):
        if ra.intersects(rb):
            out.append(f"{a} overlaps {b}")
    return out


def _code_problems(code: Any) -> list[str]:
    """A code panel too narrow to read its lines (wrapped every few characters) or too short for its loop."""
    out = []
    editor = code.editor
    if editor.viewport().width() < MIN_CODE_CHARS * editor.fontMetrics().horizontalAdvance("0"):
        out.append(f"code: lines narrower than {MIN_CODE_CHARS} characters")
    if code.height() < code.loop_extent()[1]:
        out.append("code: the loop does not fit")
    return out


def _wrapped_labels(frame: ExportFrame) -> list[QLabel]:
    """Every word-wrapped label of the frame's views (their text may take more lines in one frame)."""
    out: list[QLabel] = []
    for view in frame.views.values():
        out += [label for label in view.findChildren(QLabel) if label.wordWrap()]
    return out


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
        self._target = QSize(*style.size)  # the size problems() measures against
        # What stays put from frame to frame once :meth:`prepare` has run: the inspector's row
        # heights and the code panel's scroll position.
        self._row_heights: list[int] | None = None
        self._code_scroll: int | None = None
        self._moments: list[Moment] = []  # every moment the export shows (set by prepare)
        self._tall: list[Moment] = []  # those that set the labels' and rows' heights
        code = self.views.get("code")
        if code is not None:
            # On a slide nothing is cut at the panel's edge: long lines wrap, as in presentation
            # mode; and a frame cannot be scrolled, so it shows no scroll bar.
            code.set_still()
        grads = self.views.get("grads")
        if grads is not None:
            grads.set_still()

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

    def settle(self) -> None:
        """Lay the frame and every view inside it out at the frame's size now.

        The frame is never shown, so its widgets get their sizes only when it is
        rendered; rendering one pixel of it hands them out at once.
        """
        self._box.activate()
        image = QImage(1, 1, QImage.Format.Format_RGB32)
        # Twice: a table shows or hides its scroll bars only on the pass after its columns were fitted.
        for _ in range(2):
            self.render(image, QPoint(0, 0), QRegion(QRect(0, 0, 1, 1)))

    def shown_views(self) -> dict[str, QWidget]:
        """The views laid out in the frame (a surface given up for want of a plane is not)."""
        return {k: v for k, v in self.views.items() if v.isVisibleTo(self)}

    def caption_rect(self) -> QRect | None:
        """Where the caption and its counter are in the frame; None without a caption."""
        if not self.frame_style.caption:
            return None
        return _rect_in(self.caption, self).united(_rect_in(self.counter, self))

    def problems(self) -> list[str]:
        """What is unreadable in the frame as laid out now (empty when nothing is).

        A view below its readable minimum, views that overlap each other or the
        caption or run past the frame, and inside each view: parts that overlap or
        leave it, labels too short for their wrapped text or too narrow for their
        line, tables that need a scroll bar, a code panel shorter than its loop.
        """
        out: list[str] = []
        # A frame's layout keeps it at least as large as its views' minimums: measure against
        # the size asked for, not the size the frame has taken.
        frame = QRect(QPoint(0, 0), self._target)
        if self.size() != self._target:
            out.append(f"the views need {self.width()}x{self.height()}")
        head = self.caption_rect()
        scale = PRESENTATION_MIN_SCALE if self.frame_style.presentation else 1.0
        boxes = {key: _rect_in(view, self) for key, view in self.shown_views().items()}
        for key, box in boxes.items():
            w, h = VIEWS[key].min_size
            if box.width() < int(w * scale) or box.height() < int(h * scale):
                out.append(f"{key} is {box.width()}x{box.height()}, under its readable {w}x{h}")
            if not frame.contains(box):
                out.append(f"{key} runs past the frame")
            if head is not None and box.intersects(head):
                out.append(f"{key} runs under the caption")
        for (a, ra), (b, rb) in itertools.combinations(boxes.items(), 2):
            if ra.intersects(rb):
                out.append(f"{a} overlaps {b}")
        for key in boxes:
            view = self.views[key]
            out += [f"{key}: {p}" for p in _layout_problems(view, view.layout(), view.rect())]
            if key == "code" and view.run_name is not None:
                out += _code_problems(view)
        return out

    def _content_minimums(self) -> None:
        """Raise each view's least height to what its content needs as laid out now.

        The views share a column by their stretch; without this a view whose content
        needs more than its share (a tall table, a long loop) would be cut while its
        neighbour had room to spare.
        """
        scale = PRESENTATION_MIN_SCALE if self.frame_style.presentation else 1.0
        for key, view in self.views.items():
            w, h = VIEWS[key].min_size
            if key == "grads":
                table = view.table
                rows = sum(table.rowHeight(r) for r in range(table.rowCount()) if not table.isRowHidden(r))
                table.setMinimumHeight(rows + table.horizontalHeader().height() + 2 * table.frameWidth())
            need = view.minimumSizeHint().height()
            if key == "code" and view.run_name is not None:
                need = max(need, view.loop_extent()[1])
            view.setMinimumSize(int(w * scale), max(int(h * scale), need))

    def _set_target(self, w: int, h: int) -> None:
        self.resize(w, h)
        self._target = QSize(w, h)
        self.settle()

    def _fits(self, w: int, h: int) -> bool:
        self._set_target(w, h)
        if self._tall:
            # Labels and rows take other heights at another width: measure them again there.
            self._measure(self._tall)
            self.settle()
        self._content_minimums()
        self.resize(w, h)
        self.settle()
        return not self.problems()

    def fits(self) -> bool:
        """Whether the frame's size draws every view readably (:meth:`problems` finds nothing)."""
        return self._fits(*self.frame_style.size)

    def too_small(self) -> tuple[int, int] | None:
        """The smallest size that draws every view readably, when the frame's size is below it.

        Measured on the frame itself: it is laid out at its size with the lab's texts
        (after :meth:`prepare`, every frame's) and checked with :meth:`problems`; when
        that finds any, larger sizes are tried, drawing again only the moments whose
        content set a height, and the size found is checked against every moment.
        """
        size = self.frame_style.size
        try:
            if self._fits(*size):
                return None
            found = self._search()
            for _ in range(4):
                if not self._moments or found == LARGEST:
                    break
                # Another moment may be the tallest at this width: measure them all here.
                self._set_target(*found)
                more = self._measure(self._moments)
                self._tall = list({id(m): m for m in (*self._tall, *more)}.values())
                if self._fits(*found):
                    break
                found = self._search()
            return found
        finally:
            self._fits(*size)

    def _search(self) -> tuple[int, int]:
        """A least size at which :meth:`_fits` holds: a width that holds some height, then trading down."""
        size = self.frame_style.size
        # The views' minimums as laid out now: a start, though content laid out wider may
        # need less (so the searches below go down to the size asked for).
        self._box.activate()
        w = max(size[0], self.minimumSizeHint().width())
        narrow = size[0] - 1
        while not self._fits(w, LARGEST[1]):
            if w >= LARGEST[0]:
                return LARGEST
            narrow, w = w, min(int(w * 1.15) + 1, LARGEST[0])
        low_w, low_h = max(narrow + 1, size[0]), size[1]
        h = _least(lambda v: self._fits(w, v), low_h, LARGEST[1])
        # Narrower at that height, then lower at that width, until neither gives any more.
        for _ in range(3):
            before = w, h
            w = _least(functools.partial(self._fits, h=h), low_w, w)
            h = _least(functools.partial(self._fits, w), low_h, h)
            if (w, h) == before:
                break
        return w, h

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

    def prepare(self, moments: Sequence[Moment], last: Moment) -> None:
        """Fix what would otherwise move between frames, from every moment the export will show.

        Each of ``moments`` is drawn once: wrapped labels keep the height of the
        tallest text they show and the inspector's rows their tallest height. Then
        the surface keeps the range that holds every run's path (with equal units
        across and up on a true surface), the timeline the ranges of ``last`` (the
        export's last moment), and the code panel shows the loop.
        """
        self.settle()
        self._moments = [*moments, last]
        self._tall = self._measure(self._moments)
        self.settle()
        source = self.source
        if source is not None:
            source.draw(last)  # the range grows to hold every path, up to the view's cap
            # Equal units across and up where the plot is seen and the surface is the true one.
            square = source.mode == "model" and source.isVisibleTo(self)
            (x0, x1), (y0, y1) = source.x_range, source.y_range
            mx, my = SURFACE_MARGIN * (x1 - x0), SURFACE_MARGIN * (y1 - y0)
            source.fix_range(((x0 - mx, x1 + mx), (y0 - my, y1 + my)), equal_aspect=square)
            if square:
                # The axes' labels may have taken other room: fit the range to the plot as it is now.
                self.settle()
                source.fix_range(source.view_range(), equal_aspect=True)
        timeline = self.views.get("timeline")
        if timeline is not None:
            timeline.fix_ranges(timeline.ranges_for(last))
        code = self.views.get("code")
        if code is not None:
            self.settle()
            code.show_loop()
            self._code_scroll = code.scroll_position()
        self.settle()

    def _measure(self, moments: Sequence[Moment]) -> list[Moment]:
        """Draw each moment; hold every wrapped label at its tallest and the inspector's rows at theirs.

        Returns the moments that set some label's or row's height: drawing just those
        measures the same heights at another frame size (see :meth:`too_small`).
        """
        labels = _wrapped_labels(self)
        tallest: dict[QLabel, tuple[int, Moment]] = {}
        grads = self.views.get("grads")
        rows: list[tuple[int, Moment | None]] = [(0, None)] * (len(grads.row_heights()) if grads else 0)
        self._row_heights = None  # measure the rows as the content sets them
        if moments:
            # A draw may show a label (the inspector's readout): lay it out before measuring.
            self.draw(moments[-1])
            self.settle()
        for moment in moments:
            self.draw(moment)
            for label in labels:
                if label.isVisibleTo(self) and label.text():
                    height = label.heightForWidth(label.width())
                    if height > tallest.get(label, (0, moment))[0]:
                        tallest[label] = (height, moment)
            if grads is not None:
                grads.fit_columns()  # rows as tall as this moment's content, at the table's width now
                rows = [
                    (h, moment) if h > r else (r, m)
                    for h, (r, m) in zip(grads.row_heights(), rows, strict=True)
                ]
        for label, (height, _) in tallest.items():
            # Text at the top of a box of one height: a shorter sentence leaves the lines below empty.
            label.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
            label.setFixedHeight(max(height, label.minimumSizeHint().height()))
        self._row_heights = [r for r, _ in rows] if grads is not None else None
        self._hold()
        tall = [m for _, m in tallest.values()] + [m for _, m in rows if m is not None]
        return list({id(m): m for m in tall}.values())

    def _hold(self) -> None:
        """Put back the row heights and scroll position :meth:`prepare` fixed (a draw may change them)."""
        grads = self.views.get("grads")
        if grads is not None and self._row_heights is not None:
            grads.hold_rows(self._row_heights)
        code = self.views.get("code")
        if code is not None and self._code_scroll is not None:
            code.hold_scroll(self._code_scroll)

    def draw(self, moment: Moment) -> None:
        """Draw ``moment`` in every view and set its caption."""
        # The frame is never shown, so nothing lays it out but this (the caption's fit needs its width).
        self._box.activate()
        for view in self._all_views():
            view.draw(moment)
        self._hold()
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
        How the frames look. With ``style.fit`` the views that the size cannot
        hold readably are left out, and :attr:`notes` says which were kept.

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
        self.notes: list[str] = []
        errors: list[str] = []
        self.controller: Controller = Controller(threaded=False)
        self.controller.failed.connect(errors.append)
        self.controller.capture_graphs("graph" in style.views)
        self.controller.open(scenario)
        if self.controller.info is None:
            self.close()
            raise UserError(errors[-1] if errors else f"The scenario {scenario!r} could not be opened.")
        self.info: LabInfo = self.controller.info
        self._plane_error = ""
        self._plane: PlaneSurface | None = None
        self._prepared = False
        self.controller.plane_ready.connect(self._on_plane)
        self.controller.plane_failed.connect(self._on_plane_failed)
        lesson = self.info.scenario.lesson
        self._candidates = fit_candidates(style.views, lesson) if style.fit else [style.views]
        self._choice = 0
        # Whether the size holds the views is known once every frame's content is: see prepare().
        self.frame = self._build(self._candidates[0])

    # ------------------------------------------------------------ views
    def _build(self, views: tuple[str, ...], size: tuple[int, int] | None = None) -> ExportFrame:
        self._frame_prepared = False
        style = replace(self.style, views=views, size=size or self.style.size)
        frame = ExportFrame(style)
        frame.resize(*style.size)
        frame.set_lab(self.info)
        return frame

    def _discard(self, frame: ExportFrame) -> None:
        frame.close()
        frame.deleteLater()
        QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)

    def _choose(self, ticks: Sequence[int]) -> None:
        """Keep the first view set that fits the size, each prepared for ``ticks``; UserError if none does."""
        from gradviz.engine.errors import UserError

        fit = len(self._candidates) > 1
        for i, views in enumerate(self._candidates):
            if i != self._choice:
                self._discard(self.frame)
                self.frame = self._build(views)
                self._choice = i
            # A set that does not fit with the lab's first texts will not with every frame's (they
            # only add lines and rows): only the others are drawn through and measured again.
            if fit and not self.frame.fits():
                continue
            try:
                self._prepare_frame(ticks)
            except UserError:
                if not fit:
                    raise
                continue  # only surfaces, and no plane to draw them over
            if self.frame.fits():
                self._say_kept()
                return
        # Nothing fits: say what the views asked for need together, or what the view kept longest needs.
        views = self._candidates[0]
        if fit:
            views = (keep_order(views, self.info.scenario.lesson)[0],)
        if self.frame.frame_style.views != views or not self._frame_prepared:
            self._discard(self.frame)
            self.frame = self._build(views)
            self._prepare_frame(ticks)
        small = self.frame.too_small() or self.style.size
        # Made afresh at that size, as the export asked for it would be: it holds, or says what more.
        for _ in range(3):
            self._discard(self.frame)
            self.frame = self._build(views, small)
            self._prepare_frame(ticks)
            more = self.frame.too_small()
            if more is None:
                break
            small = more
        self.close()
        raise self._too_small(views, small)

    def _too_small(self, views: tuple[str, ...], need: tuple[int, int]) -> Exception:
        from gradviz.engine.errors import UserError

        w, h = self.style.size
        fewer = " or fewer views" if len(views) > 1 else ""
        caption = " with a caption" if self.style.caption else ""
        return UserError(
            f"{w}x{h} is too small to draw {', '.join(views)}{caption} "
            f"readably: it needs at least {need[0]}x{need[1]}; choose a larger size{fewer}."
        )

    def _say_kept(self) -> None:
        kept, everything = self._candidates[self._choice], self._candidates[0]
        left = [v for v in everything if v not in kept]
        w, h = self.style.size
        lesson = self.info.scenario.lesson
        self.notes = (
            [
                f"{w}x{h} holds {spoken_list(keep_order(kept, lesson))} readably; left out {', '.join(left)} "
                "(ask for them with --views and a larger --size)."
            ]
            if left
            else []
        )

    # ------------------------------------------------------- preparing
    def prepare(self, ticks: Sequence[int]) -> None:
        """Get every frame of an export showing ``ticks`` ready, before the first is rendered.

        The runs are stepped to the last tick, so that a model that is not
        two-parameter gets its plane from the whole exported path (the principal
        components), the axes take the ranges that hold all of it, and the
        labels and rows the room of their tallest content; the cursor then goes
        back to the start. A frame that no longer fits its size then gives up a
        view (``style.fit``) or is refused.

        Raises
        ------
        UserError
            When no plane could be made and the surfaces are the only views, or
            the size is too small for the views.
        """
        if self._prepared or not ticks:
            return
        self._prepared = True
        self.step_to(ticks[-1])
        frame = self.frame
        if frame.wants_plane:
            assert frame.source is not None
            # The plane the lesson names (its view's picker leads with it), else the path's own.
            lesson = self.info.scenario.lesson
            chosen = lesson is not None and lesson.surface != "auto"
            kind = "curve" if frame.source.mode == "curve" else EXPORT_PLANE
            if chosen and frame.source.mode == "plane":
                kind = frame.source.plane_request_kind() or EXPORT_PLANE
            self.controller.request_plane(PlaneRequest(kind), fallback=FALLBACK_PLANE)
            if self._plane is None and len(self._candidates) > 1:
                # No plane could be made: the default views go on without the surfaces.
                others = [tuple(v for v in c if v not in SURFACES) for c in self._candidates]
                self._candidates = list(dict.fromkeys(c for c in others if c)) or self._candidates
        self._choose(ticks)
        self.controller.seek(-1)

    def _prepare_frame(self, ticks: Sequence[int]) -> None:
        self._frame_prepared = True
        frame = self.frame
        source = frame.source
        if source is not None and source.mode in ("plane", "curve"):
            if self._plane is None:
                frame.drop_surface(self.info, self._plane_error or "no plane could be made")
            else:
                if source.plane_surface is None:
                    frame.set_plane_surface(self._plane)
                # Only the same plane over a wider range: the plane itself stays for the whole animation.
                source.plane_requested.connect(self._widen)
        frame.reserve_counter(position_text(ticks[-1], self.ticks_per_iteration))
        tape = self.controller.tape
        assert tape is not None
        end = self.controller.cursor
        shown = sorted({tape.snap(t) for t in ticks if t <= end} or {-1})
        if len(shown) > RESERVE_SAMPLES:
            step = len(shown) / RESERVE_SAMPLES
            shown = [shown[int(i * step)] for i in range(RESERVE_SAMPLES)] + [shown[-1]]
        moments = [Moment(self.info, tape, t, hide_future=True) for t in shown]
        frame.prepare(moments, moments[-1])

    def _widen(self, request: PlaneRequest) -> None:
        if request.plane is not None:
            self.controller.request_plane(request, fallback=FALLBACK_PLANE)

    def _on_plane(self, surface: PlaneSurface) -> None:
        # The inline controller sends a coarse grid, then the full one: a frame only ever shows the full one.
        if surface.final:
            # The worker's note on a fallback plane ("... meanwhile") is for the window, which may
            # recompute; here the plane is final and the caption already names its kind.
            self._plane = replace(surface, note="")
            self.frame.set_plane_surface(self._plane)

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

    def moment(self) -> Moment:
        """The moment a frame shows now: the cursor's, with nothing after it."""
        moment = self.controller.moment()
        assert moment is not None
        return replace(moment, hide_future=True)

    def render(self) -> np.ndarray:
        """The current moment as an RGB frame."""
        self.frame.draw(self.moment())
        return self.frame.render_rgb()

    def frames(self, plan: FramePlan) -> Iterator[np.ndarray]:
        """Step and render every frame of ``plan``; stops early when every run has stopped."""
        ticks = plan.ticks()
        if ticks:
            self.prepare(ticks)
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
        """Release the frame's widgets and the lab (again: nothing)."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        if hasattr(self, "controller"):
            self.controller.shutdown()
        if hasattr(self, "frame"):
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
            # Before the writer exists: a model without a plane, or a frame that its contents
            # outgrow, fails here, leaving nothing behind.
            self.renderer.prepare(self.plan.ticks())
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
        for sentence in (*job.renderer.notes, *job.writer.notes):
            note(sentence)
    return path, job.done
