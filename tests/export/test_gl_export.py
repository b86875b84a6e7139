"""3-D surfaces in exports: drawn where OpenGL is available (run under xvfb-run with the gl marker)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.export.conftest import gif_frames


@pytest.mark.gl
def test_surface3d_export_draws_the_mesh(export, tmp_path: Path) -> None:
    from gradviz.gui.display import gl_refusal

    views = ("surface", "surface3d")
    reason = gl_refusal(views)
    if reason is not None:
        pytest.skip(reason)
    path, count = export(tmp_path / "a.gif", scenario="zero-grad-myths", ops=3, views=views, size=(800, 360))
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
