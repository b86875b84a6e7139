"""The real autograd graph of a loss: its nodes as PyTorch made them, and what ``backward()`` did in it.

After a forward, :func:`graph_of` walks ``grad_fn`` and ``next_functions`` from
the loss. Every node keeps its real class name (``MseLossBackward0``,
``AddmmBackward0``, ``AccumulateGrad``), its output shape from the node's own
metadata, and the tensors it saved for backward (read from its ``_saved_*``
attributes). ``AccumulateGrad`` leaves are named after the run's parameters.

During ``backward()``, :class:`GraphCapture` (an observer a :class:`~gradviz.engine.run.Run`
calls only when one is set) puts autograd's own node hooks on every node of the
walked graph: the order they fire in is PyTorch's execution order, and the
gradients they see are the ones that flowed, not recomputed. Afterwards a saved
tensor of a node that ran is read again: PyTorch refuses (``RuntimeError``) once
the backward freed the graph, which it does for every node it ran at once.
"""

from __future__ import annotations

import contextlib
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

if TYPE_CHECKING:
    from gradviz.engine.loop import OpSlot
    from gradviz.engine.run import Run
    from gradviz.engine.scenario import Scenario

Kind = Literal["loss", "operation", "parameter", "input"]
FORMATS = (".json", ".dot", ".svg", ".png")
# A graph view shows the values of gradients up to this many elements (and shapes of larger ones).
VIEW_VALUES = 16
_SAVED = "_saved_"


@dataclass(frozen=True)
class Uncopied:
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


def _saved(node: Any) -> tuple[tuple[SavedTensor, ...], str | None]:
    """The tensors ``node`` holds for backward, and the first attribute that held one.

    An attribute found holding something else (``alpha``, ``dim``, sizes) is
    not read again for that class of node.
    """
    cls = type(node)
    names = _saved_names.get(cls)
    if names is None:
        names = _saved_names[cls] = [a for a in dir(node) if a.startswith(_SAVED)]
    out: list[SavedTensor] = []
    first = None
    for attr in tuple(names):
        try:
            value = getattr(node, attr)
        except RuntimeError:  # freed already (a graph walked after its backward)
            continue
        if isinstance(value, torch.Tensor):
            out.append(SavedTensor(attr[len(_SAVED) :], tuple(value.shape), value.nbytes))
        elif value is None:
            continue
        elif isinstance(value, list | tuple) and (not value or isinstance(value[0], torch.Tensor)):
            name = attr[len(_SAVED) :]
            for k, v in enumerate(value):
                if isinstance(v, torch.Tensor):
                    out.append(SavedTensor(f"{name}[{k}]", tuple(v.shape), v.nbytes))
        else:
            names.remove(attr)
            continue
        if first is None and out:
            first = attr
    return tuple(out), first


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
    # For each node: the first attribute holding a tensor it saved (read again to learn if it was freed).
    probe: list[str | None]
    # For each edge: the index of its node's next_functions entry (the slot of grad_inputs it gets).
    slots: list[int]
    # The ids of the parameters' AccumulateGrad nodes (what they add is always copied).
    leaves: frozenset[int] = frozenset()


