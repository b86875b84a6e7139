"""The loss surface as a rotatable 3-D mesh, with the runs' paths on it.

It draws the :class:`~gradviz.gui.surface_state.SurfaceState` the 2-D view
draws (a true two-parameter surface or the loss over a plane) and the same
paths, so the two always agree. Heights and shading take the state's one colour
range: log10 of the loss when it spans decades, and the top few percent
(diverged regions, 1e30 or inf) clipped so they do not flatten the rest.

``pyqtgraph.opengl`` is imported only after :mod:`gradviz.gui.display` says a
context can be made; otherwise a placeholder says why and the 2-D view carries on.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QLabel, QStackedLayout, QVBoxLayout, QWidget

from gradviz.gui.display import gl_unavailable
from gradviz.gui.surface_state import HIGH_PERCENTILE, SurfaceGrid, SurfaceState
from gradviz.gui.theme import LIGHT, Theme, run_color
from gradviz.gui.views.surface import lower_shade
from gradviz.gui.window_history import LabInfo, Moment

# The mesh is drawn in a fixed box whatever the axes' units: x and y over [-1, 1], z over [0, HEIGHT].
HEIGHT = 0.9
# Grid points per axis of the mesh: enough for the shape, few enough to rotate smoothly.
MESH_POINTS = 61
# Paths float this far above the mesh so the surface does not hide them.
LIFT = 0.015
# The current markers' size in pixels; markers of runs closer than SAME_POINT (in the mesh box,
# which spans 2 across) are drawn nested, each this much larger than the one on top of it.
POINT_SIZE, RING = 14.0, 8.0
SAME_POINT = 0.03
# Light scales a face's colour between these factors: enough to show the shape, too little to
# turn a lit wall lighter than the pit or a wall in shadow darker than it (both themes keep the
# lighter end above LIGHT_MIN times it, 0.75 x white > the light theme's high grey, and so on).
LIGHT_MIN, LIGHT_MAX = 0.75, 1.0
# pyqtgraph's own "shaded" program multiplies colours by 0.2 to 1.0, which makes walls facing
# away from the light black whatever their height: the pit then reads darkest in either theme.
SOFT_SHADED_FRAGMENT = f"""
    #ifdef GL_ES
    precision mediump float;
    #endif
    varying vec4 v_color;
    varying vec3 v_normal;
    void main() {{
        float p = abs(dot(normalize(v_normal), normalize(vec3(1.0, -1.0, -1.0))));
        gl_FragColor = vec4(v_color.rgb * ({LIGHT_MIN} + {LIGHT_MAX - LIGHT_MIN} * p), v_color.a);
    }}
"""


def mesh_colours(heights: np.ndarray, theme: Theme) -> np.ndarray:
    """One RGBA row per vertex, ``(N, 4)``, shaded from the theme's low-loss to its high-loss colour.

    The pit takes ``theme.surface_low``, as the 2-D view's shading does, so one
    caption word (:func:`~gradviz.gui.views.surface.lower_shade`) is true of both.
    """
    low, high = QColor(theme.surface_low), QColor(theme.surface_high)
    t = np.asarray(heights, dtype=np.float64).reshape(-1, 1)
    lo_rgb = np.array([low.redF(), low.greenF(), low.blueF()])
    hi_rgb = np.array([high.redF(), high.greenF(), high.blueF()])
    # pyqtgraph 0.14 wants one RGBA row per vertex, (N, 4), not (w, h, 4).
    return np.hstack([lo_rgb + t * (hi_rgb - lo_rgb), np.ones((t.shape[0], 1))]).astype(np.float32)


def mesh_caption(loss_word: str, log: bool, theme: Theme) -> str:
    """The 3-D view's caption: what height and shade show, in the words the theme's shading bears out."""
    what = f"log₁₀ {loss_word}" if log else loss_word
    return (
        f"Height and shade: {what}, clipped at the {HIGH_PERCENTILE:.0f}th percentile; "
        f"{lower_shade(theme)} is lower. "
        "Drag to rotate, wheel to zoom."
    )


def mesh_grid(grid: SurfaceGrid) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mesh of ``grid``: at most :data:`MESH_POINTS` a side, heights in [0, 1] by its colour range."""
    step_x = max(1, int(np.ceil(len(grid.xs) / MESH_POINTS)))
    step_y = max(1, int(np.ceil(len(grid.ys) / MESH_POINTS)))
    return grid.xs[::step_x], grid.ys[::step_y], grid.colour.unit(grid.z[::step_x, ::step_y])


