"""Animated GIF with one global palette, looping, written atomically and reproducibly.

The file is laid out here, block by block (GIF89a: one global colour table, a
looping extension, and per frame a graphic control extension and the image);
Pillow compresses each frame's pixels (LZW, in C). Each frame after the first
holds only the box where it differs from the frame before, with the pixels
that stay the same inside it made transparent: long runs of one index, which
LZW packs tightly. A frame equal to the one before lengthens that one instead.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import GifImagePlugin, Image

from gradviz.export.atomic import AtomicFile, remove_stale
from gradviz.export.base import FrameWriter, Progress
from gradviz.export.frames import FrameStore, check_frame
from gradviz.export.interrupt import check_interrupt
from gradviz.export.palette import RGB, PaletteMapper, build_palette, sample_indices

# Browsers show GIF frames shorter than 2 centiseconds for 10: faster GIFs play slower.
MAX_GIF_FPS = 50.0
# Graphic control: "do not dispose" (each frame is drawn over the one before).
KEEP_PREVIOUS = 1


def frame_durations(count: int, fps: float) -> list[int]:
    """Per-frame durations in milliseconds, whole centiseconds as GIF stores them.

    Rounding the running total rather than each frame keeps the animation's
    length right: 12 fps alternates 80 ms and 90 ms instead of drifting at 80 ms.
    """
    ends = [int((i + 1) * 100 / fps + 0.5) for i in range(count)]
    starts = [0, *ends[:-1]]
    return [10 * max(end - start, 2) for start, end in zip(starts, ends, strict=True)]


def gif_header(size: tuple[int, int], palette: Sequence[RGB]) -> bytes:
    """The file's start: signature, screen size, a 256-entry global colour table, loop forever."""
    w, h = size
    table = bytearray(768)
    for i, (r, g, b) in enumerate(palette):
        table[3 * i : 3 * i + 3] = bytes((r, g, b))
    # Global table present, 8 bits of colour resolution, 2^(7+1) entries.
    screen = struct.pack("<HHBBB", w, h, 0xF7, 0, 0)
    loop = b"!\xff\x0bNETSCAPE2.0\x03\x01" + struct.pack("<H", 0) + b"\x00"
    return b"GIF89a" + screen + bytes(table) + loop


@dataclass
class _Part:
    """One frame as written: the box that changed, where it sits, how long it shows."""

    pixels: np.ndarray
    offset: tuple[int, int]
    duration: int
    transparent: int | None

    def write(self, out: BinaryIO) -> None:
        packed = (KEEP_PREVIOUS << 2) | (1 if self.transparent is not None else 0)
        centiseconds = self.duration // 10
        out.write(b"!\xf9\x04" + struct.pack("<BHB", packed, centiseconds, self.transparent or 0) + b"\x00")
        h, w = self.pixels.shape
        image = Image.frombuffer("L", (w, h), np.ascontiguousarray(self.pixels), "raw", "L", 0, 1)
        # The image descriptor and the LZW-compressed pixels (no colour table: the global one serves).
        for chunk in GifImagePlugin.getdata(image, self.offset):
            out.write(chunk)


def changed_part(previous: np.ndarray, current: np.ndarray) -> tuple[slice, slice, np.ndarray] | None:
    """Where two RGB frames differ: the rows and columns of the smallest box holding every changed
    pixel, and which pixels inside that box changed.

    None when the frames are the same. Compared as bytes, before any palette lookup: a frame
    that changes in a small place (a caption, a marker) is looked up only there.
    """
    h = current.shape[0]
    rows = np.flatnonzero(np.not_equal(previous.reshape(h, -1), current.reshape(h, -1)).any(axis=1))
    if rows.size == 0:
        return None
    y = slice(int(rows[0]), int(rows[-1]) + 1)
    differs = previous[y] != current[y]
    # Or-ing the three channels' planes is several times faster than any() over a last axis of 3.
    changed = differs[..., 0] | differs[..., 1] | differs[..., 2]
    cols = np.flatnonzero(changed.any(axis=0))
    x = slice(int(cols[0]), int(cols[-1]) + 1)
    return y, x, changed[:, x]


