"""Animated GIF with one global palette, looping, written atomically and reproducibly."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from gradviz.export.atomic import AtomicFile, remove_stale
from gradviz.export.base import FrameWriter, Progress
from gradviz.export.frames import FrameStore, check_frame
from gradviz.export.interrupt import check_interrupt
from gradviz.export.palette import RGB, PaletteMapper, build_palette, sample_indices

# Browsers show GIF frames shorter than 2 centiseconds for 10: faster GIFs play slower.
MAX_GIF_FPS = 50.0


def frame_durations(count: int, fps: float) -> list[int]:
    """Per-frame durations in milliseconds, whole centiseconds as GIF stores them.

    Rounding the running total rather than each frame keeps the animation's
    length right: 12 fps alternates 80 ms and 90 ms instead of drifting at 80 ms.
    """
    ends = [int((i + 1) * 100 / fps + 0.5) for i in range(count)]
    starts = [0, *ends[:-1]]
    return [10 * max(end - start, 2) for start, end in zip(starts, ends, strict=True)]


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
        frames = self._images(mapper, progress, count)
        first = next(frames)
        self._file = AtomicFile(self.path, suffix=".gif")
        try:
            with open(self._file.temp, "wb") as f:
                first.save(
                    f,
                    format="GIF",
                    save_all=True,
                    append_images=frames,
                    # A given palette makes Pillow write one global colour table and no local ones.
                    palette=bytes(mapper.flat()),
                    duration=frame_durations(count, self.fps),
                    loop=0,
                    disposal=1,
                    # With a free palette entry, pixels unchanged since the last frame become
                    # transparent runs, which compress far better.
                    optimize=True,
                )
            return self._file.commit()
        except BaseException:
            self._file.abort()
            raise

    def _images(self, mapper: PaletteMapper, progress: Progress | None, total: int) -> Iterator[Image.Image]:
        for i, frame in enumerate(self.store.drain()):
            # Pillow asks for the next frame between its writes: a safe point to stop at.
            check_interrupt()
            yield mapper.image(frame)
            if progress is not None:
                progress(i + 1, total)

    def abort(self) -> None:
        """Drop the frames and any temporary file; an existing GIF stays as it was."""
        if self._file is not None:
            self._file.abort()
        self.store = FrameStore(self.size)
