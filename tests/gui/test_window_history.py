"""The window's copy of the history stays bounded: every op's columns, the recent records only,
and the older records rebuilt by the lab, exactly, when a moment gone back to needs them."""

from __future__ import annotations

import numpy as np

from gradviz.engine import Lab, load_scenario
from gradviz.engine.scenario import Scenario
from gradviz.gui.window_history import (
    GRAPHS_KEPT,
    Entry,
    Moment,
    Recent,
    StepResult,
    WindowHistory,
    describe_lab,
    entries_since,
)

RECENT = 40


def _scenario(ticks: int) -> Scenario:
    """forgot-zero-grad, at least long enough for ``ticks`` ticks and a few more (4 an iteration)."""
    builtin = load_scenario("forgot-zero-grad")
    return builtin.with_overrides(iterations=max(builtin.iterations, ticks // 4 + 4))


def _played(ticks: int, recent: int = RECENT) -> tuple[Lab, WindowHistory]:
    """A lab keeping ``recent`` full records per run, stepped ``ticks`` ticks a few at a time as Play does."""
    lab = Lab(_scenario(ticks), recent=recent)
    info = describe_lab(lab)
    history = WindowHistory(info)
    known = {r.name: 0 for r in lab.runs}
    while lab.tick < ticks:
        for _ in range(7):
            lab.step()
        history.extend(StepResult(entries_since(lab, known), (), {}, -2, {}, False))
        known = {r.name: len(lab.history[r.name]) for r in lab.runs}
    return lab, history


def _fetch(lab: Lab, history: WindowHistory, tick: int) -> None:
    """What the lab worker does for the controller: rebuild the records the moment lacks."""
    history.add_fetched({(run, i): lab.record(run, i) for run, i in history.missing(tick)})


def test_the_window_history_holds_the_labs_recent_records_copying_no_array_and_every_ops_columns() -> None:
    lab, history = _played(1_000)
    assert history.info.recent == RECENT
    for run in lab.runs:
        rt, h = history.runs[run.name], lab.history[run.name]
        assert len(rt) == len(h)
        assert list(rt.ticks) == list(h.ticks) and np.array_equal(rt.loss, h.loss, equal_nan=True)
        kept = [i for i in range(len(rt)) if rt.records[i] is not None]
        assert RECENT <= len(kept) <= RECENT + RECENT // 8
        assert kept == list(range(len(rt) - len(kept), len(rt))), "the newest ops, none older"
        # The lab's own copies, not copied again: the window's history costs its columns and the
        # records' small objects only.
        for i in kept:
            mine, lab_own = rt.records[i].snapshot, h.records[i].snapshot
            assert mine.weights is lab_own.weights and mine.grad_copy is lab_own.grad_copy


def test_a_moment_gone_back_to_shows_the_records_of_that_op_rebuilt_exactly() -> None:
    lab, history = _played(1_000)
    reference = Lab(_scenario(1_000))  # keeps every record
    reference.run_iterations(1_000 // lab.ticks_per_iteration + 1)
    tick = 401  # yours' forward: the backward two ops before it still fills .grad
    moment = Moment(history.info, history, tick)
    assert moment.record("yours") is None and moment.last_backward("yours") is None
    i = history.runs["yours"].index_at(tick)
    assert {("yours", i - 2), ("yours", i - 1), ("yours", i)} <= set(history.missing(tick))
    _fetch(lab, history, tick)
    assert history.missing(tick) == []
    for run in ("yours", "reference"):
        shown, truth = moment.record(run), reference.record_at(run, tick)
        assert shown is not None and truth is not None and shown.tick == truth.tick
        assert np.array_equal(shown.snapshot.param_flat, truth.snapshot.param_flat)
        assert np.array_equal(shown.snapshot.grad_flat, truth.snapshot.grad_flat)
    back = moment.last_backward("yours")
    assert back is not None and back.op == "backward" and back.index == i - 2
    # At a backward, the step after it is previewed from its own record.
    at_backward = Moment(history.info, history, tick + 1)
    assert at_backward.next_step("yours") is None
    _fetch(lab, history, tick + 1)
    step = reference.record("yours", i + 2)
    assert step.op == "step"
    assert np.array_equal(at_backward.next_step("yours")["weight"], step.params["weight"])


def test_records_fetched_for_moments_gone_back_to_do_not_pile_up() -> None:
    lab, history = _played(1_000)
    for tick in range(0, 800, 4):
        _fetch(lab, history, tick)
    assert 0 < len(history.fetched) <= 64
    assert history.missing(796) == [], "the newest moment gone back to keeps what it needs"


def test_captured_graphs_are_kept_for_the_recent_ops_only() -> None:
    _, history = _played(10)
    rt = history.runs["yours"]
    for _ in range(2 * GRAPHS_KEPT):
        tick = rt.ticks.tick_of(len(rt))  # the run's next op in the lab's schedule
        rt.append(Entry(tick, "forward", 1, 1.0, 0.0, 0.0, "running", None, graph="a graph"))
    assert len(rt.graphs) == len(rt)
    assert rt.graphs[-1] == "a graph" and rt.graphs[len(rt) - GRAPHS_KEPT] == "a graph"
    assert rt.graphs[GRAPHS_KEPT // 2] is None


def test_recent_reads_like_a_list_of_every_op_and_truncates() -> None:
    recent: Recent[int] = Recent(8)
    for i in range(30):
        recent.append(i)
    assert len(recent) == 30
    assert recent[-1] == 29 and recent[29 - 7] == 22 and recent[0] is None
    recent.truncate(25)
    assert len(recent) == 25 and recent[-1] == 24
    recent.truncate(3)
    assert len(recent) == 3 and recent[2] is None
    recent.append(99)
    assert recent[3] == 99
    whole: Recent[int] = Recent(None)
    for i in range(1000):
        whole.append(i)
    assert whole[0] == 0, "a recording's history keeps every record"


def test_while_a_moments_record_is_rebuilt_the_inspector_shows_no_numbers_of_another_moment(qtbot) -> None:
    from gradviz.gui import fmt
    from gradviz.gui.views.grads import PENDING, GradsView

    lab, history = _played(1_000)
    view = GradsView()
    qtbot.addWidget(view)
    view.set_lab(history.info)
    view.draw(Moment(history.info, history, history.last_tick))
    newest = view.cell("yours", "weight", "value").text()
    tick = 401  # long thinned: its record waits for the lab to replay it
    gone_back = Moment(history.info, history, tick)
    assert history.missing(tick)
    view.draw(gone_back)
    for column in ("value", ".grad", "+ backward", "was in .grad", "optimizer state"):
        assert view.cell("yours", "weight", column).text() == PENDING, column
    assert view.cell("yours", "weight", "value").text() != newest
    _fetch(lab, history, tick)
    view.draw(gone_back)
    truth = lab.record_at("yours", tick)
    assert truth is not None
    assert view.cell("yours", "weight", "value").text() == fmt.array(truth.params["weight"])
