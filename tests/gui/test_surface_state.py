"""The one surface state: colour range, extent and paths computed once, read by both views."""

from __future__ import annotations

import numpy as np
import pytest
from gui_helpers import colour_near, settle

from gradviz.gui.surface_state import (
    CONTOURS,
    HIGH_PERCENTILE,
    MODEL_GROW_CAP,
    SurfaceState,
    colour_range,
    square_extent,
)


# ------------------------------------------------------------- no Qt needed
def test_the_state_imports_no_qt_and_no_torch() -> None:
    import subprocess
    import sys

    heavy = "{'PySide6', 'pyqtgraph', 'torch'}"
    code = f"import sys, gradviz.gui.surface_state; print(sorted({heavy} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_colour_range_clips_diverged_values_and_goes_log_over_decades() -> None:
    bowl = np.linspace(0.0, 10.0, 1001)
    wild = np.concatenate([bowl, [1e30, np.inf, np.nan]])
    colour = colour_range(wild)
    assert not colour.log
    assert colour.hi == pytest.approx(np.percentile(np.concatenate([bowl, [1e30]]), HIGH_PERCENTILE))
    unit = colour.unit(wild)
    assert unit.min() == 0.0 and unit[-3:].tolist() == [1.0, 1.0, 1.0], "1e30, inf and NaN saturate"
    levels = colour.levels()
    assert len(levels) == CONTOURS and colour.lo < levels[0] and levels[-1] < colour.hi
    decades = colour_range(np.logspace(-3, 3, 101))
    assert decades.log and decades.hi < 3.0 and decades.lo < -2.5


def test_a_square_extent_holds_the_wanted_one_at_the_plot_s_proportions() -> None:
    (x0, x1), (y0, y1) = square_extent(((0.0, 4.0), (0.0, 1.0)), 200, 200)
    assert (x0, x1) == (0.0, 4.0) and (y1 - y0) == pytest.approx(4.0) and (y0 + y1) / 2 == 0.5
    (x0, x1), (y0, y1) = square_extent(((0.0, 1.0), (0.0, 1.0)), 300, 100)
    assert (x1 - x0) / 300 == pytest.approx((y1 - y0) / 100) and y1 - y0 == pytest.approx(1.0)


def _model_state(name: str) -> SurfaceState:
    from gradviz.engine import Lab, load_scenario
    from gradviz.gui.window_history import describe_lab

    state = SurfaceState()
    state.set_lab(describe_lab(Lab(load_scenario(name))))
    return state


def test_a_true_surface_is_evaluated_once_per_extent_and_follows_the_paths_up_to_a_cap() -> None:
    state = _model_state("forgot-zero-grad")
    assert state.mode == "model" and state.grid is not None
    first = state.version
    state.set_aspect(400, 300)
    (x0, x1), (y0, y1) = state.extent
    assert (x1 - x0) / 400 == pytest.approx((y1 - y0) / 300)
    assert state.grid.z.shape == (len(state.grid.xs), len(state.grid.ys))
    np.testing.assert_allclose(state.grid.z, state.model.grid(*state.extent, len(state.grid.xs))[2])
    version = state.version
    assert version > first
    state.set_aspect(400, 300)
    assert state.version == version, "the same extent is not evaluated again"
    far = [np.array([[1e6, -1e6]])]
    state.follow(far)
    (hx0, hx1), (hy0, hy1) = state.home
    (_, wx1), (wy0, _) = state.wanted
    assert wx1 == pytest.approx(hx1 + MODEL_GROW_CAP * (hx1 - hx0))
    assert wy0 == pytest.approx(hy0 - MODEL_GROW_CAP * (hy1 - hy0))
    grown = state.version
    state.follow(far)
    assert state.version == grown, "at the cap, nothing more to evaluate"
    state.fix(((0.0, 1.0), (0.0, 1.0)))
    held = state.extent
    state.follow([np.array([[-1e6, 1e6]])])
    state.set_aspect(100, 700)
    assert state.extent == held, "a fixed extent stays"


# ------------------------------------------------------- the window's views
def _contour_counter(monkeypatch) -> list[int]:
    """How many contour lines the surface view traces from here on."""
    import gradviz.gui.views.surface as surface_module

    calls = [0]
    real = surface_module.contour_path

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(surface_module, "contour_path", counted)
    return calls


