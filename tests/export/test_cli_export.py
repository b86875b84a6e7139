"""``gradviz export``: quiet when piped, and one sentence with exit status 2 for every bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import pytest
from PIL import Image

from gradviz import cli
from tests.export.conftest import leftovers

SMALL = ["--views", "surface", "--size", "480x360", "--ops", "3"]


def _run(capsys, *args: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(args))
    except SystemExit as exc:  # argparse's own usage errors leave through SystemExit
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_export_writes_the_gif_and_prints_its_path(qapp, capsys, tmp_path: Path) -> None:
    path = tmp_path / "loop.gif"
    code, out, err = _run(capsys, "export", "forgot-zero-grad", "-o", str(path), *SMALL, "--fps", "5")
    assert (code, out.strip(), err) == (0, str(path), "")  # no progress bar when stderr is not a terminal
    with Image.open(path) as im:
        assert (getattr(im, "n_frames", 1), im.size, im.info["duration"]) == (3, (480, 360), 200)


def test_an_export_past_the_scenarios_end_stops_there_and_says_so(qapp, capsys, tmp_path: Path) -> None:
    # two-batch-accumulation is one iteration of 6 ops: 20 ops asked for cannot all be drawn.
    path = tmp_path / "past.gif"
    args = ("export", "two-batch-accumulation", "-o", str(path), "--views", "grads", "--size", "480x360")
    code, out, err = _run(capsys, *args, "--ops", "20")
    assert (code, out.strip()) == (0, str(path))
    assert "has 6 ops (1 iteration); the export stops at its last op" in err
    with Image.open(path) as im:
        assert getattr(im, "n_frames", 1) == 6


def test_a_range_past_the_scenarios_end_is_one_sentence(qapp, capsys, tmp_path: Path) -> None:
    path = tmp_path / "late.gif"
    args = ("export", "two-batch-accumulation", "-o", str(path), "--from", "50", "--to", "51")
    code, out, err = _run(capsys, *args)
    assert (code, out) == (2, "")
    assert err.strip() == (
        "gradviz: two-batch-accumulation ends at op 6, before the range asked for starts; "
        "choose an earlier --from."
    )
    assert not path.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "{tmp}/a.avi"], "cannot write .avi files"),
        (["-o", "{tmp}/missing/a.gif"], "does not exist"),
        (["-o", "{tmp}/a.gif", "--views", "surface,loss"], "unknown view 'loss'"),
        (["-o", "{tmp}/a.gif", "--from", "5", "--to", "2"], "--from 5 is after --to 2"),
        (["-o", "{tmp}/a.gif", "--ops", "4", "--to", "9"], "--to 9 is past the end"),
        (["-o", "{tmp}/a.gif", "--views", "surface,grads,code,timeline", "--size", "640x480"], "too small"),
        (["-o", "{tmp}/a.gif", "--fps", "60"], "at most 50 frames per second"),
        (["-o", "{tmp}/a.gif", "--fps", "0"], "found 0.0; allowed: frames per second from 0.1 to 60"),
        (["-o", "{tmp}/a.gif", "--lr", "-1"], "lr"),
        (["-o", "{tmp}/a.gif", "--size", "100x100"], "allowed: a size from 320x240 to 7680x4320"),
        (["-o", "{tmp}/a.gif", "--ops", "2", "--iterations", "2"], "not allowed with"),
    ],
)
def test_bad_input_is_one_sentence_and_status_2(qapp, capsys, tmp_path: Path, args, message) -> None:
    argv = ["export", "forgot-zero-grad", *(a.format(tmp=tmp_path) for a in args)]
    if "--size" not in argv:
        argv += ["--size", "480x360"]
    if "--views" not in argv:
        argv += ["--views", "surface"]
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1, err
    assert [p.name for p in tmp_path.iterdir()] == []


def test_unwritable_folder_is_one_sentence(qapp, capsys, tmp_path: Path, monkeypatch) -> None:
    # Root may write anywhere, so the folder's refusal is simulated.
    def refuse(folder: Path) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("gradviz.export.outputs._probe", refuse)
    for name in ("a.gif", "a.mp4"):
        code, _, err = _run(capsys, "export", "forgot-zero-grad", "-o", str(tmp_path / name), *SMALL)
        assert code == 2 and "cannot be written" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_unknown_scenario_and_folder_of_other_files(qapp, capsys, tmp_path: Path) -> None:
    code, _, err = _run(capsys, "export", "no-such-scenario", "-o", str(tmp_path / "a.gif"), *SMALL)
    assert code == 2 and err.count("\n") == 1
    folder = tmp_path / "frames"
    folder.mkdir()
    (folder / "slides.key").write_text("keep me")
    code, _, err = _run(capsys, "export", "forgot-zero-grad", "-o", str(folder), *SMALL)
    assert code == 2 and "holds other files" in err
    assert (folder / "slides.key").read_text() == "keep me" and leftovers(tmp_path) == []


def test_surface3d_without_opengl_is_one_sentence(qapp, capsys, tmp_path: Path) -> None:
    if qapp.platformName() != "offscreen":
        pytest.skip("OpenGL may be available on this display platform")
    path = tmp_path / "a.gif"
    argv = ["export", "forgot-zero-grad", "-o", str(path), "--views", "surface,surface3d"]
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert "xvfb-run -a gradviz export" in err and err.count("\n") == 1, err
    assert err.replace("...", "").count(". ") == 0, err
    assert [p.name for p in tmp_path.iterdir()] == []


def _video(path: Path) -> tuple[str, tuple[int, int], int, float, Fraction]:
    """(codec, size, frames, seconds, frame rate) of a video, decoded with PyAV."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        count = sum(1 for _ in container.decode(stream))
        assert container.duration is not None and stream.average_rate is not None
        size = (stream.width, stream.height)
        return stream.codec_context.name, size, count, container.duration / av.time_base, stream.average_rate


