"""One plain sentence about the op at the current moment, written from its records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from gradviz.gui import fmt
from gradviz.gui.window_history import Moment

if TYPE_CHECKING:
    from gradviz.engine.graph import Graph

OP_CALLS = {"forward": "forward", "backward": "backward()", "step": "step()", "zero_grad": "zero_grad()"}


def _main_param(values: dict[str, Any], names: Sequence[str], moment: Moment) -> str | None:
    """The parameter a sentence is about: the first that holds something, the lesson's lead first."""
    lesson = moment.info.scenario.lesson
    for name in lesson.order_params(names) if lesson else names:
        if values.get(name) is not None:
            return name
    return None


def _amount(value: np.ndarray | None) -> str:
    if value is None:
        return "nothing"
    flat = np.asarray(value, dtype=np.float64).reshape(-1)
    if flat.size == 1:
        return fmt.number(flat[0], 3)
    return f"a gradient of norm {fmt.number(float(np.linalg.norm(flat)), 3)}"


def _statement(rec: Any, moment: Moment) -> str:
    """The source line that ``rec``'s op ran, as the code panel shows it."""
    source = moment.info.runs[moment.info.run_index(rec.run)].source.splitlines()
    return source[rec.line - 1].strip() if 0 < rec.line <= len(source) else rec.op


def _zero_grad_sentence(rec: Any, moment: Moment) -> str:
    loop = moment.info.runs[moment.info.run_index(rec.run)].spec.loop
    call = _statement(rec, moment)
    kept = [n for n, g in rec.grads.items() if g is not None and np.any(np.asarray(g) != 0)]
    if kept:
        names = ", ".join(n + ".grad" for n in kept)
        if rec.phase:
            # Two models, two optimizers: the other model's gradients are its own optimizer's to clear.
            return (
                f"{call} cleared its own model's gradients; {names} belong to the other model "
                "and are left as they are."
            )
        return (
            f"{call} cleared what it holds but not {names}: nothing in this loop clears "
            f"{'it' if len(kept) == 1 else 'them'}, so that gradient keeps piling up."
        )
    if loop.set_to_none:
        return f"{call} set .grad to None: no gradient tensor exists until the next backward()."
    return f"{call} filled .grad with zeros (set_to_none=False): the tensors stay allocated."


def _forward_sentence(rec: Any, moment: Moment) -> str:
    loss = rec.loss
    if loss is None or not np.isfinite(loss):
        return f"the forward pass gave loss = {fmt.number(loss)}: this run diverged and stops here."
    micro = f" on micro-batch {rec.micro + 1}" if _accumulates(moment, rec.run) else ""
    held = rec.footprint.saved if rec.footprint is not None else None
    saved = f", saving {held:,} bytes for backward" if held is not None else ""
    return (
        f"the forward pass computed loss = {fmt.number(loss)}{micro} and built the graph{saved}; "
        "no .grad changed yet."
    )


def _accumulates(moment: Moment, run: str) -> bool:
    return moment.info.runs[moment.info.run_index(run)].spec.loop.accumulate > 1


WHY_UNTOUCHED = {
    "detach": "fake.detach() cut the graph at fake",
    "no_grad": "fake was made under torch.no_grad(), so no graph led back to G",
}


def _two_models_sentence(rec: Any, moment: Moment, names: Sequence[str]) -> str | None:
    """For a model of two parts (the GAN): whose ``.grad`` this backward filled, said either way,
    because that is what ``detach()`` decides."""
    run = moment.info.run(rec.run)
    others = [(p, ns) for p, ns in run.phases.items() if p != rec.phase]
    if not rec.phase or not others:
        return None
    fresh = rec.fresh_grads or {}
    own = names[0].split(".")[0] if names else rec.phase
    other_phase, other_names = others[0]
    other = other_names[0].split(".")[0] if other_names else other_phase
    reached = [n for n in other_names if fresh.get(n) is not None]
    call = _statement(rec, moment)
    if reached:
        total = float(np.sqrt(sum(float(np.sum(np.square(fresh[n]))) for n in reached)))
        also = f"{call} filled {own}'s .grad and also {other}'s (norm {fmt.number(total, 3)})"
        if rec.phase == "discriminator":
            return f"{also}: without detach() the discriminator's loss reaches the generator."
        clear = next((slot for slot in run.ops if slot.phase == other_phase and slot.op == "zero_grad"), None)
        if clear is None:
            return f"{also}, and nothing clears {other}'s before its next step uses it."
        line = run.source.splitlines()[clear.line - 1].strip()
        return f"{also}: the generator's loss runs through {other}; {line} clears that before {other}'s step."
    why = WHY_UNTOUCHED.get(run.spec.loop.fake, "nothing led back to it")
    return f"{call} filled {own}'s .grad only; {other}'s .grad was not touched ({why})."


