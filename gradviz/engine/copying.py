"""Copies of tensors into flat numpy arrays, made with as few calls as possible.

For a small model one PyTorch call costs more than the arithmetic of an op,
so copies go through numpy views of the tensors' memory where numpy can see it.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Sequence

import numpy as np
import torch

FLOAT32 = np.dtype(np.float32)
EMPTY = np.zeros(0, dtype=np.float32)
EMPTY.flags.writeable = False


def numpy_views(tensors: Sequence[torch.Tensor]) -> list[np.ndarray] | None:
    """Flat numpy arrays sharing the tensors' memory; ``None`` where numpy cannot share one
    (a GPU tensor, bfloat16, a strided view)."""
    views = []
    for t in tensors:
        if not t.is_cpu:
            return None
        try:
            a = (t.detach() if t.requires_grad else t).numpy()
        except TypeError:  # a dtype numpy lacks
            return None
        if not a.flags.c_contiguous:
            return None
        views.append(a.reshape(-1))
    return views


def byte_views(tensors: Sequence[torch.Tensor]) -> list[memoryview] | None:
    """Views of the tensors' memory for ``b"".join``: the cheapest copy of many small
    tensors (one call into Python itself, no array to build); ``None`` unless every
    tensor is a contiguous float32 array on the CPU."""
    views = numpy_views(tensors)
    if views is None or any(v.dtype != FLOAT32 for v in views):
        return None
    return [memoryview(v) for v in views]  # type: ignore[arg-type]  # numpy arrays are buffers


def join(views: Sequence[np.ndarray]) -> np.ndarray:
    """One new float32 array holding ``views`` end to end."""
    flat = np.concatenate(views) if len(views) > 1 else views[0].copy()
    return flat if flat.dtype is FLOAT32 else flat.astype(np.float32)


def flat_copy(tensors: Sequence[torch.Tensor]) -> np.ndarray:
    """One copy of many tensors into a new flat float32 array, on the CPU."""
    if not tensors:
        return EMPTY
    views = numpy_views(tensors)
    if views is not None:
        return join(views)
    parts = [t.detach().reshape(-1).float() for t in tensors]
    if len({t.device for t in parts}) > 1:  # optimizer state may keep its step count on the CPU
        parts = [t.cpu() for t in parts]
    return torch.cat(parts).cpu().numpy()


_VERSION = operator.attrgetter("_version")
_COPYING = threading.Lock()  # a reader and the stepping thread may copy at once


class HeldGrads:
    """``.grad`` tensors held by reference instead of copied.

    They are copied when a record is first read, or by the run before an op
    that could write them in place while they are still some parameter's
    ``.grad``; most never need a copy. Each tensor's version counter is checked
    when copying, so an unforeseen write is an error, never a wrong record.
    """

    def __init__(self, tensors: Sequence[torch.Tensor]) -> None:
        self._tensors: Sequence[torch.Tensor] | None = tensors
        self._versions = list(map(_VERSION, tensors))
        self._flat: np.ndarray | None = None

    @property
    def held_bytes(self) -> int:
        """Bytes of tensor data still held (none once copied)."""
        return sum(t.nbytes for t in self._tensors) if self._tensors is not None else 0

    def holds_any(self, ids: set[int]) -> bool:
        """True while not yet copied and holding a tensor whose ``id`` is in ``ids``."""
        tensors = self._tensors
        return tensors is not None and not ids.isdisjoint(map(id, tensors))

    def flat(self) -> np.ndarray:
        """The copy, made now if not yet."""
        with _COPYING:
            if self._tensors is not None:
                if list(map(_VERSION, self._tensors)) != self._versions:
                    raise RuntimeError("a .grad tensor was written in place before it was recorded")
                self._flat = flat_copy(self._tensors)
                self._tensors = None
            assert self._flat is not None
            return self._flat
