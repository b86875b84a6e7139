"""The code panel: the training loop of one run, the line that ran and the line that runs next.

The text is the engine's own rendering of the loop, so the highlighted line is
the call that was executed. Checkboxes on the lines edit the loop: zero_grad
on or off, ``set_to_none``, and the ``/ k`` scaling of accumulated losses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from PySide6.QtCore import QRect, QSize, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QPainter,
    QPaintEvent,
    QPalette,
    QTextCharFormat,
    QTextFormat,
)
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from gradviz.gui.tape import LabInfo, Moment, RunInfo
from gradviz.gui.theme import LIGHT, Theme, run_color, run_glyph


@dataclass(frozen=True)
class DisplayLine:
    """One line of the panel: a source line (1-based number) or a greyed-out skipped line."""

    text: str
    number: int | None


def display_lines(run: RunInfo) -> list[DisplayLine]:
    """The run's source with the lines it skips shown in place (numbered None)."""
    ghosts = dict(run.ghost)
    out = []
    for i, text in enumerate(run.source.splitlines()):
        for g in ghosts.get(i, ()):
            out.append(DisplayLine(g, None))
        out.append(DisplayLine(text, i + 1))
    for g in ghosts.get(len(run.source.splitlines()), ()):
        out.append(DisplayLine(g, None))
    return out


class _Gutter(QWidget):
    """Line numbers, the ▶ next-line marker, and the zero_grad checkboxes."""

    def __init__(self, panel: CodeView) -> None:
        super().__init__(panel.editor)
        self.panel = panel

    def sizeHint(self) -> QSize:
        return QSize(self.panel.gutter_width(), 0)

    def paintEvent(self, event: QPaintEvent) -> None:
        self.panel.paint_gutter(self, event)


