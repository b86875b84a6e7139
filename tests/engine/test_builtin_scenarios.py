"""Each built-in scenario shows what PyTorch really does, checked against PyTorch itself."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gradviz.engine import Lab, builtin_names, load_builtin, loads_scenario

from .helpers import builtin_lab, records_by_run


def _plain_loop_params(lab: Lab, run_name: str, iterations: int, zero_grad: bool) -> list[dict]:
    """The same linear regression trained by a hand-written PyTorch loop, from the lab's
    initial weights over the lab's batches; parameters after every iteration."""
    run = lab.run(run_name)
    start = lab.initial(run_name)
    model = torch.nn.Linear(1, 1)
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(start.params["weight"].copy()))
        model.bias.copy_(torch.from_numpy(start.params["bias"].copy()))
    spec = run.spec.optimizer
    optimizer = torch.optim.SGD(model.parameters(), lr=spec.lr, **spec.options)
    out = []
    for i in range(iterations):
        x, y = run.task.batch(i)
        if zero_grad:
            optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        out.append(
            {"weight": model.weight.detach().numpy().copy(), "bias": model.bias.detach().numpy().copy()}
        )
    return out


def _after(records, op):
    return [r for r in records if r.op == op]


def test_every_builtin_loads_runs_and_renders_valid_python():
    for name in builtin_names():
        lab = Lab(load_builtin(name))
        lab.run_iterations(2)
        for run in lab.runs:
            compile(run.program.source, f"<{name}:{run.name}>", "exec")
            lines = run.program.source.splitlines()
            for slot in run.program.ops:
                text = lines[slot.line - 1]
                expected = {
                    "zero_grad": ("zero_grad(", "zero_()", "grad = None"),
                    "forward": ("loss",),
                    "backward": (".backward(",),
                    "step": (".step()", "p -= lr * p.grad"),
                }[slot.op]
                assert any(e in text for e in expected), (name, slot, text)


def test_two_batch_accumulation_gives_the_source_figures():
    lab = builtin_lab("two-batch-accumulation")
    recs = records_by_run(lab, 1)["yours"]
    assert [r.op for r in recs] == ["zero_grad", "forward", "backward", "forward", "backward", "step"]
    backwards = _after(recs, "backward")
    assert backwards[0].grads["weight"].item() == -16.0
    assert backwards[0].fresh_grads["weight"].item() == -16.0
    assert backwards[0].stale_grads["weight"] is None  # nothing was there: .grad was None
    assert backwards[1].grads["weight"].item() == -20.0
    assert backwards[1].fresh_grads["weight"].item() == -4.0
    assert backwards[1].stale_grads["weight"].item() == -16.0
    assert recs[-1].params["weight"].item() == pytest.approx(1.2, abs=1e-7)
    assert recs[0].grads["weight"] is None  # zero_grad() defaults to set_to_none=True


def test_standard_loop_matches_a_plain_pytorch_loop_bit_for_bit():
    lab = builtin_lab("standard-loop")
    steps = _after(records_by_run(lab, 15)["yours"], "step")
    expected = _plain_loop_params(lab, "yours", 15, zero_grad=True)
    for rec, exp in zip(steps, expected, strict=True):
        np.testing.assert_array_equal(rec.params["weight"], exp["weight"])
        np.testing.assert_array_equal(rec.params["bias"], exp["bias"])


def test_forgot_zero_grad_accumulates_every_gradient_and_parts_from_the_reference():
    lab = builtin_lab("forgot-zero-grad")
    recs = records_by_run(lab, 30)
    yours = recs["yours"]
    # .grad after each backward is the sum of every gradient delivered so far.
    total = np.zeros(2)
    for rec in _after(yours, "backward"):
        total += np.array([rec.fresh_grads["weight"].item(), rec.fresh_grads["bias"].item()])
        got = np.array([rec.grads["weight"].item(), rec.grads["bias"].item()])
        np.testing.assert_allclose(got, total, rtol=1e-5, atol=1e-5)
    # Both runs match PyTorch itself, with and without zero_grad.
    for name, zero in (("yours", False), ("reference", True)):
        steps = _after(recs[name], "step")
        for rec, exp in zip(steps, _plain_loop_params(lab, name, 30, zero_grad=zero), strict=True):
            np.testing.assert_array_equal(rec.params["weight"], exp["weight"])
    # The runs visibly part within a few dozen iterations.
    gap = [
        np.hypot(*(a.params[k].item() - b.params[k].item() for k in ("weight", "bias")))
        for a, b in zip(_after(recs["yours"], "step"), _after(recs["reference"], "step"), strict=True)
    ]
    assert gap[0] < 0.5
    assert max(gap[:30]) > 1.5


