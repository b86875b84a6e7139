"""Plain PyTorch loops to check the lab against: the loop a user would write, op by op.

The model, its data and its loss come from the scenario's task (the same seed
gives the same weights and batches); everything the loop does with them is
written here by hand, without the engine's loop description or runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gradviz.engine.scenario import RunSpec, Scenario
from gradviz.engine.zoo import build_task


@dataclass
class PlainOp:
    """What one op of the plain loop left: its name, the parameters and every ``.grad``."""

    op: str
    params: dict[str, np.ndarray]
    grads: dict[str, np.ndarray | None]
    error: str | None = None


def plain_loop(scenario: Scenario, run: RunSpec, iterations: int) -> list[PlainOp]:
    """Run ``run``'s loop by hand for ``iterations``; stop at the first exception, as a script would."""
    task = build_task(scenario, torch.device("cpu"))
    loop, spec = run.loop, run.optimizer
    phases = task.phases()
    optimizers = {}
    if spec.kind != "manual":
        cls = getattr(torch.optim, spec.kind)
        for ph in phases:
            optimizers[ph.name] = cls([task.params[n] for n in ph.params], lr=spec.lr, **spec.options)
    out: list[PlainOp] = []

    def note(op: str, error: str | None = None) -> None:
        out.append(
            PlainOp(
                op,
                {n: p.detach().numpy().copy() for n, p in task.params.items()},
                {n: None if p.grad is None else p.grad.numpy().copy() for n, p in task.params.items()},
                error,
            )
        )

    k = loop.accumulate
    fused = "backward" in loop.order and k > 1  # for xk, yk in ...: loss = ...; loss.backward()
    op = ""
    try:
        for it in range(iterations):
            batch = task.batch(it)
            micro = [tuple(t.chunk(k)[m] for t in batch) for m in range(k)]
            for ph in phases:
                params = [task.params[n] for n in ph.params]
                loss = None
                for op in loop.order:
                    if op == "zero_grad":
                        if loop.zero_grad == "optimizer":
                            optimizers[ph.name].zero_grad(set_to_none=loop.set_to_none)
                        elif loop.zero_grad == "model":
                            task.modules[ph.module].zero_grad(set_to_none=loop.set_to_none)
                        else:
                            for p in params:
                                if loop.set_to_none:
                                    p.grad = None
                                else:
                                    p.grad.zero_()
                        note(op)
                    elif op == "forward":
                        for m in range(k):
                            loss = task.loss(ph, micro[m], it, loop)
                            note("forward")
                            if fused:
                                op = "backward"
                                loss.backward()
                                note("backward")
                                op = "forward"
                    elif op == "backward":
                        if not fused:
                            assert loss is not None
                            loss.backward()
                            note(op)
                    elif spec.kind == "manual":
                        with torch.no_grad():
                            for p in params:
                                p -= spec.lr * p.grad
                        note(op)
                    else:
                        optimizers[ph.name].step()
                        note(op)
    except Exception as exc:
        note(op, f"{type(exc).__name__}: {exc}")
    return out
