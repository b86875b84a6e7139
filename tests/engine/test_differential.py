"""The lab against plain PyTorch, across the scenario format.

Two kinds of check:

- each run of a lab performs exactly its own loop, whatever the other runs'
  orders: its records equal a hand-written PyTorch loop op for op, bit for bit;
- scenarios drawn at random across the format (models x optimizers with their
  keyword arguments x zero_grad variants x accumulation x orders): every step
  equals a fresh ``torch.optim`` optimizer fed the recorded ``.grad`` and
  state, and every ``.grad`` equals what the ledger says was there plus what
  the op added.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import pytest
import tomli_w
import torch

from gradviz.engine import Lab, OpRecord, ScenarioError, loads_scenario
from gradviz.engine.scenario import OPS

from .helpers import records_by_run
from .plain import plain_loop

STANDARD = ["zero_grad", "forward", "backward", "step"]

# One small scenario of each model kind: (model table, data table).
MODELS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "linear": ({"kind": "linear"}, {"kind": "line", "n": 32, "batch_size": 8}),
    "linear-offset": (
        {"kind": "linear-offset", "offset_every": 2},
        {"kind": "line", "n": 32, "batch_size": 8},
    ),
    "logistic": ({"kind": "logistic"}, {"kind": "blobs", "n": 32, "batch_size": 8}),
    "mlp": ({"kind": "mlp", "widths": [3]}, {"kind": "wave", "n": 32, "batch_size": 8}),
    "quadratic": ({"kind": "quadratic"}, {"kind": "none"}),
    "rosenbrock": ({"kind": "rosenbrock"}, {"kind": "none"}),
    "saddle": ({"kind": "saddle"}, {"kind": "none"}),
    "gan": ({"kind": "gan", "hidden": 3}, {"kind": "gaussian", "n": 32, "batch_size": 8}),
}


def scenario_text(model: str, runs: list[dict[str, Any]], optimizer: dict[str, Any] | None = None) -> str:
    model_table, data_table = MODELS[model]
    return tomli_w.dumps(
        {
            "name": "differential",
            "seed": 3,
            "iterations": 3,
            "model": model_table,
            "data": data_table,
            "optimizer": optimizer or {"kind": "SGD", "lr": 0.05, "momentum": 0.5},
            "runs": runs,
        }
    )


def accepted(model: str, run: dict[str, Any]) -> bool:
    try:
        loads_scenario(scenario_text(model, [run]), "probe")
    except ScenarioError:
        return False
    return True


def every_order() -> list[list[str]]:
    """Every op order the scenario format accepts (each op at most once, forward before backward)."""
    out = []
    for n in range(1, len(OPS) + 1):
        for order in itertools.permutations(OPS, n):
            if accepted("linear", {"name": "r", "order": list(order)}):
                out.append(list(order))
    return out


ORDERS = every_order()


def assert_matches_plain(lab: Lab, iterations: int) -> None:
    """Every run's records equal its plain PyTorch loop, op for op, bit for bit."""
    recs = records_by_run(lab, iterations)
    for spec in lab.scenario.runs:
        plain = plain_loop(lab.scenario, spec, iterations)
        got = recs[spec.name]
        where = f"run {spec.name!r} {list(spec.loop.order)}"
        assert [r.op for r in got] == [p.op for p in plain], where
        for rec, exp in zip(got, plain, strict=True):
            assert rec.error == exp.error, where
            for name, value in exp.params.items():
                np.testing.assert_array_equal(rec.params[name], value, err_msg=where)
            for name, value in exp.grads.items():
                if value is None:
                    assert rec.grads[name] is None, (where, rec.index, name)
                else:
                    assert rec.grads[name] is not None, (where, rec.index, name)
                    np.testing.assert_array_equal(rec.grads[name], value, err_msg=where)


def test_the_format_accepts_the_orders_a_lesson_needs():
    # The standard loop, zero_grad after backward, zero_grad after step, no zero_grad,
    # no step: all of them must be checked below.
    for order in (
        STANDARD,
        ["forward", "backward", "zero_grad", "step"],
        ["forward", "backward", "step", "zero_grad"],
        ["forward", "backward", "step"],
        ["zero_grad", "forward", "backward"],
    ):
        assert order in ORDERS
    assert len(ORDERS) > 20


