"""What every encoder offers: add frames, then commit the whole output or abort leaving none."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self

import numpy as np

Progress = Callable[[int, int], None]


class ExportCancelled(Exception):
    """Raised when the user cancels an export; nothing was written."""


class FrameWriter(ABC):
    """An output being written: ``add`` frames, then ``commit``; ``abort`` leaves the path as it was.

    Leaving ``with writer:`` without :meth:`commit`, by an exception (a cancel,
    Ctrl+C, a failed frame) or not, aborts, so no partial file is ever left behind.
    """

    path: Path
    #: Sentences the user should read about how the output differs from what was asked
    #: (a video's size made even, say); known once the writer exists.
    notes: tuple[str, ...] = ()

    @abstractmethod
    def add(self, frame: np.ndarray) -> None:
        """Append one ``(height, width, 3)`` uint8 RGB frame."""

    @abstractmethod
    def commit(self, progress: Progress | None = None) -> Path:
        """Finish the output and put it in place; ``progress(done, total)`` may raise to cancel."""

    @abstractmethod
    def abort(self) -> None:
        """Drop everything written so far; whatever was at the path before stays."""

    @abstractmethod
    def __len__(self) -> int:
        """Frames added so far."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # After a commit this is a no-op: every writer's abort leaves a committed output alone.
        self.abort()
