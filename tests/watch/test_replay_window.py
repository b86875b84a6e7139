"""A recording opened in the window (offscreen): the user's code, the findings linked to their ops,
stepping as cursor moves, and a bad recording as a dialog."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch._dynamo  # noqa: F401  (a window's worker imports it once painted: done before, it takes no time)
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox

from tests.watch import scripts
from tests.watch.test_watch import _line


@pytest.fixture(autouse=True)
def sandboxed_settings(tmp_path: Path) -> Iterator[None]:
    """No test reads or writes the user's settings."""
    folder = tmp_path / "settings"
    folder.mkdir()
    for fmt in (QSettings.Format.NativeFormat, QSettings.Format.IniFormat):
        QSettings.setPath(fmt, QSettings.Scope.UserScope, str(folder))
    yield


@pytest.fixture
def forgot(forgot) -> Path:
    """The recording of the forgotten zero_grad (watched once for the session)."""
    assert forgot.proc.returncode == 0, forgot.proc.stderr
    return forgot.recording


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
    assert "op 3 of 10" in window.position.text()


def test_stepping_a_recording_moves_the_cursor_and_reset_keeps_the_history(window, qtbot, forgot):
    window.open_scenario(str(forgot))
    c = window.controller
    window.activateWindow()
    qtbot.keyClick(window, Qt.Key.Key_Right)
    qtbot.keyClick(window, Qt.Key.Key_Right)
    assert c.cursor == 1 and not c.busy
    qtbot.keyClick(window, Qt.Key.Key_F8)
    assert c.cursor == 2, "F8: the next finding's op"
    qtbot.keyClick(window, Qt.Key.Key_R)
    assert c.cursor == -1 and c.history is not None and c.history.last_tick == 9
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
    title = window.surface.title.text()
    assert title.startswith("No loss surface for a recording") and "weight space" not in title
    assert title.endswith("its path over the principal-components plane")


def test_a_recording_offers_no_plane_to_choose_and_its_axes_read_as_the_path(window, qtbot, forgot):
    window.open_scenario(str(forgot))
    window.controller.seek(9)
    window.redraw()
    surface = window.surface
    assert surface.mode == "plane" and surface.plane_surface is not None
    # No model or data: no other plane can be made, so neither the picker nor Recompute shows.
    assert not surface.controls.isVisible()
    # The path's own coordinates on the ticks, and the axis titles whole (no "(x0.001)" scale).
    for name in ("left", "bottom"):
        assert "(x" not in surface.plot.getAxis(name).labelString()


def test_a_recording_too_short_for_a_plane_promises_none(window, qtbot, tmp_path):
    from tests.watch.test_watch import watch

    proc = watch(tmp_path, scripts.FORGOT, "--steps", "1", "-o", "rec.json")
    assert proc.returncode == 0, proc.stderr
    window.open_scenario(str(tmp_path / "rec.json"))
    window.controller.seek(2)
    qtbot.waitUntil(lambda: "too few updates" in window.surface.caption.text())
    surface = window.surface
    assert surface.title.text() == "Loss surface: none drawn"
    # The reason stands in the plot's place, with no plane picker promising another.
    assert surface.placeholder.isVisible() and "too few updates" in surface.placeholder.text()
    assert not surface.plot_widget.isVisible() and not surface.controls.isVisible()


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


def test_an_op_in_another_file_shows_that_file_and_where_the_next_op_runs(window, several_files):
    window.open_scenario(str(several_files.recording))
    c = window.controller
    step = _line(scripts.HELPERS, "optimizer.step()")
    backward = _line(scripts.SEVERAL_FILES, "loss.backward()")
    c.seek(1)
    window.redraw()
    assert window.code.editor.toPlainText().splitlines() == scripts.HELPERS.splitlines()
    assert window.code.ran == (step, step)
    assert window.code.title.text().endswith("helpers.py</span>"), "the title names the file shown"
    assert not window.code.next_line, "the next op (a backward) is in train.py: no line here is marked"
    assert "helpers.py: the op at the cursor ran here" in window.code.note.text()
    assert f"The next op, backward(), runs at line {backward} of train.py." in window.code.note.text()
    assert window.narration.text().startswith("optimizer.step() moved"), "quoting the line of helpers.py"
    c.seek(2)
    window.redraw()
    assert "loss.backward()" in window.code.editor.toPlainText() and window.code.ran == (backward, backward)
    assert window.code.title.text().endswith("train.py</span>")
    assert window.code.next_line == _line(scripts.SEVERAL_FILES, "update(model, optimizer)"), (
        "the next op, the step in helpers.py, is marked at the line that calls it"
    )
    c.seek(c.history.last_tick - 1)
    window.redraw()
    assert window.code.next_line == _line(scripts.SEVERAL_FILES, "update(model, optimizer)")
    c.seek(c.history.last_tick)
    window.redraw()
    assert window.code.ran == (step, step) and window.code.next_line is None, (
        "after the last op: nothing next"
    )


def test_an_exports_frames_count_the_recordings_ops_and_updates_and_show_each_ops_file(several_files):
    from gradviz.gui.export_frame import FrameStyle
    from gradviz.gui.export_renderer import FrameRenderer, run_inline
    from gradviz.watch.replay import load_replay

    replay = load_replay(several_files.recording)
    renderer = FrameRenderer(
        str(several_files.recording), FrameStyle((1280, 720), ("surface", "grads", "code"))
    )
    run_inline(renderer.open())
    try:
        ticks = [0, 1, 7]
        for tick, _ in zip(ticks, renderer.frames(ticks), strict=True):
            frame = renderer.frame
            assert frame.counter.text() == replay.position(tick)
            shown = frame.views["code"].editor.toPlainText().splitlines()
            assert shown == (scripts.HELPERS if tick % 2 else scripts.SEVERAL_FILES).splitlines()
    finally:
        renderer.close()
    assert replay.position(7) == "op 8 of 8 · after update 4 of 4"
