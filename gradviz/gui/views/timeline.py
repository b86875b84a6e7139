"""The timeline: loss, gradient norm, what autograd holds and walks, and the distance between
runs against op tick, over the op strip.

Clicking or dragging anywhere on it scrubs history: every view then shows that
moment. On the log axes a zero (a ``.grad`` that is ``None`` or all zeros) sits
on a shaded floor band labelled "0" below the smallest positive value, so it
reads as zero instead of vanishing; inf and NaN leave gaps, and a diverged run
ends with a cross. Where the lab measures its footprint (engine/footprint.py),
a saved row shows the bytes held for backward after every op and a walked row
the nodes each ``backward()`` walked (where the lesson asks about them). Each
run's series ends in its marker labelled with its name, and each cell of the
op strip carries its op's letter as well as its colour.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainterPath, QResizeEvent, QTransform
from PySide6.QtWidgets import QGraphicsItem, QLabel, QVBoxLayout, QWidget

from gradviz.gui.theme import LIGHT, OP_COLORS, OP_LETTERS, Theme, run_color, run_dash, run_glyph, run_symbol
from gradviz.gui.views.axes import BottomAxis
from gradviz.gui.views.grads import iteration_peak
from gradviz.gui.views.growing import GrowingLine
from gradviz.gui.views.scatter import Scatter
from gradviz.gui.window_history import LabInfo, Moment, WindowHistory

OPS = ("zero_grad", "forward", "backward", "step")
# A curve keeps at most this many buckets of points (two drawn per bucket): more than a
# timeline has pixels across, so a long history costs each frame no more than a short one.
CURVE_BUCKETS = 512
# The op strip's image keeps at most this many columns: beyond, a column is the mean colour
# of the ticks it stands for (ops too dense to tell apart read as their mix).
STRIP_COLUMNS = 2048
# Ticks whose colours are made at a time when they are averaged into columns.
STRIP_BLOCK = 1 << 16
AXIS_WIDTH = 48
LABEL_WIDTH = 70


# Pixels of axis height per tick label at the normal type size: labels stay apart.
PX_PER_LABEL = 15
# Height of one run's band of the op strip at the normal type size, in pixels.
STRIP_ROW_PX = 10
ROWS = ("loss", "grad", "saved", "nodes", "distance", "ops")
ROW_INDEX = {key: i for i, key in enumerate(ROWS)}
ROW_STRETCH = {"loss": 3, "grad": 2, "saved": 2, "nodes": 2, "distance": 2}
ROW_NAMES = {
    "loss": "loss",
    "grad": "‖.grad‖",
    "saved": "saved",
    "nodes": "walked",
    "distance": "distance",
    "ops": "ops",
}
QWIDGETSIZE_MAX = 16777215
# The least height of a curve row's plot area at the normal type size: room for two tick labels apart.
ROW_MIN_PX = {"loss": 34, "grad": 28, "saved": 28, "nodes": 28, "distance": 28}
# Rows on a log axis, where a zero needs a place of its own (the floor band).
LOG_ROWS = ("loss", "grad")
# Rows whose series end in the run's marker and a label naming the run.
LABELLED_ROWS = ("loss", "grad", "saved", "nodes")
# Rows of what autograd holds and walks (engine/footprint.py), shown only where a lab measures them.
FOOTPRINT_ROWS = ("saved", "nodes")
NICE = (1.0, 2.0, 2.5, 5.0)
# The floor band of a log row, in parts of the row's span of log10 values (at least FLOOR_SPAN):
# the gap between the smallest positive value and the band, and the band itself.
FLOOR_GAP, FLOOR_BAND = 0.1, 0.2
# The least span of log10 values a floor band is sized by: a tenth of a decade.
FLOOR_SPAN = 0.1
# While Play runs, a row's range grows this part of its height beyond what it must hold whenever
# its points outgrow it, so a series that climbs steadily (a ‖grad‖ never zeroed) moves its axis a
# few times instead of every frame; at a pause the row fits its points again.
GROWTH = 0.25
# How the time axis grows when the newest op passes its end: stepped by hand, and while Play runs.
X_GROWTH = 1.25
X_GROWTH_PLAYING = 2.0
# The op strip shows its letters once a tick's cell is at least this many times a letter's height wide.
LETTER_ROOM = 0.9


def label_budget(size: float, spacing: float = PX_PER_LABEL) -> int:
    """How many tick labels an axis ``size`` pixels long shows, ``spacing`` apart: never fewer than two."""
    return max(2, int(size // max(spacing, 1.0)))


def label_spacing(font: QFont | None) -> float:
    """Pixels between two tick labels set in ``font``: their height and one more, so they never touch."""
    return max(float(PX_PER_LABEL), QFontMetrics(font or QFont()).height() + 1.0)


def _thin(values: list[float], most: int) -> list[float]:
    """Every k-th value, the fewest k that leaves at most ``most`` of them; the first and the last
    where only two fit (as far apart as they can be: a short row keeps both)."""
    if len(values) <= most:
        return values
    if most <= 2:
        return [values[0], values[-1]]
    k = int(np.ceil(len(values) / most))
    return values[::k]


def nice_linear_ticks(lo: float, hi: float, most: int) -> list[float]:
    """Round values (1, 2, 2.5, 5 times a power of ten) in [lo, hi]: at least two, about ``most``."""
    span = hi - lo
    if not (np.isfinite(lo) and np.isfinite(hi)) or span <= 0:
        return []
    raw = span / max(most, 1)
    magnitude = 10.0 ** np.floor(np.log10(raw))
    steps = sorted({m * magnitude * f for f in (0.01, 0.1, 1.0, 10.0) for m in NICE})
    # The coarsest step that still gives at most ``most`` labels, then finer until there are two.
    fitting = [st for st in steps if st >= raw] or [steps[-1]]
    step = fitting[0]
    values: list[float] = []
    for st in [x for x in steps if x <= step][::-1]:
        first = np.ceil(lo / st - 1e-9) * st
        values = [float(v) + 0.0 for v in np.arange(first, hi + st * 1e-9, st)]  # no "-0"
        values = [0.0 if abs(v) < st * 1e-9 else v for v in values]
        if len(values) >= 2:
            return _thin(values, max(most, 2))
    return values


def log_ticks(lo: float, hi: float, most: int) -> list[float]:
    """Tick positions (log10 of round values) in [lo, hi]: at least two, at most about ``most``.

    Whole decades where the range spans enough of them, else 1-2-5 steps within the
    decades, else round values spaced evenly (a range inside one decade).
    """
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi <= lo:
        return []
    first, last = int(np.floor(lo)), int(np.ceil(hi))
    # Three labels where the row has room for them, two at least.
    wanted = min(most, 3)
    best: list[float] = []
    for mantissas in ((1.0,), (1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)):
        values = [
            float(np.log10(m)) + e
            for e in range(first, last + 1)
            for m in mantissas
            if lo <= float(np.log10(m)) + e <= hi
        ]
        thinned = _thin(values, most)
        if len(thinned) >= wanted:
            return thinned
        if len(thinned) > len(best):
            best = thinned
    linear = [float(np.log10(v)) for v in nice_linear_ticks(10.0**lo, 10.0**hi, most) if v > 0]
    return linear if len(linear) > len(best) else best


def _short(value: float, digits: int) -> str:
    """A tick label: 0.35, 2.5, 120, 3e4, 2.5e-5."""
    if value == 0:
        return "0"
    if 1e-3 <= abs(value) < 1e4:
        return np.format_float_positional(value, precision=digits, unique=False, fractional=False, trim="-")
    mantissa, exponent = f"{value:.{digits - 1}e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    return f"{mantissa}e{int(exponent)}"


def distinct_labels(values: list[float]) -> list[str]:
    """Labels for tick values with the fewest significant digits that tell them all apart and
    say each one truly (12.5, not 13)."""
    for digits in range(2, 7):
        labels = [_short(v, digits) for v in values]
        true = all(abs(float(t) - v) <= 1e-6 * abs(v) for t, v in zip(labels, values, strict=True))
        if true and len(set(labels)) == len(labels):
            return labels
    return labels


def clear_of_ends(
    ticks: Callable[[float, float, int], list[float]],
    lo: float,
    hi: float,
    size: float,
    spacing: float = PX_PER_LABEL,
) -> list[float]:
    """``ticks`` over the range less a few pixels at each end (labels there touch the next row).

    The whole range is used where that inner one would hold fewer than two labels.
    """
    most = label_budget(size, spacing)
    if size > 0 and hi > lo:
        margin = (hi - lo) * 3 / size
        inner = ticks(lo + margin, hi - margin, most)
        if len(inner) >= 2:
            return inner
    return ticks(lo, hi, most)


class PeakLine:
    """A growing series as a timeline draws it: every point while there are few, extremes beyond.

    Points are gathered into buckets of ``k`` consecutive ones; each full bucket is
    drawn as its lowest and its highest point, at their own x and in their own order,
    so a spike stays in sight however long the history. A gap (NaN) that opens or
    closes a bucket stays a gap (one inside a bucket, a pixel or two wide, is bridged).
    Where the buckets outnumber ``most``, ``k`` doubles and the buckets are made again
    from the raw series (rarely: the work per point stays constant on average).
    Appending costs only the new points; :attr:`drawn` says how many points the last
    :meth:`update` hands to the plot.
    """

    def __init__(self, values: Callable[[Any], np.ndarray] | None = None, most: int = CURVE_BUCKETS) -> None:
        self.values = values or (lambda v: np.asarray(v, dtype=np.float64))
        self.most = most
        self.k = 1
        self._n = 0  # raw points gathered into full buckets
        self._x = np.zeros(0)
        self._y = np.zeros(0)
        self._buckets = 0
        self.drawn = 0

    def reset(self) -> None:
        self.k, self._n, self._buckets = 1, 0, 0
        self._x, self._y = np.zeros(0), np.zeros(0)

    def update(self, ticks: Any, y: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The points to draw for the first ``n`` ops: ``ticks`` and raw ``y`` are sequences that grow.

        A tick's point sits in the middle of its cell of the strip (``tick + 0.5``); ``y``
        goes through ``values`` (log10 for a log axis) as it is read.
        """
        if n < self._n:
            self.reset()
        full = (n // self.k) * self.k
        if full > self._n:
            self._add(*self._read(ticks, y, self._n, full))
            self._n = full
        if self._buckets > self.most:
            while n // self.k > self.most:
                self.k *= 2
            self._n, self._buckets = 0, 0
            self._x, self._y = np.zeros(0), np.zeros(0)
            return self.update(ticks, y, n)
        tail_x, tail_y = self._read(ticks, y, self._n, n)
        out = (np.concatenate((self._x, tail_x)), np.concatenate((self._y, tail_y)))
        self.drawn = len(out[0])
        return out

    def _read(self, ticks: Any, y: Any, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        x = np.asarray(ticks[start:stop], dtype=np.float64) + 0.5
        return x, np.asarray(self.values(y[start:stop]), dtype=np.float64).reshape(-1)

    def _add(self, x: np.ndarray, y: np.ndarray) -> None:
        k = self.k
        self._buckets += len(x) // k
        if k == 1:
            self._x, self._y = np.concatenate((self._x, x)), np.concatenate((self._y, y))
            return
        xs, ys = x.reshape(-1, k), y.reshape(-1, k)
        gap = np.isnan(ys)
        gappy = gap.any(axis=1)
        rows = np.arange(len(ys))[:, None]
        # A bucket's lowest and highest point; where it holds a gap, also its first and last
        # finite points (the stretches either side of a gap), and the gap itself where it
        # opens or closes the bucket. All in time order, at their own ticks.
        first = gap.argmin(axis=1)
        last = k - 1 - gap[:, ::-1].argmin(axis=1)
        low = np.where(gap, np.inf, ys).argmin(axis=1)
        high = np.where(gap, -np.inf, ys).argmax(axis=1)
        at = np.sort(np.stack((first, low, high, last), axis=1), axis=1)
        px = np.concatenate((xs[:, :1], xs[rows, at], xs[:, -1:]), axis=1)
        py = np.concatenate(
            (np.full((len(ys), 1), np.nan), ys[rows, at], np.full((len(ys), 1), np.nan)), axis=1
        )
        keep = np.ones(px.shape, dtype=bool)
        keep[:, 0] = gap[:, 0]
        keep[:, -1] = gap[:, -1]
        keep[:, 1] = keep[:, 4] = gappy
        keep[:, 2:5] &= at[:, 1:] != at[:, :-1]  # a point twice is drawn once
        keep[:, 1] |= at[:, 0] == at[:, 1]  # once: a lowest or highest that opens the bucket stays
        self._x = np.concatenate((self._x, px[keep]))
        self._y = np.concatenate((self._y, py[keep]))


@dataclass(frozen=True)
class Floor:
    """Where a log row draws zeros: a band below its smallest positive value, labelled "0".

    ``level`` is the log10 coordinate zeros are drawn at, inside the band from
    ``bottom`` to ``top``; positive values are labelled only above ``top``, and
    not at all where the row has none (``alone``).
    """

    level: float
    top: float
    bottom: float
    alone: bool = False


def floor_below(lo: float, hi: float, alone: bool = False) -> Floor:
    """The floor band of a log row whose positive values span ``lo`` to ``hi`` (log10).

    A log axis has no place for zero; a symmetric-log axis would make one but bend
    the scale of the small values, which are what shrinking gradients are about. A
    band of its own keeps every decade the same height and the zero unmistakable.
    """
    span = max(hi - lo, FLOOR_SPAN)
    top = lo - FLOOR_GAP * span
    return Floor(top - FLOOR_BAND * span / 2, top, top - FLOOR_BAND * span, alone)


def apart(values: list[float], lo: float, hi: float, size: float, spacing: float) -> list[float]:
    """``values`` less those within ``spacing`` pixels of a higher one kept (on an axis ``size``
    pixels long from ``lo`` to ``hi``): round values of a log axis are not evenly spaced."""
    if size <= 0 or hi <= lo:
        return values
    gap = spacing * (hi - lo) / size
    kept: list[float] = []
    for v in sorted(values, reverse=True):
        if not kept or kept[-1] - v >= gap:
            kept.append(v)
    return kept[::-1]


class LogAxis(pg.AxisItem):
    """An axis for log10 values labelled with round numbers: 1e-3, 0.01, 1, 100, 1e4, or 2, 5, 10.

    Every row shows at least two labelled values, however little of a decade it spans;
    with a :class:`Floor` the band's one label reads "0".
    """

    def __init__(self, orientation: str) -> None:
        super().__init__(orientation)
        self.floor: Floor | None = None

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, list[float]]]:
        spacing = label_spacing(self.style["tickFont"])
        floor = self.floor
        if floor is None or not minVal <= floor.level <= maxVal or maxVal <= minVal:
            values = apart(
                clear_of_ends(log_ticks, minVal, maxVal, size, spacing), minVal, maxVal, size, spacing
            )
            return [(1.0, values)] if values else []
        if floor.alone:
            return [(1.0, [floor.level])]
        # Positive values are labelled above the band, each a label's room clear of the "0"; a row
        # with room for one label there shows its highest, the "0" being the other.
        per_px = (maxVal - minVal) / size if size > 0 else 0.0
        above = max(minVal, floor.top)
        room = (maxVal - above) / per_px if per_px else 0.0
        if room >= 2 * spacing:
            values = clear_of_ends(log_ticks, above, maxVal, room, spacing)
        else:
            values = log_ticks(above, maxVal, 2)[-1:] if room >= spacing else []
        values = [
            v for v in apart(values, minVal, maxVal, size, spacing) if v - floor.level >= spacing * per_px
        ]
        return [(1.0, [floor.level, *values])]

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        floor = self.floor

        def zero(v: float) -> bool:
            return floor is not None and abs(v - floor.level) < 1e-9

        labels = iter(distinct_labels([10.0 ** float(v) for v in values if not zero(v)]))
        return ["0" if zero(v) else next(labels) for v in values]


