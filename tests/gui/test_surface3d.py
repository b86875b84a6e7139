"""The 3-D surface: a placeholder where OpenGL is missing, a rendered mesh where it is not."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from gui_helpers import settle

from gradviz.gui.display import gl_unavailable, platform_name
from gradviz.gui.surface_state import SurfaceGrid, colour_range
from gradviz.gui.views.surface3d import mesh_grid


def test_heights_are_log_scaled_and_clip_diverged_values() -> None:
    z = np.array([[1e-3, 1e-2], [1.0, 1e30], [np.inf, np.nan]])
    colour = colour_range(z)
    _xs, _ys, heights = mesh_grid(SurfaceGrid(np.arange(3.0), np.arange(2.0), z, colour))
    assert colour.log and colour.lo == pytest.approx(-3.0, abs=0.05)
    assert heights.min() == 0.0 and heights.max() == 1.0
    # The basin keeps most of the height range: 1e30 is clipped, not scaled to.
    assert heights[1, 0] > 0.05
    # Diverged points (inf, NaN) stand at the top, not in the pit.
    assert heights[2, 0] == heights[2, 1] == 1.0


def test_probe_says_no_offscreen_and_the_placeholder_says_why(open_window, qtbot) -> None:
    if platform_name() != "offscreen":
        pytest.skip("checks the offscreen platform")
    assert "offscreen" in (gl_unavailable() or "")
    w = open_window("forgot-zero-grad")
    w.act_3d.trigger()
    settle(qtbot, w)
    assert w.surface3d.isVisible() and w.surface3d.view is None
    text = w.surface3d.placeholder.text()
    assert "OpenGL" in text and "xvfb-run" in text
    # The 2-D view carries on, and the module that would crash here was never imported.
    assert w.surface.isVisible() and w.surface.grid() is not None
    assert "pyqtgraph.opengl" not in sys.modules


def test_the_3d_toggle_is_remembered(qtbot) -> None:
    from gradviz.gui.window import MainWindow

    w = MainWindow()
    qtbot.addWidget(w)
    w.set_surface3d(True)
    w.save_settings()
    w.controller.shutdown()
    again = MainWindow()
    qtbot.addWidget(again)
    qtbot.waitUntil(lambda: again.act_3d.isChecked(), timeout=5000)
    again.controller.shutdown()


@pytest.mark.gl
def test_mesh_renders_under_a_display(open_window, qtbot) -> None:
    if gl_unavailable() is not None:
        pytest.skip(gl_unavailable())
    w = open_window("forgot-zero-grad")
    w.set_surface3d(True)
    for _ in range(8):
        w.controller.next_op()
        settle(qtbot, w)
    assert w.surface3d.view is not None and w.surface3d.mesh is not None
    image = w.surface3d.frame()
    background = image.pixelColor(2, 2)
    pixels = {
        image.pixelColor(x, y).name() for x in range(0, image.width(), 7) for y in range(0, image.height(), 7)
    }
    assert len(pixels - {background.name()}) > 20


def _path_pixels(image) -> int:
    """Pixels of a saturated warm colour (the first run's path and marker) on the grey mesh."""
    count = 0
    for x in range(0, image.width(), 2):
        for y in range(0, image.height(), 2):
            c = image.pixelColor(x, y)
            count += c.red() - max(c.green(), c.blue()) > 80
    return count


@pytest.mark.gl
def test_a_second_window_draws_its_3d_path_too(open_window, qtbot) -> None:
    """Every window (and an export frame beside the window) draws its run's path on the 3-D surface,
    not only the first one made in the process."""
    if gl_unavailable() is not None:
        pytest.skip(gl_unavailable())
    drawn = []
    for _ in range(2):
        w = open_window("standard-loop")
        w.set_surface3d(True)
        for _ in range(12):
            w.controller.next_op()
            settle(qtbot, w)
        drawn.append(_path_pixels(w.surface3d.frame()))
    assert drawn[0] > 20
    assert drawn[1] > 20
