"""3-D surfaces in exports: drawn where OpenGL is available (run under xvfb-run with the gl marker)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.engine.helpers import mlp_over_a_plane
from tests.export.conftest import gif_frames


@pytest.mark.gl
def test_surface3d_export_draws_the_mesh(export, tmp_path: Path) -> None:
    from gradviz.gui.display import gl_refusal

    views = ("surface", "surface3d")
    reason = gl_refusal(views)
    if reason is not None:
        pytest.skip(reason)
    path, count = export(tmp_path / "a.gif", scenario=mlp_over_a_plane(), ops=3, views=views, size=(800, 360))
    frames = gif_frames(path)
    assert count == 3 and len(frames) == 3
    last = frames[-1]
    # The 3-D view fills the right half below the caption; its background is the frame's base colour.
    area = last[90:300, 460:780].reshape(-1, 3)
    background = np.median(area, axis=0)
    differs = np.abs(area.astype(int) - background).sum(axis=1) > 30
    assert differs.mean() > 0.1
    # The mesh is shaded: many tones, not a flat fill.
    assert len(np.unique(area[differs], axis=0)) > 20


@pytest.mark.gl
def test_a_3d_only_export_builds_no_2d_view_and_draws_the_lesson_s_plane(qapp) -> None:
    from PySide6.QtWidgets import QApplication

    from gradviz.gui.display import frames_application, gl_refusal
    from gradviz.gui.export_frame import FrameStyle
    from gradviz.gui.export_renderer import FrameRenderer, run_inline
    from gradviz.gui.views.surface import SurfaceView
    from gradviz.gui.worker import plane_kinds

    views = ("surface3d",)
    reason = gl_refusal(views)
    if reason is not None:
        pytest.skip(reason)

    def surface_views() -> int:
        return sum(isinstance(w, SurfaceView) for w in QApplication.allWidgets())

    frames_application(views, "light", 10.0)
    before = surface_views()
    with FrameRenderer("set-to-none", FrameStyle((640, 480), views)) as r:
        run_inline(r.open())
        frames = list(r.frames(range(0, 24)))
        # No 2-D view anywhere, shown or hidden: the 3-D view reads the frame's own surface state.
        assert not r.frame.findChildren(SurfaceView)
        assert surface_views() == before
        state = r.frame.state
        assert r.frame.views["surface3d"].state is state
        # The lesson's plane (the one through offset), fixed for the whole export and holding every path.
        assert state.plane is not None and state.plane.kind == plane_kinds(r.info)[0][0] == "axes"
        assert state.fixed
        (x0, x1), (y0, y1) = state.extent
        for path in state.paths(r.moment()):
            assert x0 <= path[:, 0].min() and path[:, 0].max() <= x1
            assert y0 <= path[:, 1].min() and path[:, 1].max() <= y1
    # The mesh is drawn: the frame below the caption holds many tones, not a flat fill.
    area = frames[-1][120:440, 40:600].reshape(-1, 3)
    assert len(np.unique(area, axis=0)) > 50
