"""A lesson in the window: stop by stop, a question before the op, PyTorch's answer after it.

:class:`LessonPanel` shows the stop's caption, its questions with clickable
choices (or a box for a number), and after the reveal the right answer, why a
wrong one is wrong, and the real numbers. :class:`LessonRunner` moves the
controller from stop to stop: it plays the ops in between at the set speed,
stops just before the stop's op while the question is up, performs the op on
the reveal, and asks the lab for the answers (computed from its records by
:mod:`gradviz.engine.quiz`, on the lab's own thread).
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from gradviz.gui.controller import Controller

HINT = (
    "1–5 or a–e: choose · Enter: reveal · Page Down: the rest of the answers, then the next stop"
    " · Page Up: back · Ctrl+L: end the lesson"
)


# After the reveal: the right choice, and a wrong one that was chosen.
MARKS = ("   ✓", "   ✗")


class _Choice(QLabel):
    """One choice: a framed, wrapping line of text that is picked by a click (or its key)."""

    clicked = Signal(int)

    def __init__(self, index: int, text: str, parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.index = index
        self.setObjectName("lessonChoice")
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setWordWrap(True)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.set_state(False)

    def set_state(self, chosen: bool, correct: bool = False, revealed: bool = False) -> None:
        # The frame's weight and a mark say which is chosen and which is right, not colour alone.
        width = 3 if chosen else 1
        mark = MARKS[0] if correct else MARKS[1] if revealed and chosen else ""
        self.setStyleSheet(
            f"QLabel {{ border: {width}px solid palette(mid); border-radius: 4px; padding: 4px 8px; }}"
        )
        base = self.text()
        for old in MARKS:
            base = base.removesuffix(old)
        self.setText(base + mark)

    def mousePressEvent(self, event: Any) -> None:
        self.clicked.emit(self.index)


class _QuestionBox(QWidget):
    """One question: its text and its choices (buttons, one checked) or a box for a number."""

    def __init__(self, question: Any, number: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.question = question
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 4, 0, 4)
        ask = QLabel(f"<b>Q{number}.</b> {escape(question.ask, quote=False)}")
        ask.setTextFormat(Qt.TextFormat.RichText)
        ask.setWordWrap(True)
        ask.setObjectName("lessonQuestion")
        box.addWidget(ask)
        self.choices: list[_Choice] = []
        self.chosen: int | None = None
        self.locked = False
        self.entry: QLineEdit | None = None
        if question.kind == "number":
            self.entry = QLineEdit()
            self.entry.setObjectName("lessonNumber")
            self.entry.setPlaceholderText("type a number, then Enter")
            box.addWidget(self.entry)
        else:
            for i, (label, choice) in enumerate(zip(question.labels, question.choices, strict=True)):
                item = _Choice(i, f"{label})  {choice.text}", self)
                item.clicked.connect(self.choose)
                self.choices.append(item)
                box.addWidget(item)
        self.result = QLabel("")
        self.result.setTextFormat(Qt.TextFormat.RichText)
        self.result.setWordWrap(True)
        self.result.setObjectName("lessonResult")
        self.result.setVisible(False)
        box.addWidget(self.result)

    def answer(self) -> str | int | None:
        """The answer given so far: a choice index, the typed text, or None."""
        if self.entry is not None:
            text = self.entry.text().strip()
            return text or None
        return self.chosen

    def choose(self, index: int) -> bool:
        if self.locked or not 0 <= index < len(self.choices):
            return False
        self.chosen = index
        for item in self.choices:
            item.set_state(item.index == index)
        return True

    def show_reveal(self, reveal: Any) -> None:
        # The right choice is marked above: its letter names it, its text is not said twice.
        right = [self.question.labels[i] + ")" for i in reveal.correct] if self.choices else []
        answer = escape(" ".join(right) or reveal.answer, quote=False)
        text = reveal_text(reveal.right, reveal.answered, reveal.explanation, answer, reveal.facts)
        self.result.setText(text)
        self.result.setVisible(True)
        self.locked = True
        for item in self.choices:
            item.set_state(item.index == self.chosen, item.index in reveal.correct, revealed=True)
        if self.entry is not None:
            self.entry.setEnabled(False)


def reveal_text(right: bool, answered: bool, explanation: str, answer: str, facts: Any) -> str:
    """A reveal as rich text: correct, or why the answer was wrong and the right one; the real numbers."""
    if right:
        head = "<b>Correct.</b>"
    elif not answered:
        head = f"<b>The answer:</b> {answer}"
    else:
        head = f"<b>Not quite:</b> {escape(explanation, quote=False)}<br><b>The answer:</b> {answer}"
    items = "".join(f"<li>{escape(f, quote=False)}</li>" for f in facts)
    return head + (f"<br>In the real run:<ul>{items}</ul>" if items else "")


class LessonPanel(QWidget):
    """The lesson's stop, its questions, and after the reveal what the real run says."""

    # What it shows changed (a stop, a reveal, the end): the room it needs may have too.
    content_changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("lessonPanel")
        # Focus sits here during a lesson, so the choice letters reach the window's
        # shortcuts rather than a combo box's search.
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.title = QLabel("")
        self.title.setObjectName("panelTitle")
        self.caption = QLabel("")
        self.caption.setWordWrap(True)
        self.caption.setObjectName("lessonCaption")
        self.questions: list[_QuestionBox] = []
        # Questions and reveals scroll inside the panel when they outgrow the screen.
        inner = self._questions = QWidget()
        self.body = QVBoxLayout(inner)
        self.body.setContentsMargins(0, 0, 0, 0)
        self.body.addStretch(1)
        self.questions_area = QScrollArea()
        self.questions_area.setWidget(inner)
        self.questions_area.setWidgetResizable(True)
        self.questions_area.setFrameShape(QFrame.Shape.NoFrame)
        self.questions_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.hint = QLabel(HINT)
        self.hint.setObjectName("status")
        self.hint.setWordWrap(True)
        head = QHBoxLayout()
        head.addWidget(self.title, 1)
        box = self._box = QVBoxLayout(self)
        box.setContentsMargins(8, 4, 8, 4)
        box.addLayout(head)
        box.addWidget(self.caption)
        box.addWidget(self.questions_area, 1)
        box.addWidget(self.hint)
        self.title.setWordWrap(True)

    def _clear(self) -> None:
        for q in self.questions:
            self.body.removeWidget(q)
            q.hide()  # until Qt deletes it, it would still be drawn under the new questions
            q.deleteLater()
        self.questions = []

    def show_stop(self, index: int, count: int, placed: Any) -> None:
        """Stop ``index`` of ``count``: where it is, its caption, and its questions, unanswered."""
        self._clear()
        self.title.setText(f"Lesson · stop {index + 1} of {count}<br>{escape(placed.label, quote=False)}")
        self.caption.setText(placed.stop.caption)
        for i, question in enumerate(placed.stop.questions):
            q = _QuestionBox(question, i + 1, self)
            self.body.insertWidget(self.body.count() - 1, q)
            self.questions.append(q)
        first = self.current()
        if self.isVisible():  # a panel only measured takes no focus from the one shown
            (first.entry if first is not None and first.entry is not None else self).setFocus()
        self.questions_area.verticalScrollBar().setValue(0)
        self.content_changed.emit()

    def show_end(self, score: int, total: int) -> None:
        self._clear()
        self.title.setText("Lesson · the end")
        self.caption.setText(f"Score: {score} of {total}. Ctrl+L ends the lesson; Page Up goes back a stop.")
        self.content_changed.emit()

    def current(self) -> _QuestionBox | None:
        """The first question still without an answer (else the last one)."""
        for q in self.questions:
            if q.answer() is None:
                return q
        return self.questions[-1] if self.questions else None

    def choose(self, index: int) -> bool:
        """Choose choice ``index`` of the current question; False when there is none to choose."""
        q = self.current()
        if q is None or q.entry is not None or not q.choose(index):
            return False
        following = self.current()
        if following is not None and following is not q:
            self.show_whole(following)  # the room reads the next question and its choices in full
        return True

    def show_whole(self, widget: QWidget) -> None:
        """Scroll so that ``widget`` (a question, or its answer) is in view, all of it where it fits."""
        self.questions_area.ensureWidgetVisible(widget, 0, 0)

    def page(self) -> bool:
        """Bring the next answer not wholly in view to the top (the clicker's next, after a reveal).

        False when every answer has been in view: the next stop may come.
        """
        bar = self.questions_area.verticalScrollBar()
        if bar.value() >= bar.maximum():
            return False
        seen = self.questions_area.viewport().height()
        for q in self.questions:
            box = q.result.geometry().translated(q.pos())
            if box.bottom() > bar.value() + seen:
                bar.setValue(box.top() if box.top() > bar.value() else bar.value() + seen)
                return True
        bar.setValue(bar.maximum())
        return True

    def answers(self) -> list[Any]:
        return [q.answer() for q in self.questions]

    def show_reveals(self, reveals: tuple[Any, ...]) -> None:
        for q, r in zip(self.questions, reveals, strict=False):
            q.show_reveal(r)
        self.content_changed.emit()
        # From the first question down; where the answers outgrow the panel, the clicker's next
        # brings each into view in turn.
        self.questions_area.verticalScrollBar().setValue(0)

    def set_presenting(self, on: bool) -> None:
        """In presentation mode the keys' hint gives its room to the questions: a clicker needs none."""
        self.hint.setVisible(not on)

    def height_for(self, width: int) -> int:
        """The height that shows the stop, its questions and their reveals unscrolled at ``width``."""
        margins = self._box.contentsMargins()
        inner = max(width - margins.left() - margins.right(), 1)
        # Measured beside a scroll bar: a panel that fits only without one would keep one it once needed.
        bar = self.questions_area.verticalScrollBar().sizeHint().width()
        parts: list[tuple[QWidget, int]] = [(self.title, inner), (self.caption, inner)]
        parts.append((self._questions, max(inner - bar, 1)))
        if self.hint.isVisibleTo(self):
            parts.append((self.hint, inner))
        spacing = self._box.spacing() * (len(parts) - 1)
        return margins.top() + margins.bottom() + spacing + sum(w.heightForWidth(at) for w, at in parts)

    def lesson_width(self, stops: tuple[Any, ...], low: int, high: int, height: int) -> int:
        """The narrowest width from ``low`` to ``high`` at which every stop's questions read unscrolled.

        Each stop is measured with its caption and its questions, unanswered: a panel this
        wide keeps its width from stop to stop, so the views beside it keep still. (A reveal's
        real numbers are known only once its op has run; the window widens the panel for
        them only as far as one answer needs to be read whole.)
        """
        probe = LessonPanel(self.parentWidget())
        probe.hide()
        probe.hint.setVisible(self.hint.isVisibleTo(self))
        probe.ensurePolished()
        try:
            widest = low
            for i, placed in enumerate(stops):
                probe.show_stop(i, len(stops), placed)
                widest = probe.least_width(widest, high, lambda w: probe.reads_at(w, height))
            return widest
        finally:
            probe.deleteLater()

    def reads_at(self, width: int, height: int) -> bool:
        """Whether all of it reads unscrolled at ``width`` in ``height``."""
        return self.height_for(width) <= height and self._across(width)

    def _across(self, width: int) -> bool:
        """Whether no question, choice or answer is wider than the questions' view at ``width``."""
        margins = self._box.contentsMargins()
        bar = self.questions_area.verticalScrollBar().sizeHint().width()
        return width - margins.left() - margins.right() - bar >= self._questions.minimumSizeHint().width()

    def answers_fit(self, width: int, height: int) -> bool:
        """Whether at ``width`` each revealed answer, on its own, fits the questions' view in ``height``."""
        if not self._across(width):
            return False
        margins = self._box.contentsMargins()
        inner = max(width - margins.left() - margins.right(), 1)
        bar = self.questions_area.verticalScrollBar().sizeHint().width()
        above = [w.heightForWidth(inner) for w in (self.title, self.caption)]
        if self.hint.isVisibleTo(self):
            above.append(self.hint.heightForWidth(inner))
        room = height - margins.top() - margins.bottom() - sum(above) - self._box.spacing() * len(above)
        shown = [q.result for q in self.questions if not q.result.isHidden()]
        return all(r.heightForWidth(max(inner - bar, 1)) <= room for r in shown)

    def least_width(self, low: int, high: int, fits: Callable[[int], bool]) -> int:
        """The narrowest width from ``low`` to ``high`` at which ``fits`` holds (else ``high``)."""
        if not fits(high):
            return high
        if fits(low):
            return low
        while high - low > 4:
            mid = (low + high) // 2
            if fits(mid):
                high = mid
            else:
                low = mid
        return high


