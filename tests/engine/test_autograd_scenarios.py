"""backward-twice, rnn-tbptt and virtual-batch against plain PyTorch: errors, graph lengths, saved bytes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tomli_w
import torch

from gradviz.engine import Lab, ScenarioError, load_builtin, loads_scenario
from gradviz.engine.footprint import graph_nodes

from .helpers import records_by_run

SECOND_TIME = "Trying to backward through the graph a second time"


def _loop_of(source: str) -> str:
    """The shown source with its loop run over ``data`` (the batches the lab used)."""
    lines = source.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("for "))
    loop_var = lines[head].split(" in ")[0]
    lines[head] = f"{loop_var} in data:"
    return "\n".join(lines) + "\n"


def _exec_shown(lab: Lab, run: str, iterations: int) -> tuple[dict[str, torch.nn.Module], str | None]:
    """Execute ``run``'s shown code as Python over the lab's batches; its modules and any error."""
    r = lab.run(run)
    namespace: dict[str, object] = {"data": [r.task.batch(i) for i in range(iterations)]}
    error = None
    with torch.random.fork_rng(devices=[]):
        try:
            exec(compile(_loop_of(r.program.source), f"<{run}>", "exec"), namespace)
        except RuntimeError as exc:
            error = f"RuntimeError: {exc}"
    return {m: namespace[m] for m in r.task.modules}, error  # type: ignore[misc]


def _params_of(modules: dict[str, torch.nn.Module]) -> dict[str, np.ndarray]:
    prefix = len(modules) > 1
    return {
        (f"{m}.{n}" if prefix else n): p.detach().numpy()
        for m, module in modules.items()
        for n, p in module.named_parameters()
    }


# ---------------------------------------------------------------- backward-twice


def test_second_backward_without_retain_graph_is_pytorchs_error_and_the_run_stops():
    lab = Lab(load_builtin("backward-twice"))
    recs = records_by_run(lab, 2)
    failed = [r for r in recs["no-retain"] if r.error]
    assert len(failed) == 1 and failed[0].op == "backward" and SECOND_TIME in failed[0].error
    assert recs["no-retain"][-1] is failed[0]  # nothing after the error
    assert lab.run("no-retain").status == "error"
    # The other runs went on to the end.
    assert [r.iteration for r in recs["retain"] if r.op == "step"] == [0, 1]
    # PyTorch says the same in a plain loop.
    w = torch.nn.Parameter(torch.ones(1, 1))
    x = torch.tensor([[4.0], [2.0]])
    loss = ((x @ w - 2 * x) ** 2).mean() / 2
    loss.backward()
    with pytest.raises(RuntimeError) as plain:
        loss.backward()
    assert failed[0].error == f"RuntimeError: {plain.value}"


def test_retain_graph_doubles_grad_and_the_step():
    recs = records_by_run(Lab(load_builtin("backward-twice")), 1)
    first, second = [r.grads["weight"].item() for r in recs["retain"] if r.op == "backward"]
    assert (first, second) == (-10.0, -20.0)
    (once,) = [r.grads["weight"].item() for r in recs["once"] if r.op == "backward"]
    assert once == first
    step = {run: next(r for r in recs[run] if r.op == "step") for run in ("retain", "once")}
    assert step["retain"].params["weight"].item() == pytest.approx(1.2)
    assert step["once"].params["weight"].item() == pytest.approx(1.1)


def _shown_code_runs_as_the_lab(name: str, fine: tuple[str, ...], failing: str) -> Lab:
    """Two iterations of built-in ``name``; the code shown for each run, executed, ends where the
    lab did: the ``fine`` runs at the lab's parameters, ``failing`` with the lab's error."""
    lab = Lab(load_builtin(name))
    lab.run_iterations(2)
    for run in fine:
        modules, error = _exec_shown(lab, run, 2)
        assert error is None
        got = _params_of(modules)
        assert all(np.array_equal(got[n], v) for n, v in lab.run(run).current.params.items())
    _, error = _exec_shown(lab, failing, 2)
    assert error == lab.run(failing).error
    return lab


def test_backward_twice_code_shown_is_the_code_run():
    lab = _shown_code_runs_as_the_lab("backward-twice", ("retain", "once"), "no-retain")
    source = lab.run("retain").program.source
    assert source.count("loss.backward(retain_graph=True)") == 2


@pytest.mark.parametrize(
    ("loop", "words"),
    [
        ({"backwards": 0}, "runs[0].backwards: found 0; allowed: 1 to 4 backward() calls per forward."),
        ({"backwards": 9}, "found 9"),
        ({"backwards": 2, "order": ["zero_grad", "forward", "step"]}, "1 for a loop without 'backward'"),
        ({"retain_graph": "yes"}, "runs[0].retain_graph: found 'yes'; allowed: true or false."),
        ({"hidden": "cut"}, "runs[0].hidden: found 'cut'; allowed: one of 'detach', 'keep'."),
    ],
)
def test_bad_backward_options_get_one_sentence(loop, words):
    text = tomli_w.dumps({"name": "t", "runs": [{"name": "r", **loop}]})
    with pytest.raises(ScenarioError) as err:
        loads_scenario(text, "t.toml")
    message = str(err.value)
    assert words in message and message.startswith("t.toml: ") and "\n" not in message


# ---------------------------------------------------------------- rnn-tbptt


def _plain_tbptt(lab: Lab, run: str, iterations: int) -> tuple[list[int], dict[str, np.ndarray], str | None]:
    """The loop by hand on the lab's own modules' starting weights: nodes per backward, weights, error."""
    r = lab.run(run)
    loop = r.loop
    fresh = type(r.task)(r.task.spec, r.task.data, r.task.seed, torch.device("cpu"))
    rnn, head = fresh.modules["rnn"], fresh.modules["head"]
    opt = torch.optim.SGD([*rnn.parameters(), *head.parameters()], lr=r.spec.optimizer.lr)
    walked: list[int] = []
    try:
        for it in range(iterations):
            x, y = fresh.batch(it)
            opt.zero_grad()
            hidden = torch.zeros(1, fresh.spec.hidden)
            for xk, yk in zip(x.chunk(loop.accumulate), y.chunk(loop.accumulate), strict=True):
                if loop.hidden == "detach":
                    hidden = hidden.detach()
                out, hidden = rnn(xk, hidden)
                loss = torch.nn.functional.mse_loss(head(out), yk)
                walked.append(graph_nodes(loss))
                loss.backward(retain_graph=loop.retain_graph)
            opt.step()
    except RuntimeError as exc:
        return walked, {}, f"RuntimeError: {exc}"
    return walked, {n: p.detach().numpy() for n, p in fresh.params.items()}, None


def test_tbptt_graph_length_per_backward_comes_from_the_graph():
    lab = Lab(load_builtin("rnn-tbptt"))
    recs = records_by_run(lab, 2)
    nodes = {run: [r.footprint.nodes for r in rs if r.op == "backward"] for run, rs in recs.items()}
    one = nodes["detach"][0]
    assert one > 8 * 3  # eight time steps of several autograd nodes each
    assert nodes["detach"] == [one] * 6
    grow = nodes["retain"][:3]
    step = grow[1] - grow[0]
    assert grow == [one, one + step, one + 2 * step] and step > 8 * 3
    assert nodes["retain"][3:] == grow  # a new sequence starts from a fresh hidden state
    for run in ("detach", "retain"):
        walked, params, error = _plain_tbptt(lab, run, 2)
        assert error is None and walked == nodes[run]
        # The same arithmetic as the plain loop, bit for bit.
        assert all(np.array_equal(params[n], v) for n, v in lab.run(run).current.params.items())


def test_tbptt_without_detach_raises_at_the_second_chunk():
    lab = Lab(load_builtin("rnn-tbptt"))
    recs = records_by_run(lab, 2)
    last = recs["keep"][-1]
    assert last.op == "backward" and last.micro == 1 and SECOND_TIME in last.error
    walked, _, error = _plain_tbptt(lab, "keep", 2)
    assert error == last.error and walked == [r.footprint.nodes for r in recs["keep"] if r.op == "backward"]
    # The graph it tried to walk reaches into the first chunk: longer than one chunk's.
    assert last.footprint.nodes > recs["detach"][2].footprint.nodes


def test_tbptt_code_shown_is_the_code_run():
    lab = _shown_code_runs_as_the_lab("rnn-tbptt", ("detach", "retain"), "keep")
    assert "hidden = hidden.detach()" in lab.run("detach").program.source
    assert "detach" not in lab.run("keep").program.source


def test_tbptt_going_back_repeats_the_same_chunks():
    lab = Lab(load_builtin("rnn-tbptt"))
    lab.run_iterations(2)
    end = lab.run("detach").current.params
    lab.seek(lab.ticks_per_iteration + 3)
    lab.run_iterations(1)
    again = lab.run("detach").current.params
    assert all(np.array_equal(end[n], again[n]) for n in end)


# ---------------------------------------------------------------- virtual-batch


def test_virtual_batch_same_grad_at_the_step_and_k_times_fewer_saved_bytes():
    sc = load_builtin("virtual-batch")
    k = sc.runs[1].loop.accumulate
    recs = records_by_run(Lab(sc), sc.iterations)
    for it in range(sc.iterations):
        steps = {run: next(r for r in rs if r.op == "step" and r.iteration == it) for run, rs in recs.items()}
        for name, g in steps["one-batch"].grads.items():
            np.testing.assert_allclose(steps["micro-batches"].grads[name], g, rtol=1e-5, atol=1e-7)
    peak = {run: max(r.footprint.saved for r in rs) for run, rs in recs.items()}
    assert peak["one-batch"] / peak["micro-batches"] == pytest.approx(k, rel=0.1)
    # Every backward frees what its forward saved.
    assert all(r.footprint.saved == 0 for rs in recs.values() for r in rs if r.op == "backward")


def test_saved_bytes_are_what_autograd_saved():
    """The count equals the bytes of the distinct non-parameter tensors the hooks are given."""
    sc = load_builtin("virtual-batch")
    lab = Lab(sc)
    rec = next(r for r in lab.iterate(1) if r.op == "forward")
    task = type(lab.runs[0].task)(sc.model, sc.data, sc.seed, torch.device("cpu"))
    params = {p.untyped_storage().data_ptr() for p in task.params.values()}
    seen: dict[tuple[int, int], None] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in params:
            seen[(t.data_ptr(), t.numel() * t.element_size())] = None
        return t

    x, y = task.batch(0)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        torch.nn.functional.mse_loss(task.modules["model"](x), y)
    assert rec.footprint.saved == sum(size for _, size in seen) > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_virtual_batch_on_cuda_peak_allocation_is_smaller():
    sc = load_builtin("virtual-batch")
    big = dataclasses.replace(
        sc,
        device="cuda",
        model=dataclasses.replace(sc.model, widths=(128,)),
        data=dataclasses.replace(sc.data, n=16384, batch_size=16384),
        iterations=1,
    )
    recs = records_by_run(Lab(big), 1)
    one = next(r for r in recs["one-batch"] if r.op == "forward")
    # Micro-batches after the first: run one-batch's graph is freed by then.
    later = [r for r in recs["micro-batches"] if r.op == "forward" and r.micro > 0]
    saved_gap = one.footprint.saved - later[0].footprint.saved
    assert one.footprint.saved / later[0].footprint.saved == pytest.approx(4, rel=0.1)
    for rec in later:
        assert one.footprint.device_peak - rec.footprint.device_peak >= saved_gap / 2


# ---------------------------------------------------------------- lesson fields and measuring


def _with_lesson(order: list[str], question: dict, show: tuple[str, ...] = ()) -> str:
    return tomli_w.dumps(
        {
            "name": "t",
            # An MLP's second layer saves its weight for backward (the linear model saves none).
            "model": {"kind": "mlp", "widths": [3]},
            "data": {"kind": "wave", "n": 32, "batch_size": 8},
            "iterations": 2,
            "loop": {"order": order},
            "runs": [{"name": "r"}],
            "lesson": {
                "point": "p",
                "show": list(show),
                "stops": [
                    {"at": {"iteration": 0, "op": "backward"}, "caption": "c", "questions": [question]}
                ],
            },
        }
    )


STANDARD = ["zero_grad", "forward", "backward", "step"]
NUMBER = {"ask": "How many?", "kind": "number"}


@pytest.mark.parametrize(
    ("order", "question", "words"),
    [
        (STANDARD, {**NUMBER, "read": {"quantity": "saved", "param": "0.bias"}}, "saved is the run's"),
        (
            STANDARD,
            {"ask": "Raises?", "kind": "choice", "choices": [
                {"text": "yes", "claim": {"raised": False}}, {"text": "no", "claim": {"raised": True}},
            ]},
            "choices[0].claim.raised: found False; allowed: true",
        ),
    ],
)  # fmt: skip
def test_bad_reads_and_claims_of_autograd_get_one_sentence(order, question, words):
    with pytest.raises(ScenarioError) as err:
        loads_scenario(_with_lesson(order, question), "t.toml")
    assert words in str(err.value) and "\n" not in str(err.value)


def test_saved_bytes_are_not_read_where_a_step_comes_between_forward_and_backward():
    from gradviz.engine.quiz import check_lesson

    order = ["zero_grad", "forward", "step", "backward"]
    sc = loads_scenario(_with_lesson(order, {**NUMBER, "read": {"quantity": "saved"}}), "t.toml")
    with pytest.raises(ScenarioError) as err:
        check_lesson(sc)
    assert "steps between its forward and its backward" in str(err.value)


def test_measuring_never_hides_pytorchs_in_place_check():
    """With memory leading, a step between forward and backward still raises PyTorch's own error
    (from iteration 1, when the step has a .grad to move the weights with)."""
    order = ["forward", "step", "backward"]
    sc = loads_scenario(_with_lesson(order, {**NUMBER, "read": {"quantity": "nodes"}}, ("memory",)), "t.toml")
    recs = records_by_run(Lab(sc), 2)["r"]
    failed = [r for r in recs if r.error]
    assert failed and "modified by an inplace operation" in failed[0].error
    assert all(r.footprint is not None and r.footprint.saved is None for r in recs)


def test_saved_bytes_after_going_back_are_those_of_the_first_pass():
    """Going back replays the retained chunks' graphs: the bytes they hold are still counted."""
    lab = Lab(load_builtin("rnn-tbptt"))
    first = records_by_run(lab, 1)["retain"]
    lab.seek(4)  # just after the second chunk's backward
    again = [r for r in lab.iterate(1) if r.run == "retain"]
    assert [r.footprint.saved for r in again] == [r.footprint.saved for r in first[5:]]


