"""``gradviz snapshot``: the size asked for, exactly, or a sentence; and only PNG names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PIL import Image

from gradviz import cli
from gradviz.engine.errors import UserError
from gradviz.gui.snapshot import write_snapshot


def test_a_size_the_window_cannot_take_is_refused_with_the_least_that_works(qapp, tmp_path: Path) -> None:
    out = tmp_path / "shot.png"
    with pytest.raises(UserError, match=r"^640x480 is too small for the window: it needs at least") as caught:
        write_snapshot("forgot-zero-grad", str(out), ops=3, size=(640, 480), presentation=False)
    assert not out.exists() and list(tmp_path.iterdir()) == []
    found = re.search(r"at least (\d+)x(\d+); choose a larger --size\.$", str(caught.value))
    assert found, str(caught.value)
    need = int(found[1]), int(found[2])
    assert need[0] >= 640 and need[1] >= 480 and need != (640, 480)
    # That size is then honoured to the pixel.
    write_snapshot("forgot-zero-grad", str(out), ops=3, size=need, presentation=False)
    with Image.open(out) as im:
        assert im.size == need


@pytest.mark.parametrize("size", [(1280, 720), (1000, 700), (1920, 1080)])
def test_a_size_the_window_can_take_is_the_png_s_size(qapp, tmp_path: Path, size) -> None:
    out = tmp_path / "shot.png"
    write_snapshot("set-to-none", str(out), ops=2, size=size, presentation=False)
    with Image.open(out) as im:
        assert im.size == size


def test_a_name_not_ending_in_png_is_refused_before_any_work(qapp, capsys, tmp_path: Path) -> None:
    for name in ("out.jpg", "out", "shot.png.gif"):
        code = cli.main(["snapshot", "forgot-zero-grad", "-o", str(tmp_path / name)])
        _, err = capsys.readouterr()
        assert code == 2
        assert err == f"gradviz: {tmp_path / name}: snapshot writes PNG; allowed: a name ending in .png.\n"
    assert list(tmp_path.iterdir()) == []
    # Upper case is a PNG name too.
    code = cli.main(["snapshot", "forgot-zero-grad", "-o", str(tmp_path / "SHOT.PNG"), "--ops", "1"])
    capsys.readouterr()
    assert code == 0 and (tmp_path / "SHOT.PNG").exists()
