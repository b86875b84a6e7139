"""A long Play leaves free holes in the C heap where its growing columns were; they go back to the
system while Play runs and at its pause, and the app keeps freed memory for reuse otherwise."""

from __future__ import annotations

import subprocess
import sys

import pytest

HOLES = """
import numpy as np
from gradviz.gui.heap import release_freed, tune_malloc

def resident_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

tune_malloc()
# A megabyte at a time, every other one kept: the free ones are holes no larger block fits in.
blocks = [np.ones(1 << 17) for _ in range(400)]
kept = blocks[::2]
del blocks
before = resident_mb()
release_freed()
print(before, resident_mb())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's heap")
def test_released_holes_leave_resident_memory_and_kept_memory_stays() -> None:
    done = subprocess.run([sys.executable, "-c", HOLES], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = map(float, done.stdout.split())
    assert before - after > 150, f"{before:.0f} MB resident before, {after:.0f} after"
    assert after > 150, "the blocks still in use stay"


def test_play_gives_freed_pages_back_while_it_runs_and_at_its_pause(open_window, qtbot, monkeypatch) -> None:
    from dataclasses import replace

    import gradviz.gui.controller as controller
    from gradviz.engine import load_scenario

    released = []
    monkeypatch.setattr(controller, "release_freed", lambda: released.append("freed"))
    w = open_window(replace(load_scenario("forgot-zero-grad"), iterations=100_000))
    c = w.controller
    c._release.setInterval(50)
    c.set_speed(0)
    c.play()
    qtbot.waitUntil(lambda: len(released) >= 2, timeout=10000)
    assert c.playing, "released while playing"
    c.pause()
    assert not c._release.isActive()
    count = len(released)
    qtbot.wait(200)
    assert len(released) == count, "paused, nothing more"
