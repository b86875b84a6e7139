"""The autograd graph view against PyTorch: names and edges after a forward, the backward's order,
the addition into .grad, the GAN's cut, the freed graph, and capture only while the view is shown."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from PySide6.QtCore import QRectF
from PySide6.QtWidgets import QApplication, QGraphicsSimpleTextItem

from gradviz.engine import Lab, load_builtin
from gradviz.gui.narration import backward_node_sentence
from gradviz.gui.views.graph import layered
from tests.engine.test_graph import independent_walk


def texts(w) -> list[str]:
    """Every line of text drawn in the graph, a title broken on two lines as one."""
    items = [i for i in w.graph.items.visible() if isinstance(i, QGraphicsSimpleTextItem)]
    lines = [[i.text().replace("\n", " ")] if i.font().bold() else i.text().split("\n") for i in items]
    return [line for text in lines for line in text]


def step(w, ops: int) -> None:
    for _ in range(ops):
        assert w.controller.next_op()
    w.redraw()
    w.graph.skip_animation()  # the whole traversal, as a scrubbed-back moment shows it


def live_loss(scenario: str, run: str, forward: int):
    """The loss of ``run``'s ``forward``-th forward (from 1) in a headless lab: the real tensor."""
    lab = Lab(load_builtin(scenario), record="bare")
    target = lab.run(run)
    seen = 0
    while True:
        lab.step()
        slot = lab.schedule[(lab.tick - 1) % lab.ticks_per_iteration][lab.runs.index(target)]
        if slot is not None and slot.op == "forward":
            seen += 1
            if seen == forward:
                return target, target._live_loss[slot.phase]


def test_after_a_forward_the_view_shows_the_graph_pytorch_built(inline_window):
    w = inline_window("forgot-zero-grad")
    step(w, 2)  # zero_grad, forward
    run, loss = live_loss("forgot-zero-grad", "yours", 1)
    _, names, edges = independent_walk(loss)
    shown = w.graph.shown
    assert [n.name for n in shown.graph.nodes] == names
    assert list(shown.graph.edges) == edges
    drawn = texts(w)
    for name in set(names) - {"AccumulateGrad"}:
        assert name in drawn
    # The leaves by the names the inspector gives the parameters.
    for param in run.names:
        assert f"{param} · AccumulateGrad" in drawn
    assert "backward() has not run yet" in w.graph.note.text()


def test_the_traversal_is_pytorch_s_execution_order(inline_window):
    w = inline_window("two-batch-accumulation")
    step(w, 3)  # zero_grad, forward, backward
    _, loss = live_loss("two-batch-accumulation", "yours", 1)
    nodes, _, _ = independent_walk(loss)
    fired: list[str] = []
    handles = [n.register_hook(lambda *_a, n=n: fired.append(type(n).__name__)) for n in nodes]
    loss.backward()
    for h in handles:
        h.remove()
    graph = w.graph.shown.graph
    numbered = sorted((int(t.split()[0][1:]), t.split()[-1]) for t in texts(w) if t.startswith("#"))
    assert [name for _, name in numbered] == fired == [graph.nodes[i].name for i in graph.order]


def test_accumulate_grad_shows_the_addition_the_ledger_shows(inline_window):
    w = inline_window("two-batch-accumulation")
    step(w, 5)  # zero_grad, forward, backward, forward, backward
    history = w.controller.history
    rt = history.runs["yours"]
    i = rt.index_at(w.controller.cursor)
    before = float(history.record("yours", i - 1).grads["weight"].item())
    after = float(history.record("yours", i).grads["weight"].item())
    added = float(history.record("yours", i).fresh_grads["weight"].item())
    assert (before, added, after) == (-16.0, -4.0, -20.0)
    assert ".grad: -16 + -4 = -20" in texts(w)
    # The sentence at that node: who passed the gradient on, and the addition the ledger shows.
    graph = w.graph.shown.graph
    sentence = backward_node_sentence(graph, len(graph.order), w.graph._ledger(w.graph.shown))
    assert sentence == (
        "backward(), node 7 of 7: TBackward0 passes the gradient to AccumulateGrad(weight): "
        ".grad -16 + -4 = -20."
    )


