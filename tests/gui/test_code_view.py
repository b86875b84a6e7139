"""The code panel with several runs: each run's own lines on screen at the op that runs them, each
marked with the run's shape, the optimizer's setup in view, and the line that ran told apart from
the line that runs next by shape as well as colour."""

from __future__ import annotations

import pytest
from gui_helpers import colour_near
from PySide6.QtCore import QPoint, QRect

from gradviz.engine import Lab, builtin_names, load_builtin
from gradviz.gui.theme import DARK, LIGHT, run_color
from gradviz.gui.views.code import display_lines, merged_lines
from gradviz.gui.window_history import describe_lab

DIFFERING = [
    name for name in builtin_names() if len({r.program.source for r in Lab(load_builtin(name)).runs}) > 1
]


def test_the_built_ins_whose_runs_differ_are_all_checked() -> None:
    assert {"backward-twice", "gan-detach", "virtual-batch", "rnn-tbptt", "set-to-none"} <= set(DIFFERING)


@pytest.mark.parametrize("name", DIFFERING)
def test_each_run_s_lines_read_top_to_bottom_are_its_own_source(name: str) -> None:
    info = describe_lab(Lab(load_builtin(name)))
    indices = tuple(range(len(info.runs)))
    rows = merged_lines(info.runs, indices)
    for k, run in enumerate(info.runs):
        mine = [(d.text, d.number_in(k)) for d in rows if k in d.runs]
        assert mine == [(d.text, d.number) for d in display_lines(run, k)], run.name
    shared = [d for d in rows if len(d.runs) == len(indices)]
    assert shared and len(rows) < sum(len(display_lines(r)) for r in info.runs), "shared lines shown once"


def _window(name: str, size: tuple[int, int], qapp, *, theme: str = "light", presentation: bool = False):
    from gradviz.gui.controller import Controller
    from gradviz.gui.window import MainWindow

    controller = Controller(threaded=False)
    window = MainWindow(controller, interactive=False)
    window.resize(*size)
    if presentation:
        window.set_presentation(True, full_screen=False)
    if theme != "light":
        window.set_theme(theme)
    window.show()
    controller.open(name)
    window.resize(*size)
    qapp.processEvents()
    return window


def _close(window) -> None:
    window.set_presentation(False, full_screen=False)  # the app's type is shared: leave it normal
    window.set_theme("light")
    window.controller.shutdown()
    window.close()


def _whole_in_view(code, row: int) -> bool:
    rect = code._row_rect(row)
    viewport = code.editor.viewport().rect()
    return rect is not None and rect.top() >= 0 and rect.bottom() <= viewport.bottom() + 1


def _step(window, qapp) -> None:
    window.controller.next_op()
    qapp.processEvents()
    window.redraw()
    qapp.processEvents()


@pytest.mark.parametrize("name", DIFFERING)
def test_every_run_s_line_is_on_screen_at_the_op_that_runs_it(name: str, qapp) -> None:
    window = _window(name, (1280, 720), qapp)
    try:
        code, info = window.code, window.controller.info
        assert code.run_name is None and len(code.shown) == len(info.runs), "every run is shown"
        for _ in range(info.ticks_per_iteration + 1):
            _step(window, qapp)
            moment = window.controller.moment()
            for k, run in enumerate(info.runs):
                rec = moment.op_record(run.name)
                if rec is None:
                    continue
                slot = next(s for s in run.ops if s.line == rec.line)
                source = run.source.splitlines()
                for number in range(slot.first, slot.last + 1):
                    row = code.row_of(k, number)
                    assert row >= 0 and code.lines[row].text == source[number - 1], (run.name, number)
                    assert _whole_in_view(code, row), (name, moment.tick, run.name, source[number - 1])
                    assert row in code._ran_by_run()[k]
            # The lines that run next too, wherever they fit in the panel with those that ran.
            marked = code.marked_rows()
            if code._fits(marked[0], marked[-1]):
                assert all(_whole_in_view(code, row) for row in marked), (name, moment.tick)
    finally:
        _close(window)


