"""The loss surface under the runs: their paths over it, and the arrows at each run.

A two-parameter model has a true surface, evaluated here from the engine's
closed form (numpy only, so drawing never touches the live lab). Any other
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
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFont
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

from gradviz.gui.tape import LabInfo, Moment, PlaneRequest, PlaneSurface
from gradviz.gui.theme import LIGHT, Theme, run_color, run_dash, run_glyph, run_symbol
from gradviz.gui.worker import plane_kinds

GRID = 121
CONTOURS = 9
# Coordinates are clipped to this many view widths around the view before drawing:
# a diverging run reaches 1e30 and Qt's painter misbehaves on such numbers.
CLIP_WIDTHS = 20.0
# A plane's range grows at most this many first spans on each side when a path leaves it.
GROW_CAP = 4.0
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


def curve_shown(z: np.ndarray) -> tuple[np.ndarray, tuple[float, float]]:
    """A loss curve's heights as drawn, and the loss range the view shows.

    The view reaches the curve's true top, so the drawn curve meets the true loss
    everywhere in the range. Only a far tail (a diverging end, 1e30 or inf) is
    left above the view: the curve leaves through the top there instead of
    flattening, and is clipped far outside the view for Qt's painter. NaN is a gap.
    """
    finite = z[np.isfinite(z)]
    if not finite.size:
        return np.full_like(z, np.nan, dtype=np.float64), (0.0, 1.0)
    lo, top = float(finite.min()), float(finite.max())
    bulk = float(np.percentile(finite, 97))
    # A tail more than a few times the height of the other 97 % would squash them flat.
    hi = top if top - lo <= 4 * (bulk - lo) or bulk <= lo else bulk
    if hi <= lo:
        hi = lo + 1.0
    far = hi + CLIP_WIDTHS * (hi - lo)
    shown = np.where(np.isnan(z), np.nan, np.clip(z, lo - CLIP_WIDTHS * (hi - lo), far))
    return shown.astype(np.float64), (lo, hi)


def colour_values(z: np.ndarray) -> tuple[np.ndarray, bool]:
    """The values to colour by: log10 of the loss when it spans more than two decades."""
    finite = z[np.isfinite(z)]
    if finite.size and finite.min() > 0 and finite.max() / finite.min() > 100:
        with np.errstate(divide="ignore"):
            return np.log10(z), True
    return z, False


class _RunItems:
    """The graphics items of one run: its path, its current point and its arrows."""

    def __init__(self, plot: pg.PlotItem, index: int, name: str) -> None:
        colour = QColor(run_color(index))
        self.colour = colour
        self.symbol = run_symbol(index)
        self.path = pg.PlotDataItem(pen=pg.mkPen(colour, width=2, style=run_dash(index)), connect="finite")
        # Single markers are moved with setPos: re-setting a scatter's data costs milliseconds a frame.
        self.point = pg.ScatterPlotItem(
            [0.0], [0.0], size=15, symbol=self.symbol, brush=colour, pen=pg.mkPen("w", width=2)
        )
        self.point.setZValue(20)
        self.diverged = pg.ScatterPlotItem(
            [0.0], [0.0], size=22, symbol="x", brush=colour, pen=pg.mkPen(colour, width=2)
        )
        self.diverged.setZValue(21)
        self.diverged.setVisible(False)
        self.shown: tuple[int, float, float] | None = None
        self.diverged_label = pg.TextItem("", color=colour, anchor=(0, 1))
        self.diverged_label.setZValue(21)
        self.lines = {
            "stale": pg.PlotDataItem(pen=pg.mkPen(colour, width=2, style=Qt.PenStyle.DotLine)),
            "fresh": pg.PlotDataItem(pen=pg.mkPen(colour, width=2)),
            "step": pg.PlotDataItem(pen=pg.mkPen(colour, width=4)),
        }
        self.heads = {
            key: pg.ArrowItem(
                headLen=14 if key == "step" else 10, tipAngle=30, brush=colour, pen=pg.mkPen(colour)
            )
            for key in self.lines
        }
        for item in (self.path, self.point, self.diverged, self.diverged_label, *self.lines.values()):
            plot.addItem(item)
        for head in self.heads.values():
            head.setZValue(15)
            plot.addItem(head)
        self.cache: list[tuple[float, float]] = []
        self.residuals: list[float] = []
        self.cache_ops: list[int] = []


class SurfaceView(QWidget):
    """Heatmap and contours of the loss over two parameters or a plane, with every run drawn on it.

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
        self.items: list[_RunItems] = []
        self.x_range = (-1.0, 1.0)
        self.y_range = (-1.0, 1.0)
        self.home: tuple[tuple[float, float], tuple[float, float]] | None = None
        self.log_colour = False
        # What the shading shows: ``"model"`` (two parameters), ``"plane"``, ``"curve"`` or ``"none"``.
        self.mode = "none"
        self.plane_surface: PlaneSurface | None = None
        self.grid_values: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.residual_text = ""
        self._asked: Any = None
        # Set by fix_range: the range stays as it is, however far a path goes (an export's frames).
        self.fixed = False

        self.title = QLabel("Loss surface")
        self.title.setObjectName("panelTitle")
        # A long title wraps rather than holding the column wide (presentation type, a lesson beside).
        self.title.setWordWrap(True)
        self.caption = QLabel("")
        self.caption.setObjectName("status")
        self.caption.setWordWrap(True)
        self.caption.setMinimumWidth(100)
        self.plot_widget = pg.PlotWidget()
        self.plot_widget.setObjectName("surfacePlot")
        self.plot = self.plot_widget.getPlotItem()
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.image = pg.ImageItem()
        self.image.setZValue(-10)
        # The shading and contours change only when the range does: paint them from a pixmap.
        self.image.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.plot.addItem(self.image)
        self.contours: list[pg.IsocurveItem] = []
        self.minimum = pg.ScatterPlotItem(size=12, symbol="+", pen=pg.mkPen("k", width=2))
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
        inner.addWidget(self.controls)
        inner.addWidget(self.key)
        inner.addWidget(self.plot_widget, 1)
        inner.addWidget(self.caption)
        self.stack = QStackedLayout()
        self.stack.addWidget(page)
        self.stack.addWidget(self.placeholder)
        box = QVBoxLayout(self)
        box.setContentsMargins(4, 4, 4, 4)
        box.addWidget(self.title)
        box.addLayout(self.stack, 1)

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
        if self.mode == "model":
            self._compute()
        elif self.plane_surface is not None:
            self._show_plane(self.plane_surface)
            self.caption.setText(self.plane_caption())

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
        self.key.setText(f"{runs}&nbsp;&nbsp;<span style='color:{self.theme.muted}'>{arrows}</span>")

    def set_point_size(self, size: float) -> None:
        """Type size of axis labels and ticks."""
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
            for item in (
                items.path,
                items.point,
                items.diverged,
                items.diverged_label,
                *items.lines.values(),
            ):
                self.plot.removeItem(item)
            for head in items.heads.values():
                self.plot.removeItem(head)
        self.items = []
        self.plane_surface = None
        self.grid_values = None
        self.residual_text = ""
        self._asked = None
        self.fixed = False
        self.plot.getViewBox().setAspectLocked(False)
        self.curve.setData([], [])
        self.image.clear()
        self._clear_contours()
        self.stack.setCurrentIndex(0)
        for i, run in enumerate(info.runs):
            items = _RunItems(self.plot, i, run.name)
            items.point.setPen(pg.mkPen(self.theme.base, width=2))
            self.items.append(items)
        self._set_key()
        lesson = info.scenario.lesson
        if lesson is not None and lesson.surface == "none":
            self._set_no_surface(lesson.point)
            return
        model = info.surface
        if model is None:
            self._set_plane_lab(info)
            return
        self.mode = "model"
        self.controls.setVisible(False)
        self.curve.setVisible(False)
        self.image.setVisible(True)
        starts = [model.point(info.initial[r.name].params) for r in info.runs]
        xs = [p[0] for p in starts] + [model.minimum[0]]
        ys = [p[1] for p in starts] + [model.minimum[1]]
        self.home = (self._padded(min(xs), max(xs)), self._padded(min(ys), max(ys)))
        self.x_range, self.y_range = self.home
        self.minimum.setData([model.minimum[0]], [model.minimum[1]])
        self.minimum.setToolTip("the minimum" if model.kind != "saddle" else "the saddle point")
        self._axis_labels()
        if model.kind == "linear":
            factor = "½ · " if model.coefficients[-1] == 0.5 else ""
            what = f"{factor}mean squared error over the whole dataset"
        else:
            what = f"the {model.kind} function"
        self.title.setText(f"Loss surface: {what}")
        self._compute()

    def _set_no_surface(self, point: str) -> None:
        """Say in the surface's place that this lesson has none to show, and why."""
        self.mode = "none"
        self.controls.setVisible(False)
        self.title.setText("Loss surface")
        self.placeholder.setText(
            f"No loss surface for this lesson: no plane through weight space shows it. {point}"
        )
        self.stack.setCurrentIndex(1)

    def _set_plane_lab(self, info: LabInfo) -> None:
        kinds = plane_kinds(info)
        self.mode = "curve" if kinds and kinds[0][0] == "curve" else "plane"
        self.minimum.setData([], [])
        self.plane_kind.blockSignals(True)
        self.plane_kind.clear()
        for kind, label in kinds:
            self.plane_kind.addItem(label, kind)
        self.plane_kind.blockSignals(False)
        self.plane_kind.setEnabled(len(kinds) > 1)
        self.controls.setVisible(True)
        self.curve.setVisible(self.mode == "curve")
        self.image.setVisible(self.mode == "plane")
        n = info.parameter_count
        what = "loss curve over its one parameter" if self.mode == "curve" else "plane through weight space"
        self.title.setText(f"Loss surface: {n:,} parameter{'s' if n != 1 else ''}, a {what}")
        self.caption.setText("Computing the surface…")
        self.recompute()

    def plane_request_kind(self) -> str:
        """The plane kind chosen in the view's picker (empty for two-parameter models)."""
        return str(self.plane_kind.currentData() or "")

    def recompute(self) -> None:
        """Ask for a new plane of the chosen kind, made from where the runs are now."""
        if self.mode not in ("plane", "curve"):
            return
        self._asked = None
        self.plane_requested.emit(PlaneRequest(self.plane_request_kind()))

    def set_plane_busy(self, busy: bool) -> None:
        """Show or hide the progress indicator of the surface being computed."""
        self.progress.setVisible(busy and self.mode in ("plane", "curve"))

    def set_plane_failed(self, message: str) -> None:
        """Say why no surface could be drawn."""
        if self.mode in ("plane", "curve"):
            self.caption.setText(message)

    def set_plane_surface(self, surface: PlaneSurface) -> None:
        """Draw a surface over a plane (the coarse preview, then the full grid)."""
        if self.mode not in ("plane", "curve") or self.info is None:
            return
        if surface.plane.layout.names != self.info.runs[0].names:
            return  # computed for the lab before this one
        new_plane = self.plane_surface is None or self.plane_surface.plane is not surface.plane
        self.plane_surface = surface
        if new_plane:
            self.home = surface.extent
            index = self.plane_kind.findData(surface.kind)
            if index >= 0:
                self.plane_kind.setCurrentIndex(index)
        if new_plane or self.mode == "curve":
            # Path points are plane coordinates (or heights on the curve): they change with it.
            for items in self.items:
                items.cache, items.residuals, items.cache_ops, items.shown = [], [], [], None
        self._show_plane(surface)

    @staticmethod
    def _padded(lo: float, hi: float) -> tuple[float, float]:
        span = max(hi - lo, 0.5)
        return lo - 0.35 * span, hi + 0.35 * span

    def _compute(self) -> None:
        """Evaluate a two-parameter model's surface on the current range and redraw it."""
        assert self.info is not None and self.info.surface is not None
        xs = np.linspace(*self.x_range, GRID)
        ys = np.linspace(*self.y_range, GRID)
        gx, gy = np.meshgrid(xs, ys, indexing="ij")
        z = self.info.surface.evaluate(gx, gy)
        self._paint(xs, ys, z)
        colour = "log₁₀ loss" if self.log_colour else "loss"
        where = "the saddle point" if self.info.surface.kind == "saddle" else "the minimum"
        lower = lower_shade(self.theme)
        self.caption.setText(f"Shade and contours: {colour}, {lower} is lower; + marks {where}.")

    def _show_plane(self, surface: PlaneSurface) -> None:
        """Draw a computed plane surface (shading and contours) or loss curve."""
        (x0, x1), (y0, y1) = surface.extent
        self.x_range = (x0, x1)
        if self.mode == "curve":
            shown, (lo, hi) = curve_shown(np.asarray(surface.Z[:, 0], dtype=np.float64))
            self.curve.setData(surface.xs, shown)
            self.y_range = (lo - 0.05 * (hi - lo), hi + 0.1 * (hi - lo))
            self.grid_values = None
            self.plot.setRange(xRange=self.x_range, yRange=self.y_range, padding=0)
            self._axis_labels()
            self.surface_changed.emit()
            return
        self.y_range = (y0, y1)
        if np.isfinite(surface.Z).any():
            self._paint(surface.xs, surface.ys, surface.Z)
        else:  # no loss known anywhere on the plane (a recording): the paths alone, over their plane
            self.grid_values = None
            self.image.clear()
            self._clear_contours()
            self.plot.setRange(xRange=self.x_range, yRange=self.y_range, padding=0)
        self._axis_labels()

    def _clear_contours(self) -> None:
        for c in self.contours:
            c.setParentItem(None)
            if c.scene() is not None:
                c.scene().removeItem(c)
        self.contours = []

    def _paint(self, xs: np.ndarray, ys: np.ndarray, z: np.ndarray) -> None:
        """Shade ``z`` over the grid ``xs`` x ``ys`` with contours, clipping diverged values."""
        self.grid_values = (xs, ys, z)
        values, self.log_colour = colour_values(z)
        finite = values[np.isfinite(values)]
        lo, hi = (
            (float(np.percentile(finite, 1)), float(np.percentile(finite, 97))) if finite.size else (0.0, 1.0)
        )
        if hi <= lo:
            hi = lo + 1.0
        shown = np.nan_to_num(values, nan=hi, posinf=hi, neginf=lo)
        cmap = pg.ColorMap([0.0, 1.0], [QColor(self.theme.surface_low), QColor(self.theme.surface_high)])
        self.image.setImage(shown, levels=(lo, hi), lut=cmap.getLookupTable(nPts=256))
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
        self._clear_contours()
        pen = pg.mkPen(QColor(self.theme.contour), width=1)
        for level in np.linspace(lo, hi, CONTOURS + 2)[1:-1]:
            curve = pg.IsocurveItem(data=shown, level=float(level), pen=pen)
            curve.setParentItem(self.image)
            curve.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
            self.contours.append(curve)
        self.plot.setRange(xRange=self.x_range, yRange=self.y_range, padding=0)
        self.surface_changed.emit()

    def grid(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The surface drawn now, ``(xs, ys, Z)`` with ``Z[i, j]`` at ``(xs[i], ys[j])``; None if none."""
        return self.grid_values

    def loss_at(self, pts: np.ndarray) -> np.ndarray:
        """The loss of the drawn surface at points ``(M, 2)`` (exact for two-parameter models)."""
        pts = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
        if self.info is not None and self.info.surface is not None:
            return self.info.surface.evaluate(pts[:, 0], pts[:, 1])
        if self.grid_values is None:
            return np.full(len(pts), np.nan)
        xs, ys, z = self.grid_values
        return _bilinear(xs, ys, z, pts)

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
    def _points(
        self, flats: list[np.ndarray], dicts: list[Any]
    ) -> tuple[list[tuple[float, float]], list[float]]:
        """View positions of parameter states and their distance off the plane (0 on a true surface)."""
        if self.info is not None and self.info.surface is not None:
            return [self.info.surface.point(d) for d in dicts], [0.0] * len(dicts)
        assert self.plane_surface is not None
        from gradviz.engine.landscape import project

        proj = project(self.plane_surface.plane, np.stack(flats))
        coords = proj.coords
        if self.mode == "curve":
            heights = self._curve_height(coords[:, 0])
            return [(float(a), float(h)) for a, h in zip(coords[:, 0], heights, strict=True)], [0.0] * len(
                flats
            )
        return [(float(a), float(b)) for a, b in coords], [float(r) for r in proj.residuals]

    def _curve_height(self, w: np.ndarray) -> np.ndarray:
        assert self.plane_surface is not None
        ps = self.plane_surface
        xs, z = ps.xs, ps.Z[:, 0]
        ok = np.isfinite(z)
        if not ok.any():
            return np.zeros_like(w)
        return np.interp(w, xs[ok], z[ok])

    def _vector(self, values: dict[str, np.ndarray | None]) -> tuple[float, float] | None:
        """A per-parameter change (a gradient) as a vector in the view; None if absent."""
        assert self.info is not None
        if self.info.surface is not None:
            return self.info.surface.vector(values)
        if self.plane_surface is None or all(v is None for v in values.values()):
            return None
        from gradviz.engine.landscape import flatten, project

        plane = self.plane_surface.plane
        c = project(plane, flatten(plane.layout, values), displacement=True).coords[0]
        return (float(c[0]), 0.0) if self.mode == "curve" else (float(c[0]), float(c[1]))

    def _path(self, moment: Moment, index: int, name: str) -> np.ndarray:
        """The run's points up to this moment: the start, then one per step."""
        assert self.info is not None
        items = self.items[index]
        rt = moment.tape.runs[name]
        upto = rt.index_at(moment.tick)
        if len(items.cache_ops) > len(rt):  # the tape was reset
            items.cache, items.residuals, items.cache_ops = [], [], []
        if not items.cache:
            start = self.info.initial[name]
            items.cache, items.residuals = self._points([start.param_flat], [start.params])
            items.cache_ops = []
        flats, dicts = [], []
        for i in range(len(items.cache_ops), len(rt)):
            rec = moment.tape.record(name, i)
            if rt.ops[i] == "step" and rec is not None:
                flats.append(rec.snapshot.param_flat)
                dicts.append(rec.params)
            items.cache_ops.append(len(items.cache) + len(flats) - 1)
        if flats:
            points, residuals = self._points(flats, dicts)
            items.cache.extend(points)
            items.residuals.extend(residuals)
        n = items.cache_ops[upto] + 1 if upto >= 0 else 1
        return np.asarray(items.cache[:n], dtype=np.float64)

    def paths(self, moment: Moment) -> list[np.ndarray]:
        """Every run's path up to ``moment`` in view coordinates, ``(N, 2)`` each; empty without a surface."""
        if self.info is None or not self.items or not self._ready():
            return []
        return [self._path(moment, i, r.name) for i, r in enumerate(self.info.runs)]

    def _ready(self) -> bool:
        return self.mode == "model" or (self.mode in ("plane", "curve") and self.plane_surface is not None)

    def draw(self, moment: Moment) -> None:
        """Draw every run at ``moment``: path, current point, arrows, and the end of diverged runs."""
        if self.info is None or not self.items or not self._ready():
            return
        paths = self.paths(moment)
        if self.mode == "model":
            self._grow(paths)
        else:
            shown = self.plane_surface
            self._leave(paths)
            if self.plane_surface is not shown:
                # The wider surface arrived at once (inline rendering): its coordinates may differ.
                paths = self.paths(moment)
        for i, run in enumerate(self.info.runs):
            self._draw_run(moment, i, run.name, paths[i])
        if self.mode in ("plane", "curve"):
            self._residuals(moment, paths)
            text = self.plane_caption()
            if text != self.caption.text():
                self.caption.setText(text)

    def _residuals(self, moment: Moment, paths: list[np.ndarray]) -> None:
        assert self.info is not None
        if self.mode == "curve":
            self.residual_text = ""
            return
        parts = []
        for i, run in enumerate(self.info.runs):
            res = self.items[i].residuals[len(paths[i]) - 1] if self.items[i].residuals else 0.0
            parts.append(f"{run_glyph(i)} {run.name} {_distance(res)}")
        self.residual_text = "Off the plane (distance in weight space): " + ", ".join(parts) + "."

    def fix_range(
        self,
        extent: tuple[tuple[float, float], tuple[float, float]] | None = None,
        *,
        equal_aspect: bool = False,
    ) -> None:
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
            Call it once the view is laid out at its final size.
        """
        if not self._ready():
            return
        self.fixed = True
        if self.mode != "model":
            return
        (x0, x1), (y0, y1) = extent if extent is not None else (self.x_range, self.y_range)
        vb = self.plot.getViewBox()
        if equal_aspect:
            w, h = float(vb.width()), float(vb.height())
            if w > 0 and h > 0 and x1 > x0 and y1 > y0:
                per_pixel = max((x1 - x0) / w, (y1 - y0) / h)
                cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
                x0, x1 = cx - per_pixel * w / 2, cx + per_pixel * w / 2
                y0, y1 = cy - per_pixel * h / 2, cy + per_pixel * h / 2
            vb.setAspectLocked(True, 1.0)
        self.x_range, self.y_range = (float(x0), float(x1)), (float(y0), float(y1))
        self._compute()

    def view_range(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """The data range the plot shows now, ``((x0, x1), (y0, y1))``."""
        (x0, x1), (y0, y1) = self.plot.getViewBox().viewRange()
        return (float(x0), float(x1)), (float(y0), float(y1))

    def _leave(self, paths: list[np.ndarray]) -> None:
        """Ask for the same plane over a wider range when a path leaves it (up to a cap)."""
        assert self.plane_surface is not None and self.home is not None
        if self.fixed:
            return
        if self.mode == "curve":
            pts = np.concatenate(paths)[:, :1]
        else:
            pts = np.concatenate(paths)
        pts = pts[np.all(np.isfinite(pts), axis=1)]
        if pts.size == 0:
            return
        (x0, x1), (y0, y1) = self.plane_surface.extent
        (hx0, hx1), (hy0, hy1) = self.home
        out_x = pts[:, 0].min() < x0 or pts[:, 0].max() > x1
        out_y = self.mode == "plane" and (pts[:, 1].min() < y0 or pts[:, 1].max() > y1)
        if not (out_x or out_y):
            return
        cx, cy = GROW_CAP * (hx1 - hx0), GROW_CAP * (hy1 - hy0)
        mx = 0.15 * (max(x1, pts[:, 0].max()) - min(x0, pts[:, 0].min()))
        nx = (max(min(x0, pts[:, 0].min() - mx), hx0 - cx), min(max(x1, pts[:, 0].max() + mx), hx1 + cx))
        if self.mode == "plane":
            my = 0.15 * (max(y1, pts[:, 1].max()) - min(y0, pts[:, 1].min()))
            ny = (max(min(y0, pts[:, 1].min() - my), hy0 - cy), min(max(y1, pts[:, 1].max() + my), hy1 + cy))
        else:
            ny = (y0, y1)
        extent = ((float(nx[0]), float(nx[1])), (float(ny[0]), float(ny[1])))
        if extent == self.plane_surface.extent or extent == self._asked:
            return  # already as wide as the cap allows, or asked for
        self._asked = extent
        self.plane_requested.emit(PlaneRequest(self.plane_surface.kind, self.plane_surface.plane, extent))

    def _grow(self, paths: list[np.ndarray]) -> None:
        """Widen the surface when a path leaves it, up to four times its first size."""
        assert self.home is not None
        if self.fixed:
            return
        pts = np.concatenate(paths)
        pts = pts[np.all(np.isfinite(pts), axis=1)]
        if pts.size == 0:
            return
        (hx0, hx1), (hy0, hy1) = self.home
        cap_x = 1.5 * (hx1 - hx0)
        cap_y = 1.5 * (hy1 - hy0)
        x0 = max(min(self.x_range[0], pts[:, 0].min()), hx0 - cap_x)
        x1 = min(max(self.x_range[1], pts[:, 0].max()), hx1 + cap_x)
        y0 = max(min(self.y_range[0], pts[:, 1].min()), hy0 - cap_y)
        y1 = min(max(self.y_range[1], pts[:, 1].max()), hy1 + cap_y)
        if (x0, x1) != self.x_range or (y0, y1) != self.y_range:
            mx, my = 0.1 * (x1 - x0), 0.1 * (y1 - y0)
            grow_x = (x0 - mx if x0 < self.x_range[0] else x0, x1 + mx if x1 > self.x_range[1] else x1)
            grow_y = (y0 - my if y0 < self.y_range[0] else y0, y1 + my if y1 > self.y_range[1] else y1)
            self.x_range = (max(grow_x[0], hx0 - cap_x), min(grow_x[1], hx1 + cap_x))
            self.y_range = (max(grow_y[0], hy0 - cap_y), min(grow_y[1], hy1 + cap_y))
            self._compute()

    def _clip(self, pts: np.ndarray) -> np.ndarray:
        wx = (self.x_range[1] - self.x_range[0]) * CLIP_WIDTHS
        wy = (self.y_range[1] - self.y_range[0]) * CLIP_WIDTHS
        out = np.array(pts, dtype=np.float64, copy=True)
        out[~np.isfinite(out)] = np.nan
        out[:, 0] = np.clip(out[:, 0], self.x_range[0] - wx, self.x_range[1] + wx)
        out[:, 1] = np.clip(out[:, 1], self.y_range[0] - wy, self.y_range[1] + wy)
        return out

    def _draw_run(self, moment: Moment, index: int, name: str, path: np.ndarray) -> None:
        items = self.items[index]
        shown = self._clip(path)
        key = (len(path), self.x_range[0], self.x_range[1])
        if key != items.shown:
            items.shown = key
            # Markers on every point while they can be told apart; a long path is a line.
            symbols = {
                "symbol": items.symbol,
                "symbolSize": 5,
                "symbolBrush": items.colour,
                "symbolPen": None,
            }
            items.path.setData(
                shown[:, 0], shown[:, 1], **(symbols if len(shown) <= 150 else {"symbol": None})
            )
        finite = shown[np.all(np.isfinite(path), axis=1)]
        status = moment.status(name)
        last = finite[-1] if len(finite) else shown[0]
        running = status == "running"
        items.point.setVisible(running)
        items.diverged.setVisible(not running)
        if running:
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
            stale = self._vector(back.stale_grads or {}) or (0.0, 0.0)
            fresh = self._vector(back.fresh_grads or {}) or (0.0, 0.0)
            mid = (at[0] - lr * stale[0], at[1] - lr * stale[1])
            end = (mid[0] - lr * fresh[0], mid[1] - lr * fresh[1])
            if stale != (0.0, 0.0):
                segments["stale"] = (at, mid)
            segments["fresh"] = (mid, end)
        nxt = moment.next_step(name) if live else None
        if nxt is not None:
            segments["step"] = (at, self._step_point(at, nxt))
        for key, seg in segments.items():
            self._arrow(items, key, seg)

    def _step_point(self, at: tuple[float, float], params: dict[str, np.ndarray]) -> tuple[float, float]:
        assert self.info is not None
        if self.info.surface is not None:
            return self.info.surface.point(params)
        from gradviz.engine.landscape import flatten

        assert self.plane_surface is not None
        flat = flatten(self.plane_surface.plane.layout, params)
        return self._points([flat], [params])[0][0]

    def _arrow(self, items: _RunItems, key: str, seg: Any) -> None:
        line, head = items.lines[key], items.heads[key]
        if seg is None or not all(math.isfinite(v) for p in seg for v in p):
            if line.property("segment") is not None:
                line.setProperty("segment", None)
                line.setData([], [])
            head.setVisible(False)
            return
        pts = self._clip(np.array(seg, dtype=np.float64))
        if line.property("segment") != pts.tobytes():
            line.setProperty("segment", pts.tobytes())
            line.setData(pts[:, 0], pts[:, 1])
        px, py = self.plot.getViewBox().viewPixelSize()
        dx = (pts[1, 0] - pts[0, 0]) / (px or 1.0)
        dy = -(pts[1, 1] - pts[0, 1]) / (py or 1.0)
        if math.hypot(dx, dy) < 4:
            head.setVisible(False)
            return
        head.setStyle(angle=180 + math.degrees(math.atan2(dy, dx)))
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


def _bilinear(xs: np.ndarray, ys: np.ndarray, z: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """``z`` over the grid ``xs`` x ``ys`` interpolated at ``pts`` ``(M, 2)``, clamped to the grid."""
    out = np.empty(len(pts))
    for k, (x, y) in enumerate(pts):
        if not (math.isfinite(x) and math.isfinite(y)):
            out[k] = np.nan
            continue
        fi = float(np.interp(x, xs, np.arange(len(xs))))
        fj = float(np.interp(y, ys, np.arange(len(ys)))) if len(ys) > 1 else 0.0
        i0, j0 = min(int(fi), len(xs) - 2) if len(xs) > 1 else 0, min(int(fj), max(len(ys) - 2, 0))
        ti, tj = fi - i0, fj - j0
        i1, j1 = min(i0 + 1, len(xs) - 1), min(j0 + 1, len(ys) - 1)
        out[k] = (
            z[i0, j0] * (1 - ti) * (1 - tj)
            + z[i1, j0] * ti * (1 - tj)
            + z[i0, j1] * (1 - ti) * tj
            + z[i1, j1] * ti * tj
        )
    return out
