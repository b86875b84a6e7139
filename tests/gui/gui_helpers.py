"""Helpers that drive the window as a user would and wait for the worker's answer."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QColor


def settle(qtbot, window) -> None:
    """Wait until no op is in flight and the last change has been drawn."""
    qtbot.waitUntil(lambda: not window.controller.busy, timeout=30000)
    window.redraw()


def press(qtbot, window, key: Qt.Key, times: int = 1, modifier=Qt.KeyboardModifier.NoModifier) -> None:
    """Press ``key`` ``times`` times, waiting for each op like a patient user."""
    for _ in range(times):
        qtbot.keyClick(window, key, modifier)
        settle(qtbot, window)


def colour_near(pixel: QColor, hex_colour: str, tolerance: int = 40) -> bool:
    """Whether a sampled pixel is within ``tolerance`` (per channel) of ``hex_colour``."""
    target = QColor(hex_colour)
    return all(
        abs(a - b) <= tolerance
        for a, b in zip(
            (pixel.red(), pixel.green(), pixel.blue()),
            (target.red(), target.green(), target.blue()),
            strict=True,
        )
    )


class Paints(QObject):
    """Counts the paint events a widget receives."""

    def __init__(self, widget) -> None:
        super().__init__()
        self.count = 0
        widget.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:
        if event.type() == QEvent.Type.Paint:
            self.count += 1
        return False
