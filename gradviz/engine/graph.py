"""The real autograd graph of a loss: its nodes as PyTorch made them, and what ``backward()`` did in it.

After a forward, :func:`graph_of` walks ``grad_fn`` and ``next_functions`` from
the loss. Every node keeps its real class name (``MseLossBackward0``,
``AddmmBackward0``, ``AccumulateGrad``), its output shape from the node's own
metadata, and the tensors it saved for backward (read from its ``_saved_*``
attributes). ``AccumulateGrad`` leaves are named after the run's parameters.

During ``backward()``, :class:`GraphCapture` (an observer a :class:`~gradviz.engine.run.Run`
calls only when one is set) puts autograd's own node hooks on every node of the
walked graph: the order they fire in is PyTorch's execution order, and the
gradients they see are the ones that flowed, not recomputed. Afterwards each
saved tensor is read again: PyTorch refuses (``RuntimeError``) for those it freed.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from gradviz.engine.errors import UserError, one_line, quoted

if TYPE_CHECKING:
    from gradviz.engine.loop import OpSlot
    from gradviz.engine.run import Run
    from gradviz.engine.scenario import Scenario

Kind = Literal["loss", "operation", "parameter", "input"]
FORMATS = (".json", ".dot", ".svg", ".png")
_SAVED = "_saved_"


@dataclass(frozen=True)
class SavedTensor:
    """A tensor a node saved for backward (its attribute ``_saved_<name>``).

    ``freed`` is True once reading it back raises, as PyTorch does after a
    ``backward()`` without ``retain_graph``.
    """

    name: str
    shape: tuple[int, ...]
    bytes: int
    freed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "bytes": self.bytes, "freed": self.freed}


@dataclass(frozen=True)
class Node:
    """One autograd node.

    Attributes
    ----------
    id:
        Its place in the walk from the loss (breadth first, ``next_functions`` in order); the root is 0.
    name:
        ``type(node).__name__``: the class PyTorch made.
    kind:
        ``"loss"`` (the root), ``"operation"``, ``"parameter"`` (``AccumulateGrad`` of a run
        parameter) or ``"input"`` (``AccumulateGrad`` of any other leaf that requires grad).
    param:
        The run's name of the parameter, for ``"parameter"`` nodes.
    shape:
        The shape of the node's (first) forward output, where the node says it.
    saved:
        The tensors it saved for backward.
    """

    id: int
    name: str
    kind: Kind
    param: str | None
    shape: tuple[int, ...] | None
    saved: tuple[SavedTensor, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "param": self.param,
            "shape": None if self.shape is None else list(self.shape),
            "saved": [s.to_dict() for s in self.saved],
        }


@dataclass(frozen=True)
class Graph:
    """A loss's autograd graph, and, once captured around ``backward()``, what happened in it.

    Attributes
    ----------
    nodes:
        Every node reachable from the loss, ``nodes[i].id == i``.
    edges:
        ``(from, to)`` for each non-``None`` entry of a node's ``next_functions``, in order:
        the way gradients flow. A node used twice by another has two edges.
    order:
        Node ids in the order ``backward()`` ran them (empty before the backward).
    root:
        The loss's node (0), or ``None`` for a loss without ``grad_fn``.
    received:
        For each node run: the gradients it received (its ``grad_outputs``), copied.
    sent:
        Aligned with ``edges``: the gradient that went along each edge (``None`` where none did).
    phase, iteration, micro:
        Which forward made the graph, where a run's observer captured it.
    """

    nodes: tuple[Node, ...]
    edges: tuple[tuple[int, int], ...]
    order: tuple[int, ...] = ()
    root: int | None = 0
    received: Mapping[int, tuple[np.ndarray | None, ...]] = field(default_factory=dict)
    sent: tuple[np.ndarray | None, ...] = ()
    phase: str | None = None
    iteration: int | None = None
    micro: int = 0

    @property
    def params(self) -> dict[str, int]:
        """The run parameters the graph reaches: name -> node id."""
        return {n.param: n.id for n in self.nodes if n.param is not None}

    @property
    def added(self) -> dict[str, np.ndarray | None]:
        """For each parameter leaf: what its ``AccumulateGrad`` added into ``.grad`` in the backward."""
        out: dict[str, np.ndarray | None] = {}
        for name, i in self.params.items():
            got = self.received.get(i)
            out[name] = got[0] if got else None
        return out

    def to_dict(self, **header: Any) -> dict[str, Any]:
        """The JSON object ``gradviz graph`` writes, after the ``header`` keys."""
        return {
            **header,
            "root": self.root,
            "nodes": [n.to_dict() for n in self.nodes],
            "edges": [list(e) for e in self.edges],
            "order": list(self.order),
        }

    def to_json(self, **header: Any) -> str:
        import json

        return json.dumps(self.to_dict(**header), indent=1) + "\n"

    def to_dot(self, title: str = "") -> str:
        """The graph in Graphviz's DOT language: the loss on top, gradients flowing down to the leaves."""
        step = {i: k + 1 for k, i in enumerate(self.order)}
        lines = [
            "digraph autograd {",
            f'  graph [label={_dot_string(title)}, labelloc=t, fontname="DejaVu Sans"];' if title else "",
            '  node [shape=box, style="rounded,filled", fontname="DejaVu Sans", fontsize=10];',
            '  edge [color="#555555"];',
        ]
        colours = {"loss": "#f4c7c3", "operation": "#e8eaed", "parameter": "#c6dafc", "input": "#fce8b2"}
        for n in self.nodes:
            label = [n.name if n.param is None else f"{n.param}\n{n.name}"]
            if n.shape is not None:
                label.append("(" + ", ".join(map(str, n.shape)) + ")")
            if n.saved:
                total = sum(s.bytes for s in n.saved)
                freed = " freed" if all(s.freed for s in n.saved) else ""
                label.append(f"saved {len(n.saved)}: {total:,} B{freed}")
            if n.id in step:
                label.append(f"ran #{step[n.id]}")
            lines.append(
                f'  n{n.id} [label={_dot_string(chr(10).join(label))}, fillcolor="{colours[n.kind]}"];'
            )
        lines += [f"  n{a} -> n{b};" for a, b in self.edges]
        lines.append("}")
        return "\n".join(line for line in lines if line) + "\n"


