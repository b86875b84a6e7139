"""What a lecturer sees at the back of the hall: the code shown is the code run, nothing is clipped,
every label is readable in both themes, and colours mean what the captions say."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from gui_helpers import colour_near, press, settle
from PySide6.QtCore import QPoint, QRect
from PySide6.QtGui import QColor, QFontMetrics


def _step(qtbot, window, ops: int) -> None:
    from PySide6.QtCore import Qt

    press(qtbot, window, Qt.Key.Key_Right, ops)
    settle(qtbot, window)


# ------------------------------------------------------------------ code panel
def test_the_code_panel_shows_the_starting_values_the_run_starts_from(open_window, qtbot) -> None:
    w = open_window("set-to-none")
    text = w.code.editor.toPlainText()
    assert "offset = torch.nn.Parameter(torch.tensor([2.0]))  # not in model" in text
    assert "torch.zeros(1)" not in text
    assert "with torch.no_grad():\n    model.weight.fill_(-1.0)\n    model.bias.fill_(0.0)" in text


def test_the_lines_that_ran_and_run_next_stay_in_sight_under_a_long_setup(open_window, qtbot) -> None:
    w = open_window("set-to-none")
    _step(qtbot, w, 12)  # the step has run; zero_grad runs next
    ran, next_line = w.code.line_state()
    assert ran is not None and next_line is not None
    editor = w.code.editor
    for number in (*ran, next_line):
        row = w.code._row_of(number)
        rect = w.code._row_rect(row)
        assert rect is not None
        # The line's text is in sight (its last pixel row of padding may sit at the edge).
        baseline = rect.top() + editor.fontMetrics().ascent()
        assert rect.top() >= 0 and baseline <= editor.viewport().height(), number


def _assert_line_toggles_fit(code) -> int:
    """Every shown checkbox on a code line lies inside the panel, whole, and clear of its line's text."""
    editor = code.editor
    viewport = editor.viewport().geometry()
    panel = code.rect()
    shown = 0
    for row, box in code.toggles:
        if box.parent() is code.gutter or not box.isVisible():
            continue
        shown += 1
        fm = QFontMetrics(box.font())
        # The label is drawn whole: the box is as wide as its indicator and text ask for.
        assert box.width() >= box.sizeHint().width(), box.text()
        assert box.width() > fm.horizontalAdvance(box.text()), box.text()
        where = QRect(box.mapTo(code, QPoint(0, 0)), box.size())
        assert panel.contains(where), (box.text(), where, panel)
        inside_editor = QRect(editor.mapTo(code, QPoint(0, 0)), editor.size())
        assert inside_editor.contains(where), (box.text(), where, inside_editor)
        # Not over the code: after the line's text, or in the column to the right of the text.
        margin = int(editor.document().documentMargin())
        text_width = QFontMetrics(editor.font()).horizontalAdvance(code.lines[row].text)
        text_end = viewport.left() + margin + text_width - editor.horizontalScrollBar().value()
        at = QRect(box.mapTo(editor, QPoint(0, 0)), box.size())  # in the editor's coordinates
        assert at.x() >= min(text_end, viewport.right()), (box.text(), at, text_end)
        assert at.right() <= viewport.right() or at.x() > viewport.right(), (box.text(), at, viewport)
    return shown


@pytest.mark.parametrize("size", [(1280, 720), (1100, 720), (1024, 768)])
def test_the_scale_toggle_fits_inside_the_code_panel(open_window, qtbot, size) -> None:
    w = open_window("two-batch-accumulation")
    w.resize(*size)
    _step(qtbot, w, 2)
    box = w.code.toggle("scale_loss")
    assert box is not None and box.text() == "/ 2"
    # Bring the loss line into view, as a user scrolling the panel would.
    row = next(r for r, b in w.code.toggles if b is box)
    w.code.editor.verticalScrollBar().setValue(max(row - 2, 0))
    qtbot.wait(10)
    assert box.isVisible()
    assert _assert_line_toggles_fit(w.code) >= 1