class SparseAxis(pg.AxisItem):
    """A linear axis with as many round labels as a short row has room for, and at least two."""

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, list[float]]]:
        values = clear_of_ends(nice_linear_ticks, minVal, maxVal, size, label_spacing(self.style["tickFont"]))
        return [(1.0, values)] if values else []

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        return distinct_labels([float(v) for v in values])


class TickAxis(BottomAxis):
    """The axis of ticks: whole numbers only, so no label or mark falls between two ticks."""

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:
        levels: list[tuple[float, float]] = []
        for spacing, offset in super().tickSpacing(minVal, maxVal, size):
            level = (max(float(spacing), 1.0), float(offset))
            if level not in levels:
                levels.append(level)
        return levels


class BytesAxis(pg.AxisItem):
    """A linear axis of bytes with round labels in one unit: 0, 5,000, 10,000 B or 0, 20, 40 KB."""

    def _unit(self, maxVal: float) -> float:
        return 1024.0 if maxVal >= 10_000 else 1.0

    def tickValues(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, list[float]]]:
        unit = self._unit(maxVal)
        spacing = label_spacing(self.style["tickFont"])
        values = clear_of_ends(nice_linear_ticks, minVal / unit, maxVal / unit, size, spacing)
        return [(1.0, [v * unit for v in values])] if values else []

    def tickStrings(self, values: list[float], scale: float, spacing: float) -> list[str]:
        if not values:
            return []
        unit = self._unit(max(values))
        suffix = " KB" if unit > 1 else ""
        return [f"{t}{suffix}" if t != "0" else t for t in distinct_labels([float(v) / unit for v in values])]


