"""The loss surface under the runs: their paths over it, and the arrows at each run.

What is drawn is held by a :class:`~gradviz.gui.surface_state.SurfaceState`
(the 3-D view reads the same one). A two-parameter model has a true surface,
evaluated from the engine's closed form (numpy only, so drawing never touches
the live lab), with equal units across and up. Any other
model is shown over a plane through weight space (or, with one parameter, as
a loss curve) computed off the GUI thread: the view asks for it with
:attr:`SurfaceView.plane_requested` and draws what :meth:`SurfaceView.set_plane_surface`
brings. Paths and arrows are projected onto the plane, and the caption says how
far each run's point lies off it. Arrows are drawn as parameter changes,
``-lr × gradient``: the stale part still in ``.grad``, then this backward's
part, and the optimizer's next step.
"""

from __future__ import annotations

import math
from typing import Any, cast

import contourpy
import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QPainterPath
from PySide6.QtWidgets import (
    QComboBox,
    QGraphicsItem,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QStackedLayout,
    QVBoxLayout,
    QWidget,
)

from gradviz.gui.surface_state import CONTOURS, Extent, SurfaceGrid, SurfaceState
from gradviz.gui.theme import BASE_POINT_SIZE, LIGHT, Theme, run_color, run_dash, run_glyph, run_symbol
from gradviz.gui.views.axes import BottomAxis
from gradviz.gui.views.dashes import LiveLine
from gradviz.gui.views.growing import GrowingLine
from gradviz.gui.views.scatter import Scatter
from gradviz.gui.window_history import LabInfo, Moment, PlaneRequest, PlaneSurface
from gradviz.gui.worker import plane_kinds

# Pixels between the step's arrow and the backward's arrows drawn beside it.
ARROW_LANE = 5.0
# The current marker's size in pixels at the window's type size (it grows with presentation type);
# runs at one point are drawn as rings this much larger each.
POINT_SIZE = 15
RING = 9
# Current points closer than this many pixels (at the window's type) hide each other: nested rings.
SAME_POINT = 7.0
# A path of at most this many points has a marker on each: beyond, they run together.
MARKED_POINTS = 150
# An arrow gets its head only when it is this many heads long.
HEAD_ROOM = 1.5
# A plane with no loss known anywhere on it (a replayed recording has no model or data to evaluate).
NO_LOSS = (
    "No loss surface: no loss is known over this plane (a recording holds no model or data); "
    "only the path is drawn."
)
PLANE_WORDS = {
    "axes": "two parameters, the others held where the first run was",
    "random": "random filter-normalised directions through the first run's point",
    "pca": "the principal components of the first run's path",
    "three-points": "the start and the first two runs' points",
    "curve": "the one parameter",
}


def lower_shade(theme: Theme) -> str:
    """How ``theme`` shades lower loss, for captions: ``"lighter"`` or ``"darker"``.

    Read from the theme's own surface colours, so the words follow the shading in
    either theme.
    """
    low, high = QColor(theme.surface_low), QColor(theme.surface_high)
    return "lighter" if low.lightnessF() > high.lightnessF() else "darker"


class _RunItems:
    """The graphics items of one run: its path, its current point and its arrows."""

    def __init__(self, plot: pg.PlotItem, index: int, name: str) -> None:
        colour = QColor(run_color(index))
        self.colour = colour
        self.symbol = run_symbol(index)
        # The path grows at its end: its settled part is painted from a pixmap (see growing.py).
        self.path = GrowingLine(pg.mkPen(colour, width=2, style=run_dash(index)), connect="finite")
        # A marker on every point while they can be told apart (MARKED_POINTS); a long path is a line.
        self.dots = Scatter(size=5, symbol=self.symbol, brush=colour, pen=None)
        # Single markers are moved with setPos: re-setting a scatter's data costs milliseconds a frame.
        self.size = float(POINT_SIZE)
        self.point = Scatter(
            [0.0], [0.0], size=POINT_SIZE, symbol=self.symbol, brush=colour, pen=pg.mkPen("w", width=2)
        )
        self.point.setZValue(20)
        self.diverged = Scatter(
            [0.0], [0.0], size=22, symbol="x", brush=colour, pen=pg.mkPen(colour, width=2)
        )
        self.diverged.setZValue(21)
        self.diverged.setVisible(False)
        # A marker that only moves is copied from a pixmap rather than painted again each frame.
        for marker in (self.point, self.diverged):
            marker.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.shown: tuple[float, ...] | None = None
        self.diverged_label = pg.TextItem("", color=colour, anchor=(0, 1))
        self.diverged_label.setZValue(21)
        # Two points each, moved every op: lines drawn anew each frame, without a curve item's costs.
        self.lines = {
            "stale": LiveLine(pg.mkPen(colour, width=2, style=Qt.PenStyle.DotLine)),
            "fresh": LiveLine(pg.mkPen(colour, width=2)),
            "step": LiveLine(pg.mkPen(colour, width=4)),
        }
        # Each head is made pointing left and turned to its arrow by rotating the item: re-styling
        # an arrow to a new angle makes its path anew.
        self.heads = {
            key: pg.ArrowItem(
                angle=0, headLen=14 if key == "step" else 10, tipAngle=30, brush=colour, pen=pg.mkPen(colour)
            )
            for key in self.lines
        }
        for head in self.heads.values():
            head.setZValue(15)
        for item in self.items():
            plot.addItem(item)

    def items(self) -> list[pg.GraphicsObject]:
        """Every graphics item of the run."""
        return [
            self.path, self.dots, self.point, self.diverged, self.diverged_label,
            *self.lines.values(), *self.heads.values(),
        ]  # fmt: skip


