"""Lines drawn the cheap way: dashed pens cut into their dashes, short lines redrawn every frame
without a curve item's costs.

Qt strokes a dashed pen wider than one pixel by building the outline of every
dash and filling it: about four times the cost of drawing the same dashes as
solid lines. A run's dash is what tells it apart from another without colour,
so it stays; :class:`DashCut` keeps Qt's pattern (the pen's own dash lengths,
in units of its width, each dash capped as the pen caps it) and only draws it the
cheaper way, for :class:`DashedCurve` and :class:`LiveLine` alike. The data they
hold and report is the series itself, not the dashes.

:class:`LiveLine` is for a few points handed anew every frame (a growing line's
tail, an arrow): pyqtgraph's curve item would find its bounds through its view's
pixel vectors and weigh options such a line never uses, each time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from numpy.typing import ArrayLike
from pyqtgraph.graphicsItems.PlotCurveItem import arrayToLineSegments
from PySide6.QtCore import QLineF, QRectF, Qt
from PySide6.QtGui import QPainter, QPen, QTransform


def dash_lines(x: np.ndarray, y: np.ndarray, pattern: list[float], offset: float = 0.0) -> np.ndarray:
    """The dashes of the polyline through pixels ``x``, ``y`` as rows ``(x0, y0, x1, y1)``.

    ``pattern`` alternates dash and gap lengths in pixels, ``offset`` is how far into
    it the line starts. A non-finite point breaks the line (as ``connect="finite"``);
    the pattern runs on along the line's drawn length across such a break. A dash
    that bends at a point is one row per straight piece.
    """
    dx, dy = np.diff(x), np.diff(y)
    with np.errstate(invalid="ignore"):
        length = np.hypot(dx, dy)
    idx = np.flatnonzero(np.isfinite(length) & (length > 0))
    period = float(sum(pattern))
    if period <= 0 or not len(idx):
        return np.zeros((0, 4))
    # Only the drawn pieces, each with where it starts and ends along the drawn length.
    length, x0, y0, dx, dy = length[idx], x[idx], y[idx], dx[idx], dy[idx]
    s1 = np.cumsum(length) + offset
    s0 = s1 - length
    out = []
    a = 0.0
    for i in range(0, len(pattern), 2):
        b = a + pattern[i]
        # Dash k covers [k * period + a, k * period + b]: those that overlap each piece of line.
        first = np.floor((s0 - b) / period) + 1
        count = np.maximum(np.ceil((s1 - a) / period) - first, 0).astype(np.intp)
        if count.any():
            seg = np.repeat(np.arange(len(length)), count)
            k = np.arange(len(seg)) + np.repeat(first - (np.cumsum(count) - count), count)
            start, size = s0[seg], length[seg]
            t0 = (np.maximum(start, k * period + a) - start) / size
            t1 = (np.minimum(s1[seg], k * period + b) - start) / size
            rows = np.empty((len(seg), 4))
            px, py, ux, uy = x0[seg], y0[seg], dx[seg], dy[seg]
            rows[:, 0], rows[:, 1] = px + t0 * ux, py + t0 * uy
            rows[:, 2], rows[:, 3] = px + t1 * ux, py + t1 * uy
            out.append(rows)
        a = b + (pattern[i + 1] if i + 1 < len(pattern) else 0.0)
    return np.concatenate(out) if out else np.zeros((0, 4))


class DashCut:
    """A line's dashes as solid segments in pixels, cut again only when its data or its place on
    screen changes."""

    def __init__(self) -> None:
        self._segments = pg.Qt.internals.PrimitiveArray(QLineF, 4)
        self._cut_for: tuple[Any, ...] | None = None
        self._length_for: tuple[Any, ...] | None = None
        self._length = 0.0

    def drawn_length(self, x: np.ndarray | None, y: np.ndarray | None, t: QTransform) -> float:
        """The pixels the drawn pieces of ``x``, ``y`` come to under the painter's transform ``t``."""
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

    def paint(
        self, p: QPainter, x: np.ndarray, y: np.ndarray, pen: QPen, lead: float, antialias: bool
    ) -> None:
        """Draw ``x``, ``y`` with ``pen``'s dashes, the pattern running on from ``lead`` pixels."""
        t = p.transform()
        width = max(pen.widthF(), 1.0)
        offset = pen.dashOffset() * width + lead
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
        p.setRenderHint(QPainter.RenderHint.Antialiasing, antialias)
        p.setPen(solid)
        p.drawLines(*self._segments.drawargs())
        p.restore()


def _dashed(pen: QPen | None) -> bool:
    return pen is not None and pen.style() not in (Qt.PenStyle.SolidLine, Qt.PenStyle.NoPen)


