"""What a frame of Play costs the .grad inspector: one paint, also in frames whose numbers
widen or narrow its columns."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

from PySide6.QtCore import QEvent, QObject


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


def test_each_play_frame_paints_the_inspector_once_while_its_columns_resize(open_window, qtbot) -> None:
    from gradviz.engine import load_scenario

    w = open_window(replace(load_scenario("forgot-zero-grad"), iterations=100_000))
    table = w.grads.table
    paints = Paints(table.viewport())
    per_frame: list[int] = []  # the paints since the frame before: that frame's
    widths: list[list[int]] = []

    def drawn() -> None:
        per_frame.append(paints.count)
        paints.count = 0
        widths.append([table.columnWidth(c) for c in range(table.columnCount())])

    w.frame_drawn.connect(drawn)
    c = w.controller
    c.set_speed(0)  # many ops a frame: the numbers' digits come and go
    c.play()
    qtbot.waitUntil(lambda: len(per_frame) >= 41, timeout=120_000)
    c.pause()
    w.frame_drawn.disconnect(drawn)
    counted = per_frame[2:]  # from the second frame of Play on, each frame's paints whole
    resized = sum(a != b for a, b in pairwise(widths[:-1]))  # frame k against k - 1, as counted
    assert resized >= 5, "columns were resized by the numbers during the frames counted"
    assert max(counted) == 1, f"paints of the inspector per frame: {counted}"
    assert sum(counted) >= len(counted) // 2, "the inspector showed the new numbers"