def test_zero_grad_after_backward_beside_the_standard_loop_does_only_its_own_ops():
    text = scenario_text(
        "linear",
        [{"name": "late", "order": ["forward", "backward", "zero_grad", "step"]}, {"name": "standard"}],
    )
    lab = Lab(loads_scenario(text, "t"))
    recs = records_by_run(lab, 2)
    assert [r.op for r in recs["late"]] == ["forward", "backward", "zero_grad", "step"] * 2
    assert [r.op for r in recs["standard"]] == STANDARD * 2
    # The standard run learns: its step sees the gradient of its own backward.
    steps = [r for r in recs["standard"] if r.op == "step"]
    start = lab.initial("standard").params["weight"]
    assert not np.array_equal(steps[0].params["weight"], start)


@pytest.mark.parametrize("model", list(MODELS))
def test_every_order_beside_the_standard_one_runs_its_own_loop(model):
    for order in ORDERS:
        runs = [{"name": "yours", "order": order}, {"name": "reference"}]
        if model != "gan":
            runs.append({"name": "manual", "order": order, "zero_grad": "manual", "set_to_none": False})
        lab = Lab(loads_scenario(scenario_text(model, runs), "t"))
        assert_matches_plain(lab, 3)


@pytest.mark.parametrize("model", [m for m in MODELS if m != "gan"])
def test_accumulating_orders_beside_the_standard_one_run_their_own_loop(model):
    for order in ORDERS:
        run = {"name": "yours", "order": order, "accumulate": 2, "scale_loss": True}
        if not accepted(model, run):
            continue
        lab = Lab(loads_scenario(scenario_text(model, [run, {"name": "reference"}]), "t"))
        assert_matches_plain(lab, 3)


def test_orders_against_each_other_run_their_own_loops():
    rng = random.Random(11)
    for _ in range(40):
        model = rng.choice(list(MODELS))
        runs = []
        for i in range(rng.randint(2, 4)):
            run: dict[str, Any] = {"name": f"r{i}", "order": rng.choice(ORDERS)}
            if model != "gan" and rng.random() < 0.3:
                run["zero_grad"] = "manual"
                run["set_to_none"] = rng.random() < 0.5
            if model != "gan" and rng.random() < 0.3:
                run["accumulate"] = 2
            if not accepted(model, run):
                run = {"name": f"r{i}", "order": rng.choice(ORDERS)}
            runs.append(run)
        lab = Lab(loads_scenario(scenario_text(model, runs), "t"))
        assert_matches_plain(lab, 3)


# ------------------------------------------------------------ drawn scenarios

OPTIMIZERS: dict[str, list[dict[str, Any]]] = {
    "SGD": [
        {},
        {"momentum": 0.9},
        {"momentum": 0.9, "nesterov": True},
        {"momentum": 0.5, "dampening": 0.3, "weight_decay": 0.1},
        {"weight_decay": 0.2, "maximize": True},
    ],
    "Adam": [{}, {"betas": [0.8, 0.9], "weight_decay": 0.1}, {"amsgrad": True}],
    "AdamW": [{}, {"weight_decay": 0.3}],
    "RMSprop": [{}, {"momentum": 0.5, "centered": True}, {"alpha": 0.9, "weight_decay": 0.1}],
    "Adagrad": [{}, {"lr_decay": 0.1, "initial_accumulator_value": 0.5}],
    "manual": [{}],
}


def draw_scenario(rng: random.Random) -> str:
    """A random scenario file across the format."""
    model = rng.choice(list(MODELS))
    kind = rng.choice(list(OPTIMIZERS))
    optimizer = {"kind": kind, "lr": rng.choice([0.01, 0.05, 0.2]), **rng.choice(OPTIMIZERS[kind])}
    runs = []
    for i in range(rng.randint(1, 3)):
        for _ in range(20):
            run: dict[str, Any] = {
                "name": f"run{i}",
                "order": rng.choice(ORDERS),
                "zero_grad": rng.choice(["optimizer", "model", "manual"]),
                "set_to_none": rng.random() < 0.6,
            }
            if model != "gan" and rng.random() < 0.4:
                run["accumulate"] = rng.choice([2, 4])
                run["scale_loss"] = rng.random() < 0.5
            if model == "gan":
                run["fake"] = rng.choice(["detach", "no_grad", "none"])
            try:
                loads_scenario(scenario_text(model, [run], optimizer), "probe")
            except ScenarioError:
                continue
            runs.append(run)
            break
    return scenario_text(model, runs or [{"name": "run0"}], optimizer)


