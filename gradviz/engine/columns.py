"""Per-op columns that grow for hours of Play in memory that barely grows.

- :class:`ScheduledTicks`: the tick of each of a run's ops, worked out from the lab's schedule,
  so nothing is stored per op.
- :class:`Scheduled`: a value per op that the schedule foretells (op, line, status), stored
  only where it differs.
- :class:`Increasing`: a non-decreasing integer per op in about a byte each (the steps between
  them), for counts and ticks that no schedule gives.
- :class:`PeakColumn`: a float per op, exact for the newest ops and, further back, only what a
  plot of it draws: each bucket's lowest and highest value at their own ops.

numpy only: the window's history imports these before torch is loaded.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar, overload

import numpy as np

# Ops per bucket of a thinned column: a drawn curve's buckets hold many times more ops than this
# once a column has a thinned past (the timeline draws at most 512 buckets a curve).
BUCKET = 64
# Ops a column keeps exactly, per run: about two and a half minutes of full-speed Play of the
# headline scenario, some ten times the full records kept, at 12 bytes an op for the window's two.
WHOLE = 200_000


def _index(i: int, n: int) -> int:
    if i < 0:
        i += n
    if not 0 <= i < n:
        raise IndexError(i)
    return i


class ScheduledTicks:
    """The tick of each op of one run whose ops follow the lab's schedule, stored as a count only.

    A run performs its slots of every iteration in order until it stops (a seek only cuts the
    end), so op ``i`` is slot ``i % k`` of iteration ``i // k``, ``k`` being its ops per iteration.

    Parameters
    ----------
    offsets:
        The ticks within an iteration at which the run has an op, in order.
    ticks_per_iteration:
        The lab's ticks per iteration.
    """

    def __init__(self, offsets: Sequence[int], ticks_per_iteration: int) -> None:
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self._offsets = [int(t) for t in offsets]  # for bisect
        self.ticks_per_iteration = ticks_per_iteration
        self._n = 0
        self._next = self._offsets[0] if self._offsets else -1  # the tick the next op must have

    @classmethod
    def of_schedule(cls, schedule: Sequence[Sequence[Any]], run: int) -> ScheduledTicks:
        """The ticks of run ``run`` (its column) of a lab's ``schedule`` (``None`` where it waits)."""
        return cls([t for t, row in enumerate(schedule) if row[run] is not None], len(schedule))

    def __len__(self) -> int:
        return self._n

    def tick_of(self, index: int) -> int:
        """The tick of op ``index`` (which need not have happened yet)."""
        iteration, slot = divmod(index, len(self.offsets))
        return iteration * self.ticks_per_iteration + self._offsets[slot]

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> np.ndarray: ...
    def __getitem__(self, i: int | slice) -> int | np.ndarray:
        if isinstance(i, slice):
            index = np.arange(*i.indices(self._n), dtype=np.int64)
            iteration, slot = np.divmod(index, len(self.offsets))
            return iteration * self.ticks_per_iteration + self.offsets[slot]
        return self.tick_of(_index(i, self._n))

    def __iter__(self) -> Iterator[Any]:
        return iter(self[:].tolist())

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self[:] if dtype is None else self[:].astype(dtype)

    def index_at(self, tick: int) -> int:
        """Index of the last op at or before ``tick``; -1 when there is none."""
        if tick < 0 or not self._n:
            return -1
        iteration, within = divmod(tick, self.ticks_per_iteration)
        index = iteration * len(self.offsets) + bisect.bisect_right(self._offsets, within) - 1
        return min(index, self._n - 1)

    def append(self, tick: int) -> None:
        """Count one more op, at ``tick``: it must be the run's next slot in the schedule."""
        if tick != self._next or tick < 0:
            raise ValueError(f"op {self._n} at tick {tick} does not follow the lab's schedule")
        self._n += 1
        self._next = self.tick_of(self._n)

    def truncate(self, keep: int) -> None:
        """Forget every op from index ``keep`` on."""
        self._n = max(0, min(self._n, keep))
        if self._offsets:
            self._next = self.tick_of(self._n)


V = TypeVar("V")


