"""Edited copies of a scenario: what the code panel's checkboxes and the scenario bar change.

Each function returns a new Scenario (scenarios are frozen dataclasses); the
worker validates it as strictly as a file before building the lab.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gradviz.engine.scenario import Scenario


def _map_runs(scenario: Scenario, run_name: str | None, change: Any) -> Scenario:
    runs = tuple(change(r) if run_name is None or r.name == run_name else r for r in scenario.runs)
    return replace(scenario, runs=runs)


def restore_orders(scenario: Scenario) -> dict[str, tuple[str, ...]]:
    """Each run's loop order as loaded, where it has zero_grad: re-enabling puts it back there."""
    return {r.name: tuple(r.loop.order) for r in scenario.runs if "zero_grad" in r.loop.order}


def set_zero_grad(
    scenario: Scenario, run_name: str, on: bool, restore: tuple[str, ...] | None = None
) -> Scenario:
    """Remove or restore the zero_grad call of one run's loop."""

    def change(run: Any) -> Any:
        order = tuple(op for op in run.loop.order if op != "zero_grad")
        if on:
            order = restore if restore and "zero_grad" in restore else ("zero_grad", *order)
            if run.optimizer.kind == "manual" and run.loop.zero_grad == "optimizer":
                return replace(run, loop=replace(run.loop, order=tuple(order), zero_grad="manual"))
        return replace(run, loop=replace(run.loop, order=tuple(order)))

    return _map_runs(scenario, run_name, change)


def set_loop_option(scenario: Scenario, run_name: str, **changes: Any) -> Scenario:
    """Change loop fields (``set_to_none``, ``scale_loss``, ``accumulate``) of one run."""
    return _map_runs(scenario, run_name, lambda r: replace(r, loop=replace(r.loop, **changes)))


def set_optimizer(
    scenario: Scenario, *, kind: str | None = None, lr: float | None = None, momentum: float | None = None
) -> Scenario:
    """Change every run's optimizer: its class, learning rate, or SGD/RMSprop momentum."""

    def change(run: Any) -> Any:
        opt = run.optimizer
        if kind is not None and kind != opt.kind:
            # Keyword arguments of one optimizer class mean nothing to another.
            opt = replace(opt, kind=kind, options={})
        if lr is not None:
            opt = replace(opt, lr=lr)
        if momentum is not None and opt.kind in ("SGD", "RMSprop"):
            opt = replace(opt, options={**opt.options, "momentum": momentum})
        return replace(run, optimizer=opt)

    return _map_runs(scenario, None, change)


def set_data(scenario: Scenario, **changes: Any) -> Scenario:
    """Change the dataset (``batch_size``)."""
    return replace(scenario, data=replace(scenario.data, **changes))


def set_top(scenario: Scenario, **changes: Any) -> Scenario:
    """Change top-level fields (``seed``, ``device``)."""
    return replace(scenario, **changes)
