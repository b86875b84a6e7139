"""Every built-in's lesson in presentation mode, as the room sees it at 1280x720 and 1920x1080.

At each stop the question and every one of its choices are wholly in view, in type
that reads from the back of a hall; after the reveal every answer with its real
numbers comes wholly into view (the clicker's next brings the ones below the
panel's edge up before it moves on); the lesson panel stays inside the window
and beside the views, so the code's current line and the inspector's leading
rows stay in sight, uncovered.
"""

from __future__ import annotations

import math

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtGui import QFontInfo
from PySide6.QtWidgets import QApplication, QWidget

from gradviz.engine import builtin_names
from gradviz.gui.controller import Controller
from gradviz.gui.window import MainWindow

SIZES = [(1280, 720), (1920, 1080)]


def _settle() -> None:
    for _ in range(4):
        QApplication.processEvents()


def _rect_in(widget: QWidget, ancestor: QWidget) -> QRect:
    return QRect(widget.mapTo(ancestor, QPoint(0, 0)), widget.size())


def _whole(widget: QWidget, window: MainWindow) -> bool:
    """``widget`` shown, its text not cut inside it, and all of it inside the panel's scrolled view."""
    area = window.lesson_panel.questions_area
    viewport = area.viewport()
    if not widget.isVisible() or widget.height() < widget.heightForWidth(widget.width()):
        return False
    return viewport.rect().contains(_rect_in(widget, viewport))


def _check_views(window: MainWindow, size: tuple[int, int], where: str) -> None:
    assert (window.width(), window.height()) == size, f"{where}: the window grew past the screen"
    panel = _rect_in(window.lesson_panel, window)
    assert window.rect().contains(panel), f"{where}: the lesson panel runs out of the window"
    for key, view in window.panels.items():
        if view.isVisible():
            assert not panel.intersects(_rect_in(view, window)), f"{where}: the lesson covers {key}"
    code = window.code
    _, next_line = code.line_state()
    rows = [r for r, d in enumerate(code.lines) if next_line is not None and d.number == next_line]
    seen = code.editor.viewport().rect()
    for row in rows:
        rect = code._row_rect(row)
        assert rect is not None and seen.contains(rect), f"{where}: line {next_line} out of the code's view"
    grads = window.grads
    table = grads.table
    lead = [i for i, r in enumerate(grads.shown_rows) if r.lead][:6]
    for i in lead:
        rect = table.visualRect(table.model().index(i, 0))
        assert rect.bottom() <= table.viewport().height(), f"{where}: row {grads.shown_rows[i]} out of view"


def _cut_rows(window: MainWindow) -> list[object]:
    """The inspector's rows shown cut in half at its bottom edge (none when scrolled by the reader)."""
    grads = window.grads
    table = grads.table
    if table.verticalScrollBar().value() != 0:
        return []
    seen = table.viewport().height()
    rects = [table.visualRect(table.model().index(i, 0)) for i in range(len(grads.shown_rows))]
    rows = zip(grads.shown_rows, rects, strict=True)
    return [row for row, rect in rows if rect.top() < seen < rect.bottom()]


def _no_cut_rows(qtbot, window: MainWindow, where: str) -> None:
    """Once paused, the column is shared so that no row of the inspector shows cut in half."""
    try:
        qtbot.waitUntil(lambda: not _cut_rows(window), timeout=5000)
    except AssertionError:
        raise AssertionError(f"{where}: the inspector shows {_cut_rows(window)[0]} cut in half") from None


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", builtin_names())
def test_every_question_and_reveal_reads_whole_in_presentation_mode(name, size, qtbot) -> None:
    controller = Controller(threaded=False)
    window = MainWindow(controller, interactive=False)
    qtbot.addWidget(window)
    need = math.ceil(0.025 * size[1])
    try:
        window.resize(*size)
        window.show()
        window.set_presentation(True, full_screen=False)
        controller.open(name)
        controller.set_speed(0)
        window.resize(*size)
        assert window.set_lesson(True)
        panel = window.lesson_panel
        for i, placed in enumerate(controller.info.stops):
            target = placed.tick - 1 if placed.stop.questions else placed.tick
            qtbot.waitUntil(lambda t=target: controller.cursor == t and not controller.playing, timeout=20000)
            _settle()
            where = f"{name} {size[0]}x{size[1]} stop {i + 1}"
            _no_cut_rows(qtbot, window, where + " question")
            _check_views(window, size, where + " question")
            for q, question in zip(panel.questions, placed.stop.questions, strict=True):
                ask = q.layout().itemAt(0).widget()
                assert question.ask in ask.text()
                assert QFontInfo(ask.font()).pixelSize() >= need, where
                for widget in (ask, *q.choices, *([q.entry] if q.entry else [])):
                    text = widget.text() if hasattr(widget, "text") else ""
                    assert _whole(widget, window), f"{where}: {text!r} is not all in view"
                if q.entry is not None:
                    q.entry.setText("0")
                else:
                    assert window.lesson.choose(0)  # the next question comes into view
                _settle()
            if not placed.stop.questions:
                window.lesson.next()
                continue
            window.lesson.next()  # the reveal
            qtbot.waitUntil(lambda: all(q.result.isVisible() for q in panel.questions), timeout=20000)
            _settle()
            _no_cut_rows(qtbot, window, where + " reveal")
            _check_views(window, size, where + " reveal")
            read: set[int] = set()
            while True:
                read |= {j for j, q in enumerate(panel.questions) if _whole(q.result, window)}
                if not panel.page():
                    break
                _settle()
            assert read == set(range(len(panel.questions))), f"{where}: an answer never came wholly into view"
            for q in panel.questions:
                assert "In the real run" in q.result.text(), f"{where}: no real numbers shown"
            window.lesson.next()
    finally:
        window.set_presentation(False, full_screen=False)  # the app's type is shared: leave it normal
        controller.shutdown()


def test_a_reveal_leaves_the_views_their_room(qtbot) -> None:
    """At 1280x720 the answer to forgot-zero-grad's first question reads whole beside a loop that
    does not wrap, and the panel never narrows again in the lesson: the views do not jump back."""
    controller = Controller(threaded=False)
    window = MainWindow(controller, interactive=False)
    qtbot.addWidget(window)
    try:
        window.resize(1280, 720)
        window.show()
        window.set_presentation(True, full_screen=False)
        controller.open("forgot-zero-grad")
        controller.set_speed(0)
        window.resize(1280, 720)
        assert window.set_lesson(True)
        panel, doc = window.lesson_panel, window.code.editor.document()
        widths = []
        for placed in controller.info.stops[:2]:
            qtbot.waitUntil(
                lambda p=placed: controller.cursor == p.tick - 1 and not controller.playing, timeout=20000
            )
            _settle()
            widths.append(panel.width())
            for _ in panel.questions:
                assert window.lesson.choose(0)
            window.lesson.next()
            qtbot.waitUntil(lambda: all(q.result.isVisible() for q in panel.questions), timeout=20000)
            _settle()
            widths.append(panel.width())
            wrapped = [
                window.code.lines[r].text
                for r in range(len(window.code.lines))
                if doc.findBlockByNumber(r).layout().lineCount() > 1
            ]
            assert not wrapped, f"beside the answer the code wraps {wrapped[0]!r}"
            stop = window.lesson.index
            while window.lesson.index == stop:  # the answers paged through, then the next stop
                window.lesson.next()
        assert widths == sorted(widths), f"the lesson panel narrowed again: {widths}"
    finally:
        window.set_presentation(False, full_screen=False)
        controller.shutdown()
