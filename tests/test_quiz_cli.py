"""`gradviz quiz` on stdin and stdout, `gradviz list`'s lesson marks, and `gradviz check` on bad lessons."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gradviz import cli
from gradviz.engine import builtin_names, load_builtin
from gradviz.engine.quiz import interview_quiz, lesson_quiz, prepare


def _quiz(stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gradviz", "quiz", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _right_answers(quiz) -> list[str]:
    answers = []
    for p in prepare(quiz):
        for out in p.outcomes:
            q = out.question
            answers.append(f"{out.value!r}" if q.kind == "number" else q.labels[out.correct[0]])
    return answers


@pytest.mark.parametrize("name", ["forgot-zero-grad", "two-batch-accumulation", None])
def test_all_right_answers_score_full_marks(name):
    quiz = interview_quiz() if name is None else lesson_quiz(load_builtin(name))
    answers = _right_answers(quiz)
    done = _quiz("\n".join(answers) + "\n", *([name] if name else []))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    n = len(answers)
    assert lines[-1] == f"score: {n}/{n}"
    assert lines.count("correct") == n
    assert "\x1b" not in done.stdout and "> " not in done.stdout  # piped: no prompt, no escape codes
    assert f"Question {n} of {n}" in done.stdout


def test_wrong_answers_get_the_explanation_and_the_real_numbers():
    quiz = lesson_quiz(load_builtin("forgot-zero-grad"))
    first = quiz.stops[0].stop.questions[0]
    lr = next(i for i, c in enumerate(first.choices) if c.text == "It resets the learning rate.")
    done = _quiz(f" {first.labels[lr].upper()} \nb\nb\n", "forgot-zero-grad")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"wrong: {first.choices[lr].explain}" in out
    assert "the answer: c) It clears the gradients" in out
    assert "  - reference: lr stays 0.05 before and after optimizer.zero_grad()" in out
    assert "  - reference: parameter memory stays 8 bytes" in out
    assert out.splitlines()[-1].startswith("score: ") and out.splitlines()[-1].endswith("/3")


def test_number_questions_say_so_and_show_the_ledger():
    done = _quiz("-16\n-16\nabc\n", "two-batch-accumulation")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "type a number" in out
    assert "wrong: you answered -16; the real value is -20" in out
    assert "  - weight.grad is -20 = -16 already there + -4 from this backward" in out
    assert "wrong: 'abc' is not a number" in out and "the answer: 1.2" in out
    assert out.splitlines()[-1] == "score: 1/3"


def test_the_end_of_input_leaves_the_rest_unanswered_but_revealed():
    done = _quiz("-16\n", "two-batch-accumulation")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.count("no answer; the answer: ") == 2
    assert "no answer; the answer: -20" in out and "no answer; the answer: 1.2" in out
    assert "weight goes from 1 to 1.2 in optimizer.step()" in out
    assert out.splitlines()[-1] == "score: 1/3"


def test_unknown_scenario_or_no_questions_is_one_sentence_and_status_2(tmp_path):
    done = _quiz("", "no-such-scenario")
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "no-such-scenario" in done.stderr
    plain = tmp_path / "plain.toml"
    plain.write_text('[model]\nkind = "quadratic"\n')
    done = _quiz("", str(plain))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "asks no questions" in done.stderr


def test_list_marks_each_scenarios_lesson_on_its_own_line(capsys):
    assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == builtin_names()
    for name, line in zip(builtin_names(), lines, strict=True):
        lesson = load_builtin(name).lesson
        stops, questions = len(lesson.stops), lesson.questions
        s, q = "" if stops == 1 else "s", "" if questions == 1 else "s"
        assert line.endswith(f"  lesson: {stops} stop{s}, {questions} question{q}"), line


BASE = """
name = "t"
iterations = 3
[model]
kind = "linear"
init = { weight = -1.0, bias = 2.0 }
[data]
kind = "line"
n = 16
batch_size = 16
[optimizer]
kind = "SGD"
lr = 0.1
[[runs]]
name = "a"
[[runs]]
name = "b"
order = ["forward", "backward", "step"]
[lesson]
point = "p."
"""
GOOD = """
[[lesson.stops]]
at = { run = "a", iteration = 1, op = "zero_grad" }
caption = "Look."
[[lesson.stops.questions]]
ask = "What?"
kind = "choice"
[[lesson.stops.questions.choices]]
text = "Cleared."
claim = { cleared = "*" }
[[lesson.stops.questions.choices]]
text = "lr."
claim = { changed = "lr" }
explain = "No."
[[lesson.stops]]
at = { run = "b", iteration = 1, op = "backward" }
caption = "Again."
[[lesson.stops.questions]]
ask = "How much?"
kind = "number"
read = { quantity = "grad", param = "weight" }
"""


def _check(tmp_path: Path, capsys, lesson: str) -> tuple[int, str, str]:
    path = tmp_path / "t.toml"
    path.write_text(BASE + lesson)
    code = cli.main(["check", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_good_lesson_checks(tmp_path, capsys):
    code, out, err = _check(tmp_path, capsys, GOOD)
    assert code == 0, err
    assert out.splitlines()[-1].endswith("lesson ok: 2 stops, 2 questions, each answered by the real run.")


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ('run = "a", iteration = 1', 'run = "c", iteration = 1', ("lesson.stops[0].at.run", "'c'", "a, b")),
        (
            'claim = { changed = "lr" }',
            'claim = { changed = "lr", run = "x" }',
            ("choices[1].claim.run", "'x'"),
        ),
        ('param = "weight"', 'param = "slope"', ("lesson.stops[1].questions[0].read.param", "'slope'")),
        ('cleared = "*"', 'cleared = ["weight", "offset"]', ("claim.cleared[1]", "'offset'", "no parameter")),
        ('op = "zero_grad"', 'op = "backwards"', ("lesson.stops[0].at.op", "'backwards'", "Did you mean")),
        ('quantity = "grad"', 'quantity = "speed"', ("read.quantity", "'speed'", "fresh")),
        ('changed = "lr"', 'changed = "momentum"', ("claim.changed", "'momentum'", "param_memory")),
        ('{ changed = "lr" }', '{ grew = "lr" }', ("claim", "exactly one of changed")),
        (
            'run = "b", iteration = 1',
            'run = "b", iteration = 3',
            ("stops[1].at.iteration", "found 3", "0 to 2"),
        ),
        (
            'run = "b", iteration = 1',
            'run = "b", iteration = 0',
            ("lesson.stops[1].at", "before lesson.stops[0]"),
        ),
        ('run = "b", iteration = 1, op = "backward"', 'iteration = 1, op = "zero_grad"', ("same moment",)),
        (
            'run = "a", iteration = 1, op = "zero_grad"',
            'run = "b", iteration = 1, op = "zero_grad"',
            ("'b' does not perform",),
        ),
        ('op = "backward" }', 'op = "backward", nth = 2 }', ("at.nth", "found 2", "once")),
        (
            '[[lesson.stops.questions.choices]]\ntext = "lr."\nclaim = { changed = "lr" }\nexplain = "No."\n',
            "",
            ("lesson.stops[0].questions[0].choices", "found 1 choice", "2 to 5"),
        ),
        ('text = "lr."', 'text = "cleared."', ("choices[1].text", "'cleared.'", "different text")),
        (
            'claim = { cleared = "*" }',
            'claim = { cleared = "*" }\nexplain = "Why."',
            ("choices[0].explain", "right choice"),
        ),
        (
            'claim = { cleared = "*" }',
            'claim = { dirty = "*" }\nexplain = "Why."',
            ("choices:", "no choice's claim is true"),
        ),
        (
            'claim = { changed = "lr" }',
            'claim = { changed = "grad" }',
            ("the claims of choices[0] and choices[1] are both true",),
        ),
        ('explain = "No."', "", ("choices[1].explain: missing",)),
        ('explain = "No."', 'explain = "No."\nscore = 3', ("choices[1].score", "unknown key")),
        (
            'kind = "number"',
            'kind = "number"\nchoices = []',
            ("questions[0].choices", "unknown key for a number question"),
        ),
        ('quantity = "grad", param = "weight"', 'quantity = "fresh"', ("read.param: missing",)),
        ('claim = { changed = "lr" }', 'claim = { filled = "*" }', ("claim.filled", "not backward()")),
        (
            'claim = { changed = "lr" }',
            'claim = { changed = "lr", when = "before" }',
            ("claim.when", "for a claim 'changed'"),
        ),
        ('caption = "Look."', 'caption = "Look.\\u001b[2J"', ("lesson.stops[0].caption", "printable")),
    ],
)
def test_a_bad_lesson_field_is_one_sentence_from_check(tmp_path, capsys, old, new, words):
    assert old in GOOD
    code, out, err = _check(tmp_path, capsys, GOOD.replace(old, new, 1))
    assert code == 2, out
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"gradviz: {tmp_path / 't.toml'}: "), err
    for w in words:
        assert w in err, err
