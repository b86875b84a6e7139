"""Layout and drawing of autograd graphs: gradviz's layered layout against grandalf and Graphviz's
``dot``, and the graph view's layout + draw of a 200-node graph against a bare scene of 200 boxes.

Each figure is the median of several runs in this process. grandalf is measured when it can be
imported (``pip install grandalf``), ``dot`` when the program is installed.

Run: ``QT_QPA_PLATFORM=offscreen python bench/bench_graph_layout.py [--repeats N]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from types import SimpleNamespace

import torch

from gradviz.engine.graph import VIEW_VALUES, Graph, GraphCapture, capture_graph
from gradviz.engine.loop import OpSlot
from gradviz.engine.scenario import builtin_names, load_builtin

SIZE = (1280, 720)
TARGET_MS = 30.0


def deep_mlp_graph(layers: int = 40) -> Graph:
    """The captured backward of a real ``layers``-deep tanh MLP: five nodes a layer, 200 for 40."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(m for _ in range(layers) for m in (torch.nn.Linear(4, 4), torch.nn.Tanh())))
    loss = model(torch.randn(8, 4)).pow(2).mean()
    params = dict(model.named_parameters())
    run = SimpleNamespace(
        names=tuple(params),
        tensors=list(params.values()),
        loop=SimpleNamespace(backwards=1),
        task=SimpleNamespace(cuts=()),
    )
    capture = GraphCapture(values=VIEW_VALUES)
    slot = OpSlot("main", "backward", 0, 1, 1, 1)
    capture.forward(run, slot, 0, loss)  # type: ignore[arg-type]
    with capture.backward(run, slot, 0, loss):  # type: ignore[arg-type]
        loss.backward()
    return capture.graphs[0]


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def ours(graph: Graph) -> None:
    from gradviz.gui.views.graph import layered

    layered(len(graph.nodes), graph.edges, [120.0] * len(graph.nodes), [40.0] * len(graph.nodes))


def grandalf_layout(graph: Graph) -> None:
    from grandalf.graphs import Edge, Vertex
    from grandalf.graphs import Graph as GGraph
    from grandalf.layouts import SugiyamaLayout

    vs = [Vertex(n.id) for n in graph.nodes]
    for v in vs:
        v.view = SimpleNamespace(w=120.0, h=40.0)
    g = GGraph(vs, [Edge(vs[a], vs[b]) for a, b in graph.edges])
    for component in g.C:
        layout = SugiyamaLayout(component)
        layout.init_all()
        layout.draw()


def dot_layout(graph: Graph) -> None:
    subprocess.run(["dot", "-Tplain"], input=graph.to_dot().encode(), capture_output=True, check=True)


def view_draw(graph: Graph) -> Callable[[], object]:
    """The graph view's layout and draw of ``graph`` (traversal done, every edge labelled), painted
    as the window paints it: each way of drawing it laid out and measured (node by node, one box per
    layer, each compact), the one that fits at the largest type drawn, or, where none fits at the
    least readable type, the largest at that type, scrolled to the last node run (a 200-node chain
    lays out every way)."""
    from PySide6.QtGui import QImage

    from gradviz.gui.views.graph import GraphView, Shown

    view = GraphView()
    view.resize(*SIZE)
    image = QImage(*SIZE, QImage.Format.Format_RGB32)

    def draw() -> None:
        view.shown = Shown(graph, 0, len(graph.order), False, "")
        view._render()
        view.render(image)

    draw.view = view  # type: ignore[attr-defined]  # kept alive with the function
    return draw


def bare_scene(count: int) -> Callable[[], object]:
    """The peer: a QGraphicsScene of ``count`` labelled boxes and ``count`` lines, built and painted."""
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtWidgets import QGraphicsScene

    scene = QGraphicsScene()
    image = QImage(*SIZE, QImage.Format.Format_RGB32)

    def draw() -> None:
        scene.clear()
        for i in range(count):
            x, y = (i % 20) * 130.0, (i // 20) * 60.0
            scene.addRect(QRectF(x, y, 120, 40))
            scene.addSimpleText(f"AddmmBackward0 {i}").setPos(x + 4, y + 4)
            scene.addLine(x + 60, y + 40, x + 60, y + 60)
        painter = QPainter(image)
        scene.render(painter)
        painter.end()

    return draw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="runs of each figure (default 15)")
    args = parser.parse_args()
    try:
        import grandalf  # noqa: F401

        has_grandalf = True
    except ImportError:
        has_grandalf = False
    has_dot = shutil.which("dot") is not None
    graphs = {name: capture_graph(load_builtin(name)) for name in builtin_names()}
    graphs["mlp 200 nodes"] = deep_mlp_graph()
    print(f"layout alone, median of {args.repeats}, ms")
    print(f"{'graph':<26} {'nodes':>5} {'gradviz':>8} {'grandalf':>9} {'dot':>7}")
    for name, graph in graphs.items():
        r = min(args.repeats, 5) if len(graph.nodes) > 50 else args.repeats
        o = median_ms(lambda g=graph: ours(g), args.repeats)
        ga = f"{median_ms(lambda g=graph: grandalf_layout(g), r):>9.2f}" if has_grandalf else f"{'-':>9}"
        d = f"{median_ms(lambda g=graph: dot_layout(g), r):>7.1f}" if has_dot else f"{'-':>7}"
        print(f"{name:<26} {len(graph.nodes):>5} {o:>8.2f} {ga} {d}")

    from gradviz.gui.display import application

    application(offscreen=True)
    big = graphs["mlp 200 nodes"]
    ours_ms = median_ms(view_draw(big), args.repeats)
    peer_ms = median_ms(bare_scene(len(big.nodes)), args.repeats)
    verdict = "within" if ours_ms <= TARGET_MS else "OVER"
    print(
        f"graph view, {len(big.nodes)} nodes at {SIZE[0]}x{SIZE[1]}: layout + draw {ours_ms:.1f} ms; "
        f"a bare scene of {len(big.nodes)} boxes {peer_ms:.1f} ms ({ours_ms / peer_ms:.2f}x); "
        f"{verdict} the target of {TARGET_MS:.0f} ms"
    )


if __name__ == "__main__":
    main()
