"""The scenario bar: which scenario, and the settings a learner changes most.

Every change restarts the runs from the same initial weights (the seed decides
them). Only devices this machine has are enabled; the others say why.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QSpinBox,
    QToolButton,
    QWidget,
)

from gradviz.gui.views.flow import FlowLayout
from gradviz.gui.window_history import LabInfo

OPTIMIZERS = ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad")
DEVICES = ("cpu", "cuda", "mps", "auto")
SCENARIO_FOLDER = Path(__file__).resolve().parents[2] / "engine" / "scenarios"


def builtin_scenarios() -> list[tuple[str, str]]:
    """(name, title) of the built-in scenarios, read without importing the engine (and torch)."""
    names = sorted(p.stem for p in SCENARIO_FOLDER.glob("*.toml"))
    first = [n for n in ("forgot-zero-grad", "standard-loop") if n in names]
    out = []
    for name in first + [n for n in names if n not in first]:
        try:
            title = tomllib.loads((SCENARIO_FOLDER / f"{name}.toml").read_text("utf-8")).get("title", name)
        except (OSError, tomllib.TOMLDecodeError):
            title = name
        out.append((name, str(title)))
    return out


class ScenarioBar(QWidget):
    """Scenario picker, open/save, and the model's and optimizer's main settings.

    Emits ``scenario_chosen(name)``, ``open_requested()``, ``save_requested()`` and
    ``setting_changed(field, value)`` with field one of ``optimizer``, ``lr``,
    ``momentum``, ``batch_size``, ``accumulate``, ``seed``, ``device``.
    """

    scenario_chosen = Signal(str)
    open_requested = Signal()
    save_requested = Signal()
    setting_changed = Signal(str, object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("scenarioBar")
        self.scenario = QComboBox()
        self.scenario.setObjectName("scenarioPicker")
        self.scenario.setMinimumContentsLength(16)
        self.scenario.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        for name, title in builtin_scenarios():
            self.scenario.addItem(name, name)
            self.scenario.setItemData(self.scenario.count() - 1, title, Qt.ItemDataRole.ToolTipRole)
        self.scenario.activated.connect(self._chosen)
        self.open_button = QToolButton()
        self.open_button.setText("Open…")
        self.open_button.setToolTip("Open a scenario file (TOML)")
        self.open_button.clicked.connect(self.open_requested)
        self.save_button = QToolButton()
        self.save_button.setText("Save…")
        self.save_button.setToolTip("Save the scenario with your changes as a TOML file")
        self.save_button.clicked.connect(self.save_requested)
        self.model = QLabel("")
        self.model.setObjectName("status")

        self.optimizer = QComboBox()
        self.optimizer.setObjectName("optimizerPicker")
        self.optimizer.addItems([*OPTIMIZERS, "manual"])
        self.optimizer.activated.connect(lambda _: self._emit("optimizer", self.optimizer.currentText()))
        self.lr = QDoubleSpinBox()
        self.lr.setObjectName("lrSpin")
        self.lr.setDecimals(4)
        self.lr.setRange(0.0, 10.0)
        self.lr.setStepType(QDoubleSpinBox.StepType.AdaptiveDecimalStepType)
        self.lr.setKeyboardTracking(False)
        self.lr.valueChanged.connect(lambda v: self._emit("lr", float(v)))
        self.momentum = QDoubleSpinBox()
        self.momentum.setObjectName("momentumSpin")
        self.momentum.setDecimals(3)
        self.momentum.setRange(0.0, 0.999)
        self.momentum.setSingleStep(0.1)
        self.momentum.setKeyboardTracking(False)
        self.momentum.valueChanged.connect(lambda v: self._emit("momentum", float(v)))
        self.batch = QSpinBox()
        self.batch.setObjectName("batchSpin")
        self.batch.setRange(1, 1_000_000)
        self.batch.setKeyboardTracking(False)
        self.batch.valueChanged.connect(lambda v: self._emit("batch_size", int(v)))
        self.accumulate = QSpinBox()
        self.accumulate.setObjectName("accumulateSpin")
        self.accumulate.setRange(1, 64)
        self.accumulate.setKeyboardTracking(False)
        self.accumulate.setToolTip("Micro-batches per step, for the run shown in the code panel")
        self.accumulate.valueChanged.connect(lambda v: self._emit("accumulate", int(v)))
        self.seed = QSpinBox()
        self.seed.setObjectName("seedSpin")
        self.seed.setRange(0, 2**31 - 1)
        self.seed.setKeyboardTracking(False)
        self.seed.setToolTip("Seed of the initial weights and the batch order")
        self.seed.valueChanged.connect(lambda v: self._emit("seed", int(v)))
        self.device = QComboBox()
        self.device.setObjectName("devicePicker")
        self.device.addItems(list(DEVICES))
        self.device.activated.connect(lambda _: self._emit("device", self.device.currentText()))

        row = FlowLayout(self, spacing=4)
        row.setContentsMargins(6, 2, 6, 2)
        for label, widget in (
            ("Scenario", self.scenario),
            (None, self.open_button),
            (None, self.save_button),
            (None, self.model),
            ("optimizer", self.optimizer),
            ("lr", self.lr),
            ("momentum", self.momentum),
            ("batch", self.batch),
            ("micro-batches", self.accumulate),
            ("seed", self.seed),
            ("device", self.device),
        ):
            # A label and its field wrap together, as one item of the flow.
            group = QWidget()
            pair = QHBoxLayout(group)
            pair.setContentsMargins(0, 0, 8, 0)
            pair.setSpacing(4)
            if label:
                text = QLabel(label)
                text.setBuddy(widget)
                pair.addWidget(text)
            pair.addWidget(widget)
            row.addWidget(group)
        self._loading = False

    def _chosen(self, index: int) -> None:
        name = self.scenario.itemData(index)
        if name:
            self.scenario_chosen.emit(str(name))

    def _emit(self, field: str, value: object) -> None:
        if not self._loading:
            self.setting_changed.emit(field, value)

    def set_lab(self, info: LabInfo, shown_run: str | None = None) -> None:
        """Show the settings of a freshly built lab (without emitting changes)."""
        self._loading = True
        try:
            sc = info.scenario
            key = str(sc.path) if sc.path else sc.name
            index = self.scenario.findData(key)
            if index < 0:
                label = Path(key).name if sc.path else key
                self.scenario.addItem(label, key)
                index = self.scenario.count() - 1
                self.scenario.setItemData(index, str(key), Qt.ItemDataRole.ToolTipRole)
            self.scenario.setCurrentIndex(index)
            self.scenario.setToolTip(f"{sc.title}\n{sc.summary}")
            names = ", ".join(info.runs[0].names) if len(info.runs[0].names) <= 3 else ""
            count = f"{info.parameter_count:,} parameter{'s' if info.parameter_count != 1 else ''}"
            self.model.setText(f"model: {sc.model.kind} ({names or count})")
            self.model.setToolTip(f"{sc.model.kind}: {count}; data: {sc.data.kind}, {sc.data.n} points")
            run = next((r for r in info.runs if r.name == shown_run), info.runs[0])
            opt = run.spec.optimizer
            self.optimizer.setCurrentText(opt.kind)
            manual = opt.kind == "manual"
            self.optimizer.setEnabled(not manual)
            model = self.optimizer.model()
            if isinstance(model, QStandardItemModel):
                model.item(self.optimizer.findText("manual")).setEnabled(False)
            self.lr.setValue(opt.lr)
            has_momentum = opt.kind in ("SGD", "RMSprop")
            self.momentum.setEnabled(has_momentum)
            self.momentum.setValue(float(opt.options.get("momentum", 0.0)) if has_momentum else 0.0)
            self.momentum.setToolTip("" if has_momentum else f"{opt.kind} has no momentum argument")
            no_data = sc.data.kind == "none"
            self.batch.setRange(1, max(sc.data.n, 1))
            self.batch.setValue(sc.data.batch_size)
            self.batch.setEnabled(not no_data)
            self.batch.setToolTip(
                "This model has no data" if no_data else f"Points per batch (of {sc.data.n})"
            )
            self.accumulate.setValue(run.spec.loop.accumulate)
            self.accumulate.setEnabled(not no_data and sc.model.kind != "gan")
            self.seed.setValue(min(sc.seed, 2**31 - 1))
            self._devices(info)
        finally:
            self._loading = False

    def _devices(self, info: LabInfo) -> None:
        model = self.device.model()
        for i, name in enumerate(DEVICES):
            reason = info.devices.get(name) if name != "auto" else None
            if isinstance(model, QStandardItemModel):
                model.item(i).setEnabled(reason is None)
            self.device.setItemData(
                i,
                reason or f"run on {name}" if name != "auto" else "the fastest device present",
                Qt.ItemDataRole.ToolTipRole,
            )
        self.device.setCurrentText(info.scenario.device)
        self.device.setToolTip(f"Runs on {info.device}")
