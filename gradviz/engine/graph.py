"""The real autograd graph of a loss: its nodes as PyTorch made them, and what ``backward()`` did in it.

After a forward, :func:`graph_of` walks ``grad_fn`` and ``next_functions`` from
the loss. Every node keeps its real class name (``MseLossBackward0``,
``AddmmBackward0``, ``AccumulateGrad``), its output shape from the node's own
metadata, and the tensors it saved for backward (read from its ``_saved_*``
attributes). ``AccumulateGrad`` leaves are named after the run's parameters.
Where the loop cut a tensor off the graph that made it (``detach()``, or made
under ``torch.no_grad()``), the node that saved that tensor marks the cut.

During ``backward()``, :class:`GraphCapture` (an observer a :class:`~gradviz.engine.run.Run`
calls only when one is set) puts autograd's own node hooks on every node of the
walked graph: the order they fire in is PyTorch's execution order, and the
gradients they see are the ones that flowed, not recomputed. Afterwards a saved
tensor of a node that ran is looked at again: PyTorch frees (and refuses to read)
them once a backward without ``retain_graph`` ran the node. A second backward
through a freed graph raises in PyTorch; its graph is kept with that error."""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
import torch

from gradviz.engine.copying import flat_copy
from gradviz.engine.errors import UserError, one_line, quoted
from gradviz.engine.record import floats

if TYPE_CHECKING:
    from gradviz.engine.lab import Lab
    from gradviz.engine.loop import OpSlot
    from gradviz.engine.run import Run
    from gradviz.engine.scenario import Scenario
    from gradviz.engine.zoo import Cut

Kind = Literal["loss", "operation", "parameter", "input"]
FORMATS = (".json", ".dot", ".svg", ".png")
# A graph view shows the values of gradients up to this many elements (and shapes of larger ones).
VIEW_VALUES = 16
_SAVED = "_saved_"


class Uncopied(NamedTuple):
    """A gradient larger than a capture copies: only its shape is kept."""

    shape: tuple[int, ...]


Grad = np.ndarray | Uncopied | None


class SavedTensor(NamedTuple):
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


class Node(NamedTuple):
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