def _backward_sentence(rec: Any, moment: Moment) -> str:
    nodes = rec.footprint.nodes if rec.footprint is not None else None
    if nodes is not None and moment.info.scenario.model.kind == "rnn":
        # How far back the graph reaches is what detaching the hidden state decides.
        run = moment.info.run(rec.run)
        fresh = rec.fresh_grads or {}
        name = _main_param(fresh, run.names, moment)
        added = f", adding {_amount(fresh[name])} to {name}.grad" if name is not None else ""
        return f"backward() walked {nodes:,} autograd nodes back from the loss{added}."
    return _grads_sentence(rec, moment)


def _grads_sentence(rec: Any, moment: Moment) -> str:
    run = moment.info.run(rec.run)
    names = run.phases.get(rec.phase, run.names) if rec.phase else run.names
    two = _two_models_sentence(rec, moment, names)
    if two is not None:
        return two
    fresh = rec.fresh_grads or {}
    name = _main_param(fresh, names, moment)
    if name is None:
        return "backward() reached none of this run's parameters: every .grad stayed as it was."
    return _backward_main(rec, moment, name, fresh, rec.stale_grads or {})


def _backward_main(rec: Any, moment: Moment, name: str, fresh: dict[str, Any], stale: dict[str, Any]) -> str:
    added = f"backward() added {_amount(fresh[name])} to {name}.grad"
    before = stale.get(name)
    if before is None:
        return f"{added}, which was None, so {name}.grad now holds just this gradient."
    if not np.any(np.asarray(before) != 0):
        return f"{added}, which held zeros, so {name}.grad now holds just this gradient."
    count = moment.backward_count(rec.run)
    spec = moment.info.runs[moment.info.run_index(rec.run)].spec
    if "zero_grad" not in spec.loop.order:
        why = "because zero_grad was skipped"
    elif spec.loop.backwards > 1 and count <= spec.loop.backwards * spec.loop.accumulate:
        why = "because the loop calls backward() again through the same graph, kept by retain_graph=True"
    elif spec.loop.accumulate > 1 and count <= spec.loop.accumulate:
        why = "by design: the micro-batches of one step accumulate"
    else:
        why = "because nothing cleared it in between"
    calls = f"{count} backward calls" if count > 1 else "more than one backward call"
    return f"{added}; {name}.grad now holds the sum of {calls} {why}."


def _step_sentence(rec: Any, moment: Moment) -> str:
    before = moment.previous(rec.run)
    names = moment.info.runs[moment.info.run_index(rec.run)].names
    if before is None:
        return "the optimizer stepped."
    moved = []
    for name in names:
        old, new = before.params.get(name), rec.params.get(name)
        if old is None or new is None:
            continue
        delta = np.asarray(new, dtype=np.float64) - np.asarray(old, dtype=np.float64)
        if np.any(delta != 0) or not np.all(np.isfinite(delta)):
            moved.append((name, delta))
    spec = moment.info.runs[moment.info.run_index(rec.run)].spec
    call = "the manual update" if spec.optimizer.kind == "manual" else _statement(rec, moment)
    if not moved:
        return f"{call} left every parameter where it was (no .grad, or nothing to step on)."
    name, delta = moved[0]
    flat = delta.reshape(-1)
    by = (
        fmt.signed(flat[0])
        if flat.size == 1
        else f"a change of norm {fmt.number(float(np.linalg.norm(flat)), 3)}"
    )
    others = (
        f" (and {len(moved) - 1} more parameter{'s' if len(moved) > 2 else ''})" if len(moved) > 1 else ""
    )
    skipped = [n for n in names if rec.grads.get(n) is None]
    tail = ""
    if skipped:
        tail = f"; {', '.join(skipped)} had .grad None and was skipped"
    elif "zero_grad" not in spec.loop.order and moment.backward_count(rec.run) > 1:
        tail = f", pushed by .grad holding {moment.backward_count(rec.run)} batches' gradients"
    return f"{call} moved {name} by {by}{others}{tail}."


def _capitalised(sentence: str) -> str:
    """Capital first letter, except where the sentence opens with code (``backward()``, ``model.x``)."""
    first = sentence.split(" ", 1)[0]
    if "(" in first or "." in first:
        return sentence
    return sentence[0].upper() + sentence[1:]


def _stop_runs(moment: Moment) -> list[str]:
    """The runs a lesson stop at this moment's op is about: the run it names, then its questions' runs."""
    out: list[str] = []
    for placed in moment.info.stops:
        if placed.tick != moment.tick:
            continue
        stop = placed.stop
        named = [stop.at.run]
        for question in stop.questions:
            named.append(question.read.run if question.read is not None else None)
            named += [_claim_run(choice.claim) for choice in question.choices]
        out += [n for n in named if n is not None]
        out.append(placed.run)
    return out


def _claim_run(claim: Any) -> str | None:
    return claim.run if claim.run is not None else next((p.run for p in claim.parts if p.run), None)


