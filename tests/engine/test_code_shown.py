"""The code panel's source is the code run: its lines before the loop build the same starting weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gradviz.engine import Lab, builtin_names, load_builtin, loads_scenario
from gradviz.engine.run import Run
from gradviz.engine.zoo import FUNCTIONS


def _header(source: str) -> str:
    """The lines before the training loop: imports, the model, its starting values, the optimizer."""
    lines = source.splitlines()
    loop = next(i for i, line in enumerate(lines) if line.startswith("for "))
    return "\n".join(lines[:loop]) + "\n"


def _built_params(run: Run) -> dict[str, np.ndarray]:
    """Execute the run's shown setup code as a user would and read its parameters by the lab's names."""
    # The 2-D test functions are gradviz's own modules: the shown code names them as they are.
    namespace: dict[str, object] = {cls.__name__: cls for cls, _ in FUNCTIONS.values()}
    # The shown code seeds the global generator where a module keeps its random start:
    # keep the test process's own generator as it was.
    with torch.random.fork_rng(devices=[]):
        exec(compile(_header(run.program.source), f"<{run.name}>", "exec"), namespace)
    modules = run.task.modules
    out = {}
    for mname in modules:
        module = namespace[mname]
        assert isinstance(module, torch.nn.Module), mname
        for pname, p in module.named_parameters():
            out[f"{mname}.{pname}" if len(modules) > 1 else pname] = p.detach().numpy()
    for name in run.task.outside:
        p = namespace[name]
        assert isinstance(p, torch.nn.Parameter), name
        out[name] = p.detach().numpy()
    return out


@pytest.mark.parametrize("name", builtin_names())
def test_the_shown_setup_code_builds_the_lab_s_starting_weights(name: str) -> None:
    lab = Lab(load_builtin(name))
    for run in lab.runs:
        built = _built_params(run)
        start = lab.initial(run.name).params
        assert set(built) == set(start), (name, run.name)
        for pname, value in start.items():
            np.testing.assert_array_equal(built[pname], value, err_msg=f"{name}:{run.name}:{pname}")


def test_an_offset_that_starts_at_two_is_shown_starting_at_two() -> None:
    source = Lab(load_builtin("set-to-none")).runs[0].program.source
    assert "offset = torch.nn.Parameter(torch.tensor([2.0]))  # not in model" in source
    assert "torch.zeros(1)" not in source
    assert "    model.weight.fill_(-1.0)" in source
    assert "    model.bias.fill_(0.0)" in source
    assert "with torch.no_grad():" in source


def test_module_starting_values_are_set_in_place_under_no_grad() -> None:
    source = Lab(load_builtin("forgot-zero-grad")).runs[0].program.source
    lines = source.splitlines()
    at = lines.index("with torch.no_grad():")
    assert lines[at + 1 : at + 3] == ["    model.weight.fill_(-1.0)", "    model.bias.fill_(2.0)"]
    assert "manual_seed" not in source, "every weight is set: the seed changes nothing shown"


def test_random_starting_weights_are_shown_with_their_seed() -> None:
    lab = Lab(load_builtin("zero-grad-myths"))
    assert "torch.manual_seed(0)" in lab.runs[0].program.source


_MLP_WITH_INIT = """
name = "mlp-init"
seed = 4
iterations = 2
[model]
kind = "mlp"
widths = [2]
init = { "0.weight" = [[0.5, -0.25], [1.0, 2.0]], "2.bias" = 0.1 }
[data]
kind = "wave"
n = 16
batch_size = 8
[optimizer]
kind = "SGD"
lr = 0.1
[[runs]]
name = "yours"
"""


def test_non_scalar_starting_values_are_copied_from_a_tensor_of_their_shape() -> None:
    lab = Lab(loads_scenario(_MLP_WITH_INIT, "<mlp-init>"))
    run = lab.runs[0]
    source = run.program.source
    assert "    model[0].weight.copy_(torch.tensor([[0.5, -0.25], [1.0, 2.0]]))" in source
    assert "    model[2].bias.fill_(0.1)" in source
    assert "torch.manual_seed(4)" in source, "the other weights keep their seeded random start"
    built = _built_params(run)
    for pname, value in lab.initial(run.name).params.items():
        np.testing.assert_array_equal(built[pname], value, err_msg=pname)


def test_a_2d_function_starts_where_model_init_puts_it() -> None:
    text = """
name = "bowl"
iterations = 2
[model]
kind = "quadratic"
condition = 4.0
init = { xy = [0.5, -1.25] }
[data]
kind = "none"
[optimizer]
kind = "SGD"
lr = 0.1
[[runs]]
name = "yours"
"""
    lab = Lab(loads_scenario(text, "<bowl>"))
    run = lab.runs[0]
    assert "model = Quadratic(start=[0.5, -1.25], condition=4)" in run.program.source
    np.testing.assert_array_equal(_built_params(run)["xy"], lab.initial(run.name).params["xy"])
