"""The About dialog: name, version (from the one place it is kept) and the versions it runs on."""

from __future__ import annotations

import platform
import sys

import PySide6
from PySide6.QtCore import qVersion
from PySide6.QtWidgets import QDialog, QWidget

import gradviz
from gradviz.gui.forms.ui_about import Ui_AboutDialog
from gradviz.gui.identity import app_icon


class AboutDialog(QDialog):
    """About gradviz, built from the Designer form ``ui/about.ui``."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ui = Ui_AboutDialog()
        self.ui.setupUi(self)
        self.ui.iconLabel.setPixmap(app_icon().pixmap(72, 72))
        self.ui.versionLabel.setText(f"Version {gradviz.__version__}")
        # torch is reported only once the app has imported it: the dialog must not be what loads it.
        torch = sys.modules.get("torch")
        torch_text = f"PyTorch {torch.__version__}" if torch is not None else "PyTorch (not loaded yet)"
        self.ui.detailsLabel.setText(
            f"{torch_text} · Qt {qVersion()} · PySide6 {PySide6.__version__} · "
            f"Python {platform.python_version()}"
        )
