"""A long path over the surface is drawn with no more points after 50,000 ops than after 2,000:
thinned to the pixels it covers, its newest points exact, and any earlier moment drawn as it was."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gradviz.gui.surface_path import EXACT_TAIL, WHOLE, RunPath, cell_size

# Cells of a 600 x 400 pixel plot over the orbit's range.
CELL = (cell_size(3.0, 600), cell_size(2.0, 400))


def _orbit(steps: int) -> np.ndarray:
    """A run that never settles: it circles the minimum, its orbit turning a little each lap (in
    single precision, as a path keeps its points)."""
    t = np.arange(steps) * 0.37
    radius = 1.0 + 0.1 * np.sin(t / 40.0)
    xy = np.stack([radius * np.cos(t), 0.6 * radius * np.sin(t + 0.2 * np.sin(t / 90.0))], axis=1)
    return xy.astype(np.float32)


def _path(points: np.ndarray) -> RunPath:
    path = RunPath()
    for start in range(0, len(points), 37):  # a frame's worth of steps at a time, as Play brings them
        chunk = points[start : start + 37]
        path.extend(chunk, np.zeros(len(chunk)))
    return path


def _painted(polyline: np.ndarray) -> np.ndarray:
    """The pixels a 2-pixel pen paints for ``polyline`` (NaN between pieces) on a 600 x 400 plot."""
    from PySide6.QtCore import QPointF, Qt
    from PySide6.QtGui import QImage, QPainter, QPen, QPolygonF

    image = QImage(600, 400, QImage.Format.Format_Grayscale8)
    image.fill(0)
    painter = QPainter(image)
    painter.setPen(QPen(Qt.GlobalColor.white, 2))
    gaps = np.flatnonzero(~np.isfinite(polyline).all(axis=1))
    for piece in np.split(polyline, gaps):
        piece = piece[np.isfinite(piece).all(axis=1)]
        pixels = [QPointF((x + 1.5) * 200, (1.0 - y) * 200) for x, y in piece.tolist()]
        if len(pixels) >= 2:
            painter.drawPolyline(QPolygonF(pixels))
    painter.end()
    rows = np.frombuffer(image.constBits(), dtype=np.uint8).reshape(400, image.bytesPerLine())
    return rows[:, :600] > 0


def _near(mask: np.ndarray, reach: int) -> np.ndarray:
    """The pixels within ``reach`` pixels (across, up or diagonally) of a pixel of ``mask``."""
    out = mask.copy()
    for dx in range(-reach, reach + 1):
        for dy in range(-reach, reach + 1):
            out |= np.roll(np.roll(mask, dx, axis=1), dy, axis=0)
    return out


def test_a_short_path_is_drawn_point_by_point() -> None:
    points = _orbit(WHOLE)
    path = _path(points)
    assert np.array_equal(path.drawn(WHOLE, CELL), points)
    assert np.array_equal(path.drawn(300, CELL), points[:300]), "going back draws the points of then"


@pytest.mark.parametrize("steps", [12_500, 50_000])
def test_a_long_path_hands_the_plot_no_more_points_than_a_short_one_but_paints_the_same_pixels(
    steps: int, qapp
) -> None:
    points = _orbit(steps)
    short, long = _path(points[:WHOLE]).drawn(WHOLE, CELL), _path(points).drawn(steps, CELL)
    # One op in four is a step: 2,000 and 50,000 ops are 500 and 12,500 points; a long Play, 50,000.
    assert len(long) <= 3 * len(short), (
        f"{len(long)} points drawn for {steps} steps, {len(short)} for {WHOLE}"
    )
    # The picture is the same to a pixel or two: every pixel the whole path paints lies by a painted one.
    whole, thinned = _painted(points), _painted(long)
    assert np.all(_near(thinned, 2)[whole]), "no stretch of the path goes missing"
    assert np.all(_near(whole, 1)[thinned]), "nothing is drawn where the path does not pass"
    # The newest points are drawn exactly, in order, at the end.
    assert np.array_equal(long[-EXACT_TAIL:], points[-EXACT_TAIL:])


def test_every_piece_drawn_is_a_stretch_of_the_real_path() -> None:
    points = _orbit(20_000)
    drawn = _path(points).drawn(20_000, CELL)
    index = {tuple(p): i for i, p in enumerate(points.tolist())}
    gaps = np.flatnonzero(~np.isfinite(drawn).all(axis=1))
    for piece in np.split(drawn, gaps):
        piece = piece[np.isfinite(piece).all(axis=1)]
        at = [index[tuple(p)] for p in piece.tolist()]
        assert at == list(range(at[0], at[0] + len(at))), "consecutive steps, never a chord between laps"


def test_going_back_draws_exactly_what_that_moment_drew() -> None:
    points = _orbit(30_000)
    path = _path(points)
    path.drawn(30_000, CELL)
    for back in (2_500, 9_999, 29_000):
        then = _path(points[:back]).drawn(back, CELL)
        assert np.array_equal(path.drawn(back, CELL), then, equal_nan=True)


def test_a_diverged_end_breaks_the_line_and_the_last_sane_point_is_the_current_one() -> None:
    points = _orbit(5_000)
    points[-3:] = [np.inf, np.nan], [np.nan, np.nan], [np.nan, np.nan]
    path = _path(points)
    drawn = path.drawn(5_000, CELL)
    assert not np.isfinite(drawn[-3:]).any()
    assert np.array_equal(path.last_finite(5_000), points[-4])


def test_a_run_flung_far_off_the_plot_paints_what_it_did_without_sampling_the_far_away(qapp) -> None:
    import tracemalloc

    points = _orbit(12_000)
    points[::50] *= 1e4  # a swing ten thousand plot widths out and back, every fiftieth step
    view = ((-1.5, 1.5), (-1.0, 1.0))  # the range _painted draws
    path = _path(points)
    tracemalloc.start()
    drawn = path.drawn(len(points), CELL, view)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # Sampled to the end of its range, each swing would take some 60,000 samples: gigabytes in all.
    assert peak < 50e6, f"{peak / 1e6:.0f} MB to thin the path"
    whole, thinned = _painted(points), _painted(drawn)
    assert np.all(_near(thinned, 2)[whole]), "every stretch inside the plot, the swings' too, is drawn"
    assert np.all(_near(whole, 1)[thinned])
    assert np.array_equal(drawn[-EXACT_TAIL:], points[-EXACT_TAIL:])


# ------------------------------------------------------------- the window's view
def _long_history(ops: int):
    """The history of forgot-zero-grad's real first 2,000 ops, laid end to end up to ``ops`` ticks."""
    from gradviz.engine import Lab, load_scenario
    from gradviz.gui.window_history import StepResult, WindowHistory, describe_lab, entries_since

    lab = Lab(replace(load_scenario("forgot-zero-grad"), iterations=500))
    while lab.tick < 2_000:
        lab.step()
    info = replace(describe_lab(lab), recent=None)  # every record kept: the path has every step
    entries = entries_since(lab, {})
    history = WindowHistory(info)
    for lap in range(ops // 2_000):
        shifted = {
            name: tuple(replace(e, tick=e.tick + 2_000 * lap) for e in run) for name, run in entries.items()
        }
        history.extend(StepResult(shifted, (), {}, -2, {}, False))
    return info, history


def _surface_of(qtbot, ops: int):
    """A surface view shown for a lab of ``ops`` ops, with that lab's description and history."""
    from gradviz.gui.views.surface import SurfaceView

    info, history = _long_history(ops)
    view = SurfaceView()
    qtbot.addWidget(view)
    view.resize(700, 500)
    view.show()
    view.set_lab(info)
    return view, info, history


def test_the_surface_view_draws_no_more_points_after_50_000_ops_than_after_2_000(qtbot) -> None:
    from gradviz.gui.window_history import Moment

    view, info, history = _surface_of(qtbot, 50_000)
    drawn = []
    for tick in (1_999, 49_999, 1_999):
        view.draw(Moment(info, history, tick))
        drawn.append([items.path.getData()[0] for items in view.items])
        paths = view.paths(Moment(info, history, tick))
        for items, path in zip(view.items, paths, strict=True):
            x, y = items.path.getData()
            # The newest point drawn is the run's newest, exactly.
            assert (x[-1], y[-1]) == pytest.approx(tuple(view.state.clip(path[-1:])[0]))
    steps = [len(p) for p in view.paths(Moment(info, history, 49_999))]
    assert min(steps) >= 12_000, "every step of 50,000 ops is on the path"
    for short, long, back in zip(*drawn, strict=True):
        assert len(long) <= 2 * len(short) + EXACT_TAIL
        assert np.array_equal(back, short, equal_nan=True), "going back draws what was drawn then"


def test_a_long_path_drawn_op_by_op_hands_its_settled_points_over_seldom(qtbot, monkeypatch) -> None:
    from gradviz.gui.window_history import Moment

    view, info, history = _surface_of(qtbot, 14_000)
    view.draw(Moment(info, history, 9_999))  # a step in four ops: past WHOLE points, so thinned
    settles = [0] * len(view.items)
    for i, items in enumerate(view.items):
        hand = items.path.settled.setData
        monkeypatch.setattr(
            items.path.settled,
            "setData",
            lambda *a, i=i, hand=hand, **k: (settles.__setitem__(i, settles[i] + 1), hand(*a, **k)),
        )
    frames = 0
    for tick in range(10_000, 12_000, 37):  # a frame's worth of ops at a time, as full-speed Play draws
        view.draw(Moment(info, history, tick))
        frames += 1
    # The path gains about nine points a frame: it settles once in some thirty frames, not in each.
    assert max(settles) <= frames // 5, (settles, frames)


def test_the_3d_markers_of_runs_at_one_point_nest_the_first_largest() -> None:
    from gradviz.gui.views.surface3d import POINT_SIZE, _nested_sizes

    here, there = np.array([0.1, 0.2, 0.3]), np.array([0.9, -0.5, 0.2])
    sizes = _nested_sizes([here, there, here + 1e-4, None])
    assert sizes[0] > sizes[2] == sizes[1] == sizes[3] == POINT_SIZE


@pytest.mark.gl
def test_the_3d_view_draws_a_long_path_thinned_with_its_newest_point_exact(qtbot) -> None:
    from gradviz.gui.display import gl_unavailable
    from gradviz.gui.surface_state import SurfaceState
    from gradviz.gui.views.surface3d import Surface3DView
    from gradviz.gui.window_history import Moment

    if gl_unavailable() is not None:
        pytest.skip(gl_unavailable())
    info, history = _long_history(50_000)
    state = SurfaceState()
    view = Surface3DView(state)
    qtbot.addWidget(view)
    view.resize(600, 450)
    view.show()
    assert view.activate()
    state.set_lab(info)
    view.set_lab(info)
    counts = {}
    for tick in (1_999, 49_999):
        moment = Moment(info, history, tick)
        view.draw(moment)
        counts[tick] = [len(path.pos) for path in view.paths]
        for i, path in enumerate(state.paths(moment)):
            newest = view._to_box(path[-1:])[0]
            assert np.allclose(view.points[i].pos[0], newest)
            assert np.allclose(view.paths[i].pos[-1], newest), "the path ends at the marker"
    for short, long in zip(counts[1_999], counts[49_999], strict=True):
        assert long <= 2 * short + 2 * EXACT_TAIL