class ContourLine(pg.IsocurveItem):
    """pyqtgraph's isocurve item, its line traced by contourpy (compiled marching squares).

    pyqtgraph traces in Python, about 18 ms a line on a 121 x 121 grid: a new grid
    held up its frame for the nine lines. Same place: image pixel coordinates, cell
    centres at ``i + 0.5``, lines carried on to the image's edges.
    """

    def generatePath(self) -> None:
        if self.data is None:
            self.path = None
            return
        self.path = contour_path(np.asarray(self.data, dtype=np.float64), float(self.level))


def contour_path(data: np.ndarray, level: float) -> QPainterPath:
    """The line where ``data[i, j]`` (``i`` across) crosses ``level``, in image pixel coordinates."""
    # The edge values repeated half a pixel out: lines reach the image's edges, as pyqtgraph draws them.
    z = np.pad(data, 1, mode="edge").T
    nx, ny = data.shape
    x = np.concatenate([[0.0], np.arange(nx) + 0.5, [float(nx)]])
    y = np.concatenate([[0.0], np.arange(ny) + 0.5, [float(ny)]])
    generator = contourpy.contour_generator(x, y, np.ma.masked_invalid(z), line_type="Separate")
    lines = cast("list[np.ndarray]", generator.lines(level))
    lines = [line for line in lines if len(line) >= 2]
    if not lines:
        return QPainterPath()
    points = np.concatenate(lines)
    connect = np.ones(len(points), dtype=bool)
    connect[np.cumsum([len(line) for line in lines]) - 1] = False  # a line ends: lift the pen
    return pg.arrayToQPath(points[:, 0], points[:, 1], connect=connect)


