"""Small Qt helpers that the window and export frames share."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel

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