def test_an_animated_backward_narrates_the_node_it_has_reached(inline_window):
    w = inline_window("two-batch-accumulation")
    for _ in range(3):  # zero_grad, forward, backward: the live end, so the traversal is animated
        assert w.controller.next_op()
    w.redraw()
    assert w.graph.shown.ran == 1
    assert (
        w.narration.text()
        == "backward(), node 1 of 7: DivBackward0 starts the traversal at the loss, with the gradient 1."
    )
    w.graph._advance()
    assert (
        w.narration.text()
        == "backward(), node 2 of 7: DivBackward0 passes the gradient 0.5 to MeanBackward0."
    )
    w.graph.skip_animation()  # the whole traversal: the op's own sentence again
    w.redraw()
    assert w.narration.text().startswith("backward() added -16 to weight.grad")


@pytest.mark.parametrize(("run", "reaches_g"), [("no-detach", True), ("detach", False), ("no-grad", False)])
def test_the_gan_cut_no_generator_leaf_with_detach_or_no_grad(inline_window, run, reaches_g):
    w = inline_window("gan-detach")
    w.graph.set_run(run)
    step(w, 3)  # the discriminator's zero_grad, forward, backward
    graph = w.graph.shown.graph
    generator = set(w.controller.info.run(run).phases["generator"])
    leaves = {n.param for n in graph.nodes if n.kind == "parameter"}
    # A leaf of G by its name, or, drawn one box per layer to fit, a box of G's layers.
    layers = {p.rsplit(".", 1)[0] for p in generator}
    drawn_g = [t for t in texts(w) if t.split(" · ")[0].lstrip("#0123456789 ") in generator | layers]
    assert bool(leaves & generator) == reaches_g
    assert bool(drawn_g) == reaches_g
    if run == "no-grad":
        # Under no_grad the generator's part was never built: fewer nodes than without the cut.
        assert len(graph.nodes) < 20


@pytest.mark.parametrize(
    ("run", "cut"),
    [("no-detach", None), ("detach", "fake.detach()"), ("no-grad", "fake: made under torch.no_grad()")],
)
def test_the_cut_is_drawn_below_the_node_that_took_fake_in(inline_window, run, cut):
    w = inline_window("gan-detach")
    w.graph.set_run(run)
    step(w, 3)
    drawn = texts(w)
    graph = w.graph.shown.graph
    if cut is None:
        assert graph.cuts == () and not any("detach()" in t or "no_grad()" in t for t in drawn)
        return
    assert cut in " ".join(drawn)  # on one line, or two where the graph is drawn compact to fit
    assert ("detach()" if run == "detach" else "torch.no_grad()") in drawn  # the dashed edge's label
    assert graph.nodes[graph.cuts[0].node].name == "AddmmBackward0"


def test_a_second_backward_through_the_freed_graph_shows_pytorchs_error(inline_window):
    w = inline_window("backward-twice")  # run no-retain first
    step(w, 4)  # zero_grad, forward, backward, backward: the second raises
    note = w.graph.note.text()
    assert note.startswith(
        f"backward() raised in {raised_in('backward-twice', 'no-retain')}: the backward() before freed "
        "the tensors"
    )
    assert "PyTorch's error: RuntimeError: Trying to backward through the graph a second time" in note
    drawn = texts(w)
    assert "backward() raised here: saved tensors freed" in drawn
    saved = [t for t in drawn if (t.startswith("() ") or "saved" in t) and "raised" not in t]
    assert saved and all(t.endswith("· freed") for t in saved if "saved" in t)
    assert not any(t.startswith("#") for t in drawn)  # no node ran


def raised_in(scenario: str, run: str) -> str:
    """The class of the node a plain PyTorch loop's second backward() through a freed graph raises in."""
    _, loss = live_loss(scenario, run, 1)
    nodes, _, _ = independent_walk(loss)
    loss.backward()
    started: list[str] = []
    for n in nodes:
        n.register_prehook(lambda grads, n=n: started.append(type(n).__name__))
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()
    return started[-1]


