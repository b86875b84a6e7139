"""The .grad inspector: per run and parameter, its value, ``.grad``, and the optimizer's state.

``.grad`` being ``None`` (no tensor at all) is drawn as the word *None* on a
tinted background, never as 0. Cells whose value changed at the last op are
highlighted. Small vectors are drawn as per-element bars, larger ones as a
histogram; the exact numbers are in the tooltip.

The scenario's lesson decides what leads: its parameters come first, each
beside itself in every run, and the quantities it names are the first columns.
A lesson parameter that names a module (``G``) is one row per run for all of
that module's parameters, in norms, so a whole model's ``.grad`` reads at a glance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import numpy as np
from PySide6.QtCore import QEvent, QModelIndex, QObject, QPersistentModelIndex, QRect, QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QHelpEvent, QPainter, QPen, QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableWidget,
    QTableWidgetItem,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from gradviz.gui import fmt
from gradviz.gui.theme import LIGHT, Theme, run_color, run_glyph
from gradviz.gui.window_history import LabInfo, Moment

KIND = Qt.ItemDataRole.UserRole
VALUES = Qt.ItemDataRole.UserRole + 1
CHANGED = Qt.ItemDataRole.UserRole + 2
RUN = Qt.ItemDataRole.UserRole + 3  # the index of the cell's run: its bars are drawn in its colour
BARS_UP_TO = 16
HIST_BINS = 24

COLUMNS = ("run · parameter", "value", ".grad", "+ backward", "was in .grad", "optimizer state")
# The headers as shown: two lines where the words are wider than the numbers below them.
HEADER_LABELS = ("run ·\nparameter", "value", ".grad", "+ backward", "was in\n.grad", "optimizer\nstate")
NAME, STATE = 0, len(COLUMNS) - 1
HEADER_TIPS = (
    "The run (colour and marker as in the other views) and the parameter's name",
    "The parameter's value now",
    "param.grad now: a tensor, or None when PyTorch holds no gradient (not the same as 0)",
    "What the last backward() added to .grad (since .grad was last cleared)",
    "What .grad already held before that backward(): None, zeros, or gradients left over",
    "The optimizer's state for this parameter: momentum buffer, Adam's moments m (exp_avg) and"
    " v (exp_avg_sq), step count; ‖…‖ is a tensor's norm (every element is in the cell's tooltip)",
)
# A run's cells while the record of the moment shown is rebuilt by replay (an op of the thinned past).
PENDING = "…"
PENDING_TIP = "Being rebuilt: the lab replays this op from the last state it kept"
STATE_NAMES = {"momentum_buffer": "momentum", "exp_avg": "m", "exp_avg_sq": "v"}
# The columns a lesson's quantities put first.
QUANTITY_COLUMNS = {"value": 1, "grad": 2, "fresh": 3, "stale": 4, "state": STATE}


@dataclass(frozen=True)
class Row:
    """One row of the inspector: a run's parameter, or a module's parameters together."""

    run: str
    name: str
    params: tuple[str, ...]
    lead: bool

    @property
    def group(self) -> bool:
        return self.params != (self.name,)


def inspector_rows(info: LabInfo) -> list[Row]:
    """The rows in the order shown: the lesson's parameters first, each in every run, then the rest."""
    lesson = info.scenario.lesson
    runs = lesson.order_runs([r.name for r in info.runs]) if lesson else [r.name for r in info.runs]
    names = info.runs[0].names
    rows: list[Row] = []
    taken: set[str] = set()
    for lead in lesson.params if lesson else ():
        members = (lead,) if lead in names else tuple(n for n in names if n.startswith(lead + "."))
        taken.update(members)
        rows += [Row(run, lead, members, True) for run in runs]
    # Where a whole module leads, the other modules are collapsed the same way below it.
    modules = any(r.group for r in rows)
    for run in runs:
        rest = [p for p in info.run(run).names if p not in taken]
        if not modules:
            rows += [Row(run, p, (p,), False) for p in rest]
            continue
        for module in dict.fromkeys(p.split(".")[0] for p in rest):
            members = tuple(p for p in rest if p.split(".")[0] == module)
            rows.append(Row(run, module, members, False))
    return rows


def _bytes(n: int) -> str:
    return f"{n:,} B" if n < 10_000 else f"{n / 1024:,.1f} KB"


def _weights_norm(state: Any) -> float:
    return _norm([v for v in state.params.values()])