class LessonRunner(QObject):
    """Moves a controller through a lesson's stops; the window routes the clicker's keys here."""

    finished = Signal()

    def __init__(self, controller: Controller, panel: LessonPanel) -> None:
        super().__init__(panel)
        self.controller = controller
        self.panel = panel
        self.active = False
        self.index = -1
        self.revealed = False
        self._pending: int | None = None  # a stop whose reveal waits for its op to be performed
        self.results: dict[int, tuple[int, int]] = {}  # stop -> (right, asked), the latest try
        controller.changed.connect(self._on_changed)
        controller.revealed.connect(self._on_revealed)

    @property
    def stops(self) -> tuple[Any, ...]:
        info = self.controller.info
        return info.stops if info is not None else ()

    def start(self) -> bool:
        """Begin at the first stop; False when the scenario has no lesson stops."""
        if not self.stops:
            return False
        self.active = True
        self.index = -1
        self.results = {}
        self.controller.pause()
        self.controller.seek(-1)
        self.panel.show()
        self.next()
        return True

    def stop(self) -> None:
        self.active = False
        self._pending = None
        self.panel.hide()

    @property
    def score(self) -> tuple[int, int]:
        """Right answers and questions revealed so far (a stop asked again counts once)."""
        return sum(r for r, _ in self.results.values()), sum(n for _, n in self.results.values())

    @property
    def hides_future(self) -> bool:
        """Whether the views draw nothing after the moment shown (the stop says so, by default)."""
        return self.active and 0 <= self.index < len(self.stops) and self.stops[self.index].stop.hide_future

    @property
    def asking(self) -> bool:
        """True while a question is up, waiting for its reveal."""
        return (
            self.active
            and not self.revealed
            and 0 <= self.index < len(self.stops)
            and bool(self.stops[self.index].stop.questions)
        )

    def next(self) -> None:
        """The clicker's next: reveal the stop's answers if asked, else go on to the next stop."""
        if not self.active:
            return
        if self.asking:
            self.reveal()
            return
        if self.revealed and self.panel.page():
            return  # answers below the panel's edge come into view before the next stop
        if self.index + 1 >= len(self.stops):
            self.index = len(self.stops)
            self.panel.show_end(*self.score)
            return
        self.index += 1
        self._go_to(self.index)

    def previous(self) -> None:
        """Back to the previous stop (its questions asked again); history replays, nothing is recomputed."""
        if not self.active:
            return
        self.index = max(0, min(self.index, len(self.stops)) - 1)
        self._go_to(self.index)

    def _go_to(self, index: int) -> None:
        placed = self.stops[index]
        self.revealed = not placed.stop.questions
        self._pending = None
        self.panel.show_stop(index, len(self.stops), placed)
        # Asked just before the stop's op; a stop without questions shows the moment after it.
        target = placed.tick - 1 if placed.stop.questions else placed.tick
        c = self.controller
        if c.cursor > target:
            c.pause()
            c.seek(target)
        else:
            c.play_until(target)

    def choose(self, index: int) -> bool:
        return self.asking and self.panel.choose(index)

    def reveal(self) -> None:
        """Perform the stop's op, then ask the lab for the answers from its records."""
        if not self.asking:
            return
        placed = self.stops[self.index]
        self.revealed = True
        self._pending = self.index
        if self.controller.cursor >= placed.tick:
            self._request()
        else:
            self.controller.play_until(placed.tick)

    def _on_changed(self) -> None:
        if self._pending is not None and self.controller.cursor >= self.stops[self._pending].tick:
            self._request()

    def _request(self) -> None:
        index, self._pending = self._pending, None
        if index is not None:
            self.controller.request_reveal(index, self.panel.answers())

    def _on_revealed(self, result: Any) -> None:
        index, reveals = result
        if not self.active or index != self.index:
            return
        self.panel.show_reveals(reveals)
        self.results[index] = (sum(1 for r in reveals if r.right), len(reveals))
