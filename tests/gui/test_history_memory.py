"""What the window keeps per op stays small: paths on a true surface, and the cells a long path's
thinning remembers, bounded by the area the path covers, not its length."""

from __future__ import annotations

import numpy as np

from gradviz.gui.surface_path import RunPath, SeenCells

VIEW = ((-1.0, 1.0), (-1.0, 1.0))
CELL = (2.0**-6, 2.0**-6)  # 128 cells across the view: a long wander covers its ring of them


def test_seen_cells_say_which_cells_are_new_and_remember_them():
    seen = SeenCells()
    first = np.array([0, 1, (5 << 16) | 7, (0xFFFF << 16) | 0xFFFF], dtype=np.int64)
    assert seen.add(first).all()
    again = np.array([1, 2, (5 << 16) | 7, (0xFFFF << 16) | 0xFFFE], dtype=np.int64)
    assert seen.add(again).tolist() == [False, True, False, True]
    assert seen.nbytes == 2 * 256 * 256 // 8  # two tiles reached: near the origin, and just below it


def _wander(n: int, seed: int) -> np.ndarray:
    """A path that wanders inside the view for ``n`` points, as an orbit with noise does."""
    rng = np.random.default_rng(seed)
    angle = np.cumsum(rng.normal(0.05, 0.01, n))
    radius = 0.6 + 0.2 * np.sin(np.cumsum(rng.normal(0, 0.02, n)))
    return np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)


def test_a_long_path_on_a_true_surface_keeps_16_bytes_a_point_once_its_area_is_covered():
    path = RunPath()
    points = _wander(200_000, 0)
    path.extend(points[:100_000], np.zeros(100_000))
    drawn_early = len(path.drawn(100_000, CELL, VIEW))
    at_half = path.nbytes
    path.extend(points[100_000:], np.zeros(100_000))
    drawn_late = len(path.drawn(200_000, CELL, VIEW))
    # Doubling the history: each new point costs its two float64 coordinates (the array grows
    # geometrically, so by up to twice that), no residuals on a true surface, little for the cells.
    assert (path.nbytes - at_half) / 100_000 < 2 * 16 + 4
    assert path.residual(200_000) == 0.0
    # What is drawn grows with the cells reached, not with the points.
    assert drawn_late < 1.5 * drawn_early < 100_000


def test_residuals_are_kept_from_the_first_point_off_the_plane():
    path = RunPath()
    path.extend(np.zeros((3, 2)), np.zeros(3))
    path.extend(np.ones((2, 2)), np.array([0.5, 0.25]))
    assert [path.residual(n) for n in range(1, 6)] == [0.0, 0.0, 0.0, 0.5, 0.25]
