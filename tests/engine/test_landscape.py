"""Planes, projections and loss surfaces: against brute force, the paper's rules and loss_landscapes."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from gradviz.engine import Lab, UserError, builtin_names, loads_scenario
from gradviz.engine import landscape as L
from gradviz.engine.record import Layout
from gradviz.engine.surface import surface_model

from .helpers import builtin_lab


def _lab(model: str, data: str, runs: str = '[[runs]]\nname = "yours"') -> Lab:
    text = f'name = "surface-test"\nseed = 3\n[model]\n{model}\n[data]\n{data}\n{runs}\n'
    return Lab(loads_scenario(text, None))


def _evaluate(lab: Lab, run: str, plane: L.Plane, n: int, extent, *, method="auto", **options):
    """The grids the app's surface thread computes for ``plane``: one point loss, one grid evaluation."""
    return list(
        L.evaluate_grid(L.point_loss(lab, run, plane, method=method), plane.labels, n, extent, **options)
    )


MLP_WAVE = ('kind = "mlp"\nwidths = [8, 8]', 'kind = "wave"\nn = 64')
MLP_BLOBS = ('kind = "mlp"\nwidths = [6]\nactivation = "relu"', 'kind = "blobs"\nn = 64')
LOGISTIC = ('kind = "logistic"', 'kind = "blobs"\nn = 64')
GAN = ('kind = "gan"\nhidden = 4', 'kind = "gaussian"\nn = 64')


def _brute_force(lab: Lab, run_name: str, plane: L.Plane, coords: np.ndarray, phase: str | None = None):
    """The task's own loss with the parameters written into a separate lab's live model, point by point."""
    twin = Lab(lab.scenario)
    run = twin.run(run_name)
    chosen = run.phases[phase] if phase else next(iter(run.phases.values()))
    loop = dataclasses.replace(run.loop, scale_loss=False)
    data = L.full_batch(run.task)
    out = []
    with torch.no_grad():
        for a, b in coords:
            flat = torch.as_tensor(plane.point(a, b), dtype=torch.float32)
            torch.nn.utils.vector_to_parameters(flat, run.tensors)
            out.append(float(run.task.loss(chosen, data, 0, loop)))
    return np.array(out)


def _params(lab: Lab) -> list[tuple[np.ndarray, bool, object]]:
    return [
        (p.detach().clone().numpy(), p.requires_grad, None if p.grad is None else p.grad.clone().numpy())
        for run in lab.runs
        for p in run.tensors
    ]


def _same_params(a, b) -> bool:
    return all(
        np.array_equal(x[0], y[0])
        and x[1] == y[1]
        and (x[2] is None) == (y[2] is None)
        and (x[2] is None or np.array_equal(x[2], y[2]))
        for x, y in zip(a, b, strict=True)
    )


COORDS = np.random.default_rng(1).uniform(-1, 1, (7, 2))


# ------------------------------------------------------------------ planes
LAYOUT = Layout(("0.weight", "0.bias", "2.weight", "2.bias"), ((4, 3), (4,), (1, 4), (1,)))


def test_filter_normalisation_follows_the_paper():
    rng = np.random.default_rng(0)
    centre = rng.standard_normal(LAYOUT.total)
    direction = rng.standard_normal(LAYOUT.total)
    out = L.filter_normalised(direction, centre, LAYOUT)
    parts = LAYOUT.split(out)
    weights, random_parts = LAYOUT.split(centre), LAYOUT.split(direction)
    for name, shape in zip(LAYOUT.names, LAYOUT.shapes, strict=True):
        if len(shape) == 1:
            assert not parts[name].any(), "biases and 1-D parameters get zero direction"
            continue
        for row, w, d in zip(parts[name], weights[name], random_parts[name], strict=True):
            assert np.linalg.norm(row) == pytest.approx(np.linalg.norm(w), rel=1e-9)
            assert np.allclose(row / np.linalg.norm(row), d / np.linalg.norm(d)), (
                "each filter keeps its direction"
            )


def test_random_planes_are_seeded_and_filter_normalised():
    centre = np.random.default_rng(5).standard_normal(LAYOUT.total)
    a, b, c = (L.random_plane(centre, LAYOUT, seed=s) for s in (1, 1, 2))
    assert np.array_equal(a.directions, b.directions)
    assert not np.allclose(a.directions, c.directions)
    for d in a.directions:
        assert np.allclose(L.filter_normalised(d, centre, LAYOUT), d)


