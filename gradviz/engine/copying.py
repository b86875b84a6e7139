"""Copies of tensors into bytes of float32 values, made with as few calls as possible.

For a small model one PyTorch call costs more than the arithmetic of an op,
so copies go through numpy views of the tensors' memory where numpy can see it.
A copy is kept as bytes and made a numpy array (``record.floats``) only when read:
an array object per copy kept would cost more than the copy itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

FLOAT32 = np.dtype(np.float32)


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


def join(views: Sequence[np.ndarray]) -> bytes:
    """The float32 values of ``views`` end to end, as bytes.

    Contiguous float32 views are joined in one call into Python itself: for a
    few small arrays that costs less than numpy's concatenate, and slows the
    PyTorch calls around it less. A non-contiguous view raises ``TypeError``.
    """
    for v in views:
        if v.dtype is not FLOAT32:
            return np.concatenate(views, axis=None).astype(np.float32).tobytes()
    return b"".join(views)  # type: ignore[arg-type]  # arrays are buffers


def flat_copy(tensors: Sequence[torch.Tensor]) -> bytes:
    """One copy of many tensors' values, end to end, as float32 bytes (on the CPU)."""
    if not tensors:
        return b""
    try:  # CPU tensors that need no gradient, of a dtype numpy has: joined in one call
        return join([t.numpy() for t in tensors])
    except (TypeError, RuntimeError):
        pass
    parts = [t.detach().reshape(-1).float() for t in tensors]
    if len({t.device for t in parts}) > 1:  # optimizer state may keep its step count on the CPU
        parts = [t.cpu() for t in parts]
    return torch.cat(parts).cpu().numpy().tobytes()