def test_the_view_opened_between_two_backwards_names_the_node_whose_saved_tensors_were_freed(inline_window):
    w = inline_window("backward-twice", graph=False)
    step(w, 3)  # zero_grad, forward, backward: the graph freed while no view captured it
    w.show_panel("graph", True)
    step(w, 1)  # the second backward raises
    name = raised_in("backward-twice", "no-retain")
    assert w.graph.note.text().startswith(f"backward() raised in {name}: the backward() before freed")
    graph = w.graph.shown.graph
    assert graph.nodes[graph.failed].name == name
    assert "backward() raised here: saved tensors freed" in texts(w)
    # Opened only after the run raised: the graph is that backward's, from a replay of the scenario.
    late = inline_window("backward-twice", graph=False)
    step(late, 4)
    late.show_panel("graph", True)
    late.redraw()
    assert late.graph.note.text() == w.graph.note.text()
    assert late.graph.shown.graph.failed == graph.failed


def test_a_graph_opened_after_a_backward_raised_is_walked_again_off_the_gui_thread(threaded_window, qtbot):
    from gradviz.gui.views.graph import FINDING

    w = threaded_window(graph=False)
    w.controller.open("backward-twice")
    qtbot.waitUntil(lambda: w.controller.info is not None and not w.controller.busy, timeout=30_000)
    for _ in range(4):  # zero_grad, forward, backward, backward: the second raises, no graph captured
        assert w.controller.next_op()
        qtbot.waitUntil(lambda: not w.controller.busy, timeout=30_000)
    w.show_panel("graph", True)
    w.redraw()
    # The window's draw came back before the lab's thread walked the graph again: it says so.
    assert w.graph.shown.graph is None and w.graph.note.text() == FINDING
    qtbot.waitUntil(lambda: w.graph.shown.graph is not None, timeout=30_000)
    graph = w.graph.shown.graph
    assert graph.nodes[graph.failed].name == raised_in("backward-twice", "no-retain") == "DivBackward0"
    note = w.graph.note.text()
    assert note.startswith("backward() raised in DivBackward0: the backward() before freed")


def test_after_step_the_graph_is_drawn_freed_and_says_so(inline_window):
    w = inline_window("forgot-zero-grad")
    step(w, 4)  # zero_grad, forward, backward, step
    assert w.graph.shown.freed
    assert w.graph.note.text().startswith("Freed")
    assert any(t.endswith("· freed") for t in texts(w))


def test_capture_only_while_the_view_is_shown(inline_window):
    w = inline_window("forgot-zero-grad", graph=False)
    lab = w.controller.worker.lab
    assert all(r.graph_observer is None for r in lab.runs)
    step(w, 3)
    assert all(g is None for g in w.controller.history.runs["yours"].graphs)
    w.show_panel("graph", True)
    assert all(r.graph_observer is not None for r in lab.runs)
    step(w, 3)  # step, the reference's zero_grad, then the next forward: captured
    assert w.controller.history.runs["yours"].graphs[-1] is not None
    w.show_panel("graph", False)
    assert all(r.graph_observer is None for r in lab.runs)


def test_hiding_the_graph_gives_the_other_columns_back_the_split_the_reader_had(inline_window, qtbot):
    w = inline_window("forgot-zero-grad", graph=False)
    QApplication.processEvents()
    total = sum(w.split.sizes())
    w.split.setSizes([300, total - 300, 0])  # the reader drags the split
    QApplication.processEvents()
    dragged = w.split.sizes()[:2]
    assert abs(dragged[0] - 300) < 5
    w.show_panel("graph", True)
    qtbot.waitUntil(lambda: w.split.sizes()[2] > 0)
    w.show_panel("graph", False)
    qtbot.waitUntil(lambda: w.split.sizes()[2] == 0)
    QApplication.processEvents()
    back = w.split.sizes()[:2]
    assert abs(back[0] - dragged[0]) <= 3 and abs(back[1] - dragged[1]) <= 3


def test_layers_put_every_edge_downwards():
    edges = [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4), (1, 4)]
    corners = layered(5, edges, [40.0] * 5, [20.0] * 5)
    for a, b in edges:
        assert corners[a][1] < corners[b][1]
    assert torch.tensor([c[1] for c in corners]).unique().numel() == 4


