"""The autograd graph capture against PyTorch itself: walks, hook order, gradients and freed tensors."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from gradviz.engine import Lab, load_builtin
from gradviz.engine.graph import GraphCapture, Uncopied, capture_graph, graph_of, run_params
from gradviz.engine.loop import OpSlot
from gradviz.engine.run import Run
from gradviz.engine.zoo import build_task


def independent_walk(loss: torch.Tensor) -> tuple[list[Any], list[str], list[tuple[int, int]]]:
    """Breadth first from ``loss.grad_fn`` over ``next_functions``: nodes, their names, edges."""
    nodes = [loss.grad_fn]
    index = {loss.grad_fn: 0}
    edges = []
    for i, node in enumerate(nodes):  # the list grows while it is read
        for nxt, _ in node.next_functions:
            if nxt is None:
                continue
            if nxt not in index:
                index[nxt] = len(nodes)
                nodes.append(nxt)
            edges.append((i, index[nxt]))
    return nodes, [type(n).__name__ for n in nodes], edges


class Checked(GraphCapture):
    """A capture that also walks each loss itself, with the code above, as the forward leaves it."""

    def __init__(self) -> None:
        super().__init__()
        self.walks: list[tuple[list[str], list[tuple[int, int]], dict[int, str]]] = []
        self.fresh: list[tuple[Any, Any]] = []

    def forward(self, run: Run, slot: OpSlot, iteration: int, loss: torch.Tensor) -> None:
        super().forward(run, slot, iteration, loss)
        got = self.pending[slot.phase]
        # What the capture remembered of an earlier graph like this one, against this one read afresh.
        self.fresh.append((got.nodes, graph_of(loss, run_params(run)).nodes))
        nodes, names, edges = independent_walk(loss)
        params = {id(t): n for n, t in zip(run.names, run.tensors, strict=True)}
        leaves = {
            i: params[id(n.variable)]
            for i, n in enumerate(nodes)
            if id(getattr(n, "variable", None)) in params
        }
        self.walks.append((names, edges, leaves))


CASES = [
    (name, run.name)
    for name in ("standard-loop", "zero-grad-myths", "gan-detach", "grad-accumulation")
    for run in load_builtin(name).runs
]


@pytest.mark.parametrize(("scenario", "run"), CASES)
def test_nodes_and_edges_are_the_walk_of_grad_fn(scenario, run):
    lab = Lab(load_builtin(scenario), record="bare")
    capture = lab.run(run).graph_observer = Checked()
    lab.run_iterations(3)
    assert len(capture.graphs) == len(capture.walks) > 0
    for remembered, read in capture.fresh:
        assert remembered == read
    for graph, (names, edges, leaves) in zip(capture.graphs, capture.walks, strict=True):
        assert [n.name for n in graph.nodes] == names
        assert [n.id for n in graph.nodes] == list(range(len(names)))
        assert list(graph.edges) == edges
        assert graph.params == {p: i for i, p in leaves.items()}
        assert graph.nodes[0].kind == "loss" and graph.root == 0
        for node in graph.nodes[1:]:
            expected = (
                "parameter"
                if node.id in leaves
                else ("input" if node.name == "AccumulateGrad" else "operation")
            )
            assert node.kind == expected


@pytest.mark.parametrize(
    "scenario", ["standard-loop", "zero-grad-myths", "gan-detach", "two-batch-accumulation"]
)
def test_execution_order_is_the_order_node_hooks_fire_in_a_plain_loop(scenario):
    sc = load_builtin(scenario)
    spec = sc.runs[0]
    # The plain loop: the task's model and first batch, one forward and backward as a user writes them.
    task = build_task(sc, torch.device("cpu"))
    phase = task.phases()[0]
    batch = task.batch(0)
    if spec.loop.accumulate > 1:
        batch = tuple(t.chunk(spec.loop.accumulate)[0] for t in batch)
    loss = task.loss(phase, batch, 0, spec.loop)
    nodes, names, _ = independent_walk(loss)
    fired: list[int] = []
    handles = [n.register_prehook(lambda grads, i=i: fired.append(i)) for i, n in enumerate(nodes)]
    loss.backward()
    for h in handles:
        h.remove()

    graph = capture_graph(sc, spec.name, 0, 1)
    assert [n.name for n in graph.nodes] == names
    assert list(graph.order) == fired
    assert sorted(fired) == list(range(len(nodes)))  # every node ran once


@pytest.mark.parametrize("scenario", ["forgot-zero-grad", "grad-accumulation", "gan-detach", "set-to-none"])
def test_what_each_accumulate_grad_added_is_the_records_fresh_gradient(scenario):
    lab = Lab(load_builtin(scenario), record="full")
    captures = {}
    for run in lab.runs:
        captures[run.name] = run.graph_observer = GraphCapture()
    backwards: dict[str, list] = {r.name: [] for r in lab.runs}
    for rec in lab.iterate(3):
        if rec.op == "backward":
            backwards[rec.run].append(rec)
    for name, recs in backwards.items():
        graphs = captures[name].graphs
        assert len(graphs) == len(recs) > 0
        for graph, rec in zip(graphs, recs, strict=True):
            added = graph.added
            for pname, fresh in rec.fresh_grads.items():
                got = added.get(pname)
                if fresh is None:
                    assert got is None, (name, rec.index, pname)
                else:
                    assert got is not None and np.array_equal(got, fresh), (name, rec.index, pname)


def _discriminator_graph(run: str):
    return capture_graph(load_builtin("gan-detach"), run, 0, 1)


def test_the_gan_cut_detach_and_no_grad_keep_the_generator_out_of_loss_d():
    no_detach, detach, no_grad = (_discriminator_graph(r) for r in ("no-detach", "detach", "no-grad"))
    assert no_detach.phase == detach.phase == no_grad.phase == "discriminator"
    g_leaves = {p for p in no_detach.params if p.startswith("G.")}
    assert g_leaves == {"G.0.weight", "G.0.bias", "G.2.weight", "G.2.bias"}
    assert all(g_leaves & set(g.params) == set() for g in (detach, no_grad))
    assert all(p.startswith("D.") for g in (detach, no_grad) for p in g.params)
    # Both cut graphs are D's alone, the same nodes; without the cut, G's nodes hang below fake.
    assert [n.name for n in detach.nodes] == [n.name for n in no_grad.nodes]
    assert detach.edges == no_grad.edges
    assert len(no_detach.nodes) > len(detach.nodes)
    # What the backward delivered to G, it delivered only where the graph reached G.
    assert all(no_detach.added[p] is not None for p in g_leaves)


def test_no_grad_builds_no_graph_for_fake():
    sc = load_builtin("gan-detach")
    spec = next(r for r in sc.runs if r.name == "no-grad")
    task = build_task(sc, torch.device("cpu"))
    real, z = task.batch(0)
    with torch.no_grad():
        fake = task.modules["G"](z)
    assert fake.grad_fn is None and not fake.requires_grad
    loss = task.loss(task.phases()[0], (real, z), 0, spec.loop)
    ids = {id(p) for n, p in task.params.items() if n.startswith("G.")}
    assert not {id(n.variable) for n in independent_walk(loss)[0] if hasattr(n, "variable")} & ids


def _fake_run(tensors: dict[str, torch.Tensor], backwards: int = 1) -> Any:
    """What a capture reads of a run: its parameters, its loop's backward calls, its task's cuts."""
    return SimpleNamespace(
        names=tuple(tensors),
        tensors=list(tensors.values()),
        loop=SimpleNamespace(backwards=backwards),
        task=SimpleNamespace(cuts=()),
    )


SLOT = OpSlot("main", "backward", 0, 1, 1, 1)


def _small_loss() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 2)
    x = torch.randn(5, 3, requires_grad=True)  # a leaf outside the run: an input
    loss = torch.nn.functional.mse_loss(torch.tanh(layer(x)), torch.zeros(5, 2))
    return loss, {"weight": layer.weight, "bias": layer.bias}


@pytest.mark.parametrize("packed", [False, True])
def test_saved_tensors_are_marked_freed_after_backward_and_kept_with_retain_graph(packed):
    # ``packed``: the forward under saved-tensor hooks, as where the lab counts the bytes saved.
    hooks = torch.autograd.graph.saved_tensors_hooks(lambda t: t * 1, lambda t: t)
    for retain in (False, True):
        with hooks if packed else contextlib.nullcontext():
            loss, params = _small_loss()
        run = _fake_run(params)
        capture = GraphCapture()
        capture.forward(run, SLOT, 0, loss)
        before = capture.pending["main"]
        assert before.order == ()
        saved = [s for n in before.nodes for s in n.saved]
        assert saved and not any(s.freed for s in saved)
        tanh = next(n for n in before.nodes if n.name == "TanhBackward0")
        assert [(s.name, s.shape, s.bytes) for s in tanh.saved] == [("result", (5, 2), 40)]
        with capture.backward(run, SLOT, 0, loss):
            loss.backward(retain_graph=retain)
        (after,) = capture.graphs
        assert all(s.freed != retain for n in after.nodes for s in n.saved)
        # Each mark is what reading that tensor back does: PyTorch raises once it is freed.
        for node, shown in zip(independent_walk(loss)[0], after.nodes, strict=True):
            for s in shown.saved:
                try:
                    getattr(node, "_saved_" + s.name.split("[")[0])
                    raised = False
                except RuntimeError:
                    raised = True
                assert s.freed == raised, (shown.name, s.name, packed, retain)
        # The real thing: reading a saved tensor after such a backward raises.
        node = loss.grad_fn.next_functions[0][0]
        if retain:
            assert isinstance(node._saved_result, torch.Tensor)
        else:
            with pytest.raises(RuntimeError, match="backward through the graph a second time"):
                node._saved_result  # noqa: B018


def test_kinds_shapes_and_the_gradients_that_flowed():
    loss, params = _small_loss()
    run = _fake_run(params)
    capture = GraphCapture()
    capture.forward(run, SLOT, 0, loss)
    with capture.backward(run, SLOT, 0, loss):
        loss.backward()
    (graph,) = capture.graphs
    kinds = {n.param or n.name: n.kind for n in graph.nodes}
    assert kinds["weight"] == kinds["bias"] == "parameter"
    assert next(n for n in graph.nodes if n.kind == "input").shape == (5, 3)
    assert graph.nodes[0].shape == () and graph.nodes[0].name == "MseLossBackward0"
    assert graph.nodes[graph.params["weight"]].shape == (2, 3)
    # What each leaf received is what it added: here, with .grad None before, the new .grad.
    for name, t in params.items():
        assert np.array_equal(graph.added[name], t.grad.numpy())
    # What went along an edge into a parameter's leaf is what the leaf received.
    for (a, b), g in zip(graph.edges, graph.sent, strict=True):
        if graph.nodes[b].kind == "parameter":
            assert np.array_equal(g, graph.received[b][0]), (a, b)


def test_past_the_size_limit_gradients_keep_their_shape_and_leaves_their_values():
    loss, params = _small_loss()
    run = _fake_run(params)
    capture = GraphCapture(values=4)
    capture.forward(run, SLOT, 0, loss)
    with capture.backward(run, SLOT, 0, loss):
        loss.backward()
    (graph,) = capture.graphs
    for (_, b), g in zip(graph.edges, graph.sent, strict=True):
        shape = graph.nodes[b].shape
        assert g is not None
        if int(np.prod(shape)) > 4:
            assert isinstance(g, Uncopied) and g.shape == shape
        else:
            assert isinstance(g, np.ndarray) and g.shape == shape
    # What a leaf adds into .grad is the ledger's figure: copied whatever its size.
    assert np.array_equal(graph.added["weight"], params["weight"].grad.numpy())


def test_graph_of_a_loss_without_grad_fn_is_empty():
    graph = graph_of(torch.tensor(1.0))
    assert graph.nodes == () and graph.root is None


def test_no_observer_by_default_and_hooks_are_removed_after_backward():
    lab = Lab(load_builtin("standard-loop"), record="bare")
    assert all(r.graph_observer is None for r in lab.runs)
    loss, params = _small_loss()
    run = _fake_run(params)
    capture = GraphCapture()
    capture.forward(run, SLOT, 0, loss)
    with capture.backward(run, SLOT, 0, loss):
        loss.backward(retain_graph=True)
    loss.backward()  # hooks gone: nothing more is recorded
    assert len(capture.graphs) == 1 and len(capture.graphs[0].order) == len(capture.graphs[0].nodes)


def test_dot_and_json_of_a_graph():
    import json

    graph = _discriminator_graph("detach")
    dot = graph.to_dot('a "title"')
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    assert dot.count(" -> ") == len(graph.edges) + len(graph.cuts) == len(graph.edges) + 1
    assert 'label="detach()"' in dot
    data = json.loads(graph.to_json(scenario="gan-detach"))
    assert data["scenario"] == "gan-detach"
    assert [n["id"] for n in data["nodes"]] == list(range(len(graph.nodes)))
    assert sorted(data["order"]) == list(range(len(graph.nodes)))


def test_a_second_backward_through_a_freed_graph_keeps_the_graph_and_pytorchs_error():
    # The plain loop: the same model and batch, backward() twice, pre hooks telling where it raised.
    sc = load_builtin("backward-twice")
    task = build_task(sc, torch.device("cpu"))
    spec = next(r for r in sc.runs if r.name == "no-retain")
    loss = task.loss(task.phases()[0], task.batch(0), 0, spec.loop)
    nodes, names, _ = independent_walk(loss)
    loss.backward()
    started: list[int] = []
    for i, n in enumerate(nodes):
        n.register_prehook(lambda grads, i=i: started.append(i))
    with pytest.raises(RuntimeError) as raised:
        loss.backward()
    expected = f"RuntimeError: {raised.value}"

    first, second = (capture_graph(sc, "no-retain", 0, k) for k in (1, 2))
    assert first.error is None and second.error == expected
    assert "backward through the graph a second time" in second.error
    assert [n.name for n in second.nodes] == names and second.edges == first.edges
    assert second.failed == started[-1] and second.order == tuple(started[:-1])
    saved = [s for n in second.nodes for s in n.saved]
    assert saved and all(s.freed for s in saved)
    # With retain_graph=True the second backward runs every node and the saved tensors stay.
    kept = capture_graph(sc, "retain", 0, 2)
    assert kept.error is None and sorted(kept.order) == list(range(len(kept.nodes)))
    assert not any(s.freed for n in kept.nodes for s in n.saved)


def test_the_cut_is_marked_where_the_discriminator_took_fake_in():
    no_detach, detach, no_grad = (_discriminator_graph(r) for r in ("no-detach", "detach", "no-grad"))
    assert no_detach.cuts == ()
    (cut,) = detach.cuts
    assert (cut.tensor, cut.how, cut.source, cut.shape) == ("fake", "detach", "AddmmBackward0", (16, 1))
    (never,) = no_grad.cuts
    assert (never.tensor, never.how, never.source) == ("fake", "no_grad", None)
    # The node that took fake in is D's first layer on fake: an addmm whose input has no grad_fn.
    sc = load_builtin("gan-detach")
    task = build_task(sc, torch.device("cpu"))
    real, z = task.batch(0)
    fake = task.modules["G"](z).detach()
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    loss = bce(task.modules["D"](fake), torch.zeros_like(real))
    (first_layer,) = [n for n in independent_walk(loss)[0] if getattr(n, "_saved_mat1", None) is fake]
    assert type(first_layer).__name__ == detach.nodes[cut.node].name == "AddmmBackward0"
    assert None in [nxt for nxt, _ in first_layer.next_functions]  # fake: nothing to walk back into
    assert detach.nodes[cut.node].name == no_grad.nodes[never.node].name
    # The two D(...) calls make two such nodes: the cut is on the one the second call made.
    addmms = [n.id for n in detach.nodes if n.name == "AddmmBackward0" and n.shape == (16, 4)]
    assert cut.node in addmms and len(addmms) == 2


def test_a_capture_begun_after_the_graph_was_freed_reads_the_next_graph_afresh():
    loss, params = _small_loss()
    run = _fake_run(params)
    loss.backward()  # before the capture: the graph is freed
    capture = GraphCapture()
    with pytest.raises(RuntimeError, match="second time"), capture.backward(run, SLOT, 0, loss):
        loss.backward()
    (failed,) = capture.graphs
    assert failed.error is not None and failed.error.startswith("RuntimeError: Trying to backward")
    # The next forward's graph is alike in every node and shape, and holds its saved tensors.
    layer = torch.nn.Linear(3, 2)
    with torch.no_grad():
        layer.weight.copy_(params["weight"])
        layer.bias.copy_(params["bias"])
    x = torch.randn(5, 3, requires_grad=True)
    again = torch.nn.functional.mse_loss(torch.tanh(layer(x)), torch.zeros(5, 2))
    capture.forward(_fake_run({"weight": layer.weight, "bias": layer.bias}), SLOT, 1, again)
    fresh = capture.pending[SLOT.phase]
    assert [n.name for n in fresh.nodes] == [n.name for n in failed.nodes]
    saved = [s for n in fresh.nodes for s in n.saved]
    assert saved and not any(s.freed for s in saved)
    assert saved == [s for n in graph_of(again).nodes for s in n.saved]


def test_a_backward_reaching_into_an_earlier_freed_graph_names_the_node_it_raised_in():
    # rnn-tbptt's run keep: the second chunk's graph goes on into the first chunk's, freed by its backward.
    graph = capture_graph(load_builtin("rnn-tbptt"), "keep", 0, 2)
    assert graph.error is not None and "backward through the graph a second time" in graph.error
    assert graph.order and graph.failed is not None and graph.failed not in graph.order
    # The node it raised in lies past what ran: its saved tensors were gone before this backward.
    assert graph.nodes[graph.failed].saved == ()
    ran_saved = [s for i in graph.order for s in graph.nodes[i].saved]
    assert ran_saved and all(s.freed for s in ran_saved)


@pytest.mark.parametrize("record", ["full", "light", "stream"])
def test_a_backward_walked_again_from_the_labs_keyframe_is_the_one_the_run_performed(record):
    from gradviz.engine.graph import replay_graph

    scenario = load_builtin("forgot-zero-grad")
    lab = Lab(scenario, record=record, keyframe_every=4 if record == "light" else None)
    lab.run_iterations(31)  # past the first keyframes: iteration 30 lies after several
    r = 0
    tick = next(
        t
        for t in range(30 * lab.ticks_per_iteration, 31 * lab.ticks_per_iteration)
        if (s := lab.schedule[t % lab.ticks_per_iteration][r]) is not None and s.op == "backward"
    )
    again = replay_graph(lab, "yours", tick)
    fresh = capture_graph(scenario, "yours", 30)
    assert [n.name for n in again.nodes] == [n.name for n in fresh.nodes]
    assert again.edges == fresh.edges and again.order == fresh.order and again.iteration == 30
    # The same weights and batch as the run had there: the same gradients flowed, to the last bit.
    assert again.added.keys() == fresh.added.keys()
    for name, added in fresh.added.items():
        assert np.array_equal(again.added[name], added)


def test_a_backward_that_raised_walked_again_names_the_node_pytorch_raised_in():
    from gradviz.engine.errors import UserError
    from gradviz.engine.graph import replay_graph

    lab = Lab(load_builtin("rnn-tbptt"))
    while not lab.stopped and lab.tick < 3 * lab.ticks_per_iteration:
        lab.step()
    rec = lab.history["keep"].records[len(lab.history["keep"]) - 1]
    assert rec.error and rec.slot.op == "backward"
    again = replay_graph(lab, "keep", rec.tick)
    assert again.error == rec.error and again.failed is not None
    with pytest.raises(UserError, match="no forward or backward"):
        replay_graph(lab, "keep", 0)  # its zero_grad
