"""A plane made after more ops than the window keeps records of draws the whole path: the lab
projects every step, the thinned past's replayed, exactly as projecting each step by hand does."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

# The lab keeps full records of its last RECENT ops (20,000 in the app), the window as many: a
# plane made after OPS ops meets a past the window no longer holds.
RECENT = 2_000
OPS = 2_500


def test_a_new_plane_after_the_kept_records_has_every_step_of_the_path_projected_as_by_hand() -> None:
    from gradviz.engine import load_scenario
    from gradviz.engine.lab import Lab
    from gradviz.engine.landscape import project
    from gradviz.gui.surface_state import SurfaceState
    from gradviz.gui.window_history import (
        Moment,
        PlaneRequest,
        StepResult,
        WindowHistory,
        describe_lab,
        entries_since,
    )
    from gradviz.gui.worker import evaluate_job, plan_job

    # A small MLP, its lesson (which leaves the surface out) set aside: a plane through 33 weights.
    scenario = replace(load_scenario("zero-grad-myths"), iterations=OPS // 4 + 500, lesson=None)
    lab = Lab(scenario, recent=RECENT)
    info = describe_lab(lab)
    history = WindowHistory(info)
    names = [r.name for r in lab.runs]
    known: dict[str, int] = {}
    while len(lab.history[names[0]]) < OPS:
        lab.run_iterations(25)  # a few frames of Play, handed to the window as the worker does
        history.extend(StepResult(entries_since(lab, known), (), {}, -2, {}, False))
        known = {name: len(lab.history[name]) for name in names}
    assert all(history.runs[name].records[0] is None for name in names), "the window let the oldest go"

    job = plan_job(lab, PlaneRequest("pca"), "random")
    surface = next(evaluate_job(job, lambda: False))
    state = SurfaceState()
    state.set_lab(info)
    assert state.set_plane_surface(surface)
    paths = state.paths(Moment(info, history, history.last_tick))

    # By hand: the same loop again, keeping every record, each step's weights projected onto the plane.
    again = Lab(scenario, recent=10**9)
    again.run_iterations(lab.iteration)
    for name, path in zip(names, paths, strict=True):
        h = again.history[name]
        steps_taken = [r.snapshot.param_flat for r in h.records if r.op == "step"]
        weights = [again.initial(name).param_flat, *steps_taken]
        steps = sum(op == "step" for op in history.runs[name].ops)
        assert len(path) == 1 + steps == len(weights), "one point for the start and one for every step"
        expected = project(job.plane, np.stack(weights)).coords
        np.testing.assert_array_equal(path, expected.astype(np.float32), "kept in single precision")
