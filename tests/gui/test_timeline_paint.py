"""What a frame of the timeline costs Qt: one paint per frame however its ranges grow, ranges that
grow with room to spare during Play, rows ranged as pyqtgraph's own auto-range would range them
once paused, and dashed runs still dashed."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from gui_helpers import Paints, press
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication


def _painted(qtbot) -> None:
    """Let Qt paint what the last redraw changed, and whatever that paint asks for next."""
    for _ in range(4):
        QApplication.processEvents()
        qtbot.wait(5)


def test_each_frame_paints_the_timeline_once_while_its_ranges_grow(open_window, qtbot) -> None:
    w = open_window("forgot-zero-grad")
    tl = w.timeline
    _painted(qtbot)
    paints = Paints(tl.graphics.viewport())
    moved, frames = 0, 0
    for _ in range(24):
        before = (tl.plots["loss"].viewRange(), tl.plots["grad"].viewRange())
        paints.count = 0
        press(qtbot, w, Qt.Key.Key_Right)
        _painted(qtbot)
        frames += 1
        moved += (tl.plots["loss"].viewRange(), tl.plots["grad"].viewRange()) != before
        assert paints.count == 1, f"one redraw painted the timeline {paints.count} times"
    assert moved >= frames // 3, "the rows' ranges grew with the runs while they were counted"


def test_each_row_is_ranged_as_pyqtgraph_would_range_it(open_window, qtbot) -> None:
    w = open_window("forgot-zero-grad")
    press(qtbot, w, Qt.Key.Key_Right, 40)
    tl = w.timeline
    checked = 0
    for key in ("loss", "grad", "saved", "nodes", "distance"):
        plot = tl.plots[key]
        if not plot.isVisible():
            continue
        ours = plot.viewRange()[1]
        box = plot.getViewBox()
        box.enableAutoRange(y=True)
        box.updateAutoRange()
        assert box.viewRange()[1] == pytest.approx(ours, rel=1e-9, abs=1e-12), key
        box.disableAutoRange()
        checked += 1
    assert checked >= 3


def _holds_its_points(tl, key: str) -> bool:
    """Whether row ``key`` shows every point its curves were handed."""
    low, high = tl.plots[key].viewRange()[1]
    ys = [c.getData()[1] for c in tl.curves[key]]
    y = np.concatenate([v[np.isfinite(v)] for v in ys if v is not None])
    return bool(y.size == 0 or (low <= y.min() and y.max() <= high))


def test_while_play_runs_a_climbing_row_moves_its_axis_seldom_and_fits_again_at_the_pause(
    open_window, qtbot
) -> None:
    from dataclasses import replace

    from gradviz.engine import load_scenario

    # Yours never zeroes .grad: its ‖grad‖ climbs, a new highest value at almost every step.
    w = open_window(replace(load_scenario("forgot-zero-grad"), iterations=100_000))
    tl, c = w.timeline, w.controller
    frames, moves, held = [], 0, []

    def drawn() -> None:
        span = tl.plots["grad"].viewRange()[1]
        nonlocal moves
        moves += bool(frames) and span != frames[-1]
        frames.append(span)
        held.append(all(_holds_its_points(tl, key) for key in ("loss", "grad", "distance")))

    w.frame_drawn.connect(drawn)
    c.set_speed(0)
    c.play()
    qtbot.waitUntil(lambda: len(frames) >= 40 and c.history.last_tick > 400, timeout=60000)
    c.pause()
    w.frame_drawn.disconnect(drawn)
    assert all(held), "every frame's rows show all their points"
    assert moves <= len(frames) // 6, f"the ‖grad‖ axis moved in {moves} of {len(frames)} frames"
    qtbot.waitUntil(lambda: not c.busy, timeout=30000)
    _painted(qtbot)
    # Paused, each row is ranged as pyqtgraph's own auto-range would range its points.
    for key in ("loss", "grad", "distance"):
        box = tl.plots[key].getViewBox()
        ours = box.viewRange()[1]
        box.enableAutoRange(y=True)
        box.updateAutoRange()
        assert box.viewRange()[1] == pytest.approx(ours, rel=1e-9, abs=1e-12), key
        box.disableAutoRange()


def test_the_time_axis_doubles_while_play_runs_grows_by_quarters_by_hand_and_holds_at_the_pause(
    open_window, qtbot
) -> None:
    from dataclasses import replace

    from gui_helpers import settle

    from gradviz.engine import load_scenario
    from gradviz.gui.views.timeline import X_GROWTH, X_GROWTH_PLAYING, time_span

    assert time_span(0.0, 16.0, 10.0, X_GROWTH) == 16.0
    assert time_span(0.0, 16.0, 17.0, X_GROWTH) == 20.0 and time_span(20.0, 16.0, 21.0, X_GROWTH) == 25.0
    assert time_span(64.0, 16.0, 30.0, X_GROWTH) == 64.0, "a span that holds the ops is kept"
    assert time_span(16.0, 16.0, 40.0, X_GROWTH_PLAYING) == 64.0

    w = open_window(replace(load_scenario("forgot-zero-grad"), iterations=100_000))
    tl, c = w.timeline, w.controller
    spans: list[float] = []
    w.frame_drawn.connect(lambda: spans.append(tl.plots["loss"].viewRange()[0][1]))
    c.set_speed(0)
    c.play()
    qtbot.waitUntil(lambda: c.history.last_tick > 600, timeout=60000)
    c.pause()
    qtbot.waitUntil(lambda: not c.busy, timeout=30000)
    settle(qtbot, w)
    playing = sorted(set(spans))
    assert len(playing) >= 3 and all(b / a > 1.9 for a, b in itertools.pairwise(playing)), playing
    held = tl.plots["loss"].viewRange()[0][1]
    assert held == spans[-1] and held >= c.history.last_tick, "the pause keeps the span Play grew"
    shown = tl._span
    press(qtbot, w, Qt.Key.Key_Right, int(shown - c.history.last_tick))  # stepped by hand past its end
    settle(qtbot, w)
    assert tl._span == pytest.approx(shown * X_GROWTH), "by hand it grows by a quarter"
    c.reset()
    qtbot.waitUntil(lambda: not c.busy and c.history.last_tick < 0, timeout=30000)
    settle(qtbot, w)
    assert tl._span == 16.0, "a reset starts the axis again"


def test_a_dashed_line_is_cut_into_its_pattern_and_broken_at_a_gap() -> None:
    from gradviz.gui.views.dashes import dash_lines

    x = np.array([0.0, 30.0, 31.0, 40.0, 100.0])
    y = np.array([0.0, 0.0, np.nan, 0.0, 0.0])
    lines = dash_lines(x, y, [8.0, 4.0])
    assert lines[:3, [0, 2]].tolist() == [[0.0, 8.0], [12.0, 20.0], [24.0, 30.0]]
    assert not ((lines[:, 0] < 40.0) & (lines[:, 2] > 30.0)).any(), "nothing drawn across the gap"
    # After the gap the pattern runs on along the drawn length (30 px so far).
    assert lines[3, [0, 2]].tolist() == [40.0, 42.0]
    assert np.all(lines[:, 2] - lines[:, 0] <= 8.0) and lines[:, 2].max() == 100.0


def test_a_dash_dot_pattern_keeps_each_of_its_dashes_in_turn() -> None:
    from gradviz.gui.views.dashes import dash_lines

    x, y = np.array([0.0, 20.0, 50.0]), np.array([0.0, 0.0, 0.0])  # bends nowhere, two pieces
    lines = dash_lines(x, y, [8.0, 4.0, 2.0, 4.0], offset=2.0)
    spans = sorted((round(a, 9), round(b, 9)) for a, b in lines[:, [0, 2]].tolist())
    # From 2 px into the pattern: the dash's last 6 px, a gap, the dot, a gap, the dash again...
    assert spans == [
        (0.0, 6.0),
        (10.0, 12.0),
        (16.0, 20.0),
        (20.0, 24.0),
        (28.0, 30.0),
        (34.0, 42.0),
        (46.0, 48.0),
    ]


def test_the_reference_run_is_drawn_dashed_and_holds_its_own_series(open_window, qtbot) -> None:
    from gradviz.gui.views.dashes import DashedCurve
    from gradviz.gui.views.timeline import log10_or_zero

    w = open_window("forgot-zero-grad")
    press(qtbot, w, Qt.Key.Key_Right, 40)
    tl, c = w.timeline, w.controller
    dashed = [i for i, curve in enumerate(tl.curves["loss"]) if isinstance(curve.settled, DashedCurve)]
    assert dashed and len(dashed) < len(c.info.runs), "the first run solid, the others dashed"
    i = dashed[0]
    rt = c.history.runs[c.info.runs[i].name]
    x, y = tl.curves["loss"][i].getData()
    assert np.array_equal(x, np.asarray(rt.ticks, dtype=np.float64) + 0.5)
    assert np.array_equal(y, log10_or_zero(rt.loss), equal_nan=True)
    # On screen: the run's colour comes and goes along its curve, a dash at a time.
    _painted(qtbot)
    image = tl.graphics.viewport().grab().toImage()
    area = tl.graphics.mapFromScene(tl.plots["loss"].getViewBox().sceneBoundingRect()).boundingRect()

    def stretches(colour) -> int:
        """Stretches of columns of the row (short of its end labels) that hold ``colour``."""
        columns = [
            any(
                abs(image.pixelColor(x, y).red() - colour.red()) < 30
                and abs(image.pixelColor(x, y).green() - colour.green()) < 30
                and abs(image.pixelColor(x, y).blue() - colour.blue()) < 30
                for y in range(area.top(), area.bottom())
            )
            for x in range(area.left(), area.left() + area.width() * 3 // 4)
        ]
        return sum(1 for a, b in zip([False, *columns], columns, strict=False) if b and not a)

    solid = next(j for j in range(len(c.info.runs)) if j not in dashed)
    # The solid run breaks only where a dashed one crosses over it.
    broken, gaps = (stretches(tl.curves["loss"][j].opts["pen"].color()) for j in (solid, i))
    assert gaps >= 3 * max(broken, 4), (gaps, broken)
