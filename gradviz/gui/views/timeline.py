"""The timeline: loss, gradient norm and the distance between runs against op tick, over the op tape.

Clicking or dragging anywhere on it scrubs history: every view then shows that
moment. Values that are zero, inf or NaN leave gaps (log axes); a diverged run
ends with a cross.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from gradviz.gui.tape import LabInfo, Moment
from gradviz.gui.theme import LIGHT, OP_COLORS, OP_LETTERS, Theme, run_color, run_dash, run_glyph

OPS = ("zero_grad", "forward", "backward", "step")
PLAY_CURVE_INTERVAL = 0.25  # seconds
AXIS_WIDTH = 48
LABEL_WIDTH = 70


class LogAxis(pg.AxisItem):
    """An axis for log10 values that labels whole decades only, as 1e-3, 0.01, 1, 100, 1e4."""

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, list[float]]]:
        if not (np.isfinite(minVal) and np.isfinite(maxVal)) or maxVal <= minVal:
            return []
        lo, hi = int(np.ceil(minVal)), int(np.floor(maxVal))
        rows = max(int(size // 28), 1)
        step = max(1, int(np.ceil((hi - lo + 1) / rows)))
        values = [float(v) for v in range(lo, hi + 1, step)]
        if not values:
            values = [float(np.round((minVal + maxVal) / 2, 1))]
        return [(float(step), values)]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        out = []
        for v in values:
            if float(v).is_integer() and -2 <= v <= 3:
                out.append(f"{10.0**v:g}")
            elif float(v).is_integer():
                out.append(f"1e{int(v)}")
            else:
                out.append(f"{10.0**v:.2g}")
        return out


class SparseAxis(pg.AxisItem):
    """A linear axis with only as many labels as a short row has room for (one per 28 px)."""

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, list[float]]]:
        if not (np.isfinite(minVal) and np.isfinite(maxVal)) or maxVal <= minVal:
            return []
        rows = max(int(size // 28), 1)
        raw = (maxVal - minVal) / rows
        magnitude = 10.0 ** np.floor(np.log10(raw))
        step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
        first = np.ceil(minVal / step) * step
        values = [float(v) + 0.0 for v in np.arange(first, maxVal + step * 1e-9, step)]  # no "-0"
        return [(float(step), values)]


class ScrubViewBox(pg.ViewBox):
    """A view box whose left-button clicks and drags report the x under the mouse."""

    def __init__(self, on_scrub: Callable[[float], None]) -> None:
        super().__init__(enableMenu=False)
        self.on_scrub = on_scrub
        self.setMouseEnabled(x=False, y=False)

    def mouseClickEvent(self, ev: Any) -> None:
        if ev.button() == Qt.MouseButton.LeftButton:
            ev.accept()
            self.on_scrub(self.mapSceneToView(ev.scenePos()).x())

    def mouseDragEvent(self, ev: Any, axis: Any = None) -> None:
        if ev.button() == Qt.MouseButton.LeftButton:
            ev.accept()
            self.on_scrub(self.mapSceneToView(ev.scenePos()).x())
        else:
            ev.ignore()

    def wheelEvent(self, ev: Any, axis: Any = None) -> None:
        ev.ignore()


def log10_positive(values: Any) -> np.ndarray:
    """log10 of the values for a log axis: zero, negative, inf and NaN become gaps."""
    a = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(np.isfinite(a) & (a > 0), np.log10(np.where(a > 0, a, 1.0)), np.nan)


class TimelineView(QWidget):
    """Loss, gradient norm, run distance and op tape; emits ``scrubbed(tick)``."""

    scrubbed = Signal(float)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme: Theme = LIGHT
        self.info: LabInfo | None = None
        self._drawn_len = -1
        self._drawn_at = 0.0
        self._span = 0.0
        self.title = QLabel("Timeline")
        self.title.setObjectName("panelTitle")
        self.legend = QLabel("")
        self.legend.setObjectName("status")
        self.legend.setWordWrap(True)
        self.legend.setMinimumWidth(100)
        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.setObjectName("timelinePlot")
        self.plots: dict[str, pg.PlotItem] = {}
        self.cursors: list[pg.InfiniteLine] = []
        self.row_labels: dict[str, pg.LabelItem] = {}
        labels = {"loss": "loss", "grad": "‖.grad‖", "distance": "distance", "tape": "ops"}
        for row, key in enumerate(("loss", "grad", "distance", "tape")):
            # Row names sit in their own column: rotated axis labels collide with ticks in short rows.
            label = self.graphics.addLabel(labels[key], row=row, col=0, justify="right")
            label.setFixedWidth(LABEL_WIDTH)
            self.row_labels[key] = label
            axes = {"left": LogAxis("left") if key in ("loss", "grad") else SparseAxis("left")}
            plot = self.graphics.addPlot(
                row=row, col=1, viewBox=ScrubViewBox(self.scrubbed.emit), axisItems=axes
            )
            plot.setMenuEnabled(False)
            plot.hideButtons()
            plot.setClipToView(True)
            plot.setDownsampling(auto=True, mode="peak")
            plot.getAxis("left").setWidth(AXIS_WIDTH)
            if key != "tape":
                plot.getAxis("bottom").setStyle(showValues=False)
            else:
                plot.setLabel("bottom", "op (tick)")
            if key != "loss":
                plot.setXLink(self.plots["loss"])
            cursor = pg.InfiniteLine(pos=-1, angle=90, pen=pg.mkPen("#888", width=2))
            cursor.setZValue(30)
            plot.addItem(cursor, ignoreBounds=True)
            self.cursors.append(cursor)
            self.plots[key] = plot
        self.graphics.ci.layout.setRowStretchFactor(0, 3)
        self.graphics.ci.layout.setRowStretchFactor(1, 2)
        self.graphics.ci.layout.setRowStretchFactor(2, 2)
        self.graphics.ci.layout.setRowStretchFactor(3, 1)
        self.tape_image = pg.ImageItem()
        self.plots["tape"].addItem(self.tape_image)
        self.curves: dict[str, list[pg.PlotDataItem]] = {"loss": [], "grad": [], "distance": []}
        self.ends: list[pg.ScatterPlotItem] = []
        box = QVBoxLayout(self)
        box.setContentsMargins(4, 4, 4, 4)
        box.addWidget(self.title)
        box.addWidget(self.graphics, 1)
        box.addWidget(self.legend)
        self.graphics.setMinimumHeight(160)

    # ------------------------------------------------------------- setup
    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.graphics.setBackground(theme.base)
        for plot in self.plots.values():
            for name in ("left", "bottom"):
                axis = plot.getAxis(name)
                axis.setPen(pg.mkPen(theme.muted))
                axis.setTextPen(pg.mkPen(theme.text))
        for c in self.cursors:
            c.setPen(pg.mkPen(theme.text, width=2))
        for label in self.row_labels.values():
            label.setText(label.text, color=theme.text)
        self._legend_text()

    def set_point_size(self, size: float) -> None:
        font = QFont()
        font.setPointSizeF(size * 0.85)
        for plot in self.plots.values():
            for name in ("left", "bottom"):
                axis = plot.getAxis(name)
                axis.setStyle(tickFont=font)
                axis.label.setFont(font)
            plot.getAxis("left").setWidth(int(AXIS_WIDTH * size / 10))
        for label in self.row_labels.values():
            label.setText(label.text, size=f"{size * 0.85:g}pt", color=self.theme.text)
            label.setFixedWidth(int(LABEL_WIDTH * size / 10))

    def set_lab(self, info: LabInfo) -> None:
        """Curves for each run of the new lab; the distance row only with two or more runs."""
        self.info = info
        self._drawn_len = -1
        self._span = 0.0
        for key, curves in self.curves.items():
            for c in curves:
                self.plots[key].removeItem(c)
            curves.clear()
        for e in self.ends:
            self.plots["loss"].removeItem(e)
        self.ends = []
        for i, run in enumerate(info.runs):
            colour = QColor(run_color(i))
            for key in ("loss", "grad"):
                curve = pg.PlotDataItem(
                    pen=pg.mkPen(colour, width=2, style=run_dash(i)), connect="finite", name=run.name
                )
                self.plots[key].addItem(curve)
                self.curves[key].append(curve)
            end = pg.ScatterPlotItem(size=14, symbol="x", pen=pg.mkPen(colour, width=2), brush=colour)
            self.plots["loss"].addItem(end)
            self.ends.append(end)
        for i in range(1, len(info.runs)):
            curve = pg.PlotDataItem(
                pen=pg.mkPen(QColor(run_color(i)), width=2, style=run_dash(i)), connect="finite"
            )
            self.plots["distance"].addItem(curve)
            self.curves["distance"].append(curve)
        first = info.runs[0].name
        others = ", ".join(r.name for r in info.runs[1:])
        self.plots["distance"].setVisible(len(info.runs) > 1)
        self.row_labels["distance"].setVisible(len(info.runs) > 1)
        self.plots["distance"].setToolTip(f"‖θ(run) − θ({first})‖ for {others}")
        tape = self.plots["tape"]
        tape.getAxis("left").setTicks([[]])
        tape.setYRange(0, len(info.runs), padding=0)
        order = " / ".join(r.name for r in info.runs)
        tape.setToolTip(f"One row per run, top to bottom: {order}")
        self._legend_text()

    def _legend_text(self) -> None:
        if self.info is None:
            return
        # Each entry stays on one line; a narrow panel wraps between entries.
        runs = "   ".join(
            f"<span style='color:{run_color(i)}; white-space:nowrap'>{run_glyph(i)} {r.name}</span>"
            for i, r in enumerate(self.info.runs)
        )
        ops = "  ".join(
            f"<span style='white-space:nowrap'><span style='color:{OP_COLORS[op]}'>■</span>"
            f" {OP_LETTERS[op]} {op}</span>"
            for op in OPS
        )
        dist = ""
        if len(self.info.runs) > 1:
            first = self.info.runs[0].name
            dist = f"   <span style='white-space:nowrap'>distance: ‖θ − θ<sub>{first}</sub>‖</span>"
        self.legend.setText(f"{runs}   │   ops tape, a row per run: {ops}{dist}")

    # --------------------------------------------------------------- draw
    def draw(self, moment: Moment) -> None:
        """Curves up to the newest op; the cursor at ``moment``."""
        info = self.info
        if info is None:
            return
        tape = moment.tape
        for c in self.cursors:
            c.setValue(moment.tick + 0.5 if moment.tick >= 0 else -0.5)
        total = sum(len(rt) for rt in tape.runs.values())
        now = time.perf_counter()
        # During Play the curves follow at a few frames a second; the cursor moves every frame.
        due = not moment.playing or now - self._drawn_at >= PLAY_CURVE_INTERVAL
        if total != self._drawn_len and due:
            self._drawn_len = total
            self._drawn_at = now
            self._draw_curves(moment)
        # The x range grows in steps of a quarter, so the axes are not re-laid out on every op.
        span = float(info.ticks_per_iteration * 4)
        while span < tape.last_tick + 2:
            span *= 1.25
        if span != self._span:
            self._span = span
            self.plots["loss"].setXRange(-0.5, span, padding=0.01)

    def _draw_curves(self, moment: Moment) -> None:
        info = self.info
        assert info is not None
        tape = moment.tape
        for i, run in enumerate(info.runs):
            rt = tape.runs[run.name]
            x = np.asarray(rt.ticks, dtype=np.float64) + 0.5
            loss = log10_positive(rt.loss)
            self.curves["loss"][i].setData(x, loss)
            self.curves["grad"][i].setData(x, log10_positive(rt.grad_norm))
            if rt.statuses and rt.statuses[-1] != "running":
                finite = np.flatnonzero(np.isfinite(loss))
                if finite.size:
                    j = finite[-1]
                    self.ends[i].setData([x[j]], [loss[j]])
            else:
                self.ends[i].setData([], [])
        if tape.distance_ticks:
            dx = np.asarray(tape.distance_ticks, dtype=np.float64) + 0.5
            for curve, column in zip(self.curves["distance"], tape.distance, strict=True):
                # Linear: identical runs sit at a visible 0 instead of vanishing from a log axis.
                values = np.asarray(column, dtype=np.float64)
                curve.setData(dx, np.where(np.isfinite(values), values, np.nan))
        else:
            for curve in self.curves["distance"]:
                curve.setData([], [])
        self._draw_tape(moment)

    def _draw_tape(self, moment: Moment) -> None:
        info = self.info
        assert info is not None
        tape = moment.tape
        n = max(tape.last_tick + 1, 1)
        rgba = np.zeros((n, len(info.runs), 4), dtype=np.ubyte)
        lut = np.array(
            [
                (
                    QColor(OP_COLORS[op]).red(),
                    QColor(OP_COLORS[op]).green(),
                    QColor(OP_COLORS[op]).blue(),
                    255,
                )
                for op in OPS
            ],
            dtype=np.ubyte,
        )
        code = {op: i for i, op in enumerate(OPS)}
        for r, run in enumerate(info.runs):
            rt = tape.runs[run.name]
            if not len(rt):
                continue
            ticks = np.asarray(rt.ticks)
            ops = np.fromiter((code[o] for o in rt.ops), dtype=np.intp, count=len(rt))
            # Row 0 is drawn at the top: the first run heads the tape as in the legend.
            rgba[ticks, len(info.runs) - 1 - r] = lut[ops]
        self.tape_image.setImage(rgba, levels=(0, 255), autoLevels=False)
        self.tape_image.setRect(0, 0, n, len(info.runs))
