"""The window driven as a user drives it: keys, clicks, scrubbing, toggles, themes, presentation."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from gui_helpers import colour_near, press, settle
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QApplication, QMessageBox

from gradviz.gui.theme import RUN_COLORS

RIGHT, LEFT = Qt.Key.Key_Right, Qt.Key.Key_Left
SHIFT = Qt.KeyboardModifier.ShiftModifier


def test_keys_step_iterate_go_back_and_reset(open_window, qtbot) -> None:
    w = open_window("forgot-zero-grad")
    c = w.controller
    assert "Ready" in w.narration.text()
    press(qtbot, w, RIGHT)
    assert c.cursor == 0
    assert "optimizer.zero_grad() set .grad to None" in w.narration.text()
    press(qtbot, w, RIGHT, 2)
    assert c.cursor == 2
    assert "backward() added" in w.narration.text()
    press(qtbot, w, RIGHT, modifier=SHIFT)
    assert c.cursor == c.info.ticks_per_iteration - 1
    press(qtbot, w, Qt.Key.Key_PageDown)
    assert c.cursor == c.info.ticks_per_iteration
    press(qtbot, w, LEFT, 2)
    assert c.cursor == c.info.ticks_per_iteration - 2
    assert c.history.last_tick == c.info.ticks_per_iteration, "going back keeps the history"
    press(qtbot, w, Qt.Key.Key_PageUp)
    assert c.cursor == c.info.ticks_per_iteration - 3
    press(qtbot, w, Qt.Key.Key_R)
    assert c.cursor == -1 and c.history.last_tick == -1
    assert "Ready" in w.narration.text()


def test_stepping_on_from_a_scrubbed_moment_repeats_history_exactly(open_window, qtbot) -> None:
    w = open_window("standard-loop")
    press(qtbot, w, RIGHT, modifier=SHIFT)
    press(qtbot, w, RIGHT, modifier=SHIFT)
    first = w.controller.history.record_at("yours", 7).params["weight"].copy()
    press(qtbot, w, LEFT, 5)
    press(qtbot, w, RIGHT, 5)
    assert w.controller.cursor == 7
    assert np.array_equal(w.grads.cell("yours", "weight", "value").data(Qt.ItemDataRole.UserRole + 1), first)
    press(qtbot, w, RIGHT)
    assert w.controller.history.last_tick == 8


@pytest.mark.parametrize("scenario", ["set-to-none", "gan-detach"])
def test_every_grad_inspector_column_is_in_view_at_the_default_size(open_window, qtbot, scenario) -> None:
    w = open_window(scenario)
    for _ in range(3):
        press(qtbot, w, RIGHT, modifier=SHIFT)
    settle(qtbot, w)
    table = w.grads.table
    widths = [table.columnWidth(col) for col in range(table.columnCount())]
    assert sum(widths) <= table.viewport().width(), "no sideways scrolling to reach the optimizer state"
    fm = table.fontMetrics()
    state = [table.item(row, table.columnCount() - 1).text() for row in range(table.rowCount())]
    assert any("momentum" in text or "step" in text or text.startswith("m ‖") for text in state)
    longest = max(fm.horizontalAdvance(line) for text in state for line in text.split("\n"))
    assert longest <= widths[-1], "each optimizer-state entry on one line"
    tips = [_hovered(w, table.item(row, table.columnCount() - 1)) for row in range(table.rowCount())]
    assert any("momentum_buffer: shape" in tip or "exp_avg: shape" in tip for tip in tips), "every element"


def _hovered(w, item) -> str:
    """The tooltip shown with the pointer resting on ``item`` of the inspector."""
    from PySide6.QtGui import QHelpEvent
    from PySide6.QtWidgets import QToolTip

    table = w.grads.table
    rect = table.visualItemRect(item)
    viewport = table.viewport()
    QApplication.sendEvent(
        viewport, QHelpEvent(QEvent.Type.ToolTip, rect.center(), viewport.mapToGlobal(rect.center()))
    )
    text = QToolTip.text()
    QToolTip.hideText()
    return text


def test_hovering_an_inspector_number_shows_every_element_and_a_none_says_what_none_is(
    open_window, qtbot
) -> None:
    w = open_window("set-to-none")
    press(qtbot, w, RIGHT, modifier=SHIFT)  # one full iteration: .grad holds gradients
    press(qtbot, w, RIGHT)  # and zero_grad of the next: the set_to_none run's .grad is None
    settle(qtbot, w)

    def tip(run: str, column: str) -> str:
        return _hovered(w, w.grads.cell(run, "weight", column))

    weight = w.controller.moment().op_record("none").params["weight"]
    assert (
        tip("none", "value")
        == f"shape {list(weight.shape)}: [{', '.join(f'{v:.5g}' for v in weight.ravel())}]"
    )
    assert tip("none", ".grad").startswith(".grad is None: PyTorch holds no gradient tensor")


def test_grad_cell_reads_none_after_zero_grad_with_set_to_none(open_window, qtbot) -> None:
    w = open_window("set-to-none")
    press(qtbot, w, RIGHT, modifier=SHIFT)  # one full iteration: .grad holds gradients
    assert w.grads.cell("none", "weight", ".grad").text() not in ("None", "")
    press(qtbot, w, RIGHT)  # zero_grad of the next iteration
    assert w.controller.moment().op_record("none").op == "zero_grad"
    none_cell = w.grads.cell("none", "weight", ".grad")
    zeros_cell = w.grads.cell("zeros", "weight", ".grad")
    assert none_cell.text() == "None"
    assert none_cell.data(Qt.ItemDataRole.UserRole) == "none"
    assert zeros_cell.text() == "0"
    assert zeros_cell.data(Qt.ItemDataRole.UserRole) == "array"
    assert "zero_grad() set .grad to None" in w.narration.text()


def test_offset_grad_stays_none_when_unused(open_window, qtbot) -> None:
    w = open_window("set-to-none")
    press(qtbot, w, RIGHT, 3 * w.controller.info.ticks_per_iteration // 1 - 0)
    for _ in range(3):
        press(qtbot, w, RIGHT, modifier=SHIFT)
    moment = w.controller.moment()
    rec = moment.record("none")
    assert (rec.grads["offset"] is None) == (w.grads.cell("none", "offset", ".grad").text() == "None")


def test_reference_and_skipped_run_separate_on_the_surface(open_window, qtbot) -> None:
    w = open_window("forgot-zero-grad")
    for _ in range(12):
        press(qtbot, w, RIGHT, modifier=SHIFT)
    moment = w.controller.moment()
    model = moment.info.surface
    yours = model.point(moment.record("yours").params)
    reference = model.point(moment.record("reference").params)
    assert np.hypot(yours[0] - reference[0], yours[1] - reference[1]) > 0.5
    assert w.controller.history.distance[0][-1] > 0.5
    # Pixel probes: each run's current marker is drawn in its colour where its parameters are.
    image = w.surface.plot_widget.grab().toImage()
    for (x, y), colour in ((yours, RUN_COLORS[0]), (reference, RUN_COLORS[1])):
        px, py = w.surface.scene_pixel(x, y)
        ratio = image.devicePixelRatio()
        pixel = image.pixelColor(int(px * ratio), int(py * ratio))
        assert colour_near(pixel, colour), (pixel.name(), colour)
    assert "because zero_grad was skipped" in _backward_sentence(w, qtbot)


def _backward_sentence(w, qtbot) -> str:
    # Walk to the next backward of "yours" and read the narration there.
    for _ in range(w.controller.info.ticks_per_iteration):
        press(qtbot, w, RIGHT)
        rec = w.controller.moment().op_record("yours")
        if rec is not None and rec.op == "backward":
            return w.narration.text()
    return ""


def test_toggling_the_zero_grad_line_restarts_without_drift(open_window, qtbot) -> None:
    w = open_window("forgot-zero-grad")
    for _ in range(5):
        press(qtbot, w, RIGHT, modifier=SHIFT)
    assert w.controller.history.distance[0][-1] > 0
    box = w.code.toggle("zero_grad")
    assert box is not None and not box.isChecked(), "the skipped line shows an unchecked box"
    qtbot.mouseClick(box, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "zero_grad" in w.controller.info.runs[0].spec.loop.order, timeout=30000)
    settle(qtbot, w)
    assert w.controller.cursor == 5 * w.controller.info.ticks_per_iteration - 1, (
        "replayed to the same iteration"
    )
    assert max(w.controller.history.distance[0]) == 0.0, "with zero_grad restored both runs are identical"
    assert w.code.toggle("zero_grad").isChecked()
    assert "optimizer.zero_grad()" in w.code.editor.toPlainText()
    # And off again: the line is greyed out and the runs drift apart.
    qtbot.mouseClick(w.code.toggle("zero_grad"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "zero_grad" not in w.controller.info.runs[0].spec.loop.order, timeout=30000)
    settle(qtbot, w)
    assert w.controller.history.distance[0][-1] > 0


def test_set_to_none_checkbox_turns_none_into_zeros(open_window, qtbot) -> None:
    w = open_window("standard-loop")
    box = w.code.toggle("set_to_none")
    assert box.isChecked()
    qtbot.mouseClick(box, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not w.controller.info.runs[0].spec.loop.set_to_none, timeout=30000)
    settle(qtbot, w)
    assert "set_to_none=False" in w.code.editor.toPlainText()
    press(qtbot, w, RIGHT, modifier=SHIFT)
    press(qtbot, w, RIGHT)
    assert w.grads.cell("yours", "weight", ".grad").text() == "0"


def test_scale_loss_checkbox_on_the_loss_line(open_window, qtbot) -> None:
    w = open_window("grad-accumulation")
    box = w.code.toggle("scale_loss")
    assert box is not None and box.isChecked()
    qtbot.mouseClick(box, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not w.controller.info.runs[0].spec.loop.scale_loss, timeout=30000)
    settle(qtbot, w)
    assert "/ 4" not in w.code.editor.toPlainText().split("loss = ")[1].splitlines()[0]


def test_scrubbing_the_timeline_shows_that_moment(open_window, qtbot) -> None:
    w = open_window("forgot-zero-grad")
    for _ in range(6):
        press(qtbot, w, RIGHT, modifier=SHIFT)
    last = w.controller.history.last_tick
    plot = w.timeline.plots["loss"]
    vb = plot.getViewBox()
    middle_y = sum(vb.viewRange()[1]) / 2
    scene = vb.mapViewToScene(QPointF(9.5, middle_y))  # the middle of tick 9
    pos = w.timeline.graphics.mapFromScene(scene)
    qtbot.mouseClick(w.timeline.graphics.viewport(), Qt.MouseButton.LeftButton, pos=pos)
    settle(qtbot, w)
    assert w.controller.cursor == 9
    assert w.controller.history.last_tick == last, "scrubbing forgets nothing"
    rec = w.controller.history.record_at("yours", 9)
    shown = w.grads.cell("yours", "weight", "value").data(Qt.ItemDataRole.UserRole + 1)
    assert np.array_equal(shown, rec.params["weight"])
    # Dragging scrubs too.
    start = w.timeline.graphics.mapFromScene(vb.mapViewToScene(QPointF(4.5, vb.viewRange()[1][0])))
    end = w.timeline.graphics.mapFromScene(vb.mapViewToScene(QPointF(15.5, vb.viewRange()[1][0])))
    qtbot.mousePress(w.timeline.graphics.viewport(), Qt.MouseButton.LeftButton, pos=start + QPoint(0, -5))
    for frac in (0.3, 0.6, 1.0):
        p = start + (end - start) * frac + QPoint(0, -5)
        ev = QMouseEvent(
            QEvent.Type.MouseMove, p, w.timeline.graphics.viewport().mapToGlobal(p),
            Qt.MouseButton.NoButton, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier,
        )  # fmt: skip
        QApplication.sendEvent(w.timeline.graphics.viewport(), ev)
    qtbot.mouseRelease(w.timeline.graphics.viewport(), Qt.MouseButton.LeftButton, pos=end + QPoint(0, -5))
    settle(qtbot, w)
    assert w.controller.cursor == 15


def test_play_and_pause_with_space(open_window, qtbot) -> None:
    w = open_window("standard-loop")
    w.speed.setCurrentIndex(w.speed.count() - 1)  # as fast as it goes
    qtbot.keyClick(w, Qt.Key.Key_Space)
    assert w.controller.playing
    qtbot.waitUntil(lambda: w.controller.history.last_tick >= 20, timeout=30000)
    qtbot.keyClick(w, Qt.Key.Key_Space)
    assert not w.controller.playing
    settle(qtbot, w)
    stopped_at = w.controller.history.last_tick
    qtbot.wait(200)
    assert w.controller.history.last_tick == stopped_at
    assert w.frames > 1
    assert w.act_play.iconText().endswith("Play")


def test_play_stops_at_the_end_of_the_scenario(open_window, qtbot) -> None:
    from dataclasses import replace

    from gradviz.engine import load_scenario

    w = open_window(replace(load_scenario("standard-loop"), iterations=3))
    w.controller.set_speed(0)
    w.controller.play()
    qtbot.waitUntil(lambda: not w.controller.playing, timeout=30000)
    assert w.controller.cursor == 3 * w.controller.info.ticks_per_iteration - 1


def test_dark_theme_switch_and_it_is_remembered(open_window, qtbot) -> None:
    w = open_window("forgot-zero-grad")
    before = w.surface.plot_widget.grab().toImage().pixelColor(3, 3)
    qtbot.keyClick(w, Qt.Key.Key_T, Qt.KeyboardModifier.ControlModifier)
    assert w.theme.name == "dark"
    assert QApplication.instance().palette().window().color().lightness() < 80
    w.redraw()
    after = w.surface.plot_widget.grab().toImage().pixelColor(3, 3)
    assert after.lightness() < before.lightness()
    w.close()
    from gradviz.gui.window import MainWindow

    again = MainWindow()
    qtbot.addWidget(again)
    assert again.theme.name == "dark"
    again.set_theme("light")
    again.controller.shutdown()


def test_presentation_mode_hides_chrome_and_enlarges_type(open_window, qtbot) -> None:
    w = open_window("forgot-zero-grad")
    size = w.narration.fontInfo().pointSizeF()
    qtbot.keyClick(w, Qt.Key.Key_F5)
    assert w.presenting
    assert not w.menuBar().isVisible() and not w.toolbar.isVisible() and not w.scenario_bar.isVisible()
    assert not w.timeline.isVisible(), "the timeline is not among the default presentation views"
    assert w.surface.isVisible() and w.code.isVisible()
    assert w.narration.fontInfo().pointSizeF() > size
    press(qtbot, w, Qt.Key.Key_PageDown)  # a clicker's "next"
    assert w.controller.cursor == 0
    qtbot.keyClick(w, Qt.Key.Key_Escape)
    assert not w.presenting
    assert w.menuBar().isVisible() and w.timeline.isVisible()


def test_a_diverging_run_is_drawn_and_said(open_window, qtbot) -> None:
    from gradviz.engine import load_scenario

    w = open_window(load_scenario("forgot-zero-grad").with_overrides(lr=3.0))
    w.controller.set_speed(0)
    w.controller.play()
    qtbot.waitUntil(lambda: not w.controller.playing, timeout=60000)
    settle(qtbot, w)
    moment = w.controller.moment()
    assert moment.status("yours") == "diverged"
    assert "DIVERGED" in w.status.text()
    assert w.surface.items[0].diverged_label.toPlainText().strip().endswith("diverged")
    # Scrub back before the divergence and forward again: nothing breaks on inf/NaN.
    w.controller.seek(3)
    w.redraw()
    w.controller.seek(w.controller.history.last_tick)
    w.redraw()
    w.grab()


def test_a_bad_setting_says_why_and_keeps_the_lab(open_window, qtbot) -> None:
    w = open_window("standard-loop")
    before = w.controller.info
    w.scenario_bar.accumulate.setValue(3)  # does not divide the batch size of 16
    qtbot.waitUntil(lambda: w.last_error is not None, timeout=30000)
    assert "does not divide" in w.last_error
    assert w.controller.info is before
    dialog = w.findChild(QMessageBox, "errorDialog")
    assert dialog is not None and dialog.text() == w.last_error
    dialog.accept()
    w.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is w)
    press(qtbot, w, RIGHT)
    assert w.controller.cursor == 0


def test_changing_lr_restarts_from_the_same_weights(open_window, qtbot) -> None:
    w = open_window("standard-loop")
    start = w.controller.info.initial["yours"].params["weight"].copy()
    w.scenario_bar.lr.setValue(0.01)
    qtbot.waitUntil(lambda: w.controller.info.runs[0].spec.optimizer.lr == 0.01, timeout=30000)
    settle(qtbot, w)
    assert np.array_equal(w.controller.info.initial["yours"].params["weight"], start)
    assert "lr=0.01" in w.code.editor.toPlainText()


def test_scenario_picker_opens_another_scenario(open_window, qtbot) -> None:
    w = open_window("forgot-zero-grad")
    picker = w.scenario_bar.scenario
    index = picker.findData("set-to-none")
    picker.setCurrentIndex(index)
    picker.activated.emit(index)
    qtbot.waitUntil(lambda: w.controller.info.scenario.name == "set-to-none", timeout=30000)
    settle(qtbot, w)
    # Its loss picture is the plane its lesson names, through offset, computed off the GUI thread.
    qtbot.waitUntil(
        lambda: w.surface.plane_surface is not None and w.surface.plane_surface.final, timeout=30000
    )
    assert w.surface.plane_surface.plane.labels == ("offset", "weight")
    # The distance off the plane is read from the moment drawn on it: the next frame's.
    qtbot.waitUntil(lambda: "Off the plane" in w.surface.caption.text(), timeout=5000)
    assert w.surface.stack.currentIndex() == 0


def test_a_lesson_without_a_surface_gives_its_space_to_the_other_views(open_window, qtbot) -> None:
    w = open_window("gan-detach")
    settle(qtbot, w)
    assert not w.surface.isVisible() and w.grads.isVisible() and w.code.isVisible()
    press(qtbot, w, RIGHT, modifier=SHIFT)
    assert w.grads.table.rowCount() == 3 * 2  # G and D, one row per run each
    w.open_scenario("forgot-zero-grad")
    qtbot.waitUntil(lambda: w.controller.info.scenario.name == "forgot-zero-grad", timeout=30000)
    settle(qtbot, w)
    assert w.surface.isVisible()


def test_a_real_font_is_found(qapp) -> None:
    from PySide6.QtGui import QFontDatabase, QFontInfo

    assert QFontDatabase.families()
    assert QFontInfo(QApplication.font()).family()


def test_stepping_stops_at_the_scenarios_end_and_says_so(open_window, qtbot) -> None:
    w = open_window("two-batch-accumulation")  # one iteration of six ops
    for _ in range(10):
        press(qtbot, w, RIGHT)
    settle(qtbot, w)
    assert w.controller.history.last_tick == 5 and w.controller.cursor == 5
    press(qtbot, w, RIGHT, modifier=SHIFT)
    settle(qtbot, w)
    assert w.controller.history.last_tick == 5
    assert "iteration 1 of 1" in w.position.text() and "last op" in w.position.text()
    assert "finished" in w.status.text()
    w.controller.play()
    assert not w.controller.playing


def test_the_lessons_parameters_lead_the_grad_inspector_in_view(open_window, qtbot) -> None:
    w = open_window("set-to-none")
    press(qtbot, w, RIGHT, modifier=SHIFT)
    settle(qtbot, w)
    table = w.grads.table
    assert [table.item(r, 0).text() for r in range(2)] == ["● none · offset", "■ zeros · offset"]
    # Its .grad (None or 0) sits beside the momentum buffer: the columns the lesson names lead.
    header = table.horizontalHeader()
    assert [header.logicalIndex(v) for v in range(3)] == [0, 2, 5]
    w = open_window("gan-detach")
    for _ in range(11):  # into iteration 2: loss_d.backward()
        press(qtbot, w, RIGHT)
    settle(qtbot, w)
    table = w.grads.table
    lead = [r for r in range(table.rowCount()) if table.item(r, 0).text().endswith("G.*")]
    assert len(lead) == 3 and lead == [0, 1, 2]
    bottom = table.visualRect(table.model().index(lead[-1], 0)).bottom()
    assert bottom <= table.viewport().height(), "G's rows in view without scrolling at 1280x720"
    fresh = [w.grads.cell(run, "G", "+ backward").text() for run in ("no-detach", "detach", "no-grad")]
    assert fresh[0].startswith("‖") and fresh[1:] == ["nothing (not in this graph)"] * 2


def test_zero_grad_myths_reads_out_lr_weights_and_memory_before_and_after_zero_grad(
    open_window, qtbot
) -> None:
    w = open_window("zero-grad-myths")
    for _ in range(5):  # one iteration, then the second iteration's zero_grad()
        press(qtbot, w, RIGHT)
    settle(qtbot, w)
    assert w.grads.readout.isVisible()
    text = w.grads.readout.text()
    rec = w.controller.moment().op_record("set-to-none")
    assert rec.op == "zero_grad" and all(g is None for g in rec.grads.values())
    before = w.controller.moment().previous("set-to-none")
    grad_bytes = before.snapshot.grad_flat.nbytes
    assert f"lr {rec.lr['optimizer']:g} → {rec.lr['optimizer']:g}" in text
    assert "weights unchanged" in text
    assert f".grad {grad_bytes} B → 0 B" in text  # set_to_none drops the tensors
    assert f".grad {grad_bytes} B → {grad_bytes} B" in text  # zeros keep them
    assert not open_window("forgot-zero-grad").grads.readout.isVisible()


def test_a_window_deleted_with_a_paint_pending_leaves_no_callback_behind(qapp, monkeypatch) -> None:
    """The zero timer a paint starts dies with its window: deleting a window between a paint and
    its end raises nothing in the event loop."""
    from PySide6.QtCore import QCoreApplication

    from gradviz.gui.controller import Controller
    from gradviz.gui.window import MainWindow

    window = MainWindow(Controller(threaded=False), interactive=False)
    window.resize(640, 480)
    window.show()
    window.controller.open("forgot-zero-grad")
    window.controller.next_op()
    QCoreApplication.sendEvent(window, QEvent(QEvent.Type.UpdateRequest))  # a paint begins
    window.close()
    window.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    raised: list[BaseException] = []
    monkeypatch.setattr(sys, "excepthook", lambda kind, error, trace: raised.append(error))
    for _ in range(3):
        qapp.processEvents()
    assert raised == []
