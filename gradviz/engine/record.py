"""Immutable records of every op, and the History that keeps them in bounded memory.

A :class:`Snapshot` is the full state of one run (parameters, ``.grad`` with
``None`` kept distinct from zeros, optimizer state, learning rates) as flat
numpy copies. An :class:`OpRecord` is what one op left behind. Small models
keep a snapshot per op; large ones keep per-op scalars plus a snapshot every
few iterations (keyframes), and any op is rebuilt exactly by replay.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from gradviz.engine.scenario import Op


@dataclass(frozen=True)
class Layout:
    """Names and shapes of a run's parameters, in the order of every flat array."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @cached_property
    def sizes(self) -> tuple[int, ...]:
        return tuple(int(np.prod(s)) for s in self.shapes)

    @cached_property
    def total(self) -> int:
        return sum(self.sizes)

    def split(self, flat: np.ndarray, present: tuple[bool, ...] | None = None) -> dict[str, Any]:
        """Cut a flat array into named read-only arrays; absent entries become ``None``."""
        out: dict[str, np.ndarray | None] = {}
        offset = 0
        for i, (name, shape, size) in enumerate(zip(self.names, self.shapes, self.sizes, strict=True)):
            if present is not None and not present[i]:
                out[name] = None
                continue
            view = flat[offset : offset + size].reshape(shape)
            view.flags.writeable = False
            out[name] = view
            offset += size
        return out


@dataclass(frozen=True, eq=False)
class Snapshot:
    """The full state of a run at one moment, as numpy copies made from the real tensors."""

    layout: Layout
    param_flat: np.ndarray
    grad_flat: np.ndarray
    grad_present: tuple[bool, ...]
    state_keys: tuple[tuple[str, str, tuple[int, ...], str], ...]
    state_flat: np.ndarray
    state_other: tuple[tuple[str, str, Any], ...]
    lr: Mapping[str, float]
    loss: float | None

    @cached_property
    def params(self) -> dict[str, np.ndarray]:
        return self.layout.split(self.param_flat)

    @cached_property
    def grads(self) -> dict[str, np.ndarray | None]:
        return self.layout.split(self.grad_flat, self.grad_present)

    @cached_property
    def state(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {name: {} for name in self.layout.names}
        offset = 0
        for pname, key, shape, _dtype in self.state_keys:
            size = int(np.prod(shape))
            view = self.state_flat[offset : offset + size].reshape(shape)
            view.flags.writeable = False
            out[pname][key] = view
            offset += size
        for pname, key, value in self.state_other:
            out[pname][key] = value
        return out

    @property
    def nbytes(self) -> int:
        return self.param_flat.nbytes + self.grad_flat.nbytes + self.state_flat.nbytes


@dataclass(frozen=True, eq=False)
class OpRecord:
    """What one op of one run left behind. Arrays are read-only numpy copies.

    ``grads[name] is None`` means PyTorch's ``.grad`` was ``None``, which is not
    the same as a tensor of zeros. ``fresh_grads`` (``backward`` only) holds what
    this call alone added to each ``.grad``; ``None`` where it added nothing.
    """

    run: str
    index: int
    tick: int
    iteration: int
    micro: int
    phase: str
    op: Op
    line: int
    lines: tuple[int, int]
    loss: float | None
    diverged: bool
    error: str | None
    snapshot: Snapshot
    fresh_flat: np.ndarray | None = None
    fresh_present: tuple[bool, ...] | None = None
    prior: Snapshot | None = None
    memory: Mapping[str, int] = field(default_factory=dict)

    @property
    def params(self) -> dict[str, np.ndarray]:
        return self.snapshot.params

    @property
    def grads(self) -> dict[str, np.ndarray | None]:
        return self.snapshot.grads

    @property
    def state(self) -> dict[str, dict[str, Any]]:
        return self.snapshot.state

    @property
    def lr(self) -> Mapping[str, float]:
        return self.snapshot.lr

    @cached_property
    def fresh_grads(self) -> dict[str, np.ndarray | None] | None:
        if self.fresh_flat is None:
            return None
        return self.snapshot.layout.split(self.fresh_flat, self.fresh_present)

    @property
    def stale_grads(self) -> dict[str, np.ndarray | None] | None:
        """For ``backward``: what ``.grad`` already held before this call (``None`` where nothing)."""
        return None if self.prior is None else self.prior.grads


class RunHistory:
    """The ops of one run: scalar columns for all, full records where kept."""

    def __init__(self, keep_records: bool) -> None:
        self.keep_records = keep_records
        self.ticks = array("q")
        self.loss = array("d")
        self.grad_norm = array("d")
        self.param_norm = array("d")
        self.records: list[OpRecord] = []
        self.keyframes: dict[int, Snapshot] = {}

    def __len__(self) -> int:
        return len(self.ticks)

    def append(self, tick: int, loss: float | None, grad_norm: float, param_norm: float, rec: OpRecord | None) -> None:
        self.ticks.append(tick)
        self.loss.append(np.nan if loss is None else loss)
        self.grad_norm.append(grad_norm)
        self.param_norm.append(param_norm)
        if self.keep_records and rec is not None:
            self.records.append(rec)

    def index_at(self, tick: int) -> int:
        """Index of the last op with ``tick`` at or before ``tick``; -1 if none."""
        import bisect

        return bisect.bisect_right(self.ticks, tick) - 1

    def truncate(self, tick: int) -> None:
        """Forget every op after ``tick`` (and the keyframes of later iterations)."""
        keep = self.index_at(tick) + 1
        for col in (self.ticks, self.loss, self.grad_norm, self.param_norm):
            del col[keep:]
        del self.records[keep:]

    @property
    def nbytes(self) -> int:
        cols = sum(c.itemsize * len(c) for c in (self.ticks, self.loss, self.grad_norm, self.param_norm))
        return cols + sum(s.nbytes for s in self.keyframes.values())


class History:
    """Every run's ops in order, addressable by run name and op index or by tick."""

    def __init__(self, runs: list[str], keep_records: bool) -> None:
        self.runs = {name: RunHistory(keep_records) for name in runs}

    def __getitem__(self, run: str) -> RunHistory:
        return self.runs[run]

    @property
    def last_tick(self) -> int:
        return max((h.ticks[-1] for h in self.runs.values() if len(h)), default=-1)

    def truncate(self, tick: int) -> None:
        for h in self.runs.values():
            h.truncate(tick)

    @property
    def nbytes(self) -> int:
        """Bytes held by columns and keyframes (records of small models not counted twice)."""
        return sum(h.nbytes for h in self.runs.values())