class DashedCurve(pg.PlotCurveItem):
    """A curve whose dashed pen is drawn as its dashes' solid segments (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cut = DashCut()
        # A line this one goes on from: its pattern starts where the lead's drawn length ends.
        self.lead: DashedCurve | None = None

    def drawn_length(self, t: QTransform) -> float:
        """The pixels this line's drawn pieces come to under the painter's transform ``t``."""
        return self.cut.drawn_length(self.xData, self.yData, t)

    def paint(self, p: QPainter, opt: Any, widget: Any) -> None:
        x, y = self.xData, self.yData
        plain = (
            not _dashed(self.opts["pen"])
            or self.opts["fillLevel"] is not None
            or self.opts["stepMode"]
            or self.opts["connect"] not in ("all", "finite")
            or self.opts["shadowPen"] is not None
        )
        if plain or x is None or y is None or len(x) < 2:
            super().paint(p, opt, widget)
            return
        lead = self.lead.drawn_length(p.transform()) if self.lead is not None else 0.0
        self.cut.paint(p, x, y, self.opts["pen"], lead, bool(self.opts["antialias"]))


class LiveLine(pg.GraphicsObject):
    """A few points drawn anew every frame, as a curve item with ``pen`` draws them (see the module).

    A point that is not finite breaks the line. A solid pen draws the segments between
    neighbouring points, as a curve item draws an opaque pen wider than a pixel; a dashed
    one its dashes, the pattern running on from :attr:`lead`'s drawn length where it has a lead.
    """

    def __init__(self, pen: QPen) -> None:
        super().__init__()
        self.pen = QPen(pen)
        self.lead: DashedCurve | None = None
        self._cut = DashCut() if _dashed(pen) else None
        self._segments = pg.Qt.internals.PrimitiveArray(QLineF, 4)
        self._x = self._y = np.zeros(0)
        self._bounds: tuple[float, float, float, float] | None = None  # the finite points' x and y extents
        self._rect: QRectF | None = None  # the bounds with the pen's width around them, in data units

    def setData(self, x: ArrayLike, y: ArrayLike) -> None:
        """Draw the line through ``x``, ``y``."""
        self.prepareGeometryChange()
        self._x, self._y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        finite = np.isfinite(self._x) & np.isfinite(self._y)
        fx, fy = self._x[finite], self._y[finite]
        self._bounds = (fx.min(), fx.max(), fy.min(), fy.max()) if len(fx) else None
        self._rect = None
        if self._cut is None:  # the segments a curve item draws for such a pen
            arrayToLineSegments(self._x, self._y, "finite", True, self._segments)
        self.update()

    def getData(self) -> tuple[np.ndarray, np.ndarray]:
        """The points as handed."""
        return self._x, self._y

    def dataBounds(self, ax: int, frac: float = 1.0, orthoRange: Any = None) -> tuple[Any, Any]:
        """The finite points' extent along axis ``ax`` (``None, None`` without one), as a curve reports it."""
        if self._bounds is None:
            return (None, None)
        return self._bounds[2 * ax], self._bounds[2 * ax + 1]

    def viewTransformChanged(self) -> None:
        self.prepareGeometryChange()
        self._rect = None  # the pen's pixels are another size in data units

    def boundingRect(self) -> QRectF:
        if self._bounds is None:
            return QRectF()
        if self._rect is None:
            x0, x1, y0, y1 = self._bounds
            px, py = self.pixelVectors()
            pad = self.pen.widthF() * 0.7072  # half the pen's diagonal, as a curve item pads
            dx = pad * (px.length() if px is not None else 0.0)
            dy = pad * (py.length() if py is not None else 0.0)
            self._rect = QRectF(x0 - dx, y0 - dy, x1 - x0 + 2 * dx, y1 - y0 + 2 * dy)
        return self._rect

    def paint(self, p: QPainter, *args: Any) -> None:
        if len(self._x) < 2:
            return
        if self._cut is not None:
            lead = self.lead.drawn_length(p.transform()) if self.lead is not None else 0.0
            self._cut.paint(p, self._x, self._y, self.pen, lead, False)
            return
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        p.setPen(self.pen)
        p.drawLines(*self._segments.drawargs())


def curve_line(pen: QPen, **options: Any) -> pg.PlotCurveItem:
    """A series already thinned to the plot's pixels, drawn with ``pen`` as a bare curve item.

    A :class:`pyqtgraph.PlotDataItem` would clip and thin it again on every ``setData``.
    """
    kind = pg.PlotCurveItem if pen.style() == Qt.PenStyle.SolidLine else DashedCurve
    return kind(pen=pen, **options)
