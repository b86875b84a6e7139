"""The Qt-free encoders: GIF palette and timing, atomic writes, PNG folders, ffmpeg, progress."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gradviz.engine.errors import UserError
from gradviz.export import GifWriter, PngFolderWriter, VideoWriter, check_output, frame_durations
from gradviz.export.palette import PaletteMapper, build_palette, sample_indices
from gradviz.export.plan import FramePlan, plan_frames
from gradviz.export.progress import ProgressBar
from gradviz.gui.layout import parse_views
from tests.export.conftest import gif_blocks, gif_durations, gif_frames, leftovers

ORANGE = (0xD5, 0x5E, 0x00)
BLUE = (0x00, 0x72, 0xB2)


def frames(count: int, size: tuple[int, int] = (64, 48)) -> list[np.ndarray]:
    """A white frame with a grey ramp and an orange bar that grows by one column per frame."""
    w, h = size
    out = []
    for i in range(count):
        f = np.full((h, w, 3), 255, dtype=np.uint8)
        f[: h // 2] = np.linspace(120, 255, w, dtype=np.uint8)[None, :, None]
        f[h - 8 :, : i + 1] = ORANGE
        out.append(f)
    return out


def test_gif_has_one_global_palette_exact_colours_loop_and_timing(tmp_path: Path) -> None:
    path = tmp_path / "a.gif"
    writer = GifWriter(path, (64, 48), fps=12, fixed_colours=[ORANGE, BLUE, (255, 255, 255)])
    for f in frames(10):
        writer.add(f)
    writer.commit()
    decoded = gif_frames(path)
    assert len(decoded) == 10 and decoded[0].shape == (48, 64, 3)
    with Image.open(path) as im:
        assert im.info["loop"] == 0
    assert gif_blocks(path) == (True, 0)
    durations = gif_durations(path)
    assert set(durations) == {80, 90} and sum(durations) == 830  # 10 frames at 12 fps: 0.83 s
    last = decoded[-1]
    assert tuple(last[-1, 0]) == ORANGE and tuple(last[0, -1]) == (255, 255, 255)
    # The bar is exactly as wide as in the source: nothing dithered, nothing bled.
    assert (np.all(last[-1] == ORANGE, axis=1)).sum() == 10
    assert leftovers(tmp_path) == []


def test_frame_durations_keep_the_total_right() -> None:
    assert frame_durations(3, 10) == [100, 100, 100]
    assert sum(frame_durations(120, 12)) == 10_000
    assert min(frame_durations(10, 50)) == 20


def test_palette_keeps_fixed_colours_first_and_maps_them_exactly() -> None:
    samples = frames(4)
    palette = build_palette(samples, [ORANGE, BLUE, ORANGE])
    assert palette[:2] == [ORANGE, BLUE] and len(palette) <= 255 and len(set(palette)) == len(palette)
    mapper = PaletteMapper(palette)
    idx = mapper.indices(samples[-1])
    assert idx[-1, 0] == 0
    rebuilt = np.asarray(palette, dtype=np.uint8)[idx]
    assert np.array_equal(rebuilt[-8:], samples[-1][-8:])
    assert sample_indices(100, 5) == [0, 25, 50, 74, 99] and sample_indices(3) == [0, 1, 2]


def test_same_frames_give_byte_identical_gifs(tmp_path: Path) -> None:
    for name in ("a.gif", "b.gif"):
        writer = GifWriter(tmp_path / name, (64, 48), fps=8)
        for f in frames(6):
            writer.add(f)
        writer.commit()
    assert (tmp_path / "a.gif").read_bytes() == (tmp_path / "b.gif").read_bytes()


def test_abort_and_failed_encoding_keep_the_previous_gif(tmp_path: Path) -> None:
    path = tmp_path / "a.gif"
    path.write_bytes(b"previous")
    with pytest.raises(RuntimeError), GifWriter(path, (64, 48), fps=8) as writer:
        writer.add(frames(1)[0])
        raise RuntimeError("cancelled while drawing")
    writer = GifWriter(path, (64, 48), fps=8)
    for f in frames(5):
        writer.add(f)

    def stop(done: int, total: int) -> None:
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        writer.commit(stop)
    assert path.read_bytes() == b"previous" and leftovers(tmp_path) == []


def test_png_folder_is_numbered_and_replaces_only_an_earlier_export(tmp_path: Path) -> None:
    out = tmp_path / "frames"
    for count in (3, 2):
        writer = PngFolderWriter(out, (64, 48), expected=count)
        for f in frames(count):
            writer.add(f)
        writer.commit()
    assert sorted(p.name for p in out.iterdir()) == ["frame-0001.png", "frame-0002.png"]
    with Image.open(out / "frame-0002.png") as im:
        assert im.size == (64, 48)
    assert leftovers(tmp_path) == []
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="holds other files"):
        check_output(out)


def _fake_ffmpeg(folder: Path, body: str) -> None:
    script = folder / "ffmpeg"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_video_pipes_raw_frames_to_ffmpeg_and_renames_its_output(tmp_path: Path, monkeypatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # Stands in for ffmpeg: the last argument is the output file; stdin holds the raw frames.
    _fake_ffmpeg(bin_dir, 'for a; do out="$a"; done; cat > "$out"')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    path = tmp_path / "a.mp4"
    assert check_output(path).kind == "video"
    writer = VideoWriter(path, (64, 48), fps=10)
    for f in frames(4):
        writer.add(f)
    writer.commit()
    assert path.stat().st_size == 4 * 64 * 48 * 3 and leftovers(tmp_path) == []


def test_ffmpeg_failure_is_one_sentence_and_leaves_no_file(tmp_path: Path, monkeypatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_ffmpeg(bin_dir, "cat > /dev/null; echo 'Unknown encoder libx264' >&2; exit 1")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    path = tmp_path / "a.webm"
    writer = VideoWriter(path, (64, 48), fps=10)
    writer.add(frames(1)[0])
    with pytest.raises(UserError, match=r"ffmpeg could not write a\.webm \(Unknown encoder libx264\)"):
        writer.commit()
    assert not path.exists() and leftovers(tmp_path) == []


def test_video_without_ffmpeg_says_how_to_get_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("gradviz.export.outputs.find_ffmpeg", lambda: None)
    with pytest.raises(UserError, match=r"needs ffmpeg.*apt install ffmpeg"):
        check_output(tmp_path / "a.mp4")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("a.avi", "cannot write .avi files"),
        ("a.png", "gradviz snapshot"),
        ("missing/a.gif", "does not exist"),
    ],
)
def test_bad_outputs_are_refused_before_any_work(tmp_path: Path, name: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        check_output(tmp_path / name)


def test_plan_counts_ops_and_iterations_from_one() -> None:
    plan = plan_frames(4, ops=6)
    assert plan.ticks() == [0, 1, 2, 3, 4, 5]
    assert plan_frames(4, per_frame="iteration", iterations=3, first=0).ticks() == [-1, 3, 7, 11]
    assert plan_frames(4, first=3, last=5, default_iterations=1).ticks() == [2, 3, 4]
    assert len(FramePlan("op", 1, 10, 4)) == 10
    for kwargs, message in [
        ({"first": 5, "last": 3}, "--from 5 is after --to 3"),
        ({"ops": 8, "last": 9}, "--to 9 is past the end"),
        ({"per_frame": "iteration", "ops": 3}, "less than one iteration"),
        ({"first": -1}, "--from must be 0"),
        ({"last": 20_000}, "at most 10,000"),
    ]:
        with pytest.raises(UserError, match=message):
            plan_frames(4, **kwargs)  # type: ignore[arg-type]
    assert parse_views("Surface, code,surface") == ("surface", "code")
    with pytest.raises(UserError, match="unknown view 'loss'"):
        parse_views("surface,loss")


def test_progress_bar_draws_on_a_terminal_only() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    piped = io.StringIO()
    with ProgressBar(piped) as bar:
        bar("render", 5, 10)
    assert piped.getvalue() == ""
    tty = Terminal()
    with ProgressBar(tty) as bar:
        bar("render", 10, 10)
    assert "drawing frames" in tty.getvalue() and "10/10" in tty.getvalue()


def test_leaving_the_block_without_commit_leaves_nothing(tmp_path: Path) -> None:
    with PngFolderWriter(tmp_path / "frames", (64, 48)) as writer:
        writer.add(frames(1)[0])
    with GifWriter(tmp_path / "a.gif", (64, 48), fps=8) as gif:
        gif.add(frames(1)[0])
        gif.add(frames(2)[1])
        gif.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gif"]