def test_runs_line_up_by_op_so_the_skipped_zero_grad_leaves_a_gap():
    lab = builtin_lab("forgot-zero-grad")
    assert lab.ticks_per_iteration == 4
    first = lab.step()
    assert [(r.run, r.op) for r in first] == [("reference", "zero_grad")]
    second = lab.step()
    assert [(r.run, r.op) for r in second] == [("yours", "forward"), ("reference", "forward")]


def test_grad_accumulation_scaled_equals_full_batch_and_unscaled_is_k_times():
    lab = builtin_lab("grad-accumulation")
    recs = records_by_run(lab, 1)
    at_step = {name: _after(r, "step")[0] for name, r in recs.items()}
    full = np.concatenate([at_step["full-batch"].grads[k].ravel() for k in ("weight", "bias")])
    scaled = np.concatenate([at_step["scaled"].grads[k].ravel() for k in ("weight", "bias")])
    unscaled = np.concatenate([at_step["unscaled"].grads[k].ravel() for k in ("weight", "bias")])
    np.testing.assert_allclose(scaled, full, rtol=1e-5)
    np.testing.assert_allclose(unscaled, 4 * full, rtol=1e-5)
    assert len(_after(recs["scaled"], "backward")) == 4
    assert len(_after(recs["full-batch"], "backward")) == 1


def test_set_to_none_skips_the_unused_parameter_while_zeros_still_move_it():
    lab = builtin_lab("set-to-none")
    recs = records_by_run(lab, 3)
    none, zeros = recs["none"], recs["zeros"]
    # Iteration 1 does not use offset (offset_every = 3).
    it1_none = [r for r in none if r.iteration == 1]
    it1_zeros = [r for r in zeros if r.iteration == 1]
    assert _after(it1_none, "backward")[0].grads["offset"] is None
    zero_grad_array = _after(it1_zeros, "backward")[0].grads["offset"]
    assert zero_grad_array is not None and not zero_grad_array.any()
    # The optimizer skips a None .grad: offset stays put ...
    before = _after([r for r in none if r.iteration == 0], "step")[0].params["offset"]
    assert _after(it1_none, "step")[0].params["offset"] == before
    # ... while a zero .grad still moves it through the momentum buffer.
    before_z = _after([r for r in zeros if r.iteration == 0], "step")[0].params["offset"]
    after_z = _after(it1_zeros, "step")[0]
    assert after_z.params["offset"] != before_z
    assert after_z.state["offset"]["momentum_buffer"].item() != 0.0


def test_gan_without_detach_fills_the_generator_grad():
    lab = builtin_lab("gan-detach")
    recs = records_by_run(lab, 1)
    for name, filled in (("no-detach", True), ("detach", False), ("no-grad", False)):
        d_backward = next(r for r in recs[name] if r.op == "backward" and r.phase == "discriminator")
        g_grads = [g for k, g in d_backward.grads.items() if k.startswith("G.")]
        d_grads = [g for k, g in d_backward.grads.items() if k.startswith("D.")]
        assert all(g is not None for g in d_grads)
        if filled:
            assert all(g is not None and np.abs(g).sum() > 0 for g in g_grads), name
        else:
            assert all(g is None for g in g_grads), name


