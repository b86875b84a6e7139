"""Export… from the window: range preset, preview, progress, Cancel, and errors in the dialog."""

from __future__ import annotations

from PIL import Image
from PySide6.QtCore import QPoint, Qt, QTimer

from gradviz.engine import load_builtin
from gradviz.gui.export_dialog import ExportDialog


def _dialog(qtbot, folder, stepped: int = 6) -> ExportDialog:
    dialog = ExportDialog(load_builtin("forgot-zero-grad"), stepped)
    qtbot.addWidget(dialog)
    dialog.path.setText(str(folder / "steps.gif"))
    dialog.frame_size.setCurrentText("800x600")
    return dialog


def test_the_range_starts_at_what_was_stepped_and_the_gif_has_those_frames(qtbot, tmp_path) -> None:
    dialog = _dialog(qtbot, tmp_path, stepped=6)
    assert (dialog.first.value(), dialog.last.value()) == (1, 6)
    dialog.show_preview()
    qtbot.waitUntil(lambda: dialog.job is None, timeout=60000)
    assert dialog.last_error is None and not dialog.preview.pixmap().isNull()
    assert not (tmp_path / "steps.gif").exists()  # a preview writes nothing
    qtbot.mouseClick(dialog.export_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dialog.written is not None or dialog.last_error is not None, timeout=60000)
    assert dialog.last_error is None
    with Image.open(tmp_path / "steps.gif") as gif:
        assert gif.n_frames == 6 and gif.size == (800, 600)
    assert "Wrote" in dialog.message.text()


def test_cancel_leaves_no_file_and_keeps_the_previous_one(qtbot, tmp_path) -> None:
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    (tmp_path / "steps.gif").write_bytes(b"earlier export")
    dialog = _dialog(qtbot, tmp_path, stepped=40)
    dialog.start()
    qtbot.waitUntil(lambda: dialog.job is not None and dialog.job.done >= 2, timeout=30000)
    qtbot.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton)
    assert dialog.job is None and "Cancelled" in dialog.message.text()
    assert (tmp_path / "steps.gif").read_bytes() == b"earlier export"
    assert [p.name for p in tmp_path.iterdir()] == ["steps.gif"]


def test_the_window_handles_events_while_an_export_runs_and_cancel_stops_it(qtbot, tmp_path) -> None:
    """The lab is stepped on a worker thread and frames drawn between events: a timer keeps firing."""
    out = tmp_path / "out"
    out.mkdir()
    dialog = _dialog(qtbot, out, stepped=40)
    seen: list[tuple[str, int]] = []  # (phase, frames drawn) each time the timer fired
    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(lambda: dialog.job is not None and seen.append((dialog.job.phase, dialog.job.done)))
    timer.start()
    dialog.start()
    assert dialog.job is not None and dialog.job.done == 0  # start() returns before any frame is drawn
    qtbot.waitUntil(lambda: dialog.job is not None and dialog.job.done >= 3, timeout=60000)
    # Events were handled while the lab was being stepped and planned, and between frames.
    assert any(phase == "prepare" for phase, _ in seen)
    assert len({done for phase, done in seen if phase == "render"}) >= 2
    clicked: list[bool] = []
    dialog.caption.toggled.connect(clicked.append)
    qtbot.mouseClick(dialog.caption, Qt.MouseButton.LeftButton, pos=QPoint(5, dialog.caption.height() // 2))
    assert clicked == [False] and dialog.job is not None  # a click handled while the export runs
    qtbot.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton)
    timer.stop()
    assert dialog.job is None and "Cancelled" in dialog.message.text()
    assert list(out.iterdir()) == []
    assert dialog.export_button.isEnabled()


def test_a_bad_path_is_said_in_the_dialog(qtbot, tmp_path) -> None:
    dialog = _dialog(qtbot, tmp_path)
    dialog.path.setText(str(tmp_path / "missing" / "steps.gif"))
    dialog.start()
    assert dialog.last_error is not None and "does not exist" in dialog.last_error
    dialog.path.setText(str(tmp_path / "steps.bmp"))
    dialog.start()
    assert dialog.last_error is not None and ".bmp" in dialog.last_error
    assert dialog.export_button.isEnabled()


def test_ctrl_e_opens_export_with_the_steps_taken(open_window, qtbot, monkeypatch) -> None:
    from gui_helpers import press

    shown = []
    monkeypatch.setattr(ExportDialog, "exec", lambda self: shown.append(self) or 0)
    w = open_window("forgot-zero-grad")
    press(qtbot, w, Qt.Key.Key_Right, 5)
    qtbot.keyClick(w, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier)
    assert len(shown) == 1
    assert (shown[0].first.value(), shown[0].last.value()) == (1, 5)
    assert shown[0].scenario is w.controller.info.scenario
