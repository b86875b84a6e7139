"""What a frame of Play costs the window around the views: the new position in the status bar
and the new sentence lay nothing out again (the window is laid out only where a view changed its
size), the status bar's text is painted once a frame, and the chrome that did not change not at all."""

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
    status_paints = Paints(w.position)
    runs_paints = Paints(w.status)
    counters = (*layouts.values(), *paints.values(), resizes, status_paints, runs_paints)
    texts: list[tuple[str, str]] = []
    counts: list[int] = []

    def drawn() -> None:
        # Frames 3 to 32 of Play counted whole, each from its drawing to the next one's: Play's own
        # first layout is done by then.
        texts.append((w.position.text(), w.narration.text()))
        if len(texts) in (3, 33):
            counts[:] = [counter.count for counter in counters]
            for counter in counters:
                counter.count = 0

    w.frame_drawn.connect(drawn)
    c = w.controller
    c.set_speed(0)
    c.play()
    qtbot.waitUntil(lambda: len(texts) >= 33, timeout=120_000)
    w.frame_drawn.disconnect(drawn)
    QApplication.instance().removeEventFilter(resizes)
    seen = dict(zip(layouts, counts, strict=False))
    painted = dict(zip(chrome, counts[len(layouts) :], strict=False))
    resized, status_painted, runs_painted = counts[-3:]
    c.pause()
    shown = texts[3:33]
    assert len({status for status, _ in shown}) >= 20, "the status bar showed each frame's position"
    assert len({sentence for _, sentence in shown}) >= 10, "the narration followed the ops"
    # A view whose content changed its size (the surface's key as runs meet and part) is laid out
    # anew, and moves what it holds; a layout that moves nothing is one that a frame paid for in vain.
    assert seen["status bar"] == 0, f"laid out again during 30 frames: {seen}"
    assert max(seen.values()) <= resized, f"laid out again during 30 frames: {seen}, resizing {resized}"
    assert painted == dict.fromkeys(chrome, 0), f"repainted during 30 frames: {painted}"
    # Its text laid out as it is set: a text first laid out by its paint asks for a second paint.
    assert status_painted <= 30, f"the status bar's position painted {status_painted} times in 30 frames"
    # The runs' coloured names and states, a rich text, stay as they were while the position moves on.
    assert runs_painted == 0, f"the runs' states painted {runs_painted} times in 30 frames"