class Scheduled(Generic[V]):
    """A value per op that the schedule foretells (an op's name, its line, "running"), stored
    only where an op's differs from it: a run that follows its loop keeps nothing per op.

    Parameters
    ----------
    pattern:
        The value of each op of one iteration, in order; op ``i`` is foretold ``pattern[i % k]``.
    """

    def __init__(self, pattern: Sequence[V]) -> None:
        self.pattern = list(pattern)
        self._n = 0
        self._other: dict[int, V] = {}  # op index: its value where it is not the one foretold

    def __len__(self) -> int:
        return self._n

    def _at(self, i: int) -> V:
        other = self._other.get(i, _NONE)
        return self.pattern[i % len(self.pattern)] if other is _NONE else other  # type: ignore[return-value]

    @overload
    def __getitem__(self, i: int) -> V: ...
    @overload
    def __getitem__(self, i: slice) -> list[V]: ...
    def __getitem__(self, i: int | slice) -> V | list[V]:
        if isinstance(i, slice):
            return [self._at(j) for j in range(*i.indices(self._n))]
        return self._at(_index(i, self._n))

    def __iter__(self) -> Iterator[V]:
        return iter(self[:])

    def indices(self, value: V, start: int, stop: int) -> np.ndarray:
        """The ops from ``start`` up to ``stop`` whose value is ``value``, in order (worked out from
        the pattern, then the ops stored apart)."""
        at = np.arange(max(start, 0), min(stop, self._n), dtype=np.int64)
        foretold = [p for p, v in enumerate(self.pattern) if v == value]
        at = at[np.isin(at % max(len(self.pattern), 1), foretold)]
        other = [i for i, v in self._other.items() if start <= i < stop]
        if not other:
            return at
        apart = np.array(other, dtype=np.int64)
        equal = np.array([self._other[i] == value for i in other], dtype=bool)
        return np.union1d(np.setdiff1d(at, apart), apart[equal])

    def append(self, value: V) -> None:
        if not self.pattern or value != self.pattern[self._n % len(self.pattern)]:
            self._other[self._n] = value
        self._n += 1

    def truncate(self, keep: int) -> None:
        """Forget every op from index ``keep`` on."""
        self._n = max(0, min(self._n, keep))
        for j in [j for j in self._other if j >= self._n]:
            del self._other[j]


_NONE = object()

# Values between checkpoints of an Increasing column: reading one sums at most this many steps.
CHECKPOINT = 1024


