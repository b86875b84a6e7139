"""What a frame of Play costs the window around the views: the new position in the status bar
and the new sentence lay nothing out again (the window is laid out only where a view changed its
size), and the chrome that did not change is not repainted."""

from __future__ import annotations

from dataclasses import replace

from gui_helpers import Paints
from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QApplication, QWidget


class Counted(QObject):
    """Counts the events of one type that reach a widget."""

    def __init__(self, widget, kind: QEvent.Type = QEvent.Type.LayoutRequest) -> None:
        super().__init__()
        self.count = 0
        self.kind = kind
        widget.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:
        if event.type() == self.kind:
            self.count += 1
        return False


class Resizes(QObject):
    """Counts the widgets of one window resized by its layouts."""

    def __init__(self, window) -> None:
        super().__init__()
        self.window = window
        self.count = 0
        QApplication.instance().installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:
        if event.type() == QEvent.Type.Resize and isinstance(watched, QWidget):
            self.count += self.window.isAncestorOf(watched)
        return False


def test_play_frames_lay_out_nothing_and_leave_the_chrome_unpainted(open_window, qtbot) -> None:
    from gradviz.engine import load_scenario

    w = open_window(replace(load_scenario("forgot-zero-grad"), iterations=100_000))
    layouts = {
        "window": Counted(w),
        "central widget": Counted(w.centralWidget()),
        "status bar": Counted(w.statusBar()),
    }
    resizes = Resizes(w)
    chrome = {"toolbar": w.toolbar, "menu bar": w.menuBar(), "scenario bar": w.scenario_bar}
    paints = {name: Paints(widget) for name, widget in chrome.items()}
    texts: list[tuple[str, str]] = []
    counted = {"on": False}

    def drawn() -> None:
        texts.append((w.status.text(), w.narration.text()))
        if len(texts) == 3:  # from the third frame of Play on: Play's own first layout is done
            counted["on"] = True
            for counter in (*layouts.values(), *paints.values(), resizes):
                counter.count = 0

    w.frame_drawn.connect(drawn)
    c = w.controller
    c.set_speed(0)
    c.play()
    qtbot.waitUntil(lambda: len(texts) >= 33, timeout=120_000)
    w.frame_drawn.disconnect(drawn)
    seen = {name: counter.count for name, counter in layouts.items()}
    resized = resizes.count
    QApplication.instance().removeEventFilter(resizes)
    painted = {name: counter.count for name, counter in paints.items()}
    c.pause()
    shown = texts[3:]
    assert len({status for status, _ in shown}) >= 20, "the status bar showed each frame's position"
    assert len({sentence for _, sentence in shown}) >= 10, "the narration followed the ops"
    # A view whose content changed its size (the surface's key as runs meet and part) is laid out
    # anew, and moves what it holds; a layout that moves nothing is one that a frame paid for in vain.
    assert counted["on"] and seen["status bar"] == 0, f"laid out again during 30 frames: {seen}"
    assert max(seen.values()) <= resized, f"laid out again during 30 frames: {seen}, resizing {resized}"
    assert painted == dict.fromkeys(chrome, 0), f"repainted during 30 frames: {painted}"
