"""Play at the screen's rate: never more redraws than the screen shows, each with the newest op,
and a timeline whose drawing costs no more for a long history than for a short one."""

from __future__ import annotations

import itertools
import time
from dataclasses import replace

import numpy as np
import pytest
from PySide6.QtCore import QTimer

from gradviz.gui.views.timeline import CURVE_BUCKETS, PeakLine, log10_positive


class CountingList(list):
    """A list that counts the elements read through slices (what an update costs)."""

    read = 0

    def __getitem__(self, index):  # type: ignore[override]
        out = super().__getitem__(index)
        if isinstance(index, slice):
            CountingList.read += len(out)
        return out


def _long(name: str = "forgot-zero-grad"):
    """A built-in scenario with room to play for a while."""
    from gradviz.engine import load_scenario

    return replace(load_scenario(name), iterations=100_000)


def _series(n: int, seed: int = 0) -> tuple[list[int], list[float]]:
    rng = np.random.default_rng(seed)
    return list(range(n)), list(np.exp(rng.standard_normal(n)))


@pytest.mark.parametrize("n", [2_000, 50_000, 500_000])
def test_a_long_history_hands_the_plot_no_more_points_than_a_short_one(n: int) -> None:
    ticks, values = _series(n)
    line = PeakLine(log10_positive)
    x, y = line.update(ticks, values, n)
    # Two points a bucket (up to six where it holds a gap), plus the unbucketed tail.
    assert len(x) == line.drawn <= 6 * CURVE_BUCKETS + line.k
    assert line.drawn >= min(n, CURVE_BUCKETS)
    # The highest and lowest values are drawn, at their own ticks: spikes stay in sight.
    logs = log10_positive(values)
    assert np.nanmax(y) == pytest.approx(np.nanmax(logs))
    assert np.nanmin(y) == pytest.approx(np.nanmin(logs))
    top = int(np.nanargmax(logs))
    assert ticks[top] + 0.5 in set(x[y == np.nanmax(y)])


def test_few_points_are_drawn_exactly_as_recorded() -> None:
    ticks, values = _series(CURVE_BUCKETS - 1)
    values[10] = 0.0  # a zero .grad: a gap on the log axis
    x, y = PeakLine(log10_positive).update(ticks, values, len(ticks))
    assert np.array_equal(x, np.asarray(ticks) + 0.5)
    assert np.array_equal(y, log10_positive(values), equal_nan=True)


def test_a_gap_stays_a_gap_when_points_are_bucketed() -> None:
    ticks, values = _series(40_000)
    values[20_000:25_000] = [0.0] * 5_000  # .grad zero for a while: nothing on a log axis
    line = PeakLine(log10_positive)
    x, y = line.update(ticks, values, len(ticks))
    inside = (x > 20_000 + line.k) & (x < 25_000 - line.k)
    assert np.all(np.isnan(y[inside]))
    # The line stops at the gap and starts again after it: a NaN at each edge.
    gaps = x[np.isnan(y)]
    assert np.any(np.abs(gaps - 20_000) <= line.k) and np.any(np.abs(gaps - 25_000) <= line.k)


def test_short_stretches_between_gaps_are_still_drawn() -> None:
    # A reference run's .grad: zero after zero_grad, then the same norm twice (backward, step).
    ticks = list(range(40_000))
    values = [0.0, 0.0, 1.0, 1.0] * 10_000
    x, y = PeakLine(log10_positive).update(ticks, values, len(ticks))
    finite = np.isfinite(y)
    # Somewhere two finite points follow each other: a stroke is drawn, not only lone points.
    assert np.any(finite[1:] & finite[:-1] & (x[1:] > x[:-1]))


def test_appending_reads_each_new_point_a_bounded_number_of_times() -> None:
    ticks, values = _series(60_000)
    ticks_c, values_c = CountingList(ticks), CountingList(values)
    line = PeakLine(log10_positive)
    CountingList.read = 0
    n = 0
    while n < len(ticks):
        n = min(n + 37, len(ticks))  # a frame's worth of ops at a time
        line.update(ticks_c, values_c, n)
    # Rebuilding after each doubling re-reads the history: on average a few reads per point,
    # where redrawing the whole history every frame would read it about 800 times.
    assert CountingList.read < 12 * len(ticks)


