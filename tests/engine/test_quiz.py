"""Lesson stops and questions: placed on the lab's ticks, answered by the real records."""

from __future__ import annotations

import builtins

import pytest

from gradviz.engine import Lab, builtin_names, dumps_scenario, load_builtin, loads_scenario
from gradviz.engine.errors import ScenarioError
from gradviz.engine.quiz import (
    check_lesson,
    interview_quiz,
    judge,
    lesson_quiz,
    outcome,
    prepare,
    resolve_stops,
    reveal,
    step_to,
)


def _prepared(name: str, **overrides):
    scenario = load_builtin(name)
    if overrides:
        scenario = scenario.with_overrides(**overrides)
    return prepare(lesson_quiz(scenario))


def _questions(name: str, **overrides):
    return [(p, o) for p in _prepared(name, **overrides) for o in p.outcomes]


def test_every_builtin_has_stops_and_questions_answered_by_its_run():
    for name in builtin_names():
        scenario = load_builtin(name)
        assert scenario.lesson is not None and scenario.lesson.stops, name
        stops, questions = check_lesson(scenario)
        assert stops >= 1 and questions >= 1, name
        # The stops and questions are data: written back and read again, they are the same.
        assert loads_scenario(dumps_scenario(scenario), "again", name).lesson == scenario.lesson
        for _p, out in _questions(name):
            assert out.facts and all(f and "\n" not in f for f in out.facts), (name, out.question.ask)
            if out.question.kind == "choice":
                assert len(out.correct) == 1, (name, out.question.ask)


def test_stops_are_placed_on_the_lab_ticks_of_their_ops():
    lab = Lab(load_builtin("forgot-zero-grad"))
    placed = resolve_stops(lab)
    tpi = lab.ticks_per_iteration
    assert tpi == 4
    # reference's zero_grad opens iteration 1; yours' backward is its third tick; the last stop ends 39.
    assert [p.tick for p in placed] == [4, 6, 40 * 4 - 1]
    assert placed[0].run == "reference" and placed[0].slot.op == "zero_grad"
    assert placed[1].run == "yours" and placed[1].slot.op == "backward"
    assert placed[2].label == "the end of iteration 39" and not placed[2].stop.hide_future
    two = resolve_stops(Lab(load_builtin("two-batch-accumulation")))
    assert [(p.tick, p.slot.op, p.slot.micro) for p in two] == [
        (2, "backward", 0),
        (4, "backward", 1),
        (5, "step", 0),
    ]
    assert "2nd of 2" in two[1].label
    gan = resolve_stops(Lab(load_builtin("gan-detach")))
    assert gan[1].tick == 4 and "opt_g.zero_grad()" in gan[1].label


def test_a_question_is_asked_before_its_op_and_revealed_after_it():
    lab = Lab(load_builtin("two-batch-accumulation"))
    first = resolve_stops(lab)[0]
    question = first.stop.questions[0]
    lab.advance(first.tick)
    while lab.tick < first.tick:
        lab.advance(first.tick)
    assert lab.tick == first.tick  # the moment to ask: the stop's op is next
    assert lab.record_at("yours", first.tick).op == "forward"
    with pytest.raises(ValueError):
        reveal(lab, first, question, "-16")
    step_to(lab, first)
    shown = reveal(lab, first, question, "-16")
    assert shown.right and shown.value == -16
    assert shown.facts == ("weight.grad is -16: it was None, and this backward put -16 there",)


def test_two_batch_accumulation_reads_minus_16_minus_20_and_1_2():
    values = [out.value for _p, out in _questions("two-batch-accumulation")]
    assert values == pytest.approx([-16.0, -20.0, 1.2])
    facts = [out.facts[0] for _p, out in _questions("two-batch-accumulation")]
    assert facts[1] == "weight.grad is -20 = -16 already there + -4 from this backward"
    assert facts[2].startswith("weight goes from 1 to 1.2 in optimizer.step()")


def test_the_revealed_number_follows_the_learning_rate_of_the_run():
    step = _questions("two-batch-accumulation", lr=0.02)[2][1]
    assert step.value == pytest.approx(1.4)  # 1 - 0.02 * -20
    assert "1.4" in step.facts[0] and "lr 0.02" in step.facts[0]
    assert judge(step, "1.4").right and not judge(step, "1.2").right
    standard = next(o for _p, o in _questions("standard-loop", lr=0.2) if o.question.kind == "number")
    default = next(o for _p, o in _questions("standard-loop") if o.question.kind == "number")
    assert default.value == pytest.approx(-1 + 0.1 * 6.001, abs=1e-3)
    assert standard.value == pytest.approx(-1 + 0.2 * 6.001, abs=1e-3)


def test_forgot_zero_grad_asks_why_zero_grad_and_shows_each_wrong_answer_against_the_run():
    _placed, out = _questions("forgot-zero-grad")[0]
    q = out.question
    assert q.ask == "Why call optimizer.zero_grad() at the start of each iteration?"
    texts = [c.text for c in q.choices]
    right = texts[out.correct[0]]
    assert right.startswith("It clears the gradients")
    wrong = {c.text: c.explain for i, c in enumerate(q.choices) if i != out.correct[0]}
    assert set(wrong) == {"It resets the learning rate.", "It resets the weights.", "It frees GPU memory."}
    assert "scheduler" in wrong["It resets the learning rate."]
    assert "symmetry" in wrong["It resets the weights."]
    assert "None" in wrong["It frees GPU memory."] and "frees no parameters" in wrong["It frees GPU memory."]
    facts = " | ".join(out.facts)
    assert "lr stays 0.05 before and after optimizer.zero_grad()" in facts
    assert "the weights stay at weight -0.6999, bias 1.911" in facts
    assert "parameter memory stays 8 bytes" in facts
    assert "every .grad is None" in facts
    chosen = judge(out, texts.index("It resets the learning rate."))
    assert not chosen.right and chosen.explanation == wrong["It resets the learning rate."]


