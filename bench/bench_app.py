"""The app's responsiveness: frames during Play, flat with history, and start-up.

Play of ``forgot-zero-grad`` at full speed in a 1280x720 window, in the window's
default views and in presentation mode, measured after 2,000 and after 50,000
ops (the lab is stepped there in one request, then Play goes on). A frame's
time is what the GUI thread spends on it: the views' drawing plus Qt's painting
of what changed, as the window reports them. Peers, measured in the same run
because machines here are shared and noisy: a bare pyqtgraph window of the same
size whose ``PlotDataItem.setData`` is called and painted in a loop, the
headless engine stepping the same ops, a bare PySide6 window and ``import
torch`` started the same way. Offscreen unless a display is set; under
``xvfb-run`` with ``QT_QPA_PLATFORM=xcb`` it is a real window.

Beside each figure: the longest wait between two frames (a stall that no frame's own time
shows), and the garbage collector's pauses during those frames (how many, the
longest, their share of the time), since a full collection stalls every thread at once.
Each mode is measured in a process of its own.

Run: ``python bench/bench_app.py [--marks 2000,50000] [--frames 120] [--parts]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

SIZE = (1280, 720)
SCENARIO = "forgot-zero-grad"

FIRST_PAINT = """
import os
from gradviz.gui.app import launch
app, window = launch("forgot-zero-grad")
# Leave at once: the worker may still be importing torch, which is the point of showing first.
window.first_painted.connect(lambda: (print("painted", flush=True), os._exit(0)))
app.exec()
"""

# The first op asked for as soon as the lab is on screen, or (with a delay) as a person would.
FIRST_OP = """
import os, sys, time
from PySide6.QtCore import QTimer
from gradviz.gui.app import launch
delay = float(sys.argv[1])
app, window = launch("forgot-zero-grad")
asked = []
def ask():
    asked.append(time.perf_counter())
    window.controller.next_op()
def on_lab(_info):
    QTimer.singleShot(int(delay * 1000), ask)
def drawn():
    if window.controller.cursor >= 0 and asked:
        print(f"{time.perf_counter() - asked[0]:.4f}", flush=True)
        os._exit(0)
window.controller.lab_changed.connect(on_lab)
window.frame_drawn.connect(drawn)
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


def _run_until_line(code: str, *args: str) -> tuple[float, str]:
    """Seconds from starting a fresh Python process until it prints its first line, and the line."""
    start = time.perf_counter()
    with subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        elapsed = time.perf_counter() - start
        proc.wait(timeout=60)
    return elapsed, line


def start_up(rounds: int) -> None:
    app, bare, torch_import, first_op, wait_op, late_op = [], [], [], [], [], []
    for _ in range(rounds):
        app.append(_run_until_line(FIRST_PAINT)[0])
        bare.append(_run_until_line(BARE_WINDOW)[0])
        torch_import.append(_run_until_line(IMPORT_TORCH)[0])
        total, waited = _run_until_line(FIRST_OP, "0")
        first_op.append(total)
        wait_op.append(float(waited))
        late_op.append(float(_run_until_line(FIRST_OP, "2")[1]))
    a, b, t, f = (statistics.median(x) for x in (app, bare, torch_import, first_op))
    print(f"process start to first painted window: {a * 1000:.0f} ms (median of {rounds})")
    print(f"  peer, a bare PySide6 window:    {b * 1000:.0f} ms  (gradviz / bare = {a / b:.2f})")
    print(f"  peer, python -c 'import torch': {t * 1000:.0f} ms  (gradviz / import = {a / t:.2f})")
    print(f"process start to the first op drawn (asked for as the lab shows): {f * 1000:.0f} ms")
    print(f"  the wait for that op, from asking to drawn: {statistics.median(wait_op) * 1000:.0f} ms")
    print(
        "  the same wait when asked 2 s after the lab shows (torch._dynamo warmed meanwhile): "
        f"{statistics.median(late_op) * 1000:.0f} ms"
    )


@dataclass
class Frames:
    """What a window reports per frame: draw and paint seconds, and when each began."""

    costs: list[float] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    ticks: list[int] = field(default_factory=list)
    on: bool = False

    def drawn(self, window: Any) -> None:
        if self.on:
            self.starts.append(time.perf_counter() - window.draw_seconds)
            self.costs.append(window.draw_seconds)
            self.ticks.append(window.controller.history.last_tick)

    def painted(self, seconds: float) -> None:
        if self.on and self.costs:
            self.costs[-1] += seconds


