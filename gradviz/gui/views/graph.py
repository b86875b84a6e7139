"""The autograd graph view: what the forward built, what ``backward()`` walks, in PyTorch's own order.

The graph drawn is the one a run's :class:`~gradviz.engine.graph.GraphCapture`
recorded from the real objects: node class names as PyTorch made them, edges
from each node to its ``next_functions``, the loss on top and the parameters'
``AccumulateGrad`` leaves at the bottom. At a backward the nodes light up in
the order their hooks fired, each edge labelled with the gradient it carried,
and each parameter leaf shows the addition into ``.grad`` (the inspector's
ledger). Once the graph is freed it is drawn faded and says so.

Layout is a small layered one of our own (:func:`layered`): depth from the
loss by longest path, order in each layer by the mean position of the parents.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEvent, QObject, QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QGraphicsPathItem,
    QGraphicsRectItem,
    QGraphicsScene,
    QGraphicsSimpleTextItem,
    QGraphicsView,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from gradviz.gui.narration import addition_text, backward_node_sentence, grad_text
from gradviz.gui.theme import BASE_POINT_SIZE, LIGHT, Theme, run_color

if TYPE_CHECKING:
    from gradviz.engine.graph import Graph, SavedTensor
    from gradviz.gui.window_history import LabInfo, Moment

# Node fills by kind (Okabe-Ito hues, light tints so black text stays readable); each kind also
# has its own border, so the kind never rests on colour alone.
KIND_FILL = {"loss": "#F5C98F", "operation": "#E6E6E6", "parameter": "#FFFFFF", "input": "#F7F1A1"}
KIND_BORDER = {
    "loss": Qt.PenStyle.SolidLine,
    "operation": Qt.PenStyle.SolidLine,
    "parameter": Qt.PenStyle.SolidLine,
    "input": Qt.PenStyle.DashLine,
}
RAN_COLOR = "#CC79A7"  # the backward's colour in the timeline and code
RAISED_COLOR = "#D55E00"  # the node a backward raised in (Okabe-Ito vermillion), said in words too
CUT_FILL = "#CFE8F7"  # a tensor cut off its graph (a tint of Okabe-Ito sky blue), drawn dash-dotted
ANIMATION_MS = 900  # one backward's traversal on Play and after a step, whatever its length
GAP_X, GAP_Y = 14.0, 26.0
PAD = 6.0  # inside a box, around its text
# A graph drawn compact to fit: closer layers and boxes (an edge label still fits a gap).
COMPACT_GAP_X, COMPACT_GAP_Y, COMPACT_PAD = 8.0, 18.0, 4.0
MAX_SCALE = 1.6  # past this the boxes look coarse rather than clearer
SMALL_TYPE = 0.85  # details and edge labels, against the title's type size
MIN_POINTS = 7.0  # the least type size (after scaling) the details are drawn at
GROUPED_TO_FIT = "One box per layer, to fit."
CHAINED_TO_FIT = "One box per chunk of time steps, to fit."
TOO_LARGE = "Too large to read whole here: scroll for the rest."
COMPACT_NODES = 60
# A graph the window does not keep (a backward that raised while the view was closed, a moment
# scrubbed back to, ops run before the view opened) is walked again on the lab's thread meanwhile.
FINDING = "Finding where backward() raised…"
REBUILDING = "Walking the graph again…"
MEMO_LIMIT = 4000  # text widths and layouts a view remembers


def layered(
    count: int,
    edges: Sequence[tuple[int, int]],
    widths: Sequence[float],
    heights: Sequence[float],
    gap_y: float = GAP_Y,
    gap_x: float = GAP_X,
) -> list[tuple[float, float]]:
    """Top-left corners of ``count`` boxes of ``widths`` and ``heights``, node 0 on top.

    Each node's layer is its longest distance from node 0 (so every edge points
    down); within a layer nodes keep their walk order, then are sorted twice by
    the mean position of their parents, which uncrosses most edges of the trees
    that autograd graphs mostly are. Layers lie ``gap_y`` apart, boxes in one ``gap_x``.
    """
    parents: list[list[int]] = [[] for _ in range(count)]
    children: list[list[int]] = [[] for _ in range(count)]
    for a, b in edges:
        if a != b:
            parents[b].append(a)
            children[a].append(b)
    pending = [len(set(p)) for p in parents]
    depth = [0] * count
    ready = [i for i in range(count) if pending[i] == 0]
    seen = set()
    while ready:
        i = ready.pop()
        seen.add(i)
        for j in set(children[i]):
            depth[j] = max(depth[j], depth[i] + 1)
            pending[j] -= 1
            if pending[j] == 0:
                ready.append(j)
    layers: list[list[int]] = [[] for _ in range(max(depth, default=0) + 1)]
    for i in range(count):
        layers[depth[i]].append(i)
    place = {i: float(k) for layer in layers for k, i in enumerate(layer)}
    for _ in range(2):
        for layer in layers[1:]:
            layer.sort(key=lambda i: sum(place[p] for p in parents[i]) / max(len(parents[i]), 1))
            for k, i in enumerate(layer):
                place[i] = float(k)
    rows = [sum(widths[i] for i in layer) + gap_x * (len(layer) - 1) for layer in layers]
    widest = max(rows, default=0.0)
    out = [(0.0, 0.0)] * count
    y = 0.0
    for d, layer in enumerate(layers):
        x = (widest - rows[d]) / 2
        for i in layer:
            out[i] = (x, y)
            x += widths[i] + gap_x
        y += max((heights[i] for i in layer), default=0.0) + gap_y
    return out


def _halves(line: str, limit: float, width: Callable[[str], float]) -> list[str]:
    """``line`` as it is, or, wider than ``limit``, in two at its colon (``made by X:`` / ``the graph
    stops here``)."""
    head, colon, tail = line.partition(": ")
    return [f"{head}:", tail] if colon and width(line) > limit else [line]


def broken_title(title: str, limit: float, width: Callable[[str], float]) -> str:
    """``title`` on two lines where it is wider than ``limit``: split where its halves are the most
    even, between two words of a class name (``BinaryCrossEntropy`` / ``WithLogitsBackward0``)
    or after a parameter's name."""
    if width(title) <= limit:
        return title
    cuts = [k for k in range(1, len(title)) if title[k].isupper() and title[k - 1].isalnum()]
    cuts += [k + 1 for k in range(len(title)) if title[k] == " " and k + 1 < len(title)]
    if not cuts:
        return title
    best = min(cuts, key=lambda k: max(width(title[:k].rstrip()), width(title[k:])))
    return f"{title[:best].rstrip()}\n{title[best:]}"