def test_the_timeline_draws_every_op_of_a_short_play(open_window, qtbot) -> None:
    w = open_window(_long())
    c = w.controller
    c.set_speed(0)
    c.play_until(299)  # fewer ops than a curve has buckets
    qtbot.waitUntil(lambda: not c.playing and not c.busy, timeout=30000)
    assert c.history.last_tick == 299
    w.redraw()
    for i, run in enumerate(c.info.runs):
        rt = c.history.runs[run.name]
        x, y = w.timeline.curves["loss"][i].getData()
        assert np.array_equal(x, np.asarray(rt.ticks, dtype=np.float64) + 0.5)
        assert np.array_equal(y, log10_positive(rt.loss), equal_nan=True)


def test_the_timeline_hands_its_curves_no_more_points_after_50000_ops_than_after_2000(
    open_window, qtbot
) -> None:
    """What a frame of the timeline strokes is counted, not timed: a long history costs no more."""
    w = open_window(_long())
    c = w.controller
    drawn = {}
    for ops in (2_000, 50_000):
        c.open(_long(), replay_iterations=ops // 4)
        qtbot.waitUntil(lambda ops=ops: not c.busy and c.history.last_tick >= ops - 1, timeout=120000)
        w.redraw()
        drawn[ops] = w.timeline.drawn_points()
    assert drawn[2_000] > CURVE_BUCKETS
    assert drawn[50_000] <= 1.1 * drawn[2_000], drawn


def _play_for(qtbot, window, seconds: float, speed: int | None) -> list[tuple[int, int]]:
    """Play for ``seconds`` at ``speed`` (None: paused); each frame's (cursor, newest tick)."""
    c = window.controller
    frames: list[tuple[int, int]] = []

    def drawn() -> None:
        frames.append((c.cursor, c.history.last_tick))

    window.frame_drawn.connect(drawn)
    # Redraws asked for far more often than the screen could show them.
    asking = QTimer()
    asking.timeout.connect(window.schedule_redraw)
    asking.start(1)
    if speed is not None:
        c.set_speed(speed)
        c.play()
    qtbot.wait(int(seconds * 1000))
    c.pause()
    asking.stop()
    window.frame_drawn.disconnect(drawn)
    return frames


@pytest.mark.parametrize("speed", [0, 30, 4, None])
def test_redraws_never_outpace_the_screen_whatever_the_speed(open_window, qtbot, speed: int | None) -> None:
    w = open_window(_long())
    seconds = 1.5
    starts: list[float] = []
    # Each redraw's start: it ends as frame_drawn is emitted, having taken draw_seconds.
    w.frame_drawn.connect(lambda: starts.append(time.perf_counter() - w.draw_seconds))
    began = time.perf_counter()
    frames = _play_for(qtbot, w, seconds, speed)
    spent = time.perf_counter() - began  # a little over ``seconds``: the wait ends at an event
    assert frames, "Play drew frames"
    interval = w.frame_interval
    assert len(frames) <= spent / interval + 2
    # However often redraws are asked for, no stretch of time holds more of them than it holds
    # frames of the screen, give or take one: they keep to the screen's rate, in bursts never.
    for i, j in itertools.combinations(range(len(starts)), 2):
        assert j - i <= (starts[j] - starts[i]) / interval + 1, f"redraws {i} to {j} outpace the screen"


def test_full_speed_frames_show_the_newest_op_and_skip_the_ones_between(open_window, qtbot) -> None:
    w = open_window(_long())
    frames = _play_for(qtbot, w, 2.0, 0)
    assert all(cursor == newest for cursor, newest in frames), "every frame shows the newest op"
    ticks = [cursor for cursor, _ in frames]
    assert ticks == sorted(ticks)
    # Ops between two frames are performed but not drawn one by one.
    assert ticks[-1] - ticks[0] > 2 * len(frames)


def test_the_op_strip_shows_no_more_columns_for_a_long_history(qtbot) -> None:
    from gradviz.gui.views.timeline import _STRIP_RGBA, OPS, STRIP_COLUMNS, TimelineView

    view = TimelineView()
    qtbot.addWidget(view)
    rng = np.random.default_rng(0)
    codes = rng.integers(0, len(OPS) + 1, size=(130_000, 2), dtype=np.ubyte)
    read = []

    def codes_of(start: int, stop: int) -> np.ndarray:
        read.append(stop - start)
        return codes[start:stop]

    short, long = view._strip_columns(2_000, codes_of), view._strip_columns(50_000, codes_of)
    assert len(short) == 2_000, "a tick per column while they fit"
    assert STRIP_COLUMNS // 2 <= len(long) <= STRIP_COLUMNS + 1
    # A column is the mean colour of the ticks it stands for.
    k = view._strip_k
    assert np.allclose(long[0], _STRIP_RGBA[codes[:k]].mean(axis=0), atol=1)
    assert np.array_equal(short, _STRIP_RGBA[codes[:2_000]])
    read.clear()
    view._strip_columns(50_100, codes_of)
    assert sum(read) <= 100 + k, "one more frame reads its new ticks (and the column they complete)"
    # Past twice as many ticks each column stands for twice as many: the ticks read before are not
    # read again, but for a column's as it completes.
    read.clear()
    for n in range(50_100, 120_001, 700):
        drawn = view._strip_columns(n, codes_of)
    assert view._strip_k == 2 * k and sum(read) <= 2 * (120_000 - 50_100)
    full = n // (2 * k) * (2 * k)
    whole = _STRIP_RGBA[codes[:full]].reshape(-1, 2 * k, 2, 4).mean(axis=1)
    assert np.allclose(drawn[: len(whole)], whole, atol=1)
    assert np.allclose(drawn[-1], _STRIP_RGBA[codes[full:n]].mean(axis=0), atol=1), "the partial column"


def _bowl() -> np.ndarray:
    xs = np.linspace(-2.0, 2.0, 121)
    x, y = np.meshgrid(xs, xs, indexing="ij")
    return np.log10(1.0 + x**2 + 3.0 * y**2 + np.sin(3.0 * x))


def _painted_path(path) -> np.ndarray:
    """The pixels a thin pen paints for ``path`` over a 121 x 121 image, four pixels to one."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QImage, QPainter, QPen

    image = QImage(484, 484, QImage.Format.Format_Grayscale8)
    image.fill(0)
    painter = QPainter(image)
    painter.scale(4, 4)
    pen = QPen(Qt.GlobalColor.white)
    pen.setWidthF(0.25)
    painter.setPen(pen)
    painter.drawPath(path)
    painter.end()
    return np.frombuffer(image.constBits(), dtype=np.uint8).reshape(484, image.bytesPerLine())[:, :484] > 0


@pytest.mark.parametrize("share", [0.1, 0.5, 0.9])
def test_contour_lines_lie_where_pyqtgraphs_isocurve_draws_them(qapp, share: float) -> None:
    import pyqtgraph as pg

    from gradviz.gui.views.surface import contour_path

    z = _bowl()
    level = float(z.min() + share * (z.max() - z.min()))
    ours = _painted_path(contour_path(z, level))
    theirs = pg.QtGui.QPainterPath()
    for line in pg.functions.isocurve(z, level, connected=True, extendToEdge=True):
        theirs.moveTo(*line[0])
        for point in line[1:]:
            theirs.lineTo(*point)
    reference = _painted_path(theirs)
    assert ours.sum() > 100, "a line is drawn"
    assert np.array_equal(ours, reference)


def test_the_surface_traces_its_contours_once_per_grid_not_per_frame(open_window, qtbot, monkeypatch) -> None:
    import gradviz.gui.views.surface as surface
    from gradviz.gui.surface_state import CONTOURS

    traced = []
    monkeypatch.setattr(surface, "contour_path", lambda *a: traced.append(a) or surface.QPainterPath())
    w = open_window(_long())
    grids = []
    w.surface.surface_changed.connect(lambda: grids.append(w.surface.state.version))
    traced.clear()  # opening may draw a grid or two; counted from here, one drawn but not yet traced
    frames = _play_for(qtbot, w, 1.5, 0)
    qtbot.wait(50)
    assert len(frames) > 10
    assert len(traced) <= CONTOURS * (len(grids) + 1), f"{len(traced)} lines traced for {len(grids)} grids"


def test_the_inspector_measures_its_columns_only_when_their_room_changes(open_window, qtbot) -> None:
    from gradviz.gui.window_history import Moment

    w = open_window(_long())
    c = w.controller
    c.set_speed(0)
    c.play_until(599)
    qtbot.waitUntil(lambda: not c.playing and not c.busy, timeout=60000)
    view, table = w.grads, w.grads.table
    fits = []
    measure = view._fit
    view._fit = lambda: (fits.append(1), measure())[1]  # type: ignore[method-assign]

    def widths() -> list[int]:
        return [table.columnWidth(col) for col in range(table.columnCount())]

    changed = 0
    for tick in range(400, 600):  # frame after frame of Play: the numbers change with every op
        before = [table.item(r, 2).text() for r in range(table.rowCount())]
        view.draw(Moment(c.info, c.history, tick))
        changed += before != [table.item(r, 2).text() for r in range(table.rowCount())]
        if tick % 25 == 0:
            # What was left is what measuring everything afresh gives: no column too narrow for its text.
            kept = widths()
            view._layout_key = None
            measure()
            assert widths() == kept, f"at tick {tick}"
    assert changed >= 50, "the numbers shown change from op to op"
    # Here the reference run's .grad goes None and back each iteration (set_to_none), which does
    # change a column's room; the other ops leave the widths as they are, unmeasured.
    assert len(fits) <= 0.6 * 200, f"{len(fits)} measurements over 200 frames"


class Handed:
    """Counts, per item, the points and texts the timeline hands to pyqtgraph (what makes it repaint)."""

    def __init__(self, monkeypatch) -> None:
        import pyqtgraph as pg

        from gradviz.gui.views.growing import GrowingLine

        self.calls: list[object] = []
        for cls, name in (
            (pg.PlotDataItem, "setData"),
            (GrowingLine, "setData"),
            (pg.ScatterPlotItem, "setData"),
            (pg.TextItem, "setPos"),
            (pg.ScatterPlotItem, "setPos"),
            (pg.TextItem, "setHtml"),
        ):
            monkeypatch.setattr(cls, name, self._counting(getattr(cls, name)))

    def _counting(self, call):
        def counted(item, *args, **kwargs):
            self.calls.append(item)
            return call(item, *args, **kwargs)

        return counted

    def of(self, items) -> int:
        return sum(1 for item in self.calls if any(item is i for i in items))

    def in_scene(self, scene) -> list[object]:
        """The items handed something that ``scene`` holds."""
        return [item for item in self.calls if item.scene() is scene]


def _now(window):
    from gradviz.gui.window_history import Moment

    c = window.controller
    return Moment(c.info, c.history, c.history.last_tick)


def test_a_frame_that_changes_nothing_hands_the_timeline_nothing(open_window, qtbot, monkeypatch) -> None:
    from gui_helpers import press, settle
    from PySide6.QtCore import Qt

    w = open_window()
    press(qtbot, w, Qt.Key.Key_Right, 9)
    settle(qtbot, w)
    tl = w.timeline
    handed = Handed(monkeypatch)
    tl._drawn = None  # draw every row again, as a frame with a new op would
    tl.draw(_now(w))
    settle(qtbot, w)
    assert handed.in_scene(tl.graphics.scene()) == [], "no curve, marker or name is handed what it shows"


def test_a_new_op_hands_only_the_rows_it_changes(open_window, qtbot, monkeypatch) -> None:
    from gui_helpers import press, settle
    from PySide6.QtCore import Qt

    w = open_window("rnn-tbptt")  # its walked row changes only at a backward()
    tl, c = w.timeline, w.controller
    press(qtbot, w, Qt.Key.Key_Right, 7)
    settle(qtbot, w)
    checked = 0
    for _ in range(12):
        span = tl.plots["nodes"].getViewBox().viewRange()
        status = [c.history.runs[r.name].statuses[-1] for r in c.info.runs]
        handed = Handed(monkeypatch)
        press(qtbot, w, Qt.Key.Key_Right, 1)
        settle(qtbot, w)
        running = [i for i, r in enumerate(c.info.runs) if c.history.runs[r.name].statuses[-1] == "running"]
        newest = {c.history.runs[c.info.runs[i].name].ops[-1] for i in running}
        assert running and all(handed.of([tl.curves["loss"][i]]) == 1 for i in running), (
            "new losses are drawn"
        )
        # Where the row's range stays (the names then keep their places) and no backward() ran.
        if "backward" not in newest and tl.plots["nodes"].getViewBox().viewRange() == span:
            checked += 1
            assert handed.of(tl.curves["nodes"]) == 0, "no backward(): the walked row is left as it is"
            assert handed.of([*tl.end_labels["nodes"].markers, *tl.end_labels["nodes"].items]) == 0
        still = [
            tl.ends[i] for i, r in enumerate(c.info.runs) if c.history.runs[r.name].statuses[-1] == status[i]
        ]
        assert handed.of(still) == 0, "a run whose state did not change keeps its end cross as it is"
        monkeypatch.undo()
    assert checked >= 2
