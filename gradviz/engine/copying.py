"""Copies of tensors into flat numpy arrays, made with as few calls as possible.

For a small model one PyTorch call costs more than the arithmetic of an op,
so copies go through numpy views of the tensors' memory where numpy can see it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import torch

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


def join(views: Sequence[np.ndarray]) -> np.ndarray:
    """One new float32 array holding ``views`` end to end."""
    flat = np.concatenate(views) if len(views) > 1 else views[0].copy()
    return flat if flat.dtype == np.float32 else flat.astype(np.float32)


def flat_copy(tensors: Sequence[torch.Tensor]) -> np.ndarray:
    """One copy of many tensors into a new flat float32 array, on the CPU."""
    if not tensors:
        return EMPTY
    views = numpy_views(tensors)
    if views is not None:
        return join(views)
    flat = torch.cat([t.detach().reshape(-1).float() for t in tensors])
    return flat.cpu().numpy()


class HeldGrads:
    """The ``.grad`` tensors left by a ``backward``, held by reference until the run's next op.

    Copying them is then done together with that op's own copies (one burst
    of numpy calls per op costs less than two), or earlier when a record is
    read. The run copies them before anything could write them in place; each
    tensor's version counter is checked when copying, so an unforeseen write
    is an error, never a wrong record.
    """

    def __init__(self, tensors: Sequence[torch.Tensor]) -> None:
        self._tensors: Sequence[torch.Tensor] | None = tensors
        self._versions = [t._version for t in tensors]
        self._flat: np.ndarray | None = None
        self._lock = threading.Lock()  # a reader and the stepping thread may copy at once

    def flat(self) -> np.ndarray:
        """The copy, made now if not yet."""
        with self._lock:
            if self._tensors is not None:
                if [t._version for t in self._tensors] != self._versions:
                    raise RuntimeError("a .grad tensor was written in place before it was recorded")
                self._flat = flat_copy(self._tensors)
                self._tensors = None
            assert self._flat is not None
            return self._flat