def test_points_of_a_plane_project_onto_it_with_zero_residual():
    centre = np.random.default_rng(5).standard_normal(LAYOUT.total)
    plane = L.random_plane(centre, LAYOUT, seed=3)
    points = np.stack([plane.point(a, b) for a, b in COORDS])
    coords, residuals = L.project(plane, points)
    np.testing.assert_allclose(coords, COORDS, atol=1e-12)
    assert residuals.max() < 1e-12
    # A point moved off the plane by a normal vector is that vector's length away.
    normal = np.random.default_rng(9).standard_normal(LAYOUT.total)
    normal -= L.project(plane, normal, displacement=True).coords[0] @ plane.directions
    coords, residuals = L.project(plane, plane.point(0.3, -0.2) + normal)
    np.testing.assert_allclose(coords[0], (0.3, -0.2), atol=1e-12)
    assert residuals[0] == pytest.approx(np.linalg.norm(normal))
    # Gradients are displacements: the centre is not subtracted.
    coords, residuals = L.project(plane, 2 * plane.directions[0] - plane.directions[1], displacement=True)
    np.testing.assert_allclose(coords[0], (2, -1), atol=1e-12)
    assert residuals[0] < 1e-12


def test_three_point_and_pca_planes_hold_their_points_exactly():
    rng = np.random.default_rng(2)
    start, yours, ref = rng.standard_normal((3, LAYOUT.total))
    plane = L.three_point_plane(start, yours, ref, LAYOUT)
    coords, residuals = L.project(plane, np.stack([start, yours, ref]))
    assert residuals.max() < 1e-12
    np.testing.assert_allclose(coords[0], (0, 0), atol=1e-12)
    assert coords[1][0] == pytest.approx(np.linalg.norm(yours - start)) and abs(coords[1][1]) < 1e-12
    assert coords[2][1] > 0
    with pytest.raises(UserError, match="one line"):
        L.three_point_plane(start, yours, start + 2 * (yours - start), LAYOUT)

    # A path that curves within a 2-D affine subspace lies in its PCA plane.
    t = np.linspace(0, 1, 30)[:, None]
    path = start + t * (yours - start) + t**2 * (ref - start)
    pca = L.pca_plane(path, LAYOUT)
    coords, residuals = L.project(pca, path)
    assert residuals.max() < 1e-9
    np.testing.assert_allclose(coords[-1], (0, 0), atol=1e-12)
    assert coords[0][0] < 0 and coords[0][1] <= 0
    with pytest.raises(UserError, match="not moved"):
        L.pca_plane(np.stack([start, start]), LAYOUT)


@pytest.mark.parametrize("wobble", [0.0, 1e-9, 2e-3, 0.05])
def test_a_path_along_a_line_gets_a_plane_across_it_and_no_axis_reads_zero_percent(wobble: float):
    rng = np.random.default_rng(3)
    start, end, side = rng.standard_normal((3, LAYOUT.total))
    t = np.linspace(0, 1, 40)[:, None]
    path = start + t * (end - start) + wobble * np.sin(7 * t) * side
    plane = L.pca_plane(path, LAYOUT)
    assert not any("(0%" in label for label in plane.labels), plane.labels
    np.testing.assert_allclose(plane.directions @ plane.directions.T, np.eye(2), atol=1e-12)
    coords, residuals = L.project(plane, path)
    assert residuals.max() <= 2 * wobble * np.linalg.norm(side) + 1e-9, "the path lies in it, or by it"
    assert coords[0][0] < 0
    if wobble < 1e-6:
        assert plane.labels[1] == "random, at right angles (the path is a line)"
    else:
        assert plane.labels[1].startswith("PC2 (") and residuals.max() < 1e-9


def test_planes_of_a_lab():
    lab = builtin_lab("forgot-zero-grad")
    lab.run_iterations(6)
    params = L.parameter_plane(lab.runs[0].layout)
    assert params.labels == ("weight", "bias")
    now = L.current_params(lab.run("yours"))
    coords, _ = L.project(params, now)
    np.testing.assert_allclose(coords[0], now)
    three = L.plane_for(lab, "yours", "three-points")
    ends = [L.current_params(r) for r in lab.runs] + [lab.initial("yours").param_flat]
    assert L.project(three, np.stack(ends)).residuals.max() < 1e-9

    mlp = _lab(*MLP_WAVE)
    mlp.run_iterations(5)
    path = L.trajectory(mlp, "yours")
    assert len(path) == 6
    pca = L.plane_for(mlp, "yours", "pca")
    assert pca.labels[0].startswith("PC1")
    assert L.project(pca, path[-1]).residuals[0] < 1e-9
    rand = L.plane_for(mlp, "yours", "random", seed=4)
    np.testing.assert_array_equal(rand.centre, path[-1])
    with pytest.raises(UserError, match="two parameter values"):
        L.plane_for(mlp, "yours", "parameters")


