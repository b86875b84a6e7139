"""Where gradviz can draw: the display check, the OpenGL probe, and the one QApplication.

Every entry point (the window, ``snapshot``, ``export``, the tests) makes its
application here, so the platform (a display, or offscreen), the message filter
and the app's identity are decided in one place.

``pyqtgraph.opengl`` needs PyOpenGL and a platform with OpenGL contexts. On the
offscreen platform creating one segfaults, and a broken driver can do the same
anywhere, so the one risky step, making a context and asking it for its
version, runs in a child process: if that crashes, only the child dies and
the app shows a placeholder instead.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from functools import cache

from PySide6.QtCore import QCoreApplication, QMessageLogContext, Qt, QtMsgType, qInstallMessageHandler
from PySide6.QtWidgets import QApplication

import gradviz
from gradviz.gui.identity import APP_ID, app_icon

# Platforms known to have no OpenGL for widgets; the offscreen one crashes in pyqtgraph.opengl.
NO_GL_PLATFORMS = ("offscreen", "minimal", "vnc", "linuxfb")
HOW = "run gradviz in a desktop session, or under `xvfb-run` on a machine without a display"
PROBE_TIMEOUT_S = 20.0

_CHILD = """
import sys
from PySide6.QtGui import QGuiApplication, QOffscreenSurface, QOpenGLContext
app = QGuiApplication(sys.argv[:1])
ctx = QOpenGLContext()
if not ctx.create():
    sys.exit(3)
surface = QOffscreenSurface()
surface.setFormat(ctx.format())
surface.create()
if not ctx.makeCurrent(surface):
    sys.exit(4)
from OpenGL import GL
version = GL.glGetString(GL.GL_VERSION)
if not version:
    sys.exit(5)
import pyqtgraph.opengl  # noqa: F401
print(version.decode(errors="replace"))
"""


def platform_name() -> str:
    """The Qt platform plugin in use (or that a new application would use)."""
    from PySide6.QtGui import QGuiApplication

    if QGuiApplication.instance() is not None:
        return QGuiApplication.platformName()
    return os.environ.get("QT_QPA_PLATFORM", "").split(":")[0]


@cache
def gl_unavailable() -> str | None:
    """Why 3-D views cannot run here, as a sentence for the user; ``None`` when they can.

    The answer is worked out once per process: a platform without OpenGL, a
    missing PyOpenGL, or a child process that could not make a context (its
    exit status or signal is named).
    """
    platform = platform_name()
    if platform in NO_GL_PLATFORMS:
        return f"3-D needs OpenGL, which the {platform!r} display platform lacks: {HOW}."
    if importlib.util.find_spec("OpenGL") is None:
        return "3-D needs PyOpenGL: install it with `pip install PyOpenGL`, then reopen gradviz."
    env = dict(os.environ)
    if platform:
        env["QT_QPA_PLATFORM"] = platform
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD],
            env=env,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"3-D needs OpenGL, and testing it failed ({type(exc).__name__}): {HOW}."
    if done.returncode == 0:
        return None
    how_it_ended = (
        f"crashed with signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
    )
    return f"3-D needs OpenGL, and no OpenGL context could be made here ({how_it_ended}): {HOW}."


def gl_available() -> bool:
    """True when :func:`gl_unavailable` has no reason to give."""
    return gl_unavailable() is None


def has_display() -> bool:
    """Whether a window can be shown: a display server, or a Qt platform chosen explicitly."""
    if sys.platform in ("win32", "darwin"):
        return True
    return bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or os.environ.get("QT_QPA_PLATFORM")
    )


def shows_windows() -> bool:
    """Whether a window (or a dialog) made now would be seen by someone: not on the offscreen platform."""
    return has_display() and platform_name() not in NO_GL_PLATFORMS


def gl_refusal(views: tuple[str, ...] | list[str]) -> str | None:
    """Why frames of ``views`` cannot be drawn here, as one sentence; None when they can.

    Only ``surface3d`` can be refused: it needs OpenGL, which the offscreen
    platform (the default for exports) and machines without a display lack.
    """
    if "surface3d" not in views:
        return None
    if has_display() and gl_unavailable() is None:
        return None
    return (
        "The surface3d view draws with OpenGL, which is not available here; run the export "
        "under a virtual display, as in xvfb-run -a gradviz export ... --views surface,surface3d."
    )


def application(offscreen: bool = False) -> QApplication:
    """The running QApplication, or a new one (offscreen when asked and none exists yet)."""
    app = QApplication.instance()
    if not isinstance(app, QApplication):
        if offscreen:
            os.environ["QT_QPA_PLATFORM"] = "offscreen"
        qInstallMessageHandler(_quiet_platform_notes)
        # One OpenGL context shared by every top-level window: pyqtgraph compiles its shaders
        # once, so without it a second window's (or an export frame's) 3-D path is not drawn.
        QCoreApplication.setAttribute(Qt.ApplicationAttribute.AA_ShareOpenGLContexts)
        app = QApplication([sys.argv[0] if sys.argv else "gradviz"])
    app.setOrganizationName("gradviz")
    app.setApplicationName("gradviz")
    app.setApplicationVersion(gradviz.__version__)
    # The desktop file's name lets desktops match the window to its launcher and icon.
    app.setDesktopFileName(APP_ID)
    app.setWindowIcon(app_icon())
    return app


def frames_application(views: tuple[str, ...] | list[str], theme: str, points: float) -> QApplication:
    """The QApplication for frames of ``views``: offscreen, or the display's own for 3-D views.

    A new application is themed like the window, with body text of ``points`` (an existing
    one keeps its look).

    Raises
    ------
    UserError
        When ``views`` hold ``surface3d`` and OpenGL is not available (see :func:`gl_refusal`).
    """
    from gradviz.engine.errors import UserError
    from gradviz.gui.theme import apply_theme, theme_named

    reason = gl_refusal(views)
    if reason is not None:
        raise UserError(reason)
    existing = QApplication.instance()
    # OpenGL contexts exist only on the display's platform (xcb under Xvfb); offscreen crashes.
    app = application(offscreen="surface3d" not in views)
    if existing is None:
        apply_theme(app, theme_named(theme), points)
    return app


# Notes the offscreen platform prints about features it lacks; they say nothing to a user.
_PLATFORM_NOTES = ("This plugin does not support",)


def _quiet_platform_notes(kind: QtMsgType, context: QMessageLogContext, message: str) -> None:
    if kind == QtMsgType.QtWarningMsg and message.startswith(_PLATFORM_NOTES):
        return
    sys.stderr.write(message + "\n")
