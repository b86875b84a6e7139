"""Export… (Ctrl+E): the steps just shown as a GIF or video, with a preview, progress and Cancel.

Preview and Export run an :class:`~gradviz.gui.export_frames.ExportJob` a step per
turn of the event loop: the lab is stepped and the plane computed on worker
threads, frames are drawn between events and the GIF is encoded on a thread,
so the window keeps answering while an export runs.
"""

from __future__ import annotations

from collections.abc import Generator
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
STEP_MS = 5


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
        self._work: Generator[None, None, None] | None = None
        self._encoded = (0, 0)  # frames encoded and to encode, as the encoding thread last said
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
        # Between two steps of the job the window handles its events (waits on threads are polled).
        self._timer.setInterval(STEP_MS)
        self._timer.timeout.connect(self._advance)

    # ---------------------------------------------------------------- choices
    def _browse(self) -> None:
        name, _ = QFileDialog.getSaveFileName(
            self, "Export animation", self.path.text(), "GIF (*.gif);;MP4 video (*.mp4);;WebM video (*.webm)"
        )
        if name:
            self.path.setText(name)

    def _new_job(self, preview: bool = False) -> ExportJob:
        w, h = (int(v) for v in self.frame_size.currentText().split("x"))
        views = tuple(name for name, box in self.views.items() if box.isChecked())
        if not views:
            raise UserError("Choose at least one view to export.")
        style = FrameStyle(
            (w, h), views, caption=self.caption.isChecked(), presentation=self.presentation, theme=self.theme
        )
        frames = ExportRange(self.per_frame.currentText(), first=self.first.value(), last=self.last.value())
        return ExportJob(
            self.scenario,
            self.path.text(),
            style=style,
            fps=self.fps.value(),
            frames=frames,
            threaded=True,
            preview=preview,
        )

    def _fail(self, message: str) -> None:
        self.last_error = message
        self.message.setText(message)
        self._set_running(False)

    # ---------------------------------------------------------------- actions
    def show_preview(self) -> None:
        """Draw the first frame of the export as chosen (writes nothing); the window stays live."""
        self._run(preview=True)

    def start(self) -> None:
        """Start the export; the window stays responsive while it runs."""
        self._run(preview=False)

    def _run(self, preview: bool) -> None:
        if self.job is not None:
            return
        try:
            self.job = self._new_job(preview)
        except UserError as exc:
            self._fail(str(exc))
            return
        self._cancelled = False
        self.last_error = None
        self._encoded = (0, 0)
        self._work = self.job.work(self._on_encoded)
        self.message.setText("Drawing the first frame…" if preview else "Stepping the lab…")
        self.progress.setRange(0, 0)  # busy until the frames are planned
        self._set_running(True)
        self._timer.start()

    def _on_encoded(self, done: int, total: int) -> None:
        # On the encoding thread: only noted here, shown by the GUI thread's next step.
        self._encoded = (done, total)

    def _advance(self) -> None:
        """One step of the job, then back to the event loop."""
        job, work = self.job, self._work
        assert job is not None and work is not None
        try:
            next(work)
        except StopIteration:
            self._done(job)
            return
        except ExportCancelled:
            self._end("Cancelled: nothing was written.")
            return
        except UserError as exc:
            self._end(None)
            self._fail(str(exc))
            return
        if job.phase == "render" and job.total:
            self.message.setText("Drawing frames…")
            self.progress.setRange(0, job.total)
            self.progress.setValue(job.done)
        elif job.phase == "encode":
            done, total = self._encoded
            self.message.setText("Encoding…")
            self.progress.setRange(0, max(total, 1))
            self.progress.setValue(done)

    def _done(self, job: ExportJob) -> None:
        if job.preview_only:
            image = job.preview()
            if image is not None:
                pixmap = QPixmap.fromImage(image)
                self.preview.setPixmap(
                    pixmap.scaledToWidth(PREVIEW_WIDTH, Qt.TransformationMode.SmoothTransformation)
                )
            self._end("")
            return
        self.written = job.written
        self._end(f"Wrote {self.written}.")

    def _end(self, message: str | None) -> None:
        self._timer.stop()
        self.job = None
        self._work = None
        if message is not None:
            self.message.setText(message)
        self._set_running(False)

    def cancel(self) -> None:
        """Stop a running export or preview (nothing is written), or close the dialog."""
        if self.job is None:
            self.reject()
            return
        self._cancelled = True
        job, work = self.job, self._work
        if work is not None:
            work.close()  # the job cancels itself where it stands
        job.cancel()
        self._end("Cancelled: nothing was written.")

    def done(self, result: int) -> None:
        """Closing the dialog stops a running export first (nothing is written)."""
        if self.job is not None:
            self.cancel()
        super().done(result)

    def _set_running(self, running: bool) -> None:
        self.progress.setVisible(running)
        self.export_button.setEnabled(not running)
        self.preview_button.setEnabled(not running)
        self.cancel_button.setText("Cancel" if running else "Close")
