"""A folder of numbered PNG frames (``frame-0001.png`` ...), for editors that assemble their own video."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from gradviz.export.atomic import AtomicFolder
from gradviz.export.base import FrameWriter, Progress
from gradviz.export.frames import check_frame
from gradviz.export.interrupt import check_interrupt


class PngFolderWriter(FrameWriter):
    """Writes each frame as it comes into a temporary folder that replaces ``path`` on commit.

    Parameters
    ----------
    path:
        The folder to create (or an earlier export of frames to replace).
    size:
        Width and height of every frame.
    expected:
        How many frames will come, to number them with enough digits (at least 4).
    """

    def __init__(self, path: Path, size: tuple[int, int], expected: int = 0) -> None:
        self.path = path
        self.size = size
        self.digits = max(4, len(str(expected)))
        self.count = 0
        self._folder = AtomicFolder(path)

    def __len__(self) -> int:
        return self.count

    def add(self, frame: np.ndarray) -> None:
        """Write one ``(height, width, 3)`` uint8 RGB frame as the next numbered PNG."""
        check_interrupt()
        self.count += 1
        image = Image.fromarray(check_frame(frame, self.size))
        image.save(self._folder.temp / f"frame-{self.count:0{self.digits}d}.png", compress_level=3)

    def commit(self, progress: Progress | None = None) -> Path:
        """Put the folder in place."""
        return self._folder.commit()

    def abort(self) -> None:
        """Remove the temporary folder; an existing folder stays as it was."""
        self._folder.abort()
