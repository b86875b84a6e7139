"""Wrapping code lines between tokens: a name is never cut in two, a continuation is indented.

Qt wraps a line of code at spaces, or anywhere inside a word too long for the
line: ``optimizer.zero_`` / ``grad()``. :class:`TokenWrapLayout` lays each
wrapped line out again at the breaks :func:`token_breaks` chooses, after a
``.``, ``,``, ``(``, a space or an operator, and indents the continuation
under its line. Only the layout changes: the document's text is the code as
written, so copying it, or reading it back, gives the code run.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QFontMetricsF, QTextBlock, QTextDocument, QTextOption
from PySide6.QtWidgets import QPlainTextDocumentLayout

# A break may follow these characters (a space run breaks after its last space). Not an operator
# written without spaces: ``lr=0.05``, ``*rnn`` or ``** 2`` read as one.
BREAK_AFTER = frozenset(" .,([{")
# A line never starts with these: a closing bracket or a separator stays with what it closes.
NO_START = frozenset(" )]},:;.")
# The continuation's indent under its line, in characters (Python's own for continuation lines).
HANGING = 4
# Breaks remembered by line, width and font: an export tries many widths while it sizes its frame.
KEEP_BREAKS = 4096


def is_break(text: str, at: int) -> bool:
    """Whether a line of ``text`` may end before ``text[at]``: between two tokens, never inside one."""
    if not 0 < at < len(text):
        return False
    before, after = text[at - 1], text[at]
    if before not in BREAK_AFTER or after in NO_START:
        return False
    # ``0.05`` is one number; ``1.`` followed by a name is not code a scenario writes.
    return not (before == "." and (after.isdigit() or text[at - 2 : at - 1].isdigit()))


def token_breaks(text: str, fits: Callable[[int, int, bool], bool], cut: bool = True) -> list[int] | None:
    """Where each visual line of ``text`` starts, ``0`` first, greedily filling each line.

    ``fits(start, end, first)`` says whether ``text[start:end]`` fits on a line
    (``first``: the line's first visual line, a continuation otherwise; trailing
    spaces are never asked about). A line ends at the last break that fits; a
    single token longer than a whole line is cut where the line is full, or with
    ``cut`` False, None is returned instead.
    """
    starts = [0]
    start = 0
    while True:
        end = len(text.rstrip(" "))
        first = start == 0
        if end <= start or fits(start, end, first):
            return starts
        inside = range(end - 1, start, -1)  # the longest line first
        breaks = (p for p in inside if is_break(text, p))
        at = next((p for p in breaks if fits(start, _trim(text, start, p), first)), None)
        if at is None:
            if not cut:
                return None
            at = next((p for p in inside if fits(start, p, first)), start + 1)
        starts.append(at)
        start = at


def _trim(text: str, start: int, end: int) -> int:
    """``end`` less the spaces before it (they may hang past the line's edge)."""
    while end > start and text[end - 1] == " ":
        end -= 1
    return end


def wrap_line(text: str, fm: QFontMetricsF, width: float) -> tuple[list[int], float]:
    """Where each visual line of ``text`` starts in lines ``width`` pixels wide, and how far
    its continuations are indented.

    A continuation is indented under its line's text and a little more; less where
    that would cut a token (as far in as lets it stay whole), and not at all where even
    that would.
    """
    lead = len(text) - len(text.lstrip(" "))
    indents = [lead + HANGING, *range(lead, -1, -1)]
    for spaces in indents:
        last = spaces == 0
        indent = min(fm.horizontalAdvance(" " * spaces), width / 2)

        def fits(start: int, end: int, first: bool, indent: float = indent) -> bool:
            return fm.horizontalAdvance(text[start:end]) <= width - (0 if first else indent)

        starts = token_breaks(text, fits, cut=last)
        if starts is not None:
            return starts, indent
    raise AssertionError("token_breaks cuts where it must")


class TokenWrapLayout(QPlainTextDocumentLayout):
    """A plain-text layout whose wrapped lines break between tokens, continuations indented.

    Qt lays each block out first (lazily, as it paints or measures it); the
    first time a block's bounding rectangle is asked for after that, a block Qt
    wrapped is laid out again at :func:`wrap_line`'s breaks. A block that fits on one
    line is left as Qt laid it.
    """

    def __init__(self, document: QTextDocument, text_width: Callable[[], float]) -> None:
        """Lay out ``document``'s blocks in lines ``text_width()`` wide (the text area's width)."""
        super().__init__(document)
        self._text_width = text_width
        self._breaks: dict[tuple[str, float, str], tuple[list[int], float]] = {}

    def blockBoundingRect(self, block: QTextBlock) -> QRectF:
        rect = super().blockBoundingRect(block)  # lays the block out where it is not yet
        layout = block.layout()
        if layout is None or layout.lineCount() < 2:
            return rect
        # The width Qt lays blocks out in: the text area's less the document's margins (not a
        # line's: each line laid out here is as wide as its text).
        width = self._text_width() - 2 * self.document().documentMargin()
        starts, indent = self._wanted(block, width)
        laid = [layout.lineAt(i).textStart() for i in range(layout.lineCount())]
        shift = layout.lineAt(1).x() - layout.lineAt(0).x()
        if laid == starts and abs(shift - indent) < 0.5:
            return rect
        self._lay_out(block, starts, indent, width)
        return super().blockBoundingRect(block)

    def _wanted(self, block: QTextBlock, width: float) -> tuple[list[int], float]:
        """The block's line starts and its continuations' indent, in lines ``width`` wide."""
        text = block.text()
        font = self.document().defaultFont()  # the editor's (the block's layout has a font of its own)
        key = (text, width, font.key())
        known = self._breaks.get(key)
        if known is not None:
            return known
        if len(self._breaks) >= KEEP_BREAKS:
            self._breaks.clear()
        self._breaks[key] = known = wrap_line(text, QFontMetricsF(font), width)
        return known

    def _lay_out(self, block: QTextBlock, starts: list[int], indent: float, width: float) -> None:
        layout = block.layout()
        text = block.text()
        margin = self.document().documentMargin()
        fm = QFontMetricsF(self.document().defaultFont())
        # Each line as wide as its own text and half a character: breaking anywhere, Qt then ends it
        # exactly at the break chosen (QTextLine.setNumColumns miscounts around spaces).
        option = QTextOption(layout.textOption())
        option.setWrapMode(QTextOption.WrapMode.WrapAnywhere)
        layout.setTextOption(option)
        slack = fm.horizontalAdvance("0") / 2
        ends = [*starts[1:], len(text)]
        layout.clearLayout()
        layout.beginLayout()
        y = 0.0
        i = 0
        while True:
            line = layout.createLine()
            if not line.isValid():
                break
            line.setLeadingIncluded(True)
            shift = indent if i else 0.0
            if i < len(starts) - 1:
                line.setLineWidth(fm.horizontalAdvance(text[starts[i] : ends[i]].rstrip(" ")) + slack)
            else:
                line.setLineWidth(width - shift)  # the rest, which fits (or wraps anywhere, as Qt would)
            line.setPosition(QPointF(margin + shift, y))
            y += line.height()
            i += 1
        layout.endLayout()
        before = block.lineCount()
        block.setLineCount(layout.lineCount())
        if block.lineCount() != before:
            # The scroll bar counts lines as laid out.
            self.documentSizeChanged.emit(self.documentSize())
