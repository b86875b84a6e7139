"""Export tests run offscreen with small frames and few ops, so the whole folder stays quick."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

SIZE = (480, 360)


@pytest.fixture
def export(qapp):
    """``export(output, **options)``: a small surface-only export of forgot-zero-grad."""
    from gradviz.gui.export_frames import ExportRange, FrameStyle, export_animation

    def run(
        output: Path,
        *,
        scenario: str = "forgot-zero-grad",
        ops: int | None = 6,
        views: tuple[str, ...] = ("surface",),
        size: tuple[int, int] = SIZE,
        caption: bool = True,
        fps: float = 10,
        progress: Callable[[str, int, int], None] | None = None,
        **frames: object,
    ) -> tuple[Path, int]:
        style = FrameStyle(size, views, caption=caption)
        return export_animation(
            scenario,
            output,
            style=style,
            fps=fps,
            frames=ExportRange(ops=ops, **frames),  # type: ignore[arg-type]
            progress=progress,
        )

    return run


def gif_frames(path: Path) -> list[np.ndarray]:
    """Every frame of a GIF as RGB arrays."""
    out = []
    with Image.open(path) as im:
        for i in range(getattr(im, "n_frames", 1)):
            im.seek(i)
            out.append(np.asarray(im.convert("RGB")))
    return out


def gif_durations(path: Path) -> list[int]:
    with Image.open(path) as im:
        durations = []
        for i in range(getattr(im, "n_frames", 1)):
            im.seek(i)
            durations.append(im.info["duration"])
    return durations


def gif_blocks(path: Path) -> tuple[bool, int]:
    """(has a global colour table, number of local colour tables), read from the file's blocks."""
    data = path.read_bytes()
    flags = data[10]
    pos = 13 + (3 * (2 << (flags & 7)) if flags & 0x80 else 0)
    local = 0
    while data[pos] != 0x3B:
        if data[pos] == 0x21:
            pos += 2
            while data[pos]:
                pos += data[pos] + 1
            pos += 1
        elif data[pos] == 0x2C:
            packed = data[pos + 9]
            pos += 10
            if packed & 0x80:
                local += 1
                pos += 3 * (2 << (packed & 7))
            pos += 1
            while data[pos]:
                pos += data[pos] + 1
            pos += 1
        else:
            raise AssertionError(f"unexpected GIF block {data[pos]:#x} at {pos}")
    return bool(flags & 0x80), local


def leftovers(folder: Path) -> list[str]:
    """Temporary files an export left in ``folder`` (there should be none)."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))
