"""The code panel: every run's training loop, the line each run just ran and the line it runs next.

The text is the engine's own rendering of each run's loop, so a highlighted line is
the call that was executed. The lines every run shares are shown once; where the
runs' loops differ, each run's own lines follow one another, marked in the gutter
with the run's shape in its colour. In the gutter a run's shape on a filled chip
marks the line it just ran, the shape in an outlined box the line it runs next; the
text area fills the lines that ran and frames, dashed, the lines that run next, so
the two differ in shape as well as in colour. Long lines wrap (a ↪ in the gutter
marks a wrapped line's continuation), and the panel scrolls so that the lines that
set up the optimizer (its learning rate, the parameters it is given) stay in view
with the lines that run. Checkboxes on the lines edit the loop: zero_grad on or
off, ``set_to_none``, and the ``/ k`` scaling of accumulated losses.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from PySide6.QtCore import QPointF, QRect, QRectF, QSize, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QFontMetrics,
    QFontMetricsF,
    QPainter,
    QPainterPath,
    QPaintEvent,
    QPalette,
    QPen,
    QPolygonF,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
    QTextOption,
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

from gradviz.gui.theme import LIGHT, Theme, run_color, run_glyph, run_symbol
from gradviz.gui.window_history import LabInfo, Moment, RunInfo

# Steps in which a still panel's type gives way so the loop's lines fit whole.
POINTS_STEP = 0.5
# The setup lines a lecturer needs beside the loop: the optimizer, its learning rate and
# the parameters it is given (a manual loop's ``lr = ...``).
SETUP_KEY = re.compile(r"torch\.optim\.|^lr\s*=")
ALL_RUNS = ""  # the run picker's entry for every run at once


def run_shape(run: int, box: QRectF) -> QPainterPath:
    """The ``run``-th run's marker shape (as its glyph: circle, square, triangle, diamond) in ``box``."""
    path = QPainterPath()
    symbol = run_symbol(run)
    if symbol == "o":
        path.addEllipse(box)
    elif symbol == "s":
        path.addRect(
            box.adjusted(box.width() * 0.06, box.height() * 0.06, -box.width() * 0.06, -box.height() * 0.06)
        )
    else:
        c = box.center()
        if symbol == "t":  # pointing down, as ▼
            points = [box.topLeft(), box.topRight(), QPointF(c.x(), box.bottom())]
        else:
            points = [
                QPointF(c.x(), box.top()),
                QPointF(box.right(), c.y()),
                QPointF(c.x(), box.bottom()),
                QPointF(box.left(), c.y()),
            ]
        path.addPolygon(QPolygonF(points))
        path.closeSubpath()
    return path


@dataclass(frozen=True)
class DisplayLine:
    """One line of the panel: a source line, or a greyed-out line a run skips (``number`` None).

    ``runs`` are the indices of the runs whose loop has the line (every run shown, for
    a line they share), ``numbers`` its 1-based number in each of their sources, in the
    same order (None where they skip it); ``number`` is the first of them.
    """

    text: str
    number: int | None
    runs: tuple[int, ...] = (0,)
    numbers: tuple[int | None, ...] = ()

    def number_in(self, run: int) -> int | None:
        """The line's number in run ``run``'s source; None where that run skips or lacks it."""
        if run not in self.runs:
            return None
        return (self.numbers or (self.number,))[self.runs.index(run)]


def display_lines(run: RunInfo, index: int = 0) -> list[DisplayLine]:
    """The run's source with the lines it skips shown in place (numbered None)."""
    ghosts = dict(run.ghost)
    source = run.source.splitlines()
    out = []
    for i, text in enumerate(source):
        out += [DisplayLine(g, None, (index,), (None,)) for g in ghosts.get(i, ())]
        out.append(DisplayLine(text, i + 1, (index,), (i + 1,)))
    out += [DisplayLine(g, None, (index,), (None,)) for g in ghosts.get(len(source), ())]
    return out


