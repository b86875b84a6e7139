"""Full garbage collections walk what the app made, not the objects torch and Qt left at import:
each walked them all, a quarter of a second in the middle of Play. Fresh processes, because a
process sets its imports aside once."""

from __future__ import annotations

import subprocess
import sys

IMPORTS_LEFT_IN_VIEW = """
import gc, torch
from gradviz.engine.lab import set_aside_imports
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
