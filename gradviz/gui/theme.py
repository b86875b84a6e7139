"""Colours, marker shapes and style sheets of the light and dark themes.

Run colours are the Okabe–Ito palette, which stays distinguishable with the
common forms of colour blindness; each run also has its own marker shape and
line style so that no figure depends on colour alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

RUN_COLORS = ("#D55E00", "#0072B2", "#009E73", "#CC79A7")
RUN_SYMBOLS = ("o", "s", "t", "d")
RUN_SYMBOL_GLYPHS = ("●", "■", "▼", "◆")
RUN_DASHES = (Qt.PenStyle.SolidLine, Qt.PenStyle.DashLine, Qt.PenStyle.DotLine, Qt.PenStyle.DashDotLine)

OP_COLORS = {"zero_grad": "#E69F00", "forward": "#56B4E9", "backward": "#CC79A7", "step": "#009E73"}
OP_SYMBOLS = {"zero_grad": "x", "forward": "t1", "backward": "t", "step": "s"}
OP_LETTERS = {"zero_grad": "Z", "forward": "F", "backward": "B", "step": "S"}

BASE_POINT_SIZE = 10
# Presentation type: body text at least this share of the screen's height (18 px at 720p,
# 27 px at 1080p), which reads from the back of a hall; never smaller than this many points.
PRESENTATION_TYPE_SHARE = 0.025
PRESENTATION_POINT_SIZE = 13.5


def run_color(index: int) -> str:
    """The colour of the ``index``-th run of a lab."""
    return RUN_COLORS[index % len(RUN_COLORS)]


def run_symbol(index: int) -> str:
    """The pyqtgraph marker symbol of the ``index``-th run."""
    return RUN_SYMBOLS[index % len(RUN_SYMBOLS)]


def run_glyph(index: int) -> str:
    """A text glyph with the same shape as the run's marker, for labels."""
    return RUN_SYMBOL_GLYPHS[index % len(RUN_SYMBOL_GLYPHS)]


def run_dash(index: int) -> Qt.PenStyle:
    """The line style of the ``index``-th run's path."""
    return RUN_DASHES[index % len(RUN_DASHES)]


@dataclass(frozen=True)
class Theme:
    """The colours of one theme; every view reads them from here."""

    name: str
    window: str
    base: str
    text: str
    muted: str
    grid: str
    accent: str
    highlight: str
    none_bg: str
    code_ran: str
    code_next: str
    surface_low: str
    surface_high: str
    contour: str
    diverged: str

    @property
    def dark(self) -> bool:
        return self.name == "dark"


LIGHT = Theme(
    name="light",
    window="#f4f4f2",
    base="#ffffff",
    text="#1b1b1b",
    muted="#6b6b6b",
    grid="#d0d0d0",
    accent="#0072B2",
    highlight="#fff2a8",
    none_bg="#e9e4f2",
    code_ran="#ffe1c7",
    code_next="#d9ecf7",
    surface_low="#ffffff",
    surface_high="#8c8c8c",
    contour="#505050",
    diverged="#000000",
)

DARK = Theme(
    name="dark",
    window="#1f2124",
    base="#17181a",
    text="#ececec",
    muted="#9a9a9a",
    grid="#3c3f44",
    accent="#56B4E9",
    highlight="#5a4a10",
    none_bg="#3a3346",
    code_ran="#5a3418",
    code_next="#173a52",
    surface_low="#101113",
    surface_high="#7d7d7d",
    contour="#b8b8b8",
    diverged="#ffffff",
)

THEMES = {"light": LIGHT, "dark": DARK}


def theme_named(name: str) -> Theme:
    """The theme called ``name``; the light one for anything unknown."""
    return THEMES.get(name, LIGHT)


def palette(theme: Theme) -> QPalette:
    """A Qt palette that paints standard widgets in ``theme``'s colours."""
    pal = QPalette()
    roles = {
        QPalette.ColorRole.Window: theme.window,
        QPalette.ColorRole.WindowText: theme.text,
        QPalette.ColorRole.Base: theme.base,
        QPalette.ColorRole.AlternateBase: theme.window,
        QPalette.ColorRole.Text: theme.text,
        QPalette.ColorRole.Button: theme.window,
        QPalette.ColorRole.ButtonText: theme.text,
        QPalette.ColorRole.ToolTipBase: theme.base,
        QPalette.ColorRole.ToolTipText: theme.text,
        QPalette.ColorRole.Highlight: theme.accent,
        QPalette.ColorRole.HighlightedText: "#ffffff",
        QPalette.ColorRole.PlaceholderText: theme.muted,
    }
    for role, colour in roles.items():
        pal.setColor(role, QColor(colour))
    pal.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text, QColor(theme.muted))
    pal.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText, QColor(theme.muted))
    pal.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText, QColor(theme.muted))
    return pal


def presentation_points(height: int, dpi: float = 96.0) -> float:
    """Presentation mode's body type for a screen ``height`` pixels high, in points."""
    pixels = math.ceil(PRESENTATION_TYPE_SHARE * height)
    return max(PRESENTATION_POINT_SIZE, pixels * 72.0 / dpi)


def style_sheet(theme: Theme, points: float = BASE_POINT_SIZE) -> str:
    """The application style sheet: body text of ``points``, and the few custom-styled widgets."""
    size = f"{points:g}"
    big = f"{points + 2:g}"
    return f"""
QWidget {{ font-size: {size}pt; }}
QLabel#narration {{
    font-size: {big}pt; padding: 6px 10px; border-radius: 4px;
    background: {theme.base}; color: {theme.text}; border: 1px solid {theme.grid};
}}
QLabel#panelTitle {{ font-weight: bold; color: {theme.muted}; }}
QLabel#status, QLabel#position {{ color: {theme.muted}; }}
QLabel#placeholder {{ color: {theme.muted}; font-style: italic; padding: 20px; }}
QPlainTextEdit#code {{ background: {theme.base}; color: {theme.text}; border: 1px solid {theme.grid}; }}
QTableWidget {{ gridline-color: {theme.grid}; background: {theme.base}; }}
QHeaderView::section {{
    background: {theme.window}; color: {theme.muted}; border: none;
    border-bottom: 1px solid {theme.grid}; padding: 3px 6px;
}}
QSplitter::handle {{ background: {theme.grid}; }}
"""


def apply_theme(app: QApplication, theme: Theme, points: float = BASE_POINT_SIZE) -> None:
    """Paint the whole application in ``theme``, with body text of ``points``."""
    # Each of these re-polishes every widget (most of a second in a full window): only on a change.
    # (With a style sheet set, app.style() is Qt's style-sheet proxy and has no name: remember.)
    if app.property("gradviz_style") != "Fusion":
        app.setStyle("Fusion")
        app.setProperty("gradviz_style", "Fusion")
    app.setPalette(palette(theme))
    sheet = style_sheet(theme, points)
    if app.styleSheet() != sheet:
        app.setStyleSheet(sheet)
