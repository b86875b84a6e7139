"""Cost of ``gradviz watch``: a watched loop's time per step against the same loop run plainly.

For a small MLP and a model of about 10M parameters, the same training loop (zero_grad,
forward, backward, step) runs its first ``--steps`` steps plainly and inside
``gradviz.watch(steps=...)``, interleaved in rounds (machines here are shared and noisy),
each from fresh weights; the small model, whose rounds take milliseconds, gets five times as many.
It prints the ratio of the medians of wall time (targets: at most 1.5 small, 1.2 large), the
same ratio of the process's CPU time (steadier where other work shares the cores), the time the
watch's end takes (its copies turned into the recording), and the recording's bytes per observed
step.
Beside them, the floor: the same loop with only the observers the watch must install, each doing
nothing (the optimizer step pre/post hooks, a post-accumulate-grad hook on every parameter, and
``zero_grad``/``backward`` wrappers that read their caller's frame), against the same plain loop.
Run: ``python bench/bench_watch.py [--steps N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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
) -> tuple[float, float]:
    """Seconds per step of a standard loop: wall time, and this process's CPU time."""
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    return (time.perf_counter() - start) / steps, (time.process_time() - cpu) / steps


def _noop(*_: object) -> None:
    return None


@contextlib.contextmanager
def bare_observers(model: nn.Module) -> Iterator[None]:
    """The observers ``gradviz.watch`` installs, each doing nothing but reading its caller."""
    import torch.optim.optimizer as optim

    handles = [optim.register_optimizer_step_pre_hook(_noop), optim.register_optimizer_step_post_hook(_noop)]
    handles += [p.register_post_accumulate_grad_hook(_noop) for p in model.parameters()]
    originals = [
        (torch.optim.Optimizer, "zero_grad"),
        (nn.Module, "zero_grad"),
        (torch.Tensor, "backward"),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name in originals]
    for owner, name, original in saved:

        def wrapper(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            frame = sys._getframe(1)
            _ = (frame.f_code.co_filename, frame.f_lineno)
            return _original(*args, **kwargs)

        setattr(owner, name, wrapper)
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
        for handle in handles:
            handle.remove()


@dataclass
class Measured:
    plain: float  # median wall seconds per step
    watched: float
    ratio: float
    cpu_ratio: float
    end: float  # median seconds the watch's end takes
    size: int  # bytes of the recording per observed step
    floor: float  # the bare observers' median wall time per step over the plain loop's


def measure(build: Callable[[], Any], steps: int, rounds: int) -> Measured:
    times: dict[str, list[tuple[float, float]]] = {"plain": [], "watched": [], "bare": []}
    ends: list[float] = []
    size = 0
    train(*build(), 3)  # warm up the allocator and kernels
    for r in range(rounds):
        for mode in ("plain", "watched", "bare") if r % 2 == 0 else ("bare", "watched", "plain"):
            torch.manual_seed(r)
            model, opt, x, y = build()
            if mode == "plain":
                times["plain"].append(train(model, opt, x, y, steps))
                continue
            if mode == "bare":
                with bare_observers(model):
                    times["bare"].append(train(model, opt, x, y, steps))
                continue
            with gradviz.watch(steps=steps) as rec:
                times["watched"].append(train(model, opt, x, y, steps))
                end = time.perf_counter()
            ends.append(time.perf_counter() - end)
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "rec.json")
                rec.save(path)
                size = os.path.getsize(path) // max(rec.data["observed_updates"], 1)
    p, w, b = (statistics.median(t[0] for t in times[m]) for m in ("plain", "watched", "bare"))
    pc, wc = (statistics.median(t[1] for t in times[m]) for m in ("plain", "watched"))
    return Measured(p, w, w / p, wc / pc, statistics.median(ends), size, b / p)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    params = {"small": sum(p.numel() for p in small()[0].parameters())}
    params["large"] = sum(p.numel() for p in large()[0].parameters())
    print(
        f"torch {torch.__version__}, 1 thread, {args.steps} steps watched, "
        f"{5 * args.rounds} rounds small, {args.rounds} large"
    )
    models = (("small", small, 1.5, 5 * args.rounds), ("large", large, 1.2, args.rounds))
    for name, build, target, rounds in models:
        m = measure(build, args.steps, rounds)
        verdict = "ok" if m.ratio <= target else "over target"
        print(
            f"{name:<6} {params[name]:>11,} params  plain {m.plain * 1e3:8.3f} ms/step  "
            f"watched {m.watched * 1e3:8.3f} ms/step  ratio {m.ratio:5.2f} (target {target}: {verdict}; "
            f"CPU time {m.cpu_ratio:5.2f})  end {m.end * 1e3:6.0f} ms  "
            f"recording {m.size:,} bytes/step  bare observers {m.floor:5.2f}"
        )


if __name__ == "__main__":
    main()