@pytest.mark.parametrize("scenario", ["standard-loop", "set-to-none"])
def test_contours_are_traced_once_per_surface_however_often_it_is_drawn(
    open_window, qtbot, monkeypatch, scenario
) -> None:
    w = open_window(scenario)
    surface = w.surface
    qtbot.waitUntil(lambda: surface.state.ready and surface.grid() is not None, timeout=30000)
    if surface.mode == "plane":
        qtbot.waitUntil(lambda: surface.plane_surface.final, timeout=30000)
    settle(qtbot, w)
    surface.plot_widget.grab()  # the first grid's contours are traced when first painted
    calls = _contour_counter(monkeypatch)
    version = surface.state.version
    moment = w.controller.moment()
    for k in range(300):
        surface.draw(moment)
        if k % 30 == 0:
            surface.plot_widget.grab()
        if k in (100, 200):  # new colours, the same grid (a theme restyles the whole window: slow)
            w.set_theme("dark" if k == 100 else "light")
    surface.plot_widget.grab()
    # A grid that arrives late (a loaded machine) is a new surface: its lines are traced once.
    new_grids = surface.state.version - version
    assert calls[0] <= CONTOURS * new_grids, f"{calls[0]} contour lines traced for {new_grids} new grids"


def test_play_traces_contours_only_for_the_grids_it_shows(open_window, qtbot, monkeypatch) -> None:
    w = open_window("forgot-zero-grad")
    surface = w.surface
    surface.plot_widget.grab()
    calls = _contour_counter(monkeypatch)
    grids: list[int] = []
    surface.surface_changed.connect(lambda: grids.append(surface.state.version))
    for _ in range(120):
        w.controller.next_op()
        settle(qtbot, w)
        surface.plot_widget.grab()
    assert len(grids) < 10, "a growing path asks for a few wider grids, not one per op"
    assert calls[0] <= CONTOURS * len(grids)


def test_the_window_s_true_surface_has_equal_units_and_the_shading_fills_the_plot(open_window, qtbot) -> None:
    w = open_window("forgot-zero-grad")
    for size in ((1280, 720), (900, 800)):
        w.resize(*size)
        for _ in range(6):
            w.controller.next_op()
            settle(qtbot, w)
        qtbot.wait(50)
        vb = w.surface.plot.getViewBox()
        px, py = vb.viewPixelSize()
        assert px == pytest.approx(py, rel=0.02), size
        (x0, x1), (y0, y1) = vb.viewRange()
        xs, ys, _ = w.surface.grid()
        assert xs[0] <= x0 + px and xs[-1] >= x1 - px and ys[0] <= y0 + py and ys[-1] >= y1 - py, size


def test_the_3d_view_reads_the_state_alone(qtbot) -> None:
    from gradviz.engine import Lab, load_scenario
    from gradviz.gui.views.surface3d import Surface3DView
    from gradviz.gui.window_history import describe_lab

    state = SurfaceState()
    view = Surface3DView(state)
    qtbot.addWidget(view)
    seen = []
    state.on_change(lambda: seen.append(state.version))
    state.set_lab(describe_lab(Lab(load_scenario("standard-loop"))))
    assert view.state is state and seen and state.grid is not None


# ------------------------------------------------------------ what is seen
def _pixel(surface, point) -> tuple[float, float]:
    """Where a data point lands inside the plot's view box, in pixels from its top left."""
    from PySide6.QtCore import QPointF

    vb = surface.plot.getViewBox()
    at = vb.mapViewToScene(QPointF(float(point[0]), float(point[1])))
    corner = vb.mapToScene(vb.rect().topLeft())
    return at.x() - corner.x(), at.y() - corner.y()


@pytest.mark.parametrize(("scenario", "ops"), [("set-to-none", 40), ("forgot-zero-grad", 60)])
def test_current_markers_are_drawn_whole_inside_the_plot(open_window, qtbot, scenario, ops) -> None:
    w = open_window(scenario)
    qtbot.waitUntil(lambda: w.surface.state.ready, timeout=30000)
    for _ in range(ops):
        w.controller.next_op()
        settle(qtbot, w)
    qtbot.waitUntil(lambda: not w.controller.plane_pending, timeout=30000)
    settle(qtbot, w)
    surface = w.surface
    vb = surface.plot.getViewBox()
    for items in surface.items:
        radius = items.point.opts["size"] / 2
        x, y = _pixel(surface, (items.point.pos().x(), items.point.pos().y()))
        assert radius <= x <= vb.width() - radius and radius <= y <= vb.height() - radius, (x, y)