def test_presentation_mode_shows_no_controls_and_leaving_it_brings_them_back(open_window, qtbot) -> None:
    w = open_window("net-vs-optimizer-zero-grad")  # two runs, and a plane surface with its picker
    _step(qtbot, w, 1)

    def controls() -> list[bool]:
        toggles = any(box.isVisible() for _, box in w.code.toggles)
        return [w.code.runs.isVisible(), w.surface.controls.isVisible(), toggles]

    assert controls() == [True, True, True]
    w.set_presentation(True, full_screen=False)
    qtbot.wait(10)
    assert controls() == [False, False, False], "a lecture shows the code and the surface, not controls"
    names = w.code.title.text() + w.code.legend.text()
    assert all(r.name in names for r in w.controller.info.runs), "the runs shown are named instead"
    w.set_presentation(False, full_screen=False)
    qtbot.wait(10)
    assert controls() == [True, True, True]


# ------------------------------------------------------------ .grad inspector
def _cell_colours(table, row: int, col: int) -> list[QColor]:
    """Every pixel of one cell as drawn."""
    table.scrollToItem(table.item(row, col))
    rect = table.visualItemRect(table.item(row, col))
    image = table.viewport().grab(rect).toImage()
    return [image.pixelColor(x, y) for x in range(image.width()) for y in range(image.height())]


def test_tensor_bars_are_drawn_in_their_run_s_colour(open_window, qtbot) -> None:
    from gradviz.gui.theme import run_color

    w = open_window("zero-grad-myths")
    _step(qtbot, w, 7)  # both runs have a .grad and a fresh backward
    grads = w.grads
    for i, run in enumerate(w.controller.info.runs):
        other = run_color(1 - i)
        for col in (1, 2, 3):  # value, .grad, + backward: vectors drawn as bars
            row = grads.rows[(run.name, "0.weight")]
            pixels = _cell_colours(grads.table, row, col)
            ours = sum(colour_near(p, run_color(i), 12) for p in pixels)
            theirs = sum(colour_near(p, other, 12) for p in pixels)
            assert ours > 20, (run.name, col, "bars in the run's colour")
            assert theirs == 0, (run.name, col, "no bars in another run's colour")


# ------------------------------------------------------------------- timeline
def _drawn_labels(axis) -> list[tuple[QRect, str]]:
    """The tick labels an axis draws now, with their rectangles."""
    from PySide6.QtGui import QPainter, QPicture

    picture = QPicture()
    painter = QPainter(picture)
    try:
        if axis.style["tickFont"]:
            painter.setFont(axis.style["tickFont"])
        specs = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    return [(rect.toRect(), text) for rect, _flags, text in specs[2]]


@pytest.mark.parametrize(
    ("scenario", "ops"),
    [("manual-sgd", 40), ("forgot-zero-grad", 40), ("two-batch-accumulation", 6), ("grad-accumulation", 20)],
)
def test_every_timeline_row_labels_at_least_two_values(open_window, qtbot, scenario, ops) -> None:
    w = open_window(scenario)
    _step(qtbot, w, ops)
    rows = ["loss", "grad"] + (["distance"] if len(w.controller.info.runs) > 1 else [])
    for key in rows:
        labels = _drawn_labels(w.timeline.plots[key].getAxis("left"))
        texts = [text for _, text in labels]
        assert len(texts) >= 2, (scenario, key, texts)
        assert len(set(texts)) == len(texts), (scenario, key, texts)
        rects = [rect for rect, _ in labels]
        for a, b in itertools.pairwise(rects):
            assert not a.intersects(b), (scenario, key, texts, "labels overlap")