@dataclass
class Collections:
    """The garbage collector's pauses while measuring, from ``gc.callbacks`` (each pause holds the GIL)."""

    pauses: list[float] = field(default_factory=list)
    on: bool = False
    began: float = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.began = time.perf_counter()
        elif self.on:
            self.pauses.append(time.perf_counter() - self.began)

    def line(self, seconds: float) -> str:
        longest = 1000 * max(self.pauses, default=0.0)
        share = 100 * sum(self.pauses) / seconds if seconds > 0 else 0.0
        return f"{len(self.pauses)} collections, longest {longest:.1f} ms, {share:.1f}% of the time"


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


@dataclass(frozen=True)
class Figures:
    median: float
    p95: float
    frames: int
    fps: float
    ops_per_s: float
    interval_median: float
    interval_longest: float  # the longest wait between two frames: a stall shows here, not in a frame's time
    collector: str = ""  # the garbage collector's pauses meanwhile, where they were watched

    def line(self) -> str:
        return (
            f"frame time median {self.median:5.1f} ms, 95th percentile {self.p95:5.1f} ms; "
            f"{self.fps:4.1f} frames/s (interval median {self.interval_median:.1f} ms, "
            f"longest {self.interval_longest:.1f} ms), "
            f"{self.ops_per_s:5.0f} ops/s, {self.frames} frames"
        )


def _figures(frames: Frames, seconds: float) -> Figures:
    costs = [1000 * c for c in frames.costs[1:]]  # the first may have begun before the window
    intervals = [1000 * (b - a) for a, b in zip(frames.starts, frames.starts[1:], strict=False)]
    ops = frames.ticks[-1] - frames.ticks[0] if len(frames.ticks) > 1 else 0
    span = frames.starts[-1] - frames.starts[0] if len(frames.starts) > 1 else seconds
    return Figures(
        median=statistics.median(costs),
        p95=_p95(costs),
        frames=len(costs),
        fps=(len(frames.starts) - 1) / span if span > 0 else 0.0,
        ops_per_s=ops / span if span > 0 else 0.0,
        interval_median=statistics.median(intervals) if intervals else 0.0,
        interval_longest=max(intervals, default=0.0),
    )


