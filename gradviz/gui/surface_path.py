"""One run's path over the surface: every projected point kept, and drawn thinned once it is long.

A path gains a point with every step. Drawn whole, a frame of a long Play would
hand the plot tens of thousands of points, most of them on pixels already
painted. So a long path is drawn as those of its segments (point to point) that
reach a cell of a couple of pixels no earlier segment reached: a segment only
over cells already painted adds nothing to the picture and is left out; only the part of a segment
near the range shown is looked at, so a run flung far off the plot costs no more. What is
drawn is then bounded by the pixels the path covers, not by its history. The
newest points are always drawn exactly, and a moment further back is drawn from
the segments made by then, so going back shows exactly what that moment showed.
Qt-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gradviz.engine.columns import Increasing

Extent = tuple[tuple[float, float], tuple[float, float]]
Box = tuple[tuple[float, float], tuple[float, float]]  # cells across and up, counted from the origin

# Paths of up to this many points are drawn whole, point by point.
WHOLE = 2000
# However long the path, its newest points are drawn exactly: at least this many, from a multiple
# of it on, so that the thinned part before them changes once every EXACT_TAIL steps rather than
# at every step (a growing line hands its settled points over again only then).
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
# Cells are looked at only inside a box around the range shown (the range again on every side), its
# sides on multiples of this many cells, so that a range that moves a little keeps the box: a run
# flung far off the plot then costs a few samples per step instead of thousands.
BOX_CELLS = 256
# Cells a side of one tile of the bitmap of cells reached: one bit a cell, a tile made when first
# reached, so what the thinning remembers is bounded by the area the path covers, not its length.
TILE = 256


@dataclass(frozen=True, eq=False)
class PlanePath:
    """One run's whole path projected onto a new plane where the lab lives (its every step, the
    thinned past's replayed), for a window that no longer keeps those records itself.

    Attributes
    ----------
    op_points:
        For each of the run's ops so far, the index of the point it leaves the run at.
    coords, residuals:
        The start and then one point per step: plane coordinates ``(M, 2)`` and distances off the plane.
    """

    op_points: np.ndarray
    coords: np.ndarray
    residuals: np.ndarray


def _grown(capacity: int) -> int:
    """Room for points after ``capacity``: doubled while small, an eighth more once large, so a
    long Play's path holds at most an eighth more than its points (copying each about 8 times)."""
    return 2 * capacity if capacity < 65_536 else capacity + capacity // 8


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
        # Single precision: finer than any pixel of a plot, and half the bytes an hour of Play keeps
        # (a true surface's points are the float32 parameters themselves).
        self._xy = np.empty((64, 2), dtype=np.float32)
        # Distances off a plane; None while every one is 0 (a true surface's points lie on it).
        self._residuals: np.ndarray | None = None
        self._n = 0
        self.op_points = Increasing()  # a byte an op: a long Play's every op has one
        self._reset_cells(None)

    def __len__(self) -> int:
        return self._n

    def clear(self) -> None:
        """Forget every point (a new plane, or a history that went back)."""
        self._n = 0
        self._residuals = None
        self.op_points = Increasing()
        self._reset_cells(None)

    def extend(self, points: np.ndarray, residuals: np.ndarray) -> None:
        """Append points ``(M, 2)`` and their distances off the plane ``(M,)``."""
        with np.errstate(over="ignore"):  # past single precision's range is as far as inf from the plot
            points = np.asarray(points, dtype=np.float32).reshape(-1, 2)
        m = len(points)
        if self._n + m > len(self._xy):
            self._xy = np.resize(self._xy, (max(_grown(len(self._xy)), self._n + m), 2))
        if self._residuals is None and np.any(residuals):
            self._residuals = np.zeros(len(self._xy), dtype=np.float64)
        if self._residuals is not None:
            if len(self._residuals) < len(self._xy):
                self._residuals = np.resize(self._residuals, len(self._xy))
            self._residuals[self._n : self._n + m] = residuals
        self._xy[self._n : self._n + m] = points
        self._n += m

    @property
    def nbytes(self) -> int:
        """Bytes kept: points, distances off the plane, the ops' points and what thinning remembers."""
        residuals = 0 if self._residuals is None else self._residuals.nbytes
        kept = self._xy.nbytes + residuals + self._firsts.nbytes + self._seen.nbytes
        return kept + self.op_points.nbytes

    def points(self, n: int | None = None) -> np.ndarray:
        """The first ``n`` points (all by default), ``(n, 2)``: a view, not a copy."""
        return self._xy[: self._n if n is None else min(n, self._n)]

    def residual(self, length: int) -> float:
        """The distance off the plane of the last of the first ``length`` points (0 with none)."""
        if self._residuals is None or not 0 < length <= self._n:
            return 0.0
        return float(self._residuals[length - 1])

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
    def drawn(self, n: int, cell: tuple[float, float], view: Extent | None = None) -> np.ndarray:
        """The first ``n`` points as drawn (cells ``cell`` units a side): a polyline, NaN between pieces.

        Up to :data:`WHOLE` points it is the points themselves. Beyond, it is each
        segment that reaches a cell no earlier segment reached, and the newest points whole
        (the last :data:`EXACT_TAIL` to ``2 * EXACT_TAIL - 1``); a point that is not finite is always kept
        (it ends a piece, as the whole path would). With ``view``, the range shown, a
        segment counts only where it passes the box around it (see :data:`BOX_CELLS`):
        one that stays outside it is left out, as the plot would clip it.
        """
        n = min(n, self._n)
        if n <= WHOLE:
            return self._xy[:n]
        box = self._box(cell, view)
        if cell != self._cell or box != self._clip:
            self._reset_cells(cell, view)
        if self._classified < n:
            self._classify(n)
        firsts = self._firsts[: np.searchsorted(self._firsts[: self._count], n)]
        tail = (n - EXACT_TAIL) // EXACT_TAIL * EXACT_TAIL
        keep = np.concatenate([firsts[firsts < tail], np.arange(tail, n)])
        return _pieces(self._xy, keep)

    def _origin_of(self, cell: tuple[float, float] | None, view: Extent | None = None) -> tuple[float, float]:
        """Where cells count from, so that their indices stay small: the middle of ``view`` (on a
        multiple of :data:`BOX_CELLS` cells, so that it stays while the range moves a little), else
        the path's first point."""
        if cell is None:
            return (0.0, 0.0)
        if view is not None:
            (x0, x1), (y0, y1) = view
            step = (BOX_CELLS * cell[0], BOX_CELLS * cell[1])
            mid = ((x0 + x1) / 2, (y0 + y1) / 2)
            if all(math.isfinite(m) for m in mid):
                return (math.floor(mid[0] / step[0]) * step[0], math.floor(mid[1] / step[1]) * step[1])
        if self._n:
            x, y = self._xy[0]
            if math.isfinite(x) and math.isfinite(y):
                return (math.floor(x / cell[0]) * cell[0], math.floor(y / cell[1]) * cell[1])
        return (0.0, 0.0)

    def _box(self, cell: tuple[float, float], view: Extent | None) -> Box | None:
        """The box of cells around ``view`` that segments are looked at in, or None for all of them."""
        if view is None:
            return None
        origin = self._origin_of(cell, view)
        sides = []
        for (lo, hi), size, start in zip(view, cell, origin, strict=True):
            width = hi - lo
            a, b = (lo - width - start) / size, (hi + width - start) / size
            if not (math.isfinite(a) and math.isfinite(b)):
                return None
            a = max(math.floor(a / BOX_CELLS) * BOX_CELLS, -CELL_LIMIT)
            b = min(math.ceil(b / BOX_CELLS) * BOX_CELLS, CELL_LIMIT)
            sides.append((float(a), float(max(a, b))))
        return (sides[0], sides[1])

    def _reset_cells(self, cell: tuple[float, float] | None, view: Extent | None = None) -> None:
        self._cell = cell
        self._origin = self._origin_of(cell, view)
        self._clip = None if cell is None else self._box(cell, view)
        self._seen = SeenCells()
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
        xy = self._xy[max(a - 1, 0) : n].astype(np.float64)
        ok = np.asarray(np.isfinite(xy).all(axis=1))
        scale = np.array(self._cell)
        at = (np.where(ok[:, None], xy, 0.0) - self._origin) / scale
        if self._clip is None:
            at = np.clip(at, -CELL_LIMIT, CELL_LIMIT)
        if a == 0:
            # The start is a segment from its own point to itself.
            at, ok = np.concatenate([at[:1], at]), np.concatenate([ok[:1], ok])
        start, span = at[:-1], at[1:] - at[:-1]
        finite = ok[:-1] & ok[1:]
        inside = finite
        if self._clip is not None:  # clipped before anything is rounded: each part keeps its direction
            start, span, inside = _clipped(start, span, finite, self._clip)
        # Each segment sampled at most a cell apart: the cells it crosses hold a sample (a corner cut aside).
        steps = np.minimum(np.ceil(np.abs(span).max(axis=1)), MAX_SAMPLES).astype(np.int64)
        count = np.where(inside, steps + 1, 0)
        segment = np.repeat(np.arange(len(start)), count)
        first_of = np.repeat(np.cumsum(count) - count, count)
        t = (np.arange(len(segment)) - first_of) / np.maximum(steps[segment], 1)
        sample = np.floor(start[segment] + t[:, None] * span[segment]).astype(np.int64)
        cells = ((sample[:, 0] & 0xFFFF) << 16) | (sample[:, 1] & 0xFFFF)
        # A segment is drawn when it is the first to reach some cell.
        unique, first = np.unique(cells, return_index=True)
        fresh = first[self._seen.add(unique)]
        new = np.union1d(segment[fresh], np.flatnonzero(~finite))
        self._append_firsts(new.astype(np.int64) + a)
        self._classified = n

    def _append_firsts(self, indices: np.ndarray) -> None:
        need = self._count + len(indices)
        if need > len(self._firsts):
            self._firsts = np.resize(self._firsts, max(2 * len(self._firsts), need))
        self._firsts[self._count : need] = indices
        self._count = need


