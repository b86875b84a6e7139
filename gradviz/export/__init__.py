"""Encoders for exported animations; they take numpy RGB frames and know nothing of Qt.

Every writer has the same life: ``add(frame)`` per frame, then ``commit()`` to
put the finished output in place, or ``abort()`` (also on any exception inside
``with writer:``), which leaves whatever was at the path before untouched.
"""

from __future__ import annotations

from collections.abc import Sequence

from gradviz.export.base import ExportCancelled, FrameWriter, Progress
from gradviz.export.gif import MAX_GIF_FPS, GifWriter, frame_durations
from gradviz.export.outputs import Output, check_output
from gradviz.export.palette import RGB
from gradviz.export.pngs import PngFolderWriter
from gradviz.export.video import VideoWriter

__all__ = [
    "MAX_GIF_FPS",
    "ExportCancelled",
    "FrameWriter",
    "GifWriter",
    "Output",
    "PngFolderWriter",
    "Progress",
    "VideoWriter",
    "check_output",
    "frame_durations",
    "open_writer",
]


def open_writer(
    output: Output,
    size: tuple[int, int],
    fps: float,
    *,
    fixed_colours: Sequence[RGB] = (),
    expected: int = 0,
) -> FrameWriter:
    """The writer for a checked output.

    Parameters
    ----------
    output:
        From :func:`check_output`.
    size:
        Width and height of the frames.
    fps:
        Frames per second (GIF at most 50).
    fixed_colours:
        Colours a GIF keeps exactly.
    expected:
        The number of frames to come, if known (names PNG files with enough digits).
    """
    if output.kind == "gif":
        return GifWriter(output.path, size, fps, fixed_colours)
    if output.kind == "video":
        return VideoWriter(output.path, size, fps)
    return PngFolderWriter(output.path, size, expected)