def test_gan_generator_grad_after_d_backward_is_pytorchs_own_gradient():
    lab = builtin_lab("gan-detach")
    run = lab.run("no-detach")
    start = lab.initial("no-detach")
    recs = records_by_run(lab, 1)["no-detach"]
    d_backward = next(r for r in recs if r.op == "backward" and r.phase == "discriminator")
    G = torch.nn.Sequential(torch.nn.Linear(1, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    D = torch.nn.Sequential(torch.nn.Linear(1, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    for prefix, net in (("G.", G), ("D.", D)):
        with torch.no_grad():
            for name, p in net.named_parameters():
                p.copy_(torch.from_numpy(start.params[prefix + name].copy()))
    real, z = run.task.batch(0)
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    fake = G(z)
    loss_d = bce(D(real), torch.ones_like(real)) + bce(D(fake), torch.zeros_like(real))
    grads = torch.autograd.grad(loss_d, list(G.parameters()))
    for (name, _), g in zip(G.named_parameters(), grads, strict=True):
        np.testing.assert_allclose(d_backward.grads["G." + name], g.numpy(), rtol=1e-6, atol=1e-7)


def test_model_zero_grad_misses_the_parameter_held_outside_the_model():
    lab = builtin_lab("net-vs-optimizer-zero-grad")
    recs = records_by_run(lab, 4)
    for name, accumulates in (("model", True), ("optimizer", False)):
        zeroed = _after(recs[name], "zero_grad")
        later = zeroed[2]
        assert later.grads["weight"] is None and later.grads["bias"] is None
        if accumulates:
            assert later.grads["offset"] is not None
            backwards = _after(recs[name], "backward")
            total = sum(b.fresh_grads["offset"] for b in backwards[:3])
            np.testing.assert_allclose(backwards[2].grads["offset"], total, rtol=1e-5)
        else:
            assert later.grads["offset"] is None


def test_manual_sgd_matches_the_optimizer_and_zeroes_in_place():
    manual = records_by_run(builtin_lab("manual-sgd"), 10)["yours"]
    reference = builtin_lab("standard-loop")
    ref_steps = _after(records_by_run(reference, 10)["yours"], "step")
    for a, b in zip(_after(manual, "step"), ref_steps, strict=True):
        np.testing.assert_allclose(a.params["weight"], b.params["weight"], rtol=1e-6)
    zeroed = _after(manual, "zero_grad")[0]
    assert zeroed.grads["weight"] is not None and not zeroed.grads["weight"].any()
    assert "p.grad.zero_()" in builtin_lab("manual-sgd").runs[0].program.source


def test_zero_grad_leaves_weights_lr_and_parameter_memory_alone():
    lab = builtin_lab("zero-grad-myths")
    recs = records_by_run(lab, 3)
    for name, grads_freed in (("set-to-none", True), ("zeros", False)):
        records = recs[name]
        for i, rec in enumerate(records):
            if rec.op != "zero_grad" or i == 0:
                continue
            before = records[i - 1]
            for k in rec.params:
                np.testing.assert_array_equal(rec.params[k], before.params[k])
            assert rec.lr == before.lr
            assert rec.memory["params"] == before.memory["params"] > 0
            assert rec.memory["state"] == before.memory["state"] > 0
            if grads_freed:
                assert rec.memory["grads"] == 0
                assert all(g is None for g in rec.grads.values())
            else:
                assert rec.memory["grads"] == rec.memory["params"]
                assert all(g is not None and not g.any() for g in rec.grads.values())


def test_adam_state_is_the_optimizers_own():
    lab = builtin_lab("zero-grad-myths")
    recs = records_by_run(lab, 2)["set-to-none"]
    step = _after(recs, "step")[1]
    opt = lab.run("set-to-none").optimizers["optimizer"]
    for name, p in lab.run("set-to-none").task.params.items():
        state = opt.state[p]
        assert step.state[name]["step"].item() == state["step"].item() == 2.0
        np.testing.assert_array_equal(step.state[name]["exp_avg"], state["exp_avg"].numpy())
        np.testing.assert_array_equal(step.state[name]["exp_avg_sq"], state["exp_avg_sq"].numpy())


ZEROES_RIGHT_AFTER_BACKWARD = """
[model]
kind = "linear"
[data]
kind = "line"
[optimizer]
kind = "SGD"
lr = 0.05
momentum = 0.9
[[runs]]
name = "odd"
order = ["forward", "backward", "zero_grad", "step"]
set_to_none = false
"""


@pytest.mark.parametrize("name", [*builtin_names(), "zeroes-right-after-backward"])
def test_every_backward_adds_exactly_its_fresh_gradient_to_grad(name):
    if name == "zeroes-right-after-backward":
        lab = Lab(loads_scenario(ZEROES_RIGHT_AFTER_BACKWARD, "test"))
    else:
        lab = builtin_lab(name)
    # Read only after stepping on: each .grad must have been copied before PyTorch wrote it again.
    backwards = [rec for rec in lab.iterate(6) if rec.op == "backward"]
    assert backwards
    for rec in backwards:
        for param, grad in rec.grads.items():
            fresh, stale = rec.fresh_grads[param], rec.stale_grads[param]
            if fresh is None:
                assert (grad is None) == (stale is None)
                if grad is not None:
                    np.testing.assert_array_equal(grad, stale)
            elif stale is None:
                np.testing.assert_array_equal(grad, fresh)
            else:
                np.testing.assert_array_equal(grad, stale + fresh)