def _dot_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


# ------------------------------------------------------------------- the walk

# By node class: its ``_saved_*`` attributes that may hold tensors (``dir`` is slow: once per class).
_saved_names: dict[type, list[str]] = {}


def _holds_tensors(value: Any) -> bool:
    """Whether a saved value is (or may be, where ``None`` or empty) a tensor or a list of them."""
    if value is None or isinstance(value, torch.Tensor):
        return True
    return isinstance(value, list | tuple) and (not value or isinstance(value[0], torch.Tensor))


def _saved(node: Any) -> tuple[list[SavedTensor], list[str]]:
    """The tensors ``node`` holds for backward, and the attributes they came from.

    An attribute found holding something else (``alpha``, ``dim``, sizes) is
    not read again for that class of node.
    """
    cls = type(node)
    names = _saved_names.get(cls)
    if names is None:
        names = _saved_names[cls] = [a for a in dir(node) if a.startswith(_SAVED)]
    out: list[SavedTensor] = []
    where: list[str] = []
    for attr in tuple(names):
        try:
            value = getattr(node, attr)
        except RuntimeError:  # freed already (a graph walked after its backward)
            continue
        if not _holds_tensors(value):
            names.remove(attr)
            continue
        name = attr[len(_SAVED) :]
        items = (
            [(f"{name}[{i}]", v) for i, v in enumerate(value)]
            if isinstance(value, list | tuple)
            else [(name, value)]
        )
        for label, v in items:
            if isinstance(v, torch.Tensor):
                out.append(SavedTensor(label, tuple(v.shape), v.nelement() * v.element_size()))
                where.append(attr)
    return out, where


def _shape(node: Any) -> tuple[int, ...] | None:
    try:
        meta = node._input_metadata
    except (AttributeError, RuntimeError):
        return None
    return tuple(meta[0].shape) if meta else None


@dataclass
class _Walk:
    """A walked graph with the live node objects it came from (kept only until the backward is done)."""

    graph: Graph
    live: list[Any]
    saved_from: list[list[str]]
    # For each edge: the index of its node's next_functions entry (the slot of grad_inputs it gets).
    slots: list[int]


def _walk(loss: torch.Tensor, params: Mapping[int, str]) -> _Walk:
    root = loss.grad_fn
    if root is None:
        return _Walk(Graph((), (), root=None), [], [], [])
    ids: dict[Any, int] = {root: 0}
    live = [root]
    edges: list[tuple[int, int]] = []
    slots: list[int] = []
    i = 0
    while i < len(live):
        node = live[i]
        for slot, (nxt, _) in enumerate(node.next_functions):
            if nxt is None:
                continue
            j = ids.get(nxt)
            if j is None:
                j = ids[nxt] = len(live)
                live.append(nxt)
            edges.append((i, j))
            slots.append(slot)
        i += 1
    nodes: list[Node] = []
    saved_from: list[list[str]] = []
    for i, node in enumerate(live):
        name = type(node).__name__
        param = None
        kind: Kind = "loss" if i == 0 else "operation"
        variable = getattr(node, "variable", None) if name == "AccumulateGrad" else None
        if isinstance(variable, torch.Tensor):
            param = params.get(id(variable))
            if i:
                kind = "parameter" if param is not None else "input"
        saved, where = _saved(node)
        shape = _shape(node)
        if shape is None and isinstance(variable, torch.Tensor):
            shape = tuple(variable.shape)
        nodes.append(Node(i, name, kind, param, shape, tuple(saved)))
        saved_from.append(where)
    return _Walk(Graph(tuple(nodes), tuple(edges)), live, saved_from, slots)