def _nested_sizes(ends: list[np.ndarray | None]) -> list[float]:
    """Marker sizes for points in the mesh box: runs at one point get nested sizes, the first largest."""
    sizes = [POINT_SIZE] * len(ends)
    groups: list[list[int]] = []
    for i, end in enumerate(ends):
        if end is None:
            continue
        for group in groups:
            first = ends[group[0]]
            assert first is not None
            if float(np.linalg.norm(end - first)) < SAME_POINT:
                group.append(i)
                break
        else:
            groups.append([i])
    for group in groups:
        for rank, i in enumerate(group):
            sizes[i] = POINT_SIZE + RING * (len(group) - 1 - rank)
    return sizes


def _soft_shaded(owner: object) -> Any:
    """A shader program for ``owner``'s mesh: pyqtgraph's "shaded" vertex stage, :data:`SOFT_SHADED_FRAGMENT`.

    One program per view: pyqtgraph compiles a program once, in the first context that draws
    it, and another view's context (an export beside the window) cannot use that one.
    """
    from pyqtgraph.opengl import shaders

    vertex = shaders.getShaderProgram("shaded").shaders[0].code
    return shaders.ShaderProgram(
        f"gradviz-soft-shaded-{id(owner)}",
        [shaders.VertexShader(vertex), shaders.FragmentShader(SOFT_SHADED_FRAGMENT)],
    )