class CutMark(NamedTuple):
    """Where the loss's graph stops at a tensor its code cut off the graph that made it.

    Attributes
    ----------
    tensor:
        The tensor's name in the code shown (``fake``, ``hidden``).
    how:
        ``"detach"`` (``tensor.detach()``) or ``"no_grad"`` (made under ``torch.no_grad()``).
    source:
        The class of the ``grad_fn`` of the tensor it was detached from; ``None`` under
        ``no_grad``, where that graph was never built.
    node:
        The node that took the cut tensor in (it saved that very tensor, or a view of it, for
        backward), or ``None`` where no node saved it.
    shape:
        The cut tensor's shape.
    """

    tensor: str
    how: Literal["detach", "no_grad"]
    source: str | None
    node: int | None
    shape: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "tensor": self.tensor,
            "how": self.how,
            "source": self.source,
            "node": self.node,
            "shape": list(self.shape),
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
        For each ``AccumulateGrad`` node run: the gradient it received, copied (what an
        inner node receives is the sum of what its edges carried).
    sent:
        Aligned with ``edges``: the gradient that went along each edge (``None`` where none did).
    phase, iteration, micro:
        Which forward made the graph, where a run's observer captured it.
    error:
        PyTorch's error, ``"RuntimeError: Trying to backward through the graph a second time
        ..."``, where the backward raised (``order`` then holds the nodes that ran before).
    failed:
        The node the backward raised in, where known.
    cuts:
        Where the graph stops at tensors the forward cut off with ``detach()`` or made under
        ``torch.no_grad()``.
    """

    nodes: tuple[Node, ...]
    edges: tuple[tuple[int, int], ...]
    order: tuple[int, ...] = ()
    root: int | None = 0
    received: Mapping[int, tuple[Grad, ...]] = field(default_factory=dict)
    sent: tuple[Grad, ...] = ()
    phase: str | None = None
    iteration: int | None = None
    micro: int = 0
    error: str | None = None
    failed: int | None = None
    cuts: tuple[CutMark, ...] = ()

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
            out[name] = got[0] if got and isinstance(got[0], np.ndarray) else None
        return out

    def to_dict(self, **header: Any) -> dict[str, Any]:
        """The JSON object ``gradviz graph`` writes, after the ``header`` keys."""
        return {
            **header,
            "root": self.root,
            "nodes": [n.to_dict() for n in self.nodes],
            "edges": [list(e) for e in self.edges],
            "order": list(self.order),
            "error": self.error,
            "failed": self.failed,
            "cuts": [c.to_dict() for c in self.cuts],
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
            '  edge [color="#555555", fontname="DejaVu Sans", fontsize=10];',
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
            if n.id == self.failed:
                label.append("backward() raised here")
            lines.append(
                f'  n{n.id} [label={_dot_string(chr(10).join(label))}, fillcolor="{colours[n.kind]}"];'
            )
        lines += [f"  n{a} -> n{b};" for a, b in self.edges]
        for k, cut in enumerate(self.cuts):
            if cut.node is None:
                continue
            lines.append(
                f'  cut{k} [label={_dot_string(chr(10).join(cut_lines(cut)))}, style="dashed,filled", '
                'fillcolor="#d5e8f5"];'
            )
            lines.append(f"  n{cut.node} -> cut{k} [style=dashed, label={_dot_string(cut_call(cut))}];")
        if self.error is not None:
            lines.append(f"  error [shape=note, label={_dot_string(one_line(self.error, 160))}];")
        lines.append("}")
        return "\n".join(line for line in lines if line) + "\n"


def cut_call(cut: CutMark) -> str:
    """The call that made the cut, as the code shows it: ``detach()`` or ``torch.no_grad()``."""
    return "detach()" if cut.how == "detach" else "torch.no_grad()"


def cut_lines(cut: CutMark) -> list[str]:
    """What a cut's box says: the tensor, and what lies beyond it."""
    if cut.how == "detach":
        beyond = f"made by {cut.source}: the graph stops here" if cut.source else "the graph stops here"
        return [f"{cut.tensor}.detach()", beyond]
    return [f"{cut.tensor}: made under torch.no_grad()", "its graph was never built"]


def _dot_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


# ------------------------------------------------------------------- the walk

# By node class: its ``_saved_*`` attributes that may hold tensors (``dir`` is slow: once per class).
_saved_names: dict[type, list[str]] = {}


def _saved(node: Any, freed: list[str] | None = None) -> tuple[tuple[SavedTensor, ...], str | None]:
    """The tensors ``node`` holds for backward, and the first attribute that held one.

    An attribute found holding something else (``alpha``, ``dim``, sizes) is
    not read again for that class of node. One already freed is left out (and named in ``freed``).
    """
    out: list[SavedTensor] = []
    first = None
    for attr, value in _saved_values(node, freed):
        name = attr[len(_SAVED) :]
        if isinstance(value, torch.Tensor):
            out.append(SavedTensor(name, tuple(value.shape), value.nbytes))
        else:
            out += [SavedTensor(f"{name}[{k}]", tuple(v.shape), v.nbytes) for k, v in enumerate(value)]
        if first is None and out:
            first = attr
    return tuple(out), first


def _saved_values(
    node: Any, freed: list[str] | None = None
) -> Iterator[tuple[str, torch.Tensor | list[torch.Tensor]]]:
    """``(attribute, tensor or list of tensors)`` for what ``node`` saved and still holds; the
    attributes PyTorch has freed already go to ``freed``."""
    cls = type(node)
    names = _saved_names.get(cls)
    if names is None:
        names = _saved_names[cls] = [a for a in dir(node) if a.startswith(_SAVED)]
    for attr in tuple(names):
        try:
            value = getattr(node, attr)
        except RuntimeError:  # freed already (a graph walked after its backward)
            if freed is not None:
                freed.append(attr)
            continue
        if isinstance(value, torch.Tensor):
            yield attr, value
        elif isinstance(value, list | tuple) and (not value or isinstance(value[0], torch.Tensor)):
            yield attr, [v for v in value if isinstance(v, torch.Tensor)]
        elif value is not None:
            names.remove(attr)