def graph_of(loss: torch.Tensor, params: Mapping[int, str] | None = None) -> Graph:
    """The autograd graph of ``loss`` as it stands now.

    Parameters
    ----------
    loss:
        A tensor made by a forward (its ``grad_fn`` is the root).
    params:
        ``id()`` of each parameter tensor -> its name, for naming ``AccumulateGrad`` leaves.
    """
    return _walk(loss, params or {}).graph


def run_params(run: Run) -> dict[int, str]:
    """``id()`` of each of ``run``'s parameter tensors -> the name the run gives it."""
    return {id(t): name for name, t in zip(run.names, run.tensors, strict=True)}


def _copy(t: torch.Tensor | None) -> np.ndarray | None:
    if t is None:
        return None
    t = t.detach()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.float()
    return t.to("cpu", copy=True).numpy()


# ---------------------------------------------------------------- the observer


class GraphCapture:
    """An observer of a run's forwards and backwards: the graph each ``backward()`` walks.

    Set it as ``run.graph_observer``; the run then calls :meth:`forward` after
    each forward and :meth:`backward` around each ``loss.backward()``. Nothing
    is walked or hooked while no observer is set.

    Attributes
    ----------
    pending:
        By phase: the graph of the latest forward, not yet backwarded.
    graphs:
        One :class:`Graph` per ``backward()`` observed, in order, with its execution
        order, the gradients that flowed and freed saved tensors marked.
    keep:
        At most this many graphs are kept (the newest); ``None`` keeps all.
    """

    def __init__(self, keep: int | None = None) -> None:
        self.keep = keep
        self.graphs: list[Graph] = []
        self._walks: dict[str, _Walk] = {}
        self._params: tuple[Run, dict[int, str]] | None = None

    @property
    def pending(self) -> dict[str, Graph]:
        """By phase: the graph of the latest forward that no backward has walked yet."""
        return {phase: w.graph for phase, w in self._walks.items()}

    def _names(self, run: Run) -> dict[int, str]:
        if self._params is None or self._params[0] is not run:
            self._params = (run, run_params(run))
        return self._params[1]

    def forward(self, run: Run, slot: OpSlot, iteration: int, loss: torch.Tensor) -> None:
        """Walk the graph ``loss`` has just been given."""
        walk = _walk(loss, self._names(run))
        walk.graph = replace(walk.graph, phase=slot.phase, iteration=iteration, micro=slot.micro)
        self._walks[slot.phase] = walk

    @contextlib.contextmanager
    def backward(self, run: Run, slot: OpSlot, iteration: int, loss: torch.Tensor) -> Iterator[None]:
        """Hook every node of the walked graph while the ``with`` body runs ``loss.backward()``."""
        walk = self._walks.pop(slot.phase, None)
        if walk is None or not walk.live or walk.live[0] is not loss.grad_fn:
            walk = _walk(loss, self._names(run))
            walk.graph = replace(walk.graph, phase=slot.phase, iteration=iteration, micro=slot.micro)
        order: list[int] = []
        received: dict[int, tuple[np.ndarray | None, ...]] = {}
        sent: dict[tuple[int, int], np.ndarray | None] = {}
        handles = []
        for i, node in enumerate(walk.live):
            handles.append(node.register_prehook(_before(i, order, received)))
            handles.append(node.register_hook(_after(i, sent)))
        try:
            yield
        finally:
            for h in handles:
                h.remove()
        self._finish(walk, order, received, sent)

    def _finish(
        self,
        walk: _Walk,
        order: list[int],
        received: dict[int, tuple[np.ndarray | None, ...]],
        sent: dict[tuple[int, int], np.ndarray | None],
    ) -> None:
        nodes = []
        for node, live, where in zip(walk.graph.nodes, walk.live, walk.saved_from, strict=True):
            if node.saved:
                freed = {attr: _freed(live, attr) for attr in set(where)}
                saved = tuple(
                    SavedTensor(s.name, s.shape, s.bytes, freed[a])
                    for s, a in zip(node.saved, where, strict=True)
                )
                node = Node(node.id, node.name, node.kind, node.param, node.shape, saved)
            nodes.append(node)
        flowed = tuple(sent.get((a, slot)) for (a, _), slot in zip(walk.graph.edges, walk.slots, strict=True))
        g = walk.graph
        graph = Graph(
            tuple(nodes), g.edges, tuple(order), g.root, received, flowed, g.phase, g.iteration, g.micro
        )
        walk.live.clear()  # the nodes (and what they still hold) go with the graph's last reference
        self.graphs.append(graph)
        if self.keep is not None and len(self.graphs) > self.keep:
            del self.graphs[: len(self.graphs) - self.keep]


