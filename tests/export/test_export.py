"""Exports drawn by the window's views: decoded frame by frame and probed for what they show."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gradviz.engine.errors import UserError
from gradviz.export import ExportCancelled
from gradviz.gui.theme import RUN_COLORS
from tests.engine.helpers import mlp_over_a_plane
from tests.export.conftest import SIZE, gif_blocks, gif_durations, gif_frames, leftovers

CAPTION_ROWS = slice(0, 44)


def colour_count(frame: np.ndarray, hex_colour: str, rows: slice = slice(None)) -> int:
    """Pixels of exactly ``hex_colour`` in ``frame[rows]``."""
    rgb = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return int(np.all(frame[rows] == rgb, axis=2).sum())


def test_gif_frames_size_loop_timing_and_content(export, tmp_path: Path) -> None:
    path, count = export(tmp_path / "a.gif", ops=10, fps=10)
    assert count == 10
    frames = gif_frames(path)
    assert len(frames) == 10 and frames[0].shape == (SIZE[1], SIZE[0], 3)
    with Image.open(path) as im:
        assert im.info["loop"] == 0
    assert gif_durations(path) == [100] * 10
    assert gif_blocks(path) == (True, 0)
    # The first run's path (its exact colour: one palette keeps it) grows over the steps.
    body = slice(CAPTION_ROWS.stop, None)
    assert colour_count(frames[-1], RUN_COLORS[0], body) > colour_count(frames[0], RUN_COLORS[0], body) + 20
    # Every op has its own caption.
    for a, b in itertools.pairwise(frames):
        assert not np.array_equal(a[CAPTION_ROWS], b[CAPTION_ROWS])
    assert leftovers(tmp_path) == []


def test_caption_none_and_per_iteration_frames(export, tmp_path: Path) -> None:
    with_caption, _ = export(tmp_path / "a.gif", ops=None, iterations=3, per_frame="iteration")
    without, count = export(tmp_path / "b.gif", ops=None, iterations=3, per_frame="iteration", caption=False)
    assert count == 3
    a, b = gif_frames(with_caption), gif_frames(without)
    assert len(a) == len(b) == 3
    # Without a caption the top rows are the surface view's title, the same in every frame.
    assert np.array_equal(b[0][:20], b[-1][:20]) and not np.array_equal(a[0][:20], b[0][:20])


def test_the_same_export_is_byte_identical(export, tmp_path: Path) -> None:
    first, _ = export(tmp_path / "a.gif", ops=5)
    second, _ = export(tmp_path / "b.gif", ops=5)
    assert first.read_bytes() == second.read_bytes()


@pytest.mark.parametrize("phase", ["render", "encode"])
def test_cancel_leaves_no_file_and_keeps_the_previous_one(export, tmp_path: Path, phase: str) -> None:
    def cancel_at_3(now: str, done: int, total: int) -> None:
        if now == phase and done == 3:
            raise ExportCancelled

    with pytest.raises(ExportCancelled):
        export(tmp_path / "new.gif", progress=cancel_at_3)
    assert not (tmp_path / "new.gif").exists()
    old = tmp_path / "old.gif"
    old.write_bytes(b"GIF89a previous export")
    with pytest.raises(ExportCancelled):
        export(old, progress=cancel_at_3)
    assert old.read_bytes() == b"GIF89a previous export"
    assert leftovers(tmp_path) == []


def test_all_four_views_and_a_png_folder(export, tmp_path: Path) -> None:
    out, count = export(
        tmp_path / "frames",
        ops=None,
        first=0,
        last=2,
        views=("surface", "grads", "code", "timeline"),
        size=(800, 600),
    )
    names = sorted(p.name for p in out.iterdir())
    assert count == 3 and names == ["frame-0001.png", "frame-0002.png", "frame-0003.png"]
    with Image.open(out / "frame-0003.png") as im:
        frame = np.asarray(im.convert("RGB"))
    assert frame.shape == (600, 800, 3)
    # The timeline's op strip shows the op colours; the code panel highlights the line that ran.
    assert colour_count(frame, "#E69F00") > 0 and colour_count(frame, "#ffe1c7") > 100


def test_too_small_for_the_views_is_one_sentence(export, tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"480x360 is too small to draw .*: it needs at least \d+x\d+"):
        export(tmp_path / "a.gif", views=("surface", "grads", "code", "timeline"))
    assert list(tmp_path.iterdir()) == []


def test_a_run_that_diverges_ends_the_export_on_its_last_moment(export, tmp_path: Path) -> None:
    from gradviz.engine.scenario import load_scenario

    scenario = load_scenario("standard-loop").with_overrides(lr=50.0)
    path, count = export(tmp_path / "a.gif", scenario=scenario, ops=400, caption=True)
    assert 1 <= count < 400
    assert len(gif_frames(path)) == count


def test_a_model_with_a_plane_surface(export, tmp_path: Path) -> None:
    """Models that are not two-parameter are drawn over one plane, with the paths and the residual readout."""
    from gradviz.export.plan import plan_frames
    from gradviz.gui.export_frame import ExportFrame, FrameStyle
    from gradviz.gui.export_renderer import FrameRenderer, run_inline

    style = FrameStyle(SIZE, ("surface",))
    with FrameRenderer(mlp_over_a_plane(), style) as renderer:
        run_inline(renderer.open())
        plan = plan_frames(renderer.ticks_per_iteration, ops=12)
        frames = list(renderer.frames(plan.ticks()))
        view = renderer.frame.views["surface"]
        assert view.plane_surface is not None and view.plane_surface.kind == "pca"
        assert "Off the plane (distance in weight space)" in view.caption.text()
        area = view.plot_widget.geometry().translated(view.mapTo(renderer.frame, view.rect().topLeft()))
    assert isinstance(renderer.frame, ExportFrame) and len(frames) == 12
    last = frames[-1][area.top() : area.bottom(), area.left() : area.right()]
    greys = last[(last.max(axis=2) - last.min(axis=2)) < 8]
    # Shading: many greys; contours: dark lines; paths: the runs' colours.
    assert len(np.unique(greys[:, 0])) > 30
    assert (greys[:, 0] < 60).sum() > 50
    assert ((last.max(axis=2) - last.min(axis=2)) > 60).sum() > 30

    # Through the public call, the plane survives the whole export and the caption stays.
    path, count = export(tmp_path / "a.gif", scenario="zero-grad-myths", ops=4)
    assert count == 4 and len(gif_frames(path)) == 4


def test_a_range_after_every_run_stopped_is_one_sentence(export, tmp_path: Path) -> None:
    from gradviz.engine.scenario import load_scenario

    scenario = load_scenario("standard-loop").with_overrides(lr=50.0)
    with pytest.raises(UserError, match=r"Every run stopped .* before the first frame"):
        export(tmp_path / "a.gif", scenario=scenario, ops=None, first=5000, last=5001)
    assert list(tmp_path.iterdir()) == []


def test_an_export_draws_the_plane_its_lesson_names() -> None:
    """set-to-none's lesson is about offset: its export shows offset × weight, not the path's PCA."""
    from gradviz.export.plan import plan_frames
    from gradviz.gui.export_frame import FrameStyle
    from gradviz.gui.export_renderer import FrameRenderer, run_inline

    with FrameRenderer("set-to-none", FrameStyle(SIZE, ("surface",))) as renderer:
        run_inline(renderer.open())
        plan = plan_frames(renderer.ticks_per_iteration, ops=8)
        list(renderer.frames(plan.ticks()))
        surface = renderer.frame.views["surface"].plane_surface
        assert surface is not None and surface.kind == "axes"
        assert surface.plane.labels == ("offset", "weight")