def merged_lines(runs: Sequence[RunInfo], indices: Sequence[int]) -> list[DisplayLine]:
    """Several runs' sources as one: shared lines once, each run's own lines where they differ.

    Each run's lines keep their order, so reading the lines one run has, top to
    bottom, gives exactly that run's source (with the lines it skips, greyed out).
    """
    rows = display_lines(runs[0], indices[0])
    for run, index in zip(runs[1:], indices[1:], strict=True):
        mine = display_lines(run, index)
        keys = [(d.text, d.number is None) for d in rows]
        theirs = [(d.text, d.number is None) for d in mine]
        merged: list[DisplayLine] = []
        matcher = difflib.SequenceMatcher(a=keys, b=theirs, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                merged += [
                    replace(d, runs=(*d.runs, index), numbers=(*d.numbers, e.number))
                    for d, e in zip(rows[i1:i2], mine[j1:j2], strict=True)
                ]
            else:
                merged += rows[i1:i2] + mine[j1:j2]
        rows = merged
    return rows


class _Gutter(QWidget):
    """Each run's marks, the line numbers and the zero_grad checkboxes, left of the code."""

    def __init__(self, panel: CodeView) -> None:
        super().__init__(panel.editor)
        self.panel = panel

    def sizeHint(self) -> QSize:
        return QSize(self.panel.gutter_width(), 0)

    def paintEvent(self, event: QPaintEvent) -> None:
        self.panel.paint_gutter(self, event)


class _Side(QWidget):
    """The column right of the code that holds the checkboxes too wide to follow their line:
    set apart from the text, so a ``/ 2`` checkbox there cannot be read as the code's own."""

    def __init__(self, panel: CodeView) -> None:
        super().__init__(panel.editor)
        self.panel = panel

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor(self.panel.theme.window))
        painter.setPen(QPen(QColor(self.panel.theme.grid), 2))
        painter.drawLine(1, 0, 1, self.height())
        painter.end()


class _Editor(QPlainTextEdit):
    """The code's text, with a dashed frame around each line that runs next."""

    def __init__(self, panel: CodeView) -> None:
        super().__init__()
        self.panel = panel

    def paintEvent(self, event: QPaintEvent) -> None:
        super().paintEvent(event)
        self.panel.paint_frames(self.viewport())


@dataclass(frozen=True)
class Marks:
    """Where one run stands in the code: the lines its last op ran and the line of its next op."""

    ran: tuple[int, int] | None
    next_line: int | None