def fresh_step(
    before: OpRecord | Any, grads: dict[str, np.ndarray | None], lab: Lab, run_name: str, phase: str
):
    """What a new ``torch.optim`` optimizer does from ``before``'s parameters and state with ``grads``."""
    run = lab.run(run_name)
    spec = run.spec.optimizer
    names = list(run.phases[phase].params)
    tensors = {n: torch.tensor(before.params[n]).requires_grad_() for n in names}
    for n in names:
        g = grads[n]
        tensors[n].grad = None if g is None else torch.tensor(g)
    if spec.kind == "manual":
        with torch.no_grad():
            for n in names:
                tensors[n] -= spec.lr * tensors[n].grad
        return {n: t.detach().numpy() for n, t in tensors.items()}, {}
    opt = getattr(torch.optim, spec.kind)(
        list(tensors.values()), lr=before.lr[run.phases[phase].optimizer], **spec.options
    )
    for n in names:
        if n in before.state:
            opt.state[tensors[n]] = {
                k: torch.tensor(np.array(v)) if isinstance(v, np.ndarray) else v
                for k, v in before.state[n].items()
            }
    opt.step()
    state = {
        n: {k: v.numpy().copy() for k, v in opt.state[tensors[n]].items()}
        for n in names
        if tensors[n] in opt.state
    }
    return {n: t.detach().numpy() for n, t in tensors.items()}, state


def check_ledger(lab: Lab, records: list[OpRecord]) -> int:
    """Check every op of one run against PyTorch; returns the number of steps checked."""
    run_name = records[0].run
    before: Any = lab.initial(run_name)
    steps = 0
    for rec in records:
        where = (rec.run, rec.index, rec.op, rec.phase)
        if rec.error:
            break
        phase_params = set(lab.run(run_name).phases[rec.phase].params)
        if rec.op == "backward":
            assert rec.fresh_grads is not None
            for n, g in rec.grads.items():
                stale, fresh = rec.stale_grads[n], rec.fresh_grads[n]
                assert (stale is None) == (before.grads[n] is None), where
                if g is None:
                    assert stale is None and fresh is None, where
                    continue
                expected = (0 if stale is None else stale) + (0 if fresh is None else fresh)
                np.testing.assert_allclose(g, expected, rtol=1e-6, atol=1e-7, err_msg=str(where))
        elif rec.op == "zero_grad":
            loop = lab.run(run_name).loop
            for n, g in rec.grads.items():
                if n not in phase_params or (
                    loop.zero_grad == "model" and n in lab.run(run_name).task.outside
                ):
                    # model.zero_grad() misses a parameter held outside the model.
                    assert (g is None) == (before.grads[n] is None), where
                    if g is not None:
                        np.testing.assert_array_equal(g, before.grads[n])
                elif loop.set_to_none or before.grads[n] is None:
                    assert g is None, where
                else:
                    np.testing.assert_array_equal(g, np.zeros_like(before.grads[n]))
        else:
            # forward and step leave .grad alone (torch.optim's CPU steps use no scratch).
            for n, g in rec.grads.items():
                assert (g is None) == (before.grads[n] is None), where
                if g is not None:
                    np.testing.assert_array_equal(g, before.grads[n])
        if rec.op == "step":
            params, state = fresh_step(before, before.grads, lab, run_name, rec.phase)
            for n, value in params.items():
                np.testing.assert_allclose(rec.params[n], value, rtol=1e-6, atol=1e-7, err_msg=str(where))
            for n, entries in state.items():
                for k, value in entries.items():
                    np.testing.assert_allclose(
                        np.asarray(rec.state[n][k], dtype=float),
                        value,
                        rtol=1e-6,
                        atol=1e-7,
                        err_msg=f"{where} {k}",
                    )
            steps += 1
        else:
            for n, value in rec.params.items():
                np.testing.assert_array_equal(value, before.params[n], err_msg=str(where))
        before = rec
    return steps


def test_drawn_scenarios_step_as_a_fresh_optimizer_and_keep_the_ledger():
    rng = random.Random(5)
    steps = 0
    for _ in range(60):
        text = draw_scenario(rng)
        lab = Lab(loads_scenario(text, "drawn"))
        for records in records_by_run(lab, 3).values():
            if records:
                steps += check_ledger(lab, records)
    assert steps > 100
