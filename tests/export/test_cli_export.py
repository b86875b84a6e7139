"""``gradviz export``: quiet when piped, and one sentence with exit status 2 for every bad input."""

from __future__ import annotations

from pathlib import Path

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
        (["-o", "{tmp}/a.gif", "--fps", "0"], "--fps must be more than 0"),
        (["-o", "{tmp}/a.gif", "--lr", "-1"], "lr"),
        (["-o", "{tmp}/a.gif", "--size", "100x100"], "outside 320x240"),
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


def test_unwritable_folder_and_missing_ffmpeg(qapp, capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("gradviz.export.outputs.find_ffmpeg", lambda: None)
    code, _, err = _run(capsys, "export", "forgot-zero-grad", "-o", str(tmp_path / "a.mp4"), *SMALL)
    assert code == 2 and "needs ffmpeg" in err and err.count("\n") == 1
    # Root may write anywhere, so the folder's refusal is simulated.
    monkeypatch.setattr("gradviz.export.outputs.os.access", lambda path, mode: False)
    code, _, err = _run(capsys, "export", "forgot-zero-grad", "-o", str(tmp_path / "a.gif"), *SMALL)
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