class EndLabels:
    """Each run's series in one row ends in the run's marker, named beside it in the run's colour.

    Names whose places would overlap share one line (runs whose series end
    together), and lines are kept apart and inside the row, over a backing of the
    background's colour. A line goes where it hides the least of what the row
    draws (the markers first, which are drawn over it; then every run's curve, as
    last handed by :meth:`set_ends`): right of its markers, left of them, above or
    below them, or a line up or down beside them, each as near as the row's edges
    allow; among places that hide as little, the nearest its markers, right before
    left where the row has room right. Placed again whenever the row's range, size
    or points change.
    """

    def __init__(self, plot: pg.PlotItem, joined: bool = True) -> None:
        self.plot = plot
        # Whether the row's curves are lines (else markers only, with nothing between two points).
        self.joined = joined
        # What each run's curve draws (x ascending, as ticks are), which the names keep clear of.
        self.drawn: list[tuple[np.ndarray, np.ndarray]] = []
        # Each run's marker: one point moved with setPos and copied from a pixmap, since handing a
        # scatter new points every frame has it paint them again.
        self.markers: list[Scatter] = []
        self.marker_size = 8.0
        self.items: list[pg.TextItem] = []
        self._html: list[str] = []  # what each item shows, so that unchanged text is not set again
        # Each run's end: x, y, the name's HTML; None where its series has no point yet.
        self.ends: list[tuple[float, float, str] | None] = []
        self.colours: list[QColor] = []
        # What the markers and names were last placed for: a frame that changes none of it costs nothing.
        self._placed: tuple[Any, ...] | None = None
        self._placed_over: list[tuple[np.ndarray, np.ndarray]] = []  # the curves' points, by identity
        # Whether the places are weighed by what they hide; while Play runs, the nearest free one is
        # taken (the names move every frame), and at the pause they are weighed again.
        self.weigh = True
        self.font = QFont()
        self.background = QColor(LIGHT.base)
        box = plot.getViewBox()
        box.sigRangeChanged.connect(self.place)
        box.sigResized.connect(self.place)

    def set_runs(self, colours: list[QColor]) -> None:
        """A new lab's runs, in their colours; no ends until :meth:`set_ends`."""
        self.colours = colours
        for marker in self.markers:
            self.plot.removeItem(marker)
        self.markers = []
        for i, colour in enumerate(colours):
            marker = Scatter(
                [0.0], [0.0], size=self.marker_size, symbol=run_symbol(i), pen=colour, brush=colour
            )
            marker.setZValue(40)  # over the cursor and the names: the newest values always show
            marker.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
            marker.setVisible(False)
            self.plot.addItem(marker, ignoreBounds=True)
            self.markers.append(marker)
        self.ends = [None] * len(colours)
        self._placed = None

    def set_style(self, font: QFont, background: str) -> None:
        """Names in ``font`` over a backing of ``background``; markers sized to the type."""
        self.font = font
        self.background = QColor(background)
        self.marker_size = max(8.0, QFontMetrics(font).height() * 0.6)
        for marker in self.markers:
            marker.setSize(self.marker_size)
        for item in self.items:
            item.textItem.setFont(font)
            item.fill = pg.mkBrush(self._backing())
        self._placed = None
        self.place()

    def _backing(self) -> QColor:
        c = QColor(self.background)
        c.setAlpha(210)
        return c

    def set_ends(
        self, ends: list[tuple[float, float, str] | None], drawn: Sequence[tuple[np.ndarray, np.ndarray]] = ()
    ) -> None:
        """Each run's end (x, y, its name's HTML), None where its series has no point, and the
        points each run's curve draws (x ascending); placed at once."""
        self.drawn = list(drawn)
        if ends == self.ends:
            self.place()  # the curves may have moved under the names
            return
        self.ends = ends
        for marker, end in zip(self.markers, ends, strict=True):
            if end is not None and np.isfinite(end[:2]).all():
                marker.setPos(end[0], end[1])
                marker.setVisible(True)
            else:
                marker.setVisible(False)
        self.place()

    def marker_points(self) -> list[tuple[float, float]]:
        """Where the markers shown stand, in the row's coordinates."""
        return [(m.pos().x(), m.pos().y()) for m in self.markers if m.isVisible()]

    def texts(self) -> list[str]:
        """The lines shown now, as plain text."""
        return [item.textItem.toPlainText() for item in self.items if item.isVisible()]

    def place(self, *_: Any) -> None:
        """Put the markers' names where they read (see the class), for the row's range and size now."""
        box = self.plot.getViewBox()
        (x0, x1), (y0, y1) = box.viewRange()
        w, h = box.width(), box.height()
        placed = (x0, x1, y0, y1, w, h, self.ends, self.weigh)
        # The curves' points are compared by identity: a hand-over of new points makes new arrays.
        # Unweighed (during Play) the places do not depend on the curves at all.
        over = not self.weigh or (
            len(self.drawn) == len(self._placed_over)
            and all(
                x is was_x and y is was_y
                for (x, y), (was_x, was_y) in zip(self.drawn, self._placed_over, strict=True)
            )
        )
        if placed == self._placed and over:
            return
        self._placed, self._placed_over = placed, self.drawn
        line = QFontMetrics(self.font).height() + 3  # a line of text and its backing's margins
        ends = [(i, e) for i, e in enumerate(self.ends) if e is not None and np.isfinite(e[1])]
        if w <= 0 or h <= 0 or x1 <= x0 or y1 <= y0 or not ends:
            for item in self.items:
                item.setVisible(False)
            return

        def px(x: float) -> float:
            return (x - x0) / (x1 - x0) * w

        def py(y: float) -> float:  # pixels down from the row's top
            return (y1 - y) / (y1 - y0) * h

        # Runs whose series end at the same place share one line.
        groups: list[list[tuple[int, tuple[float, float, str]]]] = []
        for i, e in sorted(ends, key=lambda end: py(end[1][1])):
            near = (
                g
                for g in groups
                if abs(py(e[1]) - py(g[0][1][1])) < line and abs(px(e[0]) - px(g[0][1][0])) < line
            )
            group = next(near, None)
            if group is None:
                groups.append([(i, e)])
            else:
                group.append((i, e))
        metrics = QFontMetrics(self.font)

        marker = self.marker_size
        # A line beside its markers, or above or below them, clears them by this much.
        gap = max(6.0, marker / 2 + 2)
        clear = line / 2 + marker / 2 + 2

        def extents(group: list[tuple[int, tuple[float, float, str]]]) -> list[tuple[float, float]]:
            """Where the group's line may go across: right of its marker where the row has room,
            left of it, centred on it, each as near as the row's edges allow; the first is preferred."""
            width = metrics.horizontalAdvance(" · ".join(e[2] for _, e in group)) + 4
            end_x = px(max(e[0] for _, e in group))
            sides = [end_x + gap, end_x - gap - width]
            if end_x + gap + width > w:
                sides.reverse()
            sides.append(end_x - width / 2)
            return [(left, left + width) for left in (min(max(x, 0.0), max(w - width, 0.0)) for x in sides)]

        def places(
            want: float, group: list[tuple[int, tuple[float, float, str]]]
        ) -> list[tuple[float, float, float]]:
            """The group's candidate lines (left, right, the middle wanted), in order of preference:
            beside its markers, above and below them, beside them a line up and down."""
            (right, right_end), (left, left_end), (centre, centre_end) = extents(group)
            return [
                (right, right_end, want),
                (left, left_end, want),
                (centre, centre_end, want - clear),
                (centre, centre_end, want + clear),
                *((a, b, want + d) for d in (-line, line) for a, b in ((right, right_end), (left, left_end))),
            ]

        # Each line: its groups, its extent across and its middle (pixels down).
        lines: list[tuple[list[tuple[int, tuple[float, float, str]]], float, float, float]] = []
        for group in groups:
            want = sum(py(e[1]) for _, e in group) / len(group)
            taken = [(a, b, r) for _, a, b, r in lines]
            spots = [
                (abs(row - want) + 0.5 * k, left, right, row)
                for k, (left, right, near) in enumerate(places(want, group))
                if (row := _free_row(near, left, right, taken, line, h)) is not None
            ]
            if spots:
                nearest = min(spots)
                if not self.weigh or (
                    self._past_every_curve(nearest, line, marker, px)
                    and not self._markers_under(nearest, line, marker, px, py)
                ):
                    lines.append((group, *nearest[1:]))
                    continue
                hidden = self._hidden(spots, line, marker, px, py, lambda p: x0 + p / w * (x1 - x0))
                lines.append((group, *min(zip(hidden, spots, strict=True))[1][1:]))
                continue
            # No room apart in a short row: the names join the line nearest them.
            j = min(range(len(lines)), key=lambda k: abs(lines[k][3] - want))
            joined = lines[j][0] + group
            lines[j] = (joined, *extents(joined)[0], lines[j][3])
        while len(self.items) < len(lines):
            item = pg.TextItem(anchor=(0, 0.5), fill=pg.mkBrush(self._backing()))
            item.textItem.document().setDocumentMargin(1)  # lines as tight as the row needs
            item.textItem.setFont(self.font)
            item.setZValue(35)  # over the cursor: a name it must cross stays legible
            self.plot.addItem(item, ignoreBounds=True)
            self.items.append(item)
            self._html.append("")
        for k, (item, (group, left, _right, row)) in enumerate(zip(self.items, lines, strict=False)):
            html = "&nbsp;·&nbsp;".join(
                f"<span style='color:{self.colours[i].name()}'>{e[2]}</span>" for i, e in group
            )
            if self._html[k] != html:
                item.setHtml(html)
                self._html[k] = html
            at = QPointF(x0 + left / w * (x1 - x0), y1 - row / h * (y1 - y0))
            if item.pos() != at:
                item.setPos(at)
            item.setVisible(True)
        for item in self.items[len(lines) :]:
            item.setVisible(False)

    def _past_every_curve(
        self, spot: tuple[float, float, float, float], line: float, marker: float, px: Callable[[Any], Any]
    ) -> bool:
        """Whether the spot's line begins right of every curve's last point: then only markers can
        be under it, known without weighing the points (where names usually go during Play)."""
        left = _box(spot, line)[0] - marker / 2
        return all(not len(x) or px(float(x[-1])) <= left for x, _ in self.drawn)  # x ascends

    def _markers_under(
        self,
        spot: tuple[float, float, float, float],
        line: float,
        marker: float,
        px: Callable[[Any], Any],
        py: Callable[[Any], Any],
    ) -> int:
        """How many of the row's markers the spot's line would cover some of."""
        left, top, right, bottom = _box(spot, line)
        r = marker / 2
        return sum(
            left - r < px(e[0]) < right + r and top - r < py(e[1]) < bottom + r
            for e in self.ends
            if e is not None
        )

    def _hidden(
        self,
        spots: list[tuple[float, float, float, float]],
        line: float,
        marker: float,
        px: Callable[[Any], Any],
        py: Callable[[Any], Any],
        x_at: Callable[[float], float],
    ) -> list[tuple[int, float]]:
        """What each spot's line would hide: the markers it would cover some of, then how many
        pixels of the row's curves, to the whole pixel; ``px``, ``py`` map data to pixels and
        ``x_at`` pixels across back to data. Markers are drawn over the names, so a name under
        one loses letters to it: a spot that covers fewer markers hides less, whatever the curves."""
        boxes = np.array([_box(spot, line) for spot in spots])
        covered = np.array([self._markers_under(spot, line, marker, px, py) for spot in spots])
        ink = np.zeros(len(spots))
        # Only the points beside the boxes matter (and one either side, for the lines that cross).
        lo, hi = x_at(float(boxes[:, 0].min()) - marker), x_at(float(boxes[:, 2].max()) + marker)
        xs: list[np.ndarray] = []
        ys: list[np.ndarray] = []
        for x, y in self.drawn:
            a = max(int(np.searchsorted(x, lo)) - 1, 0)
            b = int(np.searchsorted(x, hi, side="right")) + 1
            xs += (x[a:b], _BREAK)  # a gap after each curve: no line joins one curve to the next
            ys += (y[a:b], _BREAK)
        if xs:
            points = np.stack((px(np.concatenate(xs)), py(np.concatenate(ys))))
            if self.joined:
                ink = line_inside(boxes, points)
            else:
                ink = marker * points_inside(boxes, points, marker / 2)
        return list(zip(covered.tolist(), np.round(ink).tolist(), strict=True))


