"""The window's copy of the history stays bounded: every op's columns, the recent records only,
and the older records rebuilt by the lab, exactly, when a moment gone back to needs them."""

from __future__ import annotations

import numpy as np

from gradviz.engine import Lab, load_scenario
from gradviz.engine.scenario import Scenario
from gradviz.gui.tape import GRAPHS_KEPT, Entry, Moment, Recent, StepResult, Tape, describe_lab, entries_since

RECENT = 40


def _scenario(ticks: int) -> Scenario:
    """forgot-zero-grad, at least long enough for ``ticks`` ticks and a few more (4 an iteration)."""
    builtin = load_scenario("forgot-zero-grad")
    return builtin.with_overrides(iterations=max(builtin.iterations, ticks // 4 + 4))


def _played(ticks: int, recent: int = RECENT) -> tuple[Lab, Tape]:
    """A lab keeping ``recent`` full records per run, stepped ``ticks`` ticks a few at a time as Play does."""
    lab = Lab(_scenario(ticks), recent=recent)
    info = describe_lab(lab)
    tape = Tape(info)
    known = {r.name: 0 for r in lab.runs}
    while lab.tick < ticks:
        for _ in range(7):
            lab.step()
        tape.extend(StepResult(entries_since(lab, known), (), {}, -2, {}, False))
        known = {r.name: len(lab.history[r.name]) for r in lab.runs}
    return lab, tape


def _fetch(lab: Lab, tape: Tape, tick: int) -> None:
    """What the lab worker does for the controller: rebuild the records the moment lacks."""
    tape.add_fetched({(run, i): lab.record(run, i) for run, i in tape.missing(tick)})


def test_the_tape_holds_the_labs_recent_records_themselves_and_every_ops_columns() -> None:
    lab, tape = _played(1_000)
    assert tape.info.recent == RECENT
    for run in lab.runs:
        rt, h = tape.runs[run.name], lab.history[run.name]
        assert len(rt) == len(h)
        assert list(rt.ticks) == list(h.ticks) and np.array_equal(rt.loss, h.loss, equal_nan=True)
        kept = [i for i in range(len(rt)) if rt.records[i] is not None]
        assert RECENT <= len(kept) <= RECENT + RECENT // 8
        assert kept == list(range(len(rt) - len(kept), len(rt))), "the newest ops, none older"
        # Shared with the lab, not copied: the window's history costs its columns only.
        assert all(rt.records[i] is h.records[i] for i in kept)


def test_a_moment_gone_back_to_shows_the_records_of_that_op_rebuilt_exactly() -> None:
    lab, tape = _played(1_000)
    reference = Lab(_scenario(1_000))  # keeps every record
    reference.run_iterations(1_000 // lab.ticks_per_iteration + 1)
    tick = 401  # yours' forward: the backward two ops before it still fills .grad
    moment = Moment(tape.info, tape, tick)
    assert moment.record("yours") is None and moment.last_backward("yours") is None
    i = tape.runs["yours"].index_at(tick)
    assert {("yours", i - 2), ("yours", i - 1), ("yours", i)} <= set(tape.missing(tick))
    _fetch(lab, tape, tick)
    assert tape.missing(tick) == []
    for run in ("yours", "reference"):
        shown, truth = moment.record(run), reference.record_at(run, tick)
        assert shown is not None and truth is not None and shown.tick == truth.tick
        assert np.array_equal(shown.snapshot.param_flat, truth.snapshot.param_flat)
        assert np.array_equal(shown.snapshot.grad_flat, truth.snapshot.grad_flat)
    back = moment.last_backward("yours")
    assert back is not None and back.op == "backward" and back.index == i - 2
    # At a backward, the step after it is previewed from its own record.
    at_backward = Moment(tape.info, tape, tick + 1)
    assert at_backward.next_step("yours") is None
    _fetch(lab, tape, tick + 1)
    step = reference.record("yours", i + 2)
    assert step.op == "step"
    assert np.array_equal(at_backward.next_step("yours")["weight"], step.params["weight"])


def test_records_fetched_for_moments_gone_back_to_do_not_pile_up() -> None:
    lab, tape = _played(1_000)
    for tick in range(0, 800, 4):
        _fetch(lab, tape, tick)
    assert 0 < len(tape.fetched) <= 64
    assert tape.missing(796) == [], "the newest moment gone back to keeps what it needs"


def test_captured_graphs_are_kept_for_the_recent_ops_only() -> None:
    lab, tape = _played(10)
    rt = tape.runs["yours"]
    e = Entry(lab.tick, "forward", 1, 1.0, 0.0, 0.0, "running", None, graph="a graph")
    for _ in range(2 * GRAPHS_KEPT):
        rt.append(e)
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
    assert whole[0] == 0, "a recording's tape keeps every record"
