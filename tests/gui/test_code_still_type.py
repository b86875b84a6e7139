"""An export's code takes smaller type, down to a readable least, where that keeps the loop's lines
whole; the window's code keeps the type it is given."""

from __future__ import annotations

import itertools
import re

import pytest
from PySide6.QtGui import QFontMetricsF

from gradviz.engine.scenario import builtin_names
from gradviz.gui.export_frame import MIN_CODE_POINTS, FrameStyle
from gradviz.gui.export_renderer import FrameRenderer, run_inline
from gradviz.gui.layout import DEFAULT_VIEWS

NAME = re.compile(r"\w")


def renderer(scenario: str, views: tuple[str, ...] = DEFAULT_VIEWS, fit: bool = False) -> FrameRenderer:
    from gradviz.gui.display import frames_application

    frames_application(views, "light", 10.0)
    r = FrameRenderer(scenario, FrameStyle((640, 480), views, fit=fit))
    run_inline(r.open())
    return r


def visual_lines(code, row: int) -> list[str]:
    """Row ``row``'s visual lines as laid out on screen."""
    editor = code.editor
    block = editor.document().findBlockByNumber(row)
    editor.blockBoundingRect(block)  # laid out as for painting
    layout = block.layout()
    text = block.text()
    lines = [layout.lineAt(i) for i in range(layout.lineCount())]
    return [text[ln.textStart() : ln.textStart() + ln.textLength()] for ln in lines]


def split_names(code, rows) -> list[str]:
    """Every visual line break in ``rows`` that falls inside a name, as ``before|after``."""
    out = []
    for row in rows:
        for before, after in itertools.pairwise(visual_lines(code, row)):
            if before and after and NAME.match(before[-1]) and NAME.match(after[0]):
                out.append(f"{before}|{after}")
    return out


def assert_text_is_the_code(code) -> None:
    """The editor holds each shown run's source, line for line, and nothing else."""
    assert code.editor.toPlainText() == "\n".join(d.text for d in code.lines)


@pytest.mark.parametrize("scenario", builtin_names())
def test_an_export_at_640x480_never_breaks_a_name_of_the_loop_in_two(qapp, scenario: str) -> None:
    with renderer(scenario) as r:
        frame = r.frame
        frame.settle()
        code = frame.views["code"]
        assert split_names(code, code.loop_rows()) == []
        points = code.editor.font().pointSizeF()
        assert MIN_CODE_POINTS <= points <= frame.frame_style.point_size
        assert code.editor.fontInfo().pointSizeF() >= MIN_CODE_POINTS - 0.5  # as drawn, in whole pixels
        assert_text_is_the_code(code)


def test_a_smaller_type_keeps_every_line_of_the_loop_whole_where_one_does(qapp) -> None:
    # What `gradviz export forgot-zero-grad --size 640x480` draws: the surface and the code.
    with renderer("forgot-zero-grad", fit=True) as r:
        run_inline(r.prepare(list(range(6))))
        code = r.frame.views["code"]
        assert code.isVisibleTo(r.frame) and not r.frame.problems()
        assert [row for row in code.loop_rows() if len(visual_lines(code, row)) > 1] == []
        points = code.editor.font().pointSizeF()
        assert MIN_CODE_POINTS <= points < r.frame.frame_style.point_size
        # The largest such type: half a point more and some line of the loop wraps.
        font = code.editor.font()
        font.setPointSizeF(points + 0.5)
        wider = QFontMetricsF(font)
        room = code.editor.viewport().width() + code.gutter_width() - code.gutter_width(font)
        margin = 2 * code.editor.document().documentMargin()
        texts = [code.lines[row].text for row in code.loop_rows()]
        assert max(wider.horizontalAdvance(t) for t in texts) + margin > room
        assert_text_is_the_code(code)


def test_the_window_s_code_keeps_its_type_however_narrow(qapp) -> None:
    from gradviz.engine import load_scenario
    from gradviz.gui.window import MainWindow, wait_until_idle

    w = MainWindow(interactive=False)
    w.resize(900, 600)
    w.show()
    w.controller.open(load_scenario("forgot-zero-grad"))
    wait_until_idle(w)
    asked = w.code.editor.font().pointSizeF()
    w.code.resize(260, w.code.height())
    assert w.code.editor.font().pointSizeF() == asked
    w.controller.shutdown()
    w.close()