def _shape(node: Any) -> tuple[int, ...] | None:
    try:
        meta = node._input_metadata
    except (AttributeError, RuntimeError):
        return None
    return tuple(meta[0].shape) if meta else None


@functools.cache
def _accumulate_grad() -> Any:
    """The class of the nodes that add into a leaf's ``.grad``."""
    leaf = torch.zeros(1, requires_grad=True)
    return type(leaf.expand(1).grad_fn.next_functions[0][0])  # type: ignore[union-attr]


class _Static(NamedTuple):
    """What a walk reads of a graph's nodes beyond its structure (see :class:`_Walk`)."""

    nodes: tuple[Node, ...]
    # For each node: the first attribute holding a tensor it saved (read again to learn if it was freed).
    probe: tuple[str | None, ...]
    # The ids of the parameters' AccumulateGrad nodes (what they add is always copied).
    leaves: frozenset[int]
    # By the nodes a backward freed: ``nodes`` with those nodes' saved tensors marked freed.
    freed: dict[tuple[int, ...], tuple[Node, ...]]
    # The parameters' AccumulateGrad nodes by the parameter's name: name -> node id.
    params: Mapping[str, int]

    def nodes_freed(self, ids: Sequence[int]) -> tuple[Node, ...]:
        """``nodes`` with the saved tensors of the nodes ``ids`` marked freed."""
        key = tuple(i for i in ids if self.nodes[i].saved)
        if not key:
            return self.nodes
        nodes = self.freed.get(key)
        if nodes is None:
            out = list(self.nodes)
            for i in key:
                n = out[i]
                out[i] = n._replace(saved=tuple(s._replace(freed=True) for s in n.saved))
            nodes = self.freed[key] = tuple(out)
        return nodes


@dataclass
class _Walk:
    """A walked graph with the live node objects it came from, held until the next forward.

    Its hooks, put on the nodes at its first captured backward, stay with the nodes
    (they go with the graph); they report to ``sink[0]`` while a backward is captured.
    Its :class:`Graph` is made only when asked for (most forwards' never are).
    """

    static: _Static
    live: list[Any]
    edges: tuple[tuple[int, int], ...]
    # For each edge: the index of its node's next_functions entry (the slot of grad_inputs it gets).
    slots: tuple[int, ...]
    phase: str | None
    iteration: int | None
    micro: int
    cuts: tuple[CutMark, ...] = ()
    sink: list[list[_Ran] | None] = field(default_factory=lambda: [None])
    hooked: bool = False
    backwards: int = 0
    # Part of the graph was freed before it was walked (it reaches into an earlier, freed graph).
    stale: bool = False
    _graph: Graph | None = None

    @property
    def graph(self) -> Graph:
        """The graph as walked: nothing has run in it yet."""
        if self._graph is None:
            self._graph = Graph(
                self.static.nodes,
                self.edges,
                root=0 if self.live else None,
                phase=self.phase,
                iteration=self.iteration,
                micro=self.micro,
                cuts=self.cuts,
            )
        return self._graph


class _Raw(NamedTuple):
    """What one backward's hooks received, not yet copied: :meth:`GraphCapture.newest` finishes it.

    The tensors are autograd's own gradients, held as they came (nothing else refers to
    them once the backward is done, so nothing changes them); ``freed`` was read from the
    nodes right after the backward, while they existed. The nodes themselves are not held:
    a retained graph goes when the run lets go of its loss.
    """

    static: _Static
    edges: tuple[tuple[int, int], ...]
    slots: tuple[int, ...]
    phase: str | None
    iteration: int | None
    micro: int
    cuts: tuple[CutMark, ...]
    ran: list[_Ran]
    freed: list[int]
    error: str | None
    failed: int | None


_Ran = tuple[int, Sequence[torch.Tensor | None], Sequence[torch.Tensor | None]]
# Graphs of new structures a capture remembers what it read of (a loop makes one or two per phase).
_REMEMBERED = 16


