"""Immutable records of every op, and the History that keeps them in bounded memory.

A :class:`Snapshot` is the full state of one run (parameters, ``.grad`` with
``None`` kept distinct from zeros, optimizer state, learning rates) as flat
float32 copies, read as numpy arrays; consecutive ops share the parts they did not change. An
:class:`OpRecord` is what one op left behind. A run's :class:`RunHistory`
knows every op's tick from the schedule, keeps the scalars of the newest ops,
the full records of the recent past (:class:`RecentRecords`: what each op left,
a record assembled when read), and a :class:`Keyframe` at the start of some
iterations; any op whose record is no longer kept (or was never made, for
large models) is rebuilt exactly by replay from the keyframe before it.
"""

from __future__ import annotations

import bisect
import math
import sys
import zlib
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, overload

import numpy as np

from gradviz.engine.columns import WHOLE, ScheduledTicks
from gradviz.engine.loop import OpSlot
from gradviz.engine.scenario import Op

if TYPE_CHECKING:
    from gradviz.engine.footprint import Footprint

StateKey = tuple[str, str, tuple[int, ...], str]  # (parameter, state key, shape, "dtype@where")
RunStatus = Literal["running", "diverged", "error"]


def floats(data: bytes) -> np.ndarray:
    """The float32 values of a copy's bytes, as a read-only array sharing them."""
    return np.frombuffer(data, np.float32)


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
class Weights:
    """What only a ``step`` (or a restore) changes: parameters, optimizer state, learning rates.

    Parameters and optimizer-state tensors are copied together, parameters
    first, into one run of float32 values (``values``, their bytes); the ops
    between two steps share one ``Weights``.
    """

    layout: Layout
    values: bytes
    state_keys: tuple[StateKey, ...]
    state_other: tuple[tuple[str, str, Any], ...]
    lr: Mapping[str, float]

    @cached_property
    def flat(self) -> np.ndarray:
        """Every value, parameters first, as a read-only array."""
        return floats(self.values)

    @property
    def param_flat(self) -> np.ndarray:
        return self.flat[: self.layout.total]

    @property
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


@dataclass(frozen=True, slots=True, eq=False)
class Grads:
    """Copies of ``.grad`` tensors end to end, and which parameters had one.

    ``present[i]`` is False where the parameter's ``.grad`` was ``None``,
    which is not the same as a tensor of zeros; ``values`` holds the float32 bytes of the present
    ones only.
    """

    values: bytes
    present: tuple[bool, ...]

    @property
    def flat(self) -> np.ndarray:
        """The present ``.grad`` values end to end, as a read-only array."""
        return floats(self.values)


@dataclass(frozen=True, slots=True, eq=False)
class Snapshot:
    """The full state of a run at one moment, copied from the real tensors.

    Named views are made when read, so recording an op costs only the copies.
    """

    weights: Weights
    grad_copy: Grads

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
    def grad_flat(self) -> np.ndarray:
        """Every present ``.grad``, end to end."""
        return self.grad_copy.flat

    @property
    def grad_present(self) -> tuple[bool, ...]:
        return self.grad_copy.present

    @property
    def state_keys(self) -> tuple[StateKey, ...]:
        return self.weights.state_keys

    @property
    def state_other(self) -> tuple[tuple[str, str, Any], ...]:
        return self.weights.state_other

    @property
    def lr(self) -> Mapping[str, float]:
        return self.weights.lr

    @property
    def params(self) -> dict[str, np.ndarray]:
        return self.weights.params

    @property
    def grads(self) -> dict[str, np.ndarray | None]:
        return self.layout.split(self.grad_copy.flat, self.grad_copy.present)

    @property
    def state(self) -> dict[str, dict[str, Any]]:
        return self.weights.state

    @property
    def nbytes(self) -> int:
        """Bytes of the copies."""
        return len(self.weights.values) + len(self.grad_copy.values)


# Where a float32's sign and high exponent bits lie among its four bytes.
_TOP_BYTE = 3 if sys.byteorder == "little" else 0
_LOW_BYTES = slice(0, 3) if sys.byteorder == "little" else slice(1, 4)