def test_runs_at_one_point_are_drawn_as_nested_rings_and_the_key_says_so(open_window, qtbot) -> None:
    from gradviz.gui.theme import run_color

    w = open_window("grad-accumulation")
    w.controller.next_op()
    settle(qtbot, w)
    # All three start at one point: three rings, the first run outermost.
    sizes = [items.point.opts["size"] for items in w.surface.items]
    assert sizes[0] > sizes[1] > sizes[2]
    assert all(name in w.surface.key.text().split("next step()")[-1] for name in ("scaled", "full-batch"))
    for _ in range(9):  # the first step: scaled and full-batch land on one point, unscaled beyond
        w.controller.next_op()
        settle(qtbot, w)
    surface = w.surface
    scaled, full, unscaled = surface.items
    assert (scaled.point.pos().x(), scaled.point.pos().y()) == pytest.approx(
        (full.point.pos().x(), full.point.pos().y()), abs=1e-6
    )
    assert scaled.point.isVisible() and full.point.isVisible()
    # The first run is the outer ring, under the second; a run elsewhere keeps the usual size.
    assert scaled.point.opts["size"] > full.point.opts["size"] == unscaled.point.opts["size"]
    assert scaled.point.zValue() < full.point.zValue()
    key = surface.key.text()
    assert "scaled" in key.split("same point")[0].split("next step()")[-1] and "same point" in key
    assert "unscaled" not in key.split("next step()")[-1]
    # Both shapes are seen: the outer ring's colour shows around the inner marker.
    image = surface.plot_widget.grab().toImage()
    cx, cy = surface.scene_pixel(full.point.pos().x(), full.point.pos().y())
    ring = scaled.point.opts["size"] / 2 - 2
    around = [
        image.pixelColor(int(cx + ring * np.cos(a)), int(cy + ring * np.sin(a)))
        for a in np.linspace(0, 2 * np.pi, 24, endpoint=False)
    ]
    assert sum(colour_near(p, run_color(0), 30) for p in around) >= 12
    inner = [image.pixelColor(cx + dx, cy + dy) for dx in (-2, 0, 2) for dy in (-2, 0, 2)]
    assert all(colour_near(p, run_color(1), 30) for p in inner)


@pytest.mark.parametrize("presenting", [False, True])
def test_a_plane_widens_before_its_wider_grid_arrives_so_no_run_or_arrow_leaves_the_plot(
    open_window, qtbot, presenting: bool
) -> None:
    w = open_window("set-to-none")
    if presenting:
        w.set_presentation(True, full_screen=False)
        w.resize(1920, 1080)
    qtbot.waitUntil(lambda: w.surface.state.ready, timeout=30000)
    surface, c = w.surface, w.controller
    vb = surface.plot.getViewBox()
    extents = [surface.state.extent]
    while c.next_op():  # the whole run, not waiting for the wider planes it asks for
        settle(qtbot, w)
        for items in surface.items:
            radius = items.point.opts["size"] / 2
            x, y = _pixel(surface, (items.point.pos().x(), items.point.pos().y()))
            inside = radius <= x <= vb.width() - radius and radius <= y <= vb.height() - radius
            assert inside, ("the marker is cut", c.cursor, x, y)
            (x0, x1), (y0, y1) = vb.viewRange()
            for key, line in items.lines.items():
                ax, ay = line.getData()
                if ax is not None and len(ax):
                    cut = not (x0 <= ax[-1] <= x1 and y0 <= ay[-1] <= y1)
                    assert not cut, (f"the {key} arrow is cut", c.cursor)
        if surface.state.extent != extents[-1]:
            extents.append(surface.state.extent)
    assert c.cursor >= 119, "the run went to its end"
    # The range grows with a margin each time, so it moves a few times in a run, not every op.
    assert len(extents) <= 8, [tuple(round(v, 2) for axis in e for v in axis) for e in extents]