def _structure(root: Any) -> tuple[list[Any], list[tuple[int, int]], list[int]]:
    """Breadth first from ``root`` over ``next_functions``: the nodes, the edges, each edge's slot."""
    ids: dict[Any, int] = {root: 0}
    live: list[Any] = [root]
    edges: list[tuple[int, int]] = []
    slots: list[int] = []
    i = 0
    while i < len(live):
        for slot, (nxt, _) in enumerate(live[i].next_functions):
            if nxt is None:
                continue
            j = ids.get(nxt)
            if j is None:
                j = ids[nxt] = len(live)
                live.append(nxt)
            edges.append((i, j))
            slots.append(slot)
        i += 1
    return live, edges, slots


def _read(
    live: Sequence[Any], params: Mapping[int, str], shapes: Sequence[Any], freed: list[str] | None = None
) -> _Static:
    """Names, kinds, shapes and saved tensors of the ``live`` nodes, read from each (those already
    freed named in ``freed``)."""
    accumulate = _accumulate_grad()
    nodes: list[Node] = []
    probe: list[str | None] = []
    leaves: dict[str, int] = {}
    for i, node in enumerate(live):
        name = type(node).__name__
        kind: Kind = "loss" if i == 0 else "operation"
        if type(node) is accumulate:
            param = params.get(id(node.variable))
            if i:
                kind = "parameter" if param is not None else "input"
            if param is not None:
                leaves[param] = i
            nodes.append(Node(i, name, kind, param, tuple(node.variable.shape)))
            probe.append(None)
            continue
        saved, first = _saved(node, freed)
        nodes.append(Node(i, name, kind, None, shapes[i], saved))
        probe.append(first)
    return _Static(tuple(nodes), tuple(probe), frozenset(leaves.values()), {}, leaves)


def _walk(
    loss: torch.Tensor,
    params: Mapping[int, str],
    phase: str | None = None,
    iteration: int | None = None,
    micro: int = 0,
    known: dict[Any, _Static] | None = None,
) -> _Walk:
    """Walk ``loss``'s graph; with ``known``, reuse what was read of a graph of the same signature.

    The signature is every node's class, every edge and slot, each parameter leaf's name and every
    other node's output shape: two graphs alike in all of those (a loop's forward, iteration after
    iteration) are made by the same operations on tensors of the same shapes, and so hold saved
    tensors of the same shapes. What the walk reads of a graph of a new signature is kept in ``known``.
    """
    root = loss.grad_fn
    if root is None:
        return _Walk(_Static((), (), frozenset(), {}, {}), [], (), (), phase, iteration, micro)
    live, listed, slot_list = _structure(root)
    edges, slots = tuple(listed), tuple(slot_list)
    accumulate = _accumulate_grad()
    # A parameter's leaf by its name (its shape is the parameter's), any other node by its output shape.
    shapes = tuple(
        [
            (params.get(id(n.variable)) or tuple(n.variable.shape)) if type(n) is accumulate else _shape(n)
            for n in live
        ]
    )
    static = None
    freed: list[str] = []
    if known is not None:
        key = (tuple(map(type, live)), edges, slots, shapes)
        static = known.get(key)
    if static is None:
        static = _read(live, params, shapes, freed)
        # A graph walked after a backward freed it lacks its saved tensors: not one to reuse.
        if known is not None and not freed:
            if len(known) >= _REMEMBERED:
                del known[next(iter(known))]
            known[key] = static
    return _Walk(static, live, edges, slots, phase, iteration, micro, stale=bool(freed))


def _cut_marks(walk: _Walk, cuts: Sequence[Cut], places: dict[str, tuple[int, str]]) -> tuple[CutMark, ...]:
    """Where ``walk``'s graph took in each tensor of ``cuts``: the node that saved that very tensor.

    ``places`` remembers where each was found, which is tried first next time.
    """
    marks = []
    for cut in cuts:
        found = places.get(cut.name)
        if found is not None and not _holds(walk.live, found, cut.tensor):
            found = None
        if found is None:
            found = _cut_place(walk.live, cut.tensor)
            if found is not None:
                places[cut.name] = found
        node = None if found is None else found[0]
        marks.append(CutMark(cut.name, cut.how, cut.source, node, tuple(cut.tensor.shape)))
    return tuple(marks)


