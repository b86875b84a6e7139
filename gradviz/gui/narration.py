"""One plain sentence about the op at the current moment, written from its records."""

from __future__ import annotations

from typing import Any

import numpy as np

from gradviz.gui import fmt
from gradviz.gui.tape import Moment

OP_CALLS = {"forward": "forward", "backward": "backward()", "step": "step()", "zero_grad": "zero_grad()"}


def _main_param(values: dict[str, Any], names: tuple[str, ...]) -> str | None:
    """The parameter a sentence is about: the first one that holds something."""
    for name in names:
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
    return (
        f"the forward pass computed loss = {fmt.number(loss)}{micro} and built the graph; "
        "no .grad changed yet."
    )


def _accumulates(moment: Moment, run: str) -> bool:
    return moment.info.runs[moment.info.run_index(run)].spec.loop.accumulate > 1


def _backward_sentence(rec: Any, moment: Moment) -> str:
    names = moment.info.runs[moment.info.run_index(rec.run)].names
    fresh = rec.fresh_grads or {}
    stale = rec.stale_grads or {}
    name = _main_param(fresh, names)
    if name is None:
        return "backward() reached none of this run's parameters: every .grad stayed as it was."
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


def narrate(moment: Moment | None) -> str:
    """The sentence for ``moment``: what its op did, in the first run that had one."""
    if moment is None:
        return "Loading the scenario…"
    if moment.tick < 0:
        summary = moment.info.scenario.summary or moment.info.scenario.title
        return f"Ready: press → (or Space to play) to run the first op. {summary}"
    for run in moment.run_names():
        rec = moment.op_record(run)
        if rec is None:
            continue
        prefix = f"{run}: " if len(moment.info.runs) > 1 else ""
        if rec.error:
            return f"{prefix}the loop raised {rec.error}, as it would in your program; this run stops here."
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
