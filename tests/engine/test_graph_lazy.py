"""A capture that makes its graphs only when asked: the graphs, to the bit, of one that makes each at once."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gradviz.engine import Lab, load_builtin
from gradviz.engine.graph import Graph, GraphCapture, capture_graph, replay_graph


def assert_same_graph(got: Graph, expected: Graph) -> None:
    """Every node, edge, step of the order, error and cut alike, and every gradient copied bit for bit."""
    assert got.nodes == expected.nodes
    assert (got.edges, got.order, got.root) == (expected.edges, expected.order, expected.root)
    assert (got.phase, got.iteration, got.micro) == (expected.phase, expected.iteration, expected.micro)
    assert (got.error, got.failed, got.cuts) == (expected.error, expected.failed, expected.cuts)
    assert got.received.keys() == expected.received.keys()
    for i, grads in expected.received.items():
        assert len(got.received[i]) == len(grads)
        for a, b in zip(got.received[i], grads, strict=True):
            assert _same(a, b), i
    assert len(got.sent) == len(expected.sent)
    for k, (a, b) in enumerate(zip(got.sent, expected.sent, strict=True)):
        assert _same(a, b), k


def _same(a: Any, b: Any) -> bool:
    if isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


def _backward_number(lab: Lab, run: int, slot: Any) -> int:
    ops = lab.runs[run].program.ops
    return sum(1 for s in ops[: ops.index(slot) + 1] if s.op == "backward")


@pytest.mark.parametrize(
    "scenario", ["set-to-none", "manual-sgd", "grad-accumulation", "gan-detach", "backward-twice"]
)
def test_a_graph_made_ops_after_its_backward_is_the_one_made_at_once(scenario):
    # zero_grad(set_to_none=False), steps and further forwards run between the backward and the
    # making of its graph (as in a frame's batch of ops at full-speed Play): none of it shows.
    sc = load_builtin(scenario)
    lab = Lab(sc)
    for run in lab.runs:
        run.graph_observer = GraphCapture(values=16, lazy=True)
    tpi = lab.ticks_per_iteration
    made = 0
    end = sc.iterations * tpi
    for batch in (1, 3, 7, 2, 5, 11):
        for _ in range(batch):
            if not lab.stopped and lab.tick < end:
                lab.step()
        for r, run in enumerate(lab.runs):
            got = run.graph_observer.newest()  # type: ignore[union-attr]
            if got is None:
                continue
            iteration, slot, graph = got
            if slot.op == "backward":
                expected = capture_graph(sc, run.name, iteration, _backward_number(lab, r, slot))
                # The view's capture copies values of up to 16 elements; the reference copies all.
                assert_same_graph(graph, limited(expected, 16))
                made += 1
            assert run.graph_observer.newest() is None  # type: ignore[union-attr]  # made once
    assert made >= 3


def limited(graph: Graph, values: int) -> Graph:
    """``graph`` as a capture copying values of up to ``values`` elements would keep it."""
    from dataclasses import replace

    from gradviz.engine.graph import Uncopied

    sent = tuple(
        Uncopied(s.shape) if isinstance(s, np.ndarray) and s.size > values else s for s in graph.sent
    )
    return replace(graph, sent=sent)


@pytest.mark.parametrize("scenario", ["forgot-zero-grad", "gan-detach", "rnn-tbptt"])
def test_a_forward_walked_again_is_the_graph_it_built_before_its_backward(scenario):
    sc = load_builtin(scenario)
    lab = Lab(sc)
    built: dict[tuple[str, int], Graph] = {}
    for run in lab.runs:
        run.graph_observer = GraphCapture()
    tpi = lab.ticks_per_iteration
    while not lab.stopped and lab.tick < 3 * tpi:
        lab.step()
        for r, run in enumerate(lab.runs):
            slot = lab.schedule[(lab.tick - 1) % tpi][r]
            if slot is not None and slot.op == "forward" and run.active:
                built[(run.name, lab.tick - 1)] = run.graph_observer.pending[slot.phase]  # type: ignore[union-attr]
    assert built
    for (name, tick), graph in built.items():
        again = replay_graph(lab, name, tick)
        assert again == graph and not again.order


def _hooks_on(node: Any) -> int:
    """How many post hooks ``node`` carries (counted in the hooks' own dict, through a handle of ours)."""
    probe = node.register_hook(lambda *_: None)
    count = len(probe.hooks_dict_ref()) - 1
    probe.remove()
    return count


def _leaf(loss: Any, param: Any) -> Any:
    """The AccumulateGrad node of ``param`` in ``loss``'s graph, found by a walk of grad_fn."""
    from tests.engine.test_graph import independent_walk

    nodes, _, _ = independent_walk(loss)
    (leaf,) = [n for n in nodes if getattr(n, "variable", None) is param]
    return leaf


def test_a_parameters_leaf_keeps_one_hook_from_forward_to_forward_and_loses_it_with_the_capture():
    lab = Lab(load_builtin("forgot-zero-grad"), record="bare")
    run = lab.runs[0]
    capture = run.graph_observer = GraphCapture(lazy=True)
    weight = run.tensors[0]
    tpi = lab.ticks_per_iteration
    leaves, added = [], []
    while len(added) < 3:
        lab.step()
        slot = lab.schedule[(lab.tick - 1) % tpi][0]
        if slot is not None and slot.op == "forward":
            leaves.append(_leaf(run._live_loss[slot.phase], weight))
        elif slot is not None and slot.op == "backward":
            got = capture.newest()
            assert got is not None and got[1] is slot
            added.append(got[2].added["weight"])
    # The same node in every forward's graph (the capture holds it), with the capture's one hook on it.
    assert len(leaves) == 3 and leaves[0] is leaves[1] is leaves[2]
    assert _hooks_on(leaves[0]) == 1
    # The hook put on once fired in each backward: what the weight's leaf received is in each graph.
    assert all(a is not None and a.shape == tuple(weight.shape) for a in added)
    run.graph_observer = None
    capture.close()
    assert _hooks_on(leaves[0]) == 0
    # Let go of: once nothing holds it, the next forward's leaf is a new node, with no hook.
    del leaves
    lab.run_iterations(1)
    lab.step()
    lab.step()
    losses = list(run._live_loss.values())
    assert losses and _hooks_on(_leaf(losses[0], weight)) == 0