def _cut_place(live: Sequence[Any], tensor: torch.Tensor) -> tuple[int, str] | None:
    """The first node, and its attribute, that saved ``tensor`` (or a view of it) among the nodes
    taking in a tensor that requires no grad (a ``None`` among their ``next_functions``)."""
    for i, node in enumerate(live):
        if all(nxt is not None for nxt, _ in node.next_functions):
            continue
        for attr, value in _saved_values(node):
            if any(_same(v, tensor) for v in (value if isinstance(value, list) else (value,))):
                return i, attr
    return None


def _same(saved: torch.Tensor, tensor: torch.Tensor) -> bool:
    """Whether ``saved`` is ``tensor`` or a view of it (``nn.RNN`` saves ``hidden[0]``): the same memory."""
    if saved is tensor:
        return True
    return tensor.numel() > 0 and saved.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()


def _holds(live: Sequence[Any], place: tuple[int, str], tensor: torch.Tensor) -> bool:
    i, attr = place
    if i >= len(live):
        return False
    try:
        value = getattr(live[i], attr, None)
    except RuntimeError:
        return False
    values = value if isinstance(value, list | tuple) else (value,)
    return any(isinstance(v, torch.Tensor) and _same(v, tensor) for v in values)


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


# ---------------------------------------------------------------- the observer


