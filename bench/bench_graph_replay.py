"""Cost of walking again the graph of a backward a view was closed for, by the iteration it lies in.

The graph view, opened after a run's ``backward()`` raised, has the lab's thread walk that
backward's graph again (:func:`~gradviz.engine.graph.replay_graph`): a copy of the run performs
its ops again from the lab's keyframe before that iteration. Its peer is what ``gradviz graph``
does, :func:`~gradviz.engine.graph.capture_graph`: a lab of its own from the scenario's start.
Times are the median thread CPU time of a few tries; the keyframe's replay should stay flat
whatever the iteration, the peer grow with it.

Run: ``python bench/bench_graph_replay.py [--tries N]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import MLP

from gradviz.engine.graph import capture_graph, replay_graph
from gradviz.engine.lab import Lab, set_threads
from gradviz.engine.scenario import loads_scenario

ITERATIONS = (0, 50, 500, 2000)


def timed(call: Callable[[], object], tries: int) -> float:
    times = []
    for _ in range(tries):
        start = time.thread_time()
        call()
        times.append(time.thread_time() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=5, help="tries of each (default 5)")
    args = parser.parse_args()
    set_threads(1)
    scenario = loads_scenario(MLP, "bench").with_overrides(iterations=max(ITERATIONS) + 1, device="cpu")
    lab = Lab(scenario)
    lab.run_iterations(max(ITERATIONS) + 1)
    run = lab.runs[0]
    r = 0
    tpi = lab.ticks_per_iteration
    backward = next(s for s in range(tpi) if (o := lab.schedule[s][r]) is not None and o.op == "backward")
    print(f"{scenario.name} ({lab.mode} records): one backward's graph walked again, ms of CPU time")
    print(f"{'iteration':>9} {'from keyframe':>14} {'from start':>11} {'ratio':>7}")
    for it in ITERATIONS:
        tick = it * tpi + backward
        again = timed(lambda tick=tick: replay_graph(lab, run.name, tick), args.tries)
        peer = timed(lambda it=it: capture_graph(scenario, run.name, it), max(1, args.tries // 2))
        print(f"{it:>9} {again * 1e3:>14.1f} {peer * 1e3:>11.1f} {peer / again:>7.1f}")


if __name__ == "__main__":
    main()