def narrated_runs(moment: Moment, run: str | None = None) -> list[str]:
    """The runs in the order the narration looks for one with an op at ``moment``.

    ``run`` (the one whose code is shown alone) first; then a run whose op raised,
    the most notable thing a moment can hold; then the runs the lesson's stop at
    this op is about; then the lesson's leading runs, then the others.
    """
    lesson = moment.info.scenario.lesson
    names = lesson.order_runs(moment.run_names()) if lesson else moment.run_names()
    raised = [n for n in names if (rec := moment.op_record(n)) is not None and rec.error]
    order = [
        *([run] if run in names else []),
        *raised,
        *(n for n in _stop_runs(moment) if n in names),
        *names,
    ]
    return list(dict.fromkeys(order))


def narrate(moment: Moment | None, run: str | None = None) -> str:
    """The sentence for ``moment``: what its op did in the run :func:`narrated_runs` puts first.

    ``run`` is the run whose code is shown alone (None while every run's is); with
    several runs the sentence names its run.
    """
    if moment is None:
        return "Loading the scenario…"
    if moment.tick < 0:
        summary = moment.info.scenario.summary or moment.info.scenario.title
        return f"Ready: press → (or Space to play) to run the first op. {summary}"
    for name in narrated_runs(moment, run):
        rec = moment.op_record(name)
        if rec is None:
            continue
        prefix = f"{name}: " if len(moment.info.runs) > 1 else ""
        if rec.error:
            said = (rec.error_sentence or rec.error).rstrip(".")
            return f"{prefix}the loop raised {said}, as it would in your program; this run stops here."
        sentence = {
            "zero_grad": _zero_grad_sentence,
            "forward": _forward_sentence,
            "backward": _backward_sentence,
            "step": _step_sentence,
        }[rec.op](rec, moment)
        if rec.diverged and rec.op != "forward":
            sentence = sentence.rstrip(".") + "; the run has diverged (inf or NaN) and stops here."
        return prefix + sentence if prefix else _capitalised(sentence)
    return "Loading the record of this op…"


# ------------------------------------------------------ one node of a backward


def grad_text(grad: Any) -> str:
    """An edge's gradient in a few characters: its values when copied and short, else its norm or shape."""
    if grad is None:
        return ""
    if not isinstance(grad, np.ndarray):
        return _shape(grad)
    if grad.size <= 2:
        return fmt.array(grad, limit=2)
    return f"‖g‖ {_norm(grad)}"


def _shape(grad: Any) -> str:
    return "(" + ", ".join(map(str, grad.shape)) + ")"


def _norm(grad: np.ndarray) -> str:
    return fmt.number(float(np.linalg.norm(grad.astype(np.float64))), 3)


def addition_text(before: np.ndarray | None, added: np.ndarray, after: np.ndarray | None) -> str:
    """What AccumulateGrad did to ``.grad``: ``.grad: -16 + -4 = -20``, or ``.grad: None → -4`` on a
    cleared one."""
    if before is None:
        return f".grad: None → {grad_text(after if after is not None else added)}"
    if added.size <= 2:
        return f".grad: {grad_text(before)} + {grad_text(added)} = {grad_text(after)}"
    return f".grad += {grad_text(added)}"


def backward_node_sentence(graph: Graph, ran: int, additions: Mapping[str, str]) -> str:
    """What happens at the ``ran``-th node of ``graph``'s backward, in PyTorch's execution order.

    The node that ran is named with the nodes that sent it its gradient (those of its parents that
    ran before it), the gradient along the edge where there is one, and, at a parameter's
    ``AccumulateGrad``, the addition into ``.grad`` of ``additions`` (the inspector's ledger).
    """
    order = graph.order
    node = graph.nodes[order[ran - 1]]
    head = f"backward(), node {ran} of {len(order)}: "
    if ran == 1:
        return f"{head}{node.name} starts the traversal at the loss, with the gradient 1."
    before = set(order[: ran - 1])
    sent = [(k, a) for k, (a, b) in enumerate(graph.edges) if b == node.id and a in before]
    senders = list(dict.fromkeys(graph.nodes[a].name for _, a in sent))
    who = " and ".join(senders) if senders else "autograd"
    passes = "pass their gradients" if len(senders) > 1 else "passes the gradient"
    if node.param is not None:
        added = additions.get(node.param)
        into = f": {added.replace('.grad: ', '.grad ', 1)}" if added else ""
        return f"{head}{who} {passes} to AccumulateGrad({node.param}){into}."
    grad = graph.sent[sent[0][0]] if len(sent) == 1 and graph.sent else None
    return f"{head}{who} {passes}{_carried(grad)} to {node.name}."


def _carried(grad: Any) -> str:
    """The gradient along an edge as the sentence says it: its values, norm, or shape."""
    if grad is None:
        return ""
    if not isinstance(grad, np.ndarray):
        return f" of shape {_shape(grad)}"
    if grad.size <= 2:
        return " " + grad_text(grad)
    return f" of norm {_norm(grad)}"