def acyclic(count: int, edges: Sequence[tuple[int, int]]) -> bool:
    """Whether ``edges`` between ``count`` nodes make no loop (every edge can point down)."""
    pending = [0] * count
    children: list[list[int]] = [[] for _ in range(count)]
    for a, b in set(edges):
        if a != b:
            pending[b] += 1
            children[a].append(b)
    ready = [i for i in range(count) if pending[i] == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        for j in children[i]:
            pending[j] -= 1
            if pending[j] == 0:
                ready.append(j)
    return done == count


def module_groups(graph: Graph) -> dict[int, str]:
    """Node id -> the module it belongs to, for the nodes of each parameterised layer.

    A parameter's leaf belongs to its module (``D.0`` of ``D.0.weight``); so does an
    operation all of whose next functions are leaves of one module (``TBackward0`` of a
    weight), and then an operation with a next function among those (``AddmmBackward0``
    beside its bias and transposed weight) unless another module claims it too. An
    activation between layers stays apart, so the chain of layers keeps its shape.

    A module used again and again along a chain (a recurrent layer, once per time step) is
    grouped by its uses instead (:func:`_time_steps`): one box would be its own input.
    """
    group: dict[int, str] = {}
    for node in graph.nodes:
        if node.param is not None and "." in node.param:
            group[node.id] = node.param.rsplit(".", 1)[0]
    children: dict[int, list[int]] = {}
    for a, b in graph.edges:
        children.setdefault(a, []).append(b)
    leaves = dict(group)
    for node in graph.nodes:  # a weight's transpose: every next function a leaf of one module
        kids = children.get(node.id, [])
        owners = {leaves.get(k) for k in kids}
        if kids and len(owners) == 1 and None not in owners:
            group[node.id] = owners.pop()  # type: ignore[assignment]
    anchors = dict(group)
    uses: dict[str, list[int]] = {}
    for node in graph.nodes:  # the layer's own operation, beside its bias and transposed weight
        claims = {anchors[k] for k in children.get(node.id, []) if k in anchors}
        if node.id not in group and node.id != 0 and len(claims) == 1:
            group[node.id] = claims.pop()
            uses.setdefault(group[node.id], []).append(node.id)
    for module, ids in uses.items():
        if len(ids) > 1:
            _time_steps(graph, module, ids, group, children)
    return group


def _time_steps(
    graph: Graph, module: str, uses: list[int], group: dict[int, str], children: dict[int, list[int]]
) -> None:
    """Regroup a ``module`` whose ``uses`` feed one another (a recurrent layer's, each taking the
    hidden state the one before made) into one box per time step, ``rnn step 1`` the earliest.

    A step holds its use of the module, the operations between it and the next step's use (the
    addition and activation that make the step's hidden state) and its own transposes; the
    parameters all steps share form one box of their own. A use outside the chain (the input's
    projection, made for every step at once) keeps the module's name.
    """
    members = {i for i, g in group.items() if g == module}
    parents: dict[int, list[int]] = {}
    for a, b in graph.edges:
        parents.setdefault(b, []).append(a)
    # Below each use, outside the module: the uses it reaches first, and the length of the way there.
    reached: dict[int, dict[int, int]] = {}
    for use in uses:
        found: dict[int, int] = {}
        seen = set()
        frontier = [k for k in children.get(use, []) if k not in members]
        hops = 1
        while frontier:
            below = []
            for node in frontier:
                if node in seen:
                    continue
                seen.add(node)
                for k in children.get(node, []):
                    if k in members:
                        if k in uses and k != use:
                            found.setdefault(k, hops)
                    else:
                        below.append(k)
            frontier = below
            hops += 1
        reached[use] = found
    if not any(reached.values()):
        return
    # The steps of the chain feed one another the same short way (through the step's addition and
    # activation); a use reached only further on (the input's projection) is no step.
    between = min(h for found in reached.values() for h in found.values())
    anyway = reached
    reached = {u: {v: h for v, h in found.items() if h == between} for u, found in reached.items()}
    chain = {u for u, found in reached.items() if found} | {v for found in reached.values() for v in found}
    # A step's number: one more than the steps it reaches back into, the short way or further on (a
    # chunk's first step reaches the chunk before it through the hidden state handed over).
    below_of: dict[int, set[int]] = {}

    def earlier(use: int) -> set[int]:
        if use not in below_of:
            below_of[use] = set()
            for v in anyway[use]:
                if v in chain:
                    below_of[use] |= {v, *earlier(v)}
        return below_of[use]

    for use in chain:
        key = f"{module} step {len(earlier(use)) + 1}"
        group[use] = key
        node = use
        for _ in range(between):  # up to the step's hidden state: one consumer each
            ups = [p for p in parents.get(node, []) if p not in members]
            if len(ups) != 1 or ups[0] == 0 or ups[0] in group:
                break
            node = ups[0]
            group[node] = key
    shared = f"{module} parameters"
    for i in sorted(members - chain, key=lambda i: graph.nodes[i].param is not None):
        if group[i] != module or i in uses:
            continue
        owners = {group.get(p) for p in parents.get(i, [])}
        group[i] = owners.pop() if len(owners) == 1 and None not in owners else shared  # type: ignore[assignment]
    if not any(group[u] == module for u in uses):  # every use a step: nothing keeps the bare name
        for i, g in group.items():
            if g == module:
                group[i] = shared


def chunk_title(chunk: int, steps: int, module: str | None = None) -> str:
    """The title of a box holding one chunk's time steps of a recurrent layer: ``chunk 2 · 8 time steps``."""
    return f"{module + ' ' if module else ''}chunk {chunk} · {steps} time step{'s' if steps != 1 else ''}"


def is_chunk(title: str) -> bool:
    """Whether ``title`` is a :func:`chunk_title`."""
    head, _, tail = title.partition(" · ")
    return head.split(" ")[-2:-1] == ["chunk"] and tail.endswith(("time steps", "time step"))


def time_chunks(graph: Graph, group: dict[int, str]) -> dict[int, str]:
    """``group`` (from :func:`module_groups`) with a recurrent layer's time steps in one box per chunk.

    A chunk is a run of steps that feed one another directly, each taking the hidden state the one
    before made; a chunk that reaches another through the hidden state handed over (not detached)
    lies above it. A chunk's box also holds what its steps reach before another chunk's or a leaf
    (the hand-over of the hidden state, its input's projection); the layer's parameters share one
    box. Chunks are numbered from the earliest; the latest is the one the graph's forward made (its
    micro-batch), so a graph cut from the chunks before keeps their numbers.
    """
    steps: dict[int, tuple[str, int]] = {}
    for i, key in group.items():
        module, _, number = key.rpartition(" step ")
        if module and number.isdigit():
            steps[i] = (module, int(number))
    if not steps:
        return group
    # Chunks: the steps joined by edges from one step's box straight into another's.
    root = {step: step for step in steps.values()}

    def find(step: tuple[str, int]) -> tuple[str, int]:
        while root[step] != step:
            root[step] = root[root[step]]
            step = root[step]
        return step

    for a, b in graph.edges:
        if a in steps and b in steps and steps[a][0] == steps[b][0]:
            root[find(steps[a])] = find(steps[b])
    chunks: dict[tuple[str, int], list[int]] = {}
    for step in sorted(set(steps.values())):
        chunks.setdefault(find(step), []).append(step[1])
    children: dict[int, list[int]] = {}
    for a, b in graph.edges:
        children.setdefault(a, []).append(b)
    out = dict(group)
    modules = sorted({m for m, _ in chunks})
    for module in modules:
        own = sorted((numbers for (m, _), numbers in chunks.items() if m == module), key=min)
        offset = max(0, graph.micro + 1 - len(own))
        named = None if len(modules) == 1 else module
        for k, numbers in enumerate(own, 1):
            title = chunk_title(k + offset, len(numbers), named)
            inside = [i for i, (m, n) in steps.items() if m == module and n in numbers]
            for i in inside:
                out[i] = title
            # Earliest chunk first: what two chunks reach goes to the lower one, so no box feeds one above.
            frontier = inside
            while frontier:
                below = []
                for i in frontier:
                    for j in children.get(i, []):
                        if (
                            j in steps
                            or out.get(j, module) != module
                            or graph.nodes[j].name == "AccumulateGrad"
                        ):
                            continue
                        out[j] = title
                        below.append(j)
                frontier = below
        # Above a chunk, what only gathers its steps' outputs (the layer's output, stacked) is in it too.
        for node in reversed(graph.nodes):
            kids = {out.get(j) for j in children.get(node.id, [])}
            if node.id and node.id not in out and len(kids) == 1 and is_chunk(str(next(iter(kids)))):
                out[node.id] = str(kids.pop())
        for node in graph.nodes:
            if node.param is not None and node.param.startswith(f"{module}."):
                out[node.id] = f"{module} parameters"
    return out


def collapse(graph: Graph, ran: int, chains: bool = False) -> tuple[Graph, int, dict[int, tuple[int, ...]]]:
    """``graph`` with each module's nodes in one box (with ``chains``, a recurrent layer's time steps
    too, one box per chunk: :func:`time_chunks`); the boxes lit after ``ran`` nodes ran; and the
    original nodes in each box."""
    from gradviz.engine.graph import Graph as GraphType
    from gradviz.engine.graph import Node

    group = module_groups(graph)
    if chains:
        group = time_chunks(graph, group)
    new: dict[int, int] = {}
    members: dict[int, list[int]] = {}
    boxes: dict[str, int] = {}
    for node in graph.nodes:
        key = group.get(node.id)
        if key is None:
            new[node.id] = len(members)
            members[new[node.id]] = [node.id]
            continue
        if key not in boxes:
            boxes[key] = len(members)
            members[boxes[key]] = []
        new[node.id] = boxes[key]
        members[boxes[key]].append(node.id)
    nodes = []
    for i, ids in members.items():
        first = graph.nodes[ids[0]]
        if len(ids) == 1 and group.get(ids[0]) is None:
            nodes.append(first._replace(id=i))
            continue
        saved = tuple(s for j in ids for s in graph.nodes[j].saved)
        leafy = any(graph.nodes[j].param is not None for j in ids)
        nodes.append(Node(i, group[ids[0]], "parameter" if leafy else "operation", None, None, saved))
    edges: list[tuple[int, int]] = []
    sent = []
    for (a, b), grad in zip(graph.edges, graph.sent or (None,) * len(graph.edges), strict=True):
        edge = (new[a], new[b])
        if edge[0] != edge[1] and edge not in edges:
            edges.append(edge)
            sent.append(grad)
    order = list(dict.fromkeys(new[i] for i in graph.order))
    lit = len(dict.fromkeys(new[i] for i in graph.order[:ran]))
    cuts = tuple(c._replace(node=None if c.node is None else new[c.node]) for c in graph.cuts)
    failed = None if graph.failed is None else new[graph.failed]
    out = GraphType(
        tuple(nodes), tuple(edges), tuple(order), graph.root, {}, tuple(sent),
        error=graph.error, failed=failed, cuts=cuts,
    )  # fmt: skip
    return out, lit, {i: tuple(ids) for i, ids in members.items()}


@dataclass(frozen=True)
class Shown:
    """What the view draws at a moment: a graph, how much of its backward has run, and why."""

    graph: Graph | None
    tick: int
    ran: int  # how many nodes of ``graph.order`` are lit
    freed: bool  # the graph is gone (a later op than its backward)
    note: str


@dataclass(frozen=True)
class Pick:
    """One way to draw a graph in the canvas: laid out in these fonts, the scale that fits it whole,
    whether it is drawn one box per layer, and what the note says of it."""

    arranged: Arranged
    bold: QFont
    small: QFont
    fit: float
    boxed: bool
    said: str
    least: float  # the scale of the least readable type
    members: dict[int, tuple[int, ...]] | None = None  # drawn one box per layer: each box's nodes

    @property
    def fitted(self) -> bool:
        """Whether the whole graph is in view at a readable type."""
        return self.fit >= self.least

    @property
    def scale(self) -> float:
        """The view's scale: the whole graph, never blown up past coarse, or the least readable."""
        return min(MAX_SCALE, self.fit) if self.fitted else self.least


class GraphView(QWidget):
    """The autograd graph of one run, synced with the stepper."""

    # Each node of an animated backward: the sentence of what happens there ("" once it has ended).
    stepped = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme: Theme = LIGHT
        self.info: LabInfo | None = None
        self.run_name: str | None = None
        self.points = float(BASE_POINT_SIZE)
        self.shown: Shown | None = None
        self._moment: Moment | None = None
        self._part: tuple[int, int] | None = None
        self.fitted = True  # the whole graph drawn is in view
        self.controls_shown = True  # the run picker and the grouping checkbox (a slide has neither)
        self.boxed = False  # drawn one box per layer
        self._settling = False  # the note's new lines are resizing the canvas
        self._box_of: dict[int, str] = {}  # node id -> the box it is drawn in, drawn one box per layer
        # The graphs of backwards that raised while the view was closed, walked again on request.
        self._replays: dict[tuple[int, str, int], Graph | None] = {}
        self._asked: tuple[int, str, int] | None = None
        self._ask: Callable[[str, int], None] | None = None
        self._animated_tick = -2
        self._step = 0
        self._timer = QTimer(self)
        self._timer.timeout.connect(self._advance)

        self.title = QLabel("Autograd graph")
        self.title.setObjectName("panelTitle")
        self.runs = QComboBox()
        self.runs.setToolTip("Whose graph is drawn")
        # As wide as its longest run name: the panel's least width holds the whole head.
        self.runs.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.runs.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.runs.currentTextChanged.connect(self._on_run)
        self.grouped = QCheckBox("One box per layer")
        self.grouped.setToolTip(
            "Draw each module's nodes (its operation, transposes and parameter leaves) as one box"
        )
        self.grouped.toggled.connect(lambda _=False: self._render())
        self.note = QLabel("")
        self.note.setWordWrap(True)
        self.scene = QGraphicsScene(self)
        # Rebuilt at every draw and never searched: an index would only cost its upkeep.
        self.scene.setItemIndexMethod(QGraphicsScene.ItemIndexMethod.NoIndex)
        self.items = SceneItems(self.scene)
        # Text widths at the type size drawn, and the last layouts: a draw that did not fit the view
        # is drawn again after another was tried, and an animation redraws one graph frame by frame.
        self._memo: dict[Any, Any] = {}
        self.canvas = QGraphicsView(self.scene)
        self.canvas.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.canvas.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        # Fitted to the canvas, not the panel: a note that wraps to another line takes from its height.
        self.canvas.installEventFilter(self)
        head = QHBoxLayout()
        head.setContentsMargins(0, 0, 0, 0)
        head.addWidget(self.title)
        head.addWidget(self.runs)  # reads on from the title: "Autograd graph of [run]"
        head.addStretch(1)
        head.addWidget(self.grouped)
        box = QVBoxLayout(self)
        box.setContentsMargins(4, 4, 4, 4)
        box.setSpacing(3)
        box.addLayout(head)
        box.addWidget(self.note)
        box.addWidget(self.canvas, 1)

    # ------------------------------------------------------------ settings
    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.canvas.setBackgroundBrush(QBrush(QColor(theme.base)))
        self._render()

    def set_point_size(self, points: float) -> None:
        self.points = points
        self._memo.clear()
        self._render()

    def set_lab(self, info: LabInfo) -> None:
        """A new lab: its runs in the picker, the first one drawn; nothing until its first forward."""
        self.info = info
        self._timer.stop()
        self._animated_tick = -2
        self.runs.blockSignals(True)
        self.runs.clear()
        self.runs.addItems([r.name for r in info.runs])
        self.runs.blockSignals(False)
        self.runs.setVisible(len(info.runs) > 1 and self.controls_shown)
        self.run_name = info.runs[0].name
        self.shown = None
        self._render()

    def show_controls(self, on: bool) -> None:
        """Show or hide the run picker and "One box per layer" (the title names the run drawn)."""
        self.controls_shown = on
        self.grouped.setVisible(on)
        self.runs.setVisible(on and self.info is not None and len(self.info.runs) > 1)

    def set_run(self, name: str) -> None:
        """Draw ``name``'s graph."""
        self.runs.setCurrentText(name)
        self._on_run(name)

    def _on_run(self, name: str) -> None:
        if name and name != self.run_name:
            self.run_name = name
            self._animated_tick = -2
            if self._moment is not None:
                self.draw(self._moment)

    # ---------------------------------------------------------------- draw
    def draw(self, moment: Moment) -> None:
        """Draw the graph of the run's newest forward or backward at ``moment``.

        A backward that has just been performed (the moment is the live end) is
        animated node by node while the view is on screen; anywhere else (an
        export frame, a moment scrubbed back to) the traversal is drawn whole.
        """
        self._moment = moment
        run = self.run_name
        if self.info is None or run is None:
            return
        graph, tick = moment.graph(run)
        if graph is None and tick >= 0:
            # The window keeps no graph of that op: the lab walks it again.
            if self.wants_graph(moment):
                raised = moment.record(run)
                failed = raised is not None and raised.error and raised.tick == tick
                self.shown = Shown(None, moment.tick, 0, False, FINDING if failed else REBUILDING)
                self._render()
                return
            graph = self._replays.get((id(self.info), run, tick))
        ran = 0
        freed = False
        if graph is not None:
            ran = len(graph.order)
            freed = tick < moment.tick and bool(graph.order)
            fresh = tick == moment.tick == moment.history.last_tick and not moment.hide_future
            if graph.order and fresh and self.isVisible() and tick != self._animated_tick:
                self._animated_tick = tick
                self._step = 1
                self._timer.start(max(25, ANIMATION_MS // len(graph.order)))
            if self._timer.isActive() and tick == self._animated_tick:
                ran = self._step
            elif self._timer.isActive():
                self._timer.stop()
            if self._part is not None and tick == moment.tick and graph.order:
                done, parts = self._part
                ran = min(len(graph.order), max(1, -(-len(graph.order) * done // parts)))
        self.shown = Shown(graph, tick, ran, freed, self._sentence(moment, graph, tick, ran, freed))
        self._render()

    def on_replay_request(self, ask: Callable[[str, int], None]) -> None:
        """Call ``ask(run, tick)`` for the graph of a forward or backward the window does not keep
        (captured while the view was closed, or no longer kept); the answer comes back through
        :meth:`set_replayed`. Without it such a graph is not drawn."""
        self._ask = ask

    def wants_graph(self, moment: Moment) -> bool:
        """Whether the graph ``moment`` shows is still on its way from the lab: asked for (once) where
        the window keeps none and none was walked again yet (an export waits for it)."""
        run = self.run_name
        if self.info is None or run is None or self._ask is None:
            return False
        graph, tick = moment.graph(run)
        key = (id(self.info), run, tick)
        if graph is not None or tick < 0 or key in self._replays:
            return False
        if self._asked != key:
            self._asked = key
            self._moment = moment  # what an answer given at once redraws
            self._ask(run, tick)
        return key not in self._replays

    def set_replayed(self, run: str, tick: int, graph: Graph | None) -> None:
        """The graph of ``run``'s forward or backward at ``tick``, walked again (None: it could not be)."""
        if self.info is None:
            return
        key = (id(self.info), run, tick)
        if self._asked == key:
            self._asked = None
        self._replays = {key: graph}
        if self._moment is not None:
            self.draw(self._moment)

    def backward_length(self, moment: Moment) -> int:
        """How many nodes ran in the drawn run's backward at ``moment``'s own tick (0: no backward there)."""
        if self.run_name is None:
            return 0
        graph, tick = moment.graph(self.run_name)
        if graph is None:
            graph = self._replays.get((id(self.info), self.run_name, tick))
        return len(graph.order) if graph is not None and tick == moment.tick else 0

    def show_part(self, part: tuple[int, int] | None) -> None:
        """Draw a backward at the moment's tick as ``part = (k, n)``: its first ``k``/``n`` of the nodes
        run, in order (an export's frames within one backward); ``None`` draws all of it."""
        self._part = part

    def skip_animation(self) -> None:
        """Show the running backward's whole traversal at once."""
        if self._timer.isActive():
            self._timer.stop()
            if self._moment is not None:
                self.draw(self._moment)
            self.stepped.emit("")

    def _advance(self) -> None:
        self._step += 1
        shown = self.shown
        if shown is None or shown.graph is None or self._step >= len(shown.graph.order):
            self._timer.stop()
            self._step = len(shown.graph.order) if shown is not None and shown.graph is not None else 0
        if self._moment is not None:
            self.draw(self._moment)
        self.stepped.emit(self.part_sentence() or "")

    def part_sentence(self) -> str | None:
        """What happens at the node a backward drawn in part (animated, or an export's frame within
        it) has reached, from the captured order and the ledger; None where no backward is in part."""
        shown = self.shown
        if shown is None or shown.graph is None or shown.freed or shown.graph.error is not None:
            return None
        if not 0 < shown.ran < len(shown.graph.order):
            return None
        sentence = backward_node_sentence(shown.graph, shown.ran, self._ledger(shown))
        box = self._box_of.get(shown.graph.order[shown.ran - 1])
        if box is not None:
            # The node is inside a box: say which, as the box is what the reader sees light up.
            sentence = f"{sentence[:-1]} (in {box})."
        several = self.info is not None and len(self.info.runs) > 1
        return f"{self.run_name}: {sentence}" if several else sentence

    def _sentence(self, moment: Moment, graph: Graph | None, tick: int, ran: int, freed: bool) -> str:
        if graph is None:
            if moment.tick < 0:
                return "The first forward builds the graph that backward() will walk."
            return "No graph captured here: the next forward builds one."
        n = len(graph.nodes)
        if not graph.nodes:
            return "The loss has no grad_fn: no graph was built, backward() has nothing to walk."
        if graph.error is not None:
            error = f"PyTorch's error: {first_sentence(graph.error)}"
            if graph.failed is not None:
                # PyTorch raises there because that node's saved tensors are gone, whether or not
                # this view was open when the backward before freed them.
                name = graph.nodes[graph.failed].name
                return (
                    f"backward() raised in {name}: the backward() before freed the tensors {name} "
                    f"saved for backward. {error}"
                )
            saved = [s for node in graph.nodes for s in node.saved]
            gone = saved and all(s.freed for s in saved)
            return f"backward() raised {error}" + (
                " The backward() before freed this graph's saved tensors." if gone else ""
            )
        if not graph.order:
            leaves = sum(1 for node in graph.nodes if node.kind == "parameter")
            return (
                f"forward() built this graph: {n} nodes, {leaves} parameter "
                f"{'leaf' if leaves == 1 else 'leaves'}. "
                "backward() has not run yet."
            )
        if freed:
            return (
                "Freed: backward() released this graph's saved tensors and the loss is gone; "
                "the next forward builds a new graph."
            )
        if ran < len(graph.order):
            node = graph.nodes[graph.order[ran - 1]]
            return f"backward(): node {ran} of {len(graph.order)} ran, {node.name}."
        saved = [s for node in graph.nodes for s in node.saved]
        if saved and not any(s.freed for s in saved):  # retain_graph=True
            return f"backward() walked all {len(graph.order)} nodes in this order and kept what they saved."
        return f"backward() walked all {len(graph.order)} nodes in this order; what they saved is freed."

    # -------------------------------------------------------------- render
    def _font(self, bold: bool = False, scale: float = 1.0) -> QFont:
        font = QFont(self.font())
        font.setPointSizeF(self.points * scale)
        font.setBold(bold)
        return font

    @property
    def type_points(self) -> float:
        """The size, in points, of the smallest type drawn (a box's details) as the view shows it."""
        return self.points * SMALL_TYPE * self.canvas.transform().m11()

    def _render(self) -> None:
        self.items.begin()
        self._focus: QPointF | None = None
        shown = self.shown
        several = self.info is not None and len(self.info.runs) > 1
        # The picker names the run where it is shown; a slide without it names the run in the title.
        picked = several and self.controls_shown
        named = f"Autograd graph of {self.run_name}" if several else "Autograd graph"
        self.title.setText("Autograd graph of" if picked else named)
        if shown is None or shown.graph is None or not shown.graph.nodes:
            self._set_note(shown.note if shown is not None else "")
            self.items.end()
            return
        # The note says how the graph is drawn, and its lines take from the canvas's height: the
        # drawing is chosen again for the height left until the note keeps its lines.
        for _ in range(3):
            viewport = self.canvas.maximumViewportSize()
            pick = self._pick(shown, viewport.width(), viewport.height())
            said = [shown.note, pick.said, "" if pick.fitted else TOO_LARGE]
            if not self._set_note(" ".join(t for t in said if t)):
                break
        self.fitted, self.boxed = pick.fitted, pick.boxed
        arranged = pick.arranged
        boxes = arranged.shown.graph
        assert boxes is not None
        self._box_of = {
            j: boxes.nodes[i].name for i, ids in (pick.members or {}).items() if len(ids) > 1 for j in ids
        }
        count = len(arranged.boxes)
        # Smooth curves cost a large graph a third of its paint; its many edges read as well without.
        self.canvas.setRenderHint(QPainter.RenderHint.Antialiasing, count <= COMPACT_NODES)
        self.items.begin()
        focus = self._focus = paint_graph(
            self.items, arranged, self.theme, pick.bold, pick.small, self._leaf_color()
        )
        self.items.end()
        rect = self.scene.sceneRect()
        # The whole graph in view at the type chosen; one too large at the least readable type even
        # drawn its most compact way is drawn at that type and kept on the node that ran last.
        scale = pick.scale
        self.canvas.resetTransform()
        self.canvas.scale(scale, scale)
        if self.fitted:
            self.canvas.centerOn(rect.center())
        elif focus.y() < 0:
            # Nothing running: the top, where the loss is, in view.
            half = self.canvas.viewport().height() / (2 * scale)
            self.canvas.centerOn(QPointF(focus.x(), focus.y() + half))
        else:
            self.canvas.centerOn(focus)

    def _set_note(self, text: str) -> bool:
        """Show ``text`` as the note; whether the canvas's size changed with its lines."""
        if self.note.text() == text:
            return False
        before = self.canvas.size()
        self.note.setText(text)
        layout = self.layout()
        if layout is not None and self.isVisible():
            self._settling = True  # the canvas resized here is drawn by the caller
            try:
                layout.activate()
            finally:
                self._settling = False
        return self.canvas.size() != before

    def _pick(self, shown: Shown, width: int, height: int) -> Pick:
        """How to draw ``shown`` in a canvas ``width`` by ``height``: the most detailed drawing that
        fits at the view's own type, else the one that fits at the largest type, measured from each
        drawing laid out; where none fits at :data:`MIN_POINTS`, the largest at that type.

        The drawings, most detailed first: as the reader chose, one box per layer, each compact
        (titles in the details' type, closer rows, long titles on two lines; a box's details on
        fewer, longer lines first, then as they were), last a recurrent layer's time steps in one
        box per chunk."""
        assert shown.graph is not None
        detail = self.points * SMALL_TYPE
        least = MIN_POINTS / detail  # the scale at which details stay readable
        grouped = self.grouped.isChecked()
        tries: list[tuple[bool, bool | None, bool]] = [(grouped, None, False), (True, None, False)]
        tries += [(b, fewer, False) for b in (grouped, True) for fewer in (True, False)]
        tries += [(True, fewer, True) for fewer in (True, False)]
        chained = any(" step " in k for k in module_groups(shown.graph).values())
        collapsed: dict[bool, tuple[Graph, int, dict[int, tuple[int, ...]]] | None] = {}
        best: Pick | None = None
        for boxed, fewer, chains in dict.fromkeys(tries):
            if chains and not chained:
                break  # no recurrent layer's chain to draw by chunks
            if boxed and chains not in collapsed:
                made = collapse(shown.graph, shown.ran, chains)
                # A loop of boxes (the graph reaching into one it cannot be cut from) has no drawing
                # that points every edge down: node by node it is drawn.
                collapsed[chains] = made if acyclic(len(made[0].nodes), made[0].edges) else None
            group = collapsed.get(chains) if boxed else None
            if boxed and group is None:
                continue
            room = None if fewer is None else float(width)  # compact, titles broken to fit at scale 1
            for _ in range(2 if fewer is not None else 1):
                pick = self._arranged(shown, group, room, bool(fewer), width, height)
                if pick.fit >= 1 or room is None:
                    break
                room = width / max(pick.fit, least)  # titles broken to fit the room at the scale reached
            said = CHAINED_TO_FIT if chains else GROUPED_TO_FIT if boxed and not grouped else ""
            pick = Pick(pick.arranged, pick.bold, pick.small, pick.fit, boxed, said, least, pick.members)
            if pick.fit >= 1:
                return pick
            if best is None or pick.fit > best.fit:
                best = pick
        assert best is not None  # the graph as chosen node by node is always drawn
        return best

    def _arranged(
        self,
        shown: Shown,
        group: tuple[Graph, int, dict[int, tuple[int, ...]]] | None,
        room: float | None,
        fewer: bool,
        width: int,
        height: int,
    ) -> Pick:
        """``shown`` laid out node by node, or as the boxes of ``group`` (from :func:`collapse`);
        compact within ``room`` if given, a box's details on fewer lines if ``fewer``."""
        assert shown.graph is not None
        drawn, members, dim = shown, None, frozenset[int]()
        if group is not None:
            graph, ran, members = group
            drawn = Shown(graph, shown.tick, ran, shown.freed, shown.note)
            dim = frozenset(
                i for i, ids in members.items()
                if is_chunk(graph.nodes[i].name) and _freed_before(shown.graph, ids)
            )  # fmt: skip
        bold = self._font(True, 1.0 if room is None else SMALL_TYPE)
        small = self._font(False, SMALL_TYPE)
        texts = self._texts(drawn, shown, members, one_line=fewer)
        arranged = arrange_graph(drawn, texts, bold, small, self._memo, room, dim)
        w, h = arranged.size
        return Pick(arranged, bold, small, min(width / w, height / h), group is not None, "", 0.0, members)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.canvas and event.type() == QEvent.Type.Resize and not self._settling:
            self._render()
        return super().eventFilter(watched, event)

    def _leaf_color(self) -> str:
        if self.info is None or self.run_name is None:
            return run_color(0)
        return run_color(self.info.run_index(self.run_name))

    def _texts(
        self,
        shown: Shown,
        full: Shown | None = None,
        members: dict[int, tuple[int, ...]] | None = None,
        one_line: bool = False,
    ) -> tuple[list[list[str]], list[str]]:
        """Lines of each node's box and the label of each edge, at what has run so far.

        For a collapsed graph, ``full`` is the whole one and ``members`` the nodes in each box;
        ``one_line`` puts a box's operations and leaves on one line.
        """
        graph = shown.graph
        assert graph is not None
        lit = {i: k + 1 for k, i in enumerate(graph.order[: shown.ran])}
        ledger = self._ledger(full or shown) if shown.ran else {}
        # A large graph keeps to names and the additions into .grad: details would only crowd it.
        compact = len(graph.nodes) > COMPACT_NODES
        boxes = []
        for node in graph.nodes:
            lines = [node.name if node.param is None else f"{node.param} · {node.name}"]
            detail = [] if node.shape is None or compact else ["(" + ", ".join(map(str, node.shape)) + ")"]
            if node.saved and not compact:
                total = sum(s.bytes for s in node.saved)
                # Freed as it ran, or by an earlier backward where this one raised.
                gone = node.saved[0].freed and (node.id in lit or shown.freed or graph.error is not None)
                detail.append(f"saved {fmt_bytes(total)}" + (" · freed" if gone else ""))
            lines.append("  ".join(detail))
            inside = members.get(node.id, ()) if members is not None and full is not None else ()
            if is_chunk(node.name) and full is not None and full.graph is not None:
                lines[1:] = self._chunk_lines(full, inside, node.saved, node.id in lit, one_line)
            elif len(inside) > 1 and full is not None and full.graph is not None:
                names = [full.graph.nodes[j].name for j in inside]
                kinds = dict.fromkeys(n for n in names if n != "AccumulateGrad")
                leaves = [full.graph.nodes[j].param for j in inside if full.graph.nodes[j].param]
                lines[1] = " · ".join(f"{names.count(k)}× {k}" if names.count(k) > 1 else k for k in kinds)
                if leaves and not (node.id in lit and all(p in ledger for p in leaves)):
                    # Once the backward ran, each leaf is named by its addition into .grad.
                    short = [str(p).rsplit(".", 1)[-1] for p in leaves]
                    # Two names a line: a layer's weight and bias together, a recurrent layer's four on two.
                    named = [", ".join(short[k : k + 2]) for k in range(0, len(short), 2)]
                    named[0] = f"leaves: {named[0]}"
                    if one_line:
                        lines[1] = " · ".join(t for t in (lines[1], named[0]) if t)
                        lines += named[1:]
                    else:
                        lines += named
            if node.id == graph.failed:
                lines.append("backward() raised here: saved tensors freed")
            if node.id in lit:
                lines[0] = f"#{lit[node.id]} {lines[0]}"
                if node.param is not None and node.param in ledger:
                    lines.append(ledger[node.param])
                added = []
                for j in inside:
                    param = full.graph.nodes[j].param if full is not None and full.graph is not None else None
                    if param is not None and param in ledger:
                        added.append(f"{param.rsplit('.', 1)[-1]} {ledger[param]}")
                # On fewer lines, two additions a line.
                lines += (
                    [" · ".join(added[k : k + 2]) for k in range(0, len(added), 2)] if one_line else added
                )
            boxes.append(lines)
        labels = []
        for (a, _b), grad in zip(graph.edges, graph.sent, strict=False):
            labels.append(grad_text(grad) if a in lit and not compact else "")
        return boxes, labels

    @staticmethod
    def _chunk_lines(
        full: Shown, inside: Sequence[int], saved: Sequence[SavedTensor], lit: bool, one_line: bool
    ) -> list[str]:
        """A chunk's box below its title: how many of its nodes the backward walked, what they saved
        and whether it is freed (each read from the captured graph ``full``)."""
        graph = full.graph
        assert graph is not None
        ran = set(graph.order[: full.ran])
        walked = sum(1 for j in inside if j in ran)
        count = len(inside)
        if not full.ran:
            lines = [f"{count} nodes"]
        else:
            lines = [f"{count} nodes walked" if walked == count else f"{walked} of {count} nodes walked"]
        total = sum(s.bytes for s in saved)
        if total:
            gone = saved[0].freed and (lit or full.freed or graph.error is not None)
            lines.append(f"saved {fmt_bytes(total)}" + (" · freed" if gone else ""))
        elif graph.failed not in inside and _freed_before(graph, inside):
            lines.append("freed by an earlier backward()")
        return [" · ".join(lines)] if one_line else lines

    def _ledger(self, shown: Shown) -> dict[str, str]:
        """``before + added = after`` for each parameter leaf, from the records around the backward."""
        moment, graph = self._moment, shown.graph
        if moment is None or graph is None or self.run_name is None:
            return {}
        rt = moment.history.runs[self.run_name]
        i = rt.index_at(shown.tick)
        after = moment.history.record(self.run_name, i)
        before = moment.history.record(self.run_name, i - 1) if i > 0 else moment.info.initial[self.run_name]
        out = {}
        for name, added in graph.added.items():
            if added is None:
                continue
            old = before.grads.get(name) if before is not None else None
            new = after.grads.get(name) if after is not None else None
            out[name] = addition_text(old, added, new)
        return out


def _freed_before(graph: Graph, inside: Sequence[int]) -> bool:
    """Whether the nodes ``inside`` held nothing for backward when the graph was walked, where nodes
    of their classes elsewhere in it did: PyTorch raised at each read, as an earlier backward freed them."""
    saving = {n.name for n in graph.nodes if n.saved}
    nodes = [graph.nodes[j] for j in inside]
    return not any(n.saved for n in nodes) and any(n.name in saving for n in nodes)


def first_sentence(text: str, limit: int = 200) -> str:
    """The first sentence of an error message (PyTorch's go on with advice), on one line."""
    from gradviz.engine.errors import one_line

    line = one_line(text, limit)
    end = line.find(". ")
    return line if end < 0 else line[: end + 1]


def fmt_bytes(n: int) -> str:
    return f"{n:,} B" if n < 10_000 else f"{n / 1024:,.0f} KiB"


class SceneItems:
    """A scene's boxes, texts and paths, made once and moved draw after draw.

    Making a large graph's items anew took most of its draw; here a draw
    (:meth:`begin` to :meth:`end`) reuses the items of the last and hides those it
    did not need.
    """

    def __init__(self, scene: QGraphicsScene) -> None:
        self.scene = scene
        self._texts: list[QGraphicsSimpleTextItem] = []
        self._rects: list[QGraphicsRectItem] = []
        self._paths: list[QGraphicsPathItem] = []
        self._used = [0, 0, 0]

    def begin(self) -> None:
        """Start a draw: every item is free to be used again."""
        self._used = [0, 0, 0]

    def end(self) -> None:
        """Hide the items this draw did not use."""
        pools: tuple[list[Any], ...] = (self._texts, self._rects, self._paths)
        for kind, pool in enumerate(pools):
            for item in pool[self._used[kind] :]:
                item.hide()

    def visible(self) -> list[Any]:
        """The items this draw shows."""
        return [i for pool in (self._texts, self._rects, self._paths) for i in pool if i.isVisible()]

    def text(self, text: str, font: QFont, brush: QBrush, x: float, y: float, z: float) -> None:
        item = self._take(self._texts, 0, QGraphicsSimpleTextItem)
        item.setText(text)
        item.setFont(font)
        item.setBrush(brush)
        item.setPos(x, y)
        item.setZValue(z)

    def rect(self, rect: QRectF, pen: QPen, brush: QBrush, z: float) -> None:
        item = self._take(self._rects, 1, QGraphicsRectItem)
        item.setRect(rect)
        item.setPen(pen)
        item.setBrush(brush)
        item.setZValue(z)

    def path(self, path: QPainterPath, pen: QPen) -> None:
        item = self._take(self._paths, 2, QGraphicsPathItem)
        item.setPath(path)
        item.setPen(pen)

    def _take(self, pool: list[Any], kind: int, make: type) -> Any:
        k = self._used[kind]
        self._used[kind] = k + 1
        if k < len(pool):
            pool[k].show()
            return pool[k]
        item = make()
        self.scene.addItem(item)
        pool.append(item)
        return item


@dataclass(frozen=True)
class Arranged:
    """A graph laid out, not yet drawn: each box's lines, size and top-left corner (the nodes', then
    a box per cut), the cuts' edges, and the spacing it was laid out with."""

    shown: Shown
    boxes: list[list[str]]
    labels: list[str]
    widths: list[float]
    heights: list[float]
    corners: list[tuple[float, float]]
    cut_edges: list[tuple[int, int]]
    pad: float
    gap_y: float
    advance: Callable[[str, bool], float]  # a text's width, as a title (True) or a detail
    # Boxes drawn freed (a chunk an earlier backward freed), whatever the graph's own state.
    dim: frozenset[int] = frozenset()
    # Edge index -> the x of the lane it goes down, right of the boxes it would otherwise run behind.
    lanes: dict[int, float] = field(default_factory=dict)

    @property
    def size(self) -> tuple[float, float]:
        """The scene's width and height, a margin around the boxes."""
        right = max((x + w for (x, _), w in zip(self.corners, self.widths, strict=True)), default=0.0)
        right = max([right, *(x + 4 for x in self.lanes.values())])
        bottom = max((y + h for (_, y), h in zip(self.corners, self.heights, strict=True)), default=0.0)
        return right + 16, bottom + 16


def arrange_graph(
    shown: Shown,
    texts: tuple[list[list[str]], list[str]],
    bold: QFont,
    small: QFont,
    memo: dict[Any, Any] | None = None,
    compact: float | None = None,
    dim: frozenset[int] = frozenset(),
) -> Arranged:
    """Lay out the boxes of ``shown`` with the lines ``texts``, titles in ``bold`` and details in
    ``small``. ``memo`` keeps the widths of texts in these fonts and the layouts made from draw to
    draw. ``compact`` (the room's width) puts rows and boxes closer and a title wider than half of it
    on two lines."""
    from PySide6.QtGui import QFontMetricsF

    from gradviz.engine.graph import cut_lines

    graph = shown.graph
    assert graph is not None
    boxes, labels = texts
    big, little = QFontMetricsF(bold), QFontMetricsF(small)
    pad = PAD if compact is None else COMPACT_PAD
    gap_x, gap_y = (GAP_X, GAP_Y) if compact is None else (COMPACT_GAP_X, COMPACT_GAP_Y)
    # Graphs repeat their texts (class names, shapes), frame after frame: each is measured once.
    if memo is None:
        memo = {}
    elif len(memo) > MEMO_LIMIT:  # edge labels differ from backward to backward: keep it bounded
        memo.clear()
    sizes = {True: bold.pointSizeF(), False: -small.pointSizeF()}  # a title's and a detail's type

    def advance(t: str, title: bool) -> float:
        key = (sizes[title], t)
        w = memo.get(key)
        if w is None:
            w = memo[key] = (big if title else little).horizontalAdvance(t)
        return w

    # Each cut a node took in: a box of its own below that node, where the graph stops.
    cuts = [c for c in graph.cuts if c.node is not None]
    boxes = [*boxes, *(cut_lines(c) for c in cuts)]
    count = len(graph.nodes)
    cut_edges = [(c.node or 0, count + k) for k, c in enumerate(cuts)]
    if compact is not None:  # a title wider than half the room goes on two lines, so does a cut's
        half = compact / 2 - gap_x - 2 * pad
        boxes = [[broken_title(lines[0], half, lambda t: advance(t, True)), *lines[1:]] for lines in boxes]
        for lines in boxes[count:]:
            lines[1:] = [part for t in lines[1:] for part in _halves(t, half, lambda t: advance(t, False))]
    widths = [
        max([advance(t, True) for t in lines[0].split("\n")] + [advance(t, False) for t in lines[1:]])
        + 2 * pad
        for lines in boxes
    ]
    heights = [
        big.height() * (lines[0].count("\n") + 1)
        + max(len([t for t in lines[1:] if t]), 1) * little.height()
        + 2 * pad
        for lines in boxes
    ]
    arranged = ("layout", (*graph.edges, *cut_edges), tuple(widths), tuple(heights), gap_x, gap_y)
    corners = memo.get(arranged)
    if corners is None:
        layouts = [k for k in memo if k[0] == "layout"]
        for old in layouts[: max(0, len(layouts) - 3)]:
            del memo[old]
        corners = memo[arranged] = layered(len(boxes), arranged[1], widths, heights, gap_y, gap_x)
    lanes = _detours(graph.edges, corners, widths, heights, gap_x)
    laid = (widths, heights, corners, cut_edges, pad, gap_y, advance)
    return Arranged(shown, boxes, labels, *laid, dim, lanes)


def _detours(
    edges: Sequence[tuple[int, int]],
    corners: Sequence[tuple[float, float]],
    widths: Sequence[float],
    heights: Sequence[float],
    gap_x: float,
) -> dict[int, float]:
    """For each edge whose straight way down would run behind a box of a row between its ends (a
    layer's parameters, shared by boxes chained above them): the x of a lane right of those boxes."""
    rows: dict[float, list[int]] = {}
    for i, (_, y) in enumerate(corners):
        rows.setdefault(y, []).append(i)
    tops = sorted(rows)
    lanes: dict[int, float] = {}
    taken: dict[float, int] = {}
    for k, (a, b) in enumerate(edges):
        (xa, ya), (xb, yb) = corners[a], corners[b]
        bottom = ya + heights[a]
        between = [y for y in tops if bottom < y < yb]
        if not between:
            continue
        sx, ex = xa + widths[a] / 2, xb + widths[b] / 2
        hit = []
        for y in between:
            x = sx + (ex - sx) * (y - bottom) / (yb - bottom)  # where the straight way crosses the row
            hit += [i for i in rows[y] if corners[i][0] - 2 <= x <= corners[i][0] + widths[i] + 2]
        if hit:
            right = max(corners[i][0] + widths[i] for i in hit) + gap_x
            n = taken[right] = taken.get(right, -1) + 1
            lanes[k] = right + n * gap_x
    return lanes


def paint_graph(
    items: SceneItems, arranged: Arranged, theme: Theme, bold: QFont, small: QFont, leaf_color: str
) -> QPointF:
    """Draw the boxes, edges and labels of ``arranged`` with ``items`` in the fonts it was laid out
    in; the centre of the node that ran last (of the first cut, once the whole traversal is drawn),
    or, where none is running, the top of the scene above the loss."""
    from PySide6.QtGui import QFontMetricsF

    from gradviz.engine.graph import cut_call

    shown, boxes, labels = arranged.shown, arranged.boxes, arranged.labels
    widths, heights, corners, cut_edges = (
        arranged.widths,
        arranged.heights,
        arranged.corners,
        arranged.cut_edges,
    )
    pad, gap_y = arranged.pad, arranged.gap_y
    graph = shown.graph
    assert graph is not None
    big, little = QFontMetricsF(bold), QFontMetricsF(small)
    cuts = [c for c in graph.cuts if c.node is not None]
    count = len(graph.nodes)
    lit = set(graph.order[: shown.ran])
    faded = shown.freed
    text = QBrush(QColor(theme.muted if faded else "#1b1b1b"))
    muted = QBrush(QColor(theme.muted))
    hot = QColor(RAN_COLOR)
    # Edges first, under the boxes, from the bottom of a node to the top of each next function:
    # one path for the edges gradients went along, one for the rest (a few items paint fast).
    paths = {True: QPainterPath(), False: QPainterPath()}
    labelled = []
    for k, (a, b) in enumerate(graph.edges):
        (xa, ya), (xb, yb) = corners[a], corners[b]
        sx, sy, ex, ey = xa + widths[a] / 2, ya + heights[a], xb + widths[b] / 2, yb
        flowed = a in lit and not faded
        path = paths[flowed]
        mid = (sy + ey) / 2
        lane = arranged.lanes.get(k)
        if lane is None:
            path.moveTo(sx, sy)
            path.cubicTo(sx, mid, ex, mid, ex, ey)
        else:  # out of the box's right side, down its lane, into the top of the box it feeds
            sx, sy = xa + widths[a], ya + heights[a] / 2
            ex = min(xb + widths[b] * 0.85, lane - 6)
            path.moveTo(sx, sy)
            path.cubicTo(lane, sy, lane, sy, lane, sy + gap_y)
            path.lineTo(lane, ey - gap_y)
            path.cubicTo(lane, ey - gap_y / 3, ex, ey - gap_y / 2, ex, ey)
        path.moveTo(ex - 4, ey - 7)
        path.lineTo(ex, ey)
        path.lineTo(ex + 4, ey - 7)
        label = labels[k] if k < len(labels) else ""
        if label and flowed:
            # Beside the arrow's head: edges leaving one node fan out, so their heads stand apart.
            labelled.append((label, ex, ey - gap_y * 0.45))
    items.path(paths[False], QPen(QColor(theme.muted), 1.2))
    items.path(paths[True], QPen(hot, 2.4))
    cut_path = QPainterPath()
    for k, (c, b) in enumerate(cut_edges):
        (xa, ya), (xb, yb) = corners[c], corners[b]
        sx, sy, ex, ey = xa + widths[c] / 2, ya + heights[c], xb + widths[b] / 2, yb
        cut_path.moveTo(sx, sy)
        cut_path.lineTo(ex, ey)
        labelled.append((cut_call(cuts[k]), (sx + ex) / 2, (sy + ey) / 2))
    items.path(cut_path, QPen(QColor(theme.text), 1.6, Qt.PenStyle.DashLine))
    back = QBrush(QColor(theme.base))
    label_brush = QBrush(QColor(theme.text))
    placed: list[QRectF] = [QRectF(x, y, w, h) for (x, y), w, h in zip(corners, widths, heights, strict=True)]
    for label, cx, cy in labelled:
        w = arranged.advance(label, False)
        h = little.height()
        # Edges meeting at one node bring their labels together: one moves a line up or down, off
        # the boxes and the labels placed, or is left out rather than drawn over another.
        spots = (QRectF(cx - w / 2 - 2, cy - h / 2 + dy, w + 4, h) for dy in (0.0, -h, h))
        rect = next((r for r in spots if not any(r.intersects(p) for p in placed)), None)
        if rect is None:
            continue
        placed.append(rect)
        cy = rect.center().y()
        items.rect(rect, QPen(Qt.PenStyle.NoPen), back, 2)
        items.text(label, small, label_brush, cx - w / 2, cy - h / 2, 3)
    for node, lines, (x, y), w, height in zip(
        graph.nodes, boxes[:count], corners[:count], widths[:count], heights[:count], strict=True
    ):
        fill = QColor(KIND_FILL[node.kind])
        border = QColor(leaf_color if node.kind == "parameter" else "#555555")
        if node.id in lit and not faded:
            border = hot if node.kind != "parameter" else border
        width = 3.0 if node.kind in ("parameter", "loss") or node.id in lit else 1.2
        if node.id == graph.failed:
            border, width = QColor(RAISED_COLOR), 4.0
        gone = faded or node.id in arranged.dim
        if gone:
            fill.setAlpha(110)
            border.setAlpha(140)
        style = Qt.PenStyle.DotLine if node.id in arranged.dim else KIND_BORDER[node.kind]
        pen = QPen(border, width, style)
        items.rect(QRectF(x, y, w, height), pen, QBrush(fill), 4)
        ink = muted if gone else text
        items.text(lines[0], bold, ink, x + pad, y + pad, 5)
        rest = "\n".join(t for t in lines[1:] if t)
        if rest:
            items.text(rest, small, ink, x + pad, y + pad + big.height() * (lines[0].count("\n") + 1), 5)
    for k in range(len(cuts)):
        i = count + k
        (x, y), w, height, lines = corners[i], widths[i], heights[i], boxes[i]
        pen = QPen(QColor(theme.text), 1.6, Qt.PenStyle.DashDotLine)
        ink = QBrush(QColor("#1b1b1b"))
        items.rect(QRectF(x, y, w, height), pen, QBrush(QColor(CUT_FILL)), 4)
        items.text(lines[0], bold, ink, x + pad, y + pad, 5)
        items.text("\n".join(lines[1:]), small, ink, x + pad, y + pad + big.height(), 5)
    width, height = arranged.size
    items.scene.setSceneRect(QRectF(-8, -8, width, height))
    if not shown.ran or faded:
        return QPointF(corners[0][0] + widths[0] / 2, -8.0)
    if cuts and shown.ran == len(graph.order):
        # The traversal is done: where it stopped, at the cut, is what to see.
        (x, y), i = corners[count], count
        return QPointF(x + widths[i] / 2, y + heights[i] / 2)
    last = graph.order[shown.ran - 1]
    x, y = corners[last]
    return QPointF(x + widths[last] / 2, y + heights[last] / 2)
