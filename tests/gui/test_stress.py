"""The surface view survives thousands of redraws in one process (the PySide6 pin holds)."""

from __future__ import annotations

import numpy as np
from gui_helpers import press
from PySide6.QtWidgets import QApplication

REDRAWS = 3000


def test_surface_view_redraws_thousands_of_times(open_window, qtbot) -> None:
    from PySide6.QtCore import Qt

    w = open_window("forgot-zero-grad")
    for _ in range(10):
        press(qtbot, w, Qt.Key.Key_Right, modifier=Qt.KeyboardModifier.ShiftModifier)
    c = w.controller
    ticks = list(c.history.op_ticks)
    rng = np.random.default_rng(0)
    for i in range(REDRAWS):
        c.seek(int(rng.choice(ticks)))
        w.surface.draw(c.moment())
        if i % 100 == 0:
            # Paint for real now and then: the crash this guards against happens in paint callbacks.
            w.surface.plot_widget.grab()
            QApplication.processEvents()
    assert w.surface.isVisible()
