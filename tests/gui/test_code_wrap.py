"""A code line that wraps breaks between tokens, never inside a name; an export's code takes smaller
type, down to a readable least, where that keeps the loop's lines whole; the text stays the code run."""

from __future__ import annotations

import itertools
import re

import pytest
from PySide6.QtGui import QFontDatabase, QFontMetricsF

from gradviz.engine.scenario import builtin_names
from gradviz.gui.export_frame import MIN_CODE_POINTS, FrameStyle
from gradviz.gui.export_renderer import FrameRenderer, run_inline
from gradviz.gui.layout import DEFAULT_VIEWS
from gradviz.gui.views.code_wrap import is_break, wrap_line

NAME = re.compile(r"\w")


def renderer(scenario: str, views: tuple[str, ...] = DEFAULT_VIEWS, fit: bool = False) -> FrameRenderer:
    from gradviz.gui.display import frames_application

    frames_application(views, "light", 10.0)
    r = FrameRenderer(scenario, FrameStyle((640, 480), views, fit=fit))
    run_inline(r.open())
    return r


def visual_lines(code, row: int) -> list[tuple[int, str]]:
    """Row ``row``'s visual lines as laid out on screen: (x, text) of each."""
    editor = code.editor
    block = editor.document().findBlockByNumber(row)
    editor.blockBoundingRect(block)  # laid out as for painting
    layout = block.layout()
    text = block.text()
    lines = [layout.lineAt(i) for i in range(layout.lineCount())]
    return [(round(ln.x()), text[ln.textStart() : ln.textStart() + ln.textLength()]) for ln in lines]


def split_names(code, rows) -> list[str]:
    """Every visual line break in ``rows`` that falls inside a name, as ``before|after``."""
    out = []
    for row in rows:
        lines = visual_lines(code, row)
        for (_, before), (_, after) in itertools.pairwise(lines):
            if before and after and NAME.match(before[-1]) and NAME.match(after[0]):
                out.append(f"{before}|{after}")
    return out


def assert_text_is_the_code(code) -> None:
    """The editor holds each shown run's source, line for line, and nothing else."""
    editor = code.editor
    assert editor.toPlainText() == "\n".join(d.text for d in code.lines)
    blocks = [editor.document().findBlockByNumber(r).text() for r in range(len(code.lines))]
    for k in code.shown:
        mine = [text for text, d in zip(blocks, code.lines, strict=True) if d.number_in(k) is not None]
        assert mine == code.info.runs[k].source.splitlines()


@pytest.mark.parametrize("scenario", builtin_names())
def test_an_export_at_640x480_never_breaks_a_name_of_the_loop_in_two(qapp, scenario: str) -> None:
    with renderer(scenario) as r:
        frame = r.frame
        frame.settle()
        code = frame.views["code"]
        assert split_names(code, code.loop_rows()) == []
        # Nor anywhere above the loop (a name longer than a whole line is all that may be cut).
        assert split_names(code, range(code.loop_rows().start)) == []
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
        room = code.editor.viewport().width() + code.gutter_width() - code.gutter_width(wider)
        margin = 2 * code.editor.document().documentMargin()
        texts = [code.lines[row].text for row in code.loop_rows()]
        assert max(wider.horizontalAdvance(t) for t in texts) + margin > room
        assert_text_is_the_code(code)


def test_a_wrapped_line_goes_on_indented_under_its_own_text(qapp) -> None:
    with renderer("rnn-tbptt", ("code", "timeline")) as r:
        frame = r.frame
        frame.settle()
        code = frame.views["code"]
        wrapped = [row for row in code.loop_rows() if len(visual_lines(code, row)) > 1]
        assert wrapped, "a loop line that wraps at 640x480"
        space = QFontMetricsF(code.editor.font()).horizontalAdvance(" ")
        for row in wrapped:
            (x0, first), *rest = visual_lines(code, row)
            lead = len(first) - len(first.lstrip(" "))
            for x, text in rest:
                # Under the line's own text, or as far in as keeps its longest token whole.
                room = code.editor.viewport().width() - x0
                assert x >= x0 + min(lead * space, room - len(text) * space) - 1, (first, text)
                assert x > x0 and not text.startswith(" "), (first, text)


def test_the_window_s_code_wraps_between_tokens_too(qapp) -> None:
    from gradviz.gui.views.code import CodeView

    view = CodeView()
    text = "    optimizer = torch.optim.SGD([*rnn.parameters(), *head.parameters()], lr=0.05)"
    view.editor.setPlainText(text)
    view.resize(260, 300)
    view.show()
    qapp.processEvents()
    doc = view.editor.document()
    block = doc.firstBlock()
    view.editor.blockBoundingRect(block)
    layout = block.layout()
    starts = [layout.lineAt(i).textStart() for i in range(layout.lineCount())]
    assert len(starts) > 2
    assert all(is_break(text, p) for p in starts[1:]), [text[p - 3 : p + 3] for p in starts[1:]]
    assert view.editor.toPlainText() == text  # nothing inserted: copying the text copies the code
    assert doc.lineCount() == len(starts)  # the scroll bar counts the lines as laid out
    view.close()


def test_breaks_fall_between_tokens_and_keep_numbers_keywords_and_brackets_whole(qapp) -> None:
    text = "loss = loss_fn(model(x), y) * 0.05 + f(lr=0.1)"
    allowed = {p for p in range(len(text)) if is_break(text, p)}
    assert {text.index("loss_fn"), text.index("model"), text.index("x)"), text.index("y)")} <= allowed
    for word in ("loss_fn", "model", "0.05", "lr=0.1"):
        start = text.index(word)
        assert not allowed & set(range(start + 1, start + len(word))), word
    assert text.index(")") not in allowed  # a closing bracket stays with what it closes
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    fm = QFontMetricsF(font)
    for columns in range(8, len(text) + 1):
        starts, _ = wrap_line(text, fm, columns * fm.horizontalAdvance("0"))
        pieces = [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]
        assert "".join(pieces) == text
        # The longest piece with no break inside, ``lr=0.1)``, fits in 8 columns.
        assert all(is_break(text, p) for p in starts[1:]), (columns, pieces)
