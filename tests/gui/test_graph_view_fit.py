"""The autograd graph fits whole and readably, as a lecturer shows it: in the window's graph column at
1280x720 and in presentation mode at 1280x720 and 1920x1080, for every built-in's every run, after
each op of its first iteration and the next one's forward; its run picker shows the whole run name.
"""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QApplication, QStyle, QStyleOptionComboBox

from gradviz.engine import builtin_names
from gradviz.gui.theme import BASE_POINT_SIZE, presentation_points
from gradviz.gui.views.graph import MIN_POINTS, SMALL_TYPE

# In presentation mode the graph's details are drawn at no less than 85% of presentation's own detail
# type (presentation_points(height) * SMALL_TYPE, which grows with the screen: the body type is 2.5% of
# its height): 9.75 pt at 720 lines, above the window's 8.5, and 14.6 pt at 1080, twice the window's
# 7 pt floor. A hall reads the graph in the type it reads the rest of the slide in, give or take.
PRESENTED_SHARE = 0.85


def open_window(qtbot, name: str, size: tuple[int, int], presenting: bool):
    from gradviz.gui.controller import Controller
    from gradviz.gui.window import MainWindow

    w = MainWindow(Controller(threaded=False), interactive=False)
    qtbot.addWidget(w)
    w.resize(*size)
    w.show_panel("graph", True)
    if presenting:
        w._presentation_panel("graph", True)
    w.show()
    if presenting:
        w.set_presentation(True, full_screen=False)
    w.controller.open(name)
    QApplication.processEvents()
    if presenting:
        w.resize(*size)
        QApplication.processEvents()
        w.fit_presentation()
    return w


def moments(w):
    """Each op of the first iteration and the next one's zero_grad and forward, then each run drawn."""
    info = w.controller.info
    for op in range(info.ticks_per_iteration + 2):
        if not w.controller.next_op():
            return  # a one-iteration scenario has no next one
        w.redraw()
        w.graph.skip_animation()
        QApplication.processEvents()
        for run in info.runs:
            w.graph.set_run(run.name)
            w.graph.skip_animation()
            QApplication.processEvents()
            yield op, run.name


def whole_name_shown(view) -> bool:
    """Whether the run picker (where shown) has room for its whole current text."""
    combo = view.runs
    if not combo.isVisible():
        return True
    option = QStyleOptionComboBox()
    combo.initStyleOption(option)
    field = combo.style().subControlRect(
        QStyle.ComplexControl.CC_ComboBox, option, QStyle.SubControl.SC_ComboBoxEditField, combo
    )
    return combo.fontMetrics().horizontalAdvance(combo.currentText()) <= field.width()


def drawn_type(view) -> float:
    return view.points * SMALL_TYPE * view.canvas.transform().m11()


def check(w, least: float) -> list[str]:
    """Every moment's failures: scrolled, too small, the picker cut."""
    failed = []
    for op, run in moments(w):
        view = w.graph
        if view.shown is None or view.shown.graph is None or not view.shown.graph.nodes:
            continue
        where = f"op {op + 1}, run {run}"
        scrolls = view.canvas.horizontalScrollBar().maximum(), view.canvas.verticalScrollBar().maximum()
        if not view.fitted or max(scrolls) > 0:
            failed.append(f"{where}: scrolls {scrolls} ({view.note.text()})")
        elif drawn_type(view) < least - 1e-6:
            failed.append(f"{where}: type {drawn_type(view):.2f} pt < {least:.2f}")
        if not whole_name_shown(view):
            failed.append(f"{where}: picker shows {view.runs.currentText()!r} cut")
    return failed


@pytest.mark.parametrize("name", builtin_names())
def test_every_run_s_graph_fits_the_window_s_graph_column_readably(name, qtbot):
    w = open_window(qtbot, name, (1280, 720), presenting=False)
    try:
        assert w.graph.isVisible()
        assert check(w, MIN_POINTS) == []
    finally:
        w.controller.shutdown()


@pytest.mark.parametrize("size", [(1280, 720), (1920, 1080)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", builtin_names())
def test_every_run_s_graph_fits_presentation_mode_in_larger_type(name, size, qtbot):
    w = open_window(qtbot, name, size, presenting=True)
    try:
        if not w.graph.isVisible():
            # A lesson's panel leaves the graph no readable room beside it: it gives way whole.
            assert w.lesson.active
            return
        least = presentation_points(size[1]) * SMALL_TYPE * PRESENTED_SHARE
        assert least > BASE_POINT_SIZE * SMALL_TYPE  # larger than the window's own detail type
        assert check(w, least) == []
    finally:
        w.set_presentation(False, full_screen=False)  # the app's type is shared: leave it normal
        w.controller.shutdown()
