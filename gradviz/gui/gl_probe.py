"""Whether OpenGL 3-D views can run here, decided without risking the app.

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