# ------------------------------------------------------------- evaluation
@pytest.mark.parametrize(
    ("model", "extra"),
    [
        ('kind = "linear"', ""),
        ('kind = "linear"\nloss = "half_mse"\nbias = false', ""),
        ('kind = "linear-offset"\noffset_every = 2', "accumulate = 2\nscale_loss = true"),
    ],
)
def test_closed_form_matches_brute_force(model, extra):
    runs = f'[[runs]]\nname = "yours"\n{extra}'
    lab = _lab(model, 'kind = "line"\nn = 64\nnoise = 0.5', runs)
    lab.run_iterations(2)
    layout = lab.runs[0].layout
    directions = np.random.default_rng(0).standard_normal((2, layout.total))
    plane = L.Plane("test", layout, L.current_params(lab.runs[0]), directions, ("a", "b"))
    loss = L.point_loss(lab, "yours", plane)
    assert loss.method == "closed-form"
    np.testing.assert_allclose(loss(COORDS), _brute_force(lab, "yours", plane, COORDS), rtol=2e-6)
    np.testing.assert_allclose(
        loss(COORDS), L.point_loss(lab, "yours", plane, method="vmap")(COORDS), rtol=2e-6
    )


def test_closed_form_agrees_with_the_two_parameter_surface():
    lab = builtin_lab("standard-loop")
    plane = L.plane_for(lab, "yours", "parameters")
    *_, grid = _evaluate(lab, "yours", plane, 31, ((-3, 4), (-2, 3)))
    model = surface_model(lab)
    xs, ys, Z = model.grid((-3, 4), (-2, 3), 31)
    assert grid.labels == model.axis_names and grid.method == "closed-form"
    np.testing.assert_array_equal(grid.xs, xs)
    np.testing.assert_array_equal(grid.ys, ys)
    np.testing.assert_allclose(grid.Z, Z, rtol=1e-12)


@pytest.mark.parametrize("spec", [MLP_WAVE, MLP_BLOBS, LOGISTIC], ids=["mlp-mse", "mlp-bce-relu", "logistic"])
def test_hand_batched_matmuls_match_vmap_and_brute_force(spec):
    lab = _lab(*spec)
    lab.run_iterations(2)
    plane = L.plane_for(lab, "yours", "random", seed=1)
    fast = L.point_loss(lab, "yours", plane, chunk_bytes=1024)
    assert fast.method == "matmul" and fast.chunk < len(COORDS), "the test crosses chunk borders"
    generic = L.point_loss(lab, "yours", plane, method="vmap")
    brute = _brute_force(lab, "yours", plane, COORDS)
    np.testing.assert_allclose(fast(COORDS), brute, rtol=1e-5)
    np.testing.assert_allclose(generic(COORDS), brute, rtol=1e-5)


@pytest.mark.parametrize("phase", ["discriminator", "generator"])
def test_the_gan_is_evaluated_by_vmap_with_its_own_loss(phase):
    lab = _lab(*GAN)
    lab.run_iterations(2)
    plane = L.plane_for(lab, "yours", "random", seed=2)
    loss = L.point_loss(lab, "yours", plane, phase=phase)
    assert loss.method == "vmap"
    np.testing.assert_allclose(loss(COORDS), _brute_force(lab, "yours", plane, COORDS, phase), rtol=1e-5)


def test_evaluation_leaves_every_weight_grad_and_flag_as_it_was():
    for spec in (MLP_WAVE, GAN, ('kind = "linear"', 'kind = "line"')):
        lab = _lab(*spec)
        lab.run_iterations(1)
        lab.step()  # mid-iteration: some .grad are set
        before = _params(lab)
        plane = L.plane_for(lab, "yours", "random" if len(before) > 2 else "parameters")
        for method in ("auto", "vmap"):
            grids = list(_evaluate(lab, "yours", plane, 9, 1.0, progressive=True, coarse=5, method=method))
            assert [g.final for g in grids] == [False, True]
        assert _same_params(before, _params(lab))


def test_progressive_evaluation_paints_a_coarse_subgrid_first():
    lab = _lab(*MLP_WAVE)
    plane = L.plane_for(lab, "yours", "random")
    coarse, full = _evaluate(lab, "yours", plane, 21, ((-1, 1), (-0.5, 2)), progressive=True, coarse=11)
    assert (coarse.Z.shape, full.Z.shape, coarse.final, full.final) == ((11, 11), (21, 21), False, True)
    np.testing.assert_array_equal(full.Z[::2, ::2], coarse.Z)
    np.testing.assert_array_equal(coarse.xs, full.xs[::2])
    direct = L.point_loss(lab, "yours", plane)(np.array([[full.xs[3], full.ys[7]]]))
    assert full.Z[3, 7] == pytest.approx(direct[0], rel=1e-6), "Z[i, j] is the loss at (xs[i], ys[j])"
    assert L.coarse_size(L.point_loss(lab, "yours", plane)) == 21


