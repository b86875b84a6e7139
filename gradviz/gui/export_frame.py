"""One export frame: the window's own views, offscreen, laid out under a caption at one fixed size.

An :class:`ExportFrame` holds fresh instances of the chosen views, laid out by
the shared layout (:data:`~gradviz.gui.layout.WINDOW_LAYOUT`) in boxes instead
of splitters. Before the first frame it draws every moment the export will
show once (:meth:`ExportFrame.prepare`): the axes then keep the ranges that
hold the whole export, wrapped labels and the inspector's rows the room of
their tallest content, and the code panel its scroll position, so nothing
moves from frame to frame. :meth:`ExportFrame.problems` says what a size
cannot draw readably; :meth:`ExportFrame.too_small` finds the least size
that can. A lesson card (:meth:`ExportFrame.show_card`) holds a question or
its reveal in large type over views it asks nothing about, clear of the code's
current line and the inspector's leading rows (:meth:`ExportFrame.evidence`).

Both surfaces draw one :class:`~gradviz.gui.surface_state.SurfaceState`: the
2-D view's, or the frame's own when only the 3-D surface is shown.

The 3-D surface (``surface3d``) needs OpenGL: it is offered only where
:func:`~gradviz.gui.display.gl_unavailable` finds it, on the real display
platform, and nothing else imports ``pyqtgraph.opengl``.
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtGui import QFontMetrics, QImage, QPainter, QRegion
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QGraphicsView,
    QHBoxLayout,
    QLabel,
    QLayout,
    QStackedLayout,
    QTableWidget,
    QVBoxLayout,
    QWidget,
)

from gradviz.export.palette import RGB, hex_rgb
from gradviz.gui.layout import (
    DEFAULT_VIEWS,
    PRESENTATION_MIN_SCALE,
    VIEWS,
    WINDOW_LAYOUT,
    position_text,
)
from gradviz.gui.narration import narrate
from gradviz.gui.surface_state import SurfaceState
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
from gradviz.gui.window_history import LabInfo, Moment, PlaneRequest, PlaneSurface, code_lab

if TYPE_CHECKING:
    from gradviz.gui.views.surface3d import Surface3DView

T = TypeVar("T")

CAPTION_LINES = 2
MIN_CAPTION_POINTS = 7.0
DRAG_HINT = " Drag to rotate, wheel to zoom."
# Room kept around the paths on a true surface, a share of its range on each side.
SURFACE_MARGIN = 0.04
# Code lines narrower than this many characters wrap too often to read.
MIN_CODE_CHARS = 20
# The code's type gives way down to the caption's least so the loop's lines fit whole.
MIN_CODE_POINTS = MIN_CAPTION_POINTS
# A lesson card's type is no smaller than this; it gives up this many points to hide less evidence.
MIN_CARD_POINTS = 8.0
CARD_POINTS_TRADED = 2.0
# Moments drawn between two chances for a window to handle its events while an export prepares.
MEASURE_SLICE = 8
# The largest frame the command line takes (see cli.SIZES).
LARGEST = (7680, 4320)


def _rect_in(widget: QWidget, ancestor: QWidget) -> QRect:
    return QRect(widget.mapTo(ancestor, QPoint(0, 0)), widget.size())


def _area(rect: QRect) -> int:
    return 0 if rect.isEmpty() else rect.width() * rect.height()


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
        readably are left out, in :func:`~gradviz.gui.export_renderer.keep_order`'s order, and the scenario's
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


def card_points(height: int) -> float:
    """A lesson card's type for a frame ``height`` pixels high: presentation mode's, a little larger."""
    return presentation_points(height) + 2


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
    if code.height() < code.loop_extent(setup=False)[1]:
        out.append("code: the loop does not fit")
    return out


def _wrapped_labels(frame: ExportFrame) -> list[QLabel]:
    """Every word-wrapped label of the frame's views (their text may take more lines in one frame)."""
    out: list[QLabel] = []
    for view in frame.views.values():
        out += [label for label in view.findChildren(QLabel) if label.wordWrap()]
    return out


def run_inline(work: Generator[None, None, T]) -> T:
    """Do ``work`` to its end at once and return its value (the command line, tests: nothing to wait for)."""
    while True:
        try:
            next(work)
        except StopIteration as done:
            return done.value