class CodeView(QWidget):
    """Shows one run's loop; emits ``toggled(run, what, on)`` when a line checkbox changes.

    ``what`` is ``"zero_grad"``, ``"set_to_none"`` or ``"scale_loss"``.
    """

    toggled = Signal(str, str, bool)
    run_selected = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme: Theme = LIGHT
        self.info: LabInfo | None = None
        self.run_name: str | None = None
        self.lines: list[DisplayLine] = []
        self.ran: tuple[int, int] | None = None
        self.next_line: int | None = None
        self.toggles: list[tuple[int, QCheckBox]] = []
        # Width of the column at the editor's right edge that holds the line checkboxes that
        # would not fit after their line's text (0 while every one fits inline), and those boxes.
        self.side_width = 0
        self._aside: set[int] = set()
        # Presentation mode shows the code, not the run picker and the line checkboxes.
        self.controls_shown = True

        self.title = QLabel("Code")
        self.title.setObjectName("panelTitle")
        self.runs = QComboBox()
        self.runs.setObjectName("codeRun")
        self.runs.setToolTip("Which run's loop to show and edit")
        self.runs.currentIndexChanged.connect(self._pick_run)
        self.note = QLabel("")
        self.note.setObjectName("status")
        self.note.setWordWrap(True)
        self.editor = QPlainTextEdit()
        self.editor.setObjectName("code")
        self.editor.setReadOnly(True)
        self.editor.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.editor.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.editor.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.gutter = _Gutter(self)
        self.editor.updateRequest.connect(self._on_update_request)
        self._set_font()

        head = QHBoxLayout()
        head.addWidget(self.title)
        head.addWidget(self.runs, 1)
        box = QVBoxLayout(self)
        box.setContentsMargins(4, 4, 4, 4)
        box.addLayout(head)
        box.addWidget(self.note)
        box.addWidget(self.editor, 1)

    # -------------------------------------------------------------- setup
    def _set_font(self) -> None:
        font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        font.setStyleHint(QFont.StyleHint.Monospace)
        font.setPointSizeF(self.font().pointSizeF())
        self.editor.setFont(font)
        self.gutter.setFont(font)

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        for _, box in self.toggles:
            self._style_toggle(box)
        self._highlight()

    def _style_toggle(self, box: QCheckBox) -> None:
        # Fusion draws a checkbox's frame from the window colour: on the dark theme's dark
        # window an unticked box all but vanishes, so frame it from the muted text colour.
        pal = box.palette()
        pal.setColor(QPalette.ColorRole.Window, QColor(self.theme.muted))
        box.setPalette(pal)

    def set_point_size(self, size: float) -> None:
        """Type size of the code (presentation mode uses a large one)."""
        font = self.editor.font()
        font.setPointSizeF(size)
        self.editor.setFont(font)
        self.gutter.setFont(font)
        self._layout_gutter()
        self._place_toggles()

    def set_lab(self, info: LabInfo) -> None:
        """Show a new lab: keep the chosen run when the new lab has one of that name."""
        self.info = info
        names = [r.name for r in info.runs]
        keep = self.run_name if self.run_name in names else names[0]
        self.runs.blockSignals(True)
        self.runs.clear()
        for i, name in enumerate(names):
            self.runs.addItem(f"{run_glyph(i)}  {name}", name)
            self.runs.setItemData(i, QColor(run_color(i)), Qt.ItemDataRole.ForegroundRole)
        self.runs.setCurrentIndex(names.index(keep))
        self.runs.blockSignals(False)
        self.runs.setVisible(len(names) > 1 and self.controls_shown)
        self._show_run(keep)

    def show_controls(self, on: bool) -> None:
        """Show or hide the run picker and the line checkboxes (the run shown is then named in the title)."""
        self.controls_shown = on
        if self.info is not None and self.run_name is not None:
            self.runs.setVisible(len(self.info.runs) > 1 and on)
            self._show_run(self.run_name)

    def _pick_run(self, index: int) -> None:
        name = self.runs.itemData(index)
        if name and name != self.run_name:
            self._show_run(name)
            self.run_selected.emit(name)

    def select_run(self, name: str) -> None:
        if self.info is None:
            return
        names = [r.name for r in self.info.runs]
        if name in names:
            self.runs.setCurrentIndex(names.index(name))

    def current_run(self) -> RunInfo | None:
        if self.info is None or self.run_name is None:
            return None
        return self.info.runs[self.info.run_index(self.run_name)]

    def _show_run(self, name: str) -> None:
        assert self.info is not None
        self.run_name = name
        run = self.current_run()
        assert run is not None
        index = self.info.run_index(name)
        if len(self.info.runs) > 1 and self.controls_shown:
            self.title.setText("Code of run")
        else:
            self.title.setText(
                f"Code of <span style='color:{run_color(index)}'>{run_glyph(index)} {name}</span>"
            )
        self.note.setText(run.note)
        self.note.setVisible(bool(run.note))
        # The old run's checkboxes go first: the new text repositions whatever toggles exist.
        self._clear_toggles()
        self.lines = display_lines(run)
        self.editor.setPlainText("\n".join(d.text for d in self.lines))
        self._make_toggles(run)
        self._layout_gutter()
        self._highlight()

    # ------------------------------------------------------------ toggles
    def _clear_toggles(self) -> None:
        for _, box in self.toggles:
            box.hide()
            box.deleteLater()
        self.toggles = []

    def _make_toggles(self, run: RunInfo) -> None:
        self._clear_toggles()
        loop = run.spec.loop
        zero_lines = {s.line for s in run.ops if s.op == "zero_grad"}
        forward_lines = {s.line for s in run.ops if s.op == "forward"}
        for row, d in enumerate(self.lines):
            if d.number in zero_lines or (d.number is None and self._ghost_main(row)):
                box = QCheckBox(self.gutter)
                box.setObjectName("zeroGradToggle")
                box.setChecked(d.number is not None)
                box.setToolTip("Run this zero_grad line (uncheck to skip it: .grad then piles up)")
                box.toggled.connect(lambda on: self._emit("zero_grad", on))
                self.toggles.append((row, box))
            if (
                d.number in zero_lines
                and ("zero_grad(" in d.text or "p.grad" in d.text)
                and self._has_choice(d)
            ):
                box = QCheckBox("set_to_none", self.editor)
                box.setObjectName("setToNoneToggle")
                box.setChecked(loop.set_to_none)
                box.setToolTip("Checked: .grad becomes None. Unchecked: .grad is filled with zeros.")
                box.toggled.connect(lambda on: self._emit("set_to_none", on))
                self.toggles.append((row, box))
            if d.number in forward_lines and loop.accumulate > 1 and "loss" in d.text:
                box = QCheckBox(f"/ {loop.accumulate}", self.editor)
                box.setObjectName("scaleLossToggle")
                box.setChecked(loop.scale_loss)
                box.setToolTip(f"Divide each micro-batch loss by {loop.accumulate} so the sum is a mean")
                box.toggled.connect(lambda on: self._emit("scale_loss", on))
                self.toggles.append((row, box))
        for _, box in self.toggles:
            self._style_toggle(box)
            box.setCursor(Qt.CursorShape.PointingHandCursor)
            box.setFocusPolicy(Qt.FocusPolicy.NoFocus)
            box.setVisible(self.controls_shown)

    def _ghost_main(self, row: int) -> bool:
        """The first line of a block of skipped lines carries the checkbox."""
        return row == 0 or self.lines[row - 1].number is not None

    @staticmethod
    def _has_choice(d: DisplayLine) -> bool:
        # For a manual loop the choice sits on the body line (p.grad = None / p.grad.zero_()).
        return not d.text.strip().startswith("for ")

    def _emit(self, what: str, on: bool) -> None:
        if self.run_name is not None:
            self.toggled.emit(self.run_name, what, on)

    def toggle(self, what: str) -> QCheckBox | None:
        """The first checkbox of kind ``what`` (for tests and keyboard access)."""
        name = {
            "zero_grad": "zeroGradToggle",
            "set_to_none": "setToNoneToggle",
            "scale_loss": "scaleLossToggle",
        }
        return next((b for _, b in self.toggles if b.objectName() == name[what]), None)

    # ------------------------------------------------------------- layout
    def gutter_width(self) -> int:
        fm = self.gutter.fontMetrics()
        return fm.horizontalAdvance("▶ 000") + fm.height() + 12

    def _layout_gutter(self) -> None:
        width = self.gutter_width()
        self.editor.setViewportMargins(width, 0, self.side_width, 0)
        cr = self.editor.contentsRect()
        self.gutter.setGeometry(QRect(cr.left(), cr.top(), width, cr.height()))

    def resizeEvent(self, event: object) -> None:
        super().resizeEvent(event)  # type: ignore[arg-type]
        self._layout_gutter()
        self._place_toggles()

    def _on_update_request(self, rect: QRect, dy: int) -> None:
        if dy:
            self.gutter.scroll(0, dy)
        else:
            self.gutter.update(0, rect.y(), self.gutter.width(), rect.height())
        self._place_toggles()

    def _row_rect(self, row: int) -> QRect | None:
        block = self.editor.document().findBlockByNumber(row)
        if not block.isValid():
            return None
        geom = self.editor.blockBoundingGeometry(block).translated(self.editor.contentOffset())
        return geom.toRect()

    def _inline_x(self, row: int) -> int:
        """Where a checkbox after ``row``'s text starts, in the text's own (unscrolled) coordinates."""
        fm = self.editor.fontMetrics()
        margin = int(self.editor.document().documentMargin())
        return margin + fm.horizontalAdvance(self.lines[row].text) + fm.horizontalAdvance("  ")

    def _side_column(self) -> tuple[int, set[int]]:
        """The right-hand column the line checkboxes need, and which go there (by ``id``).

        A checkbox stays after its line's text where it fits; one that would run past
        the panel's edge goes to the column, which narrows the text for every line, so
        the others are checked again against what is left.
        """
        boxes = [(row, box) for row, box in self.toggles if box.parent() is not self.gutter]
        if not self.controls_shown:
            return 0, set()
        # The width the text would have without the column, so the answer does not depend on it.
        room = self.editor.viewport().width() + self.side_width
        side, aside = 0, set[int]()
        while True:
            more = {
                id(box)
                for row, box in boxes
                if id(box) not in aside and self._inline_x(row) + box.sizeHint().width() + 2 > room - side
            }
            if not more:
                return side, aside
            aside |= more
            side = max(box.sizeHint().width() for _, box in boxes if id(box) in aside) + 8

    def _place_toggles(self) -> None:
        side, self._aside = self._side_column()
        if side != self.side_width:
            self.side_width = side
            self._layout_gutter()
        viewport = self.editor.viewport().geometry()  # in the editor's coordinates
        scrolled = self.editor.horizontalScrollBar().value()
        for row, box in self.toggles:
            rect = self._row_rect(row)
            if rect is None or not self.controls_shown:
                box.hide()
                continue
            size = box.sizeHint()
            y = rect.top() + (rect.height() - size.height()) // 2
            if box.parent() is self.gutter:
                box.move(self.gutter.width() - size.width() - 2, y)
                box.setVisible(rect.bottom() >= 0 and rect.top() <= self.editor.viewport().height())
                continue
            if id(box) in self._aside:
                x = viewport.right() + 1 + (self.side_width - size.width()) // 2
            else:
                x = viewport.left() + self._inline_x(row) - scrolled
            top = viewport.top() + y
            box.setGeometry(x, top, size.width(), size.height())
            # Children of the editor are not clipped by the text area: show only whole ones inside it.
            inside = top >= viewport.top() and top + size.height() <= viewport.bottom() + 1
            right = viewport.right() + 1 + self.side_width
            box.setVisible(inside and x >= viewport.left() and x + size.width() <= right)

    def paint_gutter(self, gutter: QWidget, event: QPaintEvent) -> None:
        painter = QPainter(gutter)
        painter.fillRect(event.rect(), QColor(self.theme.window))
        fm = gutter.fontMetrics()
        block = self.editor.firstVisibleBlock()
        offset = self.editor.contentOffset()
        while block.isValid():
            geom = self.editor.blockBoundingGeometry(block).translated(offset)
            if geom.top() > event.rect().bottom():
                break
            row = block.blockNumber()
            d = self.lines[row] if row < len(self.lines) else None
            if d is not None:
                top = int(geom.top())
                h = int(geom.height())
                if d.number is not None:
                    painter.setPen(QColor(self.theme.muted))
                    painter.drawText(
                        QRect(0, top, fm.horizontalAdvance("▶ 000"), h),
                        int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter),
                        str(d.number),
                    )
                if d.number is not None and d.number == self.next_line:
                    painter.setPen(QColor(self.theme.accent))
                    painter.drawText(
                        QRect(2, top, fm.horizontalAdvance("▶"), h), int(Qt.AlignmentFlag.AlignVCenter), "▶"
                    )
            block = block.next()
        painter.end()

    # ---------------------------------------------------------------- draw
    def draw(self, moment: Moment) -> None:
        """Highlight the lines of the run's last op and mark the line of its next op."""
        if self.run_name is None or self.run_name not in moment.tape.runs:
            return
        rt = moment.tape.runs[self.run_name]
        i = rt.index_at(moment.tick)
        ran = None
        if i >= 0:
            run = self.current_run()
            assert run is not None
            slot = next((s for s in run.ops if s.line == rt.lines[i]), None)
            ran = (slot.first, slot.last) if slot else (rt.lines[i], rt.lines[i])
        slot = moment.next_slot(self.run_name)
        next_line = slot.line if slot else None
        if (ran, next_line) != (self.ran, self.next_line):
            self.ran, self.next_line = ran, next_line
            self._highlight()
            self.gutter.update()

    def _row_of(self, number: int) -> int:
        return next((r for r, d in enumerate(self.lines) if d.number == number), -1)

    def _highlight(self) -> None:
        selections: list[QTextEdit.ExtraSelection | None] = []
        for row, d in enumerate(self.lines):
            if d.number is None:
                sel = QTextEdit.ExtraSelection()
                sel.cursor = self._line_cursor(row)
                fmt = QTextCharFormat()
                fmt.setForeground(QColor(self.theme.muted))
                fmt.setFontStrikeOut(True)
                fmt.setFontItalic(True)
                sel.format = fmt
                selections.append(sel)
        if self.ran is not None:
            for number in range(self.ran[0], self.ran[1] + 1):
                selections.append(self._line_selection(self._row_of(number), self.theme.code_ran))
        if self.next_line is not None:
            selections.append(self._line_selection(self._row_of(self.next_line), self.theme.code_next))
        self.editor.setExtraSelections([s for s in selections if s is not None])
        # Keep the lines that ran and the line that runs next in sight when the panel is short
        # (a long setup, presentation mode): the next line last, so it wins where not all fit.
        focus = [*(self.ran[::-1] if self.ran else ()), self.next_line]
        for number in focus:
            row = self._row_of(number) if number is not None else -1
            if row >= 0:
                cursor = self.editor.textCursor()
                cursor.setPosition(self.editor.document().findBlockByNumber(row).position())
                self.editor.setTextCursor(cursor)
                self.editor.ensureCursorVisible()

    def _line_cursor(self, row: int):
        block = self.editor.document().findBlockByNumber(row)
        cursor = self.editor.textCursor()
        cursor.setPosition(block.position())
        cursor.setPosition(block.position() + max(block.length() - 1, 0), cursor.MoveMode.KeepAnchor)
        return cursor

    def _line_selection(self, row: int, colour: str) -> QTextEdit.ExtraSelection | None:
        if row < 0:
            return None
        sel = QTextEdit.ExtraSelection()
        block = self.editor.document().findBlockByNumber(row)
        cursor = self.editor.textCursor()
        cursor.setPosition(block.position())
        sel.cursor = cursor
        fmt = QTextCharFormat()
        fmt.setBackground(QColor(colour))
        fmt.setProperty(QTextFormat.Property.FullWidthSelection, True)
        sel.format = fmt
        return sel

    def loop_rows(self) -> range:
        """The panel's rows that hold the training loop: from its ``for`` line to the end."""
        head = next((r for r, d in enumerate(self.lines) if d.text.startswith("for ")), 0)
        return range(head, len(self.lines))

    def loop_extent(self) -> tuple[int, int]:
        """The width and height this panel needs to show every line of the loop, unscrolled.

        Measured in the panel's current type, around its current title, note and gutter.
        """
        fm = self.editor.fontMetrics()
        inline = {
            row: box.sizeHint().width()
            for row, box in self.toggles
            if box.parent() is not self.gutter and self.controls_shown
        }
        rows = self.loop_rows()
        margin = 2 * int(self.editor.document().documentMargin())
        text = max((self._inline_x(r) + inline.get(r, 0) for r in rows), default=0) + margin
        chrome_w = self.width() - self.editor.viewport().width() + self.side_width
        chrome_h = self.height() - self.editor.viewport().height()
        height = sum(self._row_height(r, fm.lineSpacing()) for r in rows)
        return text + chrome_w, height + margin + chrome_h

    def _row_height(self, row: int, line: int) -> int:
        """Pixels ``row`` takes as laid out now: several lines where it wraps."""
        block = self.editor.document().findBlockByNumber(row)
        if not block.isValid():
            return line
        return max(math.ceil(self.editor.blockBoundingRect(block).height()), line)

    def set_still(self) -> None:
        """For frames that cannot be scrolled: long lines wrap and no scroll bar shows."""
        self.set_wrap(True)
        self.editor.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

    def scroll_position(self) -> int:
        return int(self.editor.verticalScrollBar().value())

    def hold_scroll(self, position: int) -> None:
        """Scroll back to ``position`` (a draw keeps the lines that ran in sight by scrolling)."""
        self.editor.verticalScrollBar().setValue(position)
        self.editor.horizontalScrollBar().setValue(0)

    def set_wrap(self, on: bool) -> None:
        """Wrap lines longer than the panel (presentation mode) instead of scrolling sideways."""
        mode = QPlainTextEdit.LineWrapMode.WidgetWidth if on else QPlainTextEdit.LineWrapMode.NoWrap
        self.editor.setLineWrapMode(mode)

    def show_loop(self) -> None:
        """Scroll so the loop's first line is the first shown, and the lines start at the left."""
        # The scroll bar counts lines as laid out: a wrapped line above the loop counts for each.
        doc = self.editor.document()
        lines = sum(max(doc.findBlockByNumber(r).lineCount(), 1) for r in range(self.loop_rows().start))
        self.editor.verticalScrollBar().setValue(lines)
        self.editor.horizontalScrollBar().setValue(0)

    def line_state(self) -> tuple[tuple[int, int] | None, int | None]:
        """(first, last) source lines highlighted as run, and the line marked next."""
        return self.ran, self.next_line