class PackedSnapshot:
    """A :class:`Snapshot` in about 85% of its bytes, unpacked bit for bit on demand.

    The top byte of a float32 (its sign and high exponent bits) takes few
    distinct values across a model's weights and optimizer state, so zlib
    shrinks it to a third or so; the three low bytes are close to random, and
    compressing them would cost several times as long for a few percent.
    """

    __slots__ = ("_fields", "_low", "_top", "_weight_bytes")

    def __init__(self, snap: Snapshot) -> None:
        w = snap.weights
        self._weight_bytes = len(w.values)
        words = np.frombuffer(w.values + snap.grad_copy.values, np.uint8).reshape(-1, 4)
        self._low = words[:, _LOW_BYTES].copy()
        self._top = zlib.compress(words[:, _TOP_BYTE].tobytes(), 1)
        self._fields = (w.layout, w.state_keys, w.state_other, w.lr, snap.grad_present)

    def unpack(self) -> Snapshot:
        """The snapshot, exactly as it was packed."""
        words = np.empty((len(self._low), 4), np.uint8)
        words[:, _LOW_BYTES] = self._low
        words[:, _TOP_BYTE] = np.frombuffer(zlib.decompress(self._top), np.uint8)
        data, cut = words.tobytes(), self._weight_bytes
        layout, keys, other, lr, present = self._fields
        return Snapshot(Weights(layout, data[:cut], keys, other, lr), Grads(data[cut:], present))

    @property
    def nbytes(self) -> int:
        return self._low.nbytes + len(self._top)


class OpRecord(NamedTuple):
    """What one op of one run left behind. Arrays are read-only numpy copies; no tensor is held.

    ``grads[name] is None`` means PyTorch's ``.grad`` was ``None``, which is not
    the same as a tensor of zeros. ``fresh`` (``backward`` only) is what this
    call alone delivered to each ``.grad`` as hooks caught it; where every
    ``.grad`` was ``None`` before the call, autograd sets ``.grad`` to exactly
    what it delivers, so ``fresh`` is the new ``.grad`` itself. ``prior``
    (``backward`` only) is what ``.grad`` held before the call.
    """

    run: str
    index: int  # type: ignore[assignment]  # the op's place in its run; tuple.index is not needed
    tick: int
    iteration: int
    slot: OpSlot
    loss: float | None
    diverged: bool
    error: str | None
    snapshot: Snapshot
    fresh: Grads | None = None
    prior: Grads | None = None
    # What autograd held and walked (engine/footprint.py): saved bytes, a backward's nodes.
    footprint: Footprint | None = None

    @property
    def op(self) -> Op:
        return self.slot.op

    @property
    def phase(self) -> str:
        return self.slot.phase

    @property
    def micro(self) -> int:
        return self.slot.micro

    @property
    def line(self) -> int:
        """The source line that performs the op (1-based)."""
        return self.slot.line

    @property
    def lines(self) -> tuple[int, int]:
        """The first and last source line of the op's statement."""
        return (self.slot.first, self.slot.last)

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

    @property
    def fresh_grads(self) -> dict[str, np.ndarray | None] | None:
        """For ``backward``: what this call alone delivered to each ``.grad`` (``None`` where nothing)."""
        return None if self.fresh is None else self.snapshot.layout.split(self.fresh.flat, self.fresh.present)

    @property
    def stale_grads(self) -> dict[str, np.ndarray | None] | None:
        """For ``backward``: what ``.grad`` already held before this call (``None`` where nothing)."""
        return None if self.prior is None else self.snapshot.layout.split(self.prior.flat, self.prior.present)


class RecordedRun(Protocol):
    """A run just after an op performed and recorded in full (:meth:`~gradviz.engine.run.Run.execute`):
    what a history keeps of that op."""

    last_loss: float | None
    status: RunStatus
    error: str | None
    weights: Weights  # the state after the op: copies, shared with the ops that changed neither part
    grad_copy: Grads
    fresh: Grads | None  # a backward's: what it delivered to .grad, and what .grad held before it
    prior: Grads | None
    footprint: Footprint | None  # where the lesson measures it


