"""Dashed curves cut into their dashes in pixels and drawn as plain line segments.

Qt strokes a dashed pen wider than one pixel by building the outline of every
dash and filling it: about four times the cost of drawing the same dashes as
solid lines. A run's dash is what tells it apart from another without colour,
so it stays; :class:`DashedCurve` keeps Qt's pattern (the pen's own dash lengths,
in units of its width, each dash capped as the pen caps it) and only draws it the
cheaper way. The data it holds and reports is the series itself, not the dashes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QLineF, Qt
from PySide6.QtGui import QPainter, QPen, QTransform


def dash_lines(x: np.ndarray, y: np.ndarray, pattern: list[float], offset: float = 0.0) -> np.ndarray:
    """The dashes of the polyline through pixels ``x``, ``y`` as rows ``(x0, y0, x1, y1)``.

    ``pattern`` alternates dash and gap lengths in pixels, ``offset`` is how far into
    it the line starts. A non-finite point breaks the line (as ``connect="finite"``);
    the pattern runs on along the line's drawn length across such a break. A dash
    that bends at a point is one row per straight piece.
    """
    x0, y0, x1, y1 = x[:-1], y[:-1], x[1:], y[1:]
    with np.errstate(invalid="ignore"):
        length = np.hypot(x1 - x0, y1 - y0)
    drawn = np.isfinite(length) & (length > 0)
    length = np.where(drawn, length, 0.0)
    s1 = np.cumsum(length) + offset
    s0 = s1 - length
    period = float(sum(pattern))
    if period <= 0 or not drawn.any():
        return np.zeros((0, 4))
    idx = np.flatnonzero(drawn)
    starts = np.concatenate(([0.0], np.cumsum(pattern)[:-1]))
    out = []
    for a, b in zip(starts[0::2], starts[0::2] + np.asarray(pattern[0::2]), strict=True):
        # Dash k covers [k * period + a, k * period + b]: those that overlap each piece of line.
        first = np.floor((s0[idx] - b) / period).astype(np.int64) + 1
        last = np.ceil((s1[idx] - a) / period).astype(np.int64) - 1
        count = np.maximum(last - first + 1, 0)
        seg = np.repeat(idx, count)
        k = np.repeat(first, count) + np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
        lo = np.maximum(s0[seg], k * period + a)
        hi = np.minimum(s1[seg], k * period + b)
        t0 = ((lo - s0[seg]) / length[seg])[:, None]
        t1 = ((hi - s0[seg]) / length[seg])[:, None]
        start = np.stack((x0[seg], y0[seg]), axis=1)
        step = np.stack((x1[seg] - x0[seg], y1[seg] - y0[seg]), axis=1)
        out.append(np.concatenate((start + t0 * step, start + t1 * step), axis=1))
    return np.concatenate(out)


class DashedCurve(pg.PlotCurveItem):
    """A curve whose dashed pen is drawn as its dashes' solid segments (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._segments = pg.Qt.internals.PrimitiveArray(QLineF, 4)
        self._cut_for: tuple[Any, ...] | None = None
        # A curve this one goes on from: its pattern starts where the lead's drawn length ends.
        self.lead: DashedCurve | None = None
        self._length_for: tuple[Any, ...] | None = None
        self._length = 0.0

    def drawn_length(self, t: QTransform) -> float:
        """The pixels this line's drawn pieces come to under the painter's transform ``t``."""
        x, y = self.xData, self.yData
        if x is None or y is None or len(x) < 2:
            return 0.0
        key = (x, y, t.m11(), t.m12(), t.m21(), t.m22())  # lengths do not change with a translation
        was = self._length_for
        if was is None or was[0] is not x or was[1] is not y or was[2:] != key[2:]:
            px, py = t.m11() * x + t.m21() * y, t.m12() * x + t.m22() * y
            with np.errstate(invalid="ignore"):
                length = np.hypot(np.diff(px), np.diff(py))
            self._length = float(np.where(np.isfinite(length), length, 0.0).sum())
            self._length_for = key
        return self._length

    def paint(self, p: QPainter, opt: Any, widget: Any) -> None:
        pen = self.opts["pen"]
        x, y = self.xData, self.yData
        plain = (
            pen is None
            or pen.style() in (Qt.PenStyle.SolidLine, Qt.PenStyle.NoPen)
            or self.opts["fillLevel"] is not None
            or self.opts["stepMode"]
            or self.opts["connect"] not in ("all", "finite")
            or self.opts["shadowPen"] is not None
        )
        if plain or x is None or y is None or len(x) < 2:
            super().paint(p, opt, widget)
            return
        t = p.transform()
        width = max(pen.widthF(), 1.0)
        offset = pen.dashOffset() * width + (self.lead.drawn_length(t) if self.lead is not None else 0.0)
        # The cut holds while the data (new arrays on every setData) and its place on screen do.
        key = (x, y, t.m11(), t.m12(), t.m21(), t.m22(), t.m31(), t.m32(), pen.widthF(), offset)
        was = self._cut_for
        if was is None or was[0] is not x or was[1] is not y or was[2:] != key[2:]:
            lines = dash_lines(
                t.m11() * x + t.m21() * y + t.m31(),
                t.m12() * x + t.m22() * y + t.m32(),
                [d * width for d in pen.dashPattern()],
                offset,
            )
            self._segments.resize(len(lines))
            if len(lines):
                self._segments.ndarray()[:] = lines
            self._cut_for = key
        solid = QPen(pen)
        solid.setStyle(Qt.PenStyle.SolidLine)
        p.save()
        p.resetTransform()  # the segments are in pixels already
        p.setRenderHint(QPainter.RenderHint.Antialiasing, bool(self.opts["antialias"]))
        p.setPen(solid)
        p.drawLines(*self._segments.drawargs())
        p.restore()


def curve_line(pen: QPen, **options: Any) -> pg.PlotCurveItem:
    """A series already thinned to the plot's pixels, drawn with ``pen`` as a bare curve item.

    A :class:`pyqtgraph.PlotDataItem` would clip and thin it again on every ``setData``.
    """
    kind = pg.PlotCurveItem if pen.style() == Qt.PenStyle.SolidLine else DashedCurve
    return kind(pen=pen, **options)
