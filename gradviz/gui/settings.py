"""What the app remembers between launches: theme, layout, last scenario, presentation views."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSettings

from gradviz.gui.layout import MENU_VIEWS

ORGANIZATION = "gradviz"
APPLICATION = "gradviz"


def settings() -> QSettings:
    """The app's settings store (the platform's usual place, per user)."""
    return QSettings(ORGANIZATION, APPLICATION)


def read_list(store: QSettings, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """A list of panel names; QSettings returns a bare string for one entry and None for none."""
    value: Any = store.value(key)
    if value is None:
        return default
    if isinstance(value, str):
        value = [value] if value else []
    return tuple(str(v) for v in value if str(v) in MENU_VIEWS)
