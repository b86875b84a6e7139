"""One run's path over the surface: every projected point kept, and drawn thinned once it is long.

A path gains a point with every step. Drawn whole, a frame of a long Play would
hand the plot tens of thousands of points, most of them on pixels already
painted. So a long path is drawn as those of its segments (point to point) that
reach a cell of a couple of pixels no earlier segment reached: a segment only
over cells already painted adds nothing to the picture and is left out, and only
the stretch of a segment inside the plot's range is looked at (a diverging run
swings millions of plot widths out, where nothing is painted). What is
drawn is then bounded by the pixels the path covers, not by its history. The
newest points are always drawn exactly, and a moment further back is drawn from
the segments made by then, so going back shows exactly what that moment showed.
Qt-free.
"""

from __future__ import annotations

import math

import numpy as np

Extent = tuple[tuple[float, float], tuple[float, float]]

# Paths of up to this many points are drawn whole, point by point.
WHOLE = 2000
# However long the path, its newest points are drawn exactly.
EXACT_TAIL = 256
# A cell is about this many pixels a side: a power of two in the axes' units, so a range that
# grows a little keeps its cells (and what was thinned with them).
CELL_PIXELS = 2.0
# Cell indices are kept within 16 bits each side of the origin, so a cell packs into one integer;
# points that far out (hundreds of plot widths) are clipped for painting anyway.
CELL_LIMIT = 2**15 - 1
# Samples along one segment at most (one spanning the whole clipped range), and points looked at
# in one go (bounding the samples' memory when a long history is thinned for the first time).
MAX_SAMPLES = 4 * CELL_LIMIT
BLOCK = 4096


def cell_size(span: float, pixels: float) -> float:
    """A cell's side along one axis: ``CELL_PIXELS`` pixels of ``span`` over ``pixels``, a power of two."""
    per_cell = CELL_PIXELS * span / pixels if pixels > 0 else span
    if not (math.isfinite(per_cell) and per_cell > 0):
        return 1.0
    return 2.0 ** math.floor(math.log2(per_cell))


class RunPath:
    """One run's points in view coordinates, their distance off the plane, and where each op left the run.

    Attributes
    ----------
    op_points:
        For each op of the run, the index of the point it leaves the run at.
    """

    def __init__(self) -> None:
        self._xy = np.empty((64, 2), dtype=np.float64)
        self._residuals = np.empty(64, dtype=np.float64)
        self._n = 0
        self.op_points: list[int] = []
        # Samples looked at so far to find new cells (what thinning has cost).
        self.sampled = 0
        self._reset_cells(None)

    def __len__(self) -> int:
        return self._n

    def clear(self) -> None:
        """Forget every point (a new plane, or a history that went back)."""
        self._n = 0
        self.op_points = []
        self._reset_cells(None)

    def extend(self, points: np.ndarray, residuals: np.ndarray) -> None:
        """Append points ``(M, 2)`` and their distances off the plane ``(M,)``."""
        points = np.asarray(points, dtype=np.float64).reshape(-1, 2)
        m = len(points)
        if self._n + m > len(self._xy):
            size = max(2 * len(self._xy), self._n + m)
            self._xy = np.resize(self._xy, (size, 2))
            self._residuals = np.resize(self._residuals, size)
        self._xy[self._n : self._n + m] = points
        self._residuals[self._n : self._n + m] = residuals
        self._n += m

    def points(self, n: int | None = None) -> np.ndarray:
        """The first ``n`` points (all by default), ``(n, 2)``: a view, not a copy."""
        return self._xy[: self._n if n is None else min(n, self._n)]

    def residual(self, length: int) -> float:
        """The distance off the plane of the last of the first ``length`` points (0 with none)."""
        return float(self._residuals[length - 1]) if 0 < length <= self._n else 0.0

    def last_finite(self, n: int) -> np.ndarray | None:
        """The last finite point of the first ``n`` points (a diverged run's last sane place), or None."""
        xy = self._xy[:n]
        for start in range(n, 0, -EXACT_TAIL):
            block = xy[max(start - EXACT_TAIL, 0) : start]
            finite = np.flatnonzero(np.isfinite(block).all(axis=1))
            if len(finite):
                return block[finite[-1]]
        return None

    # ------------------------------------------------------------- drawing
    def drawn(self, n: int, cell: tuple[float, float], box: Extent | None = None) -> np.ndarray:
        """The first ``n`` points as drawn (cells ``cell`` units a side): a polyline, NaN between pieces.

        Up to :data:`WHOLE` points it is the points themselves. Beyond, it is each
        segment that reaches a cell no earlier segment reached, and the last
        :data:`EXACT_TAIL` points whole; a point that is not finite is always kept
        (it ends a piece, as the whole path would). With ``box`` (``((x0, x1), (y0,
        y1))``, what the plot shows) only cells inside it count: a segment wholly
        outside it is painted nowhere and left out.
        """
        n = min(n, self._n)
        if n <= WHOLE:
            return self._xy[:n]
        if (cell, box) != (self._cell, self._box):
            self._reset_cells(cell, box)
        if self._classified < n:
            self._classify(n)
        firsts = self._firsts[: np.searchsorted(self._firsts[: self._count], n)]
        tail = n - EXACT_TAIL
        keep = np.concatenate([firsts[firsts < tail], np.arange(tail, n)])
        return _pieces(self._xy, keep)

    def _reset_cells(self, cell: tuple[float, float] | None, box: Extent | None = None) -> None:
        self._cell, self._box = cell, box
        self._origin = (0.0, 0.0)
        if cell is not None and self._n:
            # Cells count from a point of the path, so their indices stay small wherever it lies.
            x, y = self._xy[0]
            if math.isfinite(x) and math.isfinite(y):
                self._origin = (math.floor(x / cell[0]) * cell[0], math.floor(y / cell[1]) * cell[1])
        self._seen: set[int] = set()
        self._firsts = np.empty(256, dtype=np.int64)
        self._count = 0
        self._classified = 0

    def _classify(self, n: int) -> None:
        """Find, among the points not yet looked at up to ``n``, the segments that reach a new cell."""
        while self._classified < n:
            self._classify_block(min(n, self._classified + BLOCK))

    def _classify_block(self, n: int) -> None:
        assert self._cell is not None
        a = self._classified
        xy = self._xy[max(a - 1, 0) : n]
        ok = np.asarray(np.isfinite(xy).all(axis=1))
        scale = np.array(self._cell)
        at = (np.where(ok[:, None], xy, 0.0) - self._origin) / scale
        if self._box is None:
            at = np.clip(at, -CELL_LIMIT, CELL_LIMIT)
        if a == 0:
            # The start is a segment from its own point to itself.
            at, ok = np.concatenate([at[:1], at]), np.concatenate([ok[:1], ok])
        start, span = at[:-1], at[1:] - at[:-1]
        finite = ok[:-1] & ok[1:]
        reached = finite
        if self._box is not None:
            # Only the stretch inside the box is sampled: its cells are few, however far the ends lie.
            (x0, x1), (y0, y1) = self._box
            lo = np.clip((np.array([x0, y0]) - self._origin) / scale, -CELL_LIMIT, CELL_LIMIT)
            hi = np.clip((np.array([x1, y1]) - self._origin) / scale, -CELL_LIMIT, CELL_LIMIT)
            start, span, inside = _clip_segments(start, span, lo, hi)
            reached = finite & inside
        # Each segment sampled at most a cell apart: the cells it crosses hold a sample (a corner cut aside).
        steps = np.minimum(np.ceil(np.abs(span).max(axis=1)), MAX_SAMPLES).astype(np.int64)
        count = np.where(reached, steps + 1, 0)
        segment = np.repeat(np.arange(len(start)), count)
        self.sampled += len(segment)
        first_of = np.repeat(np.cumsum(count) - count, count)
        t = (np.arange(len(segment)) - first_of) / np.maximum(steps[segment], 1)
        sample = np.floor(start[segment] + t[:, None] * span[segment]).astype(np.int64)
        cells = ((sample[:, 0] & 0xFFFF) << 16) | (sample[:, 1] & 0xFFFF)
        # A segment is drawn when it is the first to reach some cell.
        unique, first = np.unique(cells, return_index=True)
        seen = self._seen
        fresh = [j for cell, j in zip(unique.tolist(), first.tolist(), strict=True) if cell not in seen]
        seen.update(unique.tolist())
        new = np.union1d(segment[fresh], np.flatnonzero(~finite))
        self._append_firsts(new.astype(np.int64) + a)
        self._classified = n

    def _append_firsts(self, indices: np.ndarray) -> None:
        need = self._count + len(indices)
        if need > len(self._firsts):
            self._firsts = np.resize(self._firsts, max(2 * len(self._firsts), need))
        self._firsts[self._count : need] = indices
        self._count = need


