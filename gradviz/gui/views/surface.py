"""The loss surface of a two-parameter model, the runs' paths over it, and the arrows at each run.

The surface is the loss over the whole dataset, evaluated from the engine's
closed form (numpy only, so drawing never touches the live lab). Arrows are
drawn as parameter changes, ``-lr × gradient``: the stale part still in
``.grad``, then this backward's part, and the optimizer's next step.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import QGraphicsItem, QLabel, QStackedLayout, QVBoxLayout, QWidget

from gradviz.gui.tape import LabInfo, Moment
from gradviz.gui.theme import LIGHT, Theme, run_color, run_dash, run_symbol

GRID = 121
CONTOURS = 9
# Coordinates are clipped to this many view widths around the view before drawing:
# a diverging run reaches 1e30 and Qt's painter misbehaves on such numbers.
CLIP_WIDTHS = 20.0


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
        self.cache_ops: list[int] = []


class SurfaceView(QWidget):
    """Heatmap and contours of the loss over the two parameters, with every run drawn on it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme: Theme = LIGHT
        self.info: LabInfo | None = None
        self.items: list[_RunItems] = []
        self.x_range = (-1.0, 1.0)
        self.y_range = (-1.0, 1.0)
        self.home: tuple[tuple[float, float], tuple[float, float]] | None = None
        self.log_colour = False

        self.title = QLabel("Loss surface")
        self.title.setObjectName("panelTitle")
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
        self.legend = pg.LegendItem(offset=(8, 8))
        self.legend.setParentItem(self.plot.getViewBox())
        self.arrow_legend = pg.LegendItem(offset=(-8, 8))
        self.arrow_legend.setParentItem(self.plot.getViewBox())
        self.arrow_samples = {
            "stale": pg.PlotDataItem(pen=pg.mkPen("#777", width=2, style=Qt.PenStyle.DotLine)),
            "fresh": pg.PlotDataItem(pen=pg.mkPen("#777", width=2)),
            "step": pg.PlotDataItem(pen=pg.mkPen("#777", width=4)),
        }
        # Legend entries only: the samples are never added to the plot itself.
        self.arrow_legend.addItem(self.arrow_samples["stale"], "−lr × stale .grad")
        self.arrow_legend.addItem(self.arrow_samples["fresh"], "−lr × this backward")
        self.arrow_legend.addItem(self.arrow_samples["step"], "next step()")
        self.placeholder = QLabel("")
        self.placeholder.setObjectName("placeholder")
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setWordWrap(True)

        page = QWidget()
        inner = QVBoxLayout(page)
        inner.setContentsMargins(0, 0, 0, 0)
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
        for legend in (self.legend, self.arrow_legend):
            legend.setLabelTextColor(theme.text)
            legend.setBrush(pg.mkBrush(QColor(theme.base)))
            legend.setPen(pg.mkPen(theme.grid))
        for sample in self.arrow_samples.values():
            pen = sample.opts["pen"]
            sample.setPen(pg.mkPen(theme.muted, width=pen.width(), style=pen.style()))
        for items in self.items:
            items.point.setPen(pg.mkPen(theme.base, width=2))
        if self.info is not None and self.info.surface is not None:
            self._compute()

    def set_point_size(self, size: float) -> None:
        """Type size of axis labels and ticks."""
        font = QFont()
        font.setPointSizeF(size)
        for name in ("left", "bottom"):
            axis = self.plot.getAxis(name)
            axis.setStyle(tickFont=font)
            axis.label.setFont(font)
        for legend in (self.legend, self.arrow_legend):
            legend.setLabelTextSize(f"{size * 0.85:g}pt")
            for _, label in legend.items:
                label.setText(label.text, size=f"{size * 0.85:g}pt")
        self._axis_labels()

    def _axis_labels(self) -> None:
        if self.info is None or self.info.surface is None:
            return
        size = self.plot.getAxis("bottom").label.font().pointSizeF()
        style = {"color": self.theme.text, "font-size": f"{size:g}pt"}
        x_name, y_name = self.info.surface.axis_names
        self.plot.setLabel("bottom", x_name, **style)
        self.plot.setLabel("left", y_name, **style)

    def set_lab(self, info: LabInfo) -> None:
        """Prepare the surface of a new lab (or the placeholder when it has none)."""
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
        self.legend.clear()
        self.items = []
        model = info.surface
        if model is None:
            self.title.setText("Loss surface")
            n = info.parameter_count
            shape = "a curve over one parameter" if n == 1 else "a plane through parameter space"
            self.placeholder.setText(
                f"This model has {n:,} parameter{'s' if n != 1 else ''}. Its loss picture needs {shape}: "
                "surfaces for this model come later. The timeline, the .grad inspector and the code "
                "show every op."
            )
            self.stack.setCurrentIndex(1)
            return
        self.stack.setCurrentIndex(0)
        for i, run in enumerate(info.runs):
            items = _RunItems(self.plot, i, run.name)
            items.point.setPen(pg.mkPen(self.theme.base, width=2))
            self.legend.addItem(items.path, run.name)
            self.items.append(items)
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

    @staticmethod
    def _padded(lo: float, hi: float) -> tuple[float, float]:
        span = max(hi - lo, 0.5)
        return lo - 0.35 * span, hi + 0.35 * span

    def _compute(self) -> None:
        """Evaluate the surface on the current range and redraw heatmap and contours."""
        assert self.info is not None and self.info.surface is not None
        xs = np.linspace(*self.x_range, GRID)
        ys = np.linspace(*self.y_range, GRID)
        gx, gy = np.meshgrid(xs, ys, indexing="ij")
        z = self.info.surface.evaluate(gx, gy)
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
        self.image.setRect(
            QRectF(
                self.x_range[0],
                self.y_range[0],
                self.x_range[1] - self.x_range[0],
                self.y_range[1] - self.y_range[0],
            )
        )
        for c in self.contours:
            c.setParentItem(None)
            if c.scene() is not None:
                c.scene().removeItem(c)
        self.contours = []
        pen = pg.mkPen(QColor(self.theme.contour), width=1)
        for level in np.linspace(lo, hi, CONTOURS + 2)[1:-1]:
            curve = pg.IsocurveItem(data=shown, level=float(level), pen=pen)
            curve.setParentItem(self.image)
            curve.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
            self.contours.append(curve)
        self.plot.setRange(xRange=self.x_range, yRange=self.y_range, padding=0)
        colour = "log₁₀ loss" if self.log_colour else "loss"
        where = "the saddle point" if self.info.surface.kind == "saddle" else "the minimum"
        self.caption.setText(f"Shade and contours: {colour}, lighter is lower; + marks {where}.")

    # -------------------------------------------------------------- draw
    def _path(self, moment: Moment, index: int, name: str) -> np.ndarray:
        """The run's parameter points up to this moment: the start, then one per step."""
        assert self.info is not None and self.info.surface is not None  # drawn only for surfaces
        model = self.info.surface
        items = self.items[index]
        rt = moment.tape.runs[name]
        upto = rt.index_at(moment.tick)
        if len(items.cache_ops) > len(rt):  # the tape was reset
            items.cache, items.cache_ops = [], []
        if not items.cache:
            items.cache = [model.point(self.info.initial[name].params)]
            items.cache_ops = []
        for i in range(len(items.cache_ops), len(rt)):
            rec = rt.records[i]
            if rt.ops[i] == "step" and rec is not None:
                items.cache.append(model.point(rec.params))
            items.cache_ops.append(len(items.cache) - 1)
        n = items.cache_ops[upto] + 1 if upto >= 0 else 1
        return np.asarray(items.cache[:n], dtype=np.float64)

    def draw(self, moment: Moment) -> None:
        """Draw every run at ``moment``: path, current point, arrows, and the end of diverged runs."""
        if self.info is None or self.info.surface is None or not self.items:
            return
        paths = [self._path(moment, i, r.name) for i, r in enumerate(self.info.runs)]
        self._grow(paths)
        for i, run in enumerate(self.info.runs):
            self._draw_run(moment, i, run.name, paths[i])

    def _grow(self, paths: list[np.ndarray]) -> None:
        """Widen the surface when a path leaves it, up to four times its first size."""
        assert self.home is not None
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
        assert self.info is not None and self.info.surface is not None  # drawn only for surfaces
        model = self.info.surface
        segments: dict[str, tuple[tuple[float, float], tuple[float, float]] | None] = dict.fromkeys(
            items.lines
        )
        back = moment.last_backward(name) if live else None
        if back is not None:
            lr = float(next(iter(back.lr.values()), 0.0))
            stale = model.vector(back.stale_grads or {}) or (0.0, 0.0)
            fresh = model.vector(back.fresh_grads or {}) or (0.0, 0.0)
            mid = (at[0] - lr * stale[0], at[1] - lr * stale[1])
            end = (mid[0] - lr * fresh[0], mid[1] - lr * fresh[1])
            if stale != (0.0, 0.0):
                segments["stale"] = (at, mid)
            segments["fresh"] = (mid, end)
        nxt = moment.next_step(name) if live else None
        if nxt is not None:
            segments["step"] = (at, model.point(nxt))
        for key, seg in segments.items():
            self._arrow(items, key, seg)

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
