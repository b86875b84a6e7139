"""Axes painted from a pixmap while the plot's contents move.

An axis changes only with its range or size, but a view repaints every item that
meets the region a moving cursor or a growing curve dirtied, which for a plot's
axes means every frame of Play. With ``DeviceCoordinateCache`` Qt paints an axis
once into a pixmap and copies it after that, which holds only what lies within
the axis's bounding rectangle.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QRectF
from PySide6.QtWidgets import QGraphicsItem

# pyqtgraph draws a bottom axis's line a pixel past each end of its bounds
# (AxisItem.generateDrawSpecs), and a pixmap of exactly those bounds lost the line along
# the top as well: two pixels of room all round keep it whole.
LINE_OVERHANG = 2.0


class BottomAxis(pg.AxisItem):
    """A bottom axis whose bounds hold its whole line, so that its pixmap cuts none of it."""

    def __init__(self, **options: object) -> None:
        super().__init__("bottom", **options)
        self.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)

    def boundingRect(self) -> QRectF:
        return super().boundingRect().adjusted(-LINE_OVERHANG, -LINE_OVERHANG, LINE_OVERHANG, LINE_OVERHANG)
