"""A 101x101 loss surface of two MLPs: gradviz against ``loss_landscapes.random_plane``.

Both compute the same grid (filter-normalised random directions, 1,000 points,
MSE) in the same process, in alternating rounds, so a shared machine's drifts
hit both alike. Printed: the time ratio, each time against the machine's limit
(the grid's matmul GFLOP divided by the matmul GFLOP/s measured in this run)
and gradviz's also against a limit that adds the activations (one sigmoid per
hidden unit, data point and grid point, at the rate measured in this run),
both rates measured in the same shuffled rounds as the timings (their median),
gradviz's vmap method against its hand-batched one, the time to the first
coarse picture, and the peak memory of one evaluation (in a fresh process).

Run: ``python bench/bench_surface.py [--threads 2] [--rounds 3]``; check
``uptime`` first and take figures when the load average is low: two-thread
runs collapse when another process holds a core.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from importlib.metadata import version

import loss_landscapes
import numpy as np
import torch
from loss_landscapes.metrics import Loss

from gradviz.engine import Lab, loads_scenario
from gradviz.engine import landscape as L

SCENARIO = """
name = "bench-surface"
seed = 0
[model]
kind = "mlp"
widths = [{width}, {width}]
[data]
kind = "wave"
n = 1000
[[runs]]
name = "yours"
"""


def keep_freed_memory() -> bool:
    """glibc: keep freed chunks instead of returning them to the OS (app start-up does this too)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    # The value is a C int: 1 GiB fits, 4 GiB would overflow silently.
    return bool(libc.mallopt(m_trim_threshold, 1 << 30) and libc.mallopt(m_mmap_threshold, 32 << 20))


def matmul_gflops(seconds: float = 1.0, shape: tuple[int, int, int] = (2048, 2048, 2048)) -> float:
    """Best fp32 GEMM rate of this process now over ``seconds``, in GFLOP/s, for ``(m, k) @ (k, n)``."""
    m, k, n = shape
    a, b = torch.randn(m, k), torch.randn(k, n)
    out = torch.mm(a, b)
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        best = max(best, 2 * m * k * n / (time.perf_counter() - start) / 1e9)
    return best


def sigmoid_rate(seconds: float = 0.5) -> float:
    """Best in-place sigmoid rate on a 2 MB tensor (one chunk's activation), in elements/s."""
    x = torch.randn(512 * 1024)
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        x.sigmoid_()
        best = max(best, x.numel() / (time.perf_counter() - start))
    return best


def machine_rates(width: int, n: int = 1000) -> tuple[float, float]:
    """The matmul limit's GFLOP/s and the sigmoid rate, measured now (one short burst each).

    The matmul rate is the better of big square products and the product each
    grid point of this MLP needs (its ``width x width`` weights times the
    ``width x n`` activations): the limit is what the machine reaches on the
    work at hand, never less than its big-GEMM rate.
    """
    square = matmul_gflops(0.3)
    shaped = matmul_gflops(0.3, (width, width, n))
    return max(square, shaped), sigmoid_rate(0.2)


def peak_memory(width: int, n: int, method: str, flags: list[str]) -> float:
    """Peak resident memory one evaluation adds, in MB, measured in a fresh process.

    A fresh process, because memory freed by earlier runs stays resident (glibc,
    and the mallopt setting on purpose) and would hide what this one needs.
    """
    args = [sys.executable, __file__, "--probe-memory", method, "--widths", str(width), "--n", str(n), *flags]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith(key)).split()[1])


def probe_memory(width: int, n: int, method: str) -> None:
    """Print the peak RSS added by one grid evaluation of ``method`` (run in a fresh process)."""
    lab = Lab(loads_scenario(SCENARIO.format(width=width), "bench"))
    plane = L.plane_for(lab, "yours", "random", seed=0)
    fn = (
        (lambda: loss_landscapes_grid(lab, n))
        if method == "loss_landscapes"
        else lambda: gradviz_grid(lab, plane, n)
    )
    before = _status_kb("VmRSS:")
    fn()
    print((_status_kb("VmHWM:") - before) / 1024)


def loss_landscapes_grid(lab: Lab, n: int) -> np.ndarray:
    task = lab.runs[0].task
    x, y = task.inputs
    metric = Loss(torch.nn.functional.mse_loss, x, y)
    return loss_landscapes.random_plane(
        task.modules["model"], metric, distance=1, steps=n, normalization="filter", deepcopy_model=True
    )


def gradviz_grid(lab: Lab, plane: L.Plane, n: int, method: L.Method = "auto") -> L.Grid:
    *_, grid = L.evaluate_grid(L.point_loss(lab, "yours", plane, method=method), plane.labels, n, 1.0)
    return grid


