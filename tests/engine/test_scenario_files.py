"""Scenario files are validated data: clear messages for bad ones, nothing executed, round trips."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradviz.engine import (
    Lab,
    ScenarioError,
    builtin_names,
    dumps_scenario,
    load_builtin,
    load_scenario,
    load_scenario_file,
    loads_scenario,
)


def _error(text: str, tmp_path: Path) -> str:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        Lab(load_scenario_file(path))
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def test_unknown_key_names_the_path_and_suggests_the_close_one(tmp_path):
    msg = _error('[optimizer]\nkind = "SGD"\nmomentun = 0.9\n', tmp_path)
    assert "optimizer.momentun" in msg and "Did you mean 'momentum'?" in msg


def test_wrong_value_says_what_was_found_and_what_is_allowed(tmp_path):
    msg = _error('[model]\nkind = "linaer"\n', tmp_path)
    assert "model.kind: found 'linaer'" in msg and "'linear'" in msg
    msg = _error('[data]\nbatch_size = "big"\n', tmp_path)
    assert "data.batch_size: found 'big'; allowed: a whole number" in msg
    msg = _error("[[runs]]\nname = 'a'\norder = ['forward', 'bakward']\n", tmp_path)
    assert "runs[0].order[1]" in msg and "Did you mean 'backward'?" in msg


def test_keys_of_another_model_kind_are_rejected(tmp_path):
    msg = _error('[model]\nkind = "linear"\nwidths = [8]\n', tmp_path)
    assert "model.widths: unknown key for model kind 'linear'" in msg


def test_negative_learning_rate_and_refused_hyperparameters(tmp_path):
    assert "found -0.1; allowed: a learning rate from 0 to 1e6." in _error(
        "[optimizer]\nlr = -0.1\n", tmp_path
    )
    msg = _error("[optimizer]\nkind = 'SGD'\nnesterov = true\n", tmp_path)
    assert "torch.optim.SGD refuses it" in msg and "Nesterov" in msg
    assert "implementation" in _error("[optimizer]\nkind = 'Adam'\nfused = true\n", tmp_path)


def test_loop_rules(tmp_path):
    assert "'forward' before 'backward'" in _error("[loop]\norder = ['backward', 'forward']\n", tmp_path)
    assert "each op at most once" in _error("[loop]\norder = ['step', 'step']\n", tmp_path)
    assert "divisor of the batch size" in _error(
        "[data]\nbatch_size = 16\n[loop]\naccumulate = 3\n", tmp_path
    )
    assert "no optimizer" in _error("[optimizer]\nkind = 'manual'\n", tmp_path)


def test_init_with_an_unknown_parameter(tmp_path):
    msg = _error("[model]\nkind = 'linear'\ninit = { wieght = 1.0 }\n", tmp_path)
    assert "model.init.wieght: no such parameter" in msg and "Did you mean 'weight'?" in msg
    assert "does not fit the shape" in _error("[model]\ninit = { weight = [1.0, 2.0, 3.0] }\n", tmp_path)


def test_broken_files(tmp_path):
    assert "not valid TOML" in _error("[model\n", tmp_path)
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00junk")
    with pytest.raises(ScenarioError, match="not UTF-8"):
        load_scenario_file(binary)
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenario_file(tmp_path / "missing.toml")
    with pytest.raises(ScenarioError, match="is a folder"):
        load_scenario_file(tmp_path)
    huge = tmp_path / "huge.toml"
    huge.write_text("# " + "x" * 2_000_000)
    with pytest.raises(ScenarioError, match="larger than 1 MB"):
        load_scenario_file(huge)


def test_hostile_content_is_only_data(tmp_path):
    marker = tmp_path / "pwned"
    text = f"""
    name = "__import__('os').system('touch {marker}')"
    [model]
    kind = "__import__('os').system('touch {marker}')"
    """
    path = tmp_path / "hostile.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=r"model\.kind"):
        load_scenario_file(path)
    path.write_text(f'title = "{{{{ {marker} }}}}"\nsummary = "$(touch {marker})"\n')
    Lab(load_scenario_file(path)).run_iterations(1)
    assert not marker.exists()


def test_a_name_that_is_neither_builtin_nor_file():
    with pytest.raises(ScenarioError, match=r"no built-in scenario 'forgot-zero-gard'.*forgot-zero-grad"):
        load_scenario("forgot-zero-gard")


@pytest.mark.parametrize("name", builtin_names())
def test_builtins_round_trip_through_toml(name, tmp_path):
    original = load_builtin(name)
    path = tmp_path / f"{name}.toml"
    path.write_text(dumps_scenario(original))
    again = load_scenario_file(path)
    assert again.runs == original.runs
    assert (again.model, again.data, again.seed, again.iterations) == (
        original.model,
        original.data,
        original.seed,
        original.iterations,
    )


def test_overrides_are_checked():
    sc = load_builtin("standard-loop")
    assert sc.with_overrides(lr=0.5).runs[0].optimizer.lr == 0.5
    with pytest.raises(ScenarioError, match="learning rate"):
        sc.with_overrides(lr=-1.0)
    with pytest.raises(ScenarioError, match="--iterations"):
        sc.with_overrides(iterations=0)
    with pytest.raises(ScenarioError, match="--device 'tpu'"):
        sc.with_overrides(device="tpu")


def test_readme_example_is_a_valid_scenario():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    block = readme.split("```toml\n", 1)[1].split("```", 1)[0]
    scenario = loads_scenario(block, "README example")
    Lab(scenario).run_iterations(2)