class RecentRecords(Sequence[OpRecord]):
    """The full records of a run's recent ops: ``recent[j]`` is the record of op ``start + j``.

    Kept as what each op left rather than an object per op: the state after it (its
    :class:`Weights` and :class:`Grads`, shared with the ops that changed neither) and its loss;
    and, only where an op has them, a backward's ``fresh`` and ``prior``, a footprint, the error
    or divergence that stopped the run. A record is assembled when read.
    """

    def __init__(self, run: str, slots: Sequence[OpSlot], ticks: ScheduledTicks) -> None:
        self.run = run
        self.start = 0
        self._slots = tuple(slots)  # the run's ops of one iteration, in order
        self._ticks = ticks
        self._weights: list[Weights] = []
        self._grads: list[Grads] = []
        self._loss: list[float | None] = []
        # By op index: (fresh, prior) of a backward, a footprint, an op that stopped its run.
        self._added: dict[int, tuple[Grads | None, Grads | None]] = {}
        self._footprints: dict[int, Footprint] = {}
        self._stops: dict[int, tuple[bool, str | None]] = {}  # (diverged, error)

    def __len__(self) -> int:
        return len(self._loss)

    def append(self, run: RecordedRun) -> None:
        """Keep what ``run``'s last op left, as the record of op ``start + len(self)``."""
        index = self.start + len(self._loss)
        self._weights.append(run.weights)
        self._grads.append(run.grad_copy)
        self._loss.append(run.last_loss)
        if run.prior is not None:
            self._added[index] = (run.fresh, run.prior)
        if run.footprint is not None:
            self._footprints[index] = run.footprint
        if run.status != "running":
            self._stops[index] = (run.status == "diverged", run.error)

    @overload
    def __getitem__(self, j: int) -> OpRecord: ...
    @overload
    def __getitem__(self, j: slice) -> list[OpRecord]: ...
    def __getitem__(self, j: int | slice) -> OpRecord | list[OpRecord]:
        n = len(self._loss)
        if isinstance(j, slice):
            return [self[k] for k in range(*j.indices(n))]
        j = j + n if j < 0 else j
        if not 0 <= j < n:
            raise IndexError(j)
        index = self.start + j
        fresh, prior = self._added.get(index, (None, None))
        diverged, error = self._stops.get(index, (False, None))
        per_iteration = len(self._slots)
        return OpRecord(
            self.run, index, self._ticks.tick_of(index), index // per_iteration,
            self._slots[index % per_iteration], self._loss[j], diverged, error,
            Snapshot(self._weights[j], self._grads[j]), fresh, prior, self._footprints.get(index),
        )  # fmt: skip

    def params_after(self, index: int) -> np.ndarray:
        """The parameters after op ``index`` (a kept one), end to end."""
        return self._weights[index - self.start].param_flat

    def keyframe_after(self, index: int) -> Keyframe:
        """The state op ``index`` (a kept one) left, and its loss: the keyframe of the iteration
        that op ``index`` ends."""
        j = index - self.start
        return Keyframe(Snapshot(self._weights[j], self._grads[j]), self._loss[j])

    def drop_oldest(self, n: int) -> None:
        """Forget the records of the oldest ``n`` ops."""
        for column in (self._weights, self._grads, self._loss):
            del column[:n]
        self.start += n
        self._forget_sparse(lambda index: index < self.start)

    def truncate(self, keep: int) -> None:
        """Forget the records of op ``keep`` and every op after it."""
        for column in (self._weights, self._grads, self._loss):
            del column[max(keep - self.start, 0) :]
        self.start = min(self.start, keep)
        self._forget_sparse(lambda index: index >= keep)

    def clear(self) -> None:
        """Forget every record, still counting the ops (the next one appended is op ``start + len``)."""
        self.drop_oldest(len(self))

    def _forget_sparse(self, gone: Callable[[int], bool]) -> None:
        for sparse in (self._added, self._footprints, self._stops):
            for index in [index for index in sparse if gone(index)]:
                del sparse[index]


@dataclass(frozen=True, slots=True, eq=False)
class Keyframe:
    """The state of a run at the start of an iteration, and its loss then: where a replay starts."""

    snapshot: Snapshot | PackedSnapshot
    loss: float | None

    def unpacked(self) -> Snapshot:
        snap = self.snapshot
        return snap.unpack() if isinstance(snap, PackedSnapshot) else snap

    def packed(self) -> Keyframe:
        """The same keyframe in fewer bytes."""
        snap = self.snapshot
        return self if isinstance(snap, PackedSnapshot) else Keyframe(PackedSnapshot(snap), self.loss)

    @property
    def nbytes(self) -> int:
        """About the bytes it keeps: its arrays, and the objects around them."""
        return self.snapshot.nbytes + KEYFRAME_OBJECT_BYTES


