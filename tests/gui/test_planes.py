"""Surfaces over planes for models without two parameters: drawn, explained, cancelled."""

from __future__ import annotations

import numpy as np
from gui_helpers import settle

from gradviz.gui.window_history import PlaneRequest
from tests.engine.helpers import mlp_over_a_plane


def _final(w):
    return w.surface.plane_surface is not None and w.surface.plane_surface.final


def _step(qtbot, w, ops: int) -> None:
    """Wait for the first plane, then take ``ops`` ops as a user would."""
    qtbot.waitUntil(lambda: _final(w), timeout=30000)
    for _ in range(ops):
        w.controller.next_op()
        settle(qtbot, w)


def test_mlp_shows_a_surface_and_how_far_the_runs_lie_off_it(open_window, qtbot) -> None:
    w = open_window(mlp_over_a_plane())
    _step(qtbot, w, 8)
    assert w.surface.mode == "plane" and w.surface.controls.isVisible()
    caption = w.surface.caption.text()
    assert "Off the plane" in caption and "set-to-none" in caption
    # The shading really is there: sample the plot and find more than the background.
    image = w.surface.plot_widget.grab().toImage()
    colours = {
        image.pixelColor(x, y).name()
        for x in range(60, image.width() - 10, 9)
        for y in range(10, image.height() - 40, 9)
    }
    assert len(colours) > 15
    # Random directions through the start: the runs have moved off it, and the readout says so.
    paths = w.surface.paths(w.controller.moment())
    assert max(w.surface.state.residual(i, len(p)) for i, p in enumerate(paths)) > 0


def test_another_plane_kind_is_computed_and_the_path_lies_in_it(open_window, qtbot) -> None:
    w = open_window(mlp_over_a_plane())
    _step(qtbot, w, 12)
    combo = w.surface.plane_kind
    combo.setCurrentIndex(combo.findData("pca"))
    combo.activated.emit(combo.currentIndex())
    qtbot.waitUntil(lambda: _final(w) and w.surface.plane_surface.kind == "pca", timeout=30000)
    settle(qtbot, w)
    assert np.isfinite(w.surface.plane_surface.Z).all()
    assert "principal components" in w.surface.caption.text()


def test_stale_surfaces_are_dropped(open_window, qtbot) -> None:
    w = open_window(mlp_over_a_plane())
    qtbot.waitUntil(lambda: _final(w), timeout=30000)
    c = w.controller
    seen: list[int] = []
    c.plane_ready.connect(lambda s: seen.append(c.plane_generation))
    first = c.request_plane(PlaneRequest("random"))
    last = c.request_plane(PlaneRequest("random"))
    assert last > first
    qtbot.waitUntil(lambda: not c.plane_pending, timeout=30000)
    assert seen and all(g == last for g in seen)


def test_a_lesson_whose_runs_share_one_path_leaves_the_surface_out_and_says_why(open_window, qtbot) -> None:
    w = open_window("zero-grad-myths")
    w.controller.next_op()
    settle(qtbot, w)
    assert w.surface.mode == "none" and w.surface.plane_surface is None
    assert not w.surface.isVisible(), "the window gives its room to the views the lesson leads with"
    assert "No loss surface for this lesson" in w.surface.placeholder.text()


def test_a_cancelled_evaluation_sends_nothing() -> None:
    from gradviz.engine import Lab, load_scenario
    from gradviz.gui.worker import evaluate_job, plan_job

    lab = Lab(load_scenario("zero-grad-myths"))
    job = plan_job(lab, PlaneRequest("random"), "random")
    assert list(evaluate_job(job, lambda: True)) == []
    grids = list(evaluate_job(job, lambda: False))
    assert [g.final for g in grids] == [False, True]
    assert grids[0].Z.shape[0] < grids[1].Z.shape[0]


def test_a_plane_that_does_not_exist_yet_falls_back_and_says_why() -> None:
    from gradviz.engine import Lab, load_scenario
    from gradviz.gui.worker import plan_job

    lab = Lab(load_scenario("zero-grad-myths"))
    job = plan_job(lab, PlaneRequest("pca"), "random")
    assert job.kind == "random" and "not moved" in job.note


def test_one_parameter_model_draws_a_loss_curve(open_window, qtbot) -> None:
    w = open_window("two-batch-accumulation")
    _step(qtbot, w, 10)
    assert w.surface.mode == "curve"
    xs, ys = w.surface.curve.getData()
    assert len(xs) > 100 and np.isfinite(ys).all()
