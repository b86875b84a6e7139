"""Graphs the window does not keep, walked again by the lab: the one drawn is the captured one, to the bit."""

from __future__ import annotations

from typing import Any

import pytest

from gradviz.engine import load_builtin
from gradviz.engine.graph import VIEW_VALUES, capture_graph
from gradviz.gui.window_history import GRAPHS_KEPT
from tests.engine.test_graph_lazy import assert_same_graph, limited


def backward_at(lab: Any, run: str, tick: int) -> tuple[int, int]:
    """The iteration of ``run``'s backward at ``tick`` and its number within the iteration (from 1)."""
    r = [x.name for x in lab.runs].index(run)
    tpi = lab.ticks_per_iteration
    slot = lab.schedule[tick % tpi][r]
    assert slot is not None and slot.op == "backward"
    ops = lab.runs[r].program.ops
    return tick // tpi, sum(1 for s in ops[: ops.index(slot) + 1] if s.op == "backward")


def expected_graph(scenario: str, lab: Any, run: str, tick: int):
    iteration, number = backward_at(lab, run, tick)
    return limited(capture_graph(load_builtin(scenario), run, iteration, number), VIEW_VALUES)


def test_a_step_back_after_a_full_speed_play_shows_the_graph_that_backward_walked(threaded_window, qtbot):
    from gradviz.gui.views.graph import REBUILDING

    w = threaded_window()
    c = w.controller
    c.open("forgot-zero-grad")
    qtbot.waitUntil(lambda: c.info is not None and not c.busy, timeout=30_000)
    c.set_speed(0)  # full speed: many ops a request, each run's newest graph made once a request
    c.play_until(120)
    qtbot.waitUntil(lambda: not c.playing and not c.busy, timeout=60_000)
    run = "yours"
    rt = c.history.runs[run]
    graph_ops = [i for i in range(len(rt)) if rt.ops[i] in ("forward", "backward")]
    made = [i for i in graph_ops if rt.graphs[i] is not None]
    assert made and len(made) < len(graph_ops) / 2  # not every op's graph was made
    # Back op by op to the first moment whose backward's graph the window does not keep.
    lab = c.worker.lab
    for _ in range(40):
        assert c.prev_op()
        graph, tick = c.moment().graph(run)
        if graph is None and tick >= 0 and rt.ops[rt.index_at(tick)] == "backward":
            break
    else:
        pytest.fail("no backward without a kept graph in 40 ops back")
    w.redraw()
    # The window's draw came back before the lab's thread walked the graph again: it says so.
    assert w.graph.shown.graph is None and w.graph.note.text() == REBUILDING
    qtbot.waitUntil(lambda: w.graph.shown is not None and w.graph.shown.graph is not None, timeout=30_000)
    assert w.graph.shown.tick == tick
    assert_same_graph(w.graph.shown.graph, expected_graph("forgot-zero-grad", lab, run, tick))


def test_the_window_keeps_the_graphs_of_its_last_ops_only(threaded_window, qtbot):
    c = threaded_window().controller
    c.open("forgot-zero-grad")
    qtbot.waitUntil(lambda: c.info is not None and not c.busy, timeout=30_000)
    for _ in range(3 * GRAPHS_KEPT):  # one op at a time: every forward's and backward's graph is made
        assert c.next_op()
        qtbot.waitUntil(lambda: not c.busy, timeout=30_000)
    rt = c.history.runs["yours"]
    kept = [i for i in range(len(rt)) if rt.graphs[i] is not None]
    assert kept and len(rt) - kept[0] <= GRAPHS_KEPT + GRAPHS_KEPT // 8
    graph_ops = [i for i in range(kept[0], len(rt)) if rt.ops[i] in ("forward", "backward")]
    assert all(rt.graphs[i] is not None for i in graph_ops)


@pytest.mark.parametrize(("scenario", "run"), [("forgot-zero-grad", "yours"), ("gan-detach", "no-detach")])
def test_the_view_opened_after_ops_ran_without_it_shows_that_moments_graph(inline_window, scenario, run):
    w = inline_window(scenario, graph=False)
    c = w.controller
    lab = c.worker.lab
    tpi = lab.ticks_per_iteration
    r = [x.name for x in lab.runs].index(run)
    # Past a few iterations, to the moment after the run's last backward of iteration 3.
    backwards = [t for t in range(tpi) if (s := lab.schedule[t][r]) is not None and s.op == "backward"]
    target = 3 * tpi + max(backwards)
    while c.cursor < target:
        assert c.next_op()
    assert all(g is None for g in c.history.runs[run].graphs)
    w.show_panel("graph", True)
    w.graph.set_run(run)
    w.redraw()
    w.graph.skip_animation()
    shown = w.graph.shown
    assert shown.graph is not None and shown.tick == target
    assert_same_graph(shown.graph, expected_graph(scenario, lab, run, target))


def test_an_export_longer_than_the_graphs_kept_draws_every_frame_s_graph(qapp, tmp_path):
    from gradviz.gui.export_frame import FrameStyle
    from gradviz.gui.export_frames import ExportJob, ExportRange
    from gradviz.gui.export_renderer import run_inline

    out = tmp_path / "frames"
    out.mkdir()
    style = FrameStyle((800, 600), ("graph",))
    job = ExportJob("forgot-zero-grad", out, style=style, fps=4, frames=ExportRange(ops=3 * GRAPHS_KEPT))
    renderer = job.renderer
    render = renderer.render
    seen: list[tuple[int, bool, int]] = []

    def noted(*args, **kwargs):
        frame = render(*args, **kwargs)
        view = renderer.frame.shown_views()["graph"]
        seen.append((view.shown.tick, view.shown.graph is not None, view.shown.ran))
        return frame

    renderer.render = noted  # type: ignore[method-assign]
    run_inline(job.work())
    assert seen[0] == (-1, False, 0)  # before the first forward
    assert all(has for _, has, _ in seen[1:])
    # Every backward is lit node by node in the export, the first as the last.
    backwards = sorted({tick for tick, _, ran in seen if 0 < ran < 5})
    assert len(backwards) >= 3 * GRAPHS_KEPT // 4 - 1


def test_the_view_opened_just_after_a_forward_shows_the_graph_it_built(inline_window):
    from gradviz.engine import Lab
    from gradviz.engine.graph import graph_of, run_params

    w = inline_window("forgot-zero-grad", graph=False)
    c = w.controller
    lab = c.worker.lab
    tpi = lab.ticks_per_iteration
    forward = next(t for t in range(tpi) if (s := lab.schedule[t][0]) is not None and s.op == "forward")
    target = 5 * tpi + forward
    while c.cursor < target:
        assert c.next_op()
    w.show_panel("graph", True)
    w.redraw()
    shown = w.graph.shown
    assert shown.graph is not None and shown.tick == target and not shown.graph.order
    # The graph a plain lab's loss has there, walked from its grad_fn.
    plain = Lab(load_builtin("forgot-zero-grad"), record="bare")
    while plain.tick <= target:
        plain.step()
    run = plain.runs[0]
    expected = graph_of(next(iter(run._live_loss.values())), run_params(run))
    assert shown.graph.nodes == expected.nodes and shown.graph.edges == expected.edges
    assert "forward() built this graph" in w.graph.note.text()