class Surface3DView(QWidget):
    """A rotatable mesh of a surface state's grid, with the runs' paths on it.

    Parameters
    ----------
    state:
        The surface shown (the 2-D view's own, or one of its own where there is no 2-D view).
    """

    def __init__(self, state: SurfaceState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.theme: Theme = LIGHT
        self.info: LabInfo | None = None
        self.view: Any = None
        self.mesh: Any = None
        self.paths: list[Any] = []
        self.points: list[Any] = []
        self.reason: str | None = None
        self._scale: tuple[float, float, float, float] | None = None
        self._grid_key: int | None = None
        self._shader: Any = None
        # What each run's path was last drawn for: (points, surface version, extent).
        self._drawn: list[Any] = []

        self.title = QLabel("Loss surface in 3-D")
        self.title.setObjectName("panelTitle")
        self.placeholder = QLabel("")
        self.placeholder.setObjectName("placeholder")
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setWordWrap(True)
        self.caption = QLabel("")
        self.caption.setObjectName("status")
        self.caption.setWordWrap(True)
        self.caption.setMinimumWidth(100)
        self.page = QWidget()
        self.page_box = QVBoxLayout(self.page)
        self.page_box.setContentsMargins(0, 0, 0, 0)
        self.stack = QStackedLayout()
        self.stack.addWidget(self.placeholder)
        self.stack.addWidget(self.page)
        box = QVBoxLayout(self)
        box.setContentsMargins(4, 4, 4, 4)
        box.addWidget(self.title)
        box.addLayout(self.stack, 1)
        box.addWidget(self.caption)
        self.state.on_change(self.refresh_surface)

    # ------------------------------------------------------------- setup
    def activate(self) -> bool:
        """Build the OpenGL view if this machine can show it; else show why. True when 3-D is live."""
        if self.view is not None:
            return True
        self.reason = gl_unavailable()
        if self.reason is not None:
            self.placeholder.setText(self.reason)
            self.stack.setCurrentIndex(0)
            self.caption.setText("")
            return False
        import pyqtgraph.opengl as gl

        self.view = gl.GLViewWidget()
        self._shader = _soft_shaded(self)
        self.view.setObjectName("surface3d")
        self.view.setMinimumSize(160, 120)
        self.view.setCameraPosition(pos=pg.Vector(0, 0, HEIGHT / 3), distance=3.3, elevation=30, azimuth=-60)
        self.page_box.addWidget(self.view, 1)
        self.stack.setCurrentIndex(1)
        self.set_theme(self.theme)
        if self.info is not None:
            self.set_lab(self.info)
        return True

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        if self.view is not None:
            self.view.setBackgroundColor(QColor(theme.base))
            self._grid_key = None
            self.refresh_surface()

    def set_point_size(self, size: float) -> None:
        """Type size of the caption (the 3-D scene has no text)."""
        font = self.caption.font()
        font.setPointSizeF(size)
        self.caption.setFont(font)

    def set_lab(self, info: LabInfo) -> None:
        """Forget the old lab's mesh and paths; the state's next surface brings the new one."""
        self.info = info
        if self.view is None:
            return
        for item in (self.mesh, *self.paths, *self.points):
            if item is not None:
                self.view.removeItem(item)
        self.mesh, self.paths, self.points = None, [], []
        self._drawn = [None] * len(info.runs)
        self._grid_key = None
        self._scale = None
        import pyqtgraph.opengl as gl

        for i, _run in enumerate(info.runs):
            colour = QColor(run_color(i))
            rgba = (colour.redF(), colour.greenF(), colour.blueF(), 1.0)
            path = gl.GLLinePlotItem(pos=np.zeros((0, 3)), color=rgba, width=3, antialias=True)
            point = gl.GLScatterPlotItem(pos=np.zeros((1, 3)), color=rgba, size=14, pxMode=True)
            # Paths and markers are drawn over the mesh, never hidden inside it.
            path.setGLOptions("translucent")
            point.setGLOptions("translucent")
            self.view.addItem(path)
            self.view.addItem(point)
            self.paths.append(path)
            self.points.append(point)
        self.refresh_surface()

    # -------------------------------------------------------------- draw
    def refresh_surface(self) -> None:
        """Rebuild the mesh when the state holds a grid this view has not drawn."""
        if self.view is None:
            return
        grid = self.state.grid
        for item in (*self.paths, *self.points):
            # With no mesh under them (a loss curve, a plane still computing) paths float in nothing.
            item.setVisible(grid is not None)
        if grid is None:
            if self.mesh is not None:
                self.mesh.setVisible(False)
            self.caption.setText(
                "The loss curve of a one-parameter model is drawn in 2-D only."
                if self.state.mode == "curve"
                else "Waiting for the surface…"
            )
            return
        if self.state.version == self._grid_key:
            return
        self._grid_key = self.state.version
        xs, ys, heights = mesh_grid(grid)
        x0, x1, y0, y1 = float(xs[0]), float(xs[-1]), float(ys[0]), float(ys[-1])
        self._scale = (x0, x1 - x0 or 1.0, y0, y1 - y0 or 1.0)
        mx = 2 * (xs - x0) / self._scale[1] - 1
        my = 2 * (ys - y0) / self._scale[3] - 1
        colours = mesh_colours(heights, self.theme)
        import pyqtgraph.opengl as gl

        if self.mesh is not None:
            self.view.removeItem(self.mesh)
        self.mesh = gl.GLSurfacePlotItem(
            x=mx,
            y=my,
            z=heights * HEIGHT,
            colors=colours,
            # Lit faces show the shape from any angle; the colours still encode the height.
            shader=self._shader,
            smooth=True,
        )
        self.mesh.setGLOptions("opaque")
        self.view.addItem(self.mesh)
        # Paths are added again so they draw after the mesh.
        for item in (*self.paths, *self.points):
            self.view.removeItem(item)
            self.view.addItem(item)
        self.caption.setText(mesh_caption(self._loss_word(), grid.colour.log, self.theme))

    def _loss_word(self) -> str:
        ps = self.state.plane
        return ps.loss_name if ps is not None and self.state.mode == "plane" else "loss"

    def _to_box(self, pts: np.ndarray) -> np.ndarray:
        """Path points ``(N, 2)`` in view coordinates as mesh-box points ``(N, 3)`` on the surface."""
        assert self._scale is not None and self.state.grid is not None
        x0, sx, y0, sy = self._scale
        pts = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
        bx = np.clip(2 * (pts[:, 0] - x0) / sx - 1, -1.0, 1.0)
        by = np.clip(2 * (pts[:, 1] - y0) / sy - 1, -1.0, 1.0)
        # Heights come from the surface under the (clamped) point, so the path lies on the mesh.
        inside = np.stack([(bx + 1) * sx / 2 + x0, (by + 1) * sy / 2 + y0], axis=1)
        h = self.state.grid.colour.unit(self.state.loss_at(inside))
        return np.stack([bx, by, h * HEIGHT + LIFT], axis=1)

    def draw(self, moment: Moment) -> None:
        """Draw every run's path and current point at ``moment`` on the mesh.

        A long path is drawn thinned as the 2-D view draws it (see
        :meth:`~gradviz.gui.surface_state.SurfaceState.drawn`); runs at one point
        are drawn as nested markers, the first largest.
        """
        if self.view is None or self.info is None:
            return
        self.refresh_surface()
        if self._scale is None or self.state.grid is None:
            return
        paths = self.state.paths(moment)[: len(self.paths)]
        ends: list[np.ndarray | None] = []
        for i, path in enumerate(paths):
            end = self.state.last_point(i, len(path))
            ends.append(None if end is None else self._to_box(np.array([end]))[0])
            key = (len(path), self.state.version, self.state.extent)
            if end is None or key == self._drawn[i]:
                continue
            self._drawn[i] = key
            drawn = self.state.drawn(i, len(path))
            pos = self._to_box(drawn)
            ok = np.isfinite(drawn).all(axis=1)
            # Each segment whose two ends are known, as a pair of vertices: NaN ends a piece.
            pairs = ok[:-1] & ok[1:]
            segments = np.stack([pos[:-1][pairs], pos[1:][pairs]], axis=1).reshape(-1, 3)
            self.paths[i].setData(pos=segments, mode="lines")
        for i, size in enumerate(_nested_sizes(ends)):
            box = ends[i]
            if box is not None:
                self.points[i].setData(pos=box[None, :], size=size)

    def frame(self) -> Any:
        """The 3-D scene rendered now, as a QImage (None while 3-D is off)."""
        return None if self.view is None else self.view.grabFramebuffer()