# Iterations between the keyframes of the thinned past. A model small enough for full records
# has a keyframe of at most 16 KB, so this is at most 330 bytes per iteration (about 8 for the
# smallest models, whose keyframes are mostly the objects around a few floats); rebuilding one of
# those ops replays at most this many iterations, about as long as a plain PyTorch loop of them takes.
THINNED_EVERY = 50
# Further back than SPARSE_AFTER iterations before the records kept (or, without records, before
# the newest keyframe), keyframes are SPARSE_FACTOR times sparser: a small model keeps a few hundred
# bytes of objects per keyframe, so an hour of fast Play (millions of iterations) keeps thousands
# of keyframes rather than a hundred thousand, and an op that far back is rebuilt by replaying up
# to 400 iterations (tens of ms).
SPARSE_AFTER = 10_000
SPARSE_FACTOR = 8
# Bytes the keyframes of that far past may keep per run. Where they would keep more (a large model
# keeps some 4 KB of keyframe per iteration, over 100 MB a minute of full-speed Play), every other one
# is dropped and their spacing doubles: memory stays bounded however long Play runs, and an op that
# far back is rebuilt by replaying more iterations (on the lab's thread; the views wait for it).
FAR_KEYFRAME_BYTES = 64 * 2**20
# The objects around a keyframe's arrays, about (measured for a small model's packed keyframe).
KEYFRAME_OBJECT_BYTES = 400


Rebuild = Callable[[str, int], OpRecord]


class Records(Sequence[OpRecord]):
    """Every op's full record, by op index: kept ones as they are, the others rebuilt by replay."""

    def __init__(self, history: RunHistory) -> None:
        self._h = history

    def __len__(self) -> int:
        return len(self._h)

    @overload
    def __getitem__(self, i: int) -> OpRecord: ...
    @overload
    def __getitem__(self, i: slice) -> list[OpRecord]: ...
    def __getitem__(self, i: int | slice) -> OpRecord | list[OpRecord]:
        h = self._h
        n = len(h)
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(n))]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        kept = i - h.recent_from
        if kept >= 0:
            return h.recent[kept]
        if h.rebuild is None:
            raise IndexError(f"op {i} of {h.run} is not kept and cannot be rebuilt")
        return h.rebuild(h.run, i)


class Scalars(NamedTuple):
    """What the timeline plots of one op: its loss (NaN before the first forward) and two norms."""

    loss: float
    grad_norm: float
    param_norm: float


# Ops whose scalars a lab keeps per run: the newest, for the window to read as they come (and a
# seek to find its norms); further back they live in the records, rebuilt by replay.
SCALARS_KEPT = WHOLE


