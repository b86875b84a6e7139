"""A timeline line that grows at its end: the settled points are handed over once, only the
newest every frame, and what is painted is what one curve of the whole series paints."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from gradviz.gui.views.dashes import DashedCurve, LiveLine, curve_line
from gradviz.gui.views.growing import SETTLE, GrowingLine


def _series(n: int, path: bool = False) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(n, dtype=np.float64) + 0.5
    y = np.sin(x / 7.0) + 0.1 * np.cos(x)
    y[n // 3] = np.nan  # a gap, as a zero on a log row without its floor
    if path:
        x[n // 4] = np.nan  # a break between pieces, as a thinned path over the surface has
    return x, y


def _counting(monkeypatch, line: GrowingLine) -> dict[str, int]:
    counts = {"settled": 0, "tail": 0}
    for name in counts:
        part = getattr(line, name)
        call = part.setData

        def counted(*args, _name=name, _call=call, **kwargs):
            counts[_name] += 1
            return _call(*args, **kwargs)

        monkeypatch.setattr(part, "setData", counted)
    return counts


@pytest.mark.parametrize("path", [False, True], ids=["timeline", "surface path"])
def test_a_growing_series_hands_its_settled_points_over_once_per_settle(qapp, monkeypatch, path) -> None:
    line = GrowingLine(pg.mkPen("#0072B2", width=2))
    counts = _counting(monkeypatch, line)
    x, y = _series(3 * SETTLE, path)
    frames = 0
    for n in range(10, len(x) + 1, 5):  # five new points a frame
        line.setData(x[:n], y[:n])
        frames += 1
        got_x, got_y = line.getData()
        assert np.array_equal(got_x, x[:n], equal_nan=True)
        assert np.array_equal(got_y, y[:n], equal_nan=True)
        # The two parts together hold the series once, joined at one shared point.
        sx, sy = line.settled.getData()
        tx, ty = line.tail.getData()
        assert np.array_equal(np.concatenate((sx, tx[1:])), x[:n], equal_nan=True)
        assert np.array_equal(np.concatenate((sy, ty[1:])), y[:n], equal_nan=True)
        assert len(tx) <= SETTLE + 1
    assert counts["tail"] == frames
    assert counts["settled"] <= frames * 5 // SETTLE + 2, counts


def test_a_series_changed_before_its_end_settles_what_stayed_and_hands_the_rest_to_the_tail(qapp) -> None:
    line = GrowingLine(pg.mkPen("#0072B2", width=2))
    x, y = _series(4 * SETTLE)
    line.setData(x[:60], y[:60])
    line.setData(x[:70], y[:70])
    y2 = y.copy()
    y2[5] = 3.0  # a bucket made again: the points from there on are not the ones drawn
    line.setData(x[:80], y2[:80])
    assert np.array_equal(line.settled.getData()[1], y2[:5])
    assert np.array_equal(line.tail.getData()[1], y2[4:80], equal_nan=True)
    y3 = y2 + 1.0  # a floor moved: every point changed, so the whole series settles again
    line.setData(x[: 3 * SETTLE], y3[: 3 * SETTLE])
    assert np.array_equal(line.settled.getData()[1], y3[: 3 * SETTLE], equal_nan=True)
    assert len(line.tail.getData()[0]) == 1


def test_a_timeline_series_whose_last_bucket_fills_settles_once_per_settle_not_every_frame(
    qapp, monkeypatch
) -> None:
    from gradviz.gui.views.timeline import PeakLine

    line = GrowingLine(pg.mkPen("#0072B2", width=2), connect="finite")
    counts = _counting(monkeypatch, line)
    peaks = PeakLine()  # buckets of several points soon: the last one is revised as it fills
    x, y = _series(20_000)
    ticks = np.arange(len(x))
    frames = 0
    for n in range(200, len(x) + 1, 37):
        px, py = peaks.update(ticks, y, n)
        line.setData(px, py)
        frames += 1
        sx, _ = line.settled.getData()
        tx, _ = line.tail.getData()
        assert np.array_equal(np.concatenate((sx, tx[1:])), px)
    assert peaks.k > 4
    # Settling on every frame that fills a bucket would be about one frame in five here.
    assert counts["settled"] < frames // 10, counts


def _painted(item_of, data: list[tuple[np.ndarray, np.ndarray]]):
    widget = pg.PlotWidget()
    widget.resize(400, 200)
    widget.setBackground("w")
    widget.getPlotItem().hideAxis("left")
    widget.getPlotItem().hideAxis("bottom")
    item = item_of()
    widget.addItem(item)
    widget.setRange(xRange=(0, 400), yRange=(-1.5, 1.5), padding=0)
    widget.show()
    for x, y in data:
        item.setData(x, y)
        QApplication.processEvents()
    image = widget.grab().toImage()
    widget.close()
    return image


@pytest.mark.parametrize("style", [Qt.PenStyle.SolidLine, Qt.PenStyle.DashLine])
def test_a_grown_line_paints_what_one_curve_of_the_whole_series_paints(qapp, style) -> None:
    pen = pg.mkPen("#D55E00", width=2, style=style)
    x, y = _series(400)
    steps = [(x[:n], y[:n]) for n in range(20, 401, 7)] + [(x, y)]
    grown = _painted(lambda: GrowingLine(pen, connect="finite"), steps)
    whole = _painted(lambda: curve_line(pen, connect="finite"), [(x, y)])
    line = GrowingLine(pen)
    assert (
        isinstance(line.settled, DashedCurve)
        == (line.tail.lead is not None)
        == (style != Qt.PenStyle.SolidLine)
    )
    assert grown == whole, "the settled part and the tail paint as one curve, dashes included"


@pytest.mark.parametrize(
    ("width", "style"),
    [
        (2, Qt.PenStyle.SolidLine),
        (4, Qt.PenStyle.SolidLine),
        (2, Qt.PenStyle.DashLine),
        (2, Qt.PenStyle.DotLine),
    ],
)
def test_a_live_line_paints_what_a_curve_item_paints(qapp, width, style) -> None:
    pen = pg.mkPen("#0072B2", width=width, style=style)
    x, y = _series(120, path=True)  # broken by a NaN in x and one in y
    frames = [(x[:n], y[:n]) for n in (2, 30, 60)] + [(x, y)]
    live = _painted(lambda: LiveLine(pen), frames)
    curve = _painted(lambda: curve_line(pen, connect="finite"), [(x, y)])
    assert live == curve
    line = LiveLine(pen)
    line.setData(x, y)
    assert line.dataBounds(0) == (np.nanmin(x), np.nanmax(x))
    finite = np.isfinite(x) & np.isfinite(y)
    assert line.dataBounds(1) == (y[finite].min(), y[finite].max())
