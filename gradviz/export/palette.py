"""One palette for a whole animation, and an exact mapping of frames onto it.

A GIF holds at most 256 colours per frame. Choosing them per frame (imageio's
default) makes the same view colour jump between neighbouring entries from
frame to frame, which flickers, and stores a colour table per frame. Here one
palette serves every frame: the colours the caller names (run, op and theme
colours) are kept exactly, the rest comes from a median cut of sampled frames.
Mapping is exact for palette colours (Pillow's own palette mapping rounds to
4-level boxes, turning white into 252 grey) and nearest in RGB otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image

RGB = tuple[int, int, int]
# One entry stays free: Pillow marks unchanged pixels of later frames with it (transparent).
MAX_COLOURS = 255
SAMPLES = 12


def sample_indices(count: int, samples: int = SAMPLES) -> list[int]:
    """Evenly spaced frame indices, first and last included."""
    if count <= samples:
        return list(range(count))
    return sorted({round(i * (count - 1) / (samples - 1)) for i in range(samples)})


def hex_rgb(colour: str) -> RGB:
    """``#rrggbb`` as an RGB triple."""
    text = colour.lstrip("#")
    return int(text[0:2], 16), int(text[2:4], 16), int(text[4:6], 16)


def build_palette(
    samples: Sequence[np.ndarray], fixed: Sequence[RGB] = (), colours: int = MAX_COLOURS
) -> list[RGB]:
    """A palette of at most ``colours`` entries for frames like ``samples``.

    Parameters
    ----------
    samples:
        ``(height, width, 3)`` uint8 RGB frames spread over the animation.
    fixed:
        Colours to keep exactly (they come first, duplicates dropped).
    colours:
        The palette's size limit.

    Returns
    -------
    list of (r, g, b)
        Distinct colours; their order is their index in the GIF.
    """
    keep: list[RGB] = list(dict.fromkeys((int(c[0]), int(c[1]), int(c[2])) for c in fixed))[:colours]
    if not samples:
        return keep or [(0, 0, 0)]
    # Every other row and column: a quarter of the pixels gives the same shades four times faster
    # (thin lines are in run colours, which the caller fixes anyway).
    stack = np.concatenate([np.asarray(s, dtype=np.uint8)[::2, ::2] for s in samples], axis=0)
    image = Image.fromarray(stack)
    cut = image.quantize(
        colors=max(colours - len(keep), 1), method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
    )
    flat = cut.getpalette() or []
    used = sorted(set(np.unique(np.asarray(cut)).tolist()))
    found: list[RGB] = [(int(flat[3 * i]), int(flat[3 * i + 1]), int(flat[3 * i + 2])) for i in used]
    out = list(dict.fromkeys(keep + found))
    return out[:colours]


class PaletteMapper:
    """Maps RGB frames to indices of one palette, exactly for its own colours.

    Results are cached per colour in a table of all 2^24 RGB values, so a
    colour's nearest entry is searched once per animation.
    """

    def __init__(self, palette: Sequence[RGB]) -> None:
        if not 1 <= len(palette) <= MAX_COLOURS:
            raise ValueError(f"a GIF palette here has 1 to {MAX_COLOURS} colours, not {len(palette)}")
        self.palette: list[RGB] = [(int(c[0]), int(c[1]), int(c[2])) for c in palette]
        self._colours = np.asarray(self.palette, dtype=np.int32)
        # Entry + 1 per colour (at most 255 entries: one byte each), 0 for not yet looked up.
        self._lut = np.zeros(1 << 24, dtype=np.uint8)
        keys = (self._colours[:, 0] << 16) | (self._colours[:, 1] << 8) | self._colours[:, 2]
        # Reversed so that the first of two equal entries wins.
        self._lut[keys[::-1]] = np.arange(1, len(palette) + 1, dtype=np.uint8)[::-1]

    def indices(self, frame: np.ndarray) -> np.ndarray:
        """The ``(height, width)`` uint8 palette indices of an RGB frame."""
        keys = frame[..., 0].astype(np.uint32) << 16
        keys |= frame[..., 1].astype(np.uint32) << 8
        keys |= frame[..., 2]
        index = self._lut[keys]
        missing = index == 0
        if missing.any():
            new = np.unique(keys[missing])
            rgb = np.stack([(new >> 16) & 255, (new >> 8) & 255, new & 255], axis=1).astype(np.int32)
            # Chunks keep the (colours x palette) distance table small for busy frames.
            for start in range(0, len(new), 4096):
                part = rgb[start : start + 4096]
                dist = ((part[:, None, :] - self._colours[None, :, :]) ** 2).sum(axis=2)
                self._lut[new[start : start + 4096]] = dist.argmin(axis=1).astype(np.uint8) + 1
            index = self._lut[keys]
        return index - 1
