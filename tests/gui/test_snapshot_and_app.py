"""``gradviz snapshot`` writes a PNG of the window; ``gradviz open`` without a display says so."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtGui import QImage

from gradviz.engine.errors import UserError
from gradviz.gui.snapshot import write_snapshot


def test_snapshot_writes_a_png_of_the_requested_size(tmp_path: Path, qapp) -> None:
    out = tmp_path / "shot.png"
    write_snapshot("forgot-zero-grad", str(out), ops=12, size=(1280, 720), presentation=False)
    image = QImage(str(out))
    assert (image.width(), image.height()) == (1280, 720)
    assert not list(tmp_path.glob(".*.tmp")), "no temporary file is left behind"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask  # an ordinary file, not a private temp


def test_snapshot_in_presentation_mode(tmp_path: Path, qapp) -> None:
    out = tmp_path / "talk.png"
    write_snapshot("set-to-none", str(out), ops=5, size=(1280, 720), presentation=True)
    assert QImage(str(out)).width() == 1280


def test_snapshot_rejects_an_unwritable_path(tmp_path: Path, qapp) -> None:
    with pytest.raises(UserError, match="does not exist"):
        write_snapshot(
            "forgot-zero-grad", str(tmp_path / "nope" / "x.png"), ops=1, size=(640, 480), presentation=False
        )
    with pytest.raises(UserError, match="is a folder"):
        write_snapshot("forgot-zero-grad", str(tmp_path), ops=1, size=(640, 480), presentation=False)


def test_snapshot_rejects_an_unknown_scenario(tmp_path: Path, qapp) -> None:
    with pytest.raises(UserError, match="no built-in scenario"):
        write_snapshot("forgot-zero-grd", str(tmp_path / "x.png"), ops=1, size=(640, 480), presentation=False)
    assert not (tmp_path / "x.png").exists()


def test_open_without_a_display_says_so_in_one_sentence() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    done = subprocess.run(
        [sys.executable, "-m", "gradviz", "open", "standard-loop"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "no display" in done.stderr and "gradviz snapshot" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_window_shows_before_torch_is_imported() -> None:
    code = (
        "import sys\n"
        "from gradviz.gui.app import launch\n"
        "app, window = launch('standard-loop')\n"
        "assert window.isVisible()\n"
        "assert 'torch' not in sys.modules, 'torch was imported before the window showed'\n"
        "from gradviz.gui.window import wait_until_idle\n"
        "wait_until_idle(window)\n"
        "assert 'torch' in sys.modules and window.controller.info is not None\n"
        "window.controller.shutdown()\n"
    )
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", XDG_CONFIG_HOME="/tmp/gradviz-test-config")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_about_dialog_shows_the_version_and_the_app_knows_its_desktop_file(qtbot) -> None:
    from PySide6.QtWidgets import QApplication

    import gradviz
    from gradviz.gui.about import AboutDialog
    from gradviz.gui.display import application

    application()
    dialog = AboutDialog()
    qtbot.addWidget(dialog)
    assert dialog.ui.versionLabel.text() == f"Version {gradviz.__version__}"
    assert not dialog.ui.iconLabel.pixmap().isNull()
    app = QApplication.instance()
    assert app.desktopFileName() == "io.github.gradviz.Gradviz"
    assert not app.windowIcon().isNull()
