"""The narration follows the run that matters at a moment: the one shown alone, else one that just
raised, else the one the lesson's stop is about; never simply the first run."""

from __future__ import annotations

from gradviz.engine import Lab, load_scenario
from gradviz.gui.narration import narrate, narrated_runs
from gradviz.gui.window_history import Moment, StepResult, WindowHistory, describe_lab, entries_since


def _at_stop(name: str, stop: int) -> Moment:
    """The moment just after the op of the scenario's ``stop``-th lesson stop (from 0)."""
    lab = Lab(load_scenario(name))
    info = describe_lab(lab)
    history = WindowHistory(info)
    while lab.tick <= info.stops[stop].tick:
        lab.step()
    history.extend(StepResult(entries_since(lab, {}), (), {}, -2, {}, False))
    return Moment(info, history, info.stops[stop].tick)


def test_at_rnn_tbptt_s_second_stop_the_narration_tells_of_the_run_that_raised() -> None:
    moment = _at_stop("rnn-tbptt", 1)
    assert moment.op_record("keep").error, "run keep's second backward() raises"
    text = narrate(moment)
    assert text.startswith("keep: the loop raised RuntimeError"), text
    # The run shown alone in the code panel is still the one narrated.
    assert narrate(moment, "detach").startswith("detach: backward() walked"), narrate(moment, "detach")


def test_a_stop_s_question_names_the_run_narrated() -> None:
    moment = _at_stop("rnn-tbptt", 2)  # the third chunk: its questions ask about run retain first
    assert not any(moment.op_record(n).error for n in moment.run_names() if moment.op_record(n))
    assert narrated_runs(moment)[0] == "retain"
    assert narrate(moment).startswith("retain: backward() walked"), narrate(moment)


def test_without_a_stop_the_lesson_s_leading_run_is_narrated() -> None:
    moment = _at_stop("backward-twice", 0)
    later = Moment(moment.info, moment.history, moment.tick - 1)  # the forward: no stop there
    assert narrated_runs(later)[:2] == ["no-retain", "retain"]
    assert narrate(later).startswith("no-retain: the forward pass computed loss"), narrate(later)