class GraphCapture:
    """An observer of a run's forwards and backwards: the graph each ``backward()`` walks.

    Set it as ``run.graph_observer``; the run then calls :meth:`forward` after
    each forward and :meth:`backward` around each ``loss.backward()``. Nothing
    is walked or hooked while no observer is set.

    Parameters
    ----------
    keep:
        At most this many graphs are kept (the newest); ``None`` keeps all.
    values:
        Gradients of more elements than this keep only their shape (:class:`Uncopied`),
        except what each parameter's ``AccumulateGrad`` adds, which is always copied
        (it is the ledger's figure); ``None`` copies every gradient.
    lazy:
        Copy nothing after a backward: only the newest backward's hook results are held,
        and :meth:`newest` makes its graph when asked (a view that draws one graph a
        frame asks once a frame, not once an op). ``graphs`` then stays empty.

    Attributes
    ----------
    graphs:
        One :class:`Graph` per ``backward()`` observed, in order, with its execution
        order, the gradients that flowed and freed saved tensors marked, and, for a
        backward that raised, PyTorch's error.
    """

    def __init__(self, keep: int | None = None, values: int | None = None, lazy: bool = False) -> None:
        self.keep = keep
        self.lazy = lazy
        self.graphs: list[Graph] = []
        self._walks: dict[str, _Walk] = {}
        self._params: tuple[Run, dict[int, str]] | None = None
        self._known: dict[Any, _Static] = {}
        self._cut_places: dict[str, tuple[int, str]] = {}
        self.values = values
        # The newest forward's walk or backward's hook results, with its iteration and slot.
        self._newest: tuple[int, OpSlot, _Walk | _Raw] | None = None
        # A parameter's AccumulateGrad node stays the same object from forward to forward while
        # something holds it: held here, its hook is put on once. By parameter name: (node, handle).
        self._leaf_hooks: dict[str, tuple[Any, torch.utils.hooks.RemovableHandle]] = {}
        # Where the leaves' hooks report during a backward: the list, and the walk's ids by name.
        self._leaf_sink: list[Any] = [None, {}]

    def close(self) -> None:
        """Remove the hooks the capture keeps on parameters' ``AccumulateGrad`` nodes, and let go of them
        (the hooks on other nodes go with their graphs)."""
        for _, handle in self._leaf_hooks.values():
            handle.remove()
        self._leaf_hooks.clear()

    @property
    def pending(self) -> dict[str, Graph]:
        """By phase: the graph of the latest forward that no backward has walked yet."""
        return {phase: w.graph for phase, w in self._walks.items() if not w.backwards}

    def newest(self) -> tuple[int, OpSlot, Graph] | None:
        """The graph of the newest forward or backward observed since the last call, made now, with
        that op's iteration and slot; ``None`` where there was none since."""
        newest, self._newest = self._newest, None
        if newest is None:
            return None
        iteration, slot, got = newest
        return iteration, slot, got.graph if isinstance(got, _Walk) else self._finish(got)

    def _names(self, run: Run) -> dict[int, str]:
        if self._params is None or self._params[0] is not run:
            self._params = (run, run_params(run))
        return self._params[1]

    def _walked(self, run: Run, slot: OpSlot, iteration: int, loss: torch.Tensor) -> _Walk:
        walk = _walk(loss, self._names(run), slot.phase, iteration, slot.micro, self._known)
        cuts = getattr(run.task, "cuts", ())
        if cuts and walk.live:
            walk.cuts = _cut_marks(walk, cuts, self._cut_places)
        return walk

    def forward(self, run: Run, slot: OpSlot, iteration: int, loss: torch.Tensor) -> None:
        """Walk the graph ``loss`` has just been given (:attr:`pending` shows it)."""
        walk = self._walks[slot.phase] = self._walked(run, slot, iteration, loss)
        self._newest = (iteration, slot, walk)

    def backward(self, run: Run, slot: OpSlot, iteration: int, loss: torch.Tensor) -> _Backward:
        """Capture what the ``with`` body's ``loss.backward()`` does in the walked graph.

        One post hook per node: it fires right after the node ran, so the hooks'
        order is the execution order, and it sees both the gradients the node
        received and those it sent along each of its edges. The hooks only keep
        those tensors; they are copied when the graph is made. Holding them is
        what keeps them unchanged: autograd adds into a gradient in place, or
        hands it over as ``.grad``, only when nothing else refers to it.

        A second backward through a graph the first one freed raises in PyTorch:
        pre hooks then tell the node it raised in, and the graph is kept with
        PyTorch's error and its saved tensors freed (each read back raises).
        """
        walk = self._walks.get(slot.phase)
        if walk is None or not walk.live or walk.live[0] is not loss.grad_fn:
            walk = self._walks[slot.phase] = self._walked(run, slot, iteration, loss)
        if not walk.hooked:
            walk.hooked = True
            self._hook(walk)
        ran: list[_Ran] = []
        started: list[int] = []
        gone = list(enumerate(walk.live)) if walk.stale else self._freed_now(walk) if walk.backwards else []
        handles = [node.register_prehook(functools.partial(_start, i, started)) for i, node in gone]
        walk.sink[0] = self._leaf_sink[0] = ran
        self._leaf_sink[1] = walk.static.params
        last = slot.again == run.loop.backwards - 1
        return _Backward(self, walk, (iteration, slot), last, ran, started, handles)

    def _done(self, b: _Backward, error: str | None) -> None:
        """The end of the backward ``b`` captured: its hook results kept (or its graph made)."""
        walk, ran = b.walk, b.ran
        walk.sink[0] = self._leaf_sink[0] = None
        for h in b.handles:
            h.remove()
        walk.backwards += 1
        failed = next((i for i in b.started if i not in {r[0] for r in ran}), None) if error else None
        freed = self._freed_by(walk, ran, error)
        raw = _Raw(
            walk.static, walk.edges, walk.slots, walk.phase, walk.iteration, walk.micro, walk.cuts,
            ran, freed, error, failed,
        )  # fmt: skip
        self._newest = (*b.op, raw)
        if not self.lazy:
            self.graphs.append(self._finish(raw))
            if self.keep is not None and len(self.graphs) > self.keep:
                del self.graphs[: len(self.graphs) - self.keep]
        if b.last:
            # The run lets go of the loss now; so does the capture, lest it keep a retained graph.
            del self._walks[b.op[1].phase]

    def _hook(self, walk: _Walk) -> None:
        """One post hook on each node of ``walk``: a parameter's leaf keeps the one it has."""
        static = walk.static
        leaves, nodes, held = static.leaves, static.nodes, self._leaf_hooks
        for i, node in enumerate(walk.live):
            if i not in leaves:
                node.register_hook(functools.partial(_ran, i, walk.sink))
                continue
            name = nodes[i].param
            assert name is not None  # a parameter's leaf
            kept = held.get(name)
            if kept is None or kept[0] is not node:
                if kept is not None:
                    kept[1].remove()
                held[name] = (node, node.register_hook(functools.partial(_ran_leaf, name, self._leaf_sink)))

    @staticmethod
    def _freed_now(walk: _Walk) -> list[tuple[int, Any]]:
        """The nodes of an earlier backward's graph, where that backward freed it (else none)."""
        probe = next(((i, a) for i, a in enumerate(walk.static.probe) if a is not None), None)
        if probe is None or not _freed(walk.live[probe[0]], probe[1]):
            return []
        return list(enumerate(walk.live))

    @staticmethod
    def _freed_by(walk: _Walk, ran: list[_Ran], error: str | None) -> list[int]:
        """The nodes whose saved tensors are freed now that the backward is done."""
        probes = walk.static.probe
        if error is None:
            # A backward without retain_graph frees the saved tensors of every node it runs: reading
            # one of them back (PyTorch raises once it is freed) tells for all of them.
            probe = next(((i, a) for i, _, _ in ran if (a := probes[i]) is not None), None)
            gone = probe is not None and _freed(walk.live[probe[0]], probe[1])
            return [i for i, _, _ in ran] if gone else []
        # Each node read back: an earlier backward freed what it ran, this one what it reached.
        return [i for i, attr in enumerate(probes) if attr is not None and _freed(walk.live[i], attr)]

    def _finish(self, raw: _Raw) -> Graph:
        """The graph of a backward from its hook results: the gradients copied, the freed marked."""
        ran, static = raw.ran, raw.static
        # Copied: what went along each edge, and what each parameter leaf received (the ledger's
        # figure); what an inner node received is the sum of its edges' and is not kept again.
        copied = _Copies(self.values)
        leaves = static.leaves
        # Every leaf's in one take (a call each cost more than the copies of a small model).
        got = [(i, outputs) for i, outputs, _ in ran if i in leaves]
        flat = copied.take([t for _, outputs in got for t in outputs], True)
        out = {i: inputs for i, _, inputs in ran}
        sent = copied.take(
            [
                grads[slot] if (grads := out.get(a)) is not None and slot < len(grads) else None
                for (a, _), slot in zip(raw.edges, raw.slots, strict=True)
            ],
            False,
        )
        copied.fill()
        received, at = {}, 0
        for i, outputs in got:  # the filled copies, leaf by leaf
            received[i], at = tuple(flat[at : at + len(outputs)]), at + len(outputs)
        return Graph(
            static.nodes_freed(raw.freed),
            raw.edges,
            tuple(i for i, _, _ in ran),
            0 if static.nodes else None,
            received,
            tuple(sent),
            raw.phase,
            raw.iteration,
            raw.micro,
            raw.error,
            raw.failed,
            raw.cuts,
        )