def _box(spot: tuple[float, float, float, float], line: float) -> tuple[float, float, float, float]:
    """The pixels a spot's line (its left, right and middle) covers: left, top, right, bottom,
    a pixel wider either side for the pen of a line that passes just beside it."""
    _, left, right, row = spot
    return left - 1, row - line / 2, right + 1, row + line / 2


# A point that is no point: where it ends a piece of a series, no line is drawn to the next.
_BREAK = np.array([np.nan])


def line_inside(boxes: np.ndarray, points: np.ndarray) -> np.ndarray:
    """For each box (left, top, right, bottom), the length of the line through ``points`` (x in
    the first row, y in the second; a non-finite point breaks the line) inside it."""
    step = np.diff(points, axis=1)
    length = np.nan_to_num(np.hypot(*step), nan=0.0, posinf=0.0)  # a broken segment is not drawn
    start = points[:, :-1]
    # Where each segment enters and leaves each slab across and down, as shares of it (a segment
    # along a slab is inside it all along, -inf to inf, or nowhere, inf to inf). Boxes share
    # their few slabs: each is weighed once.
    spans = boxes.tolist()
    across = sorted({(b[0], b[2]) for b in spans})
    down = sorted({(b[1], b[3]) for b in spans})
    with np.errstate(divide="ignore", invalid="ignore"):
        inverse = 1.0 / step
        tx = (np.array(across)[:, :, None] - start[0]) * inverse[0]
        ty = (np.array(down)[:, :, None] - start[1]) * inverse[1]
    x_in, x_out = np.minimum(tx[:, 0], tx[:, 1]), np.maximum(tx[:, 0], tx[:, 1])
    y_in, y_out = np.minimum(ty[:, 0], ty[:, 1]), np.maximum(ty[:, 0], ty[:, 1])
    a = [across.index((b[0], b[2])) for b in spans]
    d = [down.index((b[1], b[3])) for b in spans]
    enter = np.fmax(np.fmax(x_in[a], y_in[d]), 0.0)
    leave = np.fmin(np.fmin(x_out[a], y_out[d]), 1.0)
    return np.maximum(leave - enter, 0.0) @ length


def points_inside(boxes: np.ndarray, points: np.ndarray, radius: float) -> np.ndarray:
    """For each box (left, top, right, bottom), how many ``points`` (x in the first row, y in the
    second) lie nearer than ``radius`` to it."""
    x, y = points
    left, top, right, bottom = (boxes[:, k : k + 1] for k in range(4))
    inside = (x > left - radius) & (x < right + radius) & (y > top - radius) & (y < bottom + radius)
    return inside.sum(axis=1)


def _free_row(
    want: float,
    left: float,
    right: float,
    placed: list[tuple[float, float, float]],
    line: float,
    height: float,
) -> float | None:
    """The middle of a line of text nearest ``want`` (pixels down) that keeps a line's height from
    every placed line it shares columns with, inside ``height``; None where there is none."""
    inside = min(max(want, line / 2), max(height - line / 2, line / 2))
    clash = [row for lo, hi, row in placed if lo < right and left < hi]
    for row in sorted(
        [inside] + [r + line for r in clash] + [r - line for r in clash], key=lambda r: abs(r - want)
    ):
        if line / 2 - 0.5 <= row <= height - line / 2 + 0.5 and all(
            abs(row - r) >= line - 0.5 for r in clash
        ):
            return row
    return None


@functools.cache
def letter_symbol(letter: str) -> QPainterPath:
    """A letter as a scatter symbol: its outline centred on the point, one unit tall."""
    path = QPainterPath()
    font = QFont()
    font.setBold(True)
    path.addText(0, 0, font, letter)
    box = path.boundingRect()
    scale = 1.0 / max(box.height(), 1e-9)
    transform = QTransform()
    transform.scale(scale, scale)
    transform.translate(-box.center().x(), -box.center().y())
    return transform.map(path)


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


def log10_or_zero(values: Any) -> np.ndarray:
    """log10 of the values for a log row with a floor band: zero becomes -inf, inf and NaN gaps."""
    a = np.asarray(values, dtype=np.float64)
    return np.where(a == 0, -np.inf, log10_positive(a))


def _footprint_column(records: Any, field: str) -> np.ndarray:
    """One field of each record's footprint; a gap where the record has no such figure."""
    out = np.full(len(records), np.nan)
    for j, rec in enumerate(records):
        value = getattr(getattr(rec, "footprint", None), field, None)
        if value is not None:
            out[j] = value
    return out


def saved_bytes(records: Any) -> np.ndarray:
    """The bytes each record's op left saved for backward; a gap where the footprint is not known."""
    return _footprint_column(records, "saved")