class Increasing:
    """Non-negative, non-decreasing integers, one per op, kept as the steps between them: a byte
    each while a step is below 255, the rare larger step kept apart; a checkpoint every
    :data:`CHECKPOINT` values, so reading one sums at most that many steps."""

    def __init__(self) -> None:
        self._steps = array("B")
        self._big: dict[int, int] = {}  # index: its step where it does not fit a byte
        self._checkpoints = array("q")  # the value at every CHECKPOINT-th index
        self._last = 0

    def __len__(self) -> int:
        return len(self._steps)

    def append(self, value: int) -> None:
        n = len(self._steps)
        step = value - self._last
        if step < 0:
            raise ValueError(f"values must not decrease, nor start below 0: {value} after {self._last}")
        if step >= 255:
            self._big[n] = step
            step = 255
        self._steps.append(step)
        if n % CHECKPOINT == 0:
            self._checkpoints.append(value)
        self._last = value

    def extend(self, values: Sequence[int] | np.ndarray) -> None:
        values = np.asarray(values, dtype=np.int64).reshape(-1)
        if not len(values):
            return
        n = len(self._steps)
        steps = np.diff(values, prepend=self._last)
        if steps.min() < 0:
            raise ValueError(f"values must not decrease, nor start below 0: {values[:8].tolist()}")
        for j in np.flatnonzero(steps >= 255).tolist():
            self._big[n + j] = int(steps[j])
        self._steps.frombytes(np.minimum(steps, 255).astype(np.uint8).tobytes())
        first = -n % CHECKPOINT
        self._checkpoints.frombytes(values[first::CHECKPOINT].tobytes())
        self._last = int(values[-1])

    def _block(self, c: int) -> np.ndarray:
        """The values of checkpoint block ``c``."""
        lo = c * CHECKPOINT
        hi = min(lo + CHECKPOINT, len(self._steps))
        steps = np.frombuffer(self._steps, dtype=np.uint8)[lo:hi].astype(np.int64)
        for j in np.flatnonzero(steps == 255).tolist():
            steps[j] = self._big[lo + j]
        steps[0] = 0
        return self._checkpoints[c] + np.cumsum(steps)

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> np.ndarray: ...
    def __getitem__(self, i: int | slice) -> int | np.ndarray:
        n = len(self._steps)
        if isinstance(i, slice):
            start, stop, stride = i.indices(n)
            if stop <= start:
                return np.zeros(0, dtype=np.int64)
            blocks = [self._block(c) for c in range(start // CHECKPOINT, (stop - 1) // CHECKPOINT + 1)]
            first = (start // CHECKPOINT) * CHECKPOINT
            return np.concatenate(blocks)[start - first : stop - first : stride]
        i = _index(i, n)
        return int(self._block(i // CHECKPOINT)[i % CHECKPOINT])

    def __iter__(self) -> Iterator[Any]:
        return iter(self[:].tolist())

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self[:] if dtype is None else self[:].astype(dtype)

    def count_at_most(self, value: int) -> int:
        """How many values are at most ``value`` (``bisect.bisect_right`` on the column), reading
        one block rather than one per step of a bisection."""
        # Every value from checkpoint c + 1 on exceeds ``value``, so the count ends within block c.
        c = bisect.bisect_right(self._checkpoints, value) - 1
        if c < 0:
            return 0
        return c * CHECKPOINT + int(np.searchsorted(self._block(c), value, side="right"))

    @property
    def nbytes(self) -> int:
        """Bytes of the steps and checkpoints kept (not counting the objects' own)."""
        return len(self._steps) + 8 * len(self._checkpoints) + 64 * len(self._big)

    def truncate(self, keep: int) -> None:
        """Forget every value from index ``keep`` on."""
        keep = max(0, min(keep, len(self._steps)))
        self._last = self[keep - 1] if keep else 0
        del self._steps[keep:]
        del self._checkpoints[(keep + CHECKPOINT - 1) // CHECKPOINT :]
        for j in [j for j in self._big if j >= keep]:
            del self._big[j]


class PeakColumn(Sequence[float]):
    """A float per op: the newest :data:`WHOLE` exactly, older ones thinned to what a plot draws.

    The thinned past keeps, for each bucket of :data:`BUCKET` ops, its lowest and its highest
    value and which ops they were (a bucket with a value that is not finite stays whole), so a
    curve drawn from it keeps every spike at its own op. Read at an op (or a slice), a column
    gives the series *as drawn*: exact where whole; in a thinned bucket its lowest and highest
    at their own ops and, at the others, the midpoint of the two. A number shown at a moment
    comes from that op's record instead (the lab rebuilds it exactly); :meth:`exact` says
    whether the column still holds it.
    """

    def __init__(self, typecode: str = "d", whole: int = WHOLE) -> None:
        self.typecode = typecode
        self.whole = max(whole, BUCKET)
        self._thin_at = self.whole + max(BUCKET, self.whole // 8)
        self._recent: array[float] = array(typecode)  # ops from self.thinned on
        self._lo: array[float] = array(typecode)
        self._hi: array[float] = array(typecode)
        self._lo_at = array("B")
        self._hi_at = array("B")
        self._kept: dict[int, np.ndarray] = {}  # buckets kept whole: bucket index -> values

    @property
    def thinned(self) -> int:
        """Ops in the thinned past (a multiple of :data:`BUCKET`)."""
        return len(self._lo) * BUCKET

    def __len__(self) -> int:
        return self.thinned + len(self._recent)

    def append(self, value: float) -> None:
        self._recent.append(value)
        if len(self._recent) >= self._thin_at:
            self._thin((len(self._recent) - self.whole) // BUCKET)

    def _thin(self, buckets: int) -> None:
        """Thin the oldest ``buckets`` buckets of the exact part."""
        # A copy: the array cannot shrink while numpy views its memory.
        values = np.array(self._recent[: buckets * BUCKET], dtype=self.typecode).reshape(-1, BUCKET)
        lo_at, hi_at = values.argmin(axis=1), values.argmax(axis=1)
        rows = np.arange(len(values))
        first = len(self._lo)
        for b in np.flatnonzero(~np.isfinite(values).all(axis=1)).tolist():
            self._kept[first + b] = values[b].copy()
        self._lo.frombytes(values[rows, lo_at].tobytes())
        self._hi.frombytes(values[rows, hi_at].tobytes())
        self._lo_at.frombytes(lo_at.astype(np.uint8).tobytes())
        self._hi_at.frombytes(hi_at.astype(np.uint8).tobytes())
        del self._recent[: buckets * BUCKET]

    def _drawn(self, start: int, stop: int) -> np.ndarray:
        """The thinned past's ops ``start`` to ``stop`` as drawn (whole buckets, then cut)."""
        b0, b1 = start // BUCKET, (stop + BUCKET - 1) // BUCKET
        lo = np.frombuffer(self._lo, dtype=self.typecode)[b0:b1].astype(np.float64)
        hi = np.frombuffer(self._hi, dtype=self.typecode)[b0:b1].astype(np.float64)
        out = np.repeat((lo + hi) / 2, BUCKET).reshape(-1, BUCKET)
        rows = np.arange(len(out))
        out[rows, np.frombuffer(self._lo_at, dtype=np.uint8)[b0:b1]] = lo
        out[rows, np.frombuffer(self._hi_at, dtype=np.uint8)[b0:b1]] = hi
        for b, values in self._kept.items():
            if b0 <= b < b1:
                out[b - b0] = values
        return out.reshape(-1)[start - b0 * BUCKET : stop - b0 * BUCKET]

    @overload
    def __getitem__(self, i: int) -> float: ...
    @overload
    def __getitem__(self, i: slice) -> Any: ...  # an ndarray, which typing's Sequence does not name
    def __getitem__(self, i: int | slice) -> float | np.ndarray:
        split = self.thinned
        if isinstance(i, slice):
            start, stop, stride = i.indices(len(self))
            if stop <= start:
                return np.zeros(0)
            recent = np.frombuffer(self._recent, dtype=self.typecode)
            parts = []
            if start < split:
                parts.append(self._drawn(start, min(stop, split)))
            if stop > split:
                parts.append(recent[max(start - split, 0) : stop - split].astype(np.float64))
            out = np.concatenate(parts) if len(parts) > 1 else parts[0]
            return out[::stride] if stride != 1 else out
        i = _index(i, len(self))
        if i >= split:
            return float(self._recent[i - split])
        return float(self._drawn(i, i + 1)[0])

    def __iter__(self) -> Iterator[Any]:
        return iter(self[:].tolist())

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self[:] if dtype is None else self[:].astype(dtype)

    def exact(self, i: int) -> bool:
        """Whether op ``i``'s value is kept exactly (whole, in a bucket kept whole, or an extreme)."""
        i = _index(i, len(self))
        if i >= self.thinned:
            return True
        b, at = divmod(i, BUCKET)
        return b in self._kept or at in (self._lo_at[b], self._hi_at[b])

    def truncate(self, keep: int) -> None:
        """Forget every op from index ``keep`` on. Cut inside the thinned past, the ops before the
        cut in its bucket stay as drawn, exact again only for its extremes."""
        keep = max(0, min(keep, len(self)))
        split = self.thinned
        if keep >= split:
            del self._recent[keep - split :]
            return
        b = keep // BUCKET
        head = self._drawn(b * BUCKET, keep) if keep > b * BUCKET else np.zeros(0)
        for column in (self._lo, self._hi, self._lo_at, self._hi_at):
            del column[b:]
        for k in [k for k in self._kept if k >= b]:
            del self._kept[k]
        self._recent = array(self.typecode, head.astype(self.typecode).tobytes())

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays kept (not counting the objects' own)."""
        kept = sum(v.nbytes for v in self._kept.values())
        cols = (self._recent, self._lo, self._hi, self._lo_at, self._hi_at)
        return kept + sum(c.itemsize * len(c) for c in cols)
