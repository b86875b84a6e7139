"""The engine's loss surfaces and step preview agree with PyTorch itself."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gradviz.engine import Lab, load_scenario, loads_scenario
from gradviz.engine.surface import preview_step, surface_model


def test_linear_surface_matches_mse_over_the_dataset() -> None:
    lab = Lab(load_scenario("forgot-zero-grad"))
    x, y = lab.runs[0].task.inputs
    model = surface_model(lab)
    xs, ys, z = model.grid((-1.0, 3.0), (-2.0, 2.0), 7)
    assert model.axis_names == ("weight", "bias")
    for i in (0, 3, 6):
        for j in (1, 5):
            expected = torch.nn.functional.mse_loss(xs[i] * x + ys[j], y).item()
            assert z[i, j] == pytest.approx(expected, rel=1e-5)


def test_minimum_is_the_least_squares_fit() -> None:
    model = surface_model(Lab(load_scenario("standard-loop")))
    w, b = model.minimum
    around = model.evaluate(np.array([w, w + 0.01, w, w - 0.01]), np.array([b, b, b + 0.01, b]))
    assert np.argmin(around) == 0


def test_half_mse_halves_the_surface() -> None:
    text = load_scenario("standard-loop")
    lab_full = Lab(text)
    half = loads_scenario(
        '[model]\nkind = "linear"\nloss = "half_mse"\n[data]\nkind = "line"\nnoise = 0.3\n', "test"
    )
    full = loads_scenario('[model]\nkind = "linear"\n[data]\nkind = "line"\nnoise = 0.3\n', "test")
    z_half = surface_model(Lab(half)).grid((0, 1), (0, 1), 3)[2]
    z_full = surface_model(Lab(full)).grid((0, 1), (0, 1), 3)[2]
    assert np.allclose(z_half * 2, z_full)
    assert lab_full is not None


@pytest.mark.parametrize("kind", ["quadratic", "rosenbrock", "saddle"])
def test_two_d_functions_match_the_module(kind: str) -> None:
    lab = Lab(loads_scenario(f'[model]\nkind = "{kind}"\n[data]\nkind = "none"\n', "test"))
    module = lab.runs[0].task.modules["model"]
    model = surface_model(lab)
    assert model.axis_names == ("xy[0]", "xy[1]")
    for point in ((0.5, -1.0), (-1.5, 2.0)):
        with torch.no_grad():
            module.xy.copy_(torch.tensor(point))
            expected = module().item()
        assert model.evaluate(np.array(point[0]), np.array(point[1])) == pytest.approx(expected, rel=1e-5)


def test_models_with_more_than_two_parameters_have_no_surface() -> None:
    for name in ("set-to-none", "gan-detach", "zero-grad-myths", "two-batch-accumulation"):
        lab = Lab(load_scenario(name))
        assert surface_model(lab) is None


@pytest.mark.parametrize("options", ['kind = "SGD"\nlr = 0.1\nmomentum = 0.9', 'kind = "Adam"\nlr = 0.05'])
def test_preview_is_the_step_the_optimizer_then_takes(options: str) -> None:
    text = f'[model]\nkind = "linear"\n[data]\nkind = "line"\n[optimizer]\n{options}\n'
    lab = Lab(loads_scenario(text, "test"))
    for _ in range(3):
        lab.step_iteration()
    lab.step()
    lab.step()
    lab.step()  # zero_grad, forward, backward: the next op is a step
    run = lab.runs[0]
    before = {n: p.detach().clone() for n, p in zip(run.names, run.tensors, strict=True)}
    preview = preview_step(run)
    for n, p in zip(run.names, run.tensors, strict=True):
        assert torch.equal(p.detach(), before[n]), "the preview must not move the live run"
    (rec,) = lab.step()
    assert rec.op == "step"
    for name, value in rec.params.items():
        assert np.array_equal(preview[name], value)
