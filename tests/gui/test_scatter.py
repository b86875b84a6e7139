"""A scatter that keeps its bounding rectangle reports what pyqtgraph's own works out, through
every change that moves it, and so is painted where pyqtgraph's would be."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtWidgets import QApplication

from gradviz.gui.views.scatter import Scatter


def _pair(**options) -> tuple[pg.PlotWidget, Scatter, pg.ScatterPlotItem]:
    widget = pg.PlotWidget()
    widget.resize(400, 300)
    kept, plain = Scatter(**options), pg.ScatterPlotItem(**options)
    for item in (kept, plain):
        widget.addItem(item)
    widget.setRange(xRange=(0, 10), yRange=(0, 5), padding=0)
    widget.show()
    QApplication.processEvents()
    return widget, kept, plain


def _same(kept: Scatter, plain: pg.ScatterPlotItem) -> None:
    QApplication.processEvents()
    assert kept.boundingRect() == plain.boundingRect()
    assert kept.boundingRect() == plain.boundingRect()  # asked again: the kept one


def test_a_kept_bounding_rectangle_follows_points_sizes_view_and_moves(qapp) -> None:
    widget, kept, plain = _pair(size=12, symbol="o", pen=pg.mkPen("k", width=2))
    changes = [
        lambda item: item.setData([1.0, 4.0], [2.0, 3.0]),
        lambda item: item.setData([6.0], [1.0]),
        lambda item: item.setSize(30),
        lambda item: item.setPos(2.0, 1.0),
        lambda item: item.addPoints([9.0], [4.5]),
        lambda item: item.setData([], []),
        lambda item: item.setData([3.0, 3.5], [0.5, 4.0], size=[5, 40]),
    ]
    for change in changes:
        change(kept)
        change(plain)
        _same(kept, plain)
        widget.setRange(xRange=(0, 40), yRange=(0, 2), padding=0)  # a pixel another size in data
        _same(kept, plain)
        widget.resize(700, 250)
        _same(kept, plain)
        widget.resize(400, 300)
        widget.setRange(xRange=(0, 10), yRange=(0, 5), padding=0)
    widget.close()


def test_a_kept_scatter_paints_what_pyqtgraph_paints(qapp) -> None:
    images = []
    for kind in (Scatter, pg.ScatterPlotItem):
        widget = pg.PlotWidget()
        widget.resize(300, 200)
        widget.setBackground("w")
        item = kind([2.0, 5.0], [1.0, 4.0], size=16, symbol="s", brush="#0072B2", pen=pg.mkPen("k", width=2))
        widget.addItem(item)
        widget.setRange(xRange=(0, 10), yRange=(0, 5), padding=0)
        widget.show()
        QApplication.processEvents()
        item.setPos(1.0, 0.5)  # moved as the timeline's end markers are
        widget.setRange(xRange=(0, 8), yRange=(0, 6), padding=0)
        QApplication.processEvents()
        images.append(widget.grab().toImage())
        widget.close()
    assert images[0] == images[1]
