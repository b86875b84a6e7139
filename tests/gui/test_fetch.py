"""Records the window no longer keeps are rebuilt by the lab for whatever moment the cursor is at,
also when it moves while an earlier rebuild is still under way."""

from __future__ import annotations

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