@pytest.mark.parametrize("name", ["backward-twice", "net-vs-optimizer-zero-grad", "set-to-none"])
def test_the_optimizer_s_setup_stays_in_view_as_the_loop_runs(name: str, qapp) -> None:
    window = _window(name, (1280, 720), qapp)
    try:
        code = window.code
        setup = code.setup_row()
        assert setup is not None and "lr=" in code.lines[setup].text
        for _ in range(window.controller.info.ticks_per_iteration * 2):
            _step(window, qapp)
            assert _whole_in_view(code, setup), (name, window.controller.cursor)
        # Wrapped, not cut: nothing lies past the panel's right edge.
        assert code.editor.document().size().width() <= code.editor.viewport().width()
    finally:
        _close(window)


@pytest.mark.parametrize("size", [(1280, 720), (1920, 1080)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", DIFFERING)
def test_presentation_shows_the_setup_and_every_run_s_loop(name: str, size, qapp) -> None:
    window = _window(name, size, qapp, presentation=True)
    try:
        for _ in range(window.controller.info.ticks_per_iteration + 2):
            _step(window, qapp)
        window.fit_presentation()
        qapp.processEvents()
        code = window.code
        for row in [code.setup_row(), *code.loop_rows()]:
            assert row is not None and _whole_in_view(code, row), (name, code.lines[row].text)
    finally:
        _close(window)


def _pixels(widget, rect: QRect) -> list:
    image = widget.grab(rect).toImage()
    return [image.pixelColor(x, y) for y in range(image.height()) for x in range(image.width())]


@pytest.mark.parametrize("theme", [LIGHT, DARK], ids=lambda t: t.name)
def test_the_line_that_ran_and_the_line_next_differ_in_shape_not_only_hue(theme, qapp) -> None:
    window = _window("backward-twice", (1280, 720), qapp, theme=theme.name)
    try:
        for _ in range(3):  # zero_grad, forward, the first backward: step runs after the second
            _step(window, qapp)
        code = window.code
        ran, nexts = code._ran_by_run(), code._next_by_run()
        ran_row, next_row = min(ran[0]), nexts[0]
        assert ran_row != next_row
        viewport = code.editor.viewport()
        width = viewport.width()
        ran_rect, next_rect = code._row_rect(ran_row), code._row_rect(next_row)
        # The line that runs next is framed (its top edge drawn in the accent colour); the line
        # that ran is filled, with no frame.
        frame = _pixels(viewport, QRect(0, next_rect.top(), width, 1))
        assert sum(colour_near(p, theme.accent, 30) for p in frame) > width // 3
        edge = _pixels(viewport, QRect(0, ran_rect.top() + 1, width, 1))
        assert not any(colour_near(p, theme.accent, 30) for p in edge)
        assert sum(colour_near(p, theme.code_ran, 8) for p in edge) > width // 2
        # In the gutter the run's shape is filled where it ran and hollow where it runs next.
        gutter = code.gutter
        lane = QRect(4, 0, code._slot_width(), 0)

        def centre(row: int):
            rect = code._row_rect(row)
            line = code.editor.fontMetrics().lineSpacing()
            point = QPoint(lane.center().x(), rect.top() + line // 2)
            return gutter.grab(QRect(point, point)).toImage().pixelColor(0, 0)

        assert colour_near(centre(ran_row), run_color(0), 40), "filled where it ran"
        hollow = centre(next_row)
        assert not colour_near(hollow, run_color(0), 60), "hollow where it runs next"
    finally:
        _close(window)


def test_a_run_shown_alone_shows_its_own_source_and_back(qapp) -> None:
    window = _window("gan-detach", (1280, 720), qapp)
    try:
        code, info = window.code, window.controller.info
        both = code.editor.toPlainText()
        assert "fake.detach()" in both and "with torch.no_grad():" in both
        code.select_run("detach")
        assert code.run_name == "detach"
        assert code.editor.toPlainText() == info.run("detach").source.rstrip("\n")
        code.select_run(None)
        assert code.run_name is None and code.editor.toPlainText() == both
    finally:
        _close(window)
