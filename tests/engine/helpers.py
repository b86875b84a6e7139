"""Helpers for engine tests: run labs and line up their records."""

from __future__ import annotations

from dataclasses import replace

from gradviz.engine import Lab, OpRecord, load_builtin
from gradviz.engine.scenario import Scenario

# An MLP large enough that a lab records it light: keyframes, not every op.
MLP = """
name = "mlp-light"
[model]
kind = "mlp"
widths = [64, 64]
[data]
kind = "wave"
n = 256
batch_size = 32
[optimizer]
kind = "Adam"
lr = 0.01
"""

# Two runs of a line fit: "yours" at a learning rate that diverges within a few dozen iterations,
# with no zero_grad; the reference at one that converges.
DIVERGING = """
[model]
kind = "linear"
[data]
kind = "line"
[optimizer]
kind = "SGD"
lr = 3.0
[[runs]]
name = "yours"
order = ["forward", "backward", "step"]
[[runs]]
name = "reference"
[runs.optimizer]
lr = 0.1
"""


def records_by_run(lab: Lab, iterations: int) -> dict[str, list[OpRecord]]:
    """Step ``lab`` for ``iterations`` and group the records by run."""
    out: dict[str, list[OpRecord]] = {r.name: [] for r in lab.runs}
    for rec in lab.iterate(iterations):
        out[rec.run].append(rec)
    return out


def builtin_lab(name: str, **overrides: object) -> Lab:
    return Lab(load_builtin(name).with_overrides(**overrides))  # type: ignore[arg-type]


def mlp_over_a_plane() -> Scenario:
    """zero-grad-myths with its surface put back: an MLP drawn over a plane through weight space.

    Its lesson leaves the surface out (both runs take the same steps, so they share one path).
    """
    scenario = load_builtin("zero-grad-myths")
    assert scenario.lesson is not None
    return replace(scenario, lesson=replace(scenario.lesson, surface="auto"))