def readout_text(moment: Moment) -> str:
    """Per run: lr, the weights' norm and the memory of parameters and ``.grad``, as PyTorch holds them.

    At a ``zero_grad()`` each is given before and after the call, which is what the
    myths about it get wrong: lr and the weights stay, only ``.grad`` changes.
    """
    lines = []
    for i, run in enumerate(moment.info.runs):
        now = moment.state(run.name)
        if now is None:
            continue
        rec = moment.op_record(run.name)
        before = moment.previous(run.name) if rec is not None else None
        lr = ", ".join(fmt.number(v) for v in now.lr.values())
        params, grads = _memory(now)
        head = f"<span style='color:{run_color(i)}'>{run_glyph(i)} {run.name}</span>"
        if rec is not None and rec.op == "zero_grad" and before is not None:
            old_lr = ", ".join(fmt.number(v) for v in before.lr.values())
            same = _weights_norm(before) == _weights_norm(now)
            old_grads = _memory(before)[1]
            lines.append(
                f"{head} at {_call(moment, rec)}: lr {old_lr} → {lr} · weights "
                f"{'unchanged' if same else 'changed'} · parameters {_bytes(params)} → {_bytes(params)}"
                f" · .grad {_bytes(old_grads)} → {_bytes(grads)}"
            )
        else:
            autograd = _autograd_text(now, iteration_peak(moment, run.name))
            lines.append(
                f"{head}: lr {lr} · ‖weights‖ {fmt.number(_weights_norm(now))} · parameters "
                f"{_bytes(params)} · .grad {_bytes(grads)}{autograd}"
            )
    return "<br>".join(lines)


def _nothing_added(back: Any) -> str:
    """Why a backward added nothing to a ``.grad``: it raised, or the parameter is not in its graph."""
    return "nothing (it raised)" if back.error else "nothing (not in this graph)"


def iteration_peak(moment: Moment, run: str, tick: int | None = None) -> int | None:
    """The most bytes ``run`` held saved for backward after any op of the iteration of ``tick``
    (default the moment's), up to that tick, read from its records' footprints."""
    from gradviz.engine.footprint import peak_saved

    tick = moment.tick if tick is None else tick
    if tick < 0:
        return None
    rt = moment.history.runs[run]
    start = rt.index_at(tick // moment.info.ticks_per_iteration * moment.info.ticks_per_iteration - 1) + 1
    stop = rt.index_at(tick) + 1
    return peak_saved(getattr(moment.history.record(run, j), "footprint", None) for j in range(start, stop))


def _autograd_text(state: Any, peak: int | None = None) -> str:
    """What autograd holds after the run's last op (and the most it held this iteration, ``peak``,
    where that was more) and, after a backward, how much graph it walked."""
    foot = getattr(state, "footprint", None)
    if foot is None:
        return ""
    # Exact bytes, so that two runs' counts compare at a glance (36,864 B beside 9,216 B).
    text = "" if foot.saved is None else f" · saved for backward {foot.saved:,} B"
    if foot.saved is not None and peak is not None and peak > foot.saved:
        text += f" (peak this iteration {peak:,} B)"
    if foot.nodes is not None:
        text += f" · backward() walked {foot.nodes:,} nodes"
    if foot.device_peak is not None:
        text += f" · CUDA peak {_bytes(foot.device_peak)}"
    return text


def _memory(state: Any) -> tuple[int, int]:
    """Bytes of the parameters and of every ``.grad`` (none for a ``None``) in a record or snapshot."""
    snap = getattr(state, "snapshot", state)
    return int(snap.param_flat.nbytes), int(snap.grad_flat.nbytes)


def _call(moment: Moment, rec: Any) -> str:
    source = moment.info.run(rec.run).source.splitlines()
    return source[rec.line - 1].strip() if 0 < rec.line <= len(source) else rec.op


def column_order(info: LabInfo) -> list[int]:
    """The columns in the order shown: the name, the lesson's quantities, then the rest."""
    lesson = info.scenario.lesson
    first = [QUANTITY_COLUMNS[q] for q in (lesson.show if lesson else ()) if q in QUANTITY_COLUMNS]
    return [NAME, *first, *(c for c in range(1, len(COLUMNS)) if c not in first)]


def _norm(values: list[Any]) -> float:
    total = 0.0
    for v in values:
        flat = np.asarray(v, dtype=np.float64).reshape(-1)
        total += float(flat.dot(flat))
    return float(np.sqrt(total))


def group_text(values: list[Any]) -> tuple[str, str]:
    """Several tensors as one cell: ``None`` when every one is, else their joint norm; and the kind."""
    present = [v for v in values if v is not None]
    if not present:
        return fmt.NONE_TEXT, "none"
    text = f"‖{fmt.number(_norm(present))}‖"
    if len(present) < len(values):
        text += f" ({len(values) - len(present)} of {len(values)} None)"
    return text, "norm"


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))


def state_tip(state: dict[str, Any]) -> str:
    """Every element of the optimizer state of one parameter, for its tooltip."""
    lines = []
    for key, value in state.items():
        shown = fmt.full(value) if isinstance(value, np.ndarray) else str(value)
        lines.append(f"{key}: {shown}")
    return "\n".join(lines) or "The optimizer holds no state for this parameter yet."


def group_state_tip(params: tuple[str, ...], states: tuple[dict[str, Any], ...]) -> str:
    """Every element of the optimizer state of a module's parameters, each under its name."""
    return "\n\n".join(f"{p}\n{state_tip(st)}" for p, st in zip(params, states, strict=True))


