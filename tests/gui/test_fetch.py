"""Records the window does not keep: rebuilt by the lab for whatever moment the cursor is at, also
when it moves while an earlier rebuild is still under way; during Play of a large model, made as
the ops run."""

from __future__ import annotations

import numpy as np
import pytest
from gui_helpers import settle

from tests.engine.helpers import MLP  # large enough that its lab keeps no full records


def test_a_moment_reached_while_another_is_being_rebuilt_gets_its_records_too(open_window, qtbot) -> None:
    from gradviz.engine import loads_scenario
    from gradviz.gui.views.grads import PENDING

    w = open_window(loads_scenario(MLP, "test").with_overrides(iterations=1000))
    c = w.controller
    assert c.history is not None and not c.history.info.full_records
    c.set_speed(0)
    c.play()  # Play rebuilds no record of a large model: none of these moments' is fetched
    qtbot.waitUntil(lambda: c.history.last_tick >= 200, timeout=30_000)
    c.pause()
    settle(qtbot, w)
    # Two moments back in quick succession: the second is asked for while the first is rebuilt.
    c.seek(50)
    c.seek(90)
    assert c.cursor == 90 and c.history.missing(90)
    qtbot.waitUntil(lambda: not c.history.missing(c.cursor), timeout=10_000)
    settle(qtbot, w)
    run = c.history.info.runs[0].name
    assert w.grads.cell(run, "0.weight", "value").text() != PENDING


def test_play_of_a_large_model_shows_every_frames_newest_op_as_a_full_lab_records_it(
    open_window, qtbot
) -> None:
    from gradviz.engine import Lab, loads_scenario
    from gradviz.gui.views.grads import PENDING

    scenario = loads_scenario(MLP, "test").with_overrides(iterations=1000)
    w = open_window(scenario)
    c = w.controller
    assert c.history is not None and not c.history.info.full_records
    run = c.history.info.runs[0].name
    c.set_speed(0)
    c.play()
    shown = []
    for target in (100, 200, 300):
        qtbot.waitUntil(lambda target=target: c.history.last_tick >= target, timeout=30_000)
        assert c.playing
        # The newest op's records came with it, made as it ran: nothing is left to rebuild.
        assert not c.history.missing(c.cursor)
        shown += [w.grads.cell(run, "0.weight", column).text() for column in ("value", ".grad", "+ backward")]
    c.pause()
    assert PENDING not in shown
    newest = c.history.runs[run].index_at(c.cursor)
    made = c.history.record(run, newest)
    assert made is not None and made.op == "step"  # Play's batches end with a whole iteration recorded
    full = Lab(scenario, record="full")
    while full.tick <= made.tick:
        full.advance()
    kept = full.record(run, newest)
    for name in made.params:
        np.testing.assert_array_equal(made.params[name], kept.params[name])
        np.testing.assert_array_equal(made.grads[name], kept.grads[name])
        for key, value in kept.state[name].items():
            np.testing.assert_array_equal(made.state[name][key], value)


def test_the_records_of_a_moment_are_rebuilt_with_one_replay_from_a_keyframe(qapp) -> None:
    from gradviz.engine import loads_scenario
    from gradviz.engine.run import Run
    from gradviz.gui.window_history import StepResult, WindowHistory, entries_since
    from gradviz.gui.worker import LabWorker

    # No zero_grad: a moment just after a forward reads the step before it and, further back,
    # the backward whose gradient .grad still holds.
    scenario = loads_scenario(MLP + '[loop]\norder = ["forward", "backward", "step"]\n', "test")
    worker = LabWorker()
    worker.build(scenario.with_overrides(iterations=1000), 1, 300, {})
    lab, info = worker.lab, worker.info
    assert lab is not None and info is not None and lab.mode == "light" and lab.keyframe_every > 2
    history = WindowHistory(info)
    history.extend(StepResult(entries_since(lab, {}), (), {}, -2, {}, False))
    run = lab.runs[0].name
    forward = 3 * (3 * lab.keyframe_every + 1)
    keys = history.missing(history.runs[run].ticks[forward])
    assert keys == [(run, forward - 1), (run, forward), (run, forward - 2)]
    fetched = []
    worker.fetched.connect(lambda records, generation: fetched.append(records))
    restores = []
    real_restore = Run.restore

    def restore(self: Run, *args: object) -> None:
        restores.append(1)
        real_restore(self, *args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Run, "restore", restore)
        worker.fetch(keys, 1)
    assert sorted(fetched[0]) == sorted(keys)
    assert len(restores) == 1
