"""The app's responsiveness: Play of 2,000 ops, and process start to the first painted window.

Figures are printed, with peers measured in the same run because machines here
are shared and noisy: the headless engine stepping the same ops, and a bare
PySide6 window (and a bare ``import torch``) started the same way.
Run: ``python bench/bench_app.py [--ops 2000]`` (offscreen unless a display is set).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

FIRST_PAINT = """
import sys, time
from gradviz.gui.app import launch
import os
app, window = launch("forgot-zero-grad")
# Leave at once: the worker may still be importing torch, which is the point of showing first.
window.first_painted.connect(lambda: (print("painted", flush=True), os._exit(0)))
app.exec()
"""

BARE_WINDOW = """
from PySide6.QtWidgets import QApplication, QLabel
from PySide6.QtCore import QObject, QEvent
app = QApplication([])
label = QLabel("bare window")
class Spy(QObject):
    def eventFilter(self, obj, ev):
        if ev.type() == QEvent.Type.Paint:
            print("painted", flush=True)
            import os
            os._exit(0)
        return False
spy = Spy()
label.installEventFilter(spy)
label.show()
app.exec()
"""

IMPORT_TORCH = "import torch; print('painted', flush=True)"


def _time_to_line(code: str) -> float:
    """Seconds from starting a fresh Python process until it prints its first line."""
    start = time.perf_counter()
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        proc.stdout.readline()
        elapsed = time.perf_counter() - start
        proc.wait(timeout=60)
    return elapsed


def start_up(rounds: int) -> None:
    app, bare, torch_import = [], [], []
    for _ in range(rounds):
        app.append(_time_to_line(FIRST_PAINT))
        bare.append(_time_to_line(BARE_WINDOW))
        torch_import.append(_time_to_line(IMPORT_TORCH))
    a, b, t = (statistics.median(x) for x in (app, bare, torch_import))
    print(f"process start to first painted window: {a * 1000:.0f} ms (median of {rounds})")
    print(f"  peer, a bare PySide6 window:    {b * 1000:.0f} ms  (gradviz / bare = {a / b:.2f})")
    print(f"  peer, python -c 'import torch': {t * 1000:.0f} ms  (gradviz / import = {a / t:.2f})")


def play(ops: int) -> None:
    from dataclasses import replace

    from gradviz.engine import Lab, load_scenario
    from gradviz.engine.lab import set_threads
    from gradviz.gui.display import application
    from gradviz.gui.window import MainWindow, wait_until_idle

    app = application()
    base = load_scenario("forgot-zero-grad")
    window = MainWindow(interactive=False)
    window.resize(1280, 720)
    window.show()
    window.controller.open(replace(base, iterations=10_000))
    wait_until_idle(window)
    stamps: list[float] = []
    window.frame_drawn.connect(lambda: stamps.append(time.perf_counter()))
    window.controller.set_speed(0)
    start = time.perf_counter()
    window.controller.play()
    while window.controller.tape.last_tick < ops - 1:
        app.processEvents()
    window.controller.pause()
    elapsed = time.perf_counter() - start
    wait_until_idle(window)
    window.controller.shutdown()
    frames = [1000 * (b - a) for a, b in itertools.pairwise(stamps)]
    frames.sort()
    p95 = frames[min(len(frames) - 1, int(0.95 * len(frames)))]
    print(f"Play of {ops} ops on forgot-zero-grad (1280x720, {os.environ['QT_QPA_PLATFORM']}):")
    median = statistics.median(frames)
    print(f"  frame time: median {median:.1f} ms, 95th percentile {p95:.1f} ms, {len(frames)} frames")
    print(f"  {ops / elapsed:.0f} ops/s in the window")
    set_threads(1)
    lab = Lab(replace(base, iterations=10_000))
    t0 = time.perf_counter()
    while lab.tick < ops:
        lab.step()
    headless = time.perf_counter() - t0
    ratio = elapsed / headless
    print(f"  peer, the headless engine: {ops / headless:.0f} ops/s (window / headless time = {ratio:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3, help="start-up rounds")
    args = parser.parse_args()
    play(args.ops)
    start_up(args.rounds)


if __name__ == "__main__":
    main()