def test_mp4_export_needs_no_ffmpeg_program(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    path = tmp_path / "out.mp4"
    # The venv's python by its absolute path; PATH leads to no program at all, ffmpeg included.
    env = {**os.environ, "PATH": str(empty), "QT_QPA_PLATFORM": "offscreen"}
    argv = ["export", "forgot-zero-grad", "-o", str(path), "--iterations", "2", "--views", "surface"]
    done = subprocess.run(
        [sys.executable, "-m", "gradviz", *argv], env=env, capture_output=True, text=True, timeout=300
    )
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, str(path), "")
    codec, size, count, seconds, rate = _video(path)
    assert (codec, size, rate) == ("h264", (640, 480), 4)  # one view's default size, 4 fps
    assert count >= 2 and seconds == pytest.approx(count / 4, abs=0.01)
    assert leftovers(tmp_path) == []


def test_odd_size_is_said_on_stderr_in_one_line(qapp, capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    path = tmp_path / "odd.mp4"
    argv = ["-o", str(path), "--views", "surface", "--size", "641x481", "--ops", "3", "--fps", "2.5"]
    code, out, err = _run(capsys, "export", "forgot-zero-grad", *argv)
    assert (code, out.strip()) == (0, str(path))
    assert err == "gradviz: 641x481 is odd; the MP4 is 642x482 (H.264 needs even sides).\n"
    assert _video(path) == ("h264", (642, 482), 3, pytest.approx(1.2, abs=0.01), Fraction(5, 2))
    webm = tmp_path / "odd.webm"
    argv[1] = str(webm)
    code, out, err = _run(capsys, "export", "forgot-zero-grad", *argv)
    assert (code, out.strip(), err) == (0, str(webm), "")  # VP9 keeps the size as asked
    assert _video(webm)[:3] == ("vp9", (641, 481), 3)


def test_default_views_give_way_to_a_small_size_and_say_which_were_kept(qapp, capsys, tmp_path: Path) -> None:
    path = tmp_path / "a.gif"
    argv = ["-o", str(path), "--size", "640x480", "--ops", "3"]
    code, out, err = _run(capsys, "export", "forgot-zero-grad", *argv)
    assert (code, out.strip()) == (0, str(path))
    assert err == (
        "gradviz: 640x480 holds surface and code readably; left out grads, timeline "
        "(ask for them with --views and a larger --size).\n"
    )
    with Image.open(path) as im:
        assert im.size == (640, 480)
    # At the default size every view fits, and nothing is said.
    code, out, err = _run(capsys, "export", "forgot-zero-grad", "-o", str(tmp_path / "b.gif"), "--ops", "2")
    assert (code, err) == (0, "")
    # Views asked for are drawn as asked, or refused in one sentence: never left out.
    argv = ["-o", str(tmp_path / "c.gif"), "--size", "640x480", "--ops", "3", "--views", "surface,grads"]
    code, out, err = _run(capsys, "export", "forgot-zero-grad", *argv)
    assert code == 2 and err.startswith("gradviz: 640x480 is too small to draw surface, grads with a caption")
    assert err.count("\n") == 1 and not (tmp_path / "c.gif").exists()


def test_lesson_export_asks_holds_then_reveals_the_real_numbers(qapp, capsys, tmp_path: Path) -> None:
    """two-batch-accumulation: three questions, each held on screen, then answered from the run."""
    from gradviz.gui.export_lesson import QUESTION_SECONDS, REVEAL_SECONDS
    from tests.export.conftest import gif_durations

    path = tmp_path / "lesson.gif"
    code, out, err = _run(
        capsys, "export", "two-batch-accumulation", "--lesson", "-o", str(path), "--size", "640x480"
    )
    assert (code, out.strip()) == (0, str(path)), err
    durations = gif_durations(path)
    held = [d for d in durations if d >= 1000]
    asked, revealed = int(QUESTION_SECONDS * 1000), int(REVEAL_SECONDS * 1000)
    assert held == [asked, revealed] * 3


def test_lesson_cards_carry_the_question_then_the_real_run_after_the_stops_op(qapp, tmp_path: Path) -> None:
    from gradviz.gui.export_frame import FrameStyle
    from gradviz.gui.export_frames import ExportJob, ExportRange
    from gradviz.gui.export_renderer import run_inline
    from gradviz.gui.layout import DEFAULT_VIEWS

    style = FrameStyle((1280, 720), DEFAULT_VIEWS, fit=True)
    job = ExportJob(
        "two-batch-accumulation", tmp_path / "a.gif", style=style, fps=4, frames=ExportRange(lesson=True)
    )
    work = job.work()
    next(work)
    stops = job.renderer.info.stops
    run_inline(work)
    cards = [s for s in job.shots if s.card]
    assert len(cards) == 6 and (tmp_path / "a.gif").exists()
    for placed, (ask, reveal) in zip(stops, zip(cards[::2], cards[1::2], strict=True), strict=True):
        question = placed.stop.questions[0]
        # Asked before the stop's op (nothing after it drawn), revealed once it has run.
        assert ask.tick < placed.tick <= reveal.tick and question.ask.split("?")[0] in ask.card
        assert "Answer:" not in ask.card and "In the real run" in reveal.card
    # The answers the lesson's point states, computed from the real run's records.
    answers = [c.card for c in cards[1::2]]
    expected = ("-16", "-20", "1.2")
    assert [f"Answer: {n}</b>" in a for a, n in zip(answers, expected, strict=True)] == [True] * 3


def test_lesson_export_of_a_scenario_without_one_is_one_sentence(qapp, capsys, tmp_path: Path) -> None:
    plain = tmp_path / "plain.toml"
    plain.write_text('name = "plain"\niterations = 3\n[model]\nkind = "quadratic"\n')
    out = tmp_path / "out"
    out.mkdir()
    code, _, err = _run(capsys, "export", str(plain), "--lesson", "-o", str(out / "a.gif"))
    assert code == 2 and "has no lesson stops to export" in err and err.count("\n") == 1
    code, _, err = _run(capsys, "export", "no-such-scenario", "--lesson", "-o", str(out / "a.gif"))
    assert code == 2 and err.count("\n") == 1
    code, _, err = _run(capsys, "export", "forgot-zero-grad", "--lesson", "--ops", "3", "-o", str(out / "b"))
    assert code == 2 and "--lesson plays the lesson's own stops" in err
    assert list(out.iterdir()) == []
