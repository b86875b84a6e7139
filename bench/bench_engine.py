"""Cost of recording, history memory, and time to rebuild an op by replay.

Each figure is a ratio against a peer measured in the same process (bare loop
versus recorded loop, interleaved in rounds), because machines here are shared
and noisy. Run: ``python bench/bench_engine.py [--iterations N]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable

from gradviz.engine.copying import HeldGrads
from gradviz.engine.lab import Lab, set_threads
from gradviz.engine.run import Run
from gradviz.engine.scenario import loads_scenario

LINEAR = """
name = "bench-linear"
[model]
kind = "linear"
[data]
kind = "line"
n = 1000
batch_size = 32
[optimizer]
kind = "SGD"
lr = 0.05
momentum = 0.9
"""

MLP = """
name = "bench-mlp-17k"
[model]
kind = "mlp"
widths = [128, 128]
[data]
kind = "wave"
n = 1000
batch_size = 32
[optimizer]
kind = "Adam"
lr = 0.001
"""


def overhead(text: str, iterations: int, rounds: int) -> tuple[float, float, Lab]:
    """Recorded/bare time ratio, and recorded iterations per second.

    Both labs live side by side and take turns in short chunks, in random
    order, so that drifts of a shared machine hit both alike; the ratio is
    the median over rounds of the two chunk times' ratio in each round
    (steadier than the ratio of their medians, which a drift longer than a
    round but shorter than the run moves).
    """
    scenario = loads_scenario(text, "bench")
    labs = {"bare": Lab(scenario, record="bare"), "recorded": Lab(scenario)}
    for lab in labs.values():
        lab.run_iterations(20)  # first-call costs (optimizer state creation) stay out
    times: dict[str, list[float]] = {name: [] for name in labs}
    for _ in range(rounds):
        order = list(labs)
        random.shuffle(order)
        for name in order:
            lab = labs[name]
            start = time.perf_counter()
            lab.run_iterations(iterations)
            times[name].append(time.perf_counter() - start)
    ratios = [r / b for r, b in zip(times["recorded"], times["bare"], strict=True)]
    return statistics.median(ratios), iterations / statistics.median(times["recorded"]), labs["recorded"]


def memory_per_iteration(text: str, iterations: int) -> tuple[float, int, str]:
    """Memory the history grows by per iteration.

    tracemalloc sees Python objects and numpy's arrays (where every copy the
    history keeps lives); PyTorch's allocator it does not see, so the tensors
    that full records keep by reference (what each backward delivered, and
    ``.grad`` tensors held instead of copied) are added by their size.
    """
    lab = Lab(loads_scenario(text, "bench"))
    lab.run_iterations(1)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    lab.run_iterations(iterations)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    for run in lab.runs:
        h = lab.history[run.name]
        if h.keep_records:
            caught = (rec.fresh for rec in h.records if isinstance(rec.fresh, tuple))
            grown += sum(t.nbytes for fresh in caught for t in fresh if t is not None)
            grads = {id(e[7]): e[7] for e in h.entries if isinstance(e[7], HeldGrads)}  # each once
            grown += sum(g.held_bytes for g in grads.values())
    return grown / iterations, lab.keyframe_every, lab.mode


def plain_loop(lab: Lab, iterations: int) -> Callable[[], None]:
    """``iterations`` of the lab's loop written out plainly, on a fresh copy of its first run
    (its model, optimizer and batches, none of the lab): the peer of a rebuild."""
    run = Run(lab.scenario.runs[0], lab.scenario, lab.device)
    (phase,) = run.phases.values()
    (optimizer,) = run.optimizers.values()

    def loop() -> None:
        for i in range(iterations):
            optimizer.zero_grad()
            loss = run.task.loss(phase, run.task.batch(i), i, run.loop)
            loss.item()
            loss.backward()
            optimizer.step()

    return loop


def rebuild_times(lab: Lab, samples: int, repeats: int = 7) -> tuple[float, float, float]:
    """Median time to rebuild the full record of a random op, the worst case, and its peer.

    The worst case is the op farthest from the keyframe before it (the last op
    before the next keyframe): the median of ``repeats`` rebuilds of it, so that
    one hiccup of a shared machine does not stand for the engine. Its peer is
    the same number of iterations as a plain PyTorch loop, timed in turns with it.
    """
    name = lab.runs[0].name
    h = lab.history[name]
    times = []
    for _ in range(samples):
        index = random.randrange(len(h))
        start = time.perf_counter()
        rec = lab.record(name, index)
        times.append(time.perf_counter() - start)
        assert rec.index == index
    last_keyframe = max(k for k in h.keyframes if k < lab.iteration)
    farthest = h.index_at(last_keyframe * lab.ticks_per_iteration - 1)
    turns = {"rebuild": lambda: lab.record(name, farthest), "plain": plain_loop(lab, lab.keyframe_every)}
    spent: dict[str, list[float]] = {key: [] for key in turns}
    for _ in range(repeats):
        for key, call in turns.items():
            start = time.perf_counter()
            call()
            spent[key].append(time.perf_counter() - start)
    return statistics.median(times), statistics.median(spent["rebuild"]), statistics.median(spent["plain"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=25, help="iterations per timed chunk")
    parser.add_argument("--rounds", type=int, default=200, help="chunks per lab")
    parser.add_argument("--memory-iterations", type=int, default=10_000)
    args = parser.parse_args()
    set_threads(1)
    random.seed(0)
    for label, text in (("linear regression, SGD", LINEAR), ("MLP 2-128-128-1 (17k), Adam", MLP)):
        ratio, rate, lab = overhead(text, args.iterations, args.rounds)
        print(f"{label}")
        print(f"  recorded iterations/s      {rate:10.0f}")
        print(f"  recorded / bare time       {ratio:10.3f}   (must be <= 1.10)")
        per_it, every, mode = memory_per_iteration(text, args.memory_iterations)
        print(
            f"  history per iteration      {per_it:10.0f} B over {args.memory_iterations} iterations"
            f" ({mode} records, keyframe every {every})"
        )
        lab = Lab(loads_scenario(text, "bench"))
        lab.run_iterations(min(args.memory_iterations, 2000))
        median, worst, plain = rebuild_times(lab, 50)
        print(
            f"  rebuild one op             {median * 1e3:10.2f} ms for a random op, "
            f"{worst * 1e3:.2f} ms for the farthest from a keyframe (must be <= 50)"
        )
        print(
            f"  the same {lab.keyframe_every} iteration(s) as a plain PyTorch loop "
            f"{plain * 1e3:.2f} ms (rebuild / plain {worst / plain:.2f})"
        )


if __name__ == "__main__":
    main()
