"""Presentation mode, as a lecturer projects it: at 1280x720 and 1920x1080, for every built-in.

The loop's every line is in the code panel's view, the lesson's rows are in the
.grad inspector's view, no column is cut, and body text is at least 2.5% of the
screen's height. Leaving presentation mode gives every view its normal sizes back.
"""

from __future__ import annotations

import math

import pytest
from PySide6.QtGui import QFontInfo
from PySide6.QtWidgets import QApplication

from gradviz.engine import builtin_names
from gradviz.gui.views.grads import inspector_rows

SIZES = [(1280, 720), (1920, 1080)]
# The moment shown: a few iterations in, past a step, with gradients in every .grad.
OPS = 11


def presenting(name: str, size: tuple[int, int], qapp):
    from gradviz.gui.controller import Controller
    from gradviz.gui.window import MainWindow

    controller = Controller(threaded=False)
    window = MainWindow(controller, interactive=False)
    window.resize(*size)
    window.show()
    window.set_presentation(True, full_screen=False)
    controller.open(name)
    for _ in range(OPS):
        controller.next_op()
    window.resize(*size)
    for _ in range(3):
        qapp.processEvents()
    window.fit_presentation()
    window.redraw()
    qapp.processEvents()
    return window


@pytest.fixture
def qapp_offscreen(qapp):
    return qapp


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", builtin_names())
def test_presentation_shows_the_loop_the_lessons_rows_and_every_column(name, size, qapp_offscreen) -> None:
    window = presenting(name, size, qapp_offscreen)
    try:
        code, grads = window.code, window.grads
        # Every line of the loop inside the code panel's viewport, none scrolled sideways.
        viewport = code.editor.viewport().rect()
        for row in code.loop_rows():
            rect = code._row_rect(row)
            assert rect is not None and rect.top() >= 0 and rect.bottom() <= viewport.bottom() + 1, (
                name,
                code.lines[row].text,
            )
        assert code.editor.horizontalScrollBar().maximum() == 0, "no line runs past the panel"
        # The lesson's rows (or, without any, the first run's) inside the inspector's viewport.
        table = grads.table
        rows = inspector_rows(window.controller.info)
        lead = [i for i, r in enumerate(rows) if r.lead] or [
            i for i, r in enumerate(rows) if r.run == rows[0].run
        ]
        for i in lead:
            rect = table.visualRect(table.model().index(i, 0))
            assert rect.bottom() <= table.viewport().height(), (name, rows[i])
        # No column cut: every column fits the table's width.
        widths = sum(table.columnWidth(c) for c in range(table.columnCount()))
        assert widths <= table.viewport().width() + 1 and table.horizontalScrollBar().maximum() == 0
        # Type that reads from the back of a hall.
        need = math.ceil(0.025 * size[1])
        for widget in (window.narration, table, code.editor):
            assert QFontInfo(widget.font()).pixelSize() >= need, (widget.objectName(), need)
    finally:
        window.set_presentation(False, full_screen=False)  # the app's type is shared: leave it normal
        window.controller.shutdown()
        window.close()


def test_leaving_presentation_gives_every_view_its_normal_sizes_back(qapp) -> None:
    from gradviz.gui.controller import Controller
    from gradviz.gui.window import MainWindow

    controller = Controller(threaded=False)
    window = MainWindow(controller, interactive=False)
    try:
        window.resize(1280, 720)
        window.show()
        controller.open("set-to-none")
        for _ in range(OPS):
            controller.next_op()
        for _ in range(3):
            qapp.processEvents()
        window.redraw()
        before = {
            "splitters": [s.sizes() for s in window._splitters() if s.isVisible()],
            "table": QFontInfo(window.grads.table.font()).pixelSize(),
            "code": QFontInfo(window.code.editor.font()).pixelSize(),
            "key": window.surface.key.sizeHint(),
            "timeline legend": window.timeline.legend.minimumHeight(),
        }
        window.set_presentation(True, full_screen=False)
        qapp.processEvents()
        window.redraw()
        assert QFontInfo(window.grads.table.font()).pixelSize() > before["table"]
        window.set_presentation(False, full_screen=False)
        qapp.processEvents()
        window.redraw()
        QApplication.processEvents()
        after = [s.sizes() for s in window._splitters() if s.isVisible()]  # a hidden column has no share
        for old, new in zip(before["splitters"], after, strict=True):
            # The same share of each column and row (the window's own chrome may differ by a pixel).
            assert [round(v / max(sum(old), 1), 2) for v in old] == [
                round(v / max(sum(new), 1), 2) for v in new
            ], (old, new)
        assert QFontInfo(window.grads.table.font()).pixelSize() == before["table"]
        assert QFontInfo(window.code.editor.font()).pixelSize() == before["code"]
        assert window.surface.key.sizeHint() == before["key"]
        assert window.timeline.legend.minimumHeight() == before["timeline legend"]
    finally:
        controller.shutdown()
        window.close()


@pytest.mark.parametrize("name", ["standard-loop", "forgot-zero-grad", "backward-twice"])
def test_at_1080p_the_code_shows_every_line_and_the_inspector_is_no_taller_than_its_rows(name, qapp) -> None:
    window = presenting(name, (1920, 1080), qapp)
    try:
        code, table = window.code, window.grads.table
        viewport = code.editor.viewport().rect()
        for row in range(len(code.lines)):
            rect = code._row_rect(row)
            assert rect is not None and rect.top() >= 0 and rect.bottom() <= viewport.bottom() + 1, (
                name,
                code.lines[row].text,
            )
        assert code.editor.verticalScrollBar().maximum() == 0, "the whole program shows, unscrolled"
        rows = sum(table.rowHeight(r) for r in range(table.rowCount()))
        assert table.viewport().height() <= rows + 2, "no empty band under the inspector's rows"
        assert table.verticalScrollBar().maximum() == 0, "every row in view"
    finally:
        window.set_presentation(False, full_screen=False)
        window.controller.shutdown()
        window.close()


@pytest.mark.parametrize("name", ["standard-loop", "forgot-zero-grad"])
def test_at_720p_a_short_program_and_every_row_of_two_runs_show_whole_together(name, qapp) -> None:
    # The column holds the program's every line and the inspector's four rows at once: neither
    # may be cut for room the other leaves empty.
    window = presenting(name, (1280, 720), qapp)
    try:
        code, table = window.code, window.grads.table
        viewport = code.editor.viewport().rect()
        for row in range(len(code.lines)):
            rect = code._row_rect(row)
            assert rect is not None and rect.top() >= 0 and rect.bottom() <= viewport.bottom() + 1, (
                name,
                code.lines[row].text,
            )
        assert table.verticalScrollBar().maximum() == 0, "every row in view"
        last = table.visualRect(table.model().index(table.rowCount() - 1, 0))
        assert last.bottom() <= table.viewport().height(), "the last row whole"
    finally:
        window.set_presentation(False, full_screen=False)
        window.controller.shutdown()
        window.close()
