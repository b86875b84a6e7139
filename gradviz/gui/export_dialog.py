"""Export… (Ctrl+E): the steps just shown as a GIF or video, with a preview, progress and Cancel."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from gradviz.engine.errors import UserError
from gradviz.engine.scenario import Scenario
from gradviz.export import ExportCancelled
from gradviz.gui.export_frames import ExportJob, ExportRange, FrameStyle
from gradviz.gui.layout import DEFAULT_VIEWS

SIZES = ("1280x720", "960x540", "800x600", "640x480")
PREVIEW_WIDTH = 360


class ExportDialog(QDialog):
    """Choose file, range and look; preview the first frame; export with progress and Cancel.

    Parameters
    ----------
    scenario:
        The scenario as the window runs it (with the user's edits).
    stepped_ops:
        Ops the user has stepped through: the range starts preset to them.
    presentation, theme:
        The window's look, which the frames copy.
    """

    def __init__(
        self,
        scenario: Scenario,
        stepped_ops: int,
        *,
        presentation: bool = False,
        theme: str = "light",
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Export animation")
        self.scenario = scenario
        self.presentation = presentation
        self.theme = theme
        self.job: ExportJob | None = None
        self.written: Path | None = None
        self.last_error: str | None = None
        self._cancelled = False

        self.path = QLineEdit(str(Path.cwd() / f"{scenario.name}.gif"))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        where = QHBoxLayout()
        where.addWidget(self.path, 1)
        where.addWidget(browse)

        self.per_frame = QComboBox()
        self.per_frame.addItems(["op", "iteration"])
        self.first = QSpinBox()
        self.last = QSpinBox()
        for spin in (self.first, self.last):
            spin.setRange(1, 1_000_000)
        self.first.setValue(1)
        self.last.setValue(max(1, stepped_ops))
        span = QHBoxLayout()
        span.addWidget(self.per_frame)
        span.addWidget(QLabel("from"))
        span.addWidget(self.first)
        span.addWidget(QLabel("to"))
        span.addWidget(self.last)
        span.addStretch(1)

        self.views = {name: QCheckBox(name) for name in DEFAULT_VIEWS}
        row = QHBoxLayout()
        for box in self.views.values():
            box.setChecked(True)
            row.addWidget(box)
        row.addStretch(1)
        self.frame_size = QComboBox()
        self.frame_size.addItems(SIZES)
        self.fps = QDoubleSpinBox()
        self.fps.setRange(0.5, 50)
        self.fps.setValue(4)
        self.caption = QCheckBox("narration sentence on every frame")
        self.caption.setChecked(True)

        form = QFormLayout()
        form.addRow("File (.gif, .mp4, .webm)", where)
        form.addRow("Frames", span)
        form.addRow("Views", row)
        form.addRow("Size", self.frame_size)
        form.addRow("Frames per second", self.fps)
        form.addRow("", self.caption)

        self.preview = QLabel("Preview shows the first frame.")
        self.preview.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.preview.setMinimumSize(PREVIEW_WIDTH, PREVIEW_WIDTH * 9 // 16)
        self.preview_button = QPushButton("Preview")
        self.preview_button.clicked.connect(self.show_preview)
        self.message = QLabel("")
        self.message.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setVisible(False)

        self.buttons = QDialogButtonBox()
        self.export_button = self.buttons.addButton("Export", QDialogButtonBox.ButtonRole.AcceptRole)
        self.cancel_button = self.buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        self.export_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)

        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.preview, 1)
        layout.addWidget(self.preview_button, 0, Qt.AlignmentFlag.AlignRight)
        layout.addWidget(self.message)
        layout.addWidget(self.progress)
        layout.addWidget(self.buttons)
        self._timer = QTimer(self)
        self._timer.setInterval(0)
        self._timer.timeout.connect(self._render_one)

    # ---------------------------------------------------------------- choices
    def _browse(self) -> None:
        name, _ = QFileDialog.getSaveFileName(
            self, "Export animation", self.path.text(), "GIF (*.gif);;MP4 video (*.mp4);;WebM video (*.webm)"
        )
        if name:
            self.path.setText(name)

    def _new_job(self) -> ExportJob:
        w, h = (int(v) for v in self.frame_size.currentText().split("x"))
        views = tuple(name for name, box in self.views.items() if box.isChecked())
        if not views:
            raise UserError("Choose at least one view to export.")
        style = FrameStyle(
            (w, h), views, caption=self.caption.isChecked(), presentation=self.presentation, theme=self.theme
        )
        frames = ExportRange(self.per_frame.currentText(), first=self.first.value(), last=self.last.value())
        return ExportJob(self.scenario, self.path.text(), style=style, fps=self.fps.value(), frames=frames)

    def _fail(self, message: str) -> None:
        self.last_error = message
        self.message.setText(message)
        self._set_running(False)

    # ---------------------------------------------------------------- actions
    def show_preview(self) -> None:
        """Render the first frame of the export as chosen (writes nothing)."""
        try:
            job = self._new_job()
        except UserError as exc:
            self._fail(str(exc))
            return
        try:
            image = job.preview()
        finally:
            job.cancel()
        if image is not None:
            pixmap = QPixmap.fromImage(image)
            self.preview.setPixmap(
                pixmap.scaledToWidth(PREVIEW_WIDTH, Qt.TransformationMode.SmoothTransformation)
            )

    def start(self) -> None:
        """Start the export; frames are drawn between events so the window stays responsive."""
        if self.job is not None:
            return
        try:
            self.job = self._new_job()
        except UserError as exc:
            self._fail(str(exc))
            return
        self._cancelled = False
        self.last_error = None
        self.message.setText("Drawing frames…")
        self.progress.setRange(0, self.job.total)
        self.progress.setValue(0)
        self._set_running(True)
        self._timer.start()

    def _render_one(self) -> None:
        job = self.job
        assert job is not None
        try:
            more = job.render_next()
        except UserError as exc:
            job.cancel()
            self.job = None
            self._fail(str(exc))
            return
        self.progress.setValue(job.done)
        if more:
            return
        self._timer.stop()
        self.message.setText("Encoding…")
        try:
            self.written = job.finish(progress=self._encoding)
        except ExportCancelled:
            self.message.setText("Cancelled: nothing was written.")
            self._set_running(False)
        except UserError as exc:
            self._fail(str(exc))
        else:
            self.message.setText(f"Wrote {self.written}.")
            self._set_running(False)
        finally:
            self.job = None

    def _encoding(self, done: int, total: int) -> None:
        from PySide6.QtWidgets import QApplication

        self.progress.setRange(0, total)
        self.progress.setValue(done)
        QApplication.processEvents()  # lets Cancel be pressed while the GIF is encoded
        if self._cancelled:
            raise ExportCancelled()

    def cancel(self) -> None:
        """Stop a running export (nothing is written) or close the dialog."""
        if self.job is None:
            self.reject()
            return
        self._cancelled = True
        if self._timer.isActive():
            self._timer.stop()
            self.job.cancel()
            self.job = None
            self.message.setText("Cancelled: nothing was written.")
            self._set_running(False)

    def _set_running(self, running: bool) -> None:
        self.progress.setVisible(running)
        self.export_button.setEnabled(not running)
        self.preview_button.setEnabled(not running)
        self.cancel_button.setText("Cancel" if running else "Close")
