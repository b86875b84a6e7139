"""What a frame of Play costs the .grad inspector: one paint, also in frames whose numbers
widen or narrow its columns, and vectors' bars kept between paints only while their values stay;
while Play runs its number columns only widen, and paused they fit their numbers again."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

from gui_helpers import Paints, press
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication


def test_each_play_frame_paints_the_inspector_once_while_its_columns_resize(open_window, qtbot) -> None:
    from gradviz.engine import load_scenario

    w = open_window(replace(load_scenario("forgot-zero-grad"), iterations=100_000))
    table = w.grads.table
    paints = Paints(table.viewport())
    per_frame: list[int] = []  # the paints since the frame before: that frame's
    widths: list[list[int]] = []

    def drawn() -> None:
        per_frame.append(paints.count)
        paints.count = 0
        widths.append([table.columnWidth(c) for c in range(table.columnCount())])

    w.frame_drawn.connect(drawn)
    c = w.controller
    c.set_speed(0)  # many ops a frame: the numbers' digits come and go
    c.play()
    w.grads.growing = False  # columns that narrow as well as widen: a resize in most frames
    qtbot.waitUntil(lambda: len(per_frame) >= 41, timeout=120_000)
    c.pause()
    w.frame_drawn.disconnect(drawn)
    counted = per_frame[2:]  # from the second frame of Play on, each frame's paints whole
    resized = sum(a != b for a, b in pairwise(widths[:-1]))  # frame k against k - 1, as counted
    assert resized >= 5, "columns were resized by the numbers during the frames counted"
    assert max(counted) == 1, f"paints of the inspector per frame: {counted}"
    assert sum(counted) >= len(counted) // 2, "the inspector showed the new numbers"


def test_while_play_runs_no_column_narrows_and_paused_each_fits_its_numbers(open_window, qtbot) -> None:
    from gradviz.engine import load_scenario
    from gradviz.gui.views.grads import NAME, STATE

    w = open_window(replace(load_scenario("forgot-zero-grad"), iterations=100_000))
    view, table = w.grads, w.grads.table
    numbers = range(NAME + 1, STATE)  # the name and state columns give way to them: they wrap

    def widths() -> list[int]:
        return [table.columnWidth(c) for c in range(table.columnCount())]

    seen: list[list[int]] = []  # the widths of the frames drawn while Play ran
    texts: set[tuple[str, ...]] = set()

    def drawn() -> None:
        if not c.playing:
            return
        seen.append(widths())
        texts.add(tuple(table.item(r, 2).text() for r in range(table.rowCount())))

    w.frame_drawn.connect(drawn)
    c = w.controller
    c.set_speed(0)  # many ops a frame: the numbers' digits come and go
    c.play()
    qtbot.waitUntil(lambda: len(seen) >= 40, timeout=120_000)
    c.pause()
    qtbot.waitUntil(lambda: not c.busy, timeout=60_000)
    w.frame_drawn.disconnect(drawn)
    assert len(texts) >= 20, "the .grad column showed new numbers frame after frame"
    narrowed = [(k, col) for k, (a, b) in enumerate(pairwise(seen)) for col in numbers if b[col] < a[col]]
    assert not narrowed, f"(frame, column) narrowed during Play: {narrowed[:5]}"
    # Paused, the widths are what measuring the numbers shown afresh gives.
    paused = widths()
    view._layout_key = None
    view._fit()
    assert widths() == paused
    assert view.growing is False


def test_bars_kept_between_paints_are_the_bars_of_the_values_shown(open_window, qtbot) -> None:
    w = open_window("virtual-batch")  # 32 and 64 weights: histograms; one output: a number
    viewport = w.grads.table.viewport()
    press(qtbot, w, Qt.Key.Key_Right, 3)
    first = viewport.grab().toImage()
    assert w.grads.delegate.vectors, "vector cells were drawn"
    press(qtbot, w, Qt.Key.Key_Right, 4)  # a backward and a step: new .grad and new weights
    kept = viewport.grab().toImage()
    w.grads.delegate.vectors.clear()
    fresh = viewport.grab().toImage()
    assert kept != first, "the new values were drawn"
    assert kept == fresh, "what is drawn from the bars kept is what the values draw afresh"


def test_a_scroll_bar_that_comes_and_goes_with_each_fit_does_not_refit_for_ever(open_window, qtbot) -> None:
    # Where the rows laid out at one width bring a scroll bar and those at the other take it away,
    # the text area narrows and widens by itself: fitting on every resize would never end.
    w = open_window("forgot-zero-grad")
    grads = w.grads
    table, viewport = grads.table, grads.table.viewport()
    table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    qtbot.wait(50)  # laid out
    wide = viewport.width()
    fitted = []
    real = grads._fit
    grads._fit = lambda: (fitted.append(viewport.width()), real())[1]  # type: ignore[method-assign]
    for policy in ("AlwaysOn", "AlwaysOff", "AlwaysOn"):  # the bar comes, goes, comes
        table.setVerticalScrollBarPolicy(getattr(Qt.ScrollBarPolicy, f"ScrollBar{policy}"))
        QApplication.processEvents()
    narrow = viewport.width()
    assert narrow < wide
    assert fitted == [narrow, wide], "back at the width before last, the layout stays"
    # The panel itself resized (the window, a splitter): its text area is fitted again.
    grads.resize(grads.width() - 40, grads.height())
    qtbot.waitUntil(lambda: len(fitted) > 2)