def _before(i: int, order: list[int], received: dict[int, tuple[np.ndarray | None, ...]]) -> Any:
    def hook(grad_outputs: Sequence[torch.Tensor | None]) -> None:
        order.append(i)
        received[i] = tuple(map(_copy, grad_outputs))

    return hook


def _after(i: int, sent: dict[tuple[int, int], np.ndarray | None]) -> Any:
    def hook(grad_inputs: Sequence[torch.Tensor | None], grad_outputs: Sequence[torch.Tensor | None]) -> None:
        for slot, g in enumerate(grad_inputs):
            sent[(i, slot)] = _copy(g)

    return hook


def _freed(node: Any, attr: str) -> bool:
    """Whether PyTorch has freed a saved tensor: reading it raises once it has."""
    try:
        getattr(node, attr)
    except RuntimeError:
        return True
    return False


# --------------------------------------------------------- one graph of a scenario


def capture_graph(scenario: Scenario, run: str | None = None, iteration: int = 0, backward: int = 1) -> Graph:
    """The graph the ``backward``-th ``backward()`` of ``iteration`` of ``run`` walks (all counted from
    the scenario's start: iteration from 0, backward from 1).

    Raises
    ------
    UserError
        For an unknown run, an iteration past the scenario's end, a backward
        the iteration does not have, or a run that stopped before it.
    """
    from gradviz.engine.lab import Lab

    names = [r.name for r in scenario.runs]
    name = names[0] if run is None else run
    if name not in names:
        shown = ", ".join(quoted(n, 40, bare=True) for n in names)
        raise UserError(f"Scenario {quoted(scenario.name)} has no run {quoted(name)}; its runs: {shown}.")
    if not 0 <= iteration < scenario.iterations:
        raise UserError(
            f"--iteration: found {quoted(iteration)}; scenario {quoted(scenario.name)} runs iterations "
            f"0 to {scenario.iterations - 1:,}."
        )
    lab = Lab(scenario, record="bare")
    target = lab.run(name)
    count = sum(1 for s in target.program.ops if s.op == "backward")
    if not 1 <= backward <= count:
        calls = "no backward() call" if count == 0 else f"{count} backward() call{'s' if count > 1 else ''}"
        raise UserError(
            f"--backward: found {quoted(backward)}; an iteration of run {quoted(name)} makes {calls}"
            + (f", numbered 1 to {count}." if count > 1 else ".")
        )
    lab.run_iterations(iteration)
    capture = GraphCapture()
    target.graph_observer = capture
    try:
        end = (iteration + 1) * lab.ticks_per_iteration
        while len(capture.graphs) < backward and target.active and lab.tick < end:
            lab.advance(end)
    finally:
        target.graph_observer = None
    if len(capture.graphs) < backward:
        why = one_line(target.error, 200).rstrip(".") if target.error else "its loss diverged"
        raise UserError(
            f"Run {quoted(name)} stopped before iteration {iteration:,}'s backward() number {backward} "
            f"({why}), so that graph was never built."
        )
    return capture.graphs[backward - 1]


def render(graph: Graph, suffix: str, **header: Any) -> bytes:
    """``graph`` as the bytes of a ``.json``, ``.dot``, ``.svg`` or ``.png`` file.

    SVG and PNG are laid out by Graphviz's ``dot`` program.

    Raises
    ------
    UserError
        For another suffix, or SVG and PNG where ``dot`` is not installed.
    """
    suffix = suffix.lower()
    if suffix == ".json":
        return graph.to_json(**header).encode()
    title = " ".join(f"{k} {v}" for k, v in header.items())
    dot = graph.to_dot(title)
    if suffix == ".dot":
        return dot.encode()
    if suffix not in FORMATS:
        allowed = ", ".join(FORMATS)
        raise UserError(
            f"gradviz cannot write {quoted(suffix, 20, bare=True)} graphs; give a file ending in {allowed}."
        )
    program = shutil.which("dot")
    if program is None:
        raise UserError(
            f"Writing {suffix} needs Graphviz's dot program, which is not installed: install Graphviz "
            "(the Debian package graphviz), or write .json or .dot."
        )
    done = subprocess.run([program, f"-T{suffix[1:]}"], input=dot.encode(), capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"dot failed: {done.stderr.decode(errors='replace').strip()[:300]}")
    return done.stdout