def first_picture(lab: Lab, plane: L.Plane, n: int) -> tuple[float, int]:
    """Seconds to the coarse preview of a progressive evaluation, and its size (the rest is cancelled)."""
    start = time.perf_counter()
    preview = next(L.evaluate_grid(L.point_loss(lab, "yours", plane), plane.labels, n, 1.0, progressive=True))
    return time.perf_counter() - start, len(preview.xs)


def timed_rounds(runs: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each callable, run in a shuffled order each round."""
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(rounds):
        order = list(runs)
        random.shuffle(order)
        for name in order:
            start = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def bench(width: int, n: int, rounds: int, flags: list[str]) -> None:
    lab = Lab(loads_scenario(SCENARIO.format(width=width), "bench"))
    run = lab.runs[0]
    plane = L.plane_for(lab, "yours", "random", seed=0)
    loss = L.point_loss(lab, "yours", plane)
    gflop = n * n * loss.flops_per_point / 1e9
    load = os.getloadavg()[0]
    # The machine's rates are measured in the same shuffled rounds as the timings, so a
    # load that comes and goes during the run hits the limit as it hits the timings.
    rates: list[tuple[float, float]] = []
    med = timed_rounds(
        {
            "loss_landscapes": lambda: loss_landscapes_grid(lab, n),
            "gradviz": lambda: gradviz_grid(lab, plane, n),
            "rates": lambda: rates.append(machine_rates(width)),
        },
        rounds,
    )
    del med["rates"]
    peak = statistics.median(r[0] for r in rates)
    rate = statistics.median(r[1] for r in rates)
    limit = gflop / peak
    # The activations' transcendentals are not matmul work: a second floor counts them too.
    activations = n * n * 1000 * 2 * width
    floor = limit + activations / rate
    # The generic method on a smaller grid: it is slow, and only its ratio is wanted.
    small = max(2, n // 3)
    methods = timed_rounds(
        {m: partial(gradviz_grid, lab, plane, small, m) for m in ("matmul", "vmap")}, rounds
    )
    first = statistics.median(first_picture(lab, plane, n)[0] for _ in range(5))
    coarse = first_picture(lab, plane, n)[1]
    memory = {m: peak_memory(width, n, m, flags) for m in ("gradviz", "loss_landscapes")}
    unchunked = n * n * 1000 * width * 4 / 1e6
    print(
        f"MLP 2-{width}-{width}-1 ({run.layout.total} parameters), {n}x{n} grid, {gflop:.0f} GFLOP, "
        f"load average {load:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    print(f"  machine            {peak:7.0f} GFLOP/s matmul, {rate / 1e9:.2f} G sigmoids/s (round medians)")
    for name, t in med.items():
        print(f"  {name:18s} {t:7.2f} s   {t / limit:5.2f} x the matmul limit ({limit:.2f} s)")
    print(f"  gradviz            {med['gradviz'] / floor:7.2f} x the matmul + sigmoid limit ({floor:.2f} s)")
    print(f"  gradviz speed-up   {med['loss_landscapes'] / med['gradviz']:7.2f} x over loss_landscapes")
    print(f"  vmap / matmul      {methods['vmap'] / methods['matmul']:7.2f} x ({small}x{small} grid)")
    print(f"  first picture      {first * 1e3:7.1f} ms ({coarse}x{coarse} preview)")
    print(
        f"  peak memory        {memory['gradviz']:7.1f} MB (chunks of {loss.chunk} points; "
        f"loss_landscapes {memory['loss_landscapes']:.1f} MB)"
    )
    print(f"  unchunked          {unchunked:7.0f} MB for one activation of the whole grid")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per method (median reported)")
    parser.add_argument("--n", type=int, default=101, help="grid points per axis")
    parser.add_argument("--widths", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--no-mallopt", action="store_true", help="leave glibc's allocator at its defaults")
    parser.add_argument("--probe-memory", help=argparse.SUPPRESS)
    args = parser.parse_args()
    tuned = False if args.no_mallopt else keep_freed_memory()
    torch.set_num_threads(args.threads)
    if args.probe_memory:
        probe_memory(args.widths[0], args.n, args.probe_memory)
        return
    random.seed(0)
    flags = ["--threads", str(args.threads), *(["--no-mallopt"] if args.no_mallopt else [])]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{args.threads} threads, load average {load:.2f}, matmul {matmul_gflops():.0f} GFLOP/s, "
        f"sigmoid {sigmoid_rate() / 1e9:.2f} G elements/s, "
        f"mallopt {'on' if tuned else 'off'}, loss_landscapes {version('loss-landscapes')}"
    )
    for width in args.widths:
        bench(width, args.n, args.rounds, flags)
    print(f"matmul {matmul_gflops():.0f} GFLOP/s at the end")


if __name__ == "__main__":
    main()
