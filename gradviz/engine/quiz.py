"""Lesson stops on the lab's clock, and questions answered by the real run.

A stop (:class:`gradviz.engine.lesson.Stop`) is placed at one tick of the lab:
its questions are asked while that tick is next (the state just before the
stop's op) and revealed once it has run. Nothing here knows Qt: the window,
presentation mode and ``gradviz quiz`` call the same functions.

- :func:`resolve_stops` places a lab's lesson stops on its ticks (and checks them);
- :func:`step_to` performs the lab's ticks up to and including a stop's;
- :func:`outcome` computes, from the records, which claims hold or what a read gives,
  each with the real numbers as a sentence;
- :func:`judge` compares an answer with an outcome; :func:`reveal` does both;
- :func:`lesson_quiz`, :func:`interview_quiz`, :func:`prepare` and :func:`check_lesson`
  step whole labs to every stop; :func:`run_quiz` asks on a terminal (or a pipe).
"""

from __future__ import annotations

import functools
import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import resources
from typing import IO, Any

import numpy as np

from gradviz.engine.errors import ScenarioError, quoted
from gradviz.engine.footprint import can_count_saved
from gradviz.engine.lab import Lab
from gradviz.engine.lesson import (
    LABELS,
    OPS,
    STOP_KEYS,
    Claim,
    Question,
    Read,
    Stop,
    check_stop_params,
    expand_all,
    read_stop,
    stop_paths,
)
from gradviz.engine.loop import OpSlot
from gradviz.engine.record import Snapshot
from gradviz.engine.scenario import Scenario, _error, _Table, load_builtin
from gradviz.gui import fmt

# A number answer is right within this relative tolerance, or this absolute one near zero.
REL_TOLERANCE = 1e-3
ABS_TOLERANCE = 1e-6
# Two runs hold the same weights when they agree to float32 rounding of sums taken in another order.
SAME_RTOL, SAME_ATOL = 1e-5, 1e-6
# Parameters listed one by one in a sentence; more are summed up.
LISTED = 4
INTERVIEW = "interview"
# Reads that count (bytes, nodes): answers shown whole, with thousands separated.
COUNTS = ("saved", "nodes")


# ---------------------------------------------------------------- placing stops


@dataclass(frozen=True)
class PlacedStop:
    """A stop on the lab's clock.

    Attributes
    ----------
    stop:
        The stop as the file gives it.
    path:
        Its field path (``lesson.stops[1]``), for messages.
    where:
        The file (or built-in) it comes from, for messages.
    tick:
        The lab tick of the stop's op: ask while ``lab.tick == tick`` (the op is next),
        reveal once ``lab.tick > tick``.
    run:
        The run the stop is placed at (the lesson's first run unless it names one).
    slot:
        That run's op at ``tick``; ``None`` where it has none (an iteration's end it waits through).
    label:
        Where the stop is, in words: ``iteration 1, reference: optimizer.zero_grad()``.
    """

    stop: Stop
    path: str
    where: str
    tick: int
    run: str
    slot: OpSlot | None
    label: str

    @property
    def iteration(self) -> int:
        return self.stop.at.iteration


def _run_index(lab: Lab, run: str) -> int:
    return [r.name for r in lab.runs].index(run)


def _slot(lab: Lab, run: str, tick: int) -> OpSlot | None:
    return lab.schedule[tick % lab.ticks_per_iteration][_run_index(lab, run)]


def _statement(lab: Lab, run: str, slot: OpSlot) -> str:
    """The call an op stands for, as the code panel shows it (the forward pass by its name)."""
    if slot.op == "forward":
        return "the forward pass"
    lines = lab.runs[_run_index(lab, run)].program.lines
    return lines[slot.line - 1].strip() if 0 < slot.line <= len(lines) else f"{slot.op}()"


