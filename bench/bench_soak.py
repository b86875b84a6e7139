"""A soak: full-speed Play of ``forgot-zero-grad`` for minutes, in a 1280x720 window.

Prints, each minute, the ops the runs performed and the frames drawn in that minute, the
median frame's time on the GUI thread (drawing and painting) and the process's resident
memory, then the last minute against the first. The scenario runs its longest (a million
iterations); where it ends before the minutes do, it is opened again and played on.
Offscreen unless a display is set.

With ``--bytes-per-op`` it measures instead, headless, what the history grows by per op in the
far past (past ``--warm`` ops: the recent records full and the columns' whole part thinned): the
lab's history, the window's copy fed from it as the worker feeds it, and the surface paths drawn
from that copy, traced with ``tracemalloc``, by part and by the line that grew it.

Run: ``python bench/bench_soak.py [--minutes 60] [--scenario NAME] [--bytes-per-op [--warm N] [--ops N]]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

SIZE = (1280, 720)


def resident_mb() -> float:
    """This process's resident memory in MB (``VmRSS``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# Where each part of the history lives: an allocation counts for the innermost of its two frames in
# one of these files (so a column's append, in engine/columns.py, counts for the line calling it).
PARTS = {
    "record.py": "lab",
    "lab.py": "lab",
    "run.py": "lab",
    "window_history.py": "window",
    "surface_state.py": "surface",
    "surface_path.py": "surface",
}


def _owner(traceback: tracemalloc.Traceback) -> tuple[str, int] | None:
    """The file and line of ``traceback``'s innermost frame in one of :data:`PARTS`."""
    for frame in reversed(traceback):
        name = Path(frame.filename).name
        if name in PARTS and "gradviz" in frame.filename:
            return name, frame.lineno
    return None


def breakdown(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, ops: int) -> None:
    """Print what grew between two snapshots, per op, by part and by the line that grew it."""
    import linecache

    by_line: dict[tuple[str, int], int] = {}
    for stat in after.compare_to(before, "traceback"):
        owner = _owner(stat.traceback)
        key = owner if owner is not None else ("elsewhere", 0)
        by_line[key] = by_line.get(key, 0) + stat.size_diff
    paths = {Path(f.filename).name: f.filename for s in after.traces for f in s.traceback}
    parts: dict[str, int] = {}
    for (name, _), size in by_line.items():
        part = PARTS.get(name, "elsewhere")
        parts[part] = parts.get(part, 0) + size
    shares = ", ".join(f"{part} {size / ops:.1f}" for part, size in sorted(parts.items()))
    print(f"  by part: {shares} B/op")
    for (name, line), size in sorted(by_line.items(), key=lambda kv: -abs(kv[1])):
        if abs(size) / ops < 0.05:
            continue
        code = linecache.getline(paths.get(name, name), line).strip() if line else "(outside the history)"
        print(f"  {size / ops:7.2f} B/op  {name}:{line}  {code[:72]}")


def bytes_per_op(scenario: str, warm: int, settle: int, ops: int) -> None:
    """Print the bytes the history grows by per op over ``ops`` ops, after ``warm`` ops (the recent
    records full, and past :data:`~gradviz.engine.columns.WHOLE` ops per run, the far past), and
    what grew, by part (the lab's history, the window's copy, the surface paths) and by the line
    that grew it.

    Tracing starts after ``warm`` (tracing them would take several times as long), then ``settle``
    ops are played before measuring, long enough for every column to thin once: a buffer
    allocated before tracing counts whole when it first moves, so a shorter ``settle`` errs high.
    """
    from gradviz.engine import load_scenario
    from gradviz.engine.lab import RECENT_OPS, Lab, set_threads
    from gradviz.gui.surface_state import SurfaceState
    from gradviz.gui.window_history import Moment, StepResult, WindowHistory, describe_lab, entries_since

    set_threads(1)
    lab = Lab(replace(load_scenario(scenario), iterations=1_000_000))
    info = describe_lab(lab)
    window = WindowHistory(info)
    surface = SurfaceState()
    surface.set_lab(info)
    known = {r.name: 0 for r in lab.runs}
    statuses = {r.name: None for r in lab.runs}

    def play(n: int, frame: int = 50) -> None:
        """``n`` ops, handed to the window's copy and drawn ``frame`` at a time, as Play does."""
        end = lab.tick + n
        while lab.tick < end:
            distance = []
            for _ in range(frame):
                lab.step()
                distance.append((lab.tick - 1, (0.0,) * (len(lab.runs) - 1)))
            window.extend(StepResult(entries_since(lab, known), tuple(distance), statuses, -2, {}, False))
            known.update({r.name: len(lab.history[r.name]) for r in lab.runs})
            for i, path in enumerate(surface.paths(Moment(info, window, window.last_tick))):
                surface.drawn(i, len(path))

    play(warm)
    tracemalloc.start(2)
    play(settle)
    snapshot = tracemalloc.take_snapshot()
    before = tracemalloc.get_traced_memory()[0]
    play(ops)
    grown = tracemalloc.get_traced_memory()[0] - before
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    per_run = ", ".join(f"{r.name} {len(lab.history[r.name]):,}" for r in lab.runs)
    print(f"history of {scenario}: lab, the window's copy and the surface paths (tracemalloc)")
    print(f"  an op is a tick of the lab's clock, as the soak counts them; ops per run at the end: {per_run}")
    kept = f"{RECENT_OPS:,} records kept per run"
    print(f"  {grown / ops:.1f} B per op over {ops:,} ops, after {warm + settle:,} ({kept})")
    breakdown(snapshot, after, ops)
    print(f"  an hour at 80,000 ops a minute (4.8 million ops): {grown / ops * 4.8e6 / 1e6:+.0f} MB")


