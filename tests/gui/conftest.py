"""GUI tests run offscreen, each with its own empty settings store."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings


@pytest.fixture(autouse=True)
def sandboxed_settings(tmp_path: Path) -> Iterator[Path]:
    """Point QSettings at a fresh folder so no test reads or writes the user's settings."""
    folder = tmp_path / "settings"
    folder.mkdir()
    for fmt in (QSettings.Format.NativeFormat, QSettings.Format.IniFormat):
        QSettings.setPath(fmt, QSettings.Scope.UserScope, str(folder))
    yield folder


@pytest.fixture
def open_window(qtbot):
    """A factory: ``open_window(scenario)`` shows the window with that lab built and nothing run."""
    from gradviz.gui.window import MainWindow

    made = []

    def make(scenario: str | object = "forgot-zero-grad") -> MainWindow:
        window = MainWindow()
        qtbot.addWidget(window)
        window.resize(1280, 720)
        window.show()
        qtbot.waitExposed(window)
        window.activateWindow()
        window.controller.open(scenario)  # type: ignore[arg-type]
        qtbot.waitUntil(
            lambda: window.controller.info is not None and not window.controller.busy, timeout=30000
        )
        made.append(window)
        return window

    yield make
    for window in made:
        window.controller.shutdown()


def pytest_configure(config: pytest.Config) -> None:
    # Also declared in pyproject.toml; registered here so the GUI suite runs on its own.
    config.addinivalue_line("markers", "gl: needs an OpenGL context (run under xvfb-run)")


def _graph_windows(qtbot, threaded: bool):
    """A maker of 1280x720 windows, the graph view shown or not, and the list of those it made."""
    from gradviz.gui.controller import Controller
    from gradviz.gui.window import MainWindow

    made = []

    def make(graph: bool = True) -> MainWindow:
        w = MainWindow(Controller(threaded=threaded), interactive=False)
        qtbot.addWidget(w)
        w.resize(1280, 720)
        w.show_panel("graph", graph)
        w.show()
        made.append(w)
        return w

    return make, made


@pytest.fixture
def inline_window(qtbot):
    """``inline_window(scenario, graph=True)``: the window over an inline lab (ops run as they are
    asked for), the graph view shown or not."""
    make, made = _graph_windows(qtbot, threaded=False)

    def opened(scenario: str, graph: bool = True):
        w = make(graph)
        w.controller.open(scenario)
        return w

    yield opened
    for w in made:
        w.controller.shutdown()


@pytest.fixture
def threaded_window(qtbot):
    """``threaded_window(graph=True)``: the window over a lab on its worker threads, nothing opened."""
    make, made = _graph_windows(qtbot, threaded=True)
    yield make
    for w in made:
        w.controller.shutdown()
