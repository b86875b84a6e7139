"""The main window: scenario bar, narration, code, surface, .grad inspector and timeline.

The window holds no lab state: the controller owns the cursor and the history,
and every redraw draws one :class:`~gradviz.gui.window_history.Moment` in every visible
view. Redraws are coalesced on a timer and never come faster than the screen
shows them, whatever the speed: each frame draws the newest moment, however many
ops arrived since the last one.
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QActionGroup, QCloseEvent, QKeySequence, QPaintEvent, QResizeEvent
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from gradviz.export.atomic import write_bytes
from gradviz.gui import edits
from gradviz.gui.controller import SPEEDS, Controller
from gradviz.gui.findings_list import FindingsList
from gradviz.gui.layout import (
    DEFAULT_VIEWS,
    LESSON_SHARE,
    MENU_VIEWS,
    PRESENTATION_MIN_SCALE,
    PRESENTATION_VIEWS,
    VIEWS,
    WINDOW_LAYOUT,
    beside_lesson,
    position_text,
    share,
    views_for,
)
from gradviz.gui.lesson_panel import LessonPanel, LessonRunner
from gradviz.gui.narration import narrate
from gradviz.gui.settings import read_list, settings
from gradviz.gui.theme import (
    BASE_POINT_SIZE,
    Theme,
    apply_theme,
    presentation_points,
    run_color,
    run_glyph,
    theme_named,
)
from gradviz.gui.views.code import CodeView
from gradviz.gui.views.grads import GradsView
from gradviz.gui.views.graph import GraphView
from gradviz.gui.views.scenario_bar import ScenarioBar
from gradviz.gui.views.surface import SurfaceView
from gradviz.gui.views.surface3d import Surface3DView
from gradviz.gui.views.timeline import TimelineView
from gradviz.gui.widgets import SteadyLabel, fix_lines
from gradviz.gui.window_history import LabInfo, code_lab

DEFAULT_SCENARIO = "forgot-zero-grad"
SCREEN_HZ = 60.0  # where a screen does not say its refresh rate
SPEED_LABELS = {0: "max"}
SEPARATOR = "  ·  "  # between the status bar's parts


class MainWindow(QMainWindow):
    """The gradviz window.

    Parameters
    ----------
    controller:
        The controller to drive; a threaded one is made when omitted.
    interactive:
        A window for a person: remember layout, theme and last scenario in the
        user's settings, and show errors in dialogs. Offscreen renders pass False.
    """

    first_painted = Signal()
    frame_drawn = Signal()
    # Seconds Qt took to paint what changed (the views draw in redraw(), Qt paints them after).
    painted = Signal(float)

    def __init__(self, controller: Controller | None = None, interactive: bool = True) -> None:
        super().__init__()
        self.setWindowTitle("gradviz")
        self.controller = controller or Controller(threaded=True, parent=self)
        self.interactive = interactive
        self.presenting = False
        # The lesson panel's width, held for the bounds (least, most) it was fitted in.
        self._lesson_width: tuple[tuple[int, int], int] = ((0, 0), 0)
        # What this lesson's questions need, by bounds, the panel's height and the type size.
        self._lesson_needs: dict[tuple[int, int, int, float], int] = {}
        self.points: float = BASE_POINT_SIZE  # body type: larger in presentation mode
        self._fitted_rows: list[int] = []  # the inspector's row heights when the column was last shared
        self.theme: Theme = theme_named("light")
        self.last_error: str | None = None
        self.restore: dict[str, tuple[str, ...]] = {}
        self._editing = False
        self._fell_back = False
        self._painted = False
        self._dirty = False
        self.frames = 0
        self.presentation_panels: tuple[str, ...] = PRESENTATION_VIEWS
        self.panels_shown: tuple[str, ...] = DEFAULT_VIEWS

        self.scenario_bar = ScenarioBar()
        self.narration = QLabel(narrate(None))
        self.narration.setObjectName("narration")
        self.narration.setWordWrap(True)
        self.narration.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        self.code = CodeView()
        self.surface = SurfaceView()
        # Beside the 2-D surface, off until asked for: it probes OpenGL the first time it is shown.
        self.surface3d = Surface3DView(self.surface.state)
        self.surface3d.setVisible(False)
        self.grads = GradsView()
        self.timeline = TimelineView()
        self.graph = GraphView()
        self.graph.stepped.connect(self._graph_stepped)
        self.graph.on_replay_request(self.controller.request_graph)
        self.controller.graph_replayed.connect(lambda got: self.graph.set_replayed(*got))
        self.panels: dict[str, QWidget] = {
            "code": self.code,
            "surface": self.surface,
            "grads": self.grads,
            "timeline": self.timeline,
            "graph": self.graph,
        }
        self.split, self.columns = _splitters({**self.panels, "surface3d": self.surface3d}, tuple(VIEWS))
        self.left, self.right = self.columns["left"], self.columns["right"]
        self._graph_column = False  # whether the graph's column was shown at the last share of the width
        self._split_before_graph: list[int] | None = None  # the other two columns' widths, given back
        surfaces = self.surface.parentWidget()
        assert isinstance(surfaces, QSplitter)  # the 2-D and 3-D surfaces share a row
        self.surfaces: QSplitter = surfaces

        central = QWidget()
        box = QVBoxLayout(central)
        box.setContentsMargins(6, 4, 6, 4)
        box.setSpacing(4)
        box.addWidget(self.scenario_bar)
        self.narration_box = SteadyLabel(self.narration)
        box.addWidget(self.narration_box)
        # A replayed recording's findings, each linked to its op (hidden for a scenario).
        self.findings = FindingsList()
        self.findings.chosen.connect(self.controller.seek)
        box.addWidget(self.findings)
        # A lesson's stop and questions stand beside the views, which keep their own layout.
        self.lesson_panel = LessonPanel()
        self.lesson_panel.hide()
        self.lesson = LessonRunner(self.controller, self.lesson_panel)
        # Once laid out: the panel's width follows what it shows, and in presentation the views' shares too.
        self.lesson_panel.content_changed.connect(lambda: QTimer.singleShot(0, self, self._refit))
        beside = QHBoxLayout()
        beside.setSpacing(6)
        beside.addWidget(self.split, 5)
        beside.addWidget(self.lesson_panel, 2)
        box.addLayout(beside, 1)
        self.setCentralWidget(central)
        # Where the cursor is, new every frame of Play, in plain text (laid out in a fraction of the
        # time a rich text takes); the runs' coloured names and states at the right change seldom.
        self.position = QLabel("")
        self.position.setObjectName("position")
        self.position.setTextFormat(Qt.TextFormat.PlainText)
        self.position_box = SteadyLabel(self.position)
        self.statusBar().addWidget(self.position_box, 1)
        self.status = QLabel("")
        self.status.setObjectName("status")
        self.statusBar().addPermanentWidget(self.status)

        self._make_actions()
        self._make_toolbar()
        self._make_menus()
        self._connect()
        self._redraw_timer = QTimer(self)
        self._redraw_timer.setSingleShot(True)
        self._redraw_timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._redraw_timer.timeout.connect(self.redraw)
        self._frame_due = -1.0  # when the next redraw may start: a frame after the last one's due time
        self._unpainted: float | None = None  # when the redraw whose paint is still to come started
        self.draw_seconds = 0.0  # how long the last redraw took the views, before Qt paints them
        self._paint_started: float | None = None
        self.installEventFilter(self)
        self.resize(1280, 800)
        self.split.setSizes([540, 740])
        self.left.setSizes([330, 250])
        self.right.setSizes([330, 250])
        self._load_settings()
        self.set_theme(self.theme.name)

    # ------------------------------------------------------------ actions
    def _action(self, text: str, keys: tuple[str, ...], slot: Any, tip: str = "") -> QAction:
        action = QAction(text, self)
        action.setShortcuts([QKeySequence(k) for k in keys])
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        action.setToolTip(f"{tip or text} ({', '.join(keys)})" if keys else tip or text)
        action.triggered.connect(slot)
        self.addAction(action)
        return action

    def _make_actions(self) -> None:
        c = self.controller
        self.act_next = self._action(
            "Next op", ("Right", "PgDown"), self._next, "Perform or show the next op"
        )
        self.act_iter = self._action(
            "Next iteration", ("Shift+Right",), c.next_iteration, "To the end of the iteration"
        )
        self.act_prev = self._action("Previous op", ("Left", "PgUp"), self._previous, "Show the op before")
        self.act_play = self._action("Play", ("Space",), c.toggle_play, "Play or pause")
        # A clicker's third key: play, or in a lesson the next stop (choice b while one is asked).
        self.act_blank = self._action("Play or next stop", ("B",), self._blank_key)
        self.act_lesson = self._action(
            "Lesson", ("Ctrl+L",), self.toggle_lesson, "Stop by stop: predict, then see what PyTorch did"
        )
        self.act_lesson.setCheckable(True)
        # Enabled only during a lesson: elsewhere Enter and the letters belong to the fields.
        self.lesson_keys = [self._action("Reveal the answer", ("Return", "Enter"), self.lesson.reveal)]
        for i, keys in enumerate((("1", "A"), ("2",), ("3", "C"), ("4", "D"), ("5", "E"))):
            self.lesson_keys.append(
                self._action(f"Choice {i + 1}", keys, lambda _=False, i=i: self.lesson.choose(i))
            )
        for act in self.lesson_keys:
            act.setEnabled(False)
        self.act_reset = self._action(
            "Reset", ("R",), c.reset, "Back to the start: same weights, same batches"
        )
        self.act_present = self._action(
            "Presentation mode", ("F5",), self.toggle_presentation, "Full screen, large type, chosen views"
        )
        self.act_present.setCheckable(True)
        self.act_leave = self._action("Leave presentation", ("Esc",), lambda: self.set_presentation(False))
        self.act_dark = QAction("Dark theme", self)
        self.act_dark.setCheckable(True)
        self.act_dark.setShortcut(QKeySequence("Ctrl+T"))
        self.act_dark.toggled.connect(lambda on: self.set_theme("dark" if on else "light"))
        self.addAction(self.act_dark)
        self.act_open = self._action("Open scenario or recording…", ("Ctrl+O",), self.open_file_dialog)
        self.act_finding = self._action(
            "Next finding", ("F8",), self.next_finding, "To the op of the recording's next finding"
        )
        self.act_save = self._action("Save scenario as…", ("Ctrl+S",), self.save_file_dialog)
        self.act_picture = self._action("Save picture of the window…", ("Ctrl+P",), self.save_picture_dialog)
        self.act_export = self._action("Export animation…", ("Ctrl+E",), self.export_dialog)
        self.act_quit = self._action("Quit", ("Ctrl+Q",), self.close)
        self.act_3d = QAction("3-D surface", self)
        self.act_3d.setCheckable(True)
        self.act_3d.setToolTip("A rotatable 3-D mesh of the loss surface beside the 2-D one (needs OpenGL)")
        self.act_3d.toggled.connect(self.set_surface3d)
        self.addAction(self.act_3d)
        self.act_panels: dict[str, QAction] = {}
        for key in MENU_VIEWS:
            act = QAction(VIEWS[key].title, self)
            act.setCheckable(True)
            act.setChecked(key in DEFAULT_VIEWS)
            act.toggled.connect(lambda on, k=key: self.show_panel(k, on))
            self.act_panels[key] = act
        self.act_present_panels: dict[str, QAction] = {}
        for key in MENU_VIEWS:
            act = QAction(VIEWS[key].title, self)
            act.setCheckable(True)
            act.toggled.connect(lambda on, k=key: self._presentation_panel(k, on))
            self.act_present_panels[key] = act

    def _make_toolbar(self) -> None:
        bar = QToolBar("Transport")
        bar.setObjectName("transport")
        bar.setMovable(False)
        bar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.act_reset.setIconText("↺ Reset")
        self.act_prev.setIconText("◀ Op")
        self.act_play.setIconText("▶ Play")
        self.act_next.setIconText("Op ▶")
        self.act_iter.setIconText("Iteration ⇥")
        for act in (self.act_reset, self.act_prev, self.act_play, self.act_next, self.act_iter):
            bar.addAction(act)
        bar.addSeparator()
        bar.addWidget(QLabel(" speed "))
        self.speed = QComboBox()
        self.speed.setObjectName("speedPicker")
        self.speed.setToolTip("Ops per second during Play")
        for s in SPEEDS:
            self.speed.addItem(SPEED_LABELS.get(s, f"{s} ops/s"), s)
        self.speed.setCurrentIndex(SPEEDS.index(self.controller.speed))
        self.speed.currentIndexChanged.connect(lambda i: self.controller.set_speed(self.speed.itemData(i)))
        self.speed.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        bar.addWidget(self.speed)
        bar.addSeparator()
        bar.addAction(self.act_present)
        self.addToolBar(bar)
        self.toolbar = bar

    def _make_menus(self) -> None:
        menu = self.menuBar()
        f = menu.addMenu("&File")
        for act in (self.act_open, self.act_save, self.act_picture, self.act_export):
            f.addAction(act)
        f.addSeparator()
        f.addAction(self.act_quit)
        r = menu.addMenu("&Run")
        for act in (self.act_next, self.act_iter, self.act_prev, self.act_play, self.act_reset):
            r.addAction(act)
        r.addSeparator()
        r.addAction(self.act_lesson)
        v = menu.addMenu("&View")
        for act in self.act_panels.values():
            v.addAction(act)
        v.addAction(self.act_3d)
        v.addSeparator()
        v.addAction(self.act_dark)
        v.addAction(self.act_present)
        p = v.addMenu("Views in presentation mode")
        for act in self.act_present_panels.values():
            p.addAction(act)
        h = menu.addMenu("&Help")
        keys = QAction("Keyboard shortcuts", self)
        keys.triggered.connect(self.show_shortcuts)
        h.addAction(keys)
        about = QAction("&About gradviz", self)
        about.triggered.connect(self.show_about)
        h.addAction(about)
        group = QActionGroup(self)
        group.setExclusive(False)

    def _connect(self) -> None:
        c = self.controller
        c.lab_changed.connect(self._on_lab)
        c.changed.connect(self.schedule_redraw)
        c.failed.connect(self.show_error)
        c.playing_changed.connect(self._on_playing)
        # During Play each frame updates the status once; busy comes and goes with every op.
        c.busy_changed.connect(lambda _: None if c.playing else self._update_status())
        c.plane_ready.connect(self._on_plane)
        c.plane_busy.connect(self.surface.set_plane_busy)
        c.plane_failed.connect(self.surface.set_plane_failed)
        self.surface.plane_requested.connect(c.request_plane)
        self.timeline.scrubbed.connect(self._scrub)
        self.code.toggled.connect(self._on_toggle)
        self.code.run_selected.connect(self._on_run_selected)
        bar = self.scenario_bar
        bar.scenario_chosen.connect(self.open_scenario)
        bar.open_requested.connect(self.open_file_dialog)
        bar.save_requested.connect(self.save_file_dialog)
        bar.setting_changed.connect(self._on_setting)

    # ------------------------------------------------------------ scenario
    def open_scenario(self, source: str) -> None:
        """Open a built-in scenario by name or a scenario file by path."""
        self._editing = False
        self.controller.open(source)

    def _restart(self, scenario: Any) -> None:
        self._editing = True
        self.controller.restart_with(scenario, self.restore)

    def _on_lab(self, info: LabInfo) -> None:
        if not self._editing:
            self.restore = edits.restore_orders(info.scenario)
        self._editing = False
        self.code.set_lab(info)
        # The 3-D view first: a surface computed inline during the 2-D view's set_lab reaches it at once.
        self.surface3d.set_lab(info)
        self.surface.set_lab(info)
        self.grads.set_lab(info)
        self.timeline.set_lab(info)
        self.graph.set_lab(info)
        self.scenario_bar.set_lab(info, self.code.run_name)
        if self.lesson.active:  # the stops were the old lab's
            self.set_lesson(False)
        self._show_chosen()
        self._share_left_column(info)
        if self.presenting:
            QTimer.singleShot(0, self, self.fit_presentation)
        self.setWindowTitle(f"gradviz: {info.scenario.title}")
        replay = self.controller.replay
        self._show_replay(replay)
        if self.interactive:
            key = str(info.scenario.path) if info.scenario.path else info.scenario.name
            settings().setValue("last_scenario", replay.source if replay is not None else key)
        self.schedule_redraw()

    def _show_replay(self, replay: Any) -> None:
        """A recording has findings to list and no scenario to edit, save or export from here."""
        self.findings.set_findings(replay.findings if replay is not None else ())
        self.scenario_bar.setVisible(replay is None and not self.presenting)
        for act in (self.act_save, self.act_export, self.act_lesson):
            act.setEnabled(replay is None)
        self.act_finding.setEnabled(replay is not None and bool(replay.findings))

    def next_finding(self) -> None:
        """Go to the op of the first finding after the cursor (the first one again after the last)."""
        replay = self.controller.replay
        ticks = sorted({f.tick for f in replay.findings if f.tick >= 0}) if replay is not None else []
        if ticks:
            self.controller.seek(next((t for t in ticks if t > self.controller.cursor), ticks[0]))

    def _on_plane(self, surface: Any) -> None:
        self.surface.set_plane_surface(surface)
        self.schedule_redraw()

    def set_surface3d(self, on: bool) -> None:
        """Show or hide the 3-D surface beside the 2-D one (a placeholder says why when GL is missing)."""
        self.act_3d.blockSignals(True)
        self.act_3d.setChecked(on)
        self.act_3d.blockSignals(False)
        if on:
            self.surface3d.activate()
        self._show_chosen()
        if on:
            width = max(self.surfaces.width(), 2)
            self.surfaces.setSizes([width // 2, width - width // 2])
        if self.interactive:
            settings().setValue("surface3d", on)
        self.schedule_redraw()

    def _on_toggle(self, run: str, what: str, on: bool) -> None:
        info = self.controller.info
        if info is None:
            return
        sc = info.scenario
        if what == "zero_grad":
            new = edits.set_zero_grad(sc, run, on, self.restore.get(run))
        elif what == "set_to_none":
            new = edits.set_loop_option(sc, run, set_to_none=on)
        else:
            new = edits.set_loop_option(sc, run, scale_loss=on)
        self._restart(new)

    def _on_run_selected(self, run: str) -> None:
        if self.controller.info is not None:
            self.scenario_bar.set_lab(self.controller.info, run)
            self.graph.set_run(run)

    def _on_setting(self, field: str, value: Any) -> None:
        info = self.controller.info
        if info is None:
            return
        sc = info.scenario
        if field == "optimizer":
            new = edits.set_optimizer(sc, kind=value)
        elif field == "lr":
            new = edits.set_optimizer(sc, lr=value)
        elif field == "momentum":
            new = edits.set_optimizer(sc, momentum=value)
        elif field == "batch_size":
            new = edits.set_data(sc, batch_size=value)
        elif field == "accumulate":
            new = edits.set_loop_option(sc, self.code.run_name or sc.runs[0].name, accumulate=value)
        else:
            new = edits.set_top(sc, **{field: value})
        self._restart(new)

    def open_file_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self,
            "Open scenario or recording",
            "",
            "Scenarios and recordings (*.toml *.json);;Scenario files (*.toml);;"
            "Recordings of gradviz watch (*.json);;All files (*)",
        )
        if path:
            self.open_scenario(path)

    def save_file_dialog(self) -> None:
        info = self.controller.info
        if info is None:
            return
        path, _ = QFileDialog.getSaveFileName(
            self, "Save scenario", f"{info.scenario.name}.toml", "Scenario files (*.toml)"
        )
        if path:
            self.save_scenario(path)

    def save_scenario(self, path: str) -> None:
        """Write the current scenario (with the user's changes) as TOML, atomically."""
        from gradviz.engine.scenario import dumps_scenario

        assert self.controller.info is not None
        try:
            write_bytes(Path(path), dumps_scenario(self.controller.info.scenario).encode("utf-8"))
        except OSError as exc:
            self.show_error(f"{path}: cannot be written ({exc.strerror or exc}).")

    def export_dialog(self) -> None:
        """Export… (Ctrl+E): the steps taken so far, preset as the range, as a GIF or video."""
        info = self.controller.info
        if info is None:
            return
        from gradviz.gui.export_dialog import ExportDialog

        self.controller.pause()
        dialog = ExportDialog(
            info.scenario,
            self.controller.cursor + 1,
            presentation=self.presenting,
            theme=self.theme.name,
            parent=self,
        )
        dialog.exec()

    def save_picture_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save picture", "gradviz.png", "PNG images (*.png)")
        if path:
            from gradviz.gui.render import save_png

            try:
                save_png(self.grab().toImage(), path)
            except Exception as exc:
                self.show_error(str(exc))

    def show_error(self, message: str) -> None:
        """Show a user error as one sentence in a dialog that does not block the window."""
        self.last_error = message
        self._editing = False
        self._update_status()
        if not self.interactive:
            return
        box = QMessageBox(QMessageBox.Icon.Warning, "gradviz", message, QMessageBox.StandardButton.Ok, self)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.setObjectName("errorDialog")
        box.open()
        if self.controller.info is None and not self._fell_back:
            # Nothing is loaded yet (a bad file on the command line): fall back to the default.
            self._fell_back = True
            self.controller.open(DEFAULT_SCENARIO)

    def show_shortcuts(self) -> None:
        text = (
            "→ or Page Down: next op\nShift+→: next iteration\n← or Page Up: previous op\n"
            "Space or B: play / pause\nR: reset\nF5: presentation mode, Esc: leave it\n"
            "Ctrl+T: dark theme\nClick or drag the timeline to scrub history."
        )
        QMessageBox.information(self, "Keyboard shortcuts", text)

    def show_about(self) -> None:
        from gradviz.gui.about import AboutDialog

        AboutDialog(self).exec()

    # -------------------------------------------------------------- moving
    def _next(self) -> None:
        if self.lesson.active:
            self.lesson.next()
        else:
            self.controller.next_op()

    def _previous(self) -> None:
        if self.lesson.active:
            self.lesson.previous()
        else:
            self.controller.prev_op()

    def _blank_key(self) -> None:
        if self.lesson.asking and self.lesson.choose(1):
            return
        if self.lesson.active:
            self.lesson.next()
        else:
            self.controller.toggle_play()

    def start_lesson_when_built(self) -> None:
        """Start the lesson of the next lab once it is built (``gradviz open --lesson``)."""

        def start(_info: object) -> None:
            self.controller.lab_changed.disconnect(start)
            QTimer.singleShot(0, self, lambda: self.set_lesson(True))

        self.controller.lab_changed.connect(start)

    def toggle_lesson(self) -> None:
        self.set_lesson(not self.lesson.active)

    def set_lesson(self, on: bool) -> bool:
        """Start (or end) the scenario's lesson; False when it has no stops to start."""
        started = self.lesson.start() if on else False
        if not on:
            self.lesson.stop()
        self.act_lesson.blockSignals(True)
        self.act_lesson.setChecked(started)
        self.act_lesson.blockSignals(False)
        for act in self.lesson_keys:
            act.setEnabled(started)
        self._lesson_width, self._lesson_needs = ((0, 0), 0), {}  # measured anew for this lesson's stops
        if self.presenting:
            self._show_chosen()
            QTimer.singleShot(0, self, self.fit_presentation)  # the views' share of the screen changed
        if on and not started:
            self.show_error("This scenario's lesson has no stops; open a built-in scenario to follow one.")
        return started

    def _scrub(self, x: float) -> None:
        self.controller.pause()
        # Tick t occupies [t, t + 1) on the timeline (its cell of the op strip; its points sit at t + 0.5).
        self.controller.seek(x)

    def _on_playing(self, playing: bool) -> None:
        self.act_play.setIconText("❚❚ Pause" if playing else "▶ Play")
        self.act_play.setText("Pause" if playing else "Play")
        self.timeline.set_growing(playing)
        self.grads.set_growing(playing)
        self._update_status()
        if not playing and self.presenting:
            self.schedule_redraw()  # drawn paused: the inspector's rows are shared anew if they wrapped

    # -------------------------------------------------------------- drawing
    @property
    def frame_interval(self) -> float:
        """Seconds between two frames of the screen the window is on."""
        screen = self.screen()
        rate = screen.refreshRate() if screen is not None else 0.0
        return 1.0 / (rate if 10.0 <= rate <= 500.0 else SCREEN_HZ)

    def schedule_redraw(self) -> None:
        """Ask for a redraw; every request within one frame of the screen makes one redraw.

        Redraws keep to a grid of the screen's frames: each is due a frame after the last one
        was due (not after it started), so that a timer's whole milliseconds, rounded either
        way, neither add up to a slower rate nor to a faster one.
        """
        self._dirty = True
        if not self._redraw_timer.isActive():
            due = self._frame_due - time.perf_counter()
            self._redraw_timer.start(max(0, round(due * 1000)))

    def _graph_stepped(self, sentence: str) -> None:
        """The animated backward reached a node: say what happens there; at its end, the op's sentence."""
        if sentence:
            self.narration.setText(sentence)
        else:
            self.schedule_redraw()

    def redraw(self) -> None:
        """Draw the controller's current moment in every visible view."""
        self._redraw_timer.stop()
        started = time.perf_counter()
        interval = self.frame_interval
        # On the grid while this redraw is less than half a frame late; a later one starts it anew.
        on_grid = started - self._frame_due < interval / 2
        self._frame_due = (self._frame_due if on_grid else started) + interval
        self._dirty = False
        moment = self.controller.moment()
        if moment is None:
            return
        if self.lesson.hides_future:
            moment = replace(moment, hide_future=True)  # the room predicts what has not happened
        shown = code_lab(moment)
        if shown is not None and self.code.info is not shown:
            self.code.set_lab(shown)  # a recording's op in another file of the script
        for _key, view in self.panels.items():
            if view.isVisible() or not self.isVisible():
                view.draw(moment)  # type: ignore[attr-defined]
        if self.surface3d.isVisible():
            self.surface3d.draw(moment)
        if self.presenting and not self.controller.playing and self.grads.row_heights() != self._fitted_rows:
            # Rows wrapped anew at a pause: share the column again, so no row shows cut in half.
            QTimer.singleShot(0, self, self._fit_columns)
        if self.findings.isVisible():
            self.findings.mark(moment.tick)
        text = narrate(moment if shown is None else replace(moment, info=shown), self.code.run_name)
        # Within an animated backward the sentence is the graph's: what happens at the node reached.
        text = (self.graph.part_sentence() if self.graph.isVisible() else None) or text
        if text != self.narration.text():
            self.narration.setText(text)
        self._update_status()
        self.frames += 1
        self.draw_seconds = time.perf_counter() - started
        self._unpainted = started
        self.frame_drawn.emit()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        # Qt paints every changed widget of the window in one UpdateRequest; a zero timer
        # started here fires once that paint is done.
        if watched is self and event.type() == QEvent.Type.UpdateRequest and self._paint_started is None:
            self._paint_started = time.perf_counter()
            QTimer.singleShot(0, self, self._after_paint)
        return False

    def _after_paint(self) -> None:
        done = time.perf_counter()
        started, self._paint_started = self._paint_started, None
        if started is not None:
            self.painted.emit(done - started)
        if self._unpainted is not None:
            # The frame is on screen: the worker may step for what is left of it.
            spent = done - self._unpainted
            self._unpainted = None
            self.controller.frame_shown(spent, self.frame_interval)

    def _update_status(self) -> None:
        c = self.controller
        info, moment = c.info, c.moment()
        if info is None or moment is None:
            self.position_box.set_text("Loading…")
            self.status.setText("")
            return
        parts = [position_text(moment.tick, info.ticks_per_iteration, info.scenario.iterations)]
        if c.replay is not None:
            parts = [c.replay.position(moment.tick)]
        if c.history is not None and moment.tick < c.history.last_tick:
            parts.append(f"history: {c.history.last_tick + 1} ops (→ replays them)")
        elif c.finished:
            parts.append(
                f"the {'recording' if c.replay is not None else 'scenario'}'s last op: R starts again"
            )
        self.position_box.set_text(SEPARATOR.join(parts))
        runs = []
        for i, run in enumerate(info.runs):
            status = moment.status(run.name)
            word = {
                "running": "finished" if c.finished else "running",
                "diverged": "DIVERGED (inf/NaN)",
                "error": "stopped by an error",
            }[status]
            runs.append(f"<span style='color:{run_color(i)}'>{run_glyph(i)} {run.name}</span>: {word}")
        parts = [", ".join(runs), f"device {info.device}"]
        if c.playing:
            parts.append("playing")
        elif c.busy:
            parts.append("working…")
        text = SEPARATOR.join(parts)
        if text != self.status.text():
            self.status.setText(text)

    def paintEvent(self, event: QPaintEvent) -> None:
        super().paintEvent(event)
        if not self._painted:
            self._painted = True
            # On screen: the heavy imports may start (a lab being built has started them already).
            self.controller.warm()
            self.first_painted.emit()

    # --------------------------------------------------------------- theme
    def set_theme(self, name: str) -> None:
        """Switch between the light and the dark theme."""
        self.theme = theme_named(name)
        app = QApplication.instance()
        if isinstance(app, QApplication):
            apply_theme(app, self.theme, self.points)
        for view in self.panels.values():
            view.set_theme(self.theme)  # type: ignore[attr-defined]
        self.surface3d.set_theme(self.theme)
        self._fix_narration_height()
        self.act_dark.blockSignals(True)
        self.act_dark.setChecked(self.theme.dark)
        self.act_dark.blockSignals(False)
        if self.interactive:
            settings().setValue("theme", self.theme.name)
        self.schedule_redraw()

    # -------------------------------------------------------- presentation
    def toggle_presentation(self) -> None:
        self.set_presentation(not self.presenting)

    def _fix_narration_height(self) -> None:
        # Two lines, always: a label that grows and shrinks with its text would re-lay out
        # (and repaint) the whole window on every op.
        fix_lines(self.narration, 2)
        self.narration_box.setFixedHeight(self.narration.maximumHeight())

    def set_presentation(self, on: bool, full_screen: bool = True) -> None:
        """Presentation mode: large type, no chrome, only the views chosen for it."""
        if on == self.presenting:
            return
        self.presenting = on
        self.act_present.blockSignals(True)
        self.act_present.setChecked(on)
        self.act_present.blockSignals(False)
        if on:
            self._normal_sizes = [sp.sizes() for sp in self._splitters()]
        screen = self.screen().size().height() if full_screen and self.screen() else self.height()
        self.points = presentation_points(screen) if on else BASE_POINT_SIZE
        app = QApplication.instance()
        if isinstance(app, QApplication):
            apply_theme(app, self.theme, self.points)
        for w in (self.menuBar(), self.toolbar, self.scenario_bar, self.statusBar()):
            w.setVisible(not on)
        self.scenario_bar.setVisible(not on and self.controller.replay is None)
        self._show_chosen()
        for view in (*self.panels.values(), self.surface3d):
            if hasattr(view, "set_point_size"):
                view.set_point_size(self.points)
        self.lesson_panel.set_presenting(on)
        self._fix_narration_height()
        if full_screen:
            if on:
                self._normal_geometry = self.saveGeometry()
                self.showFullScreen()
            else:
                self.showNormal()
        # A lecture shows content: the plane's picker, Recompute and the line checkboxes stay in the
        # window (given back once the panel has its size: a checkbox out of sight is hidden).
        self.surface.show_controls(not on)
        if on:
            self.code.show_controls(False)
            self.fit_presentation()
        else:
            if hasattr(self, "_normal_sizes"):
                QApplication.processEvents()  # the normal type's minimum sizes, before the sizes go back
                for splitter, sizes in zip(self._splitters(), self._normal_sizes, strict=True):
                    splitter.setSizes(sizes)
                QTimer.singleShot(0, self, self._refit)  # a lesson's panel: back to the window's width
            QApplication.processEvents()
            self.code.show_controls(True)
        self.grads.fit_columns()
        self.schedule_redraw()

    def _splitters(self) -> list[QSplitter]:
        return [self.split, *self.split.findChildren(QSplitter)]

    def fit_presentation(self) -> None:
        """Share the screen so the loop's every line and the lesson's rows are in view.

        The lesson panel is as wide as its questions need; the code column as wide as the
        loop's longest line (within limits that leave the surface readable). Down the column
        the code and the .grad inspector share the height by :func:`~gradviz.gui.layout.share`:
        the inspector no taller than its rows, the code the rest, and where both do not fit,
        at least the loop and the leading rows.
        """
        if not self.presenting:
            return
        QApplication.processEvents()  # the new type's metrics and the full-screen size
        self._show_chosen()  # the views that stay readable beside a lesson at this width
        self._fit_lesson_panel()
        QApplication.processEvents()
        self._fit_columns()

    def _fit_columns(self) -> None:
        """The code column as wide as the loop, the code and the inspector sharing its height by need."""
        code_w, _ = self.code.loop_extent()
        # Wide enough for the setup lines too where the surface can spare it: unwrapped, the whole fits.
        editor = self.code.editor
        chrome = self.code.width() - editor.viewport().width() + 2 * int(editor.document().documentMargin())
        widest = max((editor.fontMetrics().horizontalAdvance(d.text) for d in self.code.lines), default=0)
        code_w = max(code_w, widest + chrome)
        graph = self.columns["graph"].width() if self._graph_column else 0  # keeps its share
        width = self.split.width() - graph
        if self.right.isVisible() and self.left.isVisible():
            # As wide as the loop, within limits; never so wide that the surface loses its readable width.
            scale = PRESENTATION_MIN_SCALE if self.presenting else 1.0
            right = WINDOW_LAYOUT.minimum(self._shown_views(self.right), scale)[0]
            left = min(max(code_w, int(width * 0.4)), int(width * 0.62), width - right)
            self.split.setSizes([left, width - left, graph])
            QApplication.processEvents()  # lines longer than the column wrap: measure them wrapped
        if self.grads.isVisible() and self.code.isVisible():
            grads = self.grads
            lead = sum(1 for r in grads.shown_rows if r.lead) or sum(
                1 for r in grads.shown_rows if r.run == grads.shown_rows[0].run
            )
            # Twice: text wrapped anew at the first share's sizes (readouts, code) changes what each needs.
            for _ in range(2):
                loop, whole = self._code_heights()
                least = [loop, grads.content_height(lead)]
                total = sum(self.left.sizes())
                _, rows = share(total, least, [whole, grads.content_height()])
                rows = grads.whole_rows_height(rows)  # the code takes what a half row would have
                self.left.setSizes([total - rows, rows])
                QApplication.processEvents()
        self._fitted_rows = self.grads.row_heights()
        self.code.show_loop()

    def _shown_views(self, within: QWidget) -> list[str]:
        """The names of the views shown inside ``within`` (a column, or all of them)."""
        views = {**self.panels, "surface3d": self.surface3d}
        return [k for k, v in views.items() if not v.isHidden() and within.isAncestorOf(v)]

    def _code_heights(self) -> tuple[int, int]:
        """The code panel's height that shows the loop (and the optimizer's setup line), and the one
        that shows every line."""
        return self.code.loop_extent()[1], self.code.whole_height()

    def _fit_lesson_panel(self) -> None:
        """Make the lesson panel as wide as its stop, questions and reveals need to be read unscrolled.

        From :data:`~gradviz.gui.layout.LESSON_SHARE`'s least to its most of the window's
        width, never taking what the views need to stay readable.
        """
        panel = self.lesson_panel
        if not panel.isVisible():
            return
        central = self.centralWidget()
        assert central is not None  # made in __init__
        width = central.width()
        scale = PRESENTATION_MIN_SCALE if self.presenting else 1.0
        readable = WINDOW_LAYOUT.minimum(self._shown_views(self.split), scale)[0]
        views = max(readable, self.split.minimumSizeHint().width())
        # Beyond its least, the panel leaves the loop unwrapped beside the other column's readable width.
        right = self._shown_views(self.right) if self.right.isVisible() else []
        loop = self.code.loop_extent()[0] + WINDOW_LAYOUT.minimum(right, scale)[0]
        share_least = int(width * LESSON_SHARE[0])
        most = min(
            int(width * LESSON_SHARE[1 if self.presenting else 2]),
            width - views - 20,
            max(width - loop - 20, share_least),
        )
        # One width for the whole lesson, measured over every stop's questions: the views keep still
        # beside it. A reveal widens it only where one answer could not be read whole, and that holds.
        low, high = max(min(share_least, most), 1), max(most, 1)
        held = self._lesson_width[1] if self._lesson_width[0] == (low, high) else 0
        start = min(max(self._lesson_need(low, high), held), high)
        need = panel.least_width(start, high, partial(panel.answers_fit, height=panel.height()))
        self._lesson_width = ((low, high), need)
        panel.setFixedWidth(need)

    def _lesson_need(self, low: int, high: int) -> int:
        """The width from ``low`` to ``high`` that every stop's questions need, measured once per size."""
        panel = self.lesson_panel
        key = (low, high, panel.height(), self.points)
        if key not in self._lesson_needs:
            self._lesson_needs[key] = panel.lesson_width(self.lesson.stops, low, high, panel.height())
        return self._lesson_needs[key]

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        QTimer.singleShot(0, self, self._refit)

    def _refit(self) -> None:
        if self.presenting:
            self.fit_presentation()
        elif self.lesson.active:
            # A lesson's panel takes room from the views: they share what is left by what they show.
            self._fit_lesson_panel()
            QApplication.processEvents()
            self._fit_columns()

    def _presentation_panel(self, key: str, on: bool) -> None:
        chosen = [k for k in MENU_VIEWS if (k == key and on) or (k != key and k in self.presentation_panels)]
        self.presentation_panels = tuple(chosen)
        if self.interactive:
            settings().setValue("presentation_panels", list(chosen))
        if self.presenting:
            self._show_chosen()

    def show_panel(self, key: str, on: bool) -> None:
        """Show or hide a panel outside presentation mode."""
        self.panels_shown = tuple(
            k for k in MENU_VIEWS if (k == key and on) or (k != key and k in self.panels_shown)
        )
        if not self.presenting:
            self._show_chosen()
        self.schedule_redraw()

    def _share_left_column(self, info: LabInfo) -> None:
        """Give the .grad inspector half the left column when the lesson leads with its rows."""
        lesson = info.scenario.lesson
        total = sum(self.left.sizes()) or self.left.height()
        code = total // 2 if lesson is not None and lesson.params else total * 3 // 5
        self.left.setSizes([code, total - code])

    def _show_chosen(self) -> None:
        """Show the views chosen for this mode, less a surface the scenario's lesson leaves out."""
        chosen = self.presentation_panels if self.presenting else self.panels_shown
        info = self.controller.info
        shown = views_for(info.scenario.lesson if info else None, (*chosen, "surface3d"))
        if self.presenting and self.lesson.active:
            shown = beside_lesson(shown, self._room_beside_lesson(), PRESENTATION_MIN_SCALE)
        for key, view in self.panels.items():
            view.setVisible(key in shown)
        self.surface3d.setVisible(self.act_3d.isChecked() and "surface3d" in shown)
        # The graph is captured only while it is shown: capture costs every op a little.
        self.controller.capture_graphs("graph" in shown)
        self._fix_splitters()

    def _room_beside_lesson(self) -> int:
        """The views' width beside the lesson panel at the width its questions need.

        Less what the loop's longest line needs beyond its column's readable minimum: a view
        kept beside the panel never makes the loop wrap.
        """
        width = self.width()
        need = self._lesson_need(int(width * LESSON_SHARE[0]), int(width * LESSON_SHARE[1]))
        column = WINDOW_LAYOUT.minimum([v for v in ("code", "grads") if v in self.presentation_panels])
        loop = self.code.loop_extent()[0] - int(column[0] * PRESENTATION_MIN_SCALE)
        return width - need - max(loop, 0) - 20

    def _fix_splitters(self) -> None:
        # A splitter whose children are all hidden would keep an empty column.
        _hide_empty(self.split)
        # The graph's column shown or hidden just now: the columns share the width anew by their shares
        # (once laid out: a window not yet shown has not its width).
        graph = not self.columns["graph"].isHidden()
        if graph != self._graph_column:
            self._graph_column = graph
            if graph:  # the reader's split of the other two columns, as it was before the graph's came
                self._split_before_graph = self.split.sizes()[:2]
            QTimer.singleShot(0, self, self._share_columns)

    def _share_columns(self) -> None:
        """The graph's column at its share, taken from the surfaces' column down to its readable
        width before the code's: the loop stays as unwrapped as it was."""
        sizes = self.split.sizes()
        if not self._graph_column or len(sizes) != 3:
            kept, self._split_before_graph = self._split_before_graph, None
            if kept is not None and len(sizes) == 3 and min(kept) > 0 and min(sizes[:2]) > 0:
                # The graph's column gone: the other two back at the split the reader had, to scale.
                total = sizes[0] + sizes[1]
                left = round(total * kept[0] / sum(kept))
                self.split.setSizes([left, total - left, 0])
                return
            self.split.setSizes(WINDOW_LAYOUT.widths(self._shown_views(self.split), self.split.width()))
            return
        total = sum(sizes)
        graph = max(WINDOW_LAYOUT.widths(self._shown_views(self.split), total)[2], VIEWS["graph"].min_size[0])
        right = max(sizes[1] - graph, WINDOW_LAYOUT.minimum(self._shown_views(self.right))[0])
        self.split.setSizes([total - right - graph, right, graph])

    # ------------------------------------------------------------ settings
    def _load_settings(self) -> None:
        if not self.interactive:
            return
        store = settings()
        self.theme = theme_named(str(store.value("theme", "light")))
        geometry = store.value("geometry")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        for key, splitter in (("split", self.split), ("left", self.left), ("right", self.right)):
            state = store.value(f"splitter/{key}")
            if isinstance(state, QByteArray):
                splitter.restoreState(state)
        self.panels_shown = read_list(store, "panels", DEFAULT_VIEWS)
        self.presentation_panels = read_list(store, "presentation_panels", PRESENTATION_VIEWS)
        speed = store.value("speed")
        if speed is not None and int(speed) in SPEEDS:
            self.speed.setCurrentIndex(SPEEDS.index(int(speed)))
        for key, act in self.act_panels.items():
            act.setChecked(key in self.panels_shown)
        if str(store.value("surface3d", "false")).lower() == "true":
            # After the window is up: the OpenGL probe starts a process and takes a second.
            QTimer.singleShot(0, self, lambda: self.set_surface3d(True))
        for key, act in self.act_present_panels.items():
            act.blockSignals(True)
            act.setChecked(key in self.presentation_panels)
            act.blockSignals(False)

    def save_settings(self) -> None:
        """Remember layout, theme, panels and speed."""
        if not self.interactive:
            return
        store = settings()
        if self.presenting and hasattr(self, "_normal_geometry"):
            store.setValue("geometry", self._normal_geometry)
        else:
            store.setValue("geometry", self.saveGeometry())
        for key, splitter in (("split", self.split), ("left", self.left), ("right", self.right)):
            store.setValue(f"splitter/{key}", splitter.saveState())
        store.setValue("panels", list(self.panels_shown))
        store.setValue("surface3d", self.act_3d.isChecked())
        store.setValue("theme", self.theme.name)
        store.setValue("speed", self.controller.speed)
        store.sync()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.save_settings()
        self.controller.shutdown()
        super().closeEvent(event)


def _splitters(widgets: dict[str, QWidget], shown: tuple[str, ...]) -> tuple[QSplitter, dict[str, QSplitter]]:
    """The window's splitters, built from :data:`~gradviz.gui.layout.WINDOW_LAYOUT`.

    Returns the outer splitter and each column's, by the column's name.
    """
    split = QSplitter(Qt.Orientation.Horizontal)
    columns = {}
    for c, column in enumerate(WINDOW_LAYOUT.arrange(shown)):
        rows = QSplitter(Qt.Orientation.Vertical)
        for r, cell in enumerate(column.cells):
            if len(cell.views) == 1:
                rows.addWidget(widgets[cell.views[0]])
            else:
                beside = QSplitter(Qt.Orientation.Horizontal)
                beside.setChildrenCollapsible(False)
                for view in cell.views:
                    beside.addWidget(widgets[view])
                rows.addWidget(beside)
            rows.setStretchFactor(r, cell.stretch)
        rows.setChildrenCollapsible(False)
        split.addWidget(rows)
        split.setStretchFactor(c, column.stretch)
        columns[column.name] = rows
    split.setChildrenCollapsible(False)
    return split, columns


def _hide_empty(splitter: QSplitter) -> bool:
    """Hide every nested splitter none of whose views is shown; True when ``splitter`` shows one."""
    any_shown = False
    for i in range(splitter.count()):
        child = splitter.widget(i)
        if isinstance(child, QSplitter):
            shown = _hide_empty(child)
            child.setVisible(shown)
        else:
            shown = child is not None and child.isVisibleTo(splitter)
        any_shown = any_shown or shown
    return any_shown


def wait_until_idle(window: MainWindow, timeout: float = 30.0) -> None:
    """Process events until the controller has nothing in flight (for offscreen rendering)."""
    deadline = time.monotonic() + timeout
    app = QApplication.instance()
    while time.monotonic() < deadline:
        app.processEvents()  # type: ignore[union-attr]
        if not window.controller.busy and window.controller.info is not None:
            return
        time.sleep(0.002)
