"""Full garbage collections walk what the app made, not the objects torch and Qt left at import:
each walked them all, a quarter of a second in the middle of Play. Fresh processes, because a
process sets its imports aside once."""

from __future__ import annotations

import subprocess
import sys

IMPORTS_LEFT_IN_VIEW = """
import gc, torch
from gradviz.engine.collector import set_aside_imports
before = len(gc.get_objects())
set_aside_imports()
print(before, len(gc.get_objects()), any(o is vars(torch.nn) for o in gc.get_objects()))
"""

WINDOW = """
import gc, os, torch
from PySide6.QtCore import QTimer
from gradviz.gui.app import launch
app, window = launch("forgot-zero-grad")
def check():
    if gc.get_freeze_count():
        print(gc.get_freeze_count(), any(o is vars(torch.nn) for o in gc.get_objects()), flush=True)
        os._exit(0)
poll = QTimer()
poll.timeout.connect(check)
poll.start(20)
QTimer.singleShot(60_000, lambda: (print("never", flush=True), os._exit(0)))
app.exec()
"""


def _run(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def test_setting_the_imports_aside_takes_torch_out_of_the_collectors_view() -> None:
    before, after, torch_in_view = _run(IMPORTS_LEFT_IN_VIEW)
    assert int(before) > 100_000, "torch leaves this many objects for each full collection to walk"
    assert int(after) < int(before) // 20
    assert torch_in_view == "False"


def test_the_window_sets_the_imports_aside_once_it_shows() -> None:
    out = _run(WINDOW)
    assert out[0] != "never", "the imports were set aside within a minute of the window showing"
    frozen, torch_in_view = out
    assert int(frozen) > 100_000
    assert torch_in_view == "False"


def test_holds_on_full_collections_nest_and_give_back_the_threshold_they_found() -> None:
    import gc

    from gradviz.engine.collector import HELD, hold_full_collections

    found = gc.get_threshold()
    hold_full_collections(True)
    hold_full_collections(True)
    assert gc.get_threshold() == (*found[:2], HELD)
    hold_full_collections(False)
    assert gc.get_threshold()[2] == HELD, "one hold is still on"
    hold_full_collections(False)
    hold_full_collections(False)  # one too many lets go of nothing
    assert gc.get_threshold() == found


def test_play_holds_full_collections_back_and_leaves_no_garbage_waiting_for_them(open_window, qtbot) -> None:
    """A full collection walks every record a long Play keeps, several frames' time; Play holds
    them back, which costs no memory only because Play leaves no cycles for them to free."""
    import gc
    from dataclasses import replace

    from PySide6.QtCore import QEvent
    from PySide6.QtWidgets import QApplication

    from gradviz.engine import load_scenario

    w = open_window(replace(load_scenario("gan-detach"), iterations=100_000))
    c = w.controller
    c.set_speed(0)
    # Windows of earlier tests are deleted first, so what the last collection finds is Play's own.
    QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gc.collect()
    full: list[str] = []

    def on_full(phase: str, info: dict) -> None:
        if info["generation"] == 2:
            full.append(phase)

    gc.callbacks.append(on_full)
    try:
        held = []
        w.frame_drawn.connect(lambda: c.playing and held.append(gc.get_threshold()[2]))
        c.play()
        qtbot.waitUntil(lambda: c.history.last_tick > 3_000, timeout=60000)
        c.pause()
        qtbot.waitUntil(lambda: not c.busy, timeout=10000)
        assert held and all(t == max(held) > 10_000 for t in held), "held in every frame of Play"
        assert full == [], "no full collection ran during Play"
        assert gc.get_threshold()[2] < 10_000, "paused, full collections run again"
    finally:
        gc.callbacks.remove(on_full)
    assert gc.collect() < 100, "Play left no cycles old enough to wait for a full collection"