def state_text(state: dict[str, Any], manual: bool) -> str:
    """The optimizer state of one parameter as short text, one line per entry."""
    if manual:
        return "no optimizer"
    if not state:
        return "empty"
    parts = []
    for key, value in state.items():
        label = STATE_NAMES.get(key, key)
        if isinstance(value, np.ndarray) and value.size > 1:
            norm = fmt.finite_norm(value)
            parts.append(f"{label} ‖{'none finite' if norm is None else fmt.number(norm)}‖")
        elif isinstance(value, np.ndarray):
            parts.append(f"{label} {fmt.array(value)}")
        elif value is None:
            parts.append(f"{label} None")
        else:
            parts.append(f"{label} {fmt.number(float(value))}")
    return "\n".join(parts)


@dataclass(frozen=True)
class Colours:
    """A theme's colours as the delegate paints them, made once per theme rather than per cell."""

    theme: Theme
    highlight: QColor
    none_bg: QColor
    muted: QColor

    @classmethod
    def of(cls, theme: Theme) -> Colours:
        return cls(theme, QColor(theme.highlight), QColor(theme.none_bg), QColor(theme.muted))


def histogram(values: np.ndarray, bins: int) -> np.ndarray:
    """Counts of ``values`` (finite, at least one) in ``bins`` equal bins from their least to their
    greatest, as ``numpy.histogram`` counts them, at a tenth of its cost: a frame of Play draws
    several histograms of a large model's tensors."""
    low, high = float(values.min()), float(values.max())
    if low == high:  # numpy widens the range by a half each way: every value in the middle bin
        counts = np.zeros(bins, np.intp)
        counts[bins // 2] = values.size
        return counts
    at = ((values - low) * (bins / (high - low))).astype(np.intp)
    return np.bincount(np.minimum(at, bins - 1), minlength=bins)


@dataclass(frozen=True)
class VectorShapes:
    """What a vector cell draws, in order: its axis line, a bar or histogram bin per rect, and
    a "!" where an element is not finite; made when the values or the cell's size change."""

    values: Any  # the array drawn, held so that a new one (never the same object) is seen as new
    rect: QRect
    text: str | None  # what is written instead where no element is finite
    line: tuple[int, int, int, int] | None
    bars_first: bool  # a histogram's axis is drawn over its bins, bars are drawn over their axis
    shapes: tuple[tuple[bool, QRectF], ...]  # (a "!" mark, not a bar; where)

    @classmethod
    def of(cls, values: Any, rect: QRect) -> VectorShapes:
        flat = np.asarray(values, dtype=np.float64).reshape(-1)
        area = QRectF(rect.adjusted(6, 4, -6, -4))
        is_finite = np.isfinite(flat)
        finite = flat if is_finite.all() else flat[is_finite]
        if finite.size == 0:
            return cls(values, QRect(rect), "no finite values", None, False, ())
        shapes: list[tuple[bool, QRectF]] = []
        if flat.size <= BARS_UP_TO:
            scale = float(np.abs(finite).max()) or 1.0
            mid = area.center().y()
            w = area.width() / flat.size
            for i, v in enumerate(flat):
                if not np.isfinite(v):
                    shapes.append((True, QRectF(area.left() + i * w, area.top(), w, area.height())))
                    continue
                h = (area.height() / 2) * (v / scale)
                bar = QRectF(area.left() + i * w + 1, mid - max(h, 0), max(w - 2, 1), abs(h))
                shapes.append((False, bar))
            line = (int(area.left()), int(mid), int(area.right()), int(mid))
            return cls(values, QRect(rect), None, line, False, tuple(shapes))
        counts = histogram(finite, HIST_BINS)
        top = counts.max() or 1
        w = area.width() / HIST_BINS
        for i, c in enumerate(counts):
            h = area.height() * c / top
            shapes.append((False, QRectF(area.left() + i * w, area.bottom() - h, max(w - 1, 1), h)))
        line = (int(area.left()), int(area.bottom()), int(area.right()), int(area.bottom()))
        return cls(values, QRect(rect), None, line, True, tuple(shapes))

    def paint(self, painter: QPainter, area: QRectF, brush: QBrush) -> None:
        if self.text is not None:
            painter.drawText(area, int(Qt.AlignmentFlag.AlignVCenter), self.text)
            return
        if self.line is not None and not self.bars_first:
            painter.drawLine(*self.line)
        for mark, where in self.shapes:
            if mark:
                painter.drawText(where, 0x84, "!")
            else:
                painter.fillRect(where, brush)
        if self.line is not None and self.bars_first:
            painter.drawLine(*self.line)


class CellDelegate(QStyledItemDelegate):
    """Paints None cells, change highlights, and bars or histograms of vector values.

    A frame of Play paints every cell: what a cell needs is looked up once, colours are made
    once per theme and a vector's bars once per value, and cells of plain text are left to Qt.
    """

    def __init__(self, view: GradsView) -> None:
        super().__init__(view.table)
        self.view = view
        self._colours = Colours.of(view.theme)
        self.vectors: dict[tuple[int, int], VectorShapes] = {}  # (row, column) -> its bars

    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        theme = self.view.theme
        if self._colours.theme is not theme:
            self._colours = Colours.of(theme)
        colours = self._colours
        kind = index.data(KIND)
        changed = bool(index.data(CHANGED))
        rect = option.rect
        if changed:
            painter.fillRect(rect, colours.highlight)
        if kind == "none":
            painter.save()
            painter.fillRect(rect.adjusted(2, 2, -2, -2), colours.none_bg)
            font = QFont(option.font)
            font.setItalic(True)
            painter.setFont(font)
            painter.setPen(colours.muted)
            painter.drawText(rect.adjusted(8, 0, -4, 0), int(Qt.AlignmentFlag.AlignVCenter), fmt.NONE_TEXT)
            painter.restore()
            return
        values = index.data(VALUES) if kind == "array" else None
        if values is not None and np.size(values) > 1:
            key = (index.row(), index.column())
            shapes = self.vectors.get(key)
            if shapes is None or shapes.values is not values or shapes.rect != rect:
                shapes = self.vectors[key] = VectorShapes.of(values, rect)
            run = index.data(RUN)
            painter.save()
            painter.setPen(QPen(colours.muted))
            brush = QBrush(QColor(run_color(run) if isinstance(run, int) else theme.accent))
            shapes.paint(painter, QRectF(rect.adjusted(6, 4, -6, -4)), brush)
            painter.restore()
            return
        if kind != "na" and not changed:
            super().paint(painter, option, index)
            return
        opt = QStyleOptionViewItem(option)
        if kind == "na":
            opt.palette.setColor(opt.palette.ColorRole.Text, colours.muted)
        if changed:
            opt.state &= ~QStyle.StateFlag.State_Selected
        super().paint(painter, opt, index)

    def helpEvent(
        self,
        event: QHelpEvent,
        view: QAbstractItemView,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> bool:
        """A number's tooltip, every element of its value, and an optimizer state's, written when
        the pointer asks for it: written in every frame of Play they would cost more than the
        cells' own text."""
        if event.type() == QEvent.Type.ToolTip:
            tip = self.view.state_tips.get(index.row()) if index.column() == STATE else None
            if tip is not None:
                QToolTip.showText(event.globalPos(), tip(), view)
                return True
            if index.data(KIND) in ("array", "none"):
                QToolTip.showText(event.globalPos(), fmt.full(index.data(VALUES)), view)
                return True
        return super().helpEvent(event, view, option, index)

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        # Numbers and None take one line; a vector is drawn as bars in whatever room it gets.
        kind = index.data(KIND)
        if kind not in ("array", "none"):
            return super().sizeHint(option, index)
        fm = option.fontMetrics
        values = index.data(VALUES)
        text = fmt.NONE_TEXT if kind == "none" else str(index.data(Qt.ItemDataRole.DisplayRole) or "")
        vector = values is not None and np.size(values) > 1
        width = fm.horizontalAdvance("-0.0000") * 3 // 2 if vector else fm.horizontalAdvance(text)
        return QSize(width + 12, fm.height() + 8)


class GradsView(QWidget):
    """A table with one row per run and parameter; ``cell(run, param, column)`` reads it back."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme: Theme = LIGHT
        self.info: LabInfo | None = None
        self.rows: dict[tuple[str, str], int] = {}
        self.shown_rows: list[Row] = []
        self._layout_key: tuple | None = None  # what the column widths were last fitted to
        # row -> its optimizer state's tooltip, written when the pointer asks for it
        self.state_tips: dict[int, Callable[[], str]] = {}
        self._refit = False  # a cell changed what it shows since the widths were last fitted
        self._natural: list[int] | None = None  # each column's widest content when last fitted
        self.growing = False  # Play runs: the number columns only widen (see set_growing)
        # The text area's widths fitted to since the panel itself last changed size (see eventFilter).
        self._viewport_widths: list[int] = []
        self.title = QLabel(".grad inspector")
        self.title.setObjectName("panelTitle")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("gradsTable")
        self.table.setHorizontalHeaderLabels(list(HEADER_LABELS))
        for col, tip in enumerate(HEADER_TIPS):
            title = self.table.horizontalHeaderItem(col)
            assert title is not None  # set by setHorizontalHeaderLabels just above
            title.setToolTip(tip)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        # Names and optimizer state wrap at spaces when the panel is narrow; numbers never do.
        self.table.setWordWrap(True)
        self.table.setTextElideMode(Qt.TextElideMode.ElideNone)
        self.delegate = CellDelegate(self)
        self.table.setItemDelegate(self.delegate)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        # The viewport narrows when rows come to need a scroll bar: the widths are fitted again.
        self.table.viewport().installEventFilter(self)
        box = QVBoxLayout(self)
        box.setContentsMargins(4, 4, 4, 4)
        box.addWidget(self.title)
        # What a lesson about zero_grad() myths leads with: lr, the weights and the memory.
        self.readout = QLabel("")
        self.readout.setObjectName("readout")
        self.readout.setWordWrap(True)
        self.readout.setVisible(False)
        box.addWidget(self.readout)
        box.addWidget(self.table, 1)

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.table.viewport().update()

    def set_lab(self, info: LabInfo) -> None:
        """One row per run and parameter of the new lab (or module, where the lesson groups them)."""
        self.info = info
        self.rows = {}
        self.state_tips = {}
        self.delegate.vectors.clear()
        self.shown_rows = inspector_rows(info)
        self.table.setRowCount(len(self.shown_rows))
        header = self.table.horizontalHeader()
        for visual, logical in enumerate(column_order(info)):
            header.moveSection(header.visualIndex(logical), visual)
        for row, r in enumerate(self.shown_rows):
            run, param = r.run, r.name
            self.rows[(run, param)] = row
            i = info.run_index(run)
            shapes = dict(zip(info.runs[i].names, info.runs[i].shapes, strict=True))
            shown = f"{param}.*" if r.group else param
            label = f"{run_glyph(i)} {run} · {shown}" if len(info.runs) > 1 else f"{run_glyph(i)} {shown}"
            item = QTableWidgetItem(label)
            item.setForeground(QColor(run_color(i)))
            if r.lead:
                font = item.font()
                font.setBold(True)
                item.setFont(font)
            tip = ", ".join(f"{p} {list(shapes[p])}" for p in r.params)
            item.setToolTip(f"run {run}: {tip}" + ("; values are norms ‖…‖ over them all" if r.group else ""))
            item.setData(KIND, "text")
            self.table.setItem(row, 0, item)
            for col in range(1, len(COLUMNS)):
                cell = QTableWidgetItem("")
                cell.setData(RUN, i)
                self.table.setItem(row, col, cell)
        self.fit_columns()

    def fit_columns(self) -> None:
        """Size the columns to what they show and share the panel's width among them.

        Numbers never wrap. Where the panel is narrow, names wrap after their
        run first, then vectors are drawn narrower, and the optimizer state
        wraps last, so that every column stays in view without scrolling
        sideways wherever that can be done.
        """
        self._layout_key = None
        self._viewport_widths = []
        self._fit()

    def _fit(self) -> None:
        fm = self.table.fontMetrics()
        header = [max(fm.horizontalAdvance(line) + 16 for line in text.split("\n")) for text in HEADER_LABELS]
        # The least each column can take: a name wrapped after its run, a number (vectors
        # are drawn as bars in whatever room they get); the state wraps or scrolls last.
        least = [max(header[NAME], *(fm.horizontalAdvance(part + " ·") + 12 for part in self._name_parts()))]
        least += [max(header[col], fm.horizontalAdvance("-0.0000") + 12) for col in range(NAME + 1, STATE)]
        option = QStyleOptionViewItem()
        option.initFrom(self.table)
        natural = [max([header[col], *self._content_widths(col, option)]) for col in range(len(COLUMNS))]
        natural[NAME + 1 : STATE] = map(max, natural[NAME + 1 : STATE], least[NAME + 1 :])
        if self.growing and self._natural is not None:
            natural[NAME + 1 : STATE] = map(max, natural[NAME + 1 : STATE], self._natural[NAME + 1 : STATE])
        lines = [self._lines(row) for row in range(self.table.rowCount())]
        self._natural = natural
        key = (tuple(natural), tuple(lines), self.table.viewport().width(), self._widest_word(STATE))
        if key == self._layout_key:
            return
        self._layout_key = key
        room = self.table.viewport().width()
        hidden: list[int] = []
        widths = self._widths(natural, least, room, hidden)
        # Too narrow even so (presentation type in half a screen): leave out the columns
        # the lesson does not lead with, last shown first, rather than cut one.
        for col in self._droppable():
            if widths is not None:
                break
            hidden.append(col)
            widths = self._widths(natural, least, room, hidden)
        if widths is None:
            widths = self._widths(natural, least, 10**6, hidden) or natural
        with self._resized_in_this_paint():
            for col in range(len(COLUMNS)):
                self.table.setColumnHidden(col, col in hidden)
            for col, width in enumerate(widths):
                self.table.setColumnWidth(col, width)
            self.table.resizeRowsToContents()

    @contextmanager
    def _resized_in_this_paint(self) -> Iterator[None]:
        """Resize columns and rows so that the frame's one paint shows them.

        QTableView answers each section resized with a zero timer that lays out and
        repaints once the frame is already painted: a second paint of the whole table
        in every frame whose numbers widened a column. The headers' signals are held
        while resizing, and that layout and repaint are asked for here instead.
        """
        table = self.table
        headers = (table.horizontalHeader(), table.verticalHeader())
        before = self._section_sizes()
        held = [header.blockSignals(True) for header in headers]
        try:
            yield
        finally:
            for header, was in zip(headers, held, strict=True):
                header.blockSignals(was)
        if self._section_sizes() != before:
            table.updateGeometries()
            table.viewport().update()

    def _section_sizes(self) -> tuple[list[int], list[int]]:
        """Each column's width (0 when hidden) and each row's height as laid out now."""
        table = self.table
        widths = [0 if table.isColumnHidden(c) else table.columnWidth(c) for c in range(table.columnCount())]
        return widths, self.row_heights()

    def _droppable(self) -> list[int]:
        """Columns that may be left out when the table is too narrow: not the name, not .grad,
        not what the lesson leads with; the last shown goes first."""
        header = self.table.horizontalHeader()
        lesson = self.info.scenario.lesson if self.info is not None else None
        lead = {QUANTITY_COLUMNS[q] for q in (lesson.show if lesson else ()) if q in QUANTITY_COLUMNS}
        order = [header.logicalIndex(v) for v in range(len(COLUMNS))]
        return [c for c in reversed(order) if c not in (NAME, 2) and c not in lead]

    def _widths(self, natural: list[int], least: list[int], room: int, hidden: list[int]) -> list[int] | None:
        """Widths of every column that fit ``room`` with ``hidden`` left out; None when they cannot."""
        shown = [c for c in range(len(COLUMNS)) if c not in hidden]
        widths = [0 if c in hidden else natural[c] for c in range(len(COLUMNS))]
        over = sum(widths) - room
        middle = [c for c in shown if NAME < c < STATE]
        for cols in ([NAME], middle):  # names wrap first, then vectors narrow
            spare = sum(widths[c] - least[c] for c in cols)
            if over <= 0 or spare <= 0:
                continue
            take = min(over, spare)
            for c in cols:
                widths[c] -= (widths[c] - least[c]) * take // spare
            over -= take
        state = self._widest_word(STATE) if STATE in shown else 0
        if sum(widths[c] for c in shown if c != STATE) + state > room:
            return None
        # Room to spare goes to words in the number columns ("nothing (not in this graph)"),
        # so they read on one line; the state keeps its own natural width.
        spare = room - sum(widths[c] for c in shown if c != STATE) - (natural[STATE] if STATE in shown else 0)
        for col in middle:
            grow = min(max(self._words_width(col) - widths[col], 0), max(spare, 0))
            widths[col] += grow
            spare -= grow
        if STATE in shown:
            # The state takes the rest, wherever the lesson placed it, wrapping at spaces.
            widths[STATE] = max(room - sum(widths[c] for c in shown if c != STATE), state)
        return widths

    def _words_width(self, col: int) -> int:
        """The width the words (not numbers) of ``col`` take on one line."""
        fm = self.table.fontMetrics()
        texts = [self.table.item(r, col) for r in range(self.table.rowCount())]
        return max(
            (fm.horizontalAdvance(t.text()) + 12 for t in texts if t is not None and t.data(KIND) == "na"),
            default=0,
        )

    def _widest_word(self, col: int) -> int:
        """The width of the widest word in ``col``: less and a cell could not wrap to fit."""
        fm = self.table.fontMetrics()
        words = [""]
        for row in range(self.table.rowCount()):
            item = self.table.item(row, col)
            if item is not None:
                words += item.text().split()
        # Nor narrower than its header's longest word ("optimizer"): a cut title reads as a defect.
        head = self.table.horizontalHeader().fontMetrics()
        title = max(head.horizontalAdvance(w) for w in HEADER_LABELS[col].split()) + 16
        return max(max(fm.horizontalAdvance(w) for w in words) + 12, title)

    def _content_widths(self, col: int, option: QStyleOptionViewItem) -> list[int]:
        """The widths the cells of ``col`` ask for on one line."""
        fm = self.table.fontMetrics()
        delegate = self.table.itemDelegate()
        widths = []
        for row in range(self.table.rowCount()):
            item = self.table.item(row, col)
            if item is None:
                continue
            if NAME < col < STATE:  # numbers; words here ("nothing (not in this graph)") wrap
                if item.data(KIND) in ("array", "none"):
                    widths.append(delegate.sizeHint(option, self.table.indexFromItem(item)).width())
                elif item.data(KIND) == "norm":
                    widths.append(fm.horizontalAdvance(item.text()) + 12)
            else:
                widths += [fm.horizontalAdvance(line) + 12 for line in item.text().split("\n")]
        return widths

    def _name_parts(self) -> list[str]:
        """Each name cell's run and parameter, the pieces a wrapped name keeps on one line."""
        parts = []
        for row in range(self.table.rowCount()):
            item = self.table.item(row, NAME)
            if item is not None:
                parts += item.text().split(" · ")
        return parts or [""]

    def _lines(self, row: int) -> int:
        item = self.table.item(row, STATE)
        return 0 if item is None else item.text().count("\n")

    def set_growing(self, on: bool) -> None:
        """While ``on`` (Play runs) the number columns only widen, so that a column does not
        narrow and widen again from frame to frame with its digits, moving every column after
        it; turned off, each column fits what it shows again at once."""
        self.growing = on
        if not on and self._natural is not None:
            self._fit()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._viewport_widths = []
        self._fit()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Resize and watched is self.table.viewport():
            # The text area narrows and widens by itself as a scroll bar comes and goes. Where the
            # rows one width lays out bring the bar and the other width's take it away, each fit
            # would undo the last for ever: back at the width before last, the layout stays.
            width = cast(QResizeEvent, event).size().width()
            seen = self._viewport_widths
            if len(seen) == 2 and seen[0] == width != seen[1]:
                return False
            self._viewport_widths = [*seen[-1:], width]
            self._fit()
        return False

    # ---------------------------------------------------------------- draw
    def _set(self, row: int, col: int, value: Any, kind: str, changed: bool, text: str | None = None) -> None:
        item = self.table.item(row, col)
        assert item is not None  # every cell is filled when the rows are built
        if kind == "none":
            shown = fmt.NONE_TEXT
        elif kind == "array":
            shown = fmt.array(value)
        else:
            shown = text or ""
        values = value if kind == "array" else None
        old_kind, old = item.data(KIND), item.data(VALUES)
        if (item.text() != shown or old_kind != kind) and self._needs_refit(
            col, (old_kind, item.text(), old), (kind, shown, values)
        ):
            self._refit = True
        if item.text() != shown:
            item.setText(shown)
            if kind not in ("array", "none"):
                item.setToolTip(shown)
        if (
            old_kind != kind
            or item.data(CHANGED) != bool(changed)
            or (old is None) != (values is None)
            or (values is not None and not _same(old, values))
        ):
            # setData repaints the cell: only when something shown changed.
            item.setData(KIND, kind)
            item.setData(VALUES, values)
            item.setData(CHANGED, bool(changed))

    def _needs_refit(self, col: int, was: tuple[Any, str, Any], now: tuple[Any, str, Any]) -> bool:
        """Whether a cell of ``col`` going from ``was`` to ``now`` (kind, text, values) may change
        the widths or the rows' heights: a number's new digits mostly take the room the old did.
        """
        if not NAME < col < STATE or self._natural is None:
            return True  # names and the optimizer's state wrap: their words count
        after = self._number_width(*now)
        if after is None:
            return True  # words, which wrap
        # The column grows for a wider number, and (paused) may shrink when its widest one narrows.
        if after > self._natural[col]:
            return True
        if self.growing:
            return False
        before, room = self._number_width(*was), self._natural[col]
        return before is None or (before >= room and after < before)

    def _number_width(self, kind: Any, text: str, values: Any) -> int | None:
        """The width a number cell asks for (as :meth:`_content_widths` measures it), None for words
        that may wrap."""
        fm = self.table.fontMetrics()
        if kind in ("array", "none"):
            vector = values is not None and np.size(values) > 1
            return (fm.horizontalAdvance("-0.0000") * 3 // 2 if vector else fm.horizontalAdvance(text)) + 12
        if kind == "norm":
            return fm.horizontalAdvance(text) + 12
        # Other words are left out of the widths; one that cannot wrap leaves the rows' heights too.
        return 0 if " " not in text and "\n" not in text else None

    def draw(self, moment: Moment) -> None:
        """Fill every row with the state of its run at ``moment``."""
        if self.info is None:
            return
        lesson = self.info.scenario.lesson
        shown = lesson is not None and (lesson.leads("lr") or lesson.leads("memory"))
        self.readout.setVisible(shown)
        if shown:
            text = readout_text(moment)
            if text != self.readout.text():
                self.readout.setText(text)
        for run in self.info.runs:
            now = moment.state(run.name)
            if now is None:  # the moment's record is being rebuilt by replay on the lab's thread
                self._show_pending(run.name)
                continue
            before = moment.previous(run.name) if moment.op_record(run.name) is not None else now
            back = moment.last_backward(run.name)
            manual = run.spec.optimizer.kind == "manual"
            for r in self.shown_rows:
                if r.run != run.name:
                    continue
                row = self.rows[(r.run, r.name)]
                if r.group:
                    self._draw_group(row, r.params, now, before, back, manual)
                else:
                    just = back is not None and back.tick == moment.tick
                    self._draw_param(row, r.name, now, before, back, manual, just)
        if self._refit:  # new text may need other widths or taller rows
            self._refit = False
            self._fit()

    def _show_pending(self, run: str) -> None:
        """Show a run's cells as waiting: until its record comes, no numbers of another moment."""
        for r in self.shown_rows:
            if r.run != run:
                continue
            row = self.rows[(r.run, r.name)]
            for col in range(NAME + 1, len(COLUMNS)):
                self._set(row, col, None, "na", False, PENDING)
            self.state_tips[row] = lambda: PENDING_TIP

    def _draw_param(
        self, row: int, param: str, now: Any, before: Any, back: Any, manual: bool, just: bool
    ) -> None:
        value = now.params.get(param)
        self._set(row, 1, value, "array", before is not None and not _same(value, before.params.get(param)))
        grad = now.grads.get(param)
        g_changed = before is not None and not _same(grad, before.grads.get(param))
        self._set(row, 2, grad, "none" if grad is None else "array", g_changed)
        if back is None:
            self._set(row, 3, None, "na", False, "—")
            self._set(row, 4, None, "na", False, "—")
        else:
            fresh = (back.fresh_grads or {}).get(param)
            stale = (back.stale_grads or {}).get(param)
            if fresh is None:
                self._set(row, 3, None, "na", False, _nothing_added(back))
            else:
                self._set(row, 3, fresh, "array", just)
            self._set(row, 4, stale, "none" if stale is None else "array", False)
        state = now.state.get(param, {})
        text = state_text(state, manual)
        old = before.state.get(param, {}) if before is not None else {}
        self._set(row, STATE, None, "text", state_text(old, manual) != text, text)
        self._tip_state(row, None if manual else partial(state_tip, state))

    def _draw_group(
        self, row: int, params: tuple[str, ...], now: Any, before: Any, back: Any, manual: bool
    ) -> None:
        """A module's parameters in one row: joint norms, and None only where every ``.grad`` is."""

        def cell(col: int, values: list[Any], old: list[Any] | None, empty: str | None = None) -> None:
            text, kind = group_text(values)
            if empty is not None and kind == "none":
                text, kind = empty, "na"
            changed = old is not None and group_text(old) != (text, kind)
            self._set(row, col, None, kind, changed, text)

        cell(
            1, [now.params.get(p) for p in params], [before.params.get(p) for p in params] if before else None
        )
        cell(2, [now.grads.get(p) for p in params], [before.grads.get(p) for p in params] if before else None)
        if back is None:
            self._set(row, 3, None, "na", False, "—")
            self._set(row, 4, None, "na", False, "—")
        else:
            cell(3, [(back.fresh_grads or {}).get(p) for p in params], None, _nothing_added(back))
            cell(4, [(back.stale_grads or {}).get(p) for p in params], None)
        parts: dict[str, list[Any]] = {}
        for p in params:
            for key, value in now.state.get(p, {}).items():
                parts.setdefault(key, []).append(value)
        # Adam's step count, the same for every tensor, is left to the tooltip.
        lines = [f"{STATE_NAMES.get(k, k)} {group_text(v)[0]}" for k, v in parts.items() if k != "step"]
        text = "no optimizer" if manual else "\n".join(lines) or "empty"
        self._set(row, STATE, None, "text", False, text)
        states = tuple(now.state.get(p, {}) for p in params)
        self._tip_state(row, None if manual else partial(group_state_tip, params, states))

    def _tip_state(self, row: int, tip: Callable[[], str] | None) -> None:
        """The row's optimizer-state tooltip: ``tip``, or without one (no optimizer) the cell's text."""
        if tip is None:
            self.state_tips.pop(row, None)
        else:
            self.state_tips[row] = tip

    # ---------------------------------------------------------------- frames
    def set_still(self) -> None:
        """For frames that cannot be scrolled: no scroll bars, so the columns keep one width
        however many rows are in sight, and rows wrapped at that width keep their heights."""
        self.table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

    def content_height(self, rows: int | None = None) -> int:
        """The height that shows the first ``rows`` rows (all when None) unscrolled, at the width now."""
        table = self.table
        shown = [r for r in range(table.rowCount())[:rows] if not table.isRowHidden(r)]
        chrome = self.height() - table.viewport().height()
        return chrome + sum(table.rowHeight(r) for r in shown)

    def whole_rows_height(self, height: int) -> int:
        """The tallest height up to ``height`` that ends on a row's edge: no row is shown cut in half."""
        rows = [r for r in range(self.table.rowCount()) if not self.table.isRowHidden(r)]
        fit = self.content_height(0)
        for count in range(1, len(rows) + 1):
            need = self.content_height(count)
            if need > height:
                break
            fit = need
        return max(fit, min(height, self.content_height(1)))

    def row_heights(self) -> list[int]:
        """Each row's height as laid out now."""
        return [self.table.rowHeight(row) for row in range(self.table.rowCount())]

    def hold_rows(self, heights: list[int]) -> None:
        """Give the rows ``heights`` again (a draw fits them to its own content)."""
        for row, height in enumerate(heights):
            if self.table.rowHeight(row) != height:
                self.table.setRowHeight(row, height)

    def cell(self, run: str, param: str, column: str) -> QTableWidgetItem:
        """The item shown for ``run``'s ``param`` in the column headed ``column``."""
        item = self.table.item(self.rows[(run, param)], COLUMNS.index(column))
        assert item is not None
        return item
