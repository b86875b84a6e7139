"""Small Qt helpers that the window and export frames share."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSize
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QWidget

# Room for a label's padding and border around its lines (as the style sheet draws them).
LABEL_PADDING = 14


def fix_lines(label: QLabel, lines: int) -> None:
    """Give ``label`` the fixed height of ``lines`` lines of its type.

    A label that grew and shrank with its text would lay out (and repaint) its
    whole window again on every op, and move the views below it between frames.
    """
    label.ensurePolished()
    margins = label.contentsMargins()
    height = label.fontMetrics().lineSpacing() * lines + margins.top() + margins.bottom()
    label.setFixedHeight(height + LABEL_PADDING)


class SteadyLabel(QWidget):
    """Holds a label whose text changes every frame, so that a new text repaints only the label.

    A label's new text asks its parent's layout to run again, and the window's above it
    (which repaints what they hold): during Play that would be every frame. Here the
    label fills this holder, which has no layout, and is laid out as the label would be;
    it passes a change on only where the label's height changes (its type), and never
    where the holder was given a fixed height.
    """

    def __init__(self, label: QLabel) -> None:
        super().__init__()
        self.label = label
        label.setParent(self)
        self.setSizePolicy(label.sizePolicy())
        self._height = label.sizeHint().height()

    def set_text(self, text: str) -> None:
        """Show ``text``, laid out at once: a rich text first laid out by its paint asks for a second."""
        if text != self.label.text():
            self.label.setText(text)
            self.label.sizeHint()

    def sizeHint(self) -> QSize:
        self._height = self.label.sizeHint().height()
        return QSize(0, self._height)

    def minimumSizeHint(self) -> QSize:
        return self.sizeHint()

    def event(self, event: QEvent) -> bool:
        relay = event.type() == QEvent.Type.LayoutRequest and self.minimumHeight() != self.maximumHeight()
        if relay and self.label.sizeHint().height() != self._height:
            self.updateGeometry()
        return super().event(event)

    def resizeEvent(self, event: QResizeEvent) -> None:
        self.label.setGeometry(self.rect())