def test_zero_grad_myths_carries_the_same_question_and_reads_lr():
    outs = [o for _p, o in _questions("zero-grad-myths")]
    assert outs[0].question.ask == "Why call optimizer.zero_grad() at the start of each iteration?"
    lr = next(o for o in outs if o.question.kind == "number")
    assert lr.value == pytest.approx(0.01)
    assert lr.facts == ("set-to-none: lr stays 0.01 before and after optimizer.zero_grad()",)


def _answer(out) -> str:
    return out.question.choices[out.correct[0]].text


def test_set_to_none_moves_only_zeros_offset_and_says_why():
    outs = [o for _p, o in _questions("set-to-none")]
    assert _answer(outs[0]).startswith("None")
    assert _answer(outs[1]) == "Only zeros'."
    assert "zeros: offset goes from 1.911 to 1.831 in optimizer.step()" in outs[1].facts
    assert "none: offset stays 1.911 before and after optimizer.step()" in outs[1].facts
    assert "momentum" in _answer(outs[2])


def test_gan_detach_says_whose_grad_the_discriminators_backward_fills():
    outs = [o for _p, o in _questions("gan-detach")]
    assert _answer(outs[0]) == "D's and G's."
    assert outs[0].facts == (
        "no-detach: loss_d.backward() put a gradient into the .grad of D's 4 parameters and G's 4 parameters",
    )
    assert _answer(outs[1]) == "D's only."
    assert (
        "detach: loss_d.backward() put a gradient into the .grad of D's 4 parameters; G's 4"
        in outs[1].facts[0]
    )


def test_net_vs_optimizer_zero_grad_names_offset_as_left_dirty():
    out = _questions("net-vs-optimizer-zero-grad")[0][1]
    assert _answer(out).startswith("offset")
    assert "model: after model.zero_grad(), offset.grad is 1.776" in out.facts


def test_answers_are_judged_by_letter_or_text_case_and_spaces_aside():
    out = _questions("forgot-zero-grad")[0][1]
    letter = out.question.labels[out.correct[0]]
    assert judge(out, f"  {letter.upper()} ").right
    assert judge(out, _answer(out).upper()).right
    assert judge(out, out.correct[0]).right
    bad = judge(out, "z")
    assert not bad.right and bad.answered and bad.explanation == "'z' is not one of a, b, c or d"
    none = judge(out, None)
    assert not none.right and not none.answered and none.explanation == "no answer"
    assert not judge(out, "   ").answered


def test_number_answers_are_right_within_a_relative_tolerance():
    out = _questions("two-batch-accumulation")[1][1]  # -20
    assert judge(out, "-20").right and judge(out, " -20.01 ").right and judge(out, -19.99).right
    assert not judge(out, "-20.1").right
    wrong = judge(out, "-4")
    assert wrong.explanation == "you answered -4; the real value is -20"
    junk = judge(out, "twenty")
    assert not junk.right and junk.explanation == "'twenty' is not a number"
    assert not judge(out, "nan").right


def test_the_interview_questions_are_answered_by_builtin_runs():
    quiz = interview_quiz()
    assert quiz.questions >= 6
    names = {s.stop.scenario for s in quiz.stops}
    assert names <= set(builtin_names())
    asks = " ".join(q.ask for s in quiz.stops for q in s.stop.questions)
    for topic in (
        "by default",
        "None the same as",
        "add into .grad",
        "not zero",
        "Where does",
        "model.zero_grad()",
    ):
        assert topic in asks, topic
    for p in prepare(quiz):
        for out in p.outcomes:
            assert len(out.correct) == 1 and out.facts
    default = prepare(quiz)[0].outcomes[0]
    assert _answer(default).startswith("None: set_to_none=True is the default")


def test_outcomes_need_the_stops_op_to_have_run():
    lab = Lab(load_builtin("standard-loop"))
    placed = resolve_stops(lab)[1]
    with pytest.raises(ValueError):
        outcome(lab, placed, placed.stop.questions[0])


def test_loading_and_checking_a_lesson_executes_nothing_from_it(tmp_path, monkeypatch):
    check_lesson(load_builtin("forgot-zero-grad"))  # imports done before eval and exec are refused
    text = tmp_path / "t.toml"
    marker = tmp_path / "ran"
    code = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    base = dumps_scenario(load_builtin("two-batch-accumulation"))
    text.write_text(base.replace("What is weight.grad after this backward?", code))

    def refuse(*args, **kwargs):
        raise AssertionError("nothing from a lesson is evaluated")

    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    from gradviz.engine.scenario import load_scenario_file

    scenario = load_scenario_file(text)
    assert scenario.lesson.stops[0].questions[0].ask.endswith(code)
    check_lesson(scenario)
    assert not marker.exists()
    bad = base.replace('quantity = "grad"', f'quantity = "{code}"', 1)
    text.write_text(bad)
    with pytest.raises(ScenarioError, match="quantity"):
        load_scenario_file(text)
    assert not marker.exists()
