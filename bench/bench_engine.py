"""Cost of recording, history memory, and time to rebuild an op by replay, each beside its peer.

Each figure is a ratio against a peer measured in the same process, because
machines here are shared and noisy:

- recording: the recorded loop against the same lab recording nothing
  (``record="bare"``), interleaved in rounds; at most ``RECORDING_TARGET``. Beside
  it, a lab making the same copies of ``.grad``, weights and optimizer state and
  keeping nothing (:func:`copies_only`): what any record of real values costs;
- rebuilding the op farthest from a keyframe (every op before it since the
  keyframe replayed) against the same iterations written as a plain PyTorch
  loop; at most ``REBUILD_TARGET``;
- history memory per iteration (tracemalloc: records hold numpy copies and
  Python objects only, no tensor), for the 17k-parameter MLP with Adam at most
  ``MEMORY_TARGET`` bytes; for the small model, with full records for the
  recent past and after they are thinned to keyframes further back.

Each model's figures depend on what ran before them in the process (a long lab run earlier
makes a later recording measurably slower); ``--models linear`` measures one alone.

Run: ``python bench/bench_engine.py [--iterations N] [--rounds R] [--models mlp,linear]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from gradviz.engine.collector import set_aside_imports
from gradviz.engine.lab import Lab, set_threads
from gradviz.engine.record import FAR_KEYFRAME_BYTES, SPARSE_AFTER, THINNED_EVERY
from gradviz.engine.run import Run
from gradviz.engine.scenario import loads_scenario

RECORDING_TARGET = 1.25
REBUILD_TARGET = 1.2
MEMORY_TARGET = 4096

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

# A large model (its lab keeps no full records), in a file of its own so that the soak can play it
# too: ``bench_soak.py --scenario bench/mlp-17k.toml``.
MLP = (Path(__file__).parent / "mlp-17k.toml").read_text()


def copies_only(text: str) -> Lab:
    """A lab of full records whose runs make the copies a record is made of (every ``.grad`` after an op
    that may write one, the weights and optimizer state after a step) and keep nothing of them:
    what recording costs before any norm or history."""
    lab = Lab(loads_scenario(text, "bench"))
    for run in lab.runs:

        def copy(op: str, run: Run = run) -> None:
            if op in run._grad_writers:
                run._copy_grads()
            if op == "step":
                run._weights_now()

        run._copy_changes = copy  # type: ignore[method-assign]
    return lab


def overhead(text: str, iterations: int, rounds: int) -> tuple[dict[str, float], float]:
    """Time ratios to the bare lab of the recorded lab and, where it keeps full records, of
    :func:`copies_only`'s; and the recorded iterations per second.

    The labs live side by side and take turns in short chunks, in random
    order, so that drifts of a shared machine hit them alike; a ratio is
    the median over rounds of the two chunk times' ratio in each round
    (steadier than the ratio of their medians, which a drift longer than a
    round but shorter than the run moves).
    """
    scenario = loads_scenario(text, "bench")
    labs = {"bare": Lab(scenario, record="bare"), "recorded": Lab(scenario)}
    if labs["recorded"].mode == "full":
        labs["copies"] = copies_only(text)
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
    ratios = {
        name: statistics.median([t / b for t, b in zip(times[name], times["bare"], strict=True)])
        for name in labs
    }
    return ratios, iterations / statistics.median(times["recorded"])


def _overhead_rows(text: str, args: argparse.Namespace) -> None:
    ratios, rate = overhead(text, args.iterations, args.rounds)
    _row("recorded iterations/s", f"{rate:.0f}")
    _row("recorded / bare time", f"{ratios['recorded']:.3f}", _verdict(ratios["recorded"], RECORDING_TARGET))
    if "copies" in ratios:
        _row("its copies alone / bare time", f"{ratios['copies']:.3f}", "(the same copies, nothing kept)")


def memory_per_iteration(lab: Lab, skip: int, iterations: int) -> float:
    """Bytes the lab's history grows by per iteration over ``iterations``, after ``skip`` more.

    Traced from before the skipped iterations, so that the records thinned
    while measuring count as freed.
    """
    lab.run_iterations(1)  # the first step creates the optimizer's state
    tracemalloc.start()
    lab.run_iterations(skip)
    before = tracemalloc.get_traced_memory()[0]
    lab.run_iterations(iterations)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return grown / iterations


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


def rebuild_times(lab: Lab, every: int, samples: int, repeats: int = 31) -> tuple[float, float, float]:
    """Median time to rebuild the record of a random op of the past, the worst case, and its peer.

    The worst case is the op farthest from the keyframe before it (the last op
    before the next keyframe, ``every`` iterations on): the median of
    ``repeats`` rebuilds of it, timed in turns with its peer, the same
    iterations as a plain PyTorch loop.
    """
    name = lab.runs[0].name
    h = lab.history[name]
    oldest = h.recent_from if h.keep_records else len(h)
    times = []
    for _ in range(samples):
        index = random.randrange(oldest)
        start = time.perf_counter()
        rec = lab.record(name, index)
        times.append(time.perf_counter() - start)
        assert rec.index == index
    keyframes = sorted(k for k in h.keyframes if (k + every) * lab.ticks_per_iteration <= h.ticks[oldest - 1])
    farthest = h.index_at((keyframes[-1] + every) * lab.ticks_per_iteration - 1)
    turns = {"rebuild": lambda: lab.record(name, farthest), "plain": plain_loop(lab, every)}
    spent: dict[str, list[float]] = {key: [] for key in turns}
    for _ in range(repeats):
        for key in random.sample(list(turns), 2):
            start = time.perf_counter()
            turns[key]()
            spent[key].append(time.perf_counter() - start)
    return statistics.median(times), statistics.median(spent["rebuild"]), statistics.median(spent["plain"])


def _row(label: str, value: str, note: str = "") -> None:
    print(f"  {label:<34}{value:>12}  {note}".rstrip())


def _verdict(value: float, target: float) -> str:
    return f"(must be <= {target:g}: {'met' if value <= target else 'MISSED'})"


def _rebuild_rows(lab: Lab, every: int, what: str) -> None:
    median, worst, plain = rebuild_times(lab, every, 30)
    _row(f"rebuild a random {what}", f"{median * 1e3:.2f} ms")
    _row("rebuild the farthest op", f"{worst * 1e3:.2f} ms", f"({every} iterations replayed)")
    _row("the same as a plain PyTorch loop", f"{plain * 1e3:.2f} ms")
    _row("rebuild / plain", f"{worst / plain:.3f}", _verdict(worst / plain, REBUILD_TARGET))


def _mlp(args: argparse.Namespace) -> None:
    n = args.memory_iterations
    print("MLP 2-128-128-1 (17k parameters), Adam: keyframes, no full records")
    _overhead_rows(MLP, args)
    lab = Lab(loads_scenario(MLP, "bench"))
    per_it = memory_per_iteration(lab, 0, n)
    _row("history per iteration", f"{per_it:.0f} B", f"over {n} iterations {_verdict(per_it, MEMORY_TARGET)}")
    far = f"{FAR_KEYFRAME_BYTES / 2**20:.0f} MB"
    _row("", "", f"(a packed keyframe every {lab.keyframe_every} iterations; more than {SPARSE_AFTER:,}")
    _row("", "", f"iterations back, at most {far} of them a run:")
    _row("", "", "bench_soak.py --scenario bench/mlp-17k.toml)")
    _rebuild_rows(lab, lab.keyframe_every, "op")


def _linear(args: argparse.Namespace) -> None:
    n = args.memory_iterations
    print("linear regression, SGD with momentum: full records, thinned to keyframes further back")
    _overhead_rows(LINEAR, args)
    full = memory_per_iteration(Lab(loads_scenario(LINEAR, "bench"), recent=10**9), 0, n)
    _row("history per iteration, all kept", f"{full:.0f} B", f"over {n} iterations (the recent past's cost)")
    lab = Lab(loads_scenario(LINEAR, "bench"), recent=args.recent)
    # From past the first thinning, over whole keep-then-thin cycles (an eighth of the records each).
    cycle = args.recent // 8 // lab.ticks_per_iteration
    thinned = memory_per_iteration(lab, 10 * cycle, max(cycle, n // cycle * cycle))
    every = THINNED_EVERY
    note = f"(records but the last {args.recent} ops thinned"
    _row("history per iteration, thinned", f"{thinned:.0f} B", note)
    _row("", "", f"to a packed keyframe every {every} iterations)")
    # Within the newest ops every scalar is still kept; what an hour's far past costs is
    # bench_soak.py --bytes-per-op's figure.
    per_op = thinned / lab.ticks_per_iteration
    _row("", "", f"({per_op:.0f} B per op; the far past: bench_soak.py --bytes-per-op)")
    _rebuild_rows(lab, every, "thinned op")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=25, help="iterations per timed chunk")
    parser.add_argument("--rounds", type=int, default=200, help="chunks per lab")
    parser.add_argument("--memory-iterations", type=int, default=10_000)
    parser.add_argument("--recent", type=int, default=4000, help="records kept by the thinned lab")
    parser.add_argument("--models", default="mlp,linear", help="the models measured, in this order")
    args = parser.parse_args()
    set_threads(1)
    set_aside_imports()  # as the window's worker and `gradviz trace` do
    random.seed(0)
    for model in args.models.split(","):
        if model not in ("mlp", "linear"):
            parser.error(f"no model {model!r}: mlp or linear")
        (_mlp if model == "mlp" else _linear)(args)


if __name__ == "__main__":
    main()