def _ordinal(n: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")


def place_stop(lab: Lab, stop: Stop, path: str, where: str, default_run: str | None = None) -> PlacedStop:
    """Place ``stop`` on ``lab``'s ticks and check what only the runs' loops can tell.

    Raises :class:`ScenarioError` (one sentence naming ``where`` and the field) for a
    stop past the scenario's iterations, an op its run does not perform (that often),
    or a read or claim that needs an op the run does not perform there.
    """
    at = stop.at
    names = [r.name for r in lab.runs]
    run = at.run or default_run or names[0]
    iterations = lab.scenario.iterations
    if at.iteration >= iterations:
        plural = "" if iterations == 1 else "s"
        raise ScenarioError(
            f"{where}: {path}.at.iteration: found {at.iteration}, past the scenario's "
            f"{iterations} iteration{plural}; allowed: 0 to {iterations - 1}."
        )
    r = names.index(run)
    tpi = lab.ticks_per_iteration
    if at.op is None:
        index = tpi - 1
    else:
        ops = [s for s in lab.runs[r].program.ops if s.op == at.op]
        if not ops:
            performed = [op for op in OPS if any(s.op == op for s in lab.runs[r].program.ops)]
            raise ScenarioError(
                f"{where}: {path}.at.op: found {quoted(at.op)}, which run {quoted(run)} does not "
                f"perform; allowed: {', '.join(performed)}."
            )
        if at.nth > len(ops):
            times = "once" if len(ops) == 1 else f"{len(ops)} times"
            raise ScenarioError(
                f"{where}: {path}.at.nth: found {at.nth}, but run {quoted(run)} calls {at.op} {times} "
                f"an iteration; allowed: {'1' if len(ops) == 1 else f'1 to {len(ops)}'}."
            )
        wanted = ops[at.nth - 1]
        index = next(i for i, row in enumerate(lab.schedule) if row[r] is wanted)
    tick = at.iteration * tpi + index
    slot = lab.schedule[index][r]
    if at.op is None:
        label = f"the end of iteration {at.iteration}"
    else:
        assert slot is not None
        count = sum(1 for s in lab.runs[r].program.ops if s.op == at.op)
        nth = f" ({_ordinal(at.nth)} of {count})" if count > 1 else ""
        who = f"{run}: " if len(names) > 1 else ""
        label = f"iteration {at.iteration}, {who}{_statement(lab, run, slot)}{nth}"
    placed = PlacedStop(stop=stop, path=path, where=where, tick=tick, run=run, slot=slot, label=label)
    check_stop_params(stop, lab.runs[0].names, where, path)
    _check_fields(lab, placed)
    return placed


def _check_fields(lab: Lab, placed: PlacedStop) -> None:
    """What each read and claim needs of the runs' ops and the model, at this stop."""
    where = placed.where
    layout = lab.runs[0].layout
    sizes = dict(zip(layout.names, layout.sizes, strict=True))
    for field, _q, _c, item in stop_paths(placed.stop, placed.path):
        run = item.run or placed.run
        slot = _slot(lab, run, placed.tick)
        needs_backward = (isinstance(item, Read) and item.quantity in ("fresh", "stale", "nodes")) or (
            isinstance(item, Claim) and item.verb == "filled"
        )
        if needs_backward and (slot is None or slot.op != "backward"):
            doing = "has no op" if slot is None else f"calls {_statement(lab, run, slot)}"
            what = f"{field}.quantity" if isinstance(item, Read) else f"{field}.filled"
            raise ScenarioError(
                f"{where}: {what}: run {quoted(run)} {doing} at this stop, not backward(); "
                "allowed: fresh, stale, nodes and filled at a stop where that run calls backward()."
            )
        if isinstance(item, Read):
            if item.quantity == "saved" and not can_count_saved(lab.runs[_run_index(lab, run)].loop.order):
                raise ScenarioError(
                    f"{where}: {field}.quantity: run {quoted(run)} steps between its forward and its "
                    "backward, where the bytes saved for backward are not counted; allowed: saved in a "
                    "run whose step() comes after its backward()."
                )
            if item.param is not None and sizes[item.param] != 1:
                raise ScenarioError(
                    f"{where}: {field}.param: found {quoted(item.param)}, which holds "
                    f"{sizes[item.param]} numbers; allowed: a parameter of one element."
                )
            optimizers = list(lab.runs[_run_index(lab, run)].optimizers)
            if item.quantity == "lr" and item.param is None and len(optimizers) > 1:
                raise ScenarioError(
                    f"{where}: {field}.param: missing: run {quoted(run)} has {len(optimizers)} "
                    f"optimizers ({', '.join(optimizers)}); allowed: a parameter, to read its optimizer's lr."
                )
        elif item.verb == "same" and item.other == run:
            raise ScenarioError(
                f"{where}: {field}.as: found {quoted(item.other)}, the run the claim is about; "
                "allowed: another run to compare with."
            )


def resolve_stops(lab: Lab) -> tuple[PlacedStop, ...]:
    """Place every stop of ``lab``'s lesson on its ticks; stops must come in time order.

    The window calls this once per lab; an empty tuple where the scenario has no stops.
    """
    lesson = lab.scenario.lesson
    if lesson is None:
        return ()
    where = lab.scenario.where
    first = lesson.first_run([r.name for r in lab.runs])
    placed: list[PlacedStop] = []
    for i, stop in enumerate(lesson.stops):
        here = place_stop(lab, stop, f"lesson.stops[{i}]", where, first)
        if placed and here.tick <= placed[-1].tick:
            before = placed[-1]
            same = here.tick == before.tick
            raise ScenarioError(
                f"{where}: {here.path}.at: {here.label} is "
                + ("the same moment as" if same else "before")
                + f" {before.path} ({before.label}); allowed: "
                + ("one stop per moment, with several questions." if same else "stops in time order.")
            )
        placed.append(here)
    return tuple(placed)


def step_to(lab: Lab, placed: PlacedStop) -> None:
    """Perform the lab's ticks up to and including the stop's (or until every run stopped)."""
    while lab.tick <= placed.tick and not lab.stopped:
        if not lab.advance(placed.tick + 1):
            break


# ---------------------------------------------------------------- the moment of a stop


def _values(values: dict[str, Any], names: Sequence[str], suffix: str = "") -> str:
    """Parameters' values (or, with ``suffix`` ``.grad``, gradients) as text: each one for a few,
    a summary for many."""
    if _listed(values, names):
        return ", ".join(f"{n}{suffix} {_grad_text(values[n])}" for n in names)
    present = [np.asarray(values[n], dtype=np.float64).reshape(-1) for n in names if values[n] is not None]
    if not present:
        return f"None for all {len(names)} parameters"
    flat = np.concatenate(present)
    return (
        f"{flat.size} values in {len(present)} parameters, norm {fmt.number(float(np.linalg.norm(flat)), 3)}"
    )


def _listed(values: dict[str, Any], names: Sequence[str]) -> bool:
    """Whether sentences list these parameters one by one (a few small ones) or sum them up."""
    sizes = [np.size(values[n]) for n in names if values[n] is not None]
    return len(names) <= LISTED and sum(sizes) <= 2 * LISTED


def _grad_text(value: Any) -> str:
    if value is None:
        return "None"
    flat = np.asarray(value, dtype=np.float64).reshape(-1)
    if flat.size and not np.any(flat):
        return "0" if flat.size == 1 else "all zeros"
    return fmt.array(value)


def _and(items: Sequence[str]) -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _or(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def _group_text(chosen: Sequence[str], names: Sequence[str]) -> str:
    """Parameters by name, a whole module's as ``G's 4 parameters``."""
    parts: list[str] = []
    done: set[str] = set()
    for name in chosen:
        if name in done:
            continue
        prefix = name.split(".")[0] if "." in name else ""
        group = [n for n in names if prefix and n.startswith(prefix + ".")]
        if prefix.isalpha() and len(group) > 1 and all(n in chosen for n in group):
            parts.append(f"{prefix}'s {len(group)} parameters")
            done.update(group)
        else:
            parts.append(name)
            done.add(name)
    return _and(parts)


def _differ(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return (a is None) != (b is None)
    return not np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)


def _memory(snap: Snapshot) -> dict[str, int]:
    return {"params": snap.param_flat.nbytes, "grads": snap.grad_flat.nbytes, "state": snap.state_flat.nbytes}


def _bytes(n: int) -> str:
    return f"{n:,} bytes"


class _Moment:
    """The records of every run around one stop of a lab that has performed it."""

    def __init__(self, lab: Lab, placed: PlacedStop) -> None:
        if lab.tick <= placed.tick:
            raise ValueError(
                f"the lab is at tick {lab.tick}; the stop's op at tick {placed.tick} has not run yet"
            )
        self.lab = lab
        self.placed = placed
        self.tick = placed.tick
        self.names = list(lab.runs[0].names)
        self.several = len(lab.runs) > 1

    def state(self, run: str, tick: int) -> tuple[Snapshot, float | None]:
        rec = self.lab.record_at(run, tick) if tick >= 0 else None
        return (rec.snapshot, rec.loss) if rec is not None else (self.lab.initial(run), None)

    def after(self, run: str) -> Snapshot:
        return self.state(run, self.tick)[0]

    def before(self, run: str) -> Snapshot:
        return self.state(run, self.tick - 1)[0]

    def base(self, run: str, since: str) -> Snapshot:
        if since == "start":
            return self.lab.initial(run)
        if since == "iteration":
            return self.state(run, self.placed.iteration * self.lab.ticks_per_iteration - 1)[0]
        return self.before(run)

    def record(self, run: str) -> Any:
        """The run's record of its op at the stop's tick; ``None`` where it had none."""
        rec = self.lab.record_at(run, self.tick)
        return rec if rec is not None and rec.tick == self.tick else None

    def call(self, run: str) -> str | None:
        rec = self.record(run)
        slot = _slot(self.lab, run, self.tick)
        return None if rec is None or slot is None else _statement(self.lab, run, slot)

    def who(self, run: str) -> str:
        return f"{run}: " if self.several else ""

    def stays(self, run: str, since: str) -> str:
        if since == "start":
            return "since the start"
        if since == "iteration":
            return f"since iteration {self.placed.iteration} began"
        call = self.call(run)
        return f"before and after {call}" if call else "at this moment (this run has no op here)"

    def goes(self, run: str, since: str) -> str:
        if since != "stop":
            return self.stays(run, since)
        return f"in {self.call(run) or 'this moment'}"

    def looking(self, run: str, when: str) -> str:
        call = self.call(run)
        return f"{when} {call}" if call else "at this moment"

    def lr_of(self, run: str, snap: Snapshot, param: str | None) -> tuple[str, float | None]:
        """The learning rate as text, and as a number where one optimizer (or ``param``'s) is meant."""
        lrs = dict(snap.lr)
        if param is not None and len(lrs) > 1:
            phases = self.lab.runs[_run_index(self.lab, run)].phases.values()
            owner = next((p.optimizer for p in phases if param in p.params), None)
            if owner in lrs:
                return f"{owner}'s lr {fmt.number(lrs[owner])}", lrs[owner]
        if len(lrs) == 1:
            value = next(iter(lrs.values()))
            return fmt.number(value), value
        return ", ".join(f"{k} {fmt.number(v)}" for k, v in lrs.items()), None


# ---------------------------------------------------------------- claims


def _claim(m: _Moment, claim: Claim) -> tuple[bool, tuple[str, ...]]:
    """Whether ``claim`` holds in the real run, and the real numbers that say so (a sentence
    for each part of an ``all``)."""
    if claim.verb == "all":
        results = [_claim(m, part) for part in claim.parts]
        truth = all(t for t, _ in results)
        facts = tuple(f for _, fs in results for f in fs)
    else:
        run = claim.run or m.placed.run
        truth, fact = _VERBS[claim.verb](m, claim, run)
        facts = (fact if claim.verb == "same" else m.who(run) + fact,)
    return (not truth if claim.negate else truth), facts


def _changed(m: _Moment, claim: Claim, run: str) -> tuple[bool, str]:
    a, b = m.base(run, claim.since), m.after(run)
    what = claim.target
    if what == "lr":
        changed = dict(a.lr) != dict(b.lr)
        x, y = m.lr_of(run, a, None)[0], m.lr_of(run, b, None)[0]
        return changed, (
            f"lr goes from {x} to {y} {m.goes(run, claim.since)}"
            if changed
            else f"lr stays {x} {m.stays(run, claim.since)}"
        )
    if what == "weights":
        moved = [n for n in m.names if _differ(a.params[n], b.params[n])]
        listed = _listed(a.params, m.names)
        if not moved:
            if listed:
                return False, f"the weights stay at {_values(a.params, m.names)} {m.stays(run, claim.since)}"
            return False, (
                f"the weights ({_values(a.params, m.names)}) stay as they were {m.stays(run, claim.since)}"
            )
        if listed:
            return True, (
                f"the weights go from {_values(a.params, m.names)} to {_values(b.params, m.names)} "
                f"{m.goes(run, claim.since)}"
            )
        return True, f"{len(moved)} of {len(m.names)} parameters change {m.goes(run, claim.since)}"
    if what == "grad":
        changed = any(_differ(a.grads[n], b.grads[n]) for n in m.names)
        x, y = _values(a.grads, m.names, ".grad"), _values(b.grads, m.names, ".grad")
        if changed:
            return True, f".grad goes from {x} to {y} {m.goes(run, claim.since)}"
        return False, f".grad stays {x} {m.stays(run, claim.since)}"
    if what == "state":
        return _state_change(m, run, claim.since, a, b)
    key = "params" if what == "param_memory" else "grads"
    mx, my = _memory(a), _memory(b)
    name = {"params": "parameter memory", "grads": ".grad memory"}[key]
    if key == "params" and mx["grads"] != my["grads"]:
        aside = f" (.grad memory goes from {_bytes(mx['grads'])} to {_bytes(my['grads'])})"
    elif key == "grads" and mx["params"] == my["params"]:
        aside = f" (parameters keep their {_bytes(my['params'])})"
    else:
        aside = ""
    if mx[key] != my[key]:
        span = m.goes(run, claim.since)
        return True, f"{name} goes from {_bytes(mx[key])} to {_bytes(my[key])} {span}{aside}"
    return False, f"{name} stays {_bytes(mx[key])} {m.stays(run, claim.since)}{aside}"


def _state_change(m: _Moment, run: str, since: str, a: Snapshot, b: Snapshot) -> tuple[bool, str]:
    """Whether the optimizer's state changed, with each changed tensor where there are few."""
    x, y = a.state, b.state
    changes = []
    for n in m.names:
        for key in sorted(set(x[n]) | set(y[n])):
            old, new = x[n].get(key), y[n].get(key)
            if not _differ(old, new):
                continue
            if old is None:
                changes.append(f"{n}'s {key} appears ({_grad_text(new)})")
            elif new is None:
                changes.append(f"{n}'s {key} goes away")
            else:
                changes.append(f"{n}'s {key} goes from {_grad_text(old)} to {_grad_text(new)}")
    if not changes:
        size = _bytes(_memory(b)["state"])
        return False, f"the optimizer's state stays as it was ({size}) {m.stays(run, since)}"
    if len(changes) > LISTED:
        return True, f"the optimizer's state changes {m.goes(run, since)}: {len(changes)} of its entries"
    return True, f"the optimizer's state changes {m.goes(run, since)}: {_and(changes)}"


def _moved(m: _Moment, claim: Claim, run: str) -> tuple[bool, str]:
    a, b = m.base(run, claim.since), m.after(run)
    names = expand_all(claim.targets, m.names)
    parts = []
    for n in names:
        if _differ(a.params[n], b.params[n]):
            parts.append(f"{n} goes from {_grad_text(a.params[n])} to {_grad_text(b.params[n])}")
        else:
            parts.append(f"{n} stays {_grad_text(a.params[n])}")
    truth = all(_differ(a.params[n], b.params[n]) for n in names)
    span = m.goes(run, claim.since) if truth else m.stays(run, claim.since)
    if len(names) > LISTED:
        moved = sum(_differ(a.params[n], b.params[n]) for n in names)
        return truth, f"{moved} of {_group_text(names, m.names)} change {span}"
    return truth, f"{_and(parts)} {span}"


def _filled(m: _Moment, claim: Claim, run: str) -> tuple[bool, str]:
    rec = m.record(run)
    fresh = (rec.fresh_grads if rec is not None else None) or {}
    filled = [n for n in m.names if fresh.get(n) is not None]
    named = expand_all(claim.targets, m.names)
    truth = all(n in filled for n in named) and (not claim.only or set(filled) == set(named))
    call = m.call(run) or "this backward"
    if not filled:
        return truth, f"{call} put a gradient into no parameter's .grad"
    rest = [n for n in m.names if n not in filled]
    tail = f"; {_group_text(rest, m.names)} got nothing from it" if rest else ""
    return truth, f"{call} put a gradient into the .grad of {_group_text(filled, m.names)}{tail}"


_GRAD_TESTS = {
    "cleared": lambda g: g is None or not np.any(g),
    "dirty": lambda g: g is not None and bool(np.any(g)),
    "none": lambda g: g is None,
    "zeros": lambda g: g is not None and not np.any(g),
}


def _grad_state(m: _Moment, claim: Claim, run: str) -> tuple[bool, str]:
    snap = m.after(run) if claim.when == "after" else m.before(run)
    names = expand_all(claim.targets, m.names)
    test = _GRAD_TESTS[claim.verb]
    truth = all(test(snap.grads[n]) for n in names)
    texts = {n: _grad_text(snap.grads[n]) for n in names}
    if len(set(texts.values())) == 1 and len(names) > 1:
        if len(names) == len(m.names):
            items = f"every .grad is {texts[names[0]]}"
        else:
            items = f".grad is {texts[names[0]]} for {_group_text(names, m.names)}"
    elif len(names) > LISTED:
        kinds = {k: [n for n in names if texts[n] == k] for k in ("None", "all zeros", "0")}
        shown = [f"{len(v)} None" if k == "None" else f"{len(v)} zero" for k, v in kinds.items() if v]
        held = len(names) - sum(len(v) for v in kinds.values())
        items = f"of {len(names)} .grad tensors, " + _and([*shown, f"{held} hold values"])
    else:
        items = _and([f"{n}.grad is {texts[n]}" for n in names])
    fact = f"{m.looking(run, claim.when)}, {items}"
    rec = m.record(run)
    if claim.when == "after":
        old = m.before(run)
        if any(_differ(old.grads[n], snap.grads[n]) for n in names):
            fact += f" (before it: {_values(old.grads, names, '.grad')})"
    elif rec is not None and rec.op == "backward":
        fresh = rec.fresh_grads or {}
        added = {n: fresh.get(n) for n in names}
        if len(names) == 1:
            fact += f"; it then adds {_grad_text(added[names[0]])}, leaving {_grad_text(rec.grads[names[0]])}"
        else:
            fact += f"; it then adds {_values(added, names)}, leaving {_values(rec.grads, names, '.grad')}"
    return truth, fact


def _same(m: _Moment, claim: Claim, run: str) -> tuple[bool, str]:
    other = claim.other or run
    a, b = m.after(run), m.after(other)
    source = (lambda s: s.params) if claim.target == "weights" else (lambda s: s.grads)
    x, y = source(a), source(b)
    truth = True
    largest = 0.0
    for n in m.names:
        if x[n] is None or y[n] is None:
            truth = truth and x[n] is None and y[n] is None
            continue
        p, q = np.asarray(x[n], dtype=np.float64), np.asarray(y[n], dtype=np.float64)
        truth = truth and bool(np.allclose(p, q, rtol=SAME_RTOL, atol=SAME_ATOL))
        if p.size:
            largest = max(largest, float(np.max(np.abs(p - q))))
    what = "weights" if claim.target == "weights" else ".grad"
    when = m.looking(run, "after")
    verdict = "the same to float32 rounding" if truth else f"they differ by up to {fmt.number(largest, 3)}"
    if len(m.names) <= LISTED:
        return truth, (
            f"{when}, {run}'s {what} {'is' if what == '.grad' else 'are'} {_values(x, m.names)} and "
            f"{other}'s {_values(y, m.names)}: {verdict}"
        )
    return truth, f"{when}, {run}'s {what} and {other}'s are {verdict}"


def _raised(m: _Moment, claim: Claim, run: str) -> tuple[bool, str]:
    rec = m.record(run)
    call = m.call(run) or "this moment"
    if rec is None:
        return False, f"{call}: this run performs no op here"
    if rec.error:
        return True, f"{call} raised {rec.error_sentence} The run stops there, as your program would."
    return False, f"{call} ran through without an error"


_VERBS = {
    "changed": _changed,
    "moved": _moved,
    "filled": _filled,
    "cleared": _grad_state,
    "dirty": _grad_state,
    "none": _grad_state,
    "zeros": _grad_state,
    "same": _same,
    "raised": _raised,
}


# ---------------------------------------------------------------- reads


def _number(value: Any) -> float | None:
    return None if value is None else float(np.asarray(value, dtype=np.float64).reshape(-1)[0])


def _read(m: _Moment, read: Read) -> tuple[float | None, str]:
    """The number a read gives after the stop's op, and the sentence that shows where it comes from."""
    run = read.run or m.placed.run
    who = m.who(run)
    after, loss = m.state(run, m.tick)
    q, p = read.quantity, read.param
    rec = m.record(run)
    if q == "loss":
        text = f"the loss is {fmt.number(loss)}"
        call = m.call(run)
        return loss, who + (f"{text} after {call}" if call else text)
    if q in ("saved", "nodes"):
        return _footprint_read(m, run, q)
    if q == "lr":
        before = m.before(run)
        x, value = m.lr_of(run, before, p)
        y, value = m.lr_of(run, after, p)
        if x == y:
            return value, f"{who}lr stays {y} {m.stays(run, 'stop')}"
        return value, f"{who}lr goes from {x} to {y} {m.goes(run, 'stop')}"
    assert p is not None
    if q == "value":
        old, new = _number(m.before(run).params[p]), _number(after.params[p])
        assert old is not None and new is not None
        if old == new:
            return new, f"{who}{p} stays {fmt.number(new)} {m.stays(run, 'stop')}"
        slot = _slot(m.lab, run, m.tick)
        why = ""
        if slot is not None and slot.op == "step":
            lr = m.lr_of(run, after, p)[0]
            why = f"; lr {lr}, {p}.grad {_grad_text(after.grads[p])}"
        return new, (
            f"{who}{p} goes from {fmt.number(old)} to {fmt.number(new)} {m.goes(run, 'stop')} "
            f"({fmt.signed(new - old, 4)}{why})"
        )
    grad = after.grads[p]
    if rec is not None and rec.op == "backward":
        fresh = (rec.fresh_grads or {}).get(p)
        stale = (rec.stale_grads or {}).get(p)
        now, added, there = _grad_text(grad), _grad_text(fresh), _grad_text(stale)
        if q == "fresh":
            return _number(
                fresh
            ), f"{who}this backward added {added} to {p}.grad ({there} already there, {now} now)"
        if q == "stale":
            return _number(
                stale
            ), f"{who}before this backward {p}.grad held {there}; it added {added}, so {now} now"
        if fresh is None:
            text = f"{p}.grad stays {now}: this backward gave it nothing"
        elif stale is None:
            text = f"{p}.grad is {now}: it was None, and this backward put {added} there"
        elif not np.any(stale):
            text = f"{p}.grad is {now}: it held zeros, and this backward added {added}"
        else:
            text = f"{p}.grad is {now} = {there} already there + {added} from this backward"
        return _number(grad), who + text
    earlier = m.before(run).grads[p]
    call = m.call(run)
    text = f"{who}{p}.grad is {_grad_text(grad)}" + (f" after {call}" if call else "")
    if _differ(earlier, grad):
        text += f" (it was {_grad_text(earlier)} before)"
    return _number(grad), text


def _footprint_read(m: _Moment, run: str, q: str) -> tuple[float | None, str]:
    """Bytes saved for backward after the stop's op, or the autograd nodes its backward walked."""
    rec = m.record(run)
    foot = rec.footprint if rec is not None else None
    call = m.call(run) or "this moment"
    who = m.who(run)
    if foot is None:
        return None, f"{who}{call}: nothing was measured here"
    if q == "saved":
        if foot.saved is None:
            return None, f"{who}this loop's order leaves the bytes saved for backward uncounted"
        return float(foot.saved), f"{who}after {call}, autograd holds {_bytes(foot.saved)} saved for backward"
    if foot.nodes is None:
        return None, f"{who}{call} walked no graph"
    return float(foot.nodes), f"{who}{call} walked {foot.nodes:,} autograd nodes, from the loss to the leaves"


# ---------------------------------------------------------------- outcomes and reveals


@dataclass(frozen=True)
class Outcome:
    """What the real run says about one question at its stop.

    ``truths`` and ``choice_facts``: for a choice question, whether each choice's claim
    holds and the real numbers behind it; ``value`` and ``fact``: for a number question,
    the number read and where it comes from.
    """

    question: Question
    truths: tuple[bool, ...] = ()
    choice_facts: tuple[tuple[str, ...], ...] = ()
    value: float | None = None
    fact: str = ""

    @property
    def correct(self) -> tuple[int, ...]:
        """The choices whose claims hold (exactly one in a checked lesson)."""
        return tuple(i for i, t in enumerate(self.truths) if t)

    @property
    def facts(self) -> tuple[str, ...]:
        """The real numbers as sentences, each once."""
        found = (
            (self.fact,) if self.question.kind == "number" else [f for fs in self.choice_facts for f in fs]
        )
        return tuple(dict.fromkeys(f for f in found if f))

    @property
    def answer(self) -> str:
        """The right answer as text: ``a) ...`` or the number."""
        q = self.question
        if q.kind == "number":
            if self.value is not None and q.read is not None and q.read.quantity in COUNTS:
                return f"{int(self.value):,}"
            return fmt.number(self.value)
        if not self.correct:
            return "none of the choices holds in this run"
        return " / ".join(f"{q.labels[i]}) {q.choices[i].text}" for i in self.correct)


def outcome(lab: Lab, placed: PlacedStop, question: Question) -> Outcome:
    """Compute ``question``'s answer from ``lab``'s records; the lab must have performed the stop."""
    m = _Moment(lab, placed)
    if question.kind == "number":
        assert question.read is not None
        value, fact = _read(m, question.read)
        return Outcome(question, value=value, fact=fact)
    results = [_claim(m, c.claim) for c in question.choices]
    return Outcome(question, truths=tuple(t for t, _ in results), choice_facts=tuple(f for _, f in results))


@dataclass(frozen=True)
class Reveal:
    """What to show once a question's stop has run.

    Attributes
    ----------
    right:
        Whether the answer given was right.
    answered:
        False when no answer was given.
    given:
        The answer given, as shown (``b) It resets the learning rate.``, ``-16``); empty if none.
    answer:
        The right answer, as shown.
    explanation:
        Why the answer given is wrong: the chosen choice's ``explain``, or that it is no
        choice, no number, or not the real value; empty when right.
    facts:
        The real numbers, as sentences.
    chosen:
        The index of the choice given, if one was.
    correct:
        The indices of the choices whose claims hold.
    value:
        The real value of a number question.
    """

    right: bool
    answered: bool
    given: str
    answer: str
    explanation: str
    facts: tuple[str, ...]
    chosen: int | None = None
    correct: tuple[int, ...] = ()
    value: float | None = None


def _parse_number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def judge(out: Outcome, answer: str | int | float | None) -> Reveal:
    """Compare an answer with what the real run says.

    ``answer`` is the text typed (a choice's letter or text, case and surrounding spaces
    ignored; a number), a choice's index, a number, or ``None`` for no answer.
    """
    q = out.question

    def made(right: bool, given: str, why: str, chosen: int | None = None) -> Reveal:
        return Reveal(
            right=right,
            answered=bool(given),
            given=given,
            answer=out.answer,
            explanation=why,
            facts=out.facts,
            chosen=chosen,
            correct=out.correct,
            value=out.value,
        )

    if answer is None or (isinstance(answer, str) and not answer.strip()):
        return made(False, "", "no answer")
    if q.kind == "number":
        number = _parse_number(answer.strip()) if isinstance(answer, str) else float(answer)
        if number is None or not math.isfinite(number):
            shown = quoted(answer.strip(), 40) if isinstance(answer, str) else str(answer)
            return made(False, shown, f"{shown} is not a number")
        right = out.value is not None and math.isclose(
            number, out.value, rel_tol=REL_TOLERANCE, abs_tol=ABS_TOLERANCE
        )
        given = fmt.number(number, 6)
        return made(right, given, "" if right else f"you answered {given}; the real value is {out.answer}")
    if isinstance(answer, str):
        text = answer.strip().casefold()
        found = [i for i, c in enumerate(q.choices) if text in (q.labels[i], c.text.casefold())]
        if not found:
            shown = quoted(answer.strip(), 40)
            return made(False, shown, f"{shown} is not one of {_or(q.labels)}")
        chosen = found[0]
    else:
        chosen = int(answer)
        if not 0 <= chosen < len(q.choices):
            raise IndexError(f"choice {chosen} of a question with {len(q.choices)} choices")
    right = chosen in out.correct
    given = f"{q.labels[chosen]}) {q.choices[chosen].text}"
    why = "" if right else (q.choices[chosen].explain or f"the real run does not bear out {given}")
    return made(right, given, why, chosen)


def reveal(lab: Lab, placed: PlacedStop, question: Question, answer: str | int | float | None) -> Reveal:
    """The reveal of ``question`` at ``placed`` for ``answer``, from ``lab``'s records."""
    return judge(outcome(lab, placed, question), answer)


def check_outcome(placed: PlacedStop, index: int, out: Outcome) -> None:
    """Refuse, in one sentence, a question the real run cannot answer as the lesson means it.

    Exactly one choice's claim must hold; every false one explains why it is wrong and the
    true one does not; a number question's read must give a number.
    """
    where, path = placed.where, f"{placed.path}.questions[{index}]"
    q = out.question
    if q.kind == "number":
        if out.value is None:
            raise ScenarioError(
                f"{where}: {path}.read: gives no number at {placed.label} ({out.fact}); "
                "allowed: a read whose value is a number there."
            )
        return
    true = out.correct
    if len(true) != 1:
        found = (
            "no choice's claim is true"
            if not true
            else "the claims of "
            + _and([f"choices[{i}]" for i in true])
            + (" are both true" if len(true) == 2 else " are all true")
        )
        raise ScenarioError(
            f"{where}: {path}.choices: {found} in the real run at {placed.label}; "
            "allowed: exactly one choice whose claim is true."
        )
    for i, choice in enumerate(q.choices):
        if i in true and choice.explain:
            raise ScenarioError(
                f"{where}: {path}.choices[{i}].explain: explains a wrong answer, but this choice's "
                f"claim is true in the real run at {placed.label}; allowed: no explain on the right choice."
            )
        if i not in true and not choice.explain:
            raise ScenarioError(
                f"{where}: {path}.choices[{i}].explain: missing: this choice's claim is false in the "
                f"real run at {placed.label}; allowed: a sentence saying why it is wrong."
            )


# ---------------------------------------------------------------- quizzes


@dataclass(frozen=True)
class QuizStop:
    """A stop of a quiz with the scenario whose run answers its questions."""

    scenario: Scenario
    stop: Stop
    path: str
    where: str
    default_run: str | None = None


@dataclass(frozen=True)
class Quiz:
    """Stops to ask, in order: one scenario's lesson, or the interview questions over several."""

    name: str
    title: str
    point: str
    stops: tuple[QuizStop, ...]
    # A lesson's stops share one run and come in time order; the interview's each have their own.
    one_run: bool = True

    @property
    def questions(self) -> int:
        return sum(len(s.stop.questions) for s in self.stops)


def lesson_quiz(scenario: Scenario, *, need_questions: bool = True) -> Quiz:
    """The quiz of a scenario's lesson; a :class:`ScenarioError` if it asks nothing."""
    lesson = scenario.lesson
    stops = lesson.stops if lesson is not None else ()
    if need_questions and not any(s.questions for s in stops):
        raise ScenarioError(
            f"{scenario.where}: asks no questions: its [lesson] has no [[lesson.stops.questions]]; "
            "`gradviz list` shows the scenarios that do."
        )
    items = tuple(
        QuizStop(scenario, stop, f"lesson.stops[{i}]", scenario.where) for i, stop in enumerate(stops)
    )
    return Quiz(scenario.name, scenario.title, lesson.point if lesson else "", items)


def loads_lesson_file(text: str, where: str, name: str = INTERVIEW) -> Quiz:
    """Read a lesson file of its own: a ``title``, a ``point`` and ``[[stops]]`` that each name
    the built-in ``scenario`` whose real run answers them. Checked like a scenario's lesson."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{where}: not valid TOML: {exc}.") from None
    error = functools.partial(_error, where)
    top = _Table(data, "", where)
    title = top.get("title", "str", name)
    point = top.get("point", "str", "")
    top.used.add("stops")
    raw = top.data.get("stops", [])
    if not isinstance(raw, list) or not raw:
        raise error("stops", raw, "a non-empty array of tables ([[stops]])")
    items = []
    for i, entry in enumerate(raw):
        st = _Table(entry, f"stops[{i}]", where)
        if not st.has("scenario"):
            raise ScenarioError(
                f"{where}: {st.key('scenario')}: missing; allowed: a built-in scenario's name."
            )
        scenario_name = st.get("scenario", "str", "")
        try:
            scenario = load_builtin(scenario_name)
        except ScenarioError:
            from gradviz.engine.scenario import builtin_names

            raise error(
                st.key("scenario"), scenario_name, "a built-in scenario: " + ", ".join(builtin_names())
            ) from None
        runs = [r.name for r in scenario.runs]
        stop = replace(read_stop(st, runs, error), scenario=scenario_name)
        st.finish(("scenario", *STOP_KEYS))
        first = scenario.lesson.first_run(runs) if scenario.lesson else runs[0]
        items.append(QuizStop(scenario, stop, st.path, where, first))
    top.finish(("title", "point", "stops"))
    return Quiz(name, title, point, tuple(items), one_run=False)


def interview_quiz() -> Quiz:
    """The interview questions on ``zero_grad()``, each answered by a built-in scenario's run."""
    text = (resources.files("gradviz.engine") / "lessons" / f"{INTERVIEW}.toml").read_text("utf-8")
    return loads_lesson_file(text, f"built-in lesson {INTERVIEW!r}")


@dataclass(frozen=True)
class Prepared:
    """A quiz stop placed and stepped to, with the real run's outcome of each question."""

    item: QuizStop
    placed: PlacedStop
    outcomes: tuple[Outcome, ...]


def prepare(quiz: Quiz, *, check: bool = True, device: str | None = None) -> list[Prepared]:
    """Step each stop's lab to it and compute every question's outcome.

    With ``check`` every outcome is checked (:func:`check_outcome`): the first problem
    is raised as a :class:`ScenarioError`. ``device`` overrides the scenarios' own.
    """
    done: list[Prepared] = []
    lab: Lab | None = None
    placed_all: tuple[PlacedStop, ...] = ()
    for n, item in enumerate(quiz.stops):
        scenario = item.scenario if device is None else item.scenario.with_overrides(device=device)
        if not quiz.one_run or lab is None:
            # A lesson's stops share one lab; each interview stop starts its own (their
            # moments come in no order, and from several scenarios).
            lab = Lab(scenario)
            if quiz.one_run:
                placed_all = resolve_stops(lab)
        placed = (
            placed_all[n]
            if quiz.one_run
            else place_stop(lab, item.stop, item.path, item.where, item.default_run)
        )
        step_to(lab, placed)
        if lab.tick <= placed.tick:
            raise ScenarioError(
                f"{item.where}: {item.path}: every run stopped (diverged or failed) before {placed.label}; "
                "allowed: a stop the runs reach."
            )
        outs = tuple(outcome(lab, placed, q) for q in item.stop.questions)
        if check:
            for i, out in enumerate(outs):
                check_outcome(placed, i, out)
        done.append(Prepared(item, placed, outs))
    return done


def check_lesson(scenario: Scenario) -> tuple[int, int]:
    """Step ``scenario``'s lab to every lesson stop and check each question against the real run.

    Returns the number of stops and of questions; raises :class:`ScenarioError` with one
    sentence naming the file and the field for the first problem.
    """
    quiz = lesson_quiz(scenario, need_questions=False)
    if not quiz.stops:
        return 0, 0
    prepare(quiz, device="cpu")
    return len(quiz.stops), quiz.questions


# ---------------------------------------------------------------- the terminal


def _write(out: IO[str], line: str = "") -> None:
    out.write(line + "\n")


def ask_lines(question: Question) -> list[str]:
    """The question as the terminal prints it: the question, its labelled choices, how to answer."""
    lines = [question.ask]
    if question.kind == "number":
        return [*lines, "type a number"]
    lines += [f"  {label}) {c.text}" for label, c in zip(question.labels, question.choices, strict=True)]
    return [*lines, f"type {_or(question.labels)}"]


def reveal_lines(result: Reveal) -> list[str]:
    """A reveal as the terminal prints it: correct or why not, the answer, the real numbers."""
    if result.right:
        lines = ["correct"]
    elif not result.answered:
        lines = [f"no answer; the answer: {result.answer}"]
    else:
        lines = [f"wrong: {result.explanation}"]
        if "real value" not in result.explanation:
            lines.append(f"the answer: {result.answer}")
    if result.facts:
        lines.append("in the real run:")
        lines += [f"  - {f}" for f in result.facts]
    return lines


def run_quiz(quiz: Quiz, infile: IO[str], out: IO[str], *, device: str | None = None) -> tuple[int, int]:
    """Ask every question of ``quiz`` on ``out``, one answer a line from ``infile``.

    The end of input is no answer for every question left (their reveals are still
    printed). Plain lines only: a prompt is written only where both ends are a terminal.
    Returns (right answers, questions); the last line printed is ``score: K/N``.
    """
    prepared = prepare(quiz, device=device)
    total = sum(len(p.outcomes) for p in prepared)
    prompt = _isatty(infile) and _isatty(out)
    _write(out, f"{quiz.name}: {quiz.title}" if quiz.title != quiz.name else quiz.name)
    if quiz.point:
        _write(out, quiz.point)
    score = number = 0
    ended = False
    for p in prepared:
        for i, (question, result) in enumerate(zip(p.item.stop.questions, p.outcomes, strict=True)):
            number += 1
            _write(out)
            where = f"{p.item.scenario.name}, {p.placed.label}" if not quiz.one_run else p.placed.label
            _write(out, f"Question {number} of {total} ({where})")
            if i == 0:
                _write(out, p.item.stop.caption)
            for line in ask_lines(question):
                _write(out, line)
            answer: str | None = None
            if not ended:
                if prompt:
                    out.write("> ")
                out.flush()
                line = infile.readline()
                if line == "":
                    ended = True
                else:
                    answer = line.rstrip("\r\n")
            verdict = judge(result, answer)
            score += verdict.right
            for line in reveal_lines(verdict):
                _write(out, line)
    _write(out)
    _write(out, f"score: {score}/{total}")
    out.flush()
    return score, total


def _isatty(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def quiz_counts(scenario: Scenario) -> tuple[int, int]:
    """How many stops and questions a scenario's lesson has (for listings; nothing is run)."""
    lesson = scenario.lesson
    return (0, 0) if lesson is None else (len(lesson.stops), lesson.questions)


__all__ = [
    "LABELS",
    "Outcome",
    "PlacedStop",
    "Prepared",
    "Quiz",
    "QuizStop",
    "Reveal",
    "ask_lines",
    "check_lesson",
    "check_outcome",
    "interview_quiz",
    "judge",
    "lesson_quiz",
    "loads_lesson_file",
    "outcome",
    "place_stop",
    "prepare",
    "resolve_stops",
    "reveal",
    "reveal_lines",
    "run_quiz",
    "step_to",
]