def test_the_timeline_legend_keeps_its_entries_apart(open_window, qtbot) -> None:
    import re

    from PySide6.QtGui import QTextDocument

    w = open_window("set-to-none")
    doc = QTextDocument()
    doc.setHtml(w.timeline.legend.text())
    plain = doc.toPlainText().replace("\u00a0", " ")
    assert "step distance" not in plain
    assert re.search(r"S step\s*│\s*distance", plain), plain
    for a, b in (("none", "■ zeros"), ("zero_grad", "■ F"), ("forward", "■ B"), ("backward", "■ S")):
        assert re.search(re.escape(a) + r"\s{2,}" + re.escape(b), plain), (a, b, plain)


@pytest.mark.parametrize(
    ("scenario", "runs"), [("manual-sgd", 1), ("forgot-zero-grad", 2), ("grad-accumulation", 3)]
)
def test_the_op_strip_has_a_readable_band_per_run(open_window, qtbot, scenario, runs) -> None:
    w = open_window(scenario)
    _step(qtbot, w, 8)
    tl = w.timeline
    band = tl.plots["ops"].getViewBox().height()
    assert band >= 10 * max(runs, 2), (scenario, band)
    # Nothing of the plots runs under the legend, and the strip's numbers are inside the plot area.
    assert tl.graphics.geometry().bottom() < tl.legend.geometry().top()
    strip = tl.plots["ops"].mapRectToScene(tl.plots["ops"].boundingRect())
    assert strip.bottom() <= tl.graphics.height() + 1, (strip, tl.graphics.height())


# --------------------------------------------------------------- loss curve
def _two_batch_loss(weight: float) -> float:
    """The two-batch scenario's loss over its whole dataset, in plain PyTorch."""
    import torch

    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(weight)
    x = torch.tensor([[4.0], [2.0]])
    y = 2 * x
    return ((model(x) - y) ** 2).mean().div(2).item()


def test_the_loss_curve_reaches_the_true_loss_at_every_weight(open_window, qtbot) -> None:
    w = open_window("two-batch-accumulation")
    _step(qtbot, w, 6)
    qtbot.waitUntil(
        lambda: w.surface.plane_surface is not None and w.surface.plane_surface.final, timeout=30000
    )
    xs, ys = w.surface.curve.getData()
    assert xs[0] < 0.05, "the curve starts below a weight of 0.05"
    for weight in (float(xs[0]), 0.02, 0.04, 1.0, 1.2, float(xs[-1])):
        drawn = float(np.interp(weight, xs, ys))
        assert drawn == pytest.approx(_two_batch_loss(weight), rel=1e-3, abs=1e-3), weight
    # The view shows the curve's true top, not a flat line below it.
    top = w.surface.plot.getViewBox().viewRange()[1][1]
    assert top >= max(_two_batch_loss(float(xs[0])), float(np.max(ys)))


def test_only_a_diverging_tail_leaves_the_curve_s_view() -> None:
    from gradviz.gui.surface_state import curve_shown

    w = np.linspace(0.0, 2.0, 401)
    bowl = 5 * (w - 2) ** 2
    shown, (lo, hi) = curve_shown(bowl)
    np.testing.assert_array_equal(shown, bowl)
    assert (lo, hi) == (0.0, 20.0)
    # A diverged end (1e30, inf) leaves through the top of the view instead of flattening in it.
    wild = bowl.copy()
    wild[:5] = [np.inf, 1e30, 1e12, np.nan, 1e6]
    shown, (lo, hi) = curve_shown(wild)
    assert hi < 1e3, "the view is not squashed by the tail"
    assert np.isnan(shown[3]), "NaN is a gap"
    assert all(v > hi * 5 for v in shown[[0, 1, 2, 4]]), "the tail is drawn above the view, not on its edge"
    np.testing.assert_array_equal(shown[5:], bowl[5:])


# ----------------------------------------------------------------- themes
def _luminance(colour: QColor) -> float:
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    return (
        0.2126 * channel(colour.redF()) + 0.7152 * channel(colour.greenF()) + 0.0722 * channel(colour.blueF())
    )