@pytest.mark.parametrize(
    ("model", "data"),
    [
        ({"kind": "mlp", "widths": [3]}, {"kind": "wave", "n": 32, "batch_size": 8}),
        ({"kind": "gan", "hidden": 3}, {"kind": "gaussian", "n": 32, "batch_size": 8}),
        ({"kind": "rnn", "hidden": 3}, {"kind": "sequence", "n": 16, "batch_size": 8}),
    ],
)
def test_retained_second_backward_adds_the_same_gradient_again_for_every_model(model, data):
    text = tomli_w.dumps(
        {
            "name": "t",
            "iterations": 2,
            "model": model,
            "data": data,
            "runs": [{"name": "once"}, {"name": "twice", "backwards": 2, "retain_graph": True}],
        }
    )
    recs = records_by_run(Lab(loads_scenario(text, "t.toml")), 1)
    once = [r for r in recs["once"] if r.op == "backward"]
    twice = [r for r in recs["twice"] if r.op == "backward"]
    assert len(twice) == 2 * len(once) and not any(r.error for r in twice)
    # The first call is the plain loop's backward (before any step tells the runs apart).
    assert all(np.array_equal(twice[0].grads[n], g) for n, g in once[0].grads.items())
    for first, second in zip(twice[::2], twice[1::2], strict=True):
        for name, g in first.fresh_grads.items():
            # The second call adds this forward's gradient again.
            assert (g is None and second.fresh_grads[name] is None) or np.array_equal(
                second.fresh_grads[name], g
            )


def test_rnn_surface_at_the_weights_is_nn_rnns_loss_over_the_sequence():
    from gradviz.engine import landscape

    lab = Lab(load_builtin("rnn-tbptt"))
    lab.run_iterations(1)
    plane = landscape.plane_for(lab, "detach", "random")
    # Small chunks: several vmap calls, each from its own zero state.
    small = landscape.point_loss(lab, "detach", plane, chunk_bytes=512)
    (grid,) = landscape.evaluate_grid(small, plane.labels, 5, 0.5)
    (whole,) = landscape.evaluate_grid(landscape.point_loss(lab, "detach", plane), plane.labels, 5, 0.5)
    np.testing.assert_allclose(grid.Z, whole.Z, rtol=1e-5)
    task = lab.run("detach").task
    x, y = task.inputs
    with torch.no_grad():
        out, _ = task.modules["rnn"](x, torch.zeros(1, task.spec.hidden))
        plain = torch.nn.functional.mse_loss(task.modules["head"](out), y).item()
    assert grid.Z[2, 2] == pytest.approx(plain, rel=1e-6) and np.isfinite(grid.Z).all()
    assert task.hidden is not None and not task.unrolled  # the live run is left as it was
