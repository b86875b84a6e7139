"""Cost of ``gradviz watch``: a watched loop's time per step against the same loop run plainly.

For a small MLP and a model of about 10M parameters, the same training loop (zero_grad,
forward, backward, step) runs its first ``--steps`` steps plainly and inside
``gradviz.watch(steps=...)``, interleaved in rounds (machines here are shared and noisy),
each from fresh weights. It prints the ratio of the medians (targets: at most 1.5 small,
1.2 large) and the recording's bytes per observed step.
Run: ``python bench/bench_watch.py [--steps N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import gradviz


def small() -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    model = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return model, opt, torch.randn(32, 2), torch.randn(32, 1)


def large() -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    layers: list[nn.Module] = []
    for _ in range(10):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    return model, opt, torch.randn(64, 1024), torch.randn(64, 1024)


def train(
    model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, steps: int
) -> float:
    """Seconds per step of a standard loop."""
    start = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    return (time.perf_counter() - start) / steps


def measure(build: Callable[[], Any], steps: int, rounds: int) -> tuple[float, float, float, int]:
    plain: list[float] = []
    watched: list[float] = []
    size = 0
    train(*build(), 3)  # warm up the allocator and kernels
    for r in range(rounds):
        for mode in ("plain", "watched") if r % 2 == 0 else ("watched", "plain"):
            torch.manual_seed(r)
            model, opt, x, y = build()
            if mode == "plain":
                plain.append(train(model, opt, x, y, steps))
                continue
            with gradviz.watch(steps=steps) as rec:
                watched.append(train(model, opt, x, y, steps))
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "rec.json")
                rec.save(path)
                size = os.path.getsize(path) // max(rec.data["observed_updates"], 1)
    p, w = statistics.median(plain), statistics.median(watched)
    return p, w, w / p, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    params = {"small": sum(p.numel() for p in small()[0].parameters())}
    params["large"] = sum(p.numel() for p in large()[0].parameters())
    print(f"torch {torch.__version__}, 1 thread, {args.steps} steps watched, {args.rounds} rounds")
    for name, build, target in (("small", small, 1.5), ("large", large, 1.2)):
        p, w, ratio, size = measure(build, args.steps, args.rounds)
        verdict = "ok" if ratio <= target else "over target"
        print(
            f"{name:<6} {params[name]:>11,} params  plain {p * 1e3:8.3f} ms/step  "
            f"watched {w * 1e3:8.3f} ms/step  "
            f"ratio {ratio:5.2f} (target {target}: {verdict})  recording {size:,} bytes/step"
        )


if __name__ == "__main__":
    main()