class _Backward(NamedTuple):
    """One captured ``backward()``: the context :meth:`GraphCapture.backward` returns (a plain
    class, as a generator's context costs more than the rest of what a small model's op adds)."""

    capture: GraphCapture
    walk: _Walk
    op: tuple[int, OpSlot]  # iteration, slot
    last: bool  # the run's last backward through this loss
    ran: list[_Ran]
    started: list[int]
    handles: list[Any]

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        error = f"{kind.__name__}: {exc}" if kind is not None and issubclass(kind, Exception) else None
        self.capture._done(self, error)


def _ran(
    i: int,
    sink: list[list[_Ran] | None],
    grad_inputs: Sequence[torch.Tensor | None],
    grad_outputs: Sequence[torch.Tensor | None],
) -> None:
    ran = sink[0]
    if ran is not None:
        ran.append((i, grad_outputs, grad_inputs))


def _ran_leaf(
    name: str,
    sink: list[Any],
    grad_inputs: Sequence[torch.Tensor | None],
    grad_outputs: Sequence[torch.Tensor | None],
) -> None:
    ran = sink[0]
    if ran is not None:
        ran.append((sink[1][name], grad_outputs, grad_inputs))


def _start(i: int, started: list[int], grad_outputs: Sequence[torch.Tensor | None]) -> None:
    started.append(i)


