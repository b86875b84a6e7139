"""What autograd holds and walks for one op, measured on the real objects.

- The bytes of tensors saved for backward, counted by
  ``torch.autograd.graph.saved_tensors_hooks`` as a forward saves them and
  released when autograd frees them (after a ``backward()`` without
  ``retain_graph``, or when the graph is dropped): the count is of what is held
  now, not an estimate. Parameters saved by an op (a ``Linear`` keeps its weight)
  are not counted: they are held anyway. A tensor saved by two ops counts once.
  Autograd does not check tensors saved through hooks for in-place changes, so
  they are counted only in loops where no ``step()`` comes between a forward and
  its backward (:func:`can_count_saved`): elsewhere the user's error about a
  modified tensor must stay PyTorch's.
- The number of autograd nodes a ``backward()`` walks: every node reachable
  from the loss's ``grad_fn``.
- On CUDA, the allocator's peak during the op (``torch.cuda.max_memory_allocated``).

Measuring costs a Python call per saved tensor and a walk of the graph per
backward (a fifth to a third more time per op of a small model, see
``bench/bench_footprint.py``), so a run measures only where its scenario's
lesson leads with memory or asks for these figures (:func:`wanted`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from gradviz.engine.lesson import Lesson
    from gradviz.engine.scenario import Scenario

# The lesson's reads that need a footprint.
READS = ("saved", "nodes")


@dataclass(frozen=True)
class Footprint:
    """What one op left autograd holding, and what it walked.

    Attributes
    ----------
    saved:
        Bytes of tensors saved for backward held after the op (parameters excepted);
        ``None`` where the loop's order leaves them uncounted.
    nodes:
        For a ``backward()``: the autograd nodes reachable from the loss, the graph it walked;
        ``None`` for other ops.
    device_peak:
        On CUDA, the most bytes the allocator held during the op; ``None`` elsewhere.
    """

    saved: int | None
    nodes: int | None = None
    device_peak: int | None = None


class _Held:
    """A saved tensor as autograd keeps it: releasing this releases the count of its bytes."""

    __slots__ = ("counter", "key", "tensor")

    def __init__(self, counter: SavedBytes, key: tuple[int, int], tensor: torch.Tensor) -> None:
        self.counter, self.key, self.tensor = counter, key, tensor

    def __del__(self) -> None:
        self.counter.release(self.key)


def _unpack(value: _Held | torch.Tensor) -> torch.Tensor:
    return value.tensor if isinstance(value, _Held) else value


class SavedBytes:
    """The bytes of tensors held for backward by the graphs built under :meth:`hooks`."""

    def __init__(self) -> None:
        self.live = 0
        self._refs: dict[tuple[int, int], int] = {}
        self._skip: frozenset[int] = frozenset()

    def hooks(self, params: Iterable[torch.Tensor]) -> torch.autograd.graph.saved_tensors_hooks:
        """A context in which every tensor a forward saves is counted until autograd frees it."""
        self._skip = frozenset(p.untyped_storage().data_ptr() for p in params)
        return torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)

    def _pack(self, t: torch.Tensor) -> _Held | torch.Tensor:
        if t.untyped_storage().data_ptr() in self._skip:
            return t
        key = (t.data_ptr(), t.numel() * t.element_size())
        n = self._refs.get(key, 0)
        if not n:
            self.live += key[1]
        self._refs[key] = n + 1
        # Detached: holding an op's own output with its grad_fn would make a reference cycle
        # that keeps the graph alive until the garbage collector runs.
        return _Held(self, key, t.detach())

    def release(self, key: tuple[int, int]) -> None:
        n = self._refs[key] - 1
        if n:
            self._refs[key] = n
        else:
            del self._refs[key]
            self.live -= key[1]


def lesson_reads(lesson: Lesson | None) -> set[str]:
    """Which of :data:`READS` (saved bytes, nodes walked) the questions of ``lesson`` read."""
    if lesson is None:
        return set()
    reads = {q.read.quantity for stop in lesson.stops for q in stop.questions if q.read is not None}
    return reads & set(READS)


def wanted(scenario: Scenario) -> bool:
    """Whether runs of ``scenario`` measure their footprint: its lesson leads with memory
    (the inspector's readouts show it) or a question reads saved bytes or nodes."""
    lesson = scenario.lesson
    return lesson is not None and (lesson.leads("memory") or bool(lesson_reads(lesson)))


def peak_saved(footprints: Iterable[Footprint | None]) -> int | None:
    """The most bytes held saved for backward after any of ``footprints``; None where none counted them.

    Saved tensors are only added during a forward and only freed by a backward or a
    dropped graph, so the most held after any op of an iteration is the most held
    during it: after ``step()`` the figure says what the forward passes cost.
    """
    counted = [f.saved for f in footprints if f is not None and f.saved is not None]
    return max(counted) if counted else None


def can_count_saved(order: Sequence[str]) -> bool:
    """Whether counting saved tensors leaves the loop's behaviour alone: no ``step`` between
    its ``forward`` and ``backward`` (a step there changes saved weights in place, which
    PyTorch refuses, unless hooks hide the change)."""
    if "forward" not in order or "backward" not in order or "step" not in order:
        return True
    return not order.index("forward") < order.index("step") < order.index("backward")


def graph_nodes(loss: torch.Tensor) -> int:
    """How many autograd nodes ``backward()`` from ``loss`` walks (0 for a loss without a graph)."""
    root = loss.grad_fn
    if root is None:
        return 0
    seen = {root}
    todo = [root]
    while todo:
        for nxt, _ in todo.pop().next_functions:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return len(seen)