def test_the_backward_s_arrows_never_put_their_heads_on_the_step_s(open_window, qtbot) -> None:
    import math

    from PySide6.QtCore import QPointF

    from gradviz.gui.views.surface import ARROW_LANE, HEAD_ROOM

    w = open_window("forgot-zero-grad")
    items = w.surface.items[0]

    def drawn(key: str) -> bool:
        xs, _ = items.lines[key].getData()
        return xs is not None and len(xs) == 2

    for _ in range(12):  # to the second backward: stale and fresh parts, and a step next
        w.controller.next_op()
        settle(qtbot, w)
        if all(drawn(key) for key in items.lines):
            break
    ends = {}
    for key, line in items.lines.items():
        xs, ys = line.getData()
        assert xs is not None and len(xs) == 2, key
        start, end = _pixel(w.surface, (xs[0], ys[0])), _pixel(w.surface, (xs[1], ys[1]))
        ends[key] = end
        head = items.heads[key]
        if head.isVisible():
            assert math.dist(start, end) >= HEAD_ROOM * head.opts["headLen"] - 1, key
            # The head sits on the arrow's end and points the arrow's way.
            path = head.path  # pyqtgraph keeps the head's outline here
            corners = {(path.elementAt(i).x, path.elementAt(i).y) for i in range(path.elementCount())}
            middle = QPointF(*np.mean(sorted(corners), axis=0))  # on the head's axis, behind its tip
            view = w.surface.plot_widget
            on_screen = head.deviceTransform(view.viewportTransform())  # as painted: turned, not flipped
            tip, back = on_screen.map(QPointF(0, 0)), on_screen.map(middle)
            at = view.mapFromScene(
                w.surface.plot.getViewBox().mapViewToScene(QPointF(float(xs[1]), float(ys[1])))
            )
            assert math.dist((tip.x(), tip.y()), (at.x(), at.y())) < 1.0, key
            pointing = math.atan2(tip.y() - back.y(), tip.x() - back.x())
            assert pointing == pytest.approx(math.atan2(end[1] - start[1], end[0] - start[0]), abs=0.01), key
    # Plain SGD steps exactly to where the backward's arrows end: they are drawn a lane apart.
    assert math.dist(ends["fresh"], ends["step"]) == pytest.approx(ARROW_LANE, abs=1.0)


@pytest.mark.gl
@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_3d_pit_is_drawn_as_light_or_dark_as_its_caption_says(open_window, qtbot, theme) -> None:
    from PySide6.QtGui import QColor, QVector3D

    from gradviz.gui.display import gl_unavailable
    from gradviz.gui.views import surface3d as s3

    if gl_unavailable() is not None:
        pytest.skip(gl_unavailable())
    w = open_window("standard-loop")
    w.set_theme(theme)
    w.set_surface3d(True)
    settle(qtbot, w)
    view = w.surface3d
    # Seen from straight above, so neither point hides behind a wall.
    view.view.setCameraPosition(elevation=90, azimuth=-90)
    for item in (*view.paths, *view.points):
        item.setVisible(False)
    image = view.frame()
    grid = view.state.grid
    xs, ys, heights = s3.mesh_grid(grid)
    x0, sx, y0, sy = view._scale

    def lightness(i: int, j: int) -> float:
        box = QVector3D(2 * (xs[i] - x0) / sx - 1, 2 * (ys[j] - y0) / sy - 1, heights[i, j] * s3.HEIGHT)
        gl = view.view
        viewport = gl.getViewport()
        ndc = (gl.projectionMatrix(viewport, viewport) * gl.viewMatrix()).map(box)
        px = int((ndc.x() + 1) / 2 * image.width())
        py = int((1 - ndc.y()) / 2 * image.height())
        return QColor(image.pixelColor(px, py)).lightnessF()

    pit = np.unravel_index(np.argmin(heights), heights.shape)
    inner = heights[2:-2, 2:-2]
    peak = np.unravel_index(np.argmax(inner), inner.shape)
    pit_light, peak_light = lightness(*pit), lightness(peak[0] + 2, peak[1] + 2)
    assert abs(pit_light - peak_light) > 0.15
    word = "lighter" if pit_light > peak_light else "darker"
    assert f"{word} is lower" in view.caption.text(), (theme, pit_light, peak_light)
