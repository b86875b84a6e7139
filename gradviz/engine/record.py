"""Immutable records of every op, and the History that keeps them in bounded memory.

A :class:`Snapshot` is the full state of one run (parameters, ``.grad`` with
``None`` kept distinct from zeros, optimizer state, learning rates) as flat
copies. An :class:`OpRecord` is what one op left behind. Small models
keep a snapshot per op; large ones keep per-op scalars plus a snapshot every
few iterations (keyframes), and any op is rebuilt exactly by replay.
"""

from __future__ import annotations

import bisect
import math
import sys
import zlib
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar, overload

import numpy as np
import torch

from gradviz.engine.copying import HeldGrads
from gradviz.engine.footprint import Footprint
from gradviz.engine.scenario import Op

T = TypeVar("T")


def _make(cls: type[T], *values: Any) -> T:
    """Build a frozen dataclass without its generated ``__init__``.

    Frozen ``__init__`` assigns through ``object.__setattr__`` field by field and
    costs several times the recording of a small model's op; this fills the
    instance dictionary in one call. The result is as frozen as any other.
    """
    obj = object.__new__(cls)
    obj.__dict__.update(zip(cls.__match_args__, values, strict=False))  # type: ignore[attr-defined]
    return obj


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


def numpy_of(t: torch.Tensor) -> np.ndarray:
    """A read-only numpy view of a tensor that nothing writes to any more."""
    a = (t if t.device.type == "cpu" else t.cpu()).numpy()
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False, init=False)
class Weights:
    """What only a ``step`` (or a restore) changes: parameters, optimizer state, learning rates.

    Parameters and optimizer-state tensors are copied together, parameters
    first, into ``data``: a float32 array, or its bytes where that copy is
    cheaper (a step of a small model); the ops between two steps share one
    ``Weights``.
    """

    layout: Layout
    data: np.ndarray | bytes
    state_keys: tuple[tuple[str, str, tuple[int, ...], str], ...]
    state_other: tuple[tuple[str, str, Any], ...]
    lr: Mapping[str, float]

    def __init__(
        self,
        layout: Layout,
        data: np.ndarray | bytes,
        state_keys: tuple[tuple[str, str, tuple[int, ...], str], ...],
        state_other: tuple[tuple[str, str, Any], ...],
        lr: Mapping[str, float],
    ) -> None:
        # Filled in directly: a frozen dataclass's own __init__ sets fields one
        # object.__setattr__ at a time, several times the cost of a small model's copy.
        d = self.__dict__
        d["layout"], d["data"], d["lr"] = layout, data, lr
        d["state_keys"], d["state_other"] = state_keys, state_other

    @cached_property
    def flat(self) -> np.ndarray:
        """Parameters and optimizer state end to end, read-only where kept as bytes."""
        data = self.data
        return data if isinstance(data, np.ndarray) else np.frombuffer(data, np.float32)

    @cached_property
    def param_flat(self) -> np.ndarray:
        return self.flat[: self.layout.total]

    @cached_property
    def state_flat(self) -> np.ndarray:
        return self.flat[self.layout.total :]

    @cached_property
    def params(self) -> dict[str, np.ndarray]:
        return self.layout.split(self.param_flat)

    @cached_property
    def state(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {name: {} for name in self.layout.names}
        flat = self.state_flat
        offset = 0
        for pname, key, shape, _dtype in self.state_keys:
            size = int(np.prod(shape))
            view = flat[offset : offset + size].reshape(shape)
            view.flags.writeable = False
            out[pname][key] = view
            offset += size
        for pname, key, value in self.state_other:
            out[pname][key] = value
        return out


GradData = np.ndarray | HeldGrads


def grad_flat_of(data: GradData) -> np.ndarray:
    """Every present ``.grad`` end to end, copying held tensors if not yet copied."""
    return data if isinstance(data, np.ndarray) else data.flat()


@dataclass(frozen=True, eq=False, init=False)
class Snapshot:
    """The full state of a run at one moment, copied from the real tensors.

    The flat arrays are copies that nothing writes to; ``.grad`` may still be
    held by reference (:class:`HeldGrads`) and is copied on first read at the
    latest. The named views are made on first access, so recording an op costs
    only the copies.
    """

    weights: Weights
    grad_data: GradData
    grad_present: tuple[bool, ...]

    def __init__(self, weights: Weights, grad_data: GradData, grad_present: tuple[bool, ...]) -> None:
        d = self.__dict__  # as in Weights
        d["weights"], d["grad_data"], d["grad_present"] = weights, grad_data, grad_present

    @property
    def layout(self) -> Layout:
        return self.weights.layout

    @property
    def param_flat(self) -> np.ndarray:
        return self.weights.param_flat

    @property
    def state_flat(self) -> np.ndarray:
        return self.weights.state_flat

    @property
    def state_keys(self) -> tuple[tuple[str, str, tuple[int, ...], str], ...]:
        return self.weights.state_keys

    @property
    def state_other(self) -> tuple[tuple[str, str, Any], ...]:
        return self.weights.state_other

    @property
    def lr(self) -> Mapping[str, float]:
        return self.weights.lr

    @property
    def grad_flat(self) -> np.ndarray:
        """Every present ``.grad``, end to end."""
        return grad_flat_of(self.grad_data)

    @property
    def params(self) -> dict[str, np.ndarray]:
        return self.weights.params

    @cached_property
    def grads(self) -> dict[str, np.ndarray | None]:
        return self.layout.split(self.grad_flat, self.grad_present)

    @property
    def state(self) -> dict[str, dict[str, Any]]:
        return self.weights.state


# Where a float32's sign and high exponent bits lie among its four bytes.
_TOP_BYTE = 3 if sys.byteorder == "little" else 0
_LOW_BYTES = [i for i in range(4) if i != _TOP_BYTE]


class PackedSnapshot:
    """A :class:`Snapshot` in about 85% of its bytes, unpacked bit for bit on demand.

    The top byte of a float32 (its sign and high exponent bits) takes few
    distinct values across a model's weights and optimizer state, so zlib
    shrinks it to a third or so; the three low bytes are close to random, and
    compressing them would cost several times as long for a few percent.
    """

    def __init__(self, snap: Snapshot) -> None:
        w = snap.weights
        grads = snap.grad_flat
        self._weight_count = w.flat.size
        words = np.concatenate((w.flat, grads)).view(np.uint8).reshape(-1, 4)
        self._low = words[:, _LOW_BYTES].copy()
        self._top = zlib.compress(words[:, _TOP_BYTE].tobytes(), 1)
        self._fields = (w.layout, w.state_keys, w.state_other, w.lr, snap.grad_present)

    def unpack(self) -> Snapshot:
        """The snapshot, exactly as it was packed."""
        words = np.empty((len(self._low), 4), np.uint8)
        words[:, _LOW_BYTES] = self._low
        words[:, _TOP_BYTE] = np.frombuffer(zlib.decompress(self._top), np.uint8)
        flat = words.view(np.float32).reshape(-1)
        flat.flags.writeable = False
        weights, grads = np.split(flat, [self._weight_count])
        layout, keys, other, lr, present = self._fields
        return Snapshot(Weights(layout, weights, keys, other, lr), grads, present)

    @property
    def nbytes(self) -> int:
        return self._low.nbytes + len(self._top)


@dataclass(frozen=True, eq=False)
class OpRecord:
    """What one op of one run left behind. Arrays are read-only numpy views of copies.

    ``grads[name] is None`` means PyTorch's ``.grad`` was ``None``, which is not
    the same as a tensor of zeros. ``fresh_grads`` (``backward`` only) holds what
    this call alone delivered to each ``.grad``; ``None`` where it added nothing.
    ``fresh`` is what hooks caught of it, or ``True`` where every ``.grad`` was
    ``None`` before the call: autograd then sets ``.grad`` to exactly what it
    delivers, so the new ``.grad`` is the fresh gradient.
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
    fresh: tuple[torch.Tensor | None, ...] | bool | None = None
    prior: Snapshot | None = None
    # What autograd held and walked (engine/footprint.py): saved bytes, a backward's nodes.
    footprint: Footprint | None = None

    @classmethod
    def from_entry(cls, run: str, index: int, entry: Entry) -> OpRecord:
        """The record of op ``index`` of ``run`` from what recording kept of it."""
        slot, iteration, tick, loss, diverged, error, weights, grads, present, fresh, prior, footprint = entry
        snap = Snapshot(weights, grads, present)
        before = None if prior is None else Snapshot(weights, *prior)
        return _make(
            cls, run, index, tick, iteration, slot.micro, slot.phase, slot.op, slot.line,
            (slot.first, slot.last), loss, diverged, error, snap, fresh, before, footprint,
        )  # fmt: skip

    @property
    def error_sentence(self) -> str | None:
        """The error's first sentence, in PyTorch's own words: short enough for a line of a view."""
        if self.error is None:
            return None
        head, dot, _ = self.error.partition(". ")
        return head + "." if dot else self.error

    @property
    def memory(self) -> dict[str, int]:
        """Bytes held by parameters, by ``.grad`` tensors (none for ``None``) and by optimizer state."""
        s = self.snapshot
        return {"params": s.param_flat.nbytes, "grads": s.grad_flat.nbytes, "state": s.state_flat.nbytes}

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
        if self.fresh is None:
            return None
        if not isinstance(self.fresh, tuple):  # True: .grad is what the call delivered
            return self.grads
        out: dict[str, np.ndarray | None] = {}
        for name, t in zip(self.snapshot.layout.names, self.fresh, strict=True):
            out[name] = None if t is None else numpy_of(t)
        return out

    @property
    def stale_grads(self) -> dict[str, np.ndarray | None] | None:
        """For ``backward``: what ``.grad`` already held before this call (``None`` where nothing)."""
        return None if self.prior is None else self.prior.grads


# What recording keeps of one op: (slot, iteration, tick, loss, diverged, error,
# weights, grad data, grad present, fresh, prior, footprint) where prior is the (grad data,
# grad present) a backward found. A plain tuple of what the run already holds,
# because building objects for every op would cost more than the copies;
# snapshots and records are made when read.
Entry = tuple


class _Records(Sequence[OpRecord]):
    """The full records of a run, made from the kept entries when read."""

    def __init__(self, history: RunHistory) -> None:
        self._h = history

    def __len__(self) -> int:
        return len(self._h.entries)

    @overload
    def __getitem__(self, i: int) -> OpRecord: ...
    @overload
    def __getitem__(self, i: slice) -> list[OpRecord]: ...
    def __getitem__(self, i: int | slice) -> OpRecord | list[OpRecord]:
        n = len(self._h.entries)
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(n))]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return OpRecord.from_entry(self._h.run, self._h.forgotten + i, self._h.entries[i])


class RunHistory:
    """The ops of one run: a tick per op, full entries where kept, scalar columns for the timeline.

    With full entries the columns are derived from them when first read, so
    recording an op does no arithmetic for the timeline.
    """

    def __init__(self, run: str, keep_records: bool) -> None:
        self.run = run
        self.keep_records = keep_records
        self.ticks = array("i")  # 4-byte columns: beside the keyframes, the rest of a large model's history
        self.entries: list[Entry] = []
        # Ops dropped from the front by forget_all (a streaming lab): op i is entries[i - forgotten].
        self.forgotten = 0
        self.records = _Records(self)
        # Iteration -> (state at its start, the loss then), packed where memory is bounded;
        # or, with full entries, the number of entries before it (the last one left that state).
        self.keyframes: dict[int, tuple[Snapshot | PackedSnapshot, float | None] | int] = {}
        # The loss exactly as PyTorch gave it; the norms only feed the timeline's plots.
        self._columns = {"loss": array("d"), "grad_norm": array("f"), "param_norm": array("f")}

    def __len__(self) -> int:
        return self.forgotten + len(self.ticks)

    def forget_all(self) -> None:
        """Drop every op kept so far, still counting them (a streaming lab calls it before each op).

        Only :meth:`__len__`, the ops appended afterwards and the keyframes stay;
        ticks, columns and records are those of the later ops alone.
        """
        n = len(self.ticks)
        self.forgotten += n
        del self.ticks[:]
        del self.entries[:]
        for col in self._columns.values():
            del col[:n]

    def append(self, tick: int, loss: float | None, norms: tuple[float, float]) -> None:
        """Add one op of a light run: its loss and (grad, param) norms.

        A full run's ops are added by appending to ``ticks`` and ``entries``.
        """
        self.ticks.append(tick)
        c = self._columns
        c["loss"].append(math.nan if loss is None else loss)
        c["grad_norm"].append(norms[0])
        c["param_norm"].append(norms[1])

    def _column(self, name: str) -> array:
        col = self._columns[name]
        if self.keep_records:
            loss, grad, param = self._columns.values()
            for entry in self.entries[len(col) :]:
                loss.append(math.nan if entry[3] is None else entry[3])
                grad.append(float(np.linalg.norm(grad_flat_of(entry[7]))))
                param.append(float(np.linalg.norm(entry[6].param_flat)))
        return col

    @property
    def loss(self) -> array:
        """Loss after each op (nan before the first forward)."""
        return self._column("loss")

    @property
    def grad_norm(self) -> array:
        """Norm of all ``.grad`` after each op (``None`` counts as nothing)."""
        return self._column("grad_norm")

    @property
    def param_norm(self) -> array:
        """Norm of all parameters after each op."""
        return self._column("param_norm")

    def keyframe(self, iteration: int) -> tuple[Snapshot, float | None]:
        """The keyframe at the start of ``iteration`` (unpacked) and the loss then."""
        kept = self.keyframes[iteration]
        if isinstance(kept, int):
            if kept == 0:
                return self.keyframe(0)
            entry = self.entries[kept - 1]
            return Snapshot(entry[6], entry[7], entry[8]), entry[3]
        snap, loss = kept
        return (snap.unpack() if isinstance(snap, PackedSnapshot) else snap), loss

    def index_at(self, tick: int) -> int:
        """Index of the last op with ``tick`` at or before ``tick``; -1 if none."""
        return self.forgotten + bisect.bisect_right(self.ticks, tick) - 1

    def truncate(self, tick: int) -> None:
        """Forget every op after ``tick``."""
        keep = max(self.index_at(tick) + 1 - self.forgotten, 0)
        del self.ticks[keep:]
        del self.entries[keep:]
        for col in self._columns.values():
            del col[keep:]


class History:
    """Every run's ops in order, addressable by run name and op index or by tick."""

    def __init__(self, runs: list[str], keep_records: bool) -> None:
        self.runs = {name: RunHistory(name, keep_records) for name in runs}

    def __getitem__(self, run: str) -> RunHistory:
        return self.runs[run]

    @property
    def last_tick(self) -> int:
        return max((h.ticks[-1] for h in self.runs.values() if len(h)), default=-1)

    def truncate(self, tick: int) -> None:
        for h in self.runs.values():
            h.truncate(tick)