def _contrast(a: QColor, b: QColor) -> float:
    """The WCAG contrast ratio of two colours (1 to 21)."""
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def _text_colours(label) -> list[QColor]:
    """The colours a pyqtgraph label's text is drawn in now."""
    doc = label.item.document()
    colours = []
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.isValid() and fragment.text().strip():
                colours.append(fragment.charFormat().foreground().color())
            it += 1
        block = block.next()
    return colours


@pytest.mark.parametrize("theme", ["dark", "light"])
def test_surface_key_is_readable_after_a_theme_switch(open_window, qtbot, theme) -> None:
    w = open_window("forgot-zero-grad")
    _step(qtbot, w, 4)
    w.set_theme("light" if theme == "dark" else "dark")
    w.set_theme(theme)  # switched while the lab is open, as Ctrl+T does
    settle(qtbot, w)
    key = w.surface.key.text()
    assert w.theme.muted in key and "yours" in key and "reference" in key
    assert _contrast(QColor(w.theme.muted), QColor(w.theme.window)) >= 4.5


def test_the_surface_key_sits_above_the_plot_and_covers_no_path(open_window, qtbot) -> None:
    w = open_window("set-to-none")
    _step(qtbot, w, 40)
    surface = w.surface
    assert surface.key.geometry().bottom() < surface.plot_widget.geometry().top()
    # Micro-batches of one step accumulate by design: the key does not call them stale.
    w2 = open_window("two-batch-accumulation")
    assert "earlier micro-batches" in w2.surface.key.text() and "stale" not in w2.surface.key.text()
    assert "stale .grad" in open_window("forgot-zero-grad").surface.key.text()


def _shading_agrees_with_caption(w, caption: str) -> None:
    """The shading drawn under the paths is lighter (or darker) where the loss is lower, as said."""
    surface = w.surface
    image = surface.image
    if image.qimage is None:
        image.render()
    shading = image.qimage
    _xs, _ys, z = surface.grid()
    assert (shading.width(), shading.height()) == z.shape
    low = np.unravel_index(np.nanargmin(z), z.shape)
    high = np.unravel_index(np.nanargmax(z), z.shape)
    light_low = shading.pixelColor(int(low[0]), int(low[1])).lightnessF()
    light_high = shading.pixelColor(int(high[0]), int(high[1])).lightnessF()
    assert abs(light_low - light_high) > 0.2, "the shading shows the difference"
    if "lighter is lower" in caption:
        assert light_low > light_high, (caption, light_low, light_high)
    else:
        assert "darker is lower" in caption, caption
        assert light_low < light_high, (caption, light_low, light_high)


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("scenario", ["forgot-zero-grad", "set-to-none"])
def test_the_surface_caption_says_how_the_shading_runs(open_window, qtbot, theme, scenario) -> None:
    w = open_window(scenario)
    w.set_theme(theme)
    _step(qtbot, w, 4)
    surface = w.surface
    qtbot.waitUntil(lambda: surface.grid() is not None, timeout=30000)
    if surface.mode == "plane":
        qtbot.waitUntil(
            lambda: surface.plane_surface is not None and surface.plane_surface.final, timeout=30000
        )
        settle(qtbot, w)
    _shading_agrees_with_caption(w, surface.caption.text())


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_3d_pit_is_shaded_as_its_caption_says(theme) -> None:
    from gradviz.gui.theme import theme_named
    from gradviz.gui.views.surface3d import mesh_caption, mesh_colours

    t = theme_named(theme)
    pit, peak = mesh_colours(np.array([0.0, 1.0]), t)
    pit_light = QColor.fromRgbF(*map(float, pit)).lightnessF()
    peak_light = QColor.fromRgbF(*map(float, peak)).lightnessF()
    caption = mesh_caption("loss", False, t)
    word = "lighter" if pit_light > peak_light else "darker"
    assert f"{word} is lower" in caption, (theme, caption)
