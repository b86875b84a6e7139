"""The [lesson] table: read and checked like every other table; every built-in has one."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradviz.engine import (
    Lab,
    ScenarioError,
    builtin_names,
    dumps_scenario,
    load_builtin,
    load_scenario_file,
    loads_scenario,
)

BASE = """
name = "t"
[model]
kind = "linear-offset"
[[runs]]
name = "a"
[[runs]]
name = "b"
"""


def lesson(text: str, folder: Path) -> Lab:
    path = folder / "t.toml"
    path.write_text(BASE + "[lesson]\n" + text)
    return Lab(load_scenario_file(path))


def test_every_builtin_declares_its_point_and_focus_and_writes_it_back():
    for name in builtin_names():
        sc = load_builtin(name)
        assert sc.lesson is not None and sc.lesson.point.endswith("."), name
        Lab(sc)  # parameter names are real
        assert loads_scenario(dumps_scenario(sc), "again", name).lesson == sc.lesson


def test_set_to_none_leads_with_offset_and_draws_a_plane_that_contains_it():
    lesson = load_builtin("set-to-none").lesson
    assert lesson is not None
    assert lesson.order_params(["weight", "bias", "offset"])[0] == "offset"
    assert "offset" in lesson.surface_axes
    assert lesson.leads("grad") and lesson.leads("state")


def test_gan_detach_leads_with_the_generator_and_leaves_the_surface_out():
    lesson = load_builtin("gan-detach").lesson
    Lab(load_builtin("gan-detach"))  # "G" names the module, whose parameters lead together
    assert lesson.params == ("G",)
    assert lesson.surface == "none"


def test_a_good_lesson_is_read(tmp_path):
    lab = lesson(
        'point = "p."\nruns = ["b"]\nparams = ["offset"]\nshow = ["lr"]\nsurface = ["offset", "bias"]\n',
        tmp_path,
    )
    le = lab.scenario.lesson
    assert le.order_runs(["a", "b"]) == ["b", "a"]
    assert le.surface_axes == ("offset", "bias")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('point = "p."\ncolour = "red"\n', ("lesson.colour", "unknown key")),
        ("runs = []\n", ("lesson.point", "one sentence")),
        ('point = "p."\nruns = ["c"]\n', ("lesson.runs[0]", "'c'", "a, b")),
        ('point = "p."\nshow = ["speed"]\n', ("lesson.show[0]", "'speed'", "grad")),
        ('point = "p."\nsurface = "sideways"\n', ("lesson.surface", "'sideways'")),
        ('point = "p."\nsurface = ["offset", "offset"]\n', ("lesson.surface", "two different")),
        ('point = "p."\nruns = ["a", "a"]\n', ("lesson.runs", "at most once")),
        ('point = "p."\nparams = ["ofset"]\n', ("lesson.params", "'ofset'", "offset")),
        ('point = "p."\nsurface = ["weight", "slope"]\n', ("lesson.surface", "'slope'")),
        ("point = 3\n", ("lesson.point", "a string")),
    ],
)
def test_a_bad_lesson_field_is_one_sentence_naming_the_file_and_field(text, words, tmp_path):
    with pytest.raises(ScenarioError) as info:
        lesson(text, tmp_path)
    message = str(info.value)
    assert message.startswith(str(tmp_path / "t.toml") + ": ") and "\n" not in message
    for w in words:
        assert w in message, message