def nodes_walked(records: Any) -> np.ndarray:
    """The autograd nodes each record's ``backward()`` walked; a gap at every other op."""
    return _footprint_column(records, "nodes")


def log_row_range(values: np.ndarray) -> tuple[tuple[float, float] | None, Floor | None]:
    """A log row's span of positive values (log10; a flat one widened to a decade) and, where
    ``values`` hold a zero (-inf), the floor band it is drawn on; (None, None) for nothing to draw."""
    finite = values[np.isfinite(values)]
    zeros = bool(np.isneginf(values).any())
    if finite.size:
        lo, hi = float(finite.min()), float(finite.max())
        if hi - lo < 1e-9:
            lo, hi = lo - 0.5, hi + 0.5
    elif zeros:
        return (-0.5, 0.5), floor_below(-0.5, 0.5, alone=True)
    else:
        return None, None
    return (lo, hi), floor_below(lo, hi) if zeros else None


def loss_kinds(info: LabInfo) -> list[str]:
    """What each run's loss is a loss of, where the runs differ in it: "per batch", "per micro-batch ÷ 4".

    Empty strings where every run's loss is of the same kind.
    """
    shape = [(r.spec.loop.accumulate, r.spec.loop.scale_loss) for r in info.runs]
    if len(set(shape)) < 2:
        return [""] * len(shape)
    return ["per batch" if k == 1 else f"per micro-batch{f' ÷ {k}' if scaled else ''}" for k, scaled in shape]


def fitted_span(spans: Sequence[tuple[float, float, float]], height: float) -> tuple[float, float] | None:
    """The span of a row's y axis that holds every item's ``(low, high, pixel padding)``, or None.

    As pyqtgraph's own auto-range reckons it (each item's values, widened by the pixels its
    pen or markers reach past them), so the row reads the same; the view box adds its usual
    padding on top. Computed from the points the row was handed, it is set before the row is
    painted, where pyqtgraph's would change the range during the paint and paint again.
    """
    if not spans:
        return None
    lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
    if height > 0:
        per_px = (hi - lo) / height
        lo = min(lo, *(s[0] - s[2] * per_px for s in spans))
        hi = max(hi, *(s[1] + s[2] * per_px for s in spans))
    return lo, hi


def grown_span(shown: tuple[float, float], wanted: tuple[float, float]) -> tuple[float, float]:
    """The span a row shows while Play runs: ``shown`` while it holds ``wanted``, else ``wanted``
    widened by :data:`GROWTH` of its height on each side where it outgrew ``shown``."""
    lo, hi = wanted
    room = GROWTH * (hi - lo)
    return (lo - room if lo < shown[0] else shown[0], hi + room if hi > shown[1] else shown[1])


def time_span(shown: float, least: float, needed: float, step: float) -> float:
    """The time axis's span: ``shown`` while it holds ``needed`` ticks, else grown from it (from
    ``least`` where it is smaller) by factors of ``step`` until it does.

    Grown in steps, the axes are not laid out again on every op; while Play runs, when ops
    come by the hundred a second, by doubling (:data:`X_GROWTH_PLAYING`), so that the whole
    timeline is painted again seldom. It never shrinks but when the history goes back.
    """
    span = max(shown, least)
    while span < needed:
        span *= step
    return span


def _end_of(x: np.ndarray, y: np.ndarray, name: str) -> tuple[float, float, str] | None:
    """Where a series ends (its last finite point) and the name to put there."""
    finite = np.flatnonzero(np.isfinite(y))
    if not finite.size:
        return None
    j = int(finite[-1])
    return float(x[j]), float(y[j]), name


