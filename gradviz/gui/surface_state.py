"""What the loss surface shows, without Qt: read by the 2-D view, the 3-D view and export frames.

One :class:`SurfaceState` holds the plane (or a two-parameter model's true
surface), the extent shown, the grid of loss values over it, each run's path
projected onto it, and the colour range the shading, the contours and the 3-D
heights all use. The views only draw what it holds, so the 2-D and 3-D
pictures cannot disagree, and a frame that shows only the 3-D mesh needs no
hidden 2-D widget to compute it.

Grids of two-parameter models come from the engine's closed form
(:meth:`~gradviz.engine.surface.SurfaceModel.grid`); grids over planes are
computed off the GUI thread and handed in with :meth:`SurfaceState.set_plane_surface`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gradviz.gui.surface_path import RunPath, cell_size
from gradviz.gui.window_history import PlaneRequest

if TYPE_CHECKING:
    from gradviz.engine.surface import SurfaceModel
    from gradviz.gui.window_history import LabInfo, Moment, PlaneSurface

Extent = tuple[tuple[float, float], tuple[float, float]]

# Grid points per axis of a two-parameter model's true surface.
GRID = 121
# Contour lines between the colour range's ends.
CONTOURS = 9
# The colour range spans these percentiles of the finite values: a diverged corner
# (1e30, inf) saturates instead of squashing the basin into one shade.
LOW_PERCENTILE, HIGH_PERCENTILE = 1.0, 97.0
# Coordinates are clipped to this many extents around the extent before drawing:
# a diverging run reaches 1e30 and Qt's painter misbehaves on such numbers.
CLIP_WIDTHS = 20.0
# A plane's range grows at most this many first spans on each side when a path leaves it.
GROW_CAP = 4.0
# A true surface grows at most this many first spans on each side. Either grows each time by this
# share beyond the path, so a path spiralling outwards asks for a new grid every few steps, not every one.
MODEL_GROW_CAP = 1.5
GROW_MARGIN = 0.25
# A point closer to the extent's edge than this share of its span counts as leaving it: the
# current marker (15 px) and the arrows' heads would be cut in half by the plot's edge.
EDGE = 0.06
# ... and closer than this many pixels (a current marker's radius, its rings included), however
# small the plot; the view sets the figure for its markers (they grow with presentation type).
EDGE_PIXELS = 20.0
# The plot's size in pixels until the view says it: thinning then errs on the side of more points.
DEFAULT_PIXELS = (2000.0, 2000.0)
# Room around the starts and the minimum on a true surface's first extent, a share of their span.
HOME_PADDING = 0.35


@dataclass(frozen=True)
class ColourRange:
    """How loss values map to shades, contour levels and 3-D heights.

    Attributes
    ----------
    lo, hi:
        The values at the low and high end of the shading, in colour units
        (log10 of the loss when ``log``).
    log:
        Whether colour units are log10 of the loss (the loss spans more than two decades).
    """

    lo: float
    hi: float
    log: bool

    def values(self, z: np.ndarray) -> np.ndarray:
        """``z`` in colour units; NaN and +inf at the top, -inf at the bottom."""
        z = np.asarray(z, dtype=np.float64)
        if self.log:
            with np.errstate(divide="ignore", invalid="ignore"):
                z = np.log10(z)
        return np.nan_to_num(z, nan=self.hi, posinf=self.hi, neginf=self.lo)

    def unit(self, z: np.ndarray) -> np.ndarray:
        """``z`` as a share of the range, clipped into [0, 1] (0 is the lowest shade)."""
        return np.clip((self.values(z) - self.lo) / (self.hi - self.lo), 0.0, 1.0)

    def levels(self, n: int = CONTOURS) -> np.ndarray:
        """``n`` contour levels, evenly spaced strictly between the ends, in colour units."""
        return np.linspace(self.lo, self.hi, n + 2)[1:-1]


def colour_range(z: np.ndarray) -> ColourRange:
    """The colour range of a loss grid: log10 when it spans more than two decades, percentiles clipped."""
    z = np.asarray(z, dtype=np.float64)
    finite = z[np.isfinite(z)]
    log = bool(finite.size and finite.min() > 0 and finite.max() / finite.min() > 100)
    if log:
        finite = np.log10(finite)
    if not finite.size:
        return ColourRange(0.0, 1.0, log)
    lo = float(np.percentile(finite, LOW_PERCENTILE))
    hi = float(np.percentile(finite, HIGH_PERCENTILE))
    if hi <= lo:
        hi = lo + 1.0
    return ColourRange(lo, hi, log)


def curve_shown(z: np.ndarray) -> tuple[np.ndarray, tuple[float, float]]:
    """A loss curve's heights as drawn, and the loss range the view shows.

    The view reaches the curve's true top, so the drawn curve meets the true loss
    everywhere in the range. Only a far tail (a diverging end, 1e30 or inf) is
    left above the view: the curve leaves through the top there instead of
    flattening, and is clipped far outside the view for Qt's painter. NaN is a gap.
    """
    finite = z[np.isfinite(z)]
    if not finite.size:
        return np.full_like(z, np.nan, dtype=np.float64), (0.0, 1.0)
    lo, top = float(finite.min()), float(finite.max())
    bulk = float(np.percentile(finite, HIGH_PERCENTILE))
    # A tail more than a few times the height of the other 97 % would squash them flat.
    hi = top if top - lo <= 4 * (bulk - lo) or bulk <= lo else bulk
    if hi <= lo:
        hi = lo + 1.0
    far = hi + CLIP_WIDTHS * (hi - lo)
    shown = np.where(np.isnan(z), np.nan, np.clip(z, lo - CLIP_WIDTHS * (hi - lo), far))
    return shown.astype(np.float64), (lo, hi)


@dataclass(frozen=True)
class SurfaceGrid:
    """The loss over the extent shown: ``z[i, j]`` at ``(xs[i], ys[j])``, and its colour range."""

    xs: np.ndarray
    ys: np.ndarray
    z: np.ndarray
    colour: ColourRange


class SurfaceState:
    """The surface of one lab as every view shows it: mode, plane, extent, grid, paths, colours.

    Attributes
    ----------
    mode:
        ``"model"`` (a two-parameter model's true surface), ``"plane"`` (the loss
        over a plane through weight space), ``"curve"`` (one parameter) or
        ``"none"`` (no lab, or a lesson that leaves the surface out).
    model:
        The true surface of a two-parameter model, else None.
    plane:
        The plane surface drawn now (``"plane"`` and ``"curve"``), None until computed.
    extent:
        ``((x0, x1), (y0, y1))`` shown, in the axes' units.
    grid:
        The loss over the extent with its colour range; None for curves and until a plane arrives.
    version:
        Increases with every new grid or curve, so a view redraws its shading only then.
    fixed:
        The extent stays as it is however far a path goes (an export's frames).
    aspect:
        The plot's size in pixels, ``(width, height)``, once known: a true surface's
        extent takes its proportions, so one unit spans as many pixels across as up
        and a gradient stands perpendicular to the contours.
    pixels:
        The plot's size in pixels, ``(width, height)``, in any mode: what a long path is thinned to.
    edge_pixels:
        How close to the plot's edge, in pixels, a point counts as leaving it (a marker's radius).
    """

    def __init__(self) -> None:
        self.info: LabInfo | None = None
        self.mode = "none"
        self.model: SurfaceModel | None = None
        self.plane: PlaneSurface | None = None
        self.extent: Extent = ((-1.0, 1.0), (-1.0, 1.0))
        self.home: Extent = self.extent
        # What a true surface must hold (its start, or as far as the paths went); the extent
        # shown is this grown on its shorter side to the plot's proportions.
        self.wanted: Extent = self.extent
        self.aspect: tuple[float, float] | None = None
        self.pixels: tuple[float, float] = DEFAULT_PIXELS
        self.edge_pixels = EDGE_PIXELS
        self.grid: SurfaceGrid | None = None
        self.curve: tuple[np.ndarray, np.ndarray] | None = None
        self.version = 0
        self.fixed = False
        self._runs: list[RunPath] = []
        self._asked: Extent | None = None
        self._listeners: list[Callable[[], None]] = []

    # ------------------------------------------------------------ changes
    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` whenever a new lab, grid or curve is set."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        self.version += 1
        for listener in self._listeners:
            listener()

    def set_lab(self, info: LabInfo) -> None:
        """Start over for a new lab: a true surface is evaluated now, a plane waits to be computed."""
        self.info = info
        self.model = info.surface
        self.plane = None
        self.grid = None
        self.curve = None
        self.fixed = False
        self._asked = None
        self._runs = [RunPath() for _ in info.runs]
        lesson = info.scenario.lesson
        if lesson is not None and lesson.surface == "none":
            self.mode = "none"
        elif self.model is not None:
            self.mode = "model"
            starts = [self.model.point(info.initial[r.name].params) for r in info.runs]
            xs = [p[0] for p in starts] + [self.model.minimum[0]]
            ys = [p[1] for p in starts] + [self.model.minimum[1]]
            self.home = (_padded(min(xs), max(xs)), _padded(min(ys), max(ys)))
            self._hold(self.home)
            return
        else:
            self.mode = "curve" if info.parameter_count <= 1 else "plane"
        self._changed()

    def set_plane_surface(self, surface: PlaneSurface) -> bool:
        """Take a computed plane surface (a coarse preview or the full grid); False if not this lab's."""
        if self.mode not in ("plane", "curve") or self.info is None:
            return False
        if surface.plane.layout.names != self.info.runs[0].names:
            return False  # computed for the lab before this one
        new_plane = self.plane is None or self.plane.plane is not surface.plane
        before = self.extent
        self.plane = surface
        if new_plane:
            self.home = surface.extent
        if new_plane or self.mode == "curve":
            # Path points are plane coordinates (or heights on the curve): they change with it.
            for i, run in enumerate(self._runs):
                run.clear()
                if surface.paths is not None:  # the lab's whole path, older steps than the window keeps
                    path = surface.paths[i]
                    run.extend(*self._placed(path.coords, path.residuals))
                    run.op_points.extend(path.op_points)
        (x0, x1), (y0, y1) = surface.extent
        if self.mode == "curve":
            shown, (lo, hi) = curve_shown(np.asarray(surface.Z[:, 0], dtype=np.float64))
            self.curve = (np.asarray(surface.xs, dtype=np.float64), shown)
            self.extent = ((x0, x1), (lo - 0.05 * (hi - lo), hi + 0.1 * (hi - lo)))
        else:
            self.extent = ((x0, x1), (y0, y1))
            if not new_plane:
                # A grid asked for earlier may be narrower than the plot has grown since: keep the wider.
                self.extent = _union(self.extent, before)
            z = np.asarray(surface.Z, dtype=np.float64)
            self.grid = SurfaceGrid(surface.xs, surface.ys, z, colour_range(z))
        self._changed()
        return True

    def fix(self, extent: Extent | None = None) -> None:
        """Keep the extent from now on; a true surface's holds ``extent`` (at the plot's aspect, if set)."""
        if not self.ready:
            return
        if self.mode == "model":
            self._hold(self.wanted if extent is None else extent)
        self.fixed = True

    def set_aspect(self, width: float, height: float) -> None:
        """The plot's size in pixels: a true surface's extent takes its proportions (unless fixed)."""
        if width <= 0 or height <= 0:
            return
        self.aspect = (float(width), float(height))
        self.pixels = self.aspect
        if self.mode == "model" and not self.fixed:
            self._hold(self.wanted)

    def set_pixels(self, width: float, height: float) -> None:
        """The plot's size in pixels, in any mode: a long path is thinned to what they can show."""
        if width > 0 and height > 0:
            self.pixels = (float(width), float(height))

    def _hold(self, wanted: Extent) -> None:
        """Show a true surface over an extent holding ``wanted``, evaluated again only if it moved."""
        (x0, x1), (y0, y1) = wanted
        self.wanted = ((float(x0), float(x1)), (float(y0), float(y1)))
        extent = self.wanted if self.aspect is None else square_extent(self.wanted, *self.aspect)
        if self.grid is not None and _same_extent(extent, self.extent):
            return
        self.extent = extent
        self._evaluate()

    def _evaluate(self) -> None:
        assert self.model is not None
        (x0, x1), (y0, y1) = self.extent
        xs, ys, z = self.model.grid((x0, x1), (y0, y1), GRID)
        self.grid = SurfaceGrid(xs, ys, z, colour_range(z))
        self._changed()

    @property
    def ready(self) -> bool:
        """Whether there is a surface to draw paths on."""
        return self.mode == "model" or (self.mode in ("plane", "curve") and self.plane is not None)

    # -------------------------------------------------------------- paths
    def paths(self, moment: Moment) -> list[np.ndarray]:
        """Every run's path up to ``moment`` in view coordinates, ``(N, 2)`` each; empty without a surface.

        Each is a view of the points the state keeps (no copy, whatever the history's length): read only.
        """
        if self.info is None or not self.ready:
            return []
        return [self._path(moment, i, r.name) for i, r in enumerate(self.info.runs)]

    def _path(self, moment: Moment, index: int, name: str) -> np.ndarray:
        """The run's points up to this moment: the start, then one per step (a view of what is kept)."""
        assert self.info is not None
        run = self._runs[index]
        rt = moment.history.runs[name]
        upto = rt.index_at(moment.tick)
        if len(run.op_points) > len(rt):  # the history was reset
            run.clear()
        if not len(run):
            run.extend(*self.points([self.info.initial[name].param_flat]))
        known, n = len(run.op_points), len(rt)
        if n > known:
            # Only a step moves the run: the other ops' records are not read.
            steps = [
                (i, rec)
                for i in rt.ops.indices("step", known, n)
                if (rec := moment.history.record(name, i)) is not None
            ]
            moved = np.array([i for i, _ in steps], dtype=np.int64)
            # Each op leaves the run at the point of the last step at or before it.
            run.op_points.extend(len(run) - 1 + np.searchsorted(moved, np.arange(known, n), side="right"))
            if steps:
                run.extend(*self.points([rec.snapshot.param_flat for _, rec in steps]))
        return run.points(run.op_points[upto] + 1 if upto >= 0 else 1)

    def drawn(self, index: int, length: int) -> np.ndarray:
        """What to draw of run ``index``'s first ``length`` points: all of a short path, a long one thinned.

        A long path keeps the segments that reach pixels no earlier one reached, and its newest
        points exactly (see :mod:`~gradviz.gui.surface_path`), so drawing it costs
        no more after 50,000 ops than after 2,000. NaN separates its pieces.
        """
        (x0, x1), (y0, y1) = self.extent
        width, height = self.pixels
        cell = (cell_size(x1 - x0, width), cell_size(y1 - y0, height))
        return self._runs[index].drawn(length, cell, self.extent)

    def last_point(self, index: int, length: int) -> tuple[float, float] | None:
        """Run ``index``'s current point: the last finite one of its first ``length`` points, or None."""
        point = self._runs[index].last_finite(length)
        return None if point is None else (float(point[0]), float(point[1]))

    def residual(self, index: int, length: int) -> float:
        """How far the last point of run ``index``'s first ``length`` points lies off the plane."""
        return self._runs[index].residual(length)

    def points(self, flats: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Positions of parameter states (each flat, in the layout's order) ``(M, 2)`` and their
        distances off the plane (0 on true surfaces)."""
        if self.model is not None:
            return self.model.points(np.stack(flats)), np.zeros(len(flats))
        assert self.plane is not None
        from gradviz.engine.landscape import project

        proj = project(self.plane.plane, np.stack(flats))
        return self._placed(proj.coords, proj.residuals)

    def _placed(self, coords: np.ndarray, residuals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Points projected onto the plane as the views place them (heights on a curve), and residuals."""
        if self.mode == "curve":
            return np.stack([coords[:, 0], self._curve_height(coords[:, 0])], axis=1), np.zeros(len(coords))
        return np.asarray(coords, dtype=np.float64), np.asarray(residuals, dtype=np.float64)

    def _curve_height(self, w: np.ndarray) -> np.ndarray:
        assert self.plane is not None
        xs, z = self.plane.xs, self.plane.Z[:, 0]
        ok = np.isfinite(z)
        if not ok.any():
            return np.zeros_like(w)
        return np.interp(w, xs[ok], z[ok])

    def vector(self, values: dict[str, np.ndarray | None]) -> tuple[float, float] | None:
        """A per-parameter change (a gradient) as a vector in view coordinates; None if absent."""
        if self.model is not None:
            return self.model.vector(values)
        if self.plane is None or all(v is None for v in values.values()):
            return None
        from gradviz.engine.landscape import flatten, project

        plane = self.plane.plane
        c = project(plane, flatten(plane.layout, values), displacement=True).coords[0]
        return (float(c[0]), 0.0) if self.mode == "curve" else (float(c[0]), float(c[1]))

    def step_point(self, params: dict[str, np.ndarray]) -> tuple[float, float]:
        """Where parameters ``params`` (the optimizer's next step) lie in view coordinates."""
        if self.model is not None:
            return self.model.point(params)
        from gradviz.engine.landscape import flatten

        assert self.plane is not None
        point = self.points([flatten(self.plane.plane.layout, params)])[0][0]
        return float(point[0]), float(point[1])

    def loss_at(self, pts: np.ndarray) -> np.ndarray:
        """The loss of the surface at points ``(M, 2)`` (exact for a true surface, else interpolated)."""
        pts = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
        if self.model is not None:
            return self.model.evaluate(pts[:, 0], pts[:, 1])
        if self.grid is None:
            return np.full(len(pts), np.nan)
        return _bilinear(self.grid.xs, self.grid.ys, self.grid.z, pts)

    def clip(self, pts: np.ndarray) -> np.ndarray:
        """Points made safe for a painter: non-finite to NaN, the rest within a few extents of the view."""
        (x0, x1), (y0, y1) = self.extent
        wx, wy = (x1 - x0) * CLIP_WIDTHS, (y1 - y0) * CLIP_WIDTHS
        out = np.array(pts, dtype=np.float64, copy=True)
        out[~np.isfinite(out)] = np.nan
        out[:, 0] = np.clip(out[:, 0], x0 - wx, x1 + wx)
        out[:, 1] = np.clip(out[:, 1], y0 - wy, y1 + wy)
        return out

    # ------------------------------------------------------------ growing
    def follow(self, paths: list[np.ndarray]) -> PlaneRequest | None:
        """Widen the extent when a path leaves it (unless fixed).

        A true surface is re-evaluated here at once, up to :data:`MODEL_GROW_CAP`;
        a plane cannot be, so the wider plane surface to ask for is returned (once per
        extent), and the extent is already the wider one.
        """
        if self.fixed or not self.ready or not paths:
            return None
        pts = np.concatenate(paths)
        pts = pts[np.all(np.isfinite(pts), axis=1)]
        if pts.size == 0:
            return None
        (x0, x1), (y0, y1) = self.extent
        width, height = self.pixels
        pad = np.array(
            [
                max(EDGE, self.edge_pixels / width) * (x1 - x0),
                max(EDGE, self.edge_pixels / height) * (y1 - y0),
            ]
        )
        inside = np.all((pts - pad >= (x0, y0)) & (pts + pad <= (x1, y1)), axis=1)
        if self.mode == "curve":
            inside = (pts[:, 0] - pad[0] >= x0) & (pts[:, 0] + pad[0] <= x1)
        if inside.all():
            return None
        # Each point stands for its marker: the extent must hold the marker whole.
        pts = np.concatenate([pts - pad, pts + pad])
        if self.mode == "model":
            self._grow(pts)
            return None
        return self._wider_plane(pts)

    def _grow(self, pts: np.ndarray) -> None:
        (hx0, hx1), (hy0, hy1) = self.home
        (rx0, rx1), (ry0, ry1) = self.wanted
        cap_x, cap_y = MODEL_GROW_CAP * (hx1 - hx0), MODEL_GROW_CAP * (hy1 - hy0)
        x0 = max(min(rx0, pts[:, 0].min()), hx0 - cap_x)
        x1 = min(max(rx1, pts[:, 0].max()), hx1 + cap_x)
        y0 = max(min(ry0, pts[:, 1].min()), hy0 - cap_y)
        y1 = min(max(ry1, pts[:, 1].max()), hy1 + cap_y)
        if (x0, x1) == (rx0, rx1) and (y0, y1) == (ry0, ry1):
            return
        # Grow by a margin beyond the path, so the next few steps need no new grid.
        mx, my = GROW_MARGIN * (x1 - x0), GROW_MARGIN * (y1 - y0)
        gx = (x0 - mx if x0 < rx0 else x0, x1 + mx if x1 > rx1 else x1)
        gy = (y0 - my if y0 < ry0 else y0, y1 + my if y1 > ry1 else y1)
        self._hold(
            (
                (float(max(gx[0], hx0 - cap_x)), float(min(gx[1], hx1 + cap_x))),
                (float(max(gy[0], hy0 - cap_y)), float(min(gy[1], hy1 + cap_y))),
            )
        )

    def _wider_plane(self, pts: np.ndarray) -> PlaneRequest | None:
        assert self.plane is not None
        if self.mode == "curve":
            pts = pts[:, :1]
        # Grow from what is shown: a plot widened for a grid still being computed never narrows.
        (x0, x1), (y0, y1) = self.extent if self.mode == "plane" else self.plane.extent
        (hx0, hx1), (hy0, hy1) = self.home
        cx, cy = GROW_CAP * (hx1 - hx0), GROW_CAP * (hy1 - hy0)
        mx = GROW_MARGIN * (max(x1, pts[:, 0].max()) - min(x0, pts[:, 0].min()))
        nx = (max(min(x0, pts[:, 0].min() - mx), hx0 - cx), min(max(x1, pts[:, 0].max() + mx), hx1 + cx))
        if self.mode == "plane":
            my = GROW_MARGIN * (max(y1, pts[:, 1].max()) - min(y0, pts[:, 1].min()))
            ny = (max(min(y0, pts[:, 1].min() - my), hy0 - cy), min(max(y1, pts[:, 1].max() + my), hy1 + cy))
        else:
            ny = (y0, y1)
        extent = ((float(nx[0]), float(nx[1])), (float(ny[0]), float(ny[1])))
        if self.mode == "plane":
            # The plot widens now, so the runs stay in sight while the wider grid is computed; the
            # old grid keeps its place inside it.
            self.extent = extent
        if extent == self.plane.extent or extent == self._asked:
            return None  # already as wide as the cap allows, or asked for
        self._asked = extent
        return PlaneRequest(self.plane.kind, self.plane.plane, extent)

    def forget_request(self) -> None:
        """A new plane is asked for: a later wider extent may be asked for again."""
        self._asked = None


def square_extent(extent: Extent, width: float, height: float) -> Extent:
    """``extent`` grown on its shorter side so one unit takes as many pixels across as up.

    ``width`` and ``height`` are the plot's size in pixels; the centre stays where it is.
    """
    (x0, x1), (y0, y1) = extent
    if not (width > 0 and height > 0 and x1 > x0 and y1 > y0):
        return extent
    per_pixel = max((x1 - x0) / width, (y1 - y0) / height)
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    return (
        (cx - per_pixel * width / 2, cx + per_pixel * width / 2),
        (cy - per_pixel * height / 2, cy + per_pixel * height / 2),
    )


def _union(a: Extent, b: Extent) -> Extent:
    """The least extent that holds both ``a`` and ``b``."""
    (ax0, ax1), (ay0, ay1) = a
    (bx0, bx1), (by0, by1) = b
    return (min(ax0, bx0), max(ax1, bx1)), (min(ay0, by0), max(ay1, by1))


def _same_extent(a: Extent, b: Extent) -> bool:
    """Whether two extents agree to a part in a million of their size (resizes jitter by rounding)."""
    (ax0, ax1), (ay0, ay1) = a
    (bx0, bx1), (by0, by1) = b
    tol_x, tol_y = 1e-6 * abs(bx1 - bx0), 1e-6 * abs(by1 - by0)
    return all(abs(p - q) <= tol_x for p, q in ((ax0, bx0), (ax1, bx1))) and all(
        abs(p - q) <= tol_y for p, q in ((ay0, by0), (ay1, by1))
    )


def _padded(lo: float, hi: float) -> tuple[float, float]:
    span = max(hi - lo, 0.5)
    return lo - HOME_PADDING * span, hi + HOME_PADDING * span


def _bilinear(xs: np.ndarray, ys: np.ndarray, z: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """``z`` over the grid ``xs`` x ``ys`` interpolated at ``pts`` ``(M, 2)``, clamped to the grid."""
    pts = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
    ok = np.isfinite(pts).all(axis=1)
    fi = np.interp(np.where(ok, pts[:, 0], xs[0]), xs, np.arange(len(xs)))
    fj = (
        np.interp(np.where(ok, pts[:, 1], ys[0]), ys, np.arange(len(ys)))
        if len(ys) > 1
        else np.zeros(len(pts))
    )
    i0 = np.minimum(fi.astype(np.int64), len(xs) - 2) if len(xs) > 1 else np.zeros(len(pts), dtype=np.int64)
    j0 = np.minimum(fj.astype(np.int64), max(len(ys) - 2, 0))
    ti, tj = fi - i0, fj - j0
    i1, j1 = np.minimum(i0 + 1, len(xs) - 1), np.minimum(j0 + 1, len(ys) - 1)
    out = (
        z[i0, j0] * (1 - ti) * (1 - tj)
        + z[i1, j0] * ti * (1 - tj)
        + z[i0, j1] * (1 - ti) * tj
        + z[i1, j1] * ti * tj
    )
    return np.where(ok, out, np.nan)