class _Copies:
    """Gradients copied together into one array (past the size limit: their shapes only).

    A gradient sent along an edge is often the very tensor the next node
    receives: each tensor is copied once.
    """

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.tensors: dict[int, torch.Tensor] = {}
        self.places: list[tuple[list[Grad], int, int]] = []

    def take(self, grads: Sequence[torch.Tensor | None], full: bool) -> list[Grad]:
        """A list that :meth:`fill` completes with the copies of ``grads``."""
        out: list[Grad] = [None] * len(grads)
        limit = None if full else self.limit
        tensors, places = self.tensors, self.places
        for k, t in enumerate(grads):
            if t is None:
                continue
            if limit is None or t.numel() <= limit:
                tensors[id(t)] = t
                places.append((out, k, id(t)))
            else:
                out[k] = Uncopied(tuple(t.shape))
        return out

    def fill(self) -> None:
        if not self.tensors:
            return
        try:
            # Small CPU tensors copy fastest one by one: no dispatch of a reshape and cat for each.
            arrays = {key: t.numpy().copy() for key, t in self.tensors.items()}
        except (RuntimeError, TypeError):  # on a GPU, or a dtype numpy lacks
            arrays = self._flat()
        for out, k, key in self.places:
            out[k] = arrays[key]

    def _flat(self) -> dict[int, np.ndarray]:
        tensors = list(self.tensors.values())
        try:
            flat = torch._C._nn.flatten_dense_tensors(tensors).to("cpu").numpy()
        except (RuntimeError, TypeError):  # mixed dtypes or devices, or a dtype numpy lacks
            flat = floats(flat_copy(tensors))
        arrays: dict[int, np.ndarray] = {}
        at = 0
        for t in tensors:
            n = t.numel()
            arrays[id(t)] = flat[at : at + n].reshape(t.shape)
            at += n
        return arrays


def _freed(node: Any, attr: str) -> bool:
    """Whether PyTorch has freed the tensor ``node`` saved as ``attr``.

    PyTorch's own handle of it (``_raw_saved_<name>``) then holds neither the tensor nor an unpack
    hook, and reading the tensor raises; the handle is read first, as the raise is slow (a C++
    exception with its stack), and the raise decides where the handle cannot tell.
    """
    try:
        raw = getattr(node, "_raw" + attr)
        if isinstance(raw, list | tuple):
            raw = raw[0] if raw else None
        if raw is not None and raw.data is None and raw.unpack_hook is None:
            return True
        if raw is not None and raw.data is not None:
            return False
    except (AttributeError, RuntimeError):
        pass
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


def replay_graph(lab: Lab, run: str, tick: int, values: int | None = None) -> Graph:
    """The graph of the forward or backward ``run`` performed at ``tick``, walked again: a forward's
    as it built it (before its backward), a backward's with what flowed in it.

    A fresh copy of the run starts from the lab's keyframe at or before that iteration and
    performs the same ops (the same batches and arithmetic) up to ``tick``, its graphs observed
    from the iteration's first op: what a view draws for a moment whose graph the window no
    longer keeps, or never captured. The cost is at most the lab's keyframe interval in
    iterations (one in a small model's lab), wherever the tick lies. A lab that kept no keyframe
    (``bare``) is replayed from the scenario's start, as ``gradviz graph`` does. ``values`` is
    :class:`GraphCapture`'s: a view passes its own, and gets the graph its capture would have made.

    Raises
    ------
    UserError
        Where the run has no forward or backward at ``tick``, or it stopped before it.
    """
    from gradviz.engine.run import Run

    r = [x.name for x in lab.runs].index(run)
    tpi = lab.ticks_per_iteration
    iteration = tick // tpi
    slot = lab.schedule[tick % tpi][r]
    if slot is None or slot.op not in ("forward", "backward"):
        raise UserError(f"Run {quoted(run)} performed no forward or backward() at tick {tick:,}.")
    history = lab.history[run]
    copy = Run(lab.scenario.runs[r], lab.scenario, lab.device)
    first = 0
    if lab.mode != "bare" and history.keyframes:
        first = history.keyframe_before(iteration)
        copy.restore(*history.keyframe(first))
    capture = GraphCapture(values=values, lazy=True)
    for t in range(first * tpi, tick + 1):
        op = lab.schedule[t % tpi][r]
        if op is None or not copy.active:
            continue
        if t // tpi == iteration:
            copy.graph_observer = capture
        copy.replay(op, t // tpi)
    got = capture.newest()
    if got is None or got[1] is not slot or got[0] != iteration:
        raise UserError(
            f"Run {quoted(run)} stopped before tick {tick:,}'s {slot.op}, so its graph was never built."
        )
    return got[2]


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