def _wait_until(done: Callable[[], bool]) -> None:
    """Run the application's event loop (which waits without holding the interpreter) until ``done``."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    poll = QTimer()
    poll.timeout.connect(lambda: loop.quit() if done() else None)
    poll.start(2)
    if not done():
        loop.exec()
    poll.stop()


def _long_enough(marks: list[int], frames: int) -> Any:
    """The scenario, with room past the last mark for ``frames`` frames of full-speed Play (a frame
    shows a few hundred ops at most): Play that reached its end would show no more frames."""
    from gradviz.engine import load_scenario

    return replace(load_scenario(SCENARIO), iterations=max(marks) // 4 + 100 * frames)


def _has_ops(c: Any, ops: int, idle: bool = False) -> Callable[[], bool]:
    return lambda: (not idle or not c.busy) and c.history is not None and c.history.last_tick >= ops - 1


def play(marks: list[int], frames: int, presentation: bool) -> dict[int, Figures]:
    """At each mark: the lab stepped to that many ops in one go, then ``frames`` frames of Play measured."""
    from gradviz.gui.display import application
    from gradviz.gui.heap import tune_malloc
    from gradviz.gui.window import MainWindow, wait_until_idle

    tune_malloc()  # as the app does
    app = application()
    window = MainWindow(interactive=False)
    window.resize(*SIZE)
    window.show()
    if presentation:
        window.set_presentation(True, full_screen=False)
    scenario = _long_enough(marks, frames)
    c = window.controller
    c.open(scenario)
    wait_until_idle(window)
    record = Frames()
    window.frame_drawn.connect(lambda: record.drawn(window))
    window.painted.connect(record.painted)
    c.set_speed(0)
    collections = Collections()
    gc.callbacks.append(collections)
    out = {}
    for mark in marks:
        # The history of ``mark`` ops, as Play would have left it, without drawing them all.
        c.open(scenario, replay_iterations=mark // 4)
        _wait_until(_has_ops(c, mark, idle=True))
        c.play()
        _wait_until(_has_ops(c, mark + 100))  # under way
        record.on = collections.on = True
        start = time.perf_counter()
        _wait_until(lambda: len(record.costs) >= frames + 1)
        record.on = collections.on = False
        c.pause()
        seconds = time.perf_counter() - start
        out[mark] = replace(_figures(record, seconds), collector=collections.line(seconds))
        record.costs, record.starts, record.ticks, collections.pauses = [], [], [], []
        wait_until_idle(window)
    gc.callbacks.remove(collections)
    c.shutdown()
    window.close()
    window.deleteLater()
    app.processEvents()
    return out


def parts(marks: list[int], frames: int, peer_median: float) -> None:
    """Where a frame's time goes at each mark: each view's drawing and each plot's painting,
    also as a share of the peer's median frame (``peer_median``, in ms); the whole frame as
    the window reports it, and what lies outside the views (the window's own widgets, Qt's
    layouts and the scenes' bookkeeping), with the layouts and paints of the window's widgets
    per frame."""
    from collections import Counter, defaultdict

    from PySide6.QtCore import QEvent, QObject
    from PySide6.QtWidgets import QApplication, QWidget

    from gradviz.gui.display import application
    from gradviz.gui.window import MainWindow, wait_until_idle

    application()
    window = MainWindow(interactive=False)
    window.resize(*SIZE)
    window.show()
    spent: dict[str, list[float]] = defaultdict(list)

    def timed(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            start = time.perf_counter()
            out = call(*args)
            spent[name].append(time.perf_counter() - start)
            return out

        return run

    class Census(QObject):
        """Layout requests and paint events reaching the window's widgets, by widget name."""

        def __init__(self) -> None:
            super().__init__()
            self.layouts: Counter[str] = Counter()
            self.paints: Counter[str] = Counter()

        def eventFilter(self, watched: QObject, event: QEvent) -> bool:
            kind = event.type()
            counted = kind in (QEvent.Type.LayoutRequest, QEvent.Type.Paint) and isinstance(watched, QWidget)
            if counted and (watched is window or window.isAncestorOf(watched)):
                name = watched.objectName() or type(watched).__name__
                (self.layouts if kind == QEvent.Type.LayoutRequest else self.paints)[name] += 1
            return False

    census = Census()
    QApplication.instance().installEventFilter(census)  # type: ignore[union-attr]
    whole = Frames()
    window.frame_drawn.connect(lambda: whole.drawn(window))
    window.painted.connect(whole.painted)
    for key, view in window.panels.items():
        view.draw = timed(f"draw {key}", view.draw)  # type: ignore[attr-defined]
    painted = {"timeline": window.timeline.graphics, "surface": window.surface.plot_widget}
    for key, widget in {**painted, "grads": window.grads.table}.items():
        widget.paintEvent = timed(f"paint {key}", widget.paintEvent)  # type: ignore[method-assign]
    scenario = _long_enough(marks, frames)
    c = window.controller
    c.open(scenario)
    wait_until_idle(window)
    c.set_speed(0)
    for mark in marks:
        c.open(scenario, replay_iterations=mark // 4)
        _wait_until(_has_ops(c, mark, idle=True))
        c.play()
        _wait_until(_has_ops(c, mark + 100))
        spent.clear()
        census.layouts.clear()
        census.paints.clear()
        whole.costs, whole.starts, whole.ticks, whole.on = [], [], [], True
        first = window.frames
        _wait_until(lambda first=first: window.frames >= first + frames)  # type: ignore[misc]
        whole.on = False
        c.pause()
        wait_until_idle(window)
        shown = window.frames - first
        cells = ", ".join(f"{name} {1000 * sum(v) / shown:.1f}" for name, v in sorted(spent.items()))
        print(f"  after {mark:6,d} ops, ms per frame: {cells}")
        # A view painted more often than the window draws pays for its paint twice.
        painted = sorted((name[6:], len(v)) for name, v in spent.items() if name.startswith("paint "))
        paints = ", ".join(f"{name} {count / shown:.2f}" for name, count in painted)
        print(f"  {'':16s}paints per frame: {paints}")
        shares = sorted((name, 1000 * sum(v) / shown / peer_median) for name, v in spent.items())
        ratios = ", ".join(f"{name} {share:.2f}" for name, share in shares)
        print(f"  {'':16s}ms per frame / peer median: {ratios}")
        frame = 1000 * sum(whole.costs) / max(len(whole.costs), 1)
        views = 1000 * sum(sum(v) for v in spent.values()) / shown
        print(
            f"  {'':16s}the whole frame {frame:.1f} ms, of which the views' drawing and painting "
            f"{views:.1f}, outside them {frame - views:.1f}"
        )
        for title, counts in (("layouts", census.layouts), ("paints", census.paints)):
            most = ", ".join(f"{name} {n / shown:.2f}" for name, n in counts.most_common(8))
            print(f"  {'':16s}{title} per frame: {most or 'none'}")
    QApplication.instance().removeEventFilter(census)  # type: ignore[union-attr]
    c.shutdown()


def peer(frames: int, points: int = 2000) -> Figures:
    """A bare pyqtgraph window of the same size: ``setData`` on two curves, painted, in a loop."""
    import numpy as np
    import pyqtgraph as pg

    from gradviz.gui.display import application

    app = application()
    widget = pg.PlotWidget()
    widget.resize(*SIZE)
    widget.show()
    curves = [widget.plot(pen=pg.mkPen(colour, width=2)) for colour in ("#0072B2", "#D55E00")]
    rng = np.random.default_rng(0)
    x = np.arange(points, dtype=np.float64)
    record = Frames(on=True)
    for _ in range(5):
        app.processEvents()
    for _ in range(frames + 1):
        start = time.perf_counter()
        for curve in curves:
            curve.setData(x, np.cumsum(rng.standard_normal(points)))
        # Twice: the scene's change reaches the view in one pass and is painted in the next.
        app.processEvents()
        app.processEvents()
        record.starts.append(start)
        record.costs.append(time.perf_counter() - start)
        record.ticks.append(0)
    widget.close()
    return _figures(record, 0.0)


def headless(ops: int) -> float:
    """Ops per second of the engine alone, the same scenario and ops."""
    from gradviz.engine import Lab, load_scenario
    from gradviz.engine.lab import set_threads

    set_threads(1)
    lab = Lab(replace(load_scenario(SCENARIO), iterations=ops // 4 + 1))
    start = time.perf_counter()
    while lab.tick < ops:
        lab.step()
    return ops / (time.perf_counter() - start)


def play_apart(marks: list[int], frames: int, presentation: bool) -> dict[int, Figures]:
    """:func:`play` in a process of its own, so that neither mode inherits the other's window and lab
    (a full collection would walk them too)."""
    mode = "presentation" if presentation else "default"
    marks_text = ",".join(map(str, marks))
    command = [sys.executable, __file__, "--mode", mode, "--marks", marks_text, "--frames", str(frames)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return {int(mark): Figures(**figures) for mark, figures in json.loads(done.stdout).items()}


def report(marks: list[int], frames: int) -> None:
    platform = os.environ["QT_QPA_PLATFORM"]
    base = peer(frames)
    print(f"Play of {SCENARIO} at full speed, {SIZE[0]}x{SIZE[1]} ({platform}):")
    for presentation in (False, True):
        name = "presentation mode" if presentation else "default views"
        figures = play_apart(marks, frames, presentation)
        for mark, f in figures.items():
            print(
                f"  {name:17s} after {mark:6,d} ops: {f.line()}  (median / peer {f.median / base.median:.2f})"
            )
            print(f"  {'':17s} {'':16s}garbage collector: {f.collector}")
        first, last = figures[marks[0]], figures[marks[-1]]
        print(
            f"  {name:17s} {marks[-1]:,d} vs {marks[0]:,d} ops: median {last.median / first.median:.2f}x, "
            f"95th percentile {last.p95 / first.p95:.2f}x"
        )
    print(f"  peer, bare pyqtgraph setData (2 curves of 2,000 points): {base.line()}")
    rate = headless(marks[0])
    print(f"  peer, the headless engine: {rate:.0f} ops/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--marks", default="2000,50000", help="ops done before each measurement")
    parser.add_argument("--frames", type=int, default=120, help="frames measured at each mark")
    parser.add_argument("--rounds", type=int, default=3, help="start-up rounds")
    parser.add_argument("--parts", action="store_true", help="each view's drawing and painting instead")
    parser.add_argument("--mode", choices=("default", "presentation"), help="only one mode's Play, as JSON")
    args = parser.parse_args()
    marks = sorted(int(m) for m in args.marks.split(","))
    if args.mode:
        figures = play(marks, args.frames, args.mode == "presentation")
        print(json.dumps({mark: asdict(f) for mark, f in figures.items()}))
        return
    if args.parts:
        base = peer(args.frames)
        print(f"Where the default views' frame time goes during full-speed Play of {SCENARIO}:")
        parts(marks, args.frames, base.median)
        print(f"  peer, bare pyqtgraph setData (2 curves of 2,000 points): {base.line()}")
        return
    report(marks, args.frames)
    start_up(args.rounds)


if __name__ == "__main__":
    main()
