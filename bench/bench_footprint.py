"""Cost of measuring autograd's footprint (saved bytes, graph nodes) per op, against the same lab without it.

Two labs of one scenario step side by side, in turns of random order (machines here
are shared and noisy; the figure is the median over rounds of the ratio within a
round): ``off`` records full records as every lab does; ``on`` also counts the
tensors saved for backward through ``saved_tensors_hooks`` and walks each
backward's graph (what a lesson that leads with memory turns on).

Run: ``python bench/bench_footprint.py [--iterations N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from gradviz.engine.lab import Lab, set_threads
from gradviz.engine.scenario import load_builtin


def ratio(name: str, iterations: int, rounds: int) -> tuple[float, float]:
    """Median on/off time ratio over rounds, and the ``off`` lab's ops per second."""
    scenario = load_builtin(name)
    labs = {"off": Lab(scenario), "on": Lab(scenario)}
    for run in labs["off"].runs:
        run.measures = False
    assert all(run.measures for run in labs["on"].runs)
    times: dict[str, list[float]] = {k: [] for k in labs}
    for _ in range(rounds):
        order = list(labs)
        random.shuffle(order)
        for key in order:
            lab = labs[key]
            if lab.iteration + iterations > scenario.iterations:
                lab.seek(-1)  # a built-in is short: start it again, outside the timing
            start = time.perf_counter()
            lab.run_iterations(iterations)
            times[key].append(time.perf_counter() - start)
    ratios = [a / b for a, b in zip(times["on"], times["off"], strict=True)]
    ops = iterations * labs["off"].ticks_per_iteration * len(labs["off"].runs)
    return statistics.median(ratios), ops / statistics.median(times["off"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=3, help="iterations per timed turn")
    parser.add_argument("--rounds", type=int, default=200, help="turns per lab")
    args = parser.parse_args()
    set_threads(1)
    random.seed(0)
    for name in ("virtual-batch", "rnn-tbptt"):
        r, rate = ratio(name, args.iterations, args.rounds)
        print(f"{name}")
        print(f"  ops/s without measuring    {rate:10.0f}")
        print(f"  measuring / not            {r:10.3f}")


if __name__ == "__main__":
    main()