class CodeView(QWidget):
    """Shows the runs' loops; emits ``toggled(run, what, on)`` when a line checkbox changes.

    ``what`` is ``"zero_grad"``, ``"set_to_none"`` or ``"scale_loss"``. A checkbox on
    a line several runs share edits the first of them; ``run_selected(run)`` says
    that one run was picked to be shown alone (and edited).
    """

    toggled = Signal(str, str, bool)
    run_selected = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme: Theme = LIGHT
        self.info: LabInfo | None = None
        # The one run shown, or None while every run is shown (a lab of several runs starts so).
        self.run_name: str | None = None
        self.shown: tuple[int, ...] = ()
        self.lines: list[DisplayLine] = []
        self._rows: dict[tuple[int, int], int] = {}
        self.marks: dict[int, Marks] = {}
        self.toggles: list[tuple[int, QCheckBox]] = []
        # Width of the column at the editor's right edge that holds the line checkboxes that
        # would not fit after their line's text (0 while every one fits inline), and those boxes.
        self.side_width = 0
        self._aside: set[int] = set()
        # Presentation mode shows the code, not the run picker and the line checkboxes.
        self.controls_shown = True
        # The code's type as asked for, and in a still panel the least it may give way to
        # (None: it never does) so the loop's lines fit whole instead of wrapping.
        self.points = self.font().pointSizeF()
        self.least_points: float | None = None

        self.title = QLabel("Code")
        self.title.setObjectName("panelTitle")
        self.legend = QLabel("")
        self.legend.setObjectName("codeLegend")
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setWordWrap(True)  # a narrow panel (a small export) puts the runs on two lines
        self.runs = QComboBox()
        self.runs.setObjectName("codeRun")
        self.runs.setToolTip("Show every run's loop, or one run's alone (to read and edit it whole)")
        self.runs.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # a focused combo box eats letter shortcuts
        # As wide as its longest entry: a narrow column must not cut "every run" short.
        self.runs.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.runs.currentIndexChanged.connect(self._pick_run)
        self.note = QLabel("")
        self.note.setObjectName("status")
        self.note.setWordWrap(True)
        self.editor = _Editor(self)
        self.editor.setObjectName("code")
        self.editor.setReadOnly(True)
        # Wrapped, never cut: the fact a line is there for (an lr, a parameter) may sit at its end.
        self.set_wrap(True)
        # A word longer than the panel (``torch.optim.SGD([*rnn.parameters(),``) breaks too.
        self.editor.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.editor.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.editor.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.gutter = _Gutter(self)
        self.side = _Side(self)
        self.editor.updateRequest.connect(self._on_update_request)
        self._set_font()

        head = QHBoxLayout()
        head.addWidget(self.title)
        head.addWidget(self.legend, 1)
        head.addWidget(self.runs)
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
        self.side.update()
        self._highlight()

    def _style_toggle(self, box: QCheckBox) -> None:
        # Fusion draws a checkbox's frame from the window colour: on the dark theme's dark
        # window an unticked box all but vanishes, so frame it from the muted text colour.
        pal = box.palette()
        pal.setColor(QPalette.ColorRole.Window, QColor(self.theme.muted))
        box.setPalette(pal)

    def set_point_size(self, size: float) -> None:
        """Type size of the code (presentation mode uses a large one)."""
        self.points = size
        self._use_points(self._fitted_points())

    def _use_points(self, size: float) -> None:
        font = self.editor.font()
        font.setPointSizeF(size)
        self.editor.setFont(font)
        self.gutter.setFont(font)
        if self.least_points is not None:
            # A style sheet's type size wins over a widget's font: a still panel names its own.
            self.editor.setStyleSheet(f"font-size: {size:g}pt;")
            self.editor.ensurePolished()
            self.gutter.ensurePolished()
        self._layout_gutter()
        self._place_toggles()

    def _fitted_points(self) -> float:
        """The type a still panel shows: from the size asked for down to its least, the one in which
        the fewest lines of the loop wrap, the largest of those (so the size asked for where every
        line fits in it whole)."""
        least = self.least_points
        if least is None or not self.lines or self.editor.width() <= 0:
            return self.points
        texts = [self.lines[r].text.rstrip() for r in self.loop_rows()]
        margin = 2 * self.editor.document().documentMargin()
        # The text area's width and the gutter's, which is measured in the type of the code.
        room = self.editor.viewport().width() + self.gutter_width()

        def wrapped(size: float) -> int:
            font = QFont(self.editor.font())
            font.setPointSizeF(size)
            fm = QFontMetricsF(font)
            width = room - self.gutter_width(font) - margin
            return sum(fm.horizontalAdvance(t) > width for t in texts)

        sizes = [self.points]
        while sizes[-1] - POINTS_STEP >= least - 1e-6:
            sizes.append(sizes[-1] - POINTS_STEP)
        # Width alone decides: the panel's height is set from the loop this type lays out.
        return min(sizes, key=lambda size: (wrapped(size), -size))

    def _fit_points(self) -> None:
        if self.least_points is None:
            return
        size = self._fitted_points()
        if abs(size - self.editor.font().pointSizeF()) > 1e-6:
            self._use_points(size)

    def set_lab(self, info: LabInfo) -> None:
        """Show a new lab: every run, or the one chosen alone when the new lab has a run of that name."""
        self.info = info
        names = [r.name for r in info.runs]
        keep = self.run_name if self.run_name in names else None
        if len(names) == 1:
            keep = names[0]
        self.runs.blockSignals(True)
        self.runs.clear()
        if len(names) > 1:
            self.runs.addItem("every run", ALL_RUNS)
        for i, name in enumerate(names):
            self.runs.addItem(f"{run_glyph(i)}  {name} alone", name)
            self.runs.setItemData(self.runs.count() - 1, QColor(run_color(i)), Qt.ItemDataRole.ForegroundRole)
        self.runs.setCurrentIndex(max(self.runs.findData(keep if keep else ALL_RUNS), 0))
        self.runs.blockSignals(False)
        self.runs.setVisible(len(names) > 1 and self.controls_shown)
        self._show(keep)

    def show_controls(self, on: bool) -> None:
        """Show or hide the run picker and the line checkboxes (the run shown is then named in the title)."""
        self.controls_shown = on
        if self.info is not None:
            self.runs.setVisible(len(self.info.runs) > 1 and on)
            self._show(self.run_name)

    def _pick_run(self, index: int) -> None:
        name = self.runs.itemData(index)
        if name is None or (name or None) == self.run_name:
            return
        self._show(name or None)
        if name:
            self.run_selected.emit(name)

    def select_run(self, name: str | None) -> None:
        """Show run ``name`` alone, or every run for None."""
        index = self.runs.findData(name or ALL_RUNS)
        if index >= 0:
            self.runs.setCurrentIndex(index)

    def current_run(self) -> RunInfo | None:
        """The run shown alone, or the first of those shown."""
        if self.info is None or not self.shown:
            return None
        return self.info.runs[self.shown[0]]

    def _show(self, name: str | None) -> None:
        """Show run ``name`` alone, or (None) every run's loop merged."""
        assert self.info is not None
        runs = self.info.runs
        self.run_name = name
        self.shown = (runs.index(self.info.run(name)),) if name else tuple(range(len(runs)))
        if len(runs) == 1 or (name and not self.controls_shown):
            index = self.shown[0]
            shown = runs[index].file or name  # the file of the lines shown, where not the run's own
            self.title.setText(
                f"Code of <span style='color:{run_color(index)}'>{run_glyph(index)} {shown}</span>"
            )
        else:
            self.title.setText("Code of run" if name else "Code of")
        merged = len(self.shown) > 1
        self.legend.setText(self._legend() if merged else "")
        self.legend.setToolTip(
            "<br>".join(f"{run_glyph(i)} {runs[i].name}: {runs[i].note}" for i in self.shown if runs[i].note)
        )
        self.legend.setVisible(merged)
        note = "" if merged else runs[self.shown[0]].note
        self.note.setText(note)
        self.note.setVisible(bool(note))
        # The old checkboxes go first: the new text repositions whatever toggles exist.
        self._clear_toggles()
        self.lines = merged_lines([runs[i] for i in self.shown], self.shown)
        # Each shown run's source line's row, first come: the marks look them up every op.
        self._rows = {}
        for row, d in enumerate(self.lines):
            for run, number in zip(d.runs, d.numbers or (d.number,), strict=False):
                if number is not None:
                    self._rows.setdefault((run, number), row)
        self.marks = {}
        self.editor.setPlainText("\n".join(d.text for d in self.lines))
        self._make_toggles()
        self._layout_gutter()
        self._fit_points()
        self._highlight()

    def _legend(self) -> str:
        assert self.info is not None
        return "&nbsp;&nbsp;".join(
            f"<span style='color:{run_color(i)}'>{run_glyph(i)}&nbsp;{self.info.runs[i].name}</span>"
            for i in self.shown
        )

    # ------------------------------------------------------------ toggles
    def _clear_toggles(self) -> None:
        for _, box in self.toggles:
            box.hide()
            box.deleteLater()
        self.toggles = []

    def _make_toggles(self) -> None:
        """The checkboxes of each line, for the first run that has the line."""
        assert self.info is not None
        self._clear_toggles()
        runs = self.info.runs
        zero_lines = {i: {s.line for s in runs[i].ops if s.op == "zero_grad"} for i in self.shown}
        forward_lines = {i: {s.line for s in runs[i].ops if s.op == "forward"} for i in self.shown}
        shared = "" if len(self.shown) == 1 else " (of the first run that has this line)"
        for row, d in enumerate(self.lines):
            owner = d.runs[0]
            run, loop = runs[owner].name, runs[owner].spec.loop
            if d.number in zero_lines[owner] or (d.number is None and self._ghost_main(row)):
                box = QCheckBox(self.gutter)
                box.setObjectName("zeroGradToggle")
                box.setChecked(d.number is not None)
                box.setToolTip(f"Run this zero_grad line{shared} (uncheck to skip it: .grad then piles up)")
                box.toggled.connect(lambda on, run=run: self._emit(run, "zero_grad", on))
                self.toggles.append((row, box))
            if (
                d.number in zero_lines[owner]
                and ("zero_grad(" in d.text or "p.grad" in d.text)
                and self._has_choice(d)
            ):
                # Where the line itself spells out set_to_none=, the box needs no label of its own.
                box = QCheckBox("" if "set_to_none=" in d.text else "set_to_none", self.editor)
                box.setObjectName("setToNoneToggle")
                box.setChecked(loop.set_to_none)
                box.setToolTip(f"Checked: .grad becomes None. Unchecked: .grad is filled with zeros{shared}.")
                box.toggled.connect(lambda on, run=run: self._emit(run, "set_to_none", on))
                self.toggles.append((row, box))
            if d.number in forward_lines[owner] and loop.accumulate > 1 and "loss" in d.text:
                box = QCheckBox(f"/ {loop.accumulate}", self.editor)
                box.setObjectName("scaleLossToggle")
                box.setChecked(loop.scale_loss)
                box.setToolTip(
                    f"Divide each micro-batch loss by {loop.accumulate} so the sum is a mean{shared}"
                )
                box.toggled.connect(lambda on, run=run: self._emit(run, "scale_loss", on))
                self.toggles.append((row, box))
        for _, box in self.toggles:
            self._style_toggle(box)
            box.setCursor(Qt.CursorShape.PointingHandCursor)
            box.setFocusPolicy(Qt.FocusPolicy.NoFocus)
            box.setVisible(self.controls_shown)

    def _ghost_main(self, row: int) -> bool:
        """The first line of a block of skipped lines carries the checkbox."""
        if row == 0:
            return True
        above = self.lines[row - 1]
        return above.number is not None or above.runs != self.lines[row].runs

    @staticmethod
    def _has_choice(d: DisplayLine) -> bool:
        # For a manual loop the choice sits on the body line (p.grad = None / p.grad.zero_()).
        return not d.text.strip().startswith("for ")

    def _emit(self, run: str, what: str, on: bool) -> None:
        self.toggled.emit(run, what, on)

    def toggle(self, what: str) -> QCheckBox | None:
        """The first checkbox of kind ``what`` (for tests and keyboard access)."""
        name = {
            "zero_grad": "zeroGradToggle",
            "set_to_none": "setToNoneToggle",
            "scale_loss": "scaleLossToggle",
        }
        return next((b for _, b in self.toggles if b.objectName() == name[what]), None)

    # ------------------------------------------------------------- layout
    def _slot_width(self, fm: QFontMetrics | None = None) -> int:
        """One run's lane in the gutter, in its type now or in that of ``fm``."""
        return (fm or self.gutter.fontMetrics()).lineSpacing() + 2

    def gutter_width(self, font: QFont | None = None) -> int:
        """The gutter's width, in its type now or in ``font``."""
        fm = QFontMetrics(font) if font is not None else self.gutter.fontMetrics()
        lanes = max(len(self.shown), 1) * self._slot_width(fm)
        return 4 + lanes + fm.horizontalAdvance("000") + fm.height() + 12

    def _layout_gutter(self) -> None:
        width = self.gutter_width()
        self.editor.setViewportMargins(width, 0, self.side_width, 0)
        cr = self.editor.contentsRect()
        self.gutter.setGeometry(QRect(cr.left(), cr.top(), width, cr.height()))
        view = self.editor.viewport().geometry()
        self.side.setGeometry(QRect(view.right() + 1, view.top(), self.side_width, view.height()))
        self.side.setVisible(self.side_width > 0)
        self.side.lower()  # under the checkboxes it holds

    def resizeEvent(self, event: object) -> None:
        super().resizeEvent(event)  # type: ignore[arg-type]
        self._layout_gutter()
        self._fit_points()
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
        line = self.editor.fontMetrics().lineSpacing()
        for row, box in self.toggles:
            rect = self._row_rect(row)
            if rect is None or not self.controls_shown:
                box.hide()
                continue
            size = box.sizeHint()
            # On a line's first line: a wrapped line's checkbox stays by the code it is about.
            y = rect.top() + (min(rect.height(), line) - size.height()) // 2
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

    # -------------------------------------------------------------- paint
    def paint_gutter(self, gutter: QWidget, event: QPaintEvent) -> None:
        """Each run's marks in its lane, then the first run's line number (↪ on a wrapped line's rest)."""
        painter = QPainter(gutter)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.fillRect(event.rect(), QColor(self.theme.window))
        fm = gutter.fontMetrics()
        slot, line = self._slot_width(), fm.lineSpacing()
        numbers_x = 4 + max(len(self.shown), 1) * slot
        numbers_w = fm.horizontalAdvance("000")
        ran, nexts = self._ran_by_run(), self._next_by_run()
        several = len(self.shown) > 1
        block = self.editor.firstVisibleBlock()
        offset = self.editor.contentOffset()
        right = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        while block.isValid():
            geom = self.editor.blockBoundingGeometry(block).translated(offset)
            if geom.top() > event.rect().bottom():
                break
            row = block.blockNumber()
            if row < len(self.lines):
                d = self.lines[row]
                top = int(geom.top())
                for lane, k in enumerate(self.shown):
                    cell = QRect(4 + lane * slot, top, slot, line)
                    if row in ran.get(k, ()):
                        self._paint_mark(painter, cell, k, "ran")
                    elif row == nexts.get(k):
                        self._paint_mark(painter, cell, k, "next")
                    elif several and k in d.runs and len(d.runs) < len(self.shown):
                        self._paint_mark(painter, cell, k, "own")
                painter.setPen(QColor(self.theme.muted))
                # One numbering, the first run's: two runs' numbers side by side would repeat.
                number = d.number_in(self.shown[0]) if self.shown else None
                if number is not None:
                    painter.drawText(QRect(numbers_x, top, numbers_w, line), right, str(number))
                layout = block.layout()
                for i in range(1, layout.lineCount() if layout is not None else 0):
                    y = top + int(layout.lineAt(i).y())
                    painter.drawText(QRect(numbers_x, y, numbers_w, line), right, "↪")
            block = block.next()
        painter.end()

    def _paint_mark(self, painter: QPainter, cell: QRect, run: int, kind: str) -> None:
        """Run ``run``'s shape: large and filled (``ran``), large and hollow (``next``), small (``own``)."""
        colour = QColor(run_color(run))
        side = cell.height() * (0.72 if kind != "own" else 0.5)
        centre = QRectF(cell).center()
        shape = run_shape(run, QRectF(centre.x() - side / 2, centre.y() - side / 2, side, side))
        if kind == "next":
            painter.setPen(QPen(colour, max(2.0, side / 6)))
            painter.setBrush(QColor(self.theme.base))
        else:
            painter.setPen(QPen(QColor(self.theme.text), 1) if kind == "ran" else Qt.PenStyle.NoPen)
            painter.setBrush(colour)
        painter.drawPath(shape)

    def paint_frames(self, viewport: QWidget) -> None:
        """A dashed frame around each line that runs next (the lines that ran are filled instead)."""
        rows = sorted(set(self._next_by_run().values()))
        if not rows:
            return
        painter = QPainter(viewport)
        pen = QPen(QColor(self.theme.accent), 2, Qt.PenStyle.DashLine)
        painter.setPen(pen)
        painter.setBrush(Qt.BrushStyle.NoBrush)
        for row in rows:
            rect = self._row_rect(row)
            if rect is not None:
                # On the line's edges, not inside it: an edge drawn inside would hide its underscores.
                painter.drawRect(QRectF(1.5, rect.top() + 0.5, viewport.width() - 3, rect.height()))
        painter.end()

    # ---------------------------------------------------------------- draw
    def draw(self, moment: Moment) -> None:
        """Mark, for each run shown, the lines of its last op and the line of its next op."""
        if self.info is None:
            return
        marks = {
            k: self._marks_of(moment, k) for k in self.shown if self.info.runs[k].name in moment.history.runs
        }
        if marks != self.marks:
            self.marks = marks
            self._highlight()
            self._keep_in_sight()

    def _marks_of(self, moment: Moment, index: int) -> Marks:
        assert self.info is not None
        run = self.info.runs[index]
        rt = moment.history.runs[run.name]
        i = rt.index_at(moment.tick)
        ran = None
        if i >= 0:
            slot = next((s for s in run.ops if s.line == rt.lines[i]), None)
            ran = (slot.first, slot.last) if slot else (rt.lines[i], rt.lines[i])
        slot = moment.next_slot(run.name)
        return Marks(ran, slot.line if slot else None)

    @property
    def ran(self) -> tuple[int, int] | None:
        """The source lines (first, last) the first shown run's last op ran."""
        return self.line_state()[0]

    @property
    def next_line(self) -> int | None:
        """The source line of the first shown run's next op."""
        return self.line_state()[1]

    def line_state(self, run: str | None = None) -> tuple[tuple[int, int] | None, int | None]:
        """(first, last) source lines highlighted as run, and the line marked next, of ``run``.

        ``run`` None: the run shown alone, or the first of those shown.
        """
        if self.info is None or not self.shown:
            return None, None
        marks = self.marks.get(self.info.run_index(run) if run else self.shown[0])
        return (marks.ran, marks.next_line) if marks else (None, None)

    def row_of(self, run: int, number: int) -> int:
        """The panel's row of line ``number`` of run ``run``'s source (-1 where not shown)."""
        return self._rows.get((run, number), -1)

    def _row_of(self, number: int) -> int:
        return self.row_of(self.shown[0], number) if self.shown else -1

    def _ran_by_run(self) -> dict[int, set[int]]:
        out: dict[int, set[int]] = {}
        for k, m in self.marks.items():
            if m.ran is not None:
                out[k] = {self.row_of(k, n) for n in range(m.ran[0], m.ran[1] + 1)} - {-1}
        return out

    def _next_by_run(self) -> dict[int, int]:
        out = {}
        for k, m in self.marks.items():
            row = self.row_of(k, m.next_line) if m.next_line is not None else -1
            if row >= 0:
                out[k] = row
        return out

    def marked_rows(self) -> list[int]:
        """The rows any shown run just ran or runs next, top to bottom."""
        ran = set().union(*self._ran_by_run().values())
        return sorted(ran | set(self._next_by_run().values()))

    def _highlight(self) -> None:
        selections: list[QTextEdit.ExtraSelection] = []
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
        ran = set().union(*self._ran_by_run().values())
        # The lines that ran are painted last: filled, they stay filled where a line also runs next.
        for row in sorted(set(self._next_by_run().values()) - ran):
            selections.append(self._line_selection(row, self.theme.code_next))
        for row in sorted(ran):
            selections.append(self._line_selection(row, self.theme.code_ran))
        self.editor.setExtraSelections(selections)
        self.gutter.update()
        self.editor.viewport().update()

    def _line_cursor(self, row: int) -> QTextCursor:
        block = self.editor.document().findBlockByNumber(row)
        cursor = self.editor.textCursor()
        cursor.setPosition(block.position())
        cursor.setPosition(block.position() + max(block.length() - 1, 0), cursor.MoveMode.KeepAnchor)
        return cursor

    def _line_selection(self, row: int, colour: str) -> QTextEdit.ExtraSelection:
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

    # ---------------------------------------------------------- scrolling
    def setup_rows(self) -> list[int]:
        """The lines before the loop that set up an optimizer (its lr, its parameters)."""
        return [r for r in range(self.loop_rows().start) if SETUP_KEY.search(self.lines[r].text.strip())]

    def setup_row(self) -> int | None:
        """The optimizer's setup line nearest the loop: the least the panel keeps in view with it."""
        rows = self.setup_rows()
        return rows[-1] if rows else None

    def _fits(self, top: int, bottom: int) -> bool:
        """Whether rows ``top`` to ``bottom`` fit in the text area at once, as laid out now."""
        line = self.editor.fontMetrics().lineSpacing()
        height = sum(self._row_height(r, line) for r in range(top, bottom + 1))
        if top == 0:
            height += int(self.editor.document().documentMargin())
        return height <= self.editor.viewport().height()

    def _top_row(self) -> int:
        return self.editor.firstVisibleBlock().blockNumber()

    def _scroll_to(self, row: int) -> None:
        # The scroll bar counts lines as laid out: a wrapped line above counts for each.
        doc = self.editor.document()
        self.editor.verticalScrollBar().setValue(
            sum(max(doc.findBlockByNumber(r).lineCount(), 1) for r in range(row))
        )
        self.editor.horizontalScrollBar().setValue(0)

    def _best_top(self, low: int, high: int) -> int:
        """The first row to show so rows ``low`` to ``high`` are in view, with the optimizer's setup
        above them where it fits too; where not all fit, from ``low`` down."""
        for top in (0, *self.setup_rows(), self.loop_rows().start, low):
            if top is not None and top <= low and self._fits(top, high):
                return top
        return low

    def _keep_in_sight(self) -> None:
        """Scroll only as far as keeps the whole loop, or where it does not fit the marked lines,
        in view (with the optimizer's setup where that fits too).

        Where the lines that ran and the lines that run next do not fit at once (the
        loop's last line ran, its first runs next), the lines that ran win: they are
        what the moment shows.
        """
        if self.editor.viewport().height() <= 0:
            return
        ran = sorted(set().union(*self._ran_by_run().values()))
        nexts = sorted(set(self._next_by_run().values()))
        every = sorted({*ran, *nexts})
        if not every:
            return
        loop = self.loop_rows()
        whole = [loop.start, loop.stop - 1] if loop.start <= every[0] and every[-1] < loop.stop else []
        # The whole loop where it fits (a lecture narrates it line by line), else what is marked.
        rows = next((r for r in (whole, every, ran, nexts) if r and self._fits(r[0], r[-1])), ran or nexts)
        low, high = rows[0], rows[-1]
        now, setup = self._top_row(), self.setup_row()
        setup_seen = setup is None or now <= setup or not self._fits(setup, high)
        if now <= low and self._fits(now, high) and setup_seen:
            return
        self._scroll_to(self._best_top(low, high))

    def loop_rows(self) -> range:
        """The panel's rows that hold the training loop: from its ``for`` line to the end."""
        head = next((r for r, d in enumerate(self.lines) if d.text.startswith("for ")), 0)
        return range(head, len(self.lines))

    def loop_extent(self, setup: bool = True) -> tuple[int, int]:
        """The width and height this panel needs to show every line of the loop, unscrolled,
        and with ``setup`` the optimizer's setup line above it too (the panel shows that
        line with the loop wherever its height holds both, see :meth:`show_loop`).

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
        first = self.setup_row() if setup else None
        start = rows.start if first is None else first
        height = sum(self._row_height(r, fm.lineSpacing()) for r in range(start, rows.stop))
        return text + chrome_w, height + margin + chrome_h

    def whole_height(self) -> int:
        """The height this panel needs to show every line, the setup above the loop included, unscrolled."""
        line = self.editor.fontMetrics().lineSpacing()
        above = sum(self._row_height(r, line) for r in range(self.loop_rows().start))
        return self.loop_extent(setup=False)[1] + above

    def _row_height(self, row: int, line: int) -> int:
        """Pixels ``row`` takes as laid out now: several lines where it wraps."""
        block = self.editor.document().findBlockByNumber(row)
        if not block.isValid():
            return line
        return max(math.ceil(self.editor.blockBoundingRect(block).height()), line)

    def set_still(self, least_points: float | None = None) -> None:
        """For frames that cannot be scrolled: long lines wrap and no scroll bar shows.

        With ``least_points``, the type gives way, down to that size, where a smaller one
        lets every line of the loop fit whole (a lecturer reads each line as one).
        """
        self.set_wrap(True)
        self.editor.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.least_points = least_points
        if least_points is not None:
            self.editor.ensurePolished()
            self.points = self.editor.font().pointSizeF()  # the type its window gives it
            self._use_points(self._fitted_points())

    def scroll_position(self) -> int:
        return int(self.editor.verticalScrollBar().value())

    def hold_scroll(self, position: int) -> None:
        """Scroll back to ``position`` (a draw keeps the lines that ran in sight by scrolling)."""
        self.editor.verticalScrollBar().setValue(position)
        self.editor.horizontalScrollBar().setValue(0)

    def set_wrap(self, on: bool) -> None:
        """Wrap lines longer than the panel (the default) instead of scrolling sideways."""
        mode = QPlainTextEdit.LineWrapMode.WidgetWidth if on else QPlainTextEdit.LineWrapMode.NoWrap
        self.editor.setLineWrapMode(mode)
        # Wrapped lines leave nothing to scroll sideways (a bar Qt left shown would only take room).
        policy = Qt.ScrollBarPolicy.ScrollBarAlwaysOff if on else Qt.ScrollBarPolicy.ScrollBarAsNeeded
        self.editor.setHorizontalScrollBarPolicy(policy)

    def show_loop(self) -> None:
        """Scroll so the whole loop is in view, with the optimizer's setup above it where that fits;
        where the loop does not fit, so the marked lines are."""
        rows = self.loop_rows()
        if self.marks and not self._fits(rows.start, rows.stop - 1):
            self._keep_in_sight()
            return
        self._scroll_to(self._best_top(rows.start, rows.stop - 1))
