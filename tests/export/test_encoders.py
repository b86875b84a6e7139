"""The Qt-free encoders: GIF palette and timing, atomic writes, PNG folders, MP4/WebM, progress."""

from __future__ import annotations

import io
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import NamedTuple

import av
import numpy as np
import pytest
from av.video.reformatter import Colorspace
from PIL import Image

from gradviz.engine.errors import UserError
from gradviz.export import GifWriter, PngFolderWriter, VideoWriter, check_output, frame_durations
from gradviz.export.palette import PaletteMapper, build_palette, sample_indices
from gradviz.export.plan import FramePlan, plan_frames
from gradviz.export.progress import ProgressBar
from gradviz.export.video import VIDEO_FORMATS, Encoder, frame_rate
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


def blocks(count: int, size: tuple[int, int]) -> list[np.ndarray]:
    """Orange left half, blue right half, and a white bar along the bottom that grows per frame."""
    w, h = size
    out = []
    for i in range(count):
        f = np.empty((h, w, 3), dtype=np.uint8)
        f[:, : w // 2] = ORANGE
        f[:, w // 2 :] = BLUE
        f[h - 4 :, : 4 * (i + 1)] = 255
        out.append(f)
    return out


def write_video(path: Path, size: tuple[int, int], fps: float, count: int) -> VideoWriter:
    writer = VideoWriter(path, size, fps)
    for f in blocks(count, size):
        writer.add(f)
    writer.commit()
    return writer


class Decoded(NamedTuple):
    codec: str
    rate: Fraction
    duration: float
    matrix: int
    pictures: list[np.ndarray]


def decode(path: Path) -> Decoded:
    """A video read back with PyAV: codec, frame rate, seconds, YUV matrix, frames as RGB."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        pictures = list(container.decode(stream))
        assert container.duration is not None and stream.average_rate is not None
        return Decoded(
            stream.codec_context.name,
            Fraction(stream.average_rate),
            container.duration / av.time_base,
            pictures[0].colorspace,
            [p.to_ndarray(format="rgb24") for p in pictures],
        )


@pytest.mark.parametrize(("name", "codec"), [("a.mp4", "h264"), ("a.webm", "vp9")])
@pytest.mark.parametrize("fps", [4.0, 2.5])
def test_video_decodes_to_the_frames_written_at_their_rate(
    tmp_path: Path, monkeypatch, name: str, codec: str, fps: float
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no ffmpeg program to be found
    path = tmp_path / name
    assert check_output(path).kind == "video"
    writer = write_video(path, (96, 64), fps, 6)
    assert writer.notes == () and len(writer) == 6
    video = decode(path)
    pictures = video.pictures
    assert (video.codec, video.rate, len(pictures), pictures[0].shape) == (codec, fps, 6, (64, 96, 3))
    assert video.duration == pytest.approx(6 / fps, abs=0.01) and video.matrix == Colorspace.ITU709
    for picture in (pictures[0], pictures[-1]):
        # Lossy, so close rather than equal: the middle of each flat block.
        assert np.abs(picture[8:40, 8:40].astype(int) - ORANGE).max() <= 8
        assert np.abs(picture[8:40, 56:88].astype(int) - BLUE).max() <= 8
    # The bar grew: white at the end where the first frame was still orange.
    assert pictures[-1][-2, 20].min() > 230 and pictures[0][-2, 20][2] < 60
    assert leftovers(tmp_path) == []


def test_mp4_plays_before_it_has_loaded_and_is_reproducible(tmp_path: Path) -> None:
    for name in ("a.mp4", "b.mp4"):
        write_video(tmp_path / name, (96, 64), 4, 4)
    data = (tmp_path / "a.mp4").read_bytes()
    assert data.find(b"moov") < data.find(b"mdat")  # +faststart: the index comes first
    assert data == (tmp_path / "b.mp4").read_bytes()


def test_frame_rates_are_exact_fractions() -> None:
    assert frame_rate(2.5) == Fraction(5, 2) and frame_rate(4.0) == 4
    assert frame_rate(29.97) == Fraction(2997, 100) and frame_rate(1 / 3) == Fraction(1, 3)
    with pytest.raises(ValueError, match="positive"):
        frame_rate(0)


def test_odd_size_mp4_is_padded_to_even_and_says_so(tmp_path: Path) -> None:
    writer = write_video(tmp_path / "a.mp4", (97, 65), 4, 3)
    assert writer.notes == ("97x65 is odd; the MP4 is 98x66 (H.264 needs even sides).",)
    pictures = decode(tmp_path / "a.mp4").pictures
    assert pictures[0].shape == (66, 98, 3)
    # The added column and row repeat the edge (blue), not black.
    assert np.abs(pictures[0][8:40, -1].astype(int) - BLUE).max() <= 12
    # VP9 keeps any size: no padding, no note.
    webm = write_video(tmp_path / "a.webm", (97, 65), 4, 3)
    assert webm.notes == () and decode(tmp_path / "a.webm").pictures[0].shape == (65, 97, 3)


def test_webm_falls_back_to_vp8_and_a_missing_encoder_is_one_sentence(tmp_path: Path, monkeypatch) -> None:
    webm = VIDEO_FORMATS[".webm"]
    missing = Encoder("no-such-vp9-encoder", "VP9")
    monkeypatch.setitem(VIDEO_FORMATS, ".webm", replace(webm, encoders=(missing, *webm.encoders[1:])))
    writer = write_video(tmp_path / "a.webm", (96, 64), 4, 3)
    video = decode(tmp_path / "a.webm")
    assert (writer.encoder.name, video.codec, video.matrix) == ("libvpx", "vp8", Colorspace.ITU601)
    assert np.abs(video.pictures[0][8:40, 8:40].astype(int) - ORANGE).max() <= 8
    monkeypatch.setitem(VIDEO_FORMATS, ".webm", replace(webm, encoders=(missing,)))
    with pytest.raises(UserError, match=r"no VP9 encoder \(no-such-vp9-encoder\).*or export a \.gif"):
        VideoWriter(tmp_path / "b.webm", (96, 64), 4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.webm"]


def test_encoder_failure_is_one_sentence_and_keeps_the_previous_video(tmp_path: Path) -> None:
    path = tmp_path / "a.mp4"
    path.write_bytes(b"previous")
    # Wider than any H.264 level allows: libx264 refuses to open on the first frame.
    writer = VideoWriter(path, (20_000, 2), 4)
    with pytest.raises(UserError, match=r"libx264 encoder could not write a\.mp4 \(.+\); try a \.gif"):
        writer.add(np.zeros((2, 20_000, 3), dtype=np.uint8))
    writer.abort()
    assert path.read_bytes() == b"previous" and leftovers(tmp_path) == []
    with pytest.raises(RuntimeError), VideoWriter(path, (96, 64), 4) as video:
        video.add(blocks(1, (96, 64))[0])
        raise RuntimeError("cancelled while drawing")
    assert path.read_bytes() == b"previous" and leftovers(tmp_path) == []