def _clip_segments(
    start: np.ndarray, span: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Segments ``start + t * span`` (``t`` in [0, 1]) cut to the box ``lo``..``hi`` (Liang-Barsky).

    Returns the stretch of each segment inside the box (start and span) and which segments reach it.
    """
    t0, t1 = np.zeros(len(start)), np.ones(len(start))
    with np.errstate(divide="ignore", invalid="ignore"):
        for axis in (0, 1):
            p, d = start[:, axis], span[:, axis]
            a, b = (lo[axis] - p) / d, (hi[axis] - p) / d
            # A segment that keeps this coordinate is within the box's bounds on it for every t, or for none.
            level = np.where((p >= lo[axis]) & (p <= hi[axis]), np.inf, -np.inf)
            flat = d == 0
            enter = np.where(flat, -level, np.minimum(a, b))
            leave = np.where(flat, level, np.maximum(a, b))
            t0, t1 = np.maximum(t0, enter), np.minimum(t1, leave)
    inside = t0 <= t1
    t0, t1 = np.where(inside, t0, 0.0), np.where(inside, t1, 0.0)
    return start + t0[:, None] * span, (t1 - t0)[:, None] * span, inside


def _pieces(xy: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The segments ending at points ``keep`` (sorted, unique) as one polyline, NaN between pieces.

    A run of consecutive kept points ``a..b`` is drawn from ``a - 1`` (the segment into ``a``) to ``b``.
    """
    if len(keep) == 0:
        return np.empty((0, 2))
    starts = np.ones(len(keep), dtype=bool)
    starts[1:] = keep[1:] != keep[:-1] + 1
    before = starts & (keep > 0)  # the point each piece's first segment comes from
    gap = starts.copy()
    gap[0] = False  # a NaN between pieces
    counts = 1 + before.astype(np.int64) + gap.astype(np.int64)
    at = np.cumsum(counts) - 1
    index = np.empty(int(at[-1]) + 1, dtype=np.int64)
    index[at] = keep
    index[at[before] - 1] = keep[before] - 1
    index[at[gap] - 1 - before[gap].astype(np.int64)] = -1
    out = xy[np.maximum(index, 0)]
    out[index < 0] = np.nan
    return out