def _walk(
    loss: torch.Tensor,
    params: Mapping[int, str],
    phase: str | None = None,
    iteration: int | None = None,
    micro: int = 0,
) -> _Walk:
    root = loss.grad_fn
    if root is None:
        return _Walk(Graph((), (), root=None, phase=phase, iteration=iteration, micro=micro), [], [], [])
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
    nodes: list[Node] = []
    probe: list[str | None] = []
    leaves = []
    for i, node in enumerate(live):
        name = type(node).__name__
        kind: Kind = "loss" if i == 0 else "operation"
        if name == "AccumulateGrad":
            variable = node.variable
            param = params.get(id(variable))
            if i:
                kind = "parameter" if param is not None else "input"
            if param is not None:
                leaves.append(i)
            nodes.append(Node(i, name, kind, param, tuple(variable.shape)))
            probe.append(None)
            continue
        saved, first = _saved(node)
        nodes.append(Node(i, name, kind, None, _shape(node), saved))
        probe.append(first)
    graph = Graph(tuple(nodes), tuple(edges), phase=phase, iteration=iteration, micro=micro)
    return _Walk(graph, live, probe, slots, frozenset(leaves))


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

    Attributes
    ----------
    graphs:
        One :class:`Graph` per ``backward()`` observed, in order, with its execution
        order, the gradients that flowed and freed saved tensors marked.
    """

    def __init__(self, keep: int | None = None, values: int | None = None) -> None:
        self.keep = keep
        self.graphs: list[Graph] = []
        self._walks: dict[str, _Walk] = {}
        self._params: tuple[Run, dict[int, str]] | None = None
        self.values = values

    @property
    def pending(self) -> dict[str, Graph]:
        """By phase: the graph of the latest forward that no backward has walked yet."""
        return {phase: w.graph for phase, w in self._walks.items()}

    def _names(self, run: Run) -> dict[int, str]:
        if self._params is None or self._params[0] is not run:
            self._params = (run, run_params(run))
        return self._params[1]

    def _walked(self, run: Run, slot: OpSlot, iteration: int, loss: torch.Tensor) -> _Walk:
        return _walk(loss, self._names(run), slot.phase, iteration, slot.micro)

    def forward(self, run: Run, slot: OpSlot, iteration: int, loss: torch.Tensor) -> Graph:
        """Walk the graph ``loss`` has just been given; returns it (nothing has run in it yet)."""
        walk = self._walks[slot.phase] = self._walked(run, slot, iteration, loss)
        return walk.graph

    @contextlib.contextmanager
    def backward(self, run: Run, slot: OpSlot, iteration: int, loss: torch.Tensor) -> Iterator[None]:
        """Hook every node of the walked graph while the ``with`` body runs ``loss.backward()``.

        One post hook per node: it fires right after the node ran, so the hooks'
        order is the execution order, and it sees both the gradients the node
        received and those it sent along each of its edges. The hooks only keep
        those tensors; they are copied once the backward is done. Holding them
        is what keeps them unchanged meanwhile: autograd adds into a gradient
        in place, or hands it over as ``.grad``, only when nothing else refers to it.
        """
        walk = self._walks.pop(slot.phase, None)
        if walk is None or not walk.live or walk.live[0] is not loss.grad_fn:
            walk = self._walked(run, slot, iteration, loss)
        ran: list[tuple[int, Sequence[torch.Tensor | None], Sequence[torch.Tensor | None]]] = []
        handles = [node.register_hook(functools.partial(_ran, i, ran)) for i, node in enumerate(walk.live)]
        try:
            yield
        finally:
            for h in handles:
                h.remove()
        self._finish(walk, ran)

    def _finish(
        self, walk: _Walk, ran: list[tuple[int, Sequence[torch.Tensor | None], Sequence[torch.Tensor | None]]]
    ) -> None:
        g = walk.graph
        nodes = list(g.nodes)
        # A backward without retain_graph frees the saved tensors of every node it runs: reading one
        # of them back (PyTorch raises once it is freed) tells for all of them.
        probe = next(((i, walk.probe[i]) for i, _, _ in ran if walk.probe[i] is not None), None)
        if probe is not None and _freed(walk.live[probe[0]], probe[1]):  # type: ignore[arg-type]
            for i, _, _ in ran:
                n = nodes[i]
                if n.saved:
                    freed = tuple(SavedTensor(s.name, s.shape, s.bytes, True) for s in n.saved)
                    nodes[i] = Node(n.id, n.name, n.kind, n.param, n.shape, freed)
        # Copied: what went along each edge, and what each parameter leaf received (the ledger's
        # figure); what an inner node received is the sum of its edges' and is not kept again.
        copied = _Copies(self.values)
        leaves = walk.leaves
        received = {i: copied.take(outputs, True) for i, outputs, _ in ran if i in leaves}
        out = {i: inputs for i, _, inputs in ran}
        sent = copied.take(
            [
                out[a][slot] if a in out and slot < len(out[a]) else None
                for (a, _), slot in zip(g.edges, walk.slots, strict=True)
            ],
            False,
        )
        copied.fill()
        order = tuple(i for i, _, _ in ran)
        graph = Graph(
            tuple(nodes),
            g.edges,
            order,
            g.root,
            {i: tuple(got) for i, got in received.items()},
            tuple(sent),
            g.phase,
            g.iteration,
            g.micro,
        )
        walk.live.clear()  # the nodes (and what they still hold) go with the graph's last reference
        self.graphs.append(graph)
        if self.keep is not None and len(self.graphs) > self.keep:
            del self.graphs[: len(self.graphs) - self.keep]


def _ran(
    i: int,
    ran: list[tuple[int, Sequence[torch.Tensor | None], Sequence[torch.Tensor | None]]],
    grad_inputs: Sequence[torch.Tensor | None],
    grad_outputs: Sequence[torch.Tensor | None],
) -> None:
    ran.append((i, grad_outputs, grad_inputs))


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
        out: list[Grad] = []
        for t in grads:
            if t is not None and (full or self.limit is None or t.numel() <= self.limit):
                self.tensors[id(t)] = t
                self.places.append((out, len(out), id(t)))
                out.append(None)
            else:
                out.append(None if t is None else Uncopied(tuple(t.shape)))
        return out

    def fill(self) -> None:
        if not self.tensors:
            return
        tensors = list(self.tensors.values())
        try:
            flat = torch._C._nn.flatten_dense_tensors(tensors).to("cpu").numpy()
        except (RuntimeError, TypeError):  # mixed dtypes or devices, or a dtype numpy lacks
            flat = flat_copy(tensors)
        arrays: dict[int, np.ndarray] = {}
        at = 0
        for t in tensors:
            n = t.numel()
            arrays[id(t)] = flat[at : at + n].reshape(t.shape)
            at += n
        for out, k, key in self.places:
            out[k] = arrays[key]


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