def test_cancel_stops_between_chunks():
    lab = _lab(*MLP_WAVE)
    plane = L.plane_for(lab, "yours", "random")
    loss = L.point_loss(lab, "yours", plane, chunk_bytes=4096)
    chunks = -(-21 * 21 // loss.chunk)
    checks = []

    def cancelled() -> bool:
        checks.append(1)
        return len(checks) > 3

    grids = list(L.evaluate_grid(loss, plane.labels, 21, 1.0, cancelled=cancelled))
    assert grids == [] and len(checks) == 4 < chunks


def test_every_builtin_scenario_has_a_finite_surface():
    for name in builtin_names():
        lab = builtin_lab(name)
        lab.run_iterations(2)
        run = lab.runs[0].name
        kind = "parameters" if lab.runs[0].layout.total == 2 else "random"
        plane = L.plane_for(lab, run, kind)
        (grid,) = _evaluate(lab, run, plane, 5, 0.5)
        assert grid.Z.shape == (5, 5) and np.isfinite(grid.Z).all(), name


# ------------------------------------------------------ loss_landscapes
def _loss_landscapes_directions(model: torch.nn.Module, steps: int, distance: float, seed: int):
    """The step vectors ``random_plane`` draws after ``torch.manual_seed(seed)``, by its own functions."""
    from loss_landscapes.model_interface.model_parameters import orthogonal_to, rand_u_like
    from loss_landscapes.model_interface.model_wrapper import wrap_model

    torch.manual_seed(seed)
    start = wrap_model(copy.deepcopy(model)).get_module_parameters()
    one = rand_u_like(start)
    two = orthogonal_to(one)
    out = []
    for d in (one, two):
        d.filter_normalize_(start)
        d.mul_(((start.model_norm() / distance) / steps) / d.model_norm())
        out.append(torch.cat([p.reshape(-1) for p in d.parameters]).double().numpy())
    return np.stack(out)


def test_grid_matches_loss_landscapes_where_it_really_evaluates():
    loss_landscapes = pytest.importorskip("loss_landscapes")
    from loss_landscapes.metrics import Loss

    lab = _lab(*MLP_WAVE)
    lab.run_iterations(3)
    run = lab.runs[0]
    model = run.task.modules["model"]
    x, y = run.task.inputs
    steps, distance, seed = 20, 2.0, 11
    centre = L.current_params(run)
    directions = _loss_landscapes_directions(model, steps, distance, seed)
    torch.manual_seed(seed)
    theirs = loss_landscapes.random_plane(
        model,
        Loss(torch.nn.functional.mse_loss, x, y),
        distance=distance,
        steps=steps,
        normalization="filter",
    )
    assert not np.allclose(L.current_params(run), centre), "without deepcopy_model it moves the weights"
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(torch.as_tensor(centre, dtype=torch.float32), run.tensors)

    # Its point (i, k) is start + (i - s/2) d1 + (k + 1 - s/2) d2 in even columns and
    # (k - s/2) in odd ones: the odd columns are staggered one step.
    plane = L.Plane("loss_landscapes", run.layout, centre, directions, ("d1", "d2"))
    (grid,) = _evaluate(lab, "yours", plane, steps + 1, steps / 2)
    visited = np.array([[grid.Z[i, k + (i % 2 == 0)] for k in range(steps)] for i in range(steps)])
    np.testing.assert_allclose(visited, theirs, rtol=1e-4)
    regular = grid.Z[:steps, :steps]
    assert np.allclose(regular[1::2], theirs[1::2], rtol=1e-4)
    off = np.abs(regular[::2] - theirs[::2]).max() / np.ptp(theirs)
    assert off > 5e-3, "read as a regular grid, its even columns sit one step off"


def test_fit_extent_ignores_nan_and_keeps_a_minimum_width():
    assert L.fit_extent(np.array([[0.0, 1.0], [2.0, 1.0], [np.nan, 5.0]]), margin=0.5) == (
        (-1.0, 3.0),
        (1 - 1e-3, 1 + 1e-3),
    )


def test_a_loss_curve_is_one_evaluation_with_its_preview_a_part_of_it():
    lab = builtin_lab("two-batch-accumulation")
    layout = lab.runs[0].layout
    plane = L.Plane("curve", layout, np.zeros(1), np.array([[1.0], [0.0]]), ("weight", ""))
    loss = L.point_loss(lab, "yours", plane)
    coarse, full = L.evaluate_grid(
        loss, plane.labels, 401, ((-1.0, 3.0), (0.0, 0.0)), progressive=True, coarse=41, curve=True
    )
    assert (coarse.Z.shape, full.Z.shape) == ((41, 1), (401, 1))
    np.testing.assert_array_equal(full.Z[::10], coarse.Z)
    # The real loss of the two-batch example, (w*x - 2x)^2 / 2 averaged over x = 4 and 2.
    w = full.xs
    np.testing.assert_allclose(full.Z[:, 0], ((w - 2) ** 2 * (16 + 4) / 2) / 2, rtol=1e-6)
