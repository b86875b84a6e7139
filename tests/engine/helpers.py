"""Helpers for engine tests: run labs and line up their records."""

from __future__ import annotations

from gradviz.engine import Lab, OpRecord, load_builtin

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


def records_by_run(lab: Lab, iterations: int) -> dict[str, list[OpRecord]]:
    """Step ``lab`` for ``iterations`` and group the records by run."""
    out: dict[str, list[OpRecord]] = {r.name: [] for r in lab.runs}
    for rec in lab.iterate(iterations):
        out[rec.run].append(rec)
    return out


def builtin_lab(name: str, **overrides: object) -> Lab:
    return Lab(load_builtin(name).with_overrides(**overrides))  # type: ignore[arg-type]
