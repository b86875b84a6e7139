"""A recording opened in the window (offscreen): the user's code, the findings linked to their ops,
stepping as cursor moves, and a bad recording as a dialog."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox

from tests.watch import scripts
from tests.watch.test_watch import _line, watch


@pytest.fixture(autouse=True)
def sandboxed_settings(tmp_path: Path) -> Iterator[None]:
    """No test reads or writes the user's settings."""
    folder = tmp_path / "settings"
    folder.mkdir()
    for fmt in (QSettings.Format.NativeFormat, QSettings.Format.IniFormat):
        QSettings.setPath(fmt, QSettings.Scope.UserScope, str(folder))
    yield


@pytest.fixture(scope="module")
def forgot(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("forgot")
    proc = watch(folder, scripts.FORGOT, "-o", "forgot.json")
    assert proc.returncode == 0, proc.stderr
    return folder / "forgot.json"


@pytest.fixture
def window(qtbot):
    from gradviz.gui.window import MainWindow

    w = MainWindow()
    qtbot.addWidget(w)
    w.resize(1280, 720)
    w.show()
    qtbot.waitExposed(w)
    yield w
    w.controller.shutdown()


def test_a_recording_opens_in_the_window_with_its_code_and_findings(window, qtbot, forgot):
    window.open_scenario(str(forgot))
    c = window.controller
    assert c.replay is not None and c.cursor == -1
    assert "optimizer.step()" in window.code.editor.toPlainText()
    assert not window.scenario_bar.isVisible(), "a recording has no scenario to edit"
    assert window.findings.isVisible() and window.findings.count() == 1
    backward = _line(scripts.FORGOT, "loss.backward()")
    item = window.findings.item(0)
    assert f"train.py:{backward}: warning: backward() added to .grad" in item.text()

    rect = window.findings.visualItemRect(item)
    qtbot.mouseClick(window.findings.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert c.cursor == 2, "clicking the finding goes to the backward that added to the used .grad"
    window.redraw()
    assert window.code.ran == (backward, backward)
    assert "holds the sum of 2 backward calls" in window.narration.text()
    assert "op 3 of 10" in window.status.text()


def test_stepping_a_recording_moves_the_cursor_and_reset_keeps_the_tape(window, qtbot, forgot):
    window.open_scenario(str(forgot))
    c = window.controller
    window.activateWindow()
    qtbot.keyClick(window, Qt.Key.Key_Right)
    qtbot.keyClick(window, Qt.Key.Key_Right)
    assert c.cursor == 1 and not c.busy
    qtbot.keyClick(window, Qt.Key.Key_F8)
    assert c.cursor == 2, "F8: the next finding's op"
    qtbot.keyClick(window, Qt.Key.Key_R)
    assert c.cursor == -1 and c.tape is not None and c.tape.last_tick == 9
    for _ in range(12):
        c.next_op()
    assert c.cursor == 9 and c.finished, "stepping stops at the recording's last op"


def test_the_surface_says_why_a_recording_has_none(window, qtbot, forgot):
    window.open_scenario(str(forgot))
    window.controller.seek(9)
    window.redraw()
    caption = window.surface.caption.text()
    assert caption.startswith("No loss surface for a recording")
    assert "principal-components plane" in caption


def test_file_open_on_a_bad_recording_shows_one_sentence(window, qtbot, forgot, tmp_path, monkeypatch):
    bad = tmp_path / "bad.json"
    bad.write_text(forgot.read_text()[:200])
    window.open_scenario(str(forgot))
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(bad), ""))
    window.act_open.trigger()
    dialog = window.findChild(QMessageBox, "errorDialog")
    assert dialog is not None and "cut short" in dialog.text() and "\n" not in dialog.text()
    dialog.accept()
    assert window.controller.replay is not None and window.findings.count() == 1, "the open recording stays"