class SurfaceView(QWidget):
    """Heatmap and contours of the loss over two parameters or a plane, with every run drawn on it.

    What is drawn lives in :attr:`state` (a :class:`~gradviz.gui.surface_state.SurfaceState`),
    which the 3-D view and export frames read too; this widget only draws it.

    Signals
    -------
    plane_requested(PlaneRequest):
        The view needs a surface over a plane (a new lab, another plane kind,
        "Recompute", or a path that left the computed range).
    surface_changed():
        A new grid is drawn (:meth:`grid` returns it).
    """

    plane_requested = Signal(object)
    surface_changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme: Theme = LIGHT
        self.info: LabInfo | None = None
        self.state = SurfaceState()
        self.items: list[_RunItems] = []
        self.residual_text = ""
        # The extent the plot was last set to show.
        self._ranged: Extent | None = None
        # Runs whose current points coincide, each group in run order (drawn as nested rings).
        self._together: tuple[tuple[int, ...], ...] = ()
        # Markers grow with the type: at presentation size they read from the back of a hall.
        self.marker_scale = 1.0
        # The state's version drawn last: shading and contours are redrawn only for a newer one.
        self._painted: int | None = None

        self.title = QLabel("Loss surface")
        self._plane_title = "Loss surface"
        self.title.setObjectName("panelTitle")
        # A long title wraps rather than holding the column wide (presentation type, a lesson beside).
        self.title.setWordWrap(True)
        self.caption = QLabel("")
        self.caption.setObjectName("status")
        self.caption.setWordWrap(True)
        self.caption.setMinimumWidth(100)
        self.plot_widget = pg.PlotWidget(axisItems={"bottom": BottomAxis()})
        self.plot_widget.setObjectName("surfacePlot")
        self.plot = self.plot_widget.getPlotItem()
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        # Ticks read as the weights themselves: a "(x0.001)" pyqtgraph would add to a label names no
        # weight, and a long label it lengthens is cut at the plot's edge.
        for name in ("left", "bottom"):
            self.plot.getAxis(name).enableAutoSIPrefix(False)
        # The left axis changes only with the range: painted from a pixmap while the paths move
        # (as the bottom one is, see axes.py).
        self.plot.getAxis("left").setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.image = pg.ImageItem()
        self.image.setZValue(-10)
        # The shading and contours change only when the range does: paint them from a pixmap.
        self.image.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.plot.addItem(self.image)
        # One set of contour items for the view's life: each traces its line once per grid.
        self.contours: list[ContourLine] = []
        for _ in range(CONTOURS):
            curve = ContourLine(level=0.0, pen=pg.mkPen(QColor(self.theme.contour), width=1))
            curve.setParentItem(self.image)
            curve.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
            self.contours.append(curve)
        self.minimum = Scatter(size=12, symbol="+", pen=pg.mkPen("k", width=2))
        # Under the paths, it would be painted again every frame of Play: copied from a pixmap instead.
        self.minimum.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.plot.addItem(self.minimum)
        # Legends are made by hand: PlotItem.addLegend would collect every named item itself.
        # The key to runs and arrows sits above the plot, so it never covers a path or a marker.
        self.key = QLabel("")
        self.key.setObjectName("surfaceKey")
        self.key.setWordWrap(True)
        self.placeholder = QLabel("")
        self.placeholder.setObjectName("placeholder")
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setWordWrap(True)
        self.curve = pg.PlotDataItem(pen=pg.mkPen("#777", width=2), connect="finite")
        self.curve.setZValue(-5)
        self.plot.addItem(self.curve)
        # A true surface keeps equal units across and up; its grid follows the plot's shape.
        self.plot.getViewBox().sigResized.connect(self._fit_aspect)

        self.plane_kind = QComboBox()
        self.plane_kind.setObjectName("planeKind")
        self.plane_kind.setToolTip("Which plane through weight space the surface is drawn over")
        self.plane_kind.activated.connect(lambda _: self.recompute())
        self.plane_kind.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.recompute_button = QPushButton("Recompute")
        self.recompute_button.setObjectName("recomputePlane")
        self.recompute_button.setToolTip("Make the plane again from where the runs are now")
        self.recompute_button.clicked.connect(self.recompute)
        self.recompute_button.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.progress = QProgressBar()
        self.progress.setObjectName("planeProgress")
        self.progress.setRange(0, 0)  # busy: how long a surface takes is not known in advance
        self.progress.setMaximumWidth(120)
        self.progress.setTextVisible(False)
        self.progress.setVisible(False)
        # Presentation mode shows the surface, not the plane's picker and Recompute.
        self.controls_shown = True
        self.controls = QWidget()
        row = QHBoxLayout(self.controls)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QLabel("Plane"))
        row.addWidget(self.plane_kind, 1)
        row.addWidget(self.recompute_button)
        row.addWidget(self.progress)
        self.controls.setVisible(False)

        page = QWidget()
        inner = QVBoxLayout(page)
        inner.setContentsMargins(0, 0, 0, 0)
        inner.addWidget(self.key)
        inner.addWidget(self.plot_widget, 1)
        inner.addWidget(self.caption)
        self.stack = QStackedLayout()
        self.stack.addWidget(page)
        self.stack.addWidget(self.placeholder)
        box = QVBoxLayout(self)
        box.setContentsMargins(4, 4, 4, 4)
        box.addWidget(self.title)
        # Above either page: where no plane could be made, another kind may be chosen.
        box.addWidget(self.controls)
        box.addLayout(self.stack, 1)

    # ------------------------------------------------- what the state holds
    @property
    def mode(self) -> str:
        """``"model"``, ``"plane"``, ``"curve"`` or ``"none"`` (see :class:`SurfaceState`)."""
        return self.state.mode

    @property
    def plane_surface(self) -> PlaneSurface | None:
        """The plane surface drawn now, None for a true surface or until one is computed."""
        return self.state.plane

    @property
    def x_range(self) -> tuple[float, float]:
        return self.state.extent[0]

    @property
    def y_range(self) -> tuple[float, float]:
        return self.state.extent[1]

    @property
    def home(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """The extent the surface started with (a true surface's start, a plane's first range)."""
        return self.state.home

    @property
    def fixed(self) -> bool:
        return self.state.fixed

    @property
    def log_colour(self) -> bool:
        grid = self.state.grid
        return grid is not None and grid.colour.log

    # ------------------------------------------------------------- setup
    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.plot_widget.setBackground(theme.base)
        for name in ("left", "bottom"):
            axis = self.plot.getAxis(name)
            axis.setPen(pg.mkPen(theme.muted))
            axis.setTextPen(pg.mkPen(theme.text))
        self.minimum.setPen(pg.mkPen(theme.text, width=2))
        self._set_key()
        for items in self.items:
            items.point.setPen(pg.mkPen(theme.base, width=2))
        self.curve.setPen(pg.mkPen(theme.muted, width=2))
        pen = pg.mkPen(QColor(theme.contour), width=1)
        for contour in self.contours:
            contour.setPen(pen)
        if self.state.grid is not None:
            # The same grid in other colours: the contours keep their lines.
            self._shade(self.state.grid)
        self._axis_labels()
        self._set_caption()

    def _set_key(self) -> None:
        """The key above the plot: each run's colour and marker, and what each arrow is."""
        if self.info is None:
            self.key.setText("")
            return
        runs = "&nbsp;&nbsp;".join(
            f"<span style='color:{run_color(i)}'>{run_glyph(i)}&nbsp;{run.name}</span>"
            for i, run in enumerate(self.info.runs)
        )
        loops = [r.spec.loop for r in self.info.runs]
        # Micro-batches of one step accumulate by design: what is already there is not stale.
        designed = all("zero_grad" in lp.order for lp in loops) and any(lp.accumulate > 1 for lp in loops)
        earlier = "earlier micro-batches" if designed else "stale .grad"
        arrows = f"arrows (−lr × gradient): ┈ {earlier} · ─ this backward · ━ next step()"
        same = "".join(
            "&nbsp;&nbsp;"
            + " = ".join(
                f"<span style='color:{run_color(i)}'>{run_glyph(i)}&nbsp;{self.info.runs[i].name}</span>"
                for i in group
            )
            + f"<span style='color:{self.theme.text}'>: same point (nested rings)</span>"
            for group in self._together
        )
        self.key.setText(f"{runs}&nbsp;&nbsp;<span style='color:{self.theme.muted}'>{arrows}</span>{same}")

    def show_controls(self, on: bool) -> None:
        """Show or hide the plane's picker and Recompute (a true surface has neither, nor a recording)."""
        self.controls_shown = on
        self.controls.setVisible(on and self._planes_to_choose())

    def _planes_to_choose(self) -> bool:
        """Whether a plane can be chosen and made again: a lab's over weight space, not a recording's
        (which has no model or data, only its path's one plane)."""
        info = self.info
        return (
            info is not None
            and info.surface is None
            and not info.recorded
            and self.mode in ("plane", "curve")
        )

    def set_point_size(self, size: float) -> None:
        """Type size of axis labels and ticks; the current markers grow with it."""
        self.marker_scale = max(1.0, size / BASE_POINT_SIZE)
        self.state.edge_pixels = (POINT_SIZE + RING) * self.marker_scale / 2 + 4
        for items in self.items:
            items.size = 0.0  # drawn again at the new size
        font = QFont()
        font.setPointSizeF(size)
        for name in ("left", "bottom"):
            axis = self.plot.getAxis(name)
            axis.setStyle(tickFont=font)
            axis.label.setFont(font)
        self._axis_labels()

    def _axis_labels(self) -> None:
        if self.info is None:
            return
        if self.info.surface is not None:
            x_name, y_name = self.info.surface.axis_names
        elif self.plane_surface is not None:
            x_name, y_name = self.plane_surface.plane.labels
            if self.mode == "curve":
                y_name = self.plane_surface.loss_name
        else:
            return
        size = self.plot.getAxis("bottom").label.font().pointSizeF()
        style = {"color": self.theme.text, "font-size": f"{size:g}pt"}
        self.plot.setLabel("bottom", x_name, **style)
        self.plot.setLabel("left", y_name, **style)

    def set_lab(self, info: LabInfo) -> None:
        """Prepare the surface of a new lab; models without two parameters ask for a plane."""
        self.info = info
        for items in self.items:
            for item in items.items():
                self.plot.removeItem(item)
        self.items = []
        self.residual_text = ""
        self._together = ()
        self._ranged = None
        self.curve.setData([], [])
        self.image.clear()
        for contour in self.contours:
            contour.setData(None)
        self._painted = None
        self.stack.setCurrentIndex(0)
        for i, run in enumerate(info.runs):
            items = _RunItems(self.plot, i, run.name)
            items.point.setPen(pg.mkPen(self.theme.base, width=2))
            self.items.append(items)
        self._set_key()
        model = info.surface
        lesson = info.scenario.lesson
        vb = self.plot.getViewBox()
        vb.setAspectLocked(model is not None and not (lesson is not None and lesson.surface == "none"), 1.0)
        self.state.set_lab(info)
        if self.mode == "none":
            self._set_no_surface(lesson.point if lesson is not None else "")
            return
        if model is None:
            self._set_plane_lab(info)
            return
        self.controls.setVisible(False)
        self.curve.setVisible(False)
        self.image.setVisible(True)
        self.minimum.setData([model.minimum[0]], [model.minimum[1]])
        self.minimum.setToolTip("the minimum" if model.kind != "saddle" else "the saddle point")
        self._axis_labels()
        if model.kind == "linear":
            factor = "½ · " if model.coefficients[-1] == 0.5 else ""
            what = f"{factor}mean squared error over the whole dataset"
        else:
            what = f"the {model.kind} function"
        self.title.setText(f"Loss surface: {what}")
        self._fit_aspect()
        self._show()

    def _set_no_surface(self, point: str) -> None:
        """Say in the surface's place that this lesson has none to show, and why."""
        self.controls.setVisible(False)
        self.title.setText("Loss surface")
        self.placeholder.setText(
            f"No loss surface for this lesson: no plane through weight space shows it. {point}"
        )
        self.stack.setCurrentIndex(1)

    def _set_plane_lab(self, info: LabInfo) -> None:
        kinds = plane_kinds(info)
        self.minimum.setData([], [])
        self.plane_kind.blockSignals(True)
        self.plane_kind.clear()
        for kind, label in kinds:
            self.plane_kind.addItem(label, kind)
        self.plane_kind.blockSignals(False)
        self.plane_kind.setEnabled(len(kinds) > 1)
        self.controls.setVisible(self.controls_shown and self._planes_to_choose())
        self.curve.setVisible(self.mode == "curve")
        self.image.setVisible(self.mode == "plane")
        n = info.parameter_count
        what = "loss curve over its one parameter" if self.mode == "curve" else "plane through weight space"
        self._plane_title = f"Loss surface: {n:,} parameter{'s' if n != 1 else ''}, a {what}"
        self.title.setText(self._plane_title)
        self.caption.setText("Computing the surface…")
        self.recompute()

    def plane_request_kind(self) -> str:
        """The plane kind chosen in the view's picker (empty for two-parameter models)."""
        return str(self.plane_kind.currentData() or "")

    def recompute(self) -> None:
        """Ask for a new plane of the chosen kind, made from where the runs are now."""
        if self.mode not in ("plane", "curve"):
            return
        self.state.forget_request()
        self.plane_requested.emit(PlaneRequest(self.plane_request_kind()))

    def set_plane_busy(self, busy: bool) -> None:
        """Show or hide the progress indicator of the surface being computed."""
        self.progress.setVisible(busy and self.mode in ("plane", "curve"))

    def set_plane_failed(self, message: str) -> None:
        """Say why no surface could be drawn, and that none is (the title no longer promises a plane)."""
        if self.mode in ("plane", "curve"):
            self.title.setText("Loss surface: none drawn")
            self.caption.setText(message)
            # The reason in the plot's place: axes around nothing would read as a surface.
            self.placeholder.setText(message)
            self.stack.setCurrentIndex(1)

    def set_plane_surface(self, surface: PlaneSurface) -> None:
        """Draw a surface over a plane (the coarse preview, then the full grid)."""
        new_plane = self.plane_surface is None or self.plane_surface.plane is not surface.plane
        if not self.state.set_plane_surface(surface):
            return
        self.stack.setCurrentIndex(0)
        self.title.setText(surface.title or self._plane_title)
        if new_plane:
            index = self.plane_kind.findData(surface.kind)
            if index >= 0:
                self.plane_kind.setCurrentIndex(index)
            for items in self.items:
                items.shown = None
        elif self.mode == "curve":
            for items in self.items:
                items.shown = None
        self._show()

    # -------------------------------------------------------------- shading
    def _fit_aspect(self) -> None:
        """Equal units across and up on a true surface: its extent takes the plot's proportions."""
        vb = self.plot.getViewBox()
        self.state.set_pixels(float(vb.width()), float(vb.height()))
        if self.mode != "model":
            return
        self.state.set_aspect(float(vb.width()), float(vb.height()))
        self._show()

    def _show(self) -> None:
        """Draw the state's surface if it is newer than the one drawn (once per grid, never per frame)."""
        state = self.state
        if self._painted == state.version:
            return
        if self.mode == "curve" and state.curve is not None:
            xs, shown = state.curve
            self.curve.setData(xs, shown)
        elif state.grid is not None and not np.isfinite(state.grid.z).any():
            # No loss known anywhere on the plane (a recording): the paths alone, over their plane.
            self.image.clear()
            for contour in self.contours:
                contour.setData(None)
        elif state.grid is not None:
            shaded = self._shade(state.grid)
            levels = state.grid.colour.levels(len(self.contours))
            for contour, level in zip(self.contours, levels, strict=True):
                contour.setData(shaded, float(level))
        else:
            return
        self._painted = state.version
        self._set_range()
        self._axis_labels()
        self._set_caption()
        self.surface_changed.emit()

    def _set_range(self) -> None:
        """Show the state's extent (once per change: a plot's range costs a relayout of its axes)."""
        if self._ranged != self.state.extent:
            self._ranged = self.state.extent
            self.plot.setRange(xRange=self.x_range, yRange=self.y_range, padding=0)

    def _shade(self, grid: SurfaceGrid) -> np.ndarray:
        """Put ``grid`` into the image in the theme's colours; returns the values shaded."""
        xs, ys = grid.xs, grid.ys
        colour = grid.colour
        shown = colour.values(grid.z)
        cmap = pg.ColorMap([0.0, 1.0], [QColor(self.theme.surface_low), QColor(self.theme.surface_high)])
        self.image.setImage(shown, levels=(colour.lo, colour.hi), lut=cmap.getLookupTable(nPts=256))
        # Pixel centres sit on the grid points: the image reaches half a cell beyond them.
        dx = (xs[-1] - xs[0]) / max(len(xs) - 1, 1)
        dy = (ys[-1] - ys[0]) / max(len(ys) - 1, 1)
        if self.mode == "model":
            dx = dy = 0.0  # the analytic grid is drawn edge to edge, as it always was
        self.image.setRect(
            QRectF(
                float(xs[0] - dx / 2),
                float(ys[0] - dy / 2),
                float(xs[-1] - xs[0] + dx),
                float(ys[-1] - ys[0] + dy),
            )
        )
        return shown

    def _set_caption(self) -> None:
        if self.info is None or self.mode == "none":
            return
        if self.mode == "model":
            assert self.info.surface is not None
            colour = "log₁₀ loss" if self.log_colour else "loss"
            where = "the saddle point" if self.info.surface.kind == "saddle" else "the minimum"
            text = f"Shade and contours: {colour}, {lower_shade(self.theme)} is lower; + marks {where}."
        else:
            text = self.plane_caption()
        if text != self.caption.text():
            self.caption.setText(text)

    def grid(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The surface drawn now, ``(xs, ys, Z)`` with ``Z[i, j]`` at ``(xs[i], ys[j])``; None if none."""
        grid = self.state.grid
        return None if grid is None else (grid.xs, grid.ys, grid.z)

    def loss_at(self, pts: np.ndarray) -> np.ndarray:
        """The loss of the drawn surface at points ``(M, 2)`` (exact for two-parameter models)."""
        return self.state.loss_at(pts)

    def plane_caption(self) -> str:
        """The caption of a plane surface: what is shaded, and how far each run lies off the plane."""
        ps = self.plane_surface
        if ps is None:
            return "Computing the surface…"
        if not np.isfinite(ps.Z).any():
            return " ".join(t for t in (ps.note or NO_LOSS, self.residual_text) if t)
        if self.mode == "curve":
            text = f"Curve: {ps.loss_name} over the whole dataset; the runs move along it."
        else:
            colour = f"log₁₀ {ps.loss_name}" if self.log_colour else ps.loss_name
            lower = lower_shade(self.theme)
            text = f"Shade: {colour} over {PLANE_WORDS.get(ps.kind, 'a plane')}; {lower} is lower."
        if not ps.final:
            text += " Coarse preview; the full grid follows."
        if ps.note:
            text += f" {ps.note}"
        if self.residual_text:
            text += f" {self.residual_text}"
        return text

    # -------------------------------------------------------------- draw
    def paths(self, moment: Moment) -> list[np.ndarray]:
        """Every run's path up to ``moment`` in view coordinates, ``(N, 2)`` each; empty without a surface."""
        if not self.items:
            return []
        return self.state.paths(moment)

    def draw(self, moment: Moment) -> None:
        """Draw every run at ``moment``: path, current point, arrows, and the end of diverged runs."""
        if self.info is None or not self.items or not self.state.ready:
            return
        paths = self.state.paths(moment)
        drawn = self._drawn(paths)
        shown = self.plane_surface
        # What is drawn covers every cell the paths reached: it tells whether they left the range.
        # Where each run's arrows end is held in view too, so no arrow is cut at the edge.
        request = self.state.follow([*drawn, self._arrow_ends(moment, paths)])
        if request is not None:
            self.plane_requested.emit(request)
            if self.plane_surface is not shown:
                # The wider surface arrived at once (inline rendering): its coordinates may differ.
                paths = self.state.paths(moment)
                drawn = self._drawn(paths)
        self._show()
        self._set_range()  # a path that left a plane widens it before the wider grid arrives
        ends = [self.state.last_point(i, len(path)) for i, path in enumerate(paths)]
        sizes = self._stack_markers(moment, ends)
        for i, run in enumerate(self.info.runs):
            self._draw_run(moment, i, run.name, paths[i], drawn[i], ends[i], sizes[i])
        if self.mode in ("plane", "curve"):
            self._residuals(paths)
            self._set_caption()

    def _arrow_ends(self, moment: Moment, paths: list[np.ndarray]) -> np.ndarray:
        """Where the running runs' arrows end, ``(M, 2)``: the next ``step()``, and ``-lr × .grad``."""
        assert self.info is not None
        out = []
        for i, run in enumerate(self.info.runs):
            at = self.state.last_point(i, len(paths[i]))
            if at is None or moment.status(run.name) != "running":
                continue
            nxt = moment.next_step(run.name)
            if nxt is not None:
                out.append(self.state.step_point(nxt))
            back = moment.last_backward(run.name)
            if back is not None:
                lr = float(next(iter(back.lr.values()), 0.0))
                stale = self.state.vector(back.stale_grads or {}) or (0.0, 0.0)
                fresh = self.state.vector(back.fresh_grads or {}) or (0.0, 0.0)
                out.append((at[0] - lr * (stale[0] + fresh[0]), at[1] - lr * (stale[1] + fresh[1])))
        return np.array(out, dtype=np.float64).reshape(-1, 2)

    def _drawn(self, paths: list[np.ndarray]) -> list[np.ndarray]:
        """What is drawn of each path: all of a short one, a long one thinned to the plot's pixels."""
        return [self.state.drawn(i, len(path)) for i, path in enumerate(paths)]

    def _stack_markers(self, moment: Moment, ends: list[tuple[float, float] | None]) -> list[float]:
        """Each run's marker size: runs at one point are drawn as nested rings, and the key says so.

        Runs whose current points lie closer than :data:`SAME_POINT` pixels would hide
        each other: the first of them is drawn largest, each next one a ring smaller
        on top, so every run's shape stays in sight.
        """
        assert self.info is not None
        px, py = self.plot.getViewBox().viewPixelSize()
        px, py = px or 1.0, py or 1.0
        live = [
            i
            for i, (run, end) in enumerate(zip(self.info.runs, ends, strict=True))
            if end is not None and moment.status(run.name) == "running"
        ]
        groups: list[list[int]] = []
        for i in live:
            xi, yi = ends[i]  # type: ignore[misc]
            for group in groups:
                xj, yj = ends[group[0]]  # type: ignore[misc]
                if math.hypot((xi - xj) / px, (yi - yj) / py) < SAME_POINT * self.marker_scale:
                    group.append(i)
                    break
            else:
                groups.append([i])
        scale = self.marker_scale
        sizes = [POINT_SIZE * scale] * len(ends)
        together = tuple(tuple(g) for g in groups if len(g) > 1)
        for members in together:
            for rank, i in enumerate(members):
                sizes[i] = (POINT_SIZE + RING * (len(members) - 1 - rank)) * scale
        if together != self._together:
            self._together = together
            self._set_key()
        return sizes

    def _residuals(self, paths: list[np.ndarray]) -> None:
        assert self.info is not None
        if self.mode == "curve":
            self.residual_text = ""
            return
        parts = [
            f"{run_glyph(i)} {run.name} {_distance(self.state.residual(i, len(paths[i])))}"
            for i, run in enumerate(self.info.runs)
        ]
        self.residual_text = "Off the plane (distance in weight space): " + ", ".join(parts) + "."

    def fix_range(self, extent: Extent | None = None, *, equal_aspect: bool = False) -> None:
        """Keep the plot's range from now on: paths that leave it no longer widen it.

        An export draws its last moment first (so the range grows to hold every
        run's whole path), then fixes the range for all its frames. The window
        never calls this and keeps widening as the runs go.

        Parameters
        ----------
        extent:
            ``((x0, x1), (y0, y1))`` for a two-parameter model's true surface (the
            surface is evaluated there); None keeps the range shown now. A plane's
            range is the computed plane surface's and stays so.
        equal_aspect:
            For a true surface: one unit takes as many pixels across as up, so a
            gradient arrow stands perpendicular to the contours. The shorter side
            grows to the plot's own proportions, so the shading still fills it.
            Call it once the view is laid out at its final size. (The window's true
            surface always keeps equal units; False lets the range be ``extent`` as given.)
        """
        if not self.state.ready:
            return
        if self.mode == "model":
            vb = self.plot.getViewBox()
            vb.setAspectLocked(equal_aspect, 1.0)
            if equal_aspect:
                self.state.set_aspect(float(vb.width()), float(vb.height()))
            else:
                self.state.aspect = None
        self.state.fix(extent if extent is not None else self.state.wanted)
        self._show()

    def view_range(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """The data range the plot shows now, ``((x0, x1), (y0, y1))``."""
        (x0, x1), (y0, y1) = self.plot.getViewBox().viewRange()
        return (float(x0), float(x1)), (float(y0), float(y1))

    def _draw_run(
        self,
        moment: Moment,
        index: int,
        name: str,
        path: np.ndarray,
        drawn: np.ndarray,
        end: tuple[float, float] | None,
        size: float,
    ) -> None:
        items = self.items[index]
        key = (len(path), *self.x_range, *self.y_range)
        if key != items.shown:
            items.shown = key
            shown = self.state.clip(drawn)
            items.path.setData(shown[:, 0], shown[:, 1])
            marked = len(path) <= MARKED_POINTS
            if marked:
                items.dots.setData(shown[:, 0], shown[:, 1])
            items.dots.setVisible(marked)  # an empty scatter still costs its paint
        last = self.state.clip(np.array([end if end is not None else path[0]], dtype=np.float64))[0]
        status = moment.status(name)
        running = status == "running"
        items.point.setVisible(running)
        items.diverged.setVisible(not running)
        if running:
            if size != items.size:
                # Nested rings: the larger marker lies under the smaller ones.
                items.size = size
                items.point.setSize(size)
                items.point.setZValue(20 - size / 1000)
            items.point.setPos(float(last[0]), float(last[1]))
            if items.diverged_label.toPlainText():
                items.diverged_label.setText("")
        else:
            items.diverged.setPos(float(last[0]), float(last[1]))
            items.diverged_label.setText(f" {name} {'diverged' if status == 'diverged' else 'stopped'}")
            items.diverged_label.setPos(float(last[0]), float(last[1]))
        self._draw_arrows(moment, items, name, (float(last[0]), float(last[1])), status == "running")

    def _draw_arrows(
        self, moment: Moment, items: _RunItems, name: str, at: tuple[float, float], live: bool
    ) -> None:
        segments: dict[str, tuple[tuple[float, float], tuple[float, float]] | None] = dict.fromkeys(
            items.lines
        )
        back = moment.last_backward(name) if live else None
        if back is not None:
            lr = float(next(iter(back.lr.values()), 0.0))
            stale = self.state.vector(back.stale_grads or {}) or (0.0, 0.0)
            fresh = self.state.vector(back.fresh_grads or {}) or (0.0, 0.0)
            mid = (at[0] - lr * stale[0], at[1] - lr * stale[1])
            end = (mid[0] - lr * fresh[0], mid[1] - lr * fresh[1])
            if stale != (0.0, 0.0):
                segments["stale"] = (at, mid)
            segments["fresh"] = (mid, end)
        nxt = moment.next_step(name) if live else None
        if nxt is not None:
            segments["step"] = (at, self.state.step_point(nxt))
            self._beside_step(segments)
        for key, seg in segments.items():
            self._arrow(items, key, seg)

    def _beside_step(self, segments: dict[str, Any]) -> None:
        """Move the backward's arrows a lane beside the step's, so their heads never sit on its head.

        Plain SGD steps exactly to where the backward's arrows end: drawn on one line the
        three heads make one knot. The lane is a few pixels, inside the current marker.
        """
        (x0, y0), (x1, y1) = segments["step"]
        px, py = self.plot.getViewBox().viewPixelSize()
        px, py = px or 1.0, py or 1.0
        dx, dy = (x1 - x0) / px, (y1 - y0) / py
        length = math.hypot(dx, dy)
        if not math.isfinite(length) or length == 0:
            return
        ox, oy = -dy / length * ARROW_LANE * px, dx / length * ARROW_LANE * py
        for key in ("stale", "fresh"):
            seg = segments[key]
            if seg is not None:
                (a, b), (c, d) = seg
                segments[key] = ((a + ox, b + oy), (c + ox, d + oy))

    def _arrow(self, items: _RunItems, key: str, seg: Any) -> None:
        line, head = items.lines[key], items.heads[key]
        if seg is None or not all(math.isfinite(v) for p in seg for v in p):
            if line.property("segment") is not None:
                line.setProperty("segment", None)
                line.setData([], [])
            head.setVisible(False)
            return
        pts = self.state.clip(np.array(seg, dtype=np.float64))
        if line.property("segment") != pts.tobytes():
            line.setProperty("segment", pts.tobytes())
            line.setData(pts[:, 0], pts[:, 1])
        px, py = self.plot.getViewBox().viewPixelSize()
        dx = (pts[1, 0] - pts[0, 0]) / (px or 1.0)
        dy = -(pts[1, 1] - pts[0, 1]) / (py or 1.0)
        if math.hypot(dx, dy) < HEAD_ROOM * head.opts["headLen"]:
            # A head longer than its arrow hides the line and tangles with the other heads.
            head.setVisible(False)
            return
        head.setRotation(180 + math.degrees(math.atan2(dy, dx)))
        head.setPos(QPointF(float(pts[1, 0]), float(pts[1, 1])))
        head.setVisible(True)

    # ------------------------------------------------------------ probes
    def scene_pixel(self, x: float, y: float) -> tuple[int, int]:
        """Widget pixel of the data point (x, y) inside the plot widget (for tests and probes)."""
        vb = self.plot.getViewBox()
        scene = vb.mapViewToScene(QPointF(x, y))
        view = self.plot_widget.mapFromScene(scene)
        return int(view.x()), int(view.y())


def _distance(value: float) -> str:
    """A distance in weight space, short: 0, 0.031, 2.4, 1.2e+03."""
    if not math.isfinite(value):
        return "∞"
    if value == 0 or abs(value) < 5e-7:
        return "0"
    return f"{value:.2g}" if value < 0.01 or value >= 1000 else f"{value:.3g}"