class TimelineView(QWidget):
    """Loss, gradient norm, run distance and op strip; emits ``scrubbed(tick)``."""

    scrubbed = Signal(float)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme: Theme = LIGHT
        self.info: LabInfo | None = None
        self._drawn: tuple[int, int] | None = None
        self._span = 0.0
        self._span_tick = -1  # the history's newest op when the span was last chosen
        # Axis ranges kept for good (an export's, over its whole range) instead of growing.
        self.fixed_ranges: dict[str, tuple[float, float]] | None = None
        self.title = QLabel("Timeline")
        self.title.setObjectName("panelTitle")
        self.legend = QLabel("")
        self.legend.setObjectName("status")
        self.legend.setWordWrap(True)
        self.legend.setMinimumWidth(100)
        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.setObjectName("timelinePlot")
        # Tight margins: the rows' own room for their tick labels matters more in a short timeline.
        self.graphics.ci.setContentsMargins(4, 4, 4, 4)
        self.graphics.ci.setSpacing(4)
        self.plots: dict[str, pg.PlotItem] = {}
        self.cursors: list[pg.InfiniteLine] = []
        self.row_labels: dict[str, pg.LabelItem] = {}
        for row, key in enumerate(ROWS):
            # Row names sit in their own column: rotated axis labels collide with ticks in short rows.
            label = self.graphics.addLabel(ROW_NAMES[key], row=row, col=0, justify="right")
            label.setFixedWidth(LABEL_WIDTH)
            self.row_labels[key] = label
            left = (
                LogAxis("left")
                if key in LOG_ROWS
                else BytesAxis("left")
                if key == "saved"
                else SparseAxis("left")
            )
            plot = self.graphics.addPlot(
                row=row,
                col=1,
                viewBox=ScrubViewBox(self.scrubbed.emit),
                axisItems={"left": left, "bottom": TickAxis()},
            )
            plot.setMenuEnabled(False)
            plot.hideButtons()
            plot.setClipToView(True)
            plot.setDownsampling(auto=True, mode="peak")
            plot.getAxis("left").setWidth(AXIS_WIDTH)
            # The values axis changes only with the range: painted from a pixmap while the curves
            # grow (as the bottom one is, see axes.py).
            plot.getAxis("left").setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
            if key != "ops":
                plot.getAxis("bottom").setStyle(showValues=False)
            if key != "loss":
                plot.setXLink(self.plots["loss"])
            cursor = pg.InfiniteLine(pos=-1, angle=90, pen=pg.mkPen("#888", width=2))
            cursor.setZValue(30)
            plot.addItem(cursor, ignoreBounds=True)
            self.cursors.append(cursor)
            self.plots[key] = plot
        # Each curve row's y range is set from the points it is handed (see fitted_span), before
        # it is painted: pyqtgraph's auto-range would move it during the paint and paint again.
        # The x range is the loss row's, set by draw, and the strip's y its runs.
        self._fitted: dict[str, tuple[float, float]] = {}
        # Whether Play runs (the ranges grow with room to spare) and, then, each log row's span
        # of positive values its floor band is placed by.
        self.growing = False
        self._positive: dict[str, tuple[float, float]] = {}
        for plot in self.plots.values():
            plot.disableAutoRange()
        for key in ROW_MIN_PX:
            self.plots[key].getViewBox().sigResized.connect(functools.partial(self._fit_row, key))
        for key, stretch in ROW_STRETCH.items():
            self.graphics.ci.layout.setRowStretchFactor(ROW_INDEX[key], stretch)
        # The strip keeps a fixed height: a readable band per run, whatever room the curves get.
        self.graphics.ci.layout.setRowStretchFactor(ROW_INDEX["ops"], 0)
        self._point_size = 10.0
        self.strip_image = pg.ImageItem()
        self.plots["ops"].addItem(self.strip_image)
        # Each op's letter on its cell of the strip, where cells are wide enough to hold one.
        self.strip_letters = Scatter(pxMode=True, pen=None, brush=pg.mkBrush("#000000"))
        self.strip_letters.setZValue(10)
        self.plots["ops"].addItem(self.strip_letters, ignoreBounds=True)
        self._letters_key: tuple[Any, ...] | None = None
        self.plots["ops"].getViewBox().sigRangeChanged.connect(self._draw_letters)
        self.plots["ops"].getViewBox().sigResized.connect(self._draw_letters)
        self._moment: Moment | None = None
        # Lines grow at their ends (GrowingLine); the walked row's markers are a PlotDataItem.
        self.curves: dict[str, list[GrowingLine | pg.PlotDataItem]] = {key: [] for key in ROW_MIN_PX}
        # What each curve draws, kept between frames so that new ops cost only themselves.
        self.lines: dict[str, list[PeakLine]] = {key: [] for key in ROW_MIN_PX}
        self.end_labels = {key: EndLabels(self.plots[key], joined=key != "nodes") for key in LABELLED_ROWS}
        # The floor band of each log row, shown where the row has a zero to draw.
        self.floor_bands: dict[str, pg.LinearRegionItem] = {}
        for key in LOG_ROWS:
            band = pg.LinearRegionItem(orientation="horizontal", movable=False)
            band.setZValue(-10)
            band.setVisible(False)
            self.plots[key].addItem(band, ignoreBounds=True)
            self.floor_bands[key] = band
        self.floors: dict[str, Floor | None] = dict.fromkeys(LOG_ROWS)
        # The footprint rows this lab fills.
        self.footprint_rows: tuple[str, ...] = ()
        self._strip_n = 0
        self._strip_k = 1  # ticks per column of the image shown
        self._strip_done = 0  # ticks already averaged into whole columns
        self._strip_means = np.zeros((0, 1, 4))
        # The last, partial column: its first tick, the tick it is summed up to, the sum of its colours.
        self._strip_part: tuple[int, int, Any] = (0, 0, 0.0)
        self._strip_rect = (0, 0)  # the ticks and runs the strip's image spans
        self.ends: list[Scatter] = []
        # What each curve and end cross was last handed: a row whose data did not change is not
        # handed it again (each hand-over makes pyqtgraph repaint the item).
        self._handed: dict[int, tuple[Any, ...]] = {}
        box = QVBoxLayout(self)
        box.setContentsMargins(4, 4, 4, 4)
        box.addWidget(self.title)
        box.addWidget(self.graphics, 1)
        box.addWidget(self.legend)
        self._size_rows()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_legend()

    def _fit_legend(self) -> None:
        """Ask for the legend's wrapped height, so the plots above never run under its text."""
        # A label's height for a width never goes below its minimum: measure without one.
        self.legend.setMinimumHeight(0)
        height = self.legend.heightForWidth(self.legend.width()) if self.legend.width() > 0 else -1
        if height > 0:
            self.legend.setMinimumHeight(height)

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
        floor = QColor(theme.muted)
        floor.setAlpha(40)
        for band in self.floor_bands.values():
            band.setBrush(pg.mkBrush(floor))
            top, bottom = sorted(band.lines, key=lambda line: line.value())[::-1]
            top.setPen(pg.mkPen(theme.muted, width=1, style=Qt.PenStyle.DashLine))
            bottom.setPen(pg.mkPen(None))
        self._style_end_labels()
        self._legend_text()

    def _style_end_labels(self) -> None:
        font = QFont()
        font.setPointSizeF(self._point_size * 0.85)
        for labels in self.end_labels.values():
            labels.set_style(font, self.theme.base)

    def _rows_shown(self) -> list[str]:
        """The curve rows this lab fills: the footprint's where its runs measure them, distance with two."""
        runs = len(self.info.runs) if self.info is not None else 1
        return [
            key
            for key in ROW_MIN_PX
            if (key != "distance" or runs > 1) and (key not in FOOTPRINT_ROWS or key in self.footprint_rows)
        ]

    def _size_rows(self) -> None:
        """Give each curve row room for two tick labels and the strip a fixed band per run."""
        scale = self._point_size / 10
        runs = max(len(self.info.runs), 1) if self.info is not None else 1
        layout = self.graphics.ci.layout
        shown = self._rows_shown()
        for key, least in ROW_MIN_PX.items():
            on = key in shown
            self.plots[key].getViewBox().setMinimumHeight(int(least * scale) if on else 0)
            # A hidden row still holds its place in a graphics layout: close it up.
            self.plots[key].setMaximumHeight(QWIDGETSIZE_MAX if on else 0)
            self.row_labels[key].setMaximumHeight(QWIDGETSIZE_MAX if on else 0)
            layout.setRowStretchFactor(ROW_INDEX[key], ROW_STRETCH[key] if on else 0)
        # Two bands at least, so that a single run's strip is not a sliver either.
        band = int(STRIP_ROW_PX * scale * max(runs, 2))
        # The op axis holds its numbers whole; the legend says what they count, which leaves
        # the room an axis title would take to the rows.
        op_axis = self.plots["ops"].getAxis("bottom")
        axis = QFontMetrics(op_axis.style["tickFont"] or QFont()).height() + 12
        op_axis.setHeight(axis)
        strip = self.plots["ops"]
        strip.getViewBox().setMinimumHeight(band)
        strip.getViewBox().setMaximumHeight(band)
        strip.setMinimumHeight(band + axis)
        strip.setMaximumHeight(band + axis)
        # Each curve plot is its view box plus two pixels of (hidden) bottom axis.
        rows = sum(int(ROW_MIN_PX[k] * scale) + 2 for k in shown)
        margins = layout.getContentsMargins()
        gaps = layout.verticalSpacing() * (len(ROWS) - 1)  # closed-up rows keep their spacing
        least = rows + band + axis + margins[1] + margins[3] + gaps
        self.graphics.setMinimumHeight(max(150, int(least) + 2))

    def set_point_size(self, size: float) -> None:
        self._point_size = size
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
        self.strip_letters.setSize(self._letter_px())
        self._letters_key = None
        self._style_end_labels()
        self._size_rows()
        self._legend_text()  # its wrapped height in the new type

    def set_lab(self, info: LabInfo) -> None:
        """Curves for each run of the new lab; the saved row where its runs measure what autograd
        saves, the distance row only with two or more runs."""
        from gradviz.engine.footprint import can_count_saved, lesson_reads, wanted

        self.info = info
        self._drawn = None
        self._span = 0.0
        self._span_tick = -1
        self.fixed_ranges = None
        measured = wanted(info.scenario)
        counted = any(can_count_saved(r.spec.loop.order) for r in info.runs)
        self.footprint_rows = tuple(
            key
            for key, on in (("saved", counted), ("nodes", "nodes" in lesson_reads(info.scenario.lesson)))
            if measured and on
        )
        self._fitted.clear()
        for key, curves in self.curves.items():
            for c in curves:
                self.plots[key].removeItem(c)
            curves.clear()
            self.lines[key].clear()
        self._strip_n = 0
        self._strip_k = 1
        self._strip_rect = (0, 0)
        self._letters_key = None
        self._moment = None  # a moment of the lab before
        self.strip_letters.setData([], [])
        for e in self.ends:
            self.plots["loss"].removeItem(e)
        self.ends = []
        self._handed.clear()
        values = {"loss": log10_or_zero, "grad": log10_or_zero, "saved": saved_bytes, "nodes": nodes_walked}
        for i, run in enumerate(info.runs):
            colour = QColor(run_color(i))
            for key in ("loss", "grad", "saved", "nodes"):
                pen = pg.mkPen(colour, width=2, style=run_dash(i))
                # A backward's nodes are a count per call: markers, with nothing between two calls.
                curve = (
                    pg.PlotDataItem(
                        pen=None, symbol=run_symbol(i), symbolBrush=colour, symbolPen=pen, name=run.name
                    )
                    if key == "nodes"
                    else GrowingLine(pen, connect="finite", name=run.name)
                )
                self.plots[key].addItem(curve)
                self.curves[key].append(curve)
                self.lines[key].append(PeakLine(values[key]))
            end = Scatter(size=14, symbol="x", pen=pg.mkPen(colour, width=2), brush=colour)
            self.plots["loss"].addItem(end)
            self.ends.append(end)
        for labels in self.end_labels.values():
            labels.set_runs([QColor(run_color(i)) for i in range(len(info.runs))])
        for i in range(1, len(info.runs)):
            curve = GrowingLine(pg.mkPen(QColor(run_color(i)), width=2, style=run_dash(i)), connect="finite")
            self.plots["distance"].addItem(curve)
            self.curves["distance"].append(curve)
            # Linear: identical runs sit at a visible 0 instead of vanishing from a log axis.
            self.lines["distance"].append(PeakLine(_finite_or_gap))
        first = info.runs[0].name
        others = ", ".join(r.name for r in info.runs[1:])
        for key, on in (
            ("distance", len(info.runs) > 1),
            *((k, k in self.footprint_rows) for k in FOOTPRINT_ROWS),
        ):
            self.plots[key].setVisible(on)
            self.row_labels[key].setVisible(on)
        self.plots["distance"].setToolTip(f"‖θ(run) − θ({first})‖ for {others}")
        self.plots["saved"].setToolTip("Bytes of tensors autograd holds saved for backward after each op")
        self.plots["nodes"].setToolTip("Autograd nodes each backward() walked")
        strip = self.plots["ops"]
        strip.getAxis("left").setTicks([[]])
        strip.setYRange(0, len(info.runs), padding=0)
        order = " / ".join(r.name for r in info.runs)
        strip.setToolTip(f"One row per run, top to bottom: {order}")
        self._size_rows()
        self._legend_text()

    def _legend_text(self) -> None:
        if self.info is None:
            return
        # Rich text folds runs of spaces into one: the gaps between entries are no-break
        # spaces, each followed by one plain space where a narrow panel may wrap. Each
        # entry stays on one line.
        gap = "&nbsp;&nbsp; "
        bar = f"&nbsp;&nbsp;<span style='color:{self.theme.muted}'>│</span> "

        def entry(html: str) -> str:
            return f"<span style='white-space:nowrap'>{html}</span>"

        kinds = loss_kinds(self.info)
        runs = gap.join(
            entry(
                f"<span style='color:{run_color(i)}'>{run_glyph(i)} {r.name}</span>"
                + (f" (loss {kinds[i]})" if kinds[i] else "")
            )
            for i, r in enumerate(self.info.runs)
        )
        ops = gap.join(
            entry(f"<span style='color:{OP_COLORS[op]}'>■</span> {OP_LETTERS[op]} {op}") for op in OPS
        )
        groups = [runs, entry("op strip by tick, a row per run:") + " " + ops]
        if "saved" in self.footprint_rows:
            groups.append(entry("saved: bytes held for backward"))
        if "nodes" in self.footprint_rows:
            groups.append(entry("walked: nodes per backward()"))
        if len(self.info.runs) > 1:
            first = self.info.runs[0].name
            groups.append(entry(f"distance: ‖θ − θ<sub>{first}</sub>‖"))
        self.legend.setText(bar.join(groups))
        self._fit_legend()

    # ------------------------------------------------------------- ranges
    def ranges_for(self, moment: Moment) -> dict[str, tuple[float, float]]:
        """The axis ranges that hold everything the window's history has up to ``moment``.

        ``"x"`` spans the ticks; ``"loss"``, ``"grad"`` (log10, down to the floor band
        where a zero is drawn), ``"saved"`` and ``"distance"`` span each row's finite
        values over every run; ``"loss:zero"`` and ``"grad:zero"`` are the positive
        spans a floor band is placed under. A row with nothing to draw is left out.
        """
        info = self.info
        assert info is not None
        history = moment.history
        out = {"x": (-0.5, float(max(moment.tick, 0)) + 1.5)}
        parts: dict[str, list[np.ndarray]] = {"loss": [], "grad": [], "saved": [], "nodes": []}
        for run in info.runs:
            rt = history.runs[run.name]
            n = rt.index_at(moment.tick) + 1
            parts["loss"].append(log10_or_zero(rt.loss[:n]))
            parts["grad"].append(log10_or_zero(rt.grad_norm[:n]))
            for key, read in (("saved", saved_bytes), ("nodes", nodes_walked)):
                if key in self.footprint_rows:
                    parts[key].append(read(rt.records[:n]))
        for key in LOG_ROWS:
            span, floor = log_row_range(np.concatenate(parts[key]))
            if span is not None:
                out[key] = (floor.bottom, span[1]) if floor is not None else span
                if floor is not None:
                    out[f"{key}:zero"] = span
        n = history.distance_ticks.count_at_most(moment.tick)
        distance = [np.asarray(column[:n], dtype=np.float64) for column in history.distance]
        for key, linear in (("saved", parts["saved"]), ("nodes", parts["nodes"]), ("distance", distance)):
            values = np.concatenate(linear) if linear else np.zeros(0)
            values = values[np.isfinite(values)]
            if values.size:
                # Identical runs and freed graphs sit on a visible 0.
                lo, hi = min(float(values.min()), 0.0), float(values.max())
                if hi - lo < 1e-9:
                    lo, hi = lo - 0.5, hi + 0.5
                if key == "nodes":
                    hi += (hi - lo) * 0.15  # room for the highest count's whole marker
                out[key] = (lo, hi)
        return out

    def fix_ranges(self, ranges: dict[str, tuple[float, float]]) -> None:
        """Keep the axes at ``ranges`` (see :meth:`ranges_for`) from now on, however the curves grow.

        An export fixes them over its whole range, so no frame rescales; the window
        leaves them to grow with the runs.
        """
        self.fixed_ranges = dict(ranges)
        lo, hi = ranges["x"]
        self._span = hi
        self.plots["loss"].setXRange(lo, hi, padding=0.01)
        for key in ROW_MIN_PX:
            if key in ranges:
                self.plots[key].setYRange(*ranges[key], padding=0.08)
            else:
                self.plots[key].enableAutoRange(y=True)

    # --------------------------------------------------------------- draw
    def draw(self, moment: Moment) -> None:
        """Curves up to the newest op (to ``moment`` where it hides the future); the cursor at ``moment``."""
        info = self.info
        if info is None:
            return
        history = moment.history
        for plot, c in zip(self.plots.values(), self.cursors, strict=True):
            if plot.isVisible() or not self.isVisible():  # a row shown later is drawn again then
                c.setValue(moment.tick + 0.5 if moment.tick >= 0 else -0.5)
        total = sum(len(rt) for rt in history.runs.values())
        drawn = (total, moment.horizon)
        self._moment = moment
        if drawn != self._drawn:
            self._drawn = drawn
            self._draw_curves(moment)
        if self.fixed_ranges is None:
            least = float(info.ticks_per_iteration * min(4, max(info.scenario.iterations, 1)))
            # A history that went back (Reset) starts again from the least span.
            shown = self._span if history.last_tick >= self._span_tick else 0.0
            self._span_tick = history.last_tick
            step = X_GROWTH_PLAYING if self.growing else X_GROWTH
            span = time_span(shown, least, history.last_tick + 2, step)
            if span != self._span:
                self._span = span
                self.plots["loss"].setXRange(-0.5, span, padding=0.01)
        # The rows' new ranges reach their items now rather than as Qt begins the paint, where
        # the items they move would ask for a second paint of the whole timeline.
        scene = self.graphics.scene()
        if scene is not None:
            scene.prepareForPaint()

    def _draw_curves(self, moment: Moment) -> None:
        info = self.info
        assert info is not None
        history = moment.history
        horizon = moment.horizon
        keys = (*LOG_ROWS, *self.footprint_rows)
        points: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {key: [] for key in keys}
        for i, run in enumerate(info.runs):
            rt = history.runs[run.name]
            n = rt.index_at(horizon) + 1
            columns = {"loss": rt.loss, "grad": rt.grad_norm, "saved": rt.records, "nodes": rt.records}
            for key in keys:
                points[key].append(self.lines[key][i].update(rt.ticks, columns[key], n))
            end = _last_finite(rt.loss, n) if n and rt.statuses[n - 1] != "running" else None
            cross = (rt.ticks[end] + 0.5, float(np.log10(rt.loss[end]))) if end is not None else ()
            self._hand(self.ends[i], np.array(cross[:1]), np.array(cross[1:]))
            self.ends[i].setVisible(bool(cross))  # an empty scatter still costs its paint
        for key in LOG_ROWS:
            points[key] = self._on_floor(key, points[key])
        kinds = loss_kinds(info)
        for key in keys:
            ends: list[tuple[float, float, str] | None] = []
            for i, (x, y) in enumerate(points[key]):
                if key == "nodes":  # markers only: the backward() calls
                    x, y = x[np.isfinite(y)], y[np.isfinite(y)]
                self._hand(self.curves[key][i], x, y)
                name = info.runs[i].name
                if key == "loss" and kinds[i]:
                    name += f": {kinds[i]}"
                elif key == "saved":
                    peak = iteration_peak(moment, info.runs[i].name)
                    name += f" · peak {peak:,} B" if peak is not None else ""
                at = _end_of(x, y, name)
                if key == "nodes" and at is not None:
                    at = (at[0], at[1], f"{name} · {at[1]:,.0f} nodes")
                ends.append(at)
            self.end_labels[key].set_ends(ends, [self._handed[id(c)][:2] for c in self.curves[key]])
        shown = history.distance_ticks.count_at_most(horizon)
        for curve, line, column in zip(
            self.curves["distance"], self.lines["distance"], history.distance, strict=True
        ):
            self._hand(curve, *line.update(history.distance_ticks, column, shown))
        for key in ROW_MIN_PX:
            self._fit_row(key)
        self._draw_strip(moment)

    def set_growing(self, on: bool) -> None:
        """While ``on`` (Play runs) the rows' ranges grow with room to spare (:func:`grown_span`) and
        the end labels take the nearest free place; turned off, each row fits its points again at
        once and its labels go where they hide the least."""
        self.growing = on
        self._positive.clear()
        for labels in self.end_labels.values():
            labels.weigh = not on
        if not on and self._moment is not None:
            self._drawn = None  # the floor bands too are placed for the points alone
            self.draw(self._moment)

    def _fit_row(self, key: str, *_: Any) -> None:
        """Set curve row ``key``'s y range to hold what it was handed (unless an export fixed it)."""
        if self.fixed_ranges is not None or not self.plots[key].isVisible():
            return
        spans = []
        for item in (*self.curves[key], *(self.ends if key == "loss" else ())):
            handed = self._handed.get(id(item))
            y = handed[1][np.isfinite(handed[1])] if handed is not None else np.zeros(0)
            if y.size:
                spans.append((float(y.min()), float(y.max()), float(item.pixelPadding())))
        span = fitted_span(spans, self.plots[key].getViewBox().height())
        if span is not None and self.growing and key in self._fitted:
            span = grown_span(self._fitted[key], span)
        if span is not None and span != self._fitted.get(key):
            self._fitted[key] = span
            self.plots[key].setYRange(*span)

    def _hand(self, item: GrowingLine | pg.PlotDataItem | Scatter, x: np.ndarray, y: np.ndarray) -> None:
        """Give ``item`` the points ``x``, ``y`` unless they are the ones it already draws."""
        was = self._handed.get(id(item))
        if was is not None and np.array_equal(was[0], x) and np.array_equal(was[1], y, equal_nan=True):
            return
        self._handed[id(item)] = (x, y)
        item.setData(x, y)

    def _on_floor(
        self, key: str, points: list[tuple[np.ndarray, np.ndarray]]
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Log row ``key``'s points with each zero (-inf) moved onto its floor band, shown where needed."""
        fixed = self.fixed_ranges
        if fixed is not None:
            span = fixed.get(f"{key}:zero")
            floor = floor_below(*span) if span is not None else None
        else:
            span, floor = log_row_range(np.concatenate([y for _, y in points]) if points else np.zeros(0))
            if floor is not None and span is not None and self.growing:
                # The band moves only when the positive values outgrow the room kept for them.
                span = self._positive[key] = grown_span(self._positive.get(key, span), span)
                floor = floor_below(*span, alone=floor.alone)
        self.floors[key] = floor
        axis = self.plots[key].getAxis("left")
        if axis.floor != floor:
            axis.floor = floor
            axis.picture = None  # its labels change with the band
            axis.update()
        band = self.floor_bands[key]
        band.setVisible(floor is not None)
        if floor is None:
            return points
        band.setRegion((floor.bottom - 10 * (floor.top - floor.bottom), floor.top))  # past the row's bottom
        return [(x, np.where(np.isneginf(y), floor.level, y)) for x, y in points]

    def drawn_points(self) -> int:
        """How many points the curves were last handed, over every row and run."""
        return sum(line.drawn for lines in self.lines.values() for line in lines)

    def _draw_strip(self, moment: Moment) -> None:
        """The op strip as an image, a column per tick (or the mean colour of a few): only the
        columns of new ticks are made, from the ops the window's history foretells."""
        info = self.info
        assert info is not None
        runs = len(info.runs)
        n = max(moment.horizon + 1, 1)
        if n < self._strip_n:  # further back than drawn (a hidden future): made again
            self._strip_done = n + 1
        self._strip_n = n
        codes = functools.partial(op_codes, moment.history, [r.name for r in info.runs], moment.horizon)
        self.strip_image.setImage(self._strip_columns(n, codes), levels=(0, 255), autoLevels=False)
        if self._strip_rect != (n, runs):
            self._strip_rect = (n, runs)
            self.strip_image.setRect(0, 0, n, runs)
        self._draw_letters()

    def _letter_px(self) -> float:
        """The op letters' height in pixels: most of a run's band of the strip."""
        return STRIP_ROW_PX * self._point_size / 10 * 0.75

    def _draw_letters(self, *_: Any) -> None:
        """Each op in view gets its letter on its cell (so the strip does not rest on colour alone),
        where a cell is wide enough to hold one; where ops are denser, none."""
        moment, info = self._moment, self.info
        if moment is None or info is None:
            return
        box = self.plots["ops"].getViewBox()
        (x0, x1), _ = box.viewRange()
        width = box.width()
        key = (x0, x1, width, moment.horizon, sum(len(rt) for rt in moment.history.runs.values()))
        if key == self._letters_key:
            return
        self._letters_key = key
        if width <= 0 or x1 <= x0 or width / (x1 - x0) < self._letter_px() * LETTER_ROOM:
            if self.strip_letters.isVisible():  # handing it nothing again costs a redraw
                self.strip_letters.setData([], [])
                self.strip_letters.setVisible(False)
            return
        xs: list[float] = []
        ys: list[float] = []
        symbols: list[QPainterPath] = []
        runs = len(info.runs)
        for r, run in enumerate(info.runs):
            rt = moment.history.runs[run.name]
            first = bisect.bisect_left(rt.ticks, int(np.floor(x0)))
            last = rt.index_at(min(int(np.ceil(x1)), moment.horizon)) + 1
            for j in range(first, last):
                xs.append(rt.ticks[j] + 0.5)
                ys.append(runs - 1 - r + 0.5)  # row 0 at the top, as in the image
                symbols.append(letter_symbol(OP_LETTERS[rt.ops[j]]))
        self.strip_letters.setData(x=xs, y=ys, symbol=symbols, size=self._letter_px())
        self.strip_letters.setVisible(bool(xs))

    def _strip_columns(self, n: int, codes: Callable[[int, int], np.ndarray]) -> np.ndarray:
        """The strip's first ``n`` ticks as at most :data:`STRIP_COLUMNS` columns (means of ``k``
        ticks), from ``codes(start, stop)``, the codes of those ticks (see :func:`op_codes`).

        Only the ticks since the last call are read: whole columns are kept, and where ``k``
        doubles, each new column is the mean of two kept ones; the last, partial column is
        summed as its ticks come.
        """
        k = 1
        while n > k * STRIP_COLUMNS:
            k *= 2
        if k == 1:
            return _STRIP_RGBA[codes(0, n)]
        if self._strip_k == 1 or self._strip_k > k or self._strip_done > n:  # a new lab, or gone back
            self._strip_k, self._strip_done, self._strip_part = k, 0, (0, 0, 0.0)
            self._strip_means = np.zeros((0, codes(0, 0).shape[1], 4))
        while self._strip_k < k:
            kept = self._strip_means
            pairs = len(kept) // 2
            self._strip_means = (kept[: 2 * pairs : 2] + kept[1 : 2 * pairs : 2]) / 2
            self._strip_k *= 2
            self._strip_done = pairs * self._strip_k
        full = n // k * k
        if full > self._strip_done:
            # In blocks of whole columns, so the colours of a long history are never all made at once.
            step = max(STRIP_BLOCK // k, 1) * k
            means = [self._strip_means]
            for at in range(self._strip_done, full, step):
                block = _STRIP_RGBA[codes(at, min(at + step, full))]
                means.append(block.reshape(-1, k, *block.shape[1:]).mean(axis=1))
            self._strip_means = np.concatenate(means)
            self._strip_done = full
        columns = self._strip_means
        if full < n:
            start, summed, total = self._strip_part
            if start != full or summed > n:
                start, summed, total = full, full, 0.0
            total = total + _STRIP_RGBA[codes(summed, n)].sum(axis=0, dtype=np.float64)
            self._strip_part = (full, n, total)
            columns = np.concatenate((columns, (total / (n - full))[None]))
        return columns.astype(np.ubyte)


def op_codes(history: WindowHistory, runs: Sequence[str], horizon: int, start: int, stop: int) -> np.ndarray:
    """The op strip from tick ``start`` up to ``stop`` (none past ``horizon``): a byte per tick and
    run, 0 where the run had no op, else 1 + the op's index in :data:`OPS`; the first run in the
    last column (row 0 is drawn at the top).

    Made from the runs' ops as the window's history foretells them from the schedule, so a
    long Play's strip costs no memory per tick.
    """
    codes = np.zeros((max(stop - start, 0), len(runs)), dtype=np.ubyte)
    for r, name in enumerate(runs):
        rt = history.runs[name]
        first, last = rt.index_at(start - 1) + 1, rt.index_at(min(stop - 1, horizon)) + 1
        if last <= first:
            continue
        at = np.asarray(rt.ticks[first:last]) - start
        for code, op in enumerate(OPS, 1):
            codes[at[rt.ops.indices(op, first, last) - first], len(runs) - 1 - r] = code
    return codes


# A strip code's colour: 0 (no op at that tick) is clear, 1 + i the colour of OPS[i].
_STRIP_RGBA = np.array(
    [
        (0, 0, 0, 0),
        *(
            (QColor(OP_COLORS[op]).red(), QColor(OP_COLORS[op]).green(), QColor(OP_COLORS[op]).blue(), 255)
            for op in OPS
        ),
    ],
    dtype=np.ubyte,
)


def _finite_or_gap(values: Any) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64)
    return np.where(np.isfinite(a), a, np.nan)


def _last_finite(values: Sequence[float], n: int) -> int | None:
    """The index of the last finite positive value among the first ``n`` (where a diverged run ends)."""
    for j in range(n - 1, -1, -1):
        v = values[j]
        if v > 0 and np.isfinite(v):
            return j
    return None