class RunHistory:
    """The ops of one run, in bounded memory.

    - Every op: its tick, worked out from the lab's schedule (:class:`ScheduledTicks`), so
      nothing is stored for it.
    - The newest ops (:data:`SCALARS_KEPT`): their :class:`Scalars`, read with :meth:`scalars`.
    - The recent past: the op's full record (:class:`RecentRecords`), at most ``recent`` of
      them (0 for a large model, which keeps none).
    - Keyframes: the state at the start of an iteration. While its ops' records
      are kept, every iteration has one: the state its previous op left, read from that op's
      record; further back only every ``THINNED_EVERY``-th stays, packed (without records,
      every ``spacing``-th is kept, packed, from the start). Beyond :data:`SPARSE_AFTER`
      iterations, only every :attr:`sparse_every`-th, whose spacing doubles to keep
      them within :data:`FAR_KEYFRAME_BYTES`.

    ``records[i]`` is the record of op ``i`` either way: older ones are rebuilt
    by ``rebuild`` (the lab's replay from the keyframe before them).
    """

    def __init__(
        self,
        run: str,
        recent: int,
        slots: Sequence[OpSlot],
        ticks: ScheduledTicks,
        rebuild: Rebuild | None = None,
        scalars: int = SCALARS_KEPT,
    ) -> None:
        self.run = run
        self.recent_limit = recent
        # Thinned a slice at a time, so that each thinning's cost is spread over many ops.
        self._thin_at = recent + max(1, recent // 8)
        self.rebuild = rebuild
        self.keep_records = recent > 0
        self.recent = RecentRecords(run, slots, ticks)
        self.records = Records(self)
        self.keyframes: dict[int, Keyframe] = {}
        # Iterations between the keyframes kept beyond the full records: THINNED_EVERY; without
        # records, the lab's own spacing, which it sets once it has chosen it.
        self.spacing = THINNED_EVERY
        self._doublings = 0  # of the far past's spacing, to fit FAR_KEYFRAME_BYTES
        self._far_bytes = 0  # kept by the keyframes before ``_sparse_to``
        # The keyframes before these iterations are thinned already: to ``spacing``, to ``sparse_every``.
        self._thinned_to = 0
        self._sparse_to = 0
        self.ticks = ticks
        # The scalars of the ops from ``scalars_from`` on (every op until there are SCALARS_KEPT).
        self.scalars_from = 0
        self.scalars_kept = scalars
        self._forget_at = max(scalars + 1, scalars * 9 // 8)  # forgotten an eighth at a time
        self.loss = array("d")  # exactly as PyTorch gave it (nan before the first forward)
        self.grad_norm = array("f")  # norms only feed the timeline's plots
        self.param_norm = array("f")

    def __len__(self) -> int:
        return len(self.ticks)

    @property
    def recent_from(self) -> int:
        """Index of the first op whose full record is kept."""
        return len(self) - len(self.recent)

    @property
    def sparse_every(self) -> int:
        """Iterations between the keyframes of the far past (:data:`SPARSE_AFTER` and more back)."""
        return SPARSE_FACTOR * self.spacing << self._doublings

    def keep_keyframe(self, iteration: int, keyframe: Keyframe) -> None:
        """Keep the state at the start of ``iteration``, where a replay to its ops may start.

        A history without full records thins its far past here; one with them, as it drops them.
        """
        self.keyframes[iteration] = keyframe
        if not self.keep_records:
            self._thin_far(iteration - SPARSE_AFTER)

    def append(
        self,
        tick: int,
        loss: float | None,
        grad_norm: float,
        param_norm: float,
        recorded: RecordedRun | None = None,
    ) -> None:
        """Add one op: its tick (the run's next in the schedule), scalars, and, where this history
        keeps full records, what the op left (``recorded``: the run just after it, recorded in full)."""
        self.ticks.append(tick)
        self.loss.append(math.nan if loss is None else loss)
        self.grad_norm.append(grad_norm)
        self.param_norm.append(param_norm)
        if len(self.loss) >= self._forget_at:
            self._forget_scalars(len(self.loss) - self.scalars_kept)
        if recorded is not None and self.keep_records:
            self.recent.append(recorded)
            if len(self.recent) >= self._thin_at:
                self._thin(len(self.recent) - self.recent_limit)

    def scalars(self, index: int) -> Scalars:
        """The scalars of op ``index``; an IndexError once only its record (rebuilt) holds them."""
        j = index - self.scalars_from
        if not 0 <= j < len(self.loss):
            raise IndexError(f"the scalars of op {index} of {self.run} are no longer kept")
        return Scalars(self.loss[j], self.grad_norm[j], self.param_norm[j])

    def _forget_scalars(self, n: int) -> None:
        for col in (self.loss, self.grad_norm, self.param_norm):
            del col[:n]
        self.scalars_from += n

    def _thin(self, n: int) -> None:
        """Drop the oldest ``n`` full records, and the keyframes of their iterations but every
        ``spacing``-th (packed): what stays of those ops is their columns and a share of one.
        Keyframes more than :data:`SPARSE_AFTER` iterations before the records kept are thinned on
        (:meth:`_thin_far`)."""
        per_iteration = len(self.ticks.offsets)
        start = self.recent.start
        first_kept = (start + n) // per_iteration  # the iteration of the first record kept
        # The keyframes these records held (each iteration's, its previous op's state) that stay:
        # every spacing-th, and the first kept iteration's, where the near past starts.
        for k in range(start // per_iteration + 1, first_kept + 1):
            if k % self.spacing == 0 or k == first_kept:
                self.keyframes[k] = self.recent.keyframe_after(k * per_iteration - 1)
        self.recent.drop_oldest(n)
        for k in range(self._thinned_to, first_kept):
            keyframe = self.keyframes.get(k)
            if keyframe is None:
                continue
            if k % self.spacing:
                del self.keyframes[k]
            elif not isinstance(keyframe.snapshot, PackedSnapshot):
                self.keyframes[k] = keyframe.packed()
        self._thinned_to = max(self._thinned_to, first_kept)
        self._thin_far(first_kept - SPARSE_AFTER)

    def _thin_far(self, far: int) -> None:
        """Thin the keyframes before iteration ``far`` to every :attr:`sparse_every`-th, doubling
        that spacing (every other one dropped) while they keep more than :data:`FAR_KEYFRAME_BYTES`."""
        every = self.sparse_every
        for k in range(-(-self._sparse_to // self.spacing) * self.spacing, far, self.spacing):
            if k % every:
                self.keyframes.pop(k, None)
            elif (kept := self.keyframes.get(k)) is not None:
                self._far_bytes += kept.nbytes
        self._sparse_to = max(self._sparse_to, far)
        # Keyframe 0 stays whatever it costs: every replay of the far past may start there.
        while self._far_bytes > FAR_KEYFRAME_BYTES and self.sparse_every < self._sparse_to:
            self._doublings += 1
            every = self.sparse_every
            for k in [k for k in self.keyframes if k < self._sparse_to and k % every]:
                del self.keyframes[k]
            self._count_far_bytes()

    def _count_far_bytes(self) -> None:
        self._far_bytes = sum([kept.nbytes for k, kept in self.keyframes.items() if k < self._sparse_to])

    def forget_all(self) -> None:
        """Drop every op kept so far, still counting them (a streaming lab calls it before each op).

        Only :meth:`__len__`, the ops' ticks, the ops appended afterwards and the keyframes stay.
        """
        self._forget_scalars(len(self.loss))
        self.recent.clear()

    def keyframe(self, iteration: int) -> tuple[Snapshot, float | None]:
        """The keyframe at the start of ``iteration`` (unpacked) and the loss then."""
        kept = self.keyframes.get(iteration)
        if kept is None:
            kept = self.recent.keyframe_after(self._ending(iteration))
        return kept.unpacked(), kept.loss

    def keyframe_before(self, iteration: int) -> int:
        """The last iteration at or before ``iteration`` that has a keyframe."""
        if iteration in self.keyframes or self._ending(iteration) >= 0:
            return iteration
        order = list(self.keyframes)  # inserted in time order
        return order[bisect.bisect_right(order, iteration) - 1]

    def keyframe_iterations(self) -> list[int]:
        """Every iteration with a keyframe, in order: those kept, and those the records hold."""
        per_iteration = len(self.ticks.offsets)
        held = range(self.recent_from // per_iteration + 1, (len(self) - 1) // per_iteration + 1)
        return sorted({*self.keyframes, *held})

    def _ending(self, iteration: int) -> int:
        """The kept op whose record holds the keyframe of ``iteration`` (the op before it), where
        the iteration has begun; -1: none."""
        index = iteration * len(self.ticks.offsets) - 1
        return index if iteration and self.recent_from <= index < len(self) - 1 else -1

    def index_at(self, tick: int) -> int:
        """Index of the last op with ``tick`` at or before ``tick``; -1 if none."""
        return self.ticks.index_at(tick)

    def truncate(self, tick: int) -> None:
        """Forget every op after ``tick``, and the keyframes of later moments."""
        tpi = self.ticks.ticks_per_iteration
        for k in [k for k in self.keyframes if k * tpi > tick + 1]:
            del self.keyframes[k]
        # The keyframes made again from there on are thinned again in their turn.
        iteration = max(tick + 1, 0) // tpi
        self._thinned_to = min(self._thinned_to, iteration)
        self._sparse_to = min(self._sparse_to, iteration)
        # The far keyframes left are within their bytes at any spacing down to the first: the
        # next thinning doubles it again only where what is made from here on needs it.
        self._doublings = 0
        self._count_far_bytes()
        keep = self.index_at(tick) + 1
        self.recent.truncate(keep)
        self.ticks.truncate(keep)
        for col in (self.loss, self.grad_norm, self.param_norm):
            del col[max(keep - self.scalars_from, 0) :]
        self.scalars_from = min(self.scalars_from, keep)


class History:
    """Every run's ops in order, addressable by run name and op index or by tick."""

    def __init__(
        self,
        runs: list[str],
        recent: int,
        schedule: Sequence[Sequence[OpSlot | None]],
        rebuild: Rebuild | None = None,
        scalars: int = SCALARS_KEPT,
    ) -> None:
        self.runs = {
            name: RunHistory(
                name,
                recent,
                [slot for row in schedule if (slot := row[r]) is not None],
                ScheduledTicks.of_schedule(schedule, r),
                rebuild,
                scalars,
            )
            for r, name in enumerate(runs)
        }

    def __getitem__(self, run: str) -> RunHistory:
        return self.runs[run]

    @property
    def last_tick(self) -> int:
        return max((h.ticks[-1] for h in self.runs.values() if len(h)), default=-1)

    def truncate(self, tick: int) -> None:
        for h in self.runs.values():
            h.truncate(tick)
