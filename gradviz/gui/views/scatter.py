"""A scatter item that works out its bounds once per change instead of at every paint.

Qt asks each item of a scene for its bounding rectangle several times in every paint,
and pyqtgraph's ``ScatterPlotItem`` works it out anew each time: its data bounds (kept)
padded by its markers' width in pixels, which takes the item's device transform (not
kept). During Play the timeline and the surface hold a score of such markers and paint
every frame, so each frame paid for this a score of times over.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QRectF


class Scatter(pg.ScatterPlotItem):
    """A ``ScatterPlotItem`` whose bounding rectangle is kept until its points, sizes or view change.

    pyqtgraph replaces the item's ``bounds`` list whenever one of these changes (new or
    cleared points, marker sizes, the view's transform); the rectangle is kept for the list
    it was worked out with. Moving the item with ``setPos`` keeps it, as pyqtgraph's own
    would: the pixel padding of a translated item is the same.
    """

    _rect = QRectF()
    _rect_for: list[object] | None = None  # the ``bounds`` list the rectangle was worked out with

    def boundingRect(self) -> QRectF:
        if self._rect_for is not self.bounds:
            self._rect_for = self.bounds
            self._rect = super().boundingRect()
        return QRectF(self._rect)  # a copy: Qt's callers may adjust what they are given
