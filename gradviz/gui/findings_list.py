"""The findings of a replayed recording, one line each; clicking one (or Enter) goes to its op."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QRect, Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QAbstractItemView, QListWidget, QListWidgetItem, QWidget

from gradviz.watch.replay import LinkedFinding

SHOWN_ROWS = 3  # rows in view before the list scrolls: the views below keep their room


class FindingsList(QListWidget):
    """Lists a recording's findings as ``file:line: severity: message``; emits ``chosen(tick)``."""

    chosen = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("findings")
        self.setWordWrap(True)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setToolTip(
            "What gradviz noticed in the recorded script: click a line (or press Enter) to go to its op"
        )
        self.itemClicked.connect(self._go)
        self.itemActivated.connect(self._go)
        font = self.font()
        font.setBold(True)
        self.setFont(font)
        self.hide()

    def set_findings(self, findings: Sequence[LinkedFinding]) -> None:
        """Show ``findings`` (hidden when there are none, as for a built-in scenario)."""
        self.clear()
        for f in findings:
            mark = {"error": "✖", "warning": "⚠", "info": "ℹ"}.get(f.finding.severity, "•")
            item = QListWidgetItem(f"{mark} {f.text}")
            item.setData(Qt.ItemDataRole.UserRole, f.tick)
            item.setToolTip(f.text if f.tick >= 0 else f"{f.text}\n(no observed op ran at this line)")
            self.addItem(item)
        self.setVisible(bool(findings))
        self._fit()

    def _fit(self) -> None:
        """As tall as the first rows need, wrapped at the list's width, so no finding is cut."""
        fm = self.fontMetrics()
        width = max(self.viewport().width() - 8, 100)
        rows = [self.item(i).text() for i in range(min(self.count(), SHOWN_ROWS))]
        flags = int(Qt.TextFlag.TextWordWrap)
        height = sum(fm.boundingRect(QRect(0, 0, width, 10_000), flags, text).height() + 4 for text in rows)
        self.setFixedHeight(max(height, fm.height() + 4) + 2 * self.frameWidth() + 2)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit()  # wrapped lines take more rows at a narrower width

    def mark(self, tick: int) -> None:
        """Select the finding about the op at ``tick`` (none when no finding is about it)."""
        for row in range(self.count()):
            item = self.item(row)
            on = int(item.data(Qt.ItemDataRole.UserRole)) == tick
            if item.isSelected() != on:
                item.setSelected(on)

    def _go(self, item: QListWidgetItem) -> None:
        tick = int(item.data(Qt.ItemDataRole.UserRole))
        if tick >= 0:
            self.chosen.emit(tick)
