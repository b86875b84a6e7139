"""The 2-D surface view drawing a frame after 2,000 and after 50,000 ops: flat with history?

The history is forgot-zero-grad's real first 2,000 ops laid end to end 25 times, so
a 50,000-op history is built in seconds instead of minutes of stepping; every
point drawn is a real record's. Printed for each mark: the view's ``draw`` and
``draw`` + paint per frame (a full-speed Play frame: the newest op, then a
paint), and the path points handed to the plot; then the ratios 50k / 2k,
measured in the same process (on a shared machine read the ratios, not the
milliseconds).

Run: ``PYTHONPATH=. QT_QPA_PLATFORM=offscreen python bench/bench_surface_paths.py [--frames 40]``.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace

MARKS = (2_000, 50_000)
LAP = 2_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=40, help="frames timed at each mark")
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    from gradviz.engine import Lab, load_scenario
    from gradviz.gui.display import application
    from gradviz.gui.views.surface import SurfaceView
    from gradviz.gui.window_history import Moment, StepResult, WindowHistory, describe_lab, entries_since

    application()
    lab = Lab(replace(load_scenario("forgot-zero-grad"), iterations=LAP // 4))
    while lab.tick < LAP:
        lab.step()
    info, entries = describe_lab(lab), entries_since(lab, {})
    history = WindowHistory(info)
    for lap in range(max(MARKS) // LAP):
        shifted = {
            name: tuple(replace(e, tick=e.tick + LAP * lap) for e in run) for name, run in entries.items()
        }
        history.extend(StepResult(shifted, (), {}, -2, {}, False))
    view = SurfaceView()
    view.resize(640, 480)
    view.show()
    view.set_lab(info)
    figures = {}
    print(f"The surface view during Play of forgot-zero-grad, {view.width()}x{view.height()}:")
    for mark in MARKS:
        view.draw(Moment(info, history, mark - args.frames - 20))  # the history up to here is projected once
        view.plot_widget.grab()
        drawing = 0.0
        start = time.perf_counter()
        for k in range(args.frames):
            began = time.perf_counter()
            view.draw(Moment(info, history, mark - args.frames + k))
            drawing += time.perf_counter() - began
            view.plot_widget.grab()
        whole = (time.perf_counter() - start) / args.frames
        points = sum(len(items.path.getData()[0]) for items in view.items)
        figures[mark] = (1000 * drawing / args.frames, 1000 * whole, points)
        print(
            f"  after {mark:6,d} ops: draw {figures[mark][0]:.1f} ms, draw + paint {figures[mark][1]:.1f} ms "
            f"a frame, {points:,d} path points drawn"
        )
    short, long = figures[MARKS[0]], figures[MARKS[1]]
    print(
        f"  50k / 2k: draw {long[0] / short[0]:.2f}x, draw + paint {long[1] / short[1]:.2f}x, "
        f"points {long[2] / short[2]:.2f}x (flat with history: about 1x)"
    )


if __name__ == "__main__":
    main()