@pytest.mark.parametrize(
    ("run", "layers", "tanhs"),
    [("no-detach", {"D.0", "D.2", "G.0", "G.2"}, 3), ("detach", {"D.0", "D.2"}, 2)],
)
def test_one_box_per_layer_holds_each_module_s_nodes(inline_window, run, layers, tanhs):
    w = inline_window("gan-detach")
    w.graph.set_run(run)
    w.graph.grouped.setChecked(True)
    step(w, 3)
    titles = {t.split()[-1] for t in texts(w) if t.split()[-1].count(".") == 1 and t[0] in "#DG"}
    assert titles == layers
    # The activations between layers keep their own boxes (D runs twice: on real and on fake).
    assert sum(t.endswith("TanhBackward0") for t in texts(w)) == tanhs


def test_one_box_per_layer_draws_a_recurrent_layer_as_its_chain_of_time_steps(inline_window):
    from gradviz.gui.views.graph import chunk_title, collapse

    w = inline_window("rnn-tbptt")
    w.graph.grouped.setChecked(True)
    step(w, 3)  # zero_grad, forward, backward
    graph = w.graph.shown.graph
    # One step per tanh a plain walk of the chunk's graph finds: the hidden states it made.
    _, loss = live_loss("rnn-tbptt", "detach", 1)
    steps = sum(type(n).__name__ == "TanhBackward0" for n in independent_walk(loss)[0])
    boxes, _, members = collapse(graph, len(graph.order))
    names = [n.name for n in boxes.nodes]
    assert sorted(n for n in names if n.startswith("rnn step")) == sorted(
        f"rnn step {k}" for k in range(1, steps + 1)
    )
    # Each step's box takes in the hidden state of the step before it, as the chain runs.
    step_id = {n.name: n.id for n in boxes.nodes}
    for k in range(2, steps + 1):
        assert (step_id[f"rnn step {k}"], step_id[f"rnn step {k - 1}"]) in boxes.edges
    # The weights every step shares are one box of leaves; the boxes never make a loop.
    shared = next(n for n in boxes.nodes if n.name == "rnn parameters")
    assert {graph.nodes[i].param for i in members[shared.id]} == {"rnn.weight_hh_l0", "rnn.bias_hh_l0"}
    corners = layered(len(boxes.nodes), boxes.edges, [40.0] * len(names), [20.0] * len(names))
    assert all(corners[a][1] < corners[b][1] for a, b in boxes.edges)
    # The window's column draws the steps as their chunk, in one box, at a larger type than step by step.
    assert any(t.endswith(chunk_title(1, steps)) for t in texts(w))
    # Halfway through the backward, the sentence names the node PyTorch ran and the box it is drawn in.
    w.graph.show_part((1, 2))
    w.graph.draw(w.controller.moment())
    node = graph.nodes[graph.order[w.graph.shown.ran - 1]]
    chunks, _, inside = collapse(graph, len(graph.order), chains=True)
    box = next(b.name for b in chunks.nodes if node.id in inside[b.id] and len(inside[b.id]) > 1)
    assert w.graph.part_sentence().endswith(f" to {node.name} (in {box}).")


def test_a_shown_graph_panel_is_remembered_between_launches(tmp_path) -> None:
    from PySide6.QtCore import QSettings

    from gradviz.gui.settings import read_list

    store = QSettings(str(tmp_path / "gradviz.ini"), QSettings.Format.IniFormat)
    store.setValue("panels", ["code", "graph", "no-such-view"])
    assert read_list(store, "panels", ()) == ("code", "graph")


