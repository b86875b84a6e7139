"""Shared test set-up: one intra-op thread (as the app uses), deterministic and quick."""

import os
from collections.abc import Iterator

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def qapp():
    """The QApplication the app itself makes (its attributes and names), for every Qt test."""
    from gradviz.gui.display import application

    return application()


@pytest.fixture(autouse=True)
def no_window_outlives_its_test() -> Iterator[None]:
    """Delete the app's windows a test leaves behind.

    A window whose signals reach lambdas that hold it is never freed by Python alone, and
    every widget a process still holds is restyled whenever a later test changes the
    application's type or theme: leftovers would make each test slower than the one before.
    """
    yield
    from PySide6.QtCore import QCoreApplication, QEvent
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    if not isinstance(app, QApplication):
        return
    from gradviz.gui.window import MainWindow

    for widget in app.topLevelWidgets():
        if isinstance(widget, MainWindow):
            widget.close()  # ends its worker threads
            widget.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


@pytest.fixture
def deadline() -> Iterator[None]:
    """Fail a test that blocks (a FIFO opened for reading waits for a writer) instead of hanging the suite."""
    import signal

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError("the test blocked for 120 s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(120)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
