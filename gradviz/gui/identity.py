"""Who the app is to the desktop: its application id and its icon."""

from __future__ import annotations

from PySide6.QtGui import QIcon

APP_ID = "io.github.gradviz.Gradviz"


def app_icon() -> QIcon:
    """The gradviz icon, from the compiled Qt resources."""
    from gradviz.gui import resources_rc  # noqa: F401  - registers the :/icons resources

    return QIcon(":/icons/gradviz.svg")