class SeenCells:
    """The cells some segment has reached, one bit a cell, in tiles of :data:`TILE` cells a side
    made when first reached. Cells are packed as :meth:`RunPath` packs them: 16 bits across, 16 up."""

    def __init__(self) -> None:
        self._tiles: dict[int, np.ndarray] = {}

    def add(self, cells: np.ndarray) -> np.ndarray:
        """Mark ``cells`` (unique) reached; True for each that no earlier call had."""
        tile_of = ((cells >> 16) & 0xFF00) | ((cells >> 8) & 0xFF)  # high bytes across and up
        bit = ((cells >> 8) & 0xFF00) | (cells & 0xFF)  # low bytes: the cell within its tile
        byte, mask = bit >> 3, (1 << (bit & 7)).astype(np.uint8)
        fresh = np.empty(len(cells), dtype=bool)
        for key in np.unique(tile_of).tolist():
            tile = self._tiles.get(key)
            if tile is None:
                tile = self._tiles[key] = np.zeros(TILE * TILE // 8, dtype=np.uint8)
            inside = tile_of == key
            b, m = byte[inside], mask[inside]
            new = (tile[b] & m) == 0
            fresh[inside] = new
            np.bitwise_or.at(tile, b[new], m[new])
        return fresh

    @property
    def nbytes(self) -> int:
        """Bytes of the tiles made so far."""
        return TILE * TILE // 8 * len(self._tiles)


def _clipped(start: np.ndarray, span: np.ndarray, finite: np.ndarray, box: Box) -> tuple[np.ndarray, ...]:
    """The part of each segment ``start + t * span`` (``0 <= t <= 1``) inside ``box``, and which
    segments have one (Liang and Barsky's clipping, every segment at once)."""
    t0, t1 = np.zeros(len(start)), np.ones(len(start))
    with np.errstate(divide="ignore", invalid="ignore"):
        for axis, (lo, hi) in enumerate(box):
            p, d = start[:, axis], span[:, axis]
            a, b = (lo - p) / d, (hi - p) / d
            along = d == 0
            within = (p >= lo) & (p <= hi)
            enter = np.where(along, np.where(within, -np.inf, np.inf), np.minimum(a, b))
            leave = np.where(along, np.where(within, np.inf, -np.inf), np.maximum(a, b))
            t0, t1 = np.maximum(t0, enter), np.minimum(t1, leave)
    inside = finite & (t0 <= t1)
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