def rgb_array(image: QImage) -> np.ndarray:
    """A ``Format_RGB32`` image as a ``(height, width, 3)`` uint8 RGB array (a copy).

    RGB32 holds each pixel as the 32-bit number 0xffRRGGBB (in memory B, G, R, 0xff on a
    little-endian machine): copying the three channels across is several times faster
    than Qt's conversion to RGB888.
    """
    w, h = image.width(), image.height()
    stride = image.bytesPerLine()
    pixels = np.frombuffer(image.constBits(), dtype=np.uint8, count=stride * h).reshape(h, stride)
    bgrx = pixels[:, : w * 4].reshape(h, w, 4)
    out = np.empty((h, w, 3), dtype=np.uint8)
    r, g, b = (2, 1, 0) if sys.byteorder == "little" else (1, 2, 3)
    out[..., 0], out[..., 1], out[..., 2] = bgrx[..., r], bgrx[..., g], bgrx[..., b]
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
        # One surface state for both surfaces: the 2-D view's, or the frame's own when it has none.
        self.surface: SurfaceView | None = self.views.get("surface")
        self.state = self.surface.state if self.surface is not None else SurfaceState()
        self._ask_plane: Callable[[PlaneRequest], None] | None = None
        if self.surface is not None:
            self.surface.plane_requested.connect(self._plane_requested)
        if "surface3d" in style.views:
            from gradviz.gui.views.surface3d import Surface3DView

            view3d = Surface3DView(self.state)
            view3d.activate()
            self.views["surface3d"] = view3d
        for view in self.views.values():
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
        # The type size each caption text fits in, by text and width: a frame is drawn twice
        # (measured, then rendered), and the same sentence comes back in many frames.
        self._caption_fits: dict[tuple[str, int, int], float] = {}
        # The narration of each moment drawn, once every record it reads is at hand.
        self._captions: dict[tuple[int, int, bool, str | None], str] = {}

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
        # A lesson's question or reveal, over the views (outside the layout: it covers them).
        self.card = QLabel("", self)
        self.card.setObjectName("exportCard")
        self.card.setWordWrap(True)
        self.card.setTextFormat(Qt.TextFormat.RichText)
        self.card.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.card.hide()
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
            # mode, in smaller type where that keeps the loop's lines whole; and a frame cannot be
            # scrolled, so it shows no scroll bar.
            code.set_still(MIN_CODE_POINTS)
        grads = self.views.get("grads")
        if grads is not None:
            grads.set_still()

    def _caption_rules(self) -> str:
        t = self.theme
        return (
            f"QLabel#exportCaption {{ padding: 4px 8px; border-radius: 4px; background: {t.base};"
            f" color: {t.text}; border: 1px solid {t.grid}; }}\n"
            f"QLabel#exportCounter {{ color: {t.muted}; padding-left: 6px; }}\n"
            f"QLabel#exportCard {{ padding: 10px 14px; border-radius: 6px; background: {t.base};"
            f" color: {t.text}; border: 2px solid {t.accent}; }}\n"
        )

    def _set_minimums(self) -> None:
        scale = PRESENTATION_MIN_SCALE if self.frame_style.presentation else 1.0
        for key, view in self.views.items():
            w, h = VIEWS[key].min_size
            view.setMinimumSize(int(w * scale), int(h * scale))
        if self.frame_style.presentation:
            for view in self.views.values():
                if hasattr(view, "set_point_size"):
                    view.set_point_size(self.frame_style.point_size)
        self._set_caption_points(self._caption_points)
        self.counter.setStyleSheet(f"font-size: {self.frame_style.point_size:g}pt;")
        # A fixed height for two lines: frames whose sentence is short keep the views in place.
        fix_lines(self.caption, CAPTION_LINES)

    def _set_caption_points(self, points: float) -> None:
        self._caption_points = points
        self.caption.setStyleSheet(f"font-size: {points:g}pt;")
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
            if key == "code" and view.lines:
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
            if key == "code" and view.lines:
                need = max(need, view.loop_extent(setup=False)[1])
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
        if self.surface is None:
            self.state.set_lab(info)  # else the 2-D view's set_lab does
        for view in self.views.values():
            view.set_lab(info)
            if hasattr(view, "show_controls"):
                # Pickers, line checkboxes and Recompute are for the window; a slide shows content
                # (the caption names the plane, the code's title or legend the runs).
                view.show_controls(False)
        if "grads" in self.views:
            self.views["grads"].fit_columns()

    @property
    def wants_plane(self) -> bool:
        """Whether the surface is drawn over a plane (or curve) that has yet to be computed."""
        return self.state.mode in ("plane", "curve") and self.state.plane is None

    def set_plane_surface(self, surface: PlaneSurface) -> None:
        """Hand a computed plane surface to the surface state (through the 2-D view, if shown)."""
        if self.surface is not None:
            self.surface.set_plane_surface(surface)
        else:
            self.state.set_plane_surface(surface)

    def on_plane_request(self, ask: Callable[[PlaneRequest], None]) -> None:
        """Call ``ask(request)`` when a path leaves the plane drawn: the wider plane surface to compute."""
        self._ask_plane = ask

    def _plane_requested(self, request: PlaneRequest) -> None:
        if self._ask_plane is not None:
            self._ask_plane(request)

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

    def prepare(self, moments: Sequence[Moment], last: Moment) -> Generator[None, None, None]:
        """Fix what would otherwise move between frames, from every moment the export will show.

        A generator: it yields between every few moments drawn, where a window may
        handle its events.

        Each of ``moments`` is drawn once: wrapped labels keep the height of the
        tallest text they show and the inspector's rows their tallest height. Then
        the surface keeps the range that holds every run's path (with equal units
        across and up on a true surface), the timeline the ranges of ``last`` (the
        export's last moment), and the code panel shows the loop.
        """
        self.settle()
        self._moments = [*moments, last]
        self._tall = yield from self._measuring(self._moments)
        self.settle()
        state = self.state
        if state.ready:
            # The extent grows to hold every path, up to the state's cap (a plane asks for a wider one).
            request = state.follow(state.paths(last))
            if request is not None:
                self._plane_requested(request)
            (x0, x1), (y0, y1) = state.extent
            mx, my = SURFACE_MARGIN * (x1 - x0), SURFACE_MARGIN * (y1 - y0)
            extent = ((x0 - mx, x1 + mx), (y0 - my, y1 + my))
            surface = self.surface
            if surface is None:
                state.fix(extent)  # no plot to take proportions from: the mesh spans the extent
            else:
                # Equal units across and up where the plot is seen and the surface is the true one.
                square = state.mode == "model" and surface.isVisibleTo(self)
                surface.fix_range(extent, equal_aspect=square)
                if square:
                    # The axes' labels may have taken other room: fit the range to the plot as it is now.
                    self.settle()
                    surface.fix_range(surface.view_range(), equal_aspect=True)
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
        return run_inline(self._measuring(moments))

    def _measuring(self, moments: Sequence[Moment]) -> Generator[None, None, list[Moment]]:
        """:meth:`_measure`, yielding between every few moments drawn."""
        labels = _wrapped_labels(self)
        tallest: dict[QLabel, tuple[int, Moment]] = {}
        grads = self.views.get("grads")
        rows: list[tuple[int, Moment | None]] = [(0, None)] * (len(grads.row_heights()) if grads else 0)
        self._row_heights = None  # measure the rows as the content sets them
        if moments:
            # A draw may show a label (the inspector's readout): lay it out before measuring.
            self.draw(moments[-1])
            self.settle()
        for n, moment in enumerate(moments, start=1):
            if n % MEASURE_SLICE == 0:
                yield
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

    def draw(self, moment: Moment, caption: str | None = None) -> None:
        """Draw ``moment`` in every view and set its caption (the narration unless ``caption`` is given)."""
        # The frame is never shown, so nothing lays it out but this (the caption's fit needs its width).
        self._box.activate()
        code, shown = self.views.get("code"), code_lab(moment)
        if code is not None and shown is not None and code.info is not shown:
            code.set_lab(shown)  # a recording's op in another file of the script
        for view in self.views.values():
            view.draw(moment)
        self._hold()
        view3d = self.views.get("surface3d")
        if view3d is not None:
            # A frame cannot be rotated: drop the view's hint on how to.
            view3d.caption.setText(view3d.caption.text().replace(DRAG_HINT, ""))
        if self.frame_style.caption:
            code = self.views.get("code")
            graph = self.shown_views().get("graph")
            if caption is None and graph is not None:
                caption = graph.part_sentence()  # type: ignore[attr-defined]  # a frame within a backward
            if caption is None:
                said = moment if shown is None else replace(moment, info=shown)  # quotes the file shown
                caption = self._narration(said, code.run_name if code is not None else None)
            self._fit_caption(caption)
            info = moment.info
            where = info.position or (lambda tick: position_text(tick, info.ticks_per_iteration))
            self.counter.setText(where(moment.tick))

    def _narration(self, moment: Moment, run: str | None) -> str:
        """:func:`caption_text` of ``moment``, made once for the frame measured and then rendered."""
        key = (moment.tick, moment.history.last_tick, moment.hide_future, run)
        text = self._captions.get(key)
        if text is None:
            text = caption_text(moment, run)
            if not moment.history.missing(moment.tick):  # a record still being rebuilt changes it
                self._captions[key] = text
        return text

    def reserve_counter(self, widest: str) -> None:
        """Fix the counter's width to fit ``widest``, so the caption's box keeps one size in every frame."""
        self.counter.ensurePolished()  # the style sheet's type size applies from here on
        fm = QFontMetrics(self.counter.font())
        self.counter.setFixedWidth(fm.horizontalAdvance(widest) + 12)

    def _fit_caption(self, text: str) -> None:
        """Show ``text`` in the caption's lines, in smaller type when it would not fit."""
        self.caption.setText(text)
        width = max(self.caption.contentsRect().width() - 16, 50)
        height = self.caption.contentsRect().height() - 8
        key = (text, width, height)
        points = self._caption_fits.get(key)
        if points is None:
            points = self.frame_style.point_size + 2
            font = self.caption.font()
            while points > MIN_CAPTION_POINTS:
                font.setPointSizeF(points)
                needed = QFontMetrics(font).boundingRect(
                    QRect(0, 0, width, 10_000), Qt.TextFlag.TextWordWrap, text
                )
                if needed.height() <= height:
                    break
                points -= 0.5
            self._caption_fits[key] = points
        if points != self._caption_points:
            self._set_caption_points(points)

    def evidence(self, reads: Iterable[str] = ()) -> list[QRect]:
        """Where the frame shows what a lesson card asks about, in frame coordinates.

        The code's lines that ran and the line that runs next, and the inspector's
        rows the lesson leads with (every row, when it leads with none): the parts
        of them in sight; and the whole of every other view the card ``reads``
        (the surfaces, the timeline: :func:`~gradviz.gui.export_lesson.stop_views`).
        """
        out: list[QRect] = [
            _rect_in(view, self)
            for key, view in self.views.items()
            if key in reads and key not in ("code", "grads") and view.isVisibleTo(self)
        ]
        code = self.views.get("code")
        if code is not None and code.isVisibleTo(self):
            editor = code.editor
            rows = code.marked_rows()
            seen = editor.viewport().rect()
            for row in rows:
                block = editor.document().findBlockByNumber(row)
                line = editor.blockBoundingGeometry(block).translated(editor.contentOffset()).toRect()
                line = QRect(0, line.y(), seen.width(), line.height()).intersected(seen)
                if not line.isEmpty():
                    out.append(QRect(editor.viewport().mapTo(self, line.topLeft()), line.size()))
        grads = self.views.get("grads")
        if grads is not None and grads.isVisibleTo(self):
            table = grads.table
            lead = [i for i, r in enumerate(grads.shown_rows) if r.lead] or range(table.rowCount())
            seen = table.viewport().rect()
            for row in lead:
                if table.isRowHidden(row):
                    continue
                box = QRect(0, table.rowViewportPosition(row), seen.width(), table.rowHeight(row))
                box = box.intersected(seen)
                if not box.isEmpty():
                    out.append(QRect(table.viewport().mapTo(self, box.topLeft()), box.size()))
        return out

    def _card_places(self, top: int, margin: int, reads: Iterable[str] = ()) -> list[QRect]:
        """Where a card may go: the band of the views, or a column of them, clear of :meth:`evidence`.

        Where some evidence lies in a place, the part above all of it and the part below
        all of it are offered instead.
        """
        w, h = self.frame_style.size
        shown = [v for v in self.views.values() if v.isVisibleTo(self)]
        # Down to the views' bottom edge: a card ending above it would leave a strip of cut text.
        bottom = max((_rect_in(v, self).bottom() for v in shown), default=h - margin)
        places = [QRect(margin, top, w - 2 * margin, bottom - top + 1)]
        for column in WINDOW_LAYOUT.arrange(self.views):
            boxes = [_rect_in(self.views[k], self) for k in column.views if self.views[k] in shown]
            if boxes:
                left = min(b.left() for b in boxes)
                right = max(b.right() for b in boxes)
                places.append(QRect(left, top, right - left + 1, bottom - top + 1))
        evidence = self.evidence(reads)
        out: list[QRect] = []
        for place in places:
            hit = [e for e in evidence if e.intersects(place)]
            if not hit:
                out.append(place)
                continue
            above = min(e.top() for e in hit) - 6
            below = max(e.bottom() for e in hit) + 6
            out.append(QRect(place.left(), place.top(), place.width(), above - place.top() + 1))
            out.append(QRect(place.left(), below, place.width(), place.bottom() - below + 1))
        return [p for p in out if p.height() > 0 and p.width() > 0]

    def show_card(self, html: str, reads: Iterable[str] = ()) -> None:
        """Hold ``html`` (a lesson's question or reveal) over the views in large type; "" hides it.

        The card covers no :meth:`evidence` (that of the views it ``reads`` included):
        of the band of the views, a column of them,
        or the part of either above or below the evidence, it takes the place that holds
        its text in large type (up to :data:`CARD_POINTS_TRADED` below the largest any
        place allows) hiding least of the code and the inspector, as tall as its text
        needs, at that place's bottom. The views stay where the play frames have them, so
        nothing jumps.
        """
        if not html:
            self.card.hide()
            return
        w = self.frame_style.size[0]
        top = _rect_in(self.caption, self).bottom() + 8 if self.frame_style.caption else 8
        margin = max(8, w // 40)
        self.card.setText(html)
        reads = frozenset(reads)
        evidence_views = [
            v for k, v in self.views.items() if k in {"code", "grads"} | reads and v.isVisibleTo(self)
        ]
        fitting: list[tuple[float, int, int, QRect]] = []
        # Clear of every view it reads where it fits so; else, as a last resort, of the code's
        # line and the inspector's rows alone.
        for avoid in (reads, frozenset()):
            for place in self._card_places(top, margin, avoid):
                points, need = self._card_fit(place.width(), place.height())
                if need <= place.height():
                    card = QRect(place.left(), place.bottom() + 1 - need, place.width(), need)
                    hidden = sum(_area(card.intersected(_rect_in(v, self))) for v in evidence_views)
                    fitting.append((points, hidden, place.top(), place))
            if fitting:
                break
        if fitting:
            # A little smaller type is worth hiding less of the code and the inspector; then the
            # lowest place, which covers the code after the loop rather than the loop.
            largest = max(f[0] for f in fitting)
            near = [f for f in fitting if f[0] >= largest - CARD_POINTS_TRADED]
            place = min(near, key=lambda f: (f[1], -f[2]))[3]
        else:
            place = max(self._card_places(top, margin, reads), key=lambda p: p.height())
        _, need = self._card_fit(place.width(), place.height())
        height = min(need, place.height())
        self.card.setGeometry(place.left(), place.bottom() + 1 - height, place.width(), height)
        self.card.show()
        self.card.raise_()

    def _card_fit(self, width: int, room: int) -> tuple[float, int]:
        """The largest card type (down to the least) whose text fits ``room`` at ``width``, and its height."""
        points = card_points(self.frame_style.size[1])
        while True:
            self.card.setStyleSheet(f"font-size: {points:g}pt;")
            self.card.ensurePolished()
            need = self.card.heightForWidth(width)
            if need <= room or points <= MIN_CARD_POINTS:
                return points, need
            points -= 1.0

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
        return rgb_array(image)