def soak(minutes: float, scenario: str) -> None:
    from PySide6.QtCore import QEventLoop, QTimer

    from gradviz.engine import load_scenario
    from gradviz.gui.display import application
    from gradviz.gui.heap import tune_malloc
    from gradviz.gui.window import MainWindow, wait_until_idle

    tune_malloc()  # as the app does
    application()
    window = MainWindow(interactive=False)
    window.resize(*SIZE)
    window.show()
    c = window.controller
    # The most iterations a scenario may have: 4 million ops, some minutes of Play here. At its end
    # the scenario is opened again and played on, as a lecturer starts it over.
    longest = replace(load_scenario(scenario), iterations=1_000_000)

    def start_over() -> None:
        c.open(longest)
        wait_until_idle(window)
        if c.history is None:
            raise SystemExit(f"bench_soak: {window.last_error}")

    start_over()
    start_mb = resident_mb()
    print(f"soak of {scenario} at full speed, {SIZE[0]}x{SIZE[1]} ({os.environ['QT_QPA_PLATFORM']})")
    print(f"resident memory at the start: {start_mb:.0f} MB")
    print(" minute     ops  ops/s  frames  frames/s  frame ms  resident MB  (above start)")
    c.set_speed(0)
    c.play()
    rows = []
    ended = 0  # the ops of the labs played to their end

    def played() -> int:
        """Ops performed so far by every run: a tick of a run that stopped (``yours`` of
        forgot-zero-grad diverges some minutes in) or waits performs none of its own."""
        assert c.history is not None
        return ended + sum(len(h) for h in c.history.runs.values())

    # Each frame's time on the GUI thread: the views' drawing, then Qt's painting of what changed.
    costs: list[float] = []

    def painted(seconds: float) -> None:
        if costs:
            costs[-1] += seconds

    window.frame_drawn.connect(lambda: costs.append(window.draw_seconds))
    window.painted.connect(painted)
    ops_before, frames_before = played(), window.frames
    span = min(60.0, minutes * 60)
    for minute in range(1, max(1, round(minutes)) + 1):
        deadline = time.monotonic() + span
        while (left := deadline - time.monotonic()) > 0:
            # The application's own event loop, as in the app: it waits without holding the interpreter.
            loop = QEventLoop()
            QTimer.singleShot(int(left * 1000), loop.quit)
            c.playing_changed.connect(loop.quit)
            loop.exec()
            c.playing_changed.disconnect(loop.quit)
            if not c.playing:
                ended = played()
                print("        the scenario ended: opened again, and played on", flush=True)
                start_over()
                c.play()
        ops, frames = played(), window.frames
        mb = resident_mb()
        row = (ops - ops_before, frames - frames_before, mb)
        rows.append(row)
        frame_ms = statistics.median(costs) * 1000 if costs else float("nan")
        costs.clear()
        print(
            f" {minute:6d} {row[0]:7d} {row[0] / span:6.0f} {row[1]:7d} {row[1] / span:9.1f} {frame_ms:9.1f}"
            f" {mb:12.0f}  ({mb - start_mb:+.0f})",
            flush=True,
        )
        ops_before, frames_before = ops, frames
    c.pause()
    wait_until_idle(window)
    c.shutdown()
    if len(rows) > 1:
        (o1, f1, _), (o2, f2, _) = rows[0], rows[-1]
        print(f"last minute / first: ops {o2 / o1:.2f}, frames {f2 / f1:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--scenario", default="forgot-zero-grad")
    parser.add_argument("--bytes-per-op", action="store_true", help="measure the history's growth, headless")
    parser.add_argument("--ops", type=int, default=40_000, help="ops measured with --bytes-per-op")
    # Past the columns' whole part and its first thinning for every run (a run of forgot-zero-grad
    # has 3 ops in 4 ticks; each keeps WHOLE ops exactly, an eighth more before thinning them).
    parser.add_argument("--warm", type=int, default=280_000, help="ops before tracing starts")
    parser.add_argument("--settle", type=int, default=40_000, help="ops traced before those measured")
    args = parser.parse_args()
    if args.bytes_per_op:
        bytes_per_op(args.scenario, warm=args.warm, settle=args.settle, ops=args.ops)
    else:
        soak(args.minutes, args.scenario)


if __name__ == "__main__":
    main()
