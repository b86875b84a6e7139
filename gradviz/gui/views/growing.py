"""A series that grows at its end, drawn as a settled part painted from a pixmap and a short live tail.

During Play a timeline's series gains a few points a frame and keeps the rest. Handed
whole, every frame would have Qt stroke every point again. :class:`GrowingLine` keeps
what it was handed before as a settled curve, cached as a pixmap in device
coordinates (Qt paints it again only when the range or the size changes), and hands
only the points after it to a tail line (a :class:`~gradviz.gui.views.dashes.LiveLine`);
once the tail holds :data:`SETTLE` points they join the settled part. A dashed pen's
pattern runs on from the settled part into the tail (:attr:`LiveLine.lead`), so the
line looks as one curve would draw it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF
from PySide6.QtGui import QPainter, QPen
from PySide6.QtWidgets import QGraphicsItem

from gradviz.gui.views.dashes import DashedCurve, LiveLine, curve_line

# Points the live tail may hold before they join the settled part (which is then painted again).
SETTLE = 256


class GrowingLine(pg.GraphicsObject):
    """A curve item (``setData``, ``getData``, ``opts``) whose settled points are painted from a
    pixmap; only the points handed since they settled are stroked every frame."""

    def __init__(self, pen: QPen, **options: Any) -> None:
        super().__init__()
        self.settled = curve_line(pen, **options)
        self.tail = LiveLine(pen)
        for part in (self.settled, self.tail):
            part.setParentItem(self)
        self.settled.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        if isinstance(self.settled, DashedCurve):
            self.tail.lead = self.settled
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemHasNoContents)
        self.opts = self.settled.opts
        self._x = np.zeros(0)
        self._y = np.zeros(0)
        self._settled = 0  # points of the series in the settled part

    def setData(self, x: np.ndarray, y: np.ndarray) -> None:
        """Draw the series ``x``, ``y``: where it begins with the settled points and adds fewer than
        :data:`SETTLE` to them, only the tail is handed over.

        Otherwise the points that are the same as in the last call settle, and the rest
        make the tail: a series whose newest points are revised as it grows (a timeline's
        last bucket of points, :class:`~gradviz.gui.views.timeline.PeakLine`) then settles
        once per :data:`SETTLE` points, not on every call. Where more than that changed, or
        the first point did, the whole series settles.
        """
        s = self._settled
        same = _same_start(x, y, self._x, self._y)
        if not (0 < s <= same and len(x) - s < SETTLE):
            s = self._settled = same if same > 0 and len(x) - same < SETTLE else len(x)
            self.settled.setData(x[:s], y[:s])
        # The tail starts at the settled part's last point, so the two join.
        self.tail.setData(x[max(s - 1, 0) :], y[max(s - 1, 0) :])
        self._x, self._y = x, y

    def getData(self) -> tuple[np.ndarray, np.ndarray]:
        """The whole series as handed."""
        return self._x, self._y

    def pixelPadding(self) -> float:
        return float(self.settled.pixelPadding())

    def dataBounds(self, ax: int, frac: float = 1.0, orthoRange: Any = None) -> tuple[Any, Any]:
        """The series' bounds along axis ``ax``, for pyqtgraph's auto-range (as one curve reports them)."""
        bounds = [p.dataBounds(ax, frac, orthoRange) for p in (self.settled, self.tail)]
        lows = [b[0] for b in bounds if b[0] is not None]
        highs = [b[1] for b in bounds if b[1] is not None]
        return (min(lows), max(highs)) if lows else (None, None)

    def boundingRect(self) -> QRectF:
        return self.childrenBoundingRect()

    def paint(self, p: QPainter, *args: Any) -> None:
        pass  # the parts paint themselves


def _same_start(x: np.ndarray, y: np.ndarray, was_x: np.ndarray, was_y: np.ndarray) -> int:
    """How many leading points ``x``, ``y`` and ``was_x``, ``was_y`` have in common (NaN, which
    breaks a line, equal to NaN)."""
    n = min(len(x), len(was_x))
    first = np.flatnonzero(_differ(x[:n], was_x[:n]) | _differ(y[:n], was_y[:n]))
    return int(first[0]) if first.size else n


def _differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a != b) & ~(np.isnan(a) & np.isnan(b))