class GifWriter(FrameWriter):
    """Collects frames and, on :meth:`commit`, encodes them as one looping GIF.

    The palette is built at the end from frames sampled over the whole
    animation (trajectories grow, so the first frame alone would miss colours),
    which is why frames are held until then.

    Parameters
    ----------
    path:
        The ``.gif`` to write; replaced only when the whole file is ready.
    size:
        Width and height of every frame.
    fps:
        Frames per second (at most 50, see :data:`MAX_GIF_FPS`).
    fixed_colours:
        Colours that must stay exact (run, op and theme colours).
    """

    def __init__(
        self, path: Path, size: tuple[int, int], fps: float, fixed_colours: Sequence[RGB] = ()
    ) -> None:
        if not 0 < fps <= MAX_GIF_FPS:
            raise ValueError(f"GIF frame rate must be in (0, {MAX_GIF_FPS:g}], not {fps}")
        self.path = path
        self.size = size
        self.fps = fps
        self.fixed_colours = tuple(fixed_colours)
        self.store = FrameStore(size)
        self._file: AtomicFile | None = None
        # Now rather than when the file is made at the end: a killed export's leftovers go at once.
        remove_stale(path)

    def __len__(self) -> int:
        return len(self.store)

    def add(self, frame: np.ndarray) -> None:
        """Append one ``(height, width, 3)`` uint8 RGB frame."""
        self.store.append(check_frame(frame, self.size))

    def commit(self, progress: Progress | None = None) -> Path:
        """Encode every frame and put the GIF in place.

        Parameters
        ----------
        progress:
            Called as ``progress(done, total)`` while frames are encoded; it may
            raise to cancel, which leaves the previous file untouched. A Ctrl+C or
            ``kill`` held by an :class:`~gradviz.export.interrupt.InterruptGuard`
            stops it between two frames the same way.
        """
        count = len(self.store)
        if count == 0:
            raise ValueError("no frames to write")
        samples = [self.store[i] for i in sample_indices(count)]
        mapper = PaletteMapper(build_palette(samples, self.fixed_colours))
        del samples
        self._file = AtomicFile(self.path, suffix=".gif")
        try:
            with open(self._file.temp, "wb") as out:
                self._encode(out, mapper, progress, count)
            return self._file.commit()
        except BaseException:
            self._file.abort()
            raise

    def _encode(self, out: BinaryIO, mapper: PaletteMapper, progress: Progress | None, total: int) -> None:
        # The palette holds at most 255 colours: the entry after them marks unchanged pixels.
        transparent = len(mapper.palette)
        durations = frame_durations(total, self.fps)
        out.write(gif_header(self.size, mapper.palette))
        pending: _Part | None = None
        previous: np.ndarray | None = None
        for i, frame in enumerate(self.store.drain()):
            check_interrupt()  # between two frames: a safe point to stop at
            if previous is None:
                pending = _Part(mapper.indices(frame), (0, 0), durations[i], None)
            else:
                assert pending is not None
                found = changed_part(previous, frame)
                if found is None:
                    pending.duration += durations[i]
                else:
                    y, x, changed = found
                    part = np.full(changed.shape, transparent, dtype=np.uint8)
                    part[changed] = mapper.indices(frame[y, x][changed])
                    # Written once the next frame is known not to lengthen it.
                    pending.write(out)
                    pending = _Part(part, (x.start, y.start), durations[i], transparent)
            previous = frame
            if progress is not None:
                progress(i + 1, total)
        assert pending is not None
        pending.write(out)
        out.write(b";")

    def abort(self) -> None:
        """Drop the frames and any temporary file; an existing GIF stays as it was."""
        if self._file is not None:
            self._file.abort()
        self.store = FrameStore(self.size)
