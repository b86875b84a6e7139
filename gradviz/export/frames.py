"""Frames as the encoders take them, and a store that holds them until the palette is known."""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import numpy as np

# Past this many bytes of raw frames the store compresses further frames: screen
# pictures shrink 10-50x with zlib's fastest level, so long exports stay in memory.
RAW_BUDGET = 512 * 1024 * 1024


def check_frame(frame: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``frame`` as a C-contiguous ``(height, width, 3)`` uint8 RGB array of the given size.

    Raises
    ------
    ValueError
        When the frame has another shape or type (a programming error, not the user's).
    """
    w, h = size
    if frame.dtype != np.uint8 or frame.shape != (h, w, 3):
        raise ValueError(f"expected a ({h}, {w}, 3) uint8 RGB frame, got {frame.shape} {frame.dtype}")
    return np.ascontiguousarray(frame)


class FrameStore:
    """Frames kept in order: raw up to a memory budget, zlib-compressed beyond it.

    Parameters
    ----------
    size:
        Width and height of every frame.
    raw_budget:
        Bytes of raw frames kept before compressing.
    """

    def __init__(self, size: tuple[int, int], raw_budget: int = RAW_BUDGET) -> None:
        self.size = size
        self.raw_budget = raw_budget
        self._frames: list[np.ndarray | bytes] = []
        self._raw_bytes = 0

    def __len__(self) -> int:
        return len(self._frames)

    def append(self, frame: np.ndarray) -> None:
        """Keep a copy of ``frame`` (the caller may reuse its buffer)."""
        if self._raw_bytes + frame.nbytes <= self.raw_budget:
            self._frames.append(frame.copy())
            self._raw_bytes += frame.nbytes
        else:
            self._frames.append(zlib.compress(frame.tobytes(), 1))

    def __getitem__(self, index: int) -> np.ndarray:
        item = self._frames[index]
        if isinstance(item, bytes):
            w, h = self.size
            return np.frombuffer(zlib.decompress(item), dtype=np.uint8).reshape(h, w, 3)
        return item

    def drain(self) -> Iterator[np.ndarray]:
        """Yield every frame in order, releasing each one once it has been handed out."""
        for i in range(len(self._frames)):
            frame = self[i]
            self._frames[i] = b""
            yield frame
        self._frames.clear()
        self._raw_bytes = 0
