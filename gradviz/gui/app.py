"""``gradviz open``: start the app, show the window at once, and load the lab after it is up."""

from __future__ import annotations

import os
import sys

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from gradviz.gui.display import application, has_display, shows_windows
from gradviz.gui.heap import tune_malloc
from gradviz.gui.settings import settings
from gradviz.gui.window import DEFAULT_SCENARIO, MainWindow


def launch(scenario_arg: str | None, lesson: bool = False) -> tuple[QApplication, MainWindow]:
    """Create the application and show the window; the scenario (or recording) loads once the event loop runs.

    ``None`` opens the scenario of the last session (the default one the first time);
    with ``lesson`` its lesson starts as soon as the lab is built.
    """
    app = application()
    window = MainWindow()
    window.show()
    source = scenario_arg or str(settings().value("last_scenario", DEFAULT_SCENARIO))
    if lesson:
        window.start_lesson_when_built()
    # torch is imported by the worker thread when it builds the lab, after the window is up.
    QTimer.singleShot(0, lambda: window.open_scenario(source))
    return app, window


def _refusal(source: str, thorough: bool) -> str | None:
    """Why ``source`` cannot be opened, as one sentence, found before any window exists; None if it can.

    A name that is neither a built-in scenario nor an existing path fails
    without torch, so it is always checked. The rest (validation needs torch,
    building the lab needs the model) is checked only when ``thorough``: where
    no one would see the window (the offscreen platform), an error dialog
    would wait forever, so the command says it on stderr instead. With a
    display the window opens first and shows any error itself.
    """
    from gradviz.engine.errors import UserError
    from gradviz.engine.scenario import builtin_names, load_scenario
    from gradviz.watch.replay import is_recording

    try:
        exists = os.path.exists(source)
    except (OSError, ValueError):
        exists = False
    if is_recording(source):
        # The JSON is checked at once (no torch needed); the replay itself only where no one would see it.
        from gradviz.watch.recording import load_recording
        from gradviz.watch.replay import load_replay

        try:
            load_replay(source) if thorough else load_recording(source)
        except UserError as exc:
            return str(exc)
        return None
    try:
        if not thorough:
            if source not in builtin_names() and not exists:
                load_scenario(source)  # raises: no such file, or no such built-in scenario
            return None
        from gradviz.engine.lab import Lab

        Lab(load_scenario(source), record="bare")
    except UserError as exc:
        return str(exc)
    return None


def run_app(scenario_arg: str, lesson: bool = False) -> int:
    """Open the window on ``scenario_arg`` and run until it is closed; returns the exit status."""
    if not has_display():
        sys.stderr.write(
            "gradviz: there is no display to open a window on (DISPLAY and WAYLAND_DISPLAY are unset); "
            "use `gradviz snapshot SCENARIO -o out.png` or `gradviz export` to render without one.\n"
        )
        return 2
    problem = _refusal(scenario_arg, thorough=not shows_windows())
    if problem is not None:
        sys.stderr.write(f"gradviz: {problem}\n")
        return 2
    tune_malloc()
    app, window = launch(scenario_arg, lesson)
    code = app.exec()
    window.controller.shutdown()
    return int(code)