def test_an_export_lights_a_backward_node_by_node_in_pytorchs_order(qapp, tmp_path):
    from gradviz.gui.export_frame import FrameStyle
    from gradviz.gui.export_frames import ExportJob, ExportRange
    from gradviz.gui.export_renderer import run_inline

    out = tmp_path / "frames"
    out.mkdir()
    style = FrameStyle((1280, 720), ("graph", "code"))
    job = ExportJob("backward-twice", out, style=style, fps=4, frames=ExportRange(ops=4))
    renderer = job.renderer
    render = renderer.render
    seen: list[tuple[int, int, str]] = []

    def noted(*args, **kwargs):
        frame = render(*args, **kwargs)
        view = renderer.frame.shown_views()["graph"]
        seen.append((view.shown.tick, view.shown.ran, view.note.text()))
        captions.append(renderer.frame.caption.text())
        return frame

    captions: list[str] = []

    renderer.render = noted  # type: ignore[method-assign]
    run_inline(job.work())
    # zero_grad (no graph yet: -1), forward, the first backward node by node (7 nodes), the second
    # backward (it raises).
    assert [(tick, ran) for tick, ran, _ in seen] == [(-1, 0), (1, 0), *((2, k) for k in range(1, 8)), (3, 0)]
    assert len(list(out.glob("*.png"))) == len(seen) == job.total
    _, loss = live_loss("backward-twice", "no-retain", 1)
    nodes, _, _ = independent_walk(loss)
    fired: list[str] = []
    for n in nodes:
        n.register_hook(lambda *_a, n=n: fired.append(type(n).__name__))
    loss.backward()
    # Each frame names the node that ran last, in the order the hooks of a plain backward fire.
    named = [note.split(", ")[-1].rstrip(".") for tick, ran, note in seen if tick == 2 and ran < 7]
    assert named == fired[:6]
    # Each frame's caption says what happens at that node: the node before it passes the gradient on.
    within = [(ran, caption) for (tick, ran, _), caption in zip(seen, captions, strict=True) if tick == 2]
    for ran, caption in within[:-1]:
        assert caption.startswith(f"no-retain: backward(), node {ran} of 7: ")
        if ran > 1:
            assert f"{fired[ran - 2]} passes the gradient" in caption and caption.endswith(
                f" to {fired[ran - 1]}."
            )
    assert within[-1][1] == captions[seen.index((2, 7, seen[-2][2]))]
    assert "node" not in within[-1][1]  # the whole traversal: the op's own sentence
    assert seen[-1][2].startswith("backward() raised in ")


def test_an_export_frame_of_the_graph_shows_no_controls(qapp, tmp_path):
    from PySide6.QtWidgets import QCheckBox, QComboBox

    from gradviz.gui.export_frame import FrameStyle
    from gradviz.gui.export_frames import ExportJob, ExportRange
    from gradviz.gui.export_renderer import run_inline

    out = tmp_path / "frames"
    out.mkdir()
    style = FrameStyle((1280, 720), ("graph",))
    job = ExportJob("gan-detach", out, style=style, fps=4, frames=ExportRange(ops=3))
    renderer = job.renderer
    render = renderer.render
    seen: list[tuple[bool, list[str], str]] = []

    def looked_at(*args, **kwargs):
        out = render(*args, **kwargs)
        frame = renderer.frame
        view = frame.shown_views()["graph"]
        controls = frame.findChildren(QCheckBox) + frame.findChildren(QComboBox)
        drew = view.shown is not None and view.shown.graph is not None
        seen.append(
            (
                drew,
                [w.objectName() or type(w).__name__ for w in controls if w.isVisibleTo(frame)],
                view.title.text(),
            )
        )
        return out

    renderer.render = looked_at  # type: ignore[method-assign]
    run_inline(job.work())
    assert seen and seen[-1][0]  # the frames drew the graph
    for _, controls, title in seen:
        assert controls == []
        assert title == "Autograd graph of no-detach"  # three runs, no picker: the title names the one drawn


def _fitted_view(graph, size: tuple[int, int]):
    from gradviz.gui.views.graph import GraphView, Shown

    view = GraphView()
    view.resize(*size)
    view.show()
    QApplication.processEvents()
    view.shown = Shown(graph, 0, len(graph.order), False, "")
    view._render()
    return view


