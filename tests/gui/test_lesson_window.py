"""A lesson in the window: the clicker's keys move stop to stop, a question waits before the
stop's op, and the reveal shows what the real run did."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from gradviz.gui.controller import Controller
from gradviz.gui.window import MainWindow


@pytest.fixture
def lesson_window(qtbot):
    made = []

    def make(name: str) -> MainWindow:
        controller = Controller(threaded=False)
        window = MainWindow(controller, interactive=False)
        qtbot.addWidget(window)
        window.resize(1280, 720)
        window.show()
        controller.open(name)
        controller.set_speed(0)  # the ops between stops as fast as they go
        made.append(window)
        return window

    yield make
    for window in made:
        window.controller.shutdown()


def key(qtbot, window, k) -> None:
    qtbot.keyClick(window, k)


def test_a_number_question_waits_before_its_op_and_the_reveal_shows_pytorchs_numbers(lesson_window, qtbot):
    w = lesson_window("two-batch-accumulation")
    stops = w.controller.info.stops
    assert w.set_lesson(True) and w.lesson_panel.isVisible()
    qtbot.waitUntil(lambda: w.controller.cursor == stops[0].tick - 1, timeout=10000)
    assert not w.controller.playing, "the question waits before the stop's op"
    w.lesson_panel.current().entry.setText("-16")
    key(qtbot, w, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: w.lesson_panel.questions[0].result.isVisible(), timeout=10000)
    assert w.controller.cursor == stops[0].tick
    result = w.lesson_panel.questions[0].result.text()
    assert "Correct" in result and "-16" in result
    key(qtbot, w, Qt.Key.Key_PageDown)  # the next stop: the second backward
    qtbot.waitUntil(lambda: w.controller.cursor == stops[1].tick - 1, timeout=10000)
    w.lesson_panel.current().entry.setText("-4")
    key(qtbot, w, Qt.Key.Key_PageDown)  # the clicker's next key reveals first
    qtbot.waitUntil(lambda: w.lesson_panel.questions[0].result.isVisible(), timeout=10000)
    result = w.lesson_panel.questions[0].result.text()
    assert "Not quite" in result and "-20" in result and "-16" in result
    assert w.lesson.score == (1, 2)
    key(qtbot, w, Qt.Key.Key_PageUp)  # back to the first stop, asked again
    qtbot.waitUntil(lambda: w.controller.cursor == stops[0].tick - 1, timeout=10000)
    assert w.lesson.asking and not w.lesson_panel.questions[0].result.isVisible()
    # The history recorded past this moment stays hidden while the room predicts it.
    assert w.controller.history.last_tick > w.controller.cursor and stops[0].stop.hide_future
    w.redraw()
    xs, _ = w.timeline.curves["loss"][0].getData()
    assert xs is None or len(xs) == 0 or max(xs) <= w.controller.cursor + 1


def test_choices_are_picked_with_keys_and_the_right_one_is_marked(lesson_window, qtbot):
    w = lesson_window("forgot-zero-grad")
    stops = w.controller.info.stops
    assert w.set_lesson(True)
    qtbot.waitUntil(lambda: w.controller.cursor == stops[0].tick - 1, timeout=10000)
    question = w.lesson_panel.questions[0]
    key(qtbot, w, Qt.Key.Key_1)
    assert question.answer() == 0
    key(qtbot, w, Qt.Key.Key_C)
    assert question.answer() == 2
    key(qtbot, w, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: question.result.isVisible(), timeout=10000)
    marked = [c.text() for c in question.choices if c.text().endswith("✓")]
    assert len(marked) == 1
    assert ("Correct" in question.result.text()) == marked[0].startswith("c)")
    w.set_lesson(False)
    assert not w.lesson_panel.isVisible()
    key(qtbot, w, Qt.Key.Key_Right)  # outside a lesson the keys step ops again
    assert w.controller.cursor > stops[0].tick
