"""The timeline read at a glance: zeros on a labelled floor, every series named at its end, tick
labels apart at any type size, the bytes saved for backward over time, an op strip that does not
rest on colour alone; and default exports that put a lesson's evidence on the slide."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from gui_helpers import press, settle
from PySide6.QtCore import Qt
from test_view_defects import _drawn_labels


def _step(qtbot, window, ops: int) -> None:
    press(qtbot, window, Qt.Key.Key_Right, ops)
    settle(qtbot, window)


def _labels_apart(axis) -> list[str]:
    labels = _drawn_labels(axis)
    for (a, ta), (b, tb) in itertools.pairwise(labels):
        assert not a.intersects(b), (ta, tb, "labels overlap")
    return [text for _, text in labels]


# ------------------------------------------------------------------ zeros
def test_a_zero_gradient_is_drawn_on_a_floor_labelled_0(open_window, qtbot) -> None:
    w = open_window("set-to-none")
    _step(qtbot, w, 4)  # zero_grad, forward, backward, step: .grad was None (norm 0) before the backward
    tl = w.timeline
    floor = tl.floors["grad"]
    assert floor is not None, "a row with a zero draws its floor band"
    rt = w.controller.history.runs[w.controller.info.runs[0].name]
    assert rt.grad_norm[0] == 0 and rt.grad_norm[2] > 0
    _, y = tl.curves["grad"][0].getData()
    assert y[0] == pytest.approx(floor.level), "the zero is drawn, on the floor"
    assert np.isfinite(y).all()
    low, high = tl.plots["grad"].getViewBox().viewRange()[1]
    assert low <= floor.level <= high and floor.level < float(np.log10(rt.grad_norm[2]))
    texts = _labels_apart(tl.plots["grad"].getAxis("left"))
    assert "0" in texts and len(texts) >= 2, texts
    assert tl.floor_bands["grad"].isVisible()


def test_a_row_without_zeros_has_no_floor(open_window, qtbot) -> None:
    w = open_window("set-to-none")
    _step(qtbot, w, 4)
    assert w.timeline.floors["loss"] is None
    assert "0" not in [t for _, t in _drawn_labels(w.timeline.plots["loss"].getAxis("left"))]


def test_an_export_keeps_the_floor_where_the_whole_range_put_it(open_window, qtbot) -> None:
    from gradviz.gui.views.timeline import floor_below
    from gradviz.gui.window_history import Moment

    w = open_window("set-to-none")
    _step(qtbot, w, 12)
    tl, c = w.timeline, w.controller
    last = Moment(c.info, c.history, c.history.last_tick, hide_future=True)
    ranges = tl.ranges_for(last)
    tl.fix_ranges(ranges)
    floors = []
    for tick in (0, 3, c.history.last_tick):
        tl.draw(Moment(c.info, c.history, tick, hide_future=True))
        floors.append(tl.floors["grad"])
    assert floors == [floor_below(*ranges["grad:zero"])] * 3, "frames do not move the floor"


# -------------------------------------------------------------- end labels
def test_a_first_point_is_drawn_and_named(open_window, qtbot) -> None:
    w = open_window("standard-loop")
    _step(qtbot, w, 2)  # zero_grad, forward: the loss has one point
    labels = w.timeline.end_labels["loss"]
    assert len(labels.marker_points()) == 1, "a one-point series shows its point"
    assert labels.texts() == ["yours"]


def test_runs_whose_loss_differs_in_kind_say_so_at_their_ends_and_in_the_legend(open_window, qtbot) -> None:
    w = open_window("virtual-batch")
    _step(qtbot, w, 4)
    texts = " | ".join(w.timeline.end_labels["loss"].texts())
    assert "one-batch: per batch" in texts and "micro-batches: per micro-batch ÷ 4" in texts, texts
    legend = w.timeline.legend.text()
    assert "(loss per batch)" in legend and "(loss per micro-batch ÷ 4)" in legend


def test_runs_alike_in_kind_are_named_without_a_kind(open_window, qtbot) -> None:
    w = open_window("set-to-none")
    _step(qtbot, w, 4)
    assert w.timeline.end_labels["loss"].texts() == ["none · zeros"], "ends together: one line"


@pytest.mark.parametrize(
    ("scenario", "ops"), [("rnn-tbptt", 7), ("virtual-batch", 10), ("backward-twice", 5), ("rnn-tbptt", 24)]
)
def test_end_labels_stay_apart_and_inside_their_row(open_window, qtbot, scenario, ops) -> None:
    w = open_window(scenario)
    _step(qtbot, w, ops)
    w.timeline.graphics.grab()  # painted: items follow their view's range as they paint
    for key, labels in w.timeline.end_labels.items():
        if not w.timeline.plots[key].isVisible():
            continue
        box = w.timeline.plots[key].getViewBox().sceneBoundingRect().adjusted(-1, -1, 1, 1)
        rects = [item.sceneBoundingRect() for item in labels.items if item.isVisible()]
        assert rects, (scenario, key)
        for r in rects:
            assert box.contains(r), (scenario, key, r, box)
        for a, b in itertools.combinations(rects, 2):
            assert not a.intersects(b), (scenario, key, "end labels overlap")


# ------------------------------------------------------------ tick labels
@pytest.mark.parametrize("scenario", ["forgot-zero-grad", "virtual-batch", "rnn-tbptt", "grad-accumulation"])
def test_tick_labels_stay_apart_at_presentation_type(open_window, qtbot, scenario) -> None:
    w = open_window(scenario)
    w.resize(1920, 1080)
    for view in ("code", "grads", "surface"):
        w.show_panel(view, False)  # the timeline alone, in type for a 1080p projector (27 px)
    _step(qtbot, w, 8)
    w.timeline.set_point_size(20)
    qtbot.wait(200)  # the rows laid out again in the larger type
    settle(qtbot, w)
    for key in ("loss", "grad", "saved", "distance"):
        if w.timeline.plots[key].isVisible():
            assert len(_labels_apart(w.timeline.plots[key].getAxis("left"))) >= 2, (scenario, key)


# ------------------------------------------------------------ saved bytes
def _records(c, run: str, op: str) -> list:
    """The records the window holds of every ``op`` of ``run``, in order."""
    ops = c.history.runs[run].ops
    return [c.history.record(run, j) for j, name in enumerate(ops) if name == op]


def test_the_peak_saved_for_backward_stays_in_view_after_the_step(open_window, qtbot) -> None:
    w = open_window("virtual-batch")
    c = w.controller
    tpi = c.info.ticks_per_iteration
    _step(qtbot, w, tpi)  # the whole first iteration: the step has run
    tl = w.timeline
    assert tl.plots["saved"].isVisible()
    peaks = {}
    for i, run in enumerate(c.info.runs):
        peaks[run.name] = max(rec.footprint.saved for rec in _records(c, run.name, "forward"))
        last = c.history.record(run.name, len(c.history.runs[run.name]) - 1)
        assert last.op == "step" and last.footprint.saved == 0, "after the step autograd holds nothing"
        _, y = tl.curves["saved"][i].getData()
        assert np.nanmax(y) == peaks[run.name]
    assert peaks == {"one-batch": 36_864, "micro-batches": 9_216}
    ends = " | ".join(tl.end_labels["saved"].texts())
    assert "one-batch · peak 36,864 B" in ends and "micro-batches · peak 9,216 B" in ends, ends
    readout = w.grads.readout.text()
    assert "saved for backward 0 B (peak this iteration 36,864 B)" in readout, readout
    assert "saved for backward 0 B (peak this iteration 9,216 B)" in readout, readout


def test_a_lab_that_measures_nothing_has_no_saved_row(open_window, qtbot) -> None:
    w = open_window("set-to-none")
    _step(qtbot, w, 2)
    assert not w.timeline.plots["saved"].isVisible()
    assert "saved" not in w.timeline.legend.text()


# -------------------------------------------------------------- op strip
def test_each_op_on_the_strip_carries_its_letter(open_window, qtbot) -> None:
    from gradviz.gui.theme import OP_LETTERS
    from gradviz.gui.views.timeline import letter_symbol

    w = open_window("standard-loop")
    _step(qtbot, w, 4)
    points = w.timeline.strip_letters.points()
    order = sorted(points, key=lambda p: p.pos().x())
    rt = w.controller.history.runs["yours"]
    assert [p.pos().x() for p in order] == [t + 0.5 for t in rt.ticks]
    assert [p.symbol() for p in order] == [letter_symbol(OP_LETTERS[op]) for op in rt.ops]
    assert [OP_LETTERS[op] for op in rt.ops] == ["Z", "F", "B", "S"]


def test_the_strip_shows_each_runs_op_at_its_tick_and_nothing_where_it_waits(open_window, qtbot) -> None:
    from gradviz.gui.views.timeline import _STRIP_RGBA, OPS

    w = open_window("forgot-zero-grad")
    _step(qtbot, w, 13)
    w.redraw()
    info, history = w.controller.info, w.controller.history
    n = history.last_tick + 1
    want = np.zeros((n, len(info.runs), 4), dtype=np.ubyte)
    for r, run in enumerate(info.runs):
        rt = history.runs[run.name]
        for tick, op in zip(rt.ticks, rt.ops, strict=True):
            want[tick, len(info.runs) - 1 - r] = _STRIP_RGBA[1 + OPS.index(op)]
    assert (want[..., 3] == 0).any(), "yours waits while the reference zeroes"
    assert np.array_equal(w.timeline.strip_image.image, want)
    c = w.controller
    c.seek(5)  # back: the strip ends at the moment shown where a lesson hides the future, else stays
    w.redraw()
    assert np.array_equal(w.timeline.strip_image.image[:n], want[: len(w.timeline.strip_image.image)])


def test_the_time_axis_marks_whole_ticks_only_however_few_ops(open_window, qtbot) -> None:
    w = open_window("standard-loop")
    _step(qtbot, w, 3)  # three ops: pyqtgraph alone would mark every half tick
    w.redraw()
    axis = w.timeline.plots["ops"].getAxis("bottom")
    (x0, x1), _ = w.timeline.plots["ops"].viewRange()
    marks = [v for _, values in axis.tickValues(x0, x1, axis.width()) for v in values]
    assert len(marks) >= 3
    assert all(float(v).is_integer() for v in marks), marks


def test_letters_give_way_where_ops_are_too_dense_to_letter(open_window, qtbot, monkeypatch) -> None:
    w = open_window("forgot-zero-grad")
    c = w.controller
    c.set_speed(0)
    c.play_until(119)  # of the scenario's 160 ops: too many for a letter each
    qtbot.waitUntil(lambda: not c.playing and not c.busy, timeout=60000)
    w.redraw()
    letters = w.timeline.strip_letters
    assert len(letters.points()) == 0
    handed = []
    monkeypatch.setattr(letters, "setData", lambda *a, **k: handed.append(a))
    _step(qtbot, w, 3)
    w.redraw()
    assert c.history.last_tick == 122
    assert handed == [], "no letters to show: the strip's letters are not drawn again every frame"
    box = w.timeline.plots["ops"].getViewBox()
    monkeypatch.undo()
    last = c.history.last_tick
    box.setXRange(last - 9, last + 1, padding=0)  # zoomed in: cells wide enough for a letter again
    w.redraw()
    assert len(letters.points()) > 0 and letters.isVisible()


# ----------------------------------------------------------- default exports
def test_a_lesson_about_what_autograd_holds_keeps_its_evidence_first() -> None:
    from gradviz.engine.scenario import load_scenario
    from gradviz.gui.export_renderer import fit_candidates, keep_order
    from gradviz.gui.layout import DEFAULT_VIEWS

    batch = load_scenario("virtual-batch").lesson
    assert keep_order(fit_candidates(DEFAULT_VIEWS, batch)[0], batch)[0] == "timeline"
    rnn = load_scenario("rnn-tbptt").lesson
    first = fit_candidates(DEFAULT_VIEWS, rnn)[0]
    assert "graph" in first and "surface" not in first, first
    assert keep_order(first, rnn)[:2] == ("timeline", "graph")
    plain = load_scenario("standard-loop").lesson
    assert "graph" not in fit_candidates(DEFAULT_VIEWS, plain)[0]


def test_the_nodes_each_backward_walked_show_the_graph_growing_without_detach(open_window, qtbot) -> None:
    w = open_window("rnn-tbptt")
    c = w.controller
    _step(qtbot, w, 7)  # three chunks: three backward() calls (run keep raised at its second)
    tl = w.timeline
    assert tl.plots["nodes"].isVisible()
    walked = {}
    for i, run in enumerate(c.info.runs):
        walked[run.name] = [rec.footprint.nodes for rec in _records(c, run.name, "backward")]
        _, y = tl.curves["nodes"][i].getData()
        assert list(y[np.isfinite(y)]) == walked[run.name], "one marker per backward(), at its count"
    assert len(set(walked["detach"])) == 1, "detach walks one chunk each time"
    assert walked["retain"] == sorted(set(walked["retain"])) and len(walked["retain"]) == 3, "retain grows"
    ends = " | ".join(tl.end_labels["nodes"].texts())
    assert (
        f"retain · {walked['retain'][-1]:,} nodes" in ends
        and f"detach · {walked['detach'][-1]} nodes" in ends
    )


def test_a_lesson_about_saved_bytes_only_has_no_walked_row(open_window, qtbot) -> None:
    w = open_window("virtual-batch")
    _step(qtbot, w, 3)
    assert w.timeline.plots["saved"].isVisible() and not w.timeline.plots["nodes"].isVisible()