def test_a_wide_graph_is_fitted_whole_into_the_view_at_a_readable_type_size(qapp):
    from gradviz.engine.graph import capture_graph
    from gradviz.gui.views.graph import MIN_POINTS, SMALL_TYPE, TOO_LARGE

    graph = capture_graph(load_builtin("gan-detach"), "no-detach")  # D's loss reaching G: 26 nodes
    view = _fitted_view(graph, (1280, 720))
    scale = view.canvas.transform().m11()
    assert view.fitted and view.points * SMALL_TYPE * scale >= MIN_POINTS
    # Every box and label lies inside the viewport: nothing to scroll to, sideways or down.
    drawn = QRectF()
    for item in view.items.visible():
        drawn = drawn.united(item.sceneBoundingRect())
    shown = view.canvas.mapFromScene(drawn).boundingRect()
    assert view.canvas.viewport().rect().contains(shown)
    assert len([t for t in texts(SimpleNamespace(graph=view)) if "AccumulateGrad" in t]) == 8
    # Too small for it even one box per layer: drawn at the least readable size, and said.
    small = _fitted_view(graph, (500, 300))
    assert not small.fitted and small.note.text().endswith(TOO_LARGE)
    assert small.points * SMALL_TYPE * small.canvas.transform().m11() == pytest.approx(MIN_POINTS)


def test_a_graph_too_large_node_by_node_is_drawn_one_box_per_layer_and_says_so(qapp):
    from gradviz.engine.graph import capture_graph
    from gradviz.gui.views.graph import GROUPED_TO_FIT

    graph = capture_graph(load_builtin("rnn-tbptt"))  # 47 nodes, a chain of 8 time steps
    view = _fitted_view(graph, (900, 1100))
    assert view.fitted and view.note.text().endswith(GROUPED_TO_FIT)
    assert not view.grouped.isChecked()  # the reader's choice stays as it was
    drawn = texts(SimpleNamespace(graph=view))
    assert any(t.endswith("rnn step 8") for t in drawn) and not any(t[-13:] == "TanhBackward0" for t in drawn)


def test_the_window_s_default_layout_shows_a_chain_s_graph_whole_and_readable(inline_window, qtbot):
    from gradviz.gui.views.graph import MIN_POINTS, SMALL_TYPE

    w = inline_window("two-batch-accumulation")
    assert w.width() == 1280 and w.height() == 720
    for ops in (2, 1, 2):  # after the forward, after its backward, after the second backward
        step(w, ops)
        QApplication.processEvents()
        view = w.graph
        assert view.isVisible() and view.fitted and not view.boxed
        # No scroll bar has anywhere to go: the whole chain, loss to leaf, is in view.
        assert view.canvas.horizontalScrollBar().maximum() == 0
        assert view.canvas.verticalScrollBar().maximum() == 0
        assert view.points * SMALL_TYPE * view.canvas.transform().m11() >= MIN_POINTS
        assert any(t.endswith("weight · AccumulateGrad") for t in texts(w))


@pytest.mark.parametrize(("scenario", "ops"), [("gan-detach", 3), ("gan-detach", 4), ("rnn-tbptt", 3)])
def test_the_window_s_graph_column_holds_a_gan_s_and_an_rnn_s_graph_whole(inline_window, scenario, ops):
    from gradviz.gui.views.graph import MIN_POINTS, SMALL_TYPE, chunk_title, collapse

    w = inline_window(scenario)
    step(w, ops)  # after the backward (and after the step)
    QApplication.processEvents()
    view = w.graph
    assert view.fitted and view.boxed
    assert view.canvas.horizontalScrollBar().maximum() == 0
    assert view.canvas.verticalScrollBar().maximum() == 0
    assert view.points * SMALL_TYPE * view.canvas.transform().m11() >= MIN_POINTS - 1e-9
    drawn = texts(w)
    if scenario == "rnn-tbptt":
        # The chunk in one box that says its length: the tanh of each step a plain walk finds.
        _, loss = live_loss("rnn-tbptt", "detach", 1)
        steps = sum(type(n).__name__ == "TanhBackward0" for n in independent_walk(loss)[0])
        assert any(t.endswith(chunk_title(1, steps)) for t in drawn)
        # And how many of the chunk's nodes the backward walked: every one of the captured graph's.
        chunks, _, inside = collapse(view.shown.graph, len(view.shown.graph.order), chains=True)
        chunk = next(n.id for n in chunks.nodes if n.name == chunk_title(1, steps))
        assert f"{len(inside[chunk])} nodes walked" in " ".join(drawn)
    else:
        # Every generator layer's box is drawn, its leaves named.
        assert {t.split()[-1] for t in drawn if t.split()[-1] in ("G.0", "G.2", "D.0", "D.2")} == {
            "G.0",
            "G.2",
            "D.0",
            "D.2",
        }
