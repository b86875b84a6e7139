"""A scenario's lesson: its point, what the views lead with, and stops with questions.

The ``[lesson]`` table of a scenario file is data, read and checked like every
other table (unknown keys are errors). Its focus says which runs and
parameters lead (shown first and kept in view in the ``.grad`` inspector),
which quantities lead (the inspector's columns and the readouts), and which
plane the loss surface uses, or that the surface is left out because it
teaches nothing here.

Its ``[[lesson.stops]]`` are moments of the run, in time order, each with a
caption of what to look at and questions asked just before the moment's op
and revealed after it. A question never holds its answer: a number question
names what to read (:class:`Read`), and each choice of a choice question makes
a claim (:class:`Claim`) that :mod:`gradviz.engine.quiz` checks against the
real records. Nothing in the table is executed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gradviz.engine.errors import ScenarioError, quoted

if TYPE_CHECKING:
    from gradviz.engine.scenario import _Table

LESSON_KEYS = ("point", "runs", "params", "show", "surface", "stops")
# What a lesson can put first: the inspector's columns (value, .grad, what this backward added,
# what was already there, the optimizer's state) and the readouts of lr, memory and loss.
QUANTITIES = ("value", "grad", "fresh", "stale", "state", "lr", "memory", "loss")
# How the loss surface is drawn: the usual choice, none at all, or a plane kind.
SURFACE_CHOICES = ("auto", "none", "random", "pca", "three-points")

OPS = ("zero_grad", "forward", "backward", "step")
STOP_KEYS = ("at", "caption", "hide_future", "questions")
AT_KEYS = ("run", "iteration", "op", "nth")
KINDS = ("number", "choice")
# What a number question may read, after the stop's op: a parameter's value, its .grad,
# what this backward added (fresh) or found there (stale), the learning rate, the loss, the
# bytes autograd holds saved for backward, the autograd nodes a backward walked.
READS = ("grad", "value", "fresh", "stale", "lr", "loss", "saved", "nodes")
# Reads of the run as a whole: they name no parameter.
RUN_READS = ("loss", "saved", "nodes")
# Quantities that read one parameter (the others read the run).
PARAM_READS = ("grad", "value", "fresh", "stale")
# A claim is a table with exactly one of these keys, its verb.
VERBS = ("changed", "moved", "filled", "cleared", "dirty", "none", "zeros", "same", "raised", "all")
# The verbs whose value names parameters: a name, a module prefix ("G"), "*", or a list of them.
PARAM_VERBS = ("moved", "filled", "cleared", "dirty", "none", "zeros")
# What `changed` compares, and what `same` compares between two runs.
CHANGES = ("lr", "weights", "grad", "state", "param_memory", "grad_memory")
SAMES = ("weights", "grad")
# Over what span `changed` and `moved` compare: across the stop's op, since its iteration
# began, since the run's start. When `cleared`, `dirty`, `none` and `zeros` look: after the
# stop's op or just before it.
SINCE = ("stop", "iteration", "start")
WHEN = ("after", "before")
# The keys each verb takes besides itself, `run` and `not`.
VERB_KEYS: dict[str, tuple[str, ...]] = {
    "changed": ("since",),
    "moved": ("since",),
    "filled": ("only",),
    "cleared": ("when",),
    "dirty": ("when",),
    "none": ("when",),
    "zeros": ("when",),
    "same": ("as",),
    "raised": (),
    "all": (),
}
ALL_PARAMS = "*"
MIN_CHOICES, MAX_CHOICES = 2, 5
LABELS = "abcde"
# Texts are shown on one line: a caption or question in the window, a line in the terminal.
TEXT_LIMITS = {"caption": 300, "ask": 300, "text": 200, "explain": 600}
POINT_LIMIT = 600

ErrorMaker = Callable[..., ScenarioError]


@dataclass(frozen=True)
class At:
    """Where a stop is: an op of a run in an iteration, or (``op`` None) the iteration's end.

    ``nth`` counts which occurrence of ``op`` in the iteration, from 1 (a run that
    accumulates calls ``backward`` several times); ``run`` None is the lesson's
    first run.
    """

    iteration: int
    op: str | None = None
    nth: int = 1
    run: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.run is not None:
            out["run"] = self.run
        out["iteration"] = self.iteration
        if self.op is not None:
            out["op"] = self.op
            if self.nth != 1:
                out["nth"] = self.nth
        return out


@dataclass(frozen=True)
class Read:
    """What a number question reads after the stop's op, in ``run`` (None: the stop's run)."""

    quantity: str
    run: str | None = None
    param: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"quantity": self.quantity}
        if self.run is not None:
            out["run"] = self.run
        if self.param is not None:
            out["param"] = self.param
        return out


@dataclass(frozen=True)
class Claim:
    """A statement about the real run at a stop, true or false once the stop's op has run.

    Attributes
    ----------
    verb:
        One of :data:`VERBS`.
    target:
        What the verb is about: a :data:`CHANGES` or :data:`SAMES` word, or parameters
        (a name, a module prefix, ``"*"``, or a tuple of them); empty for ``all``.
    run:
        The run it is about; None: the stop's run.
    since, when, only, other:
        The verb's modifiers (``other`` is the file's ``as``: the run ``same`` compares with).
    negate:
        The file's ``not``: the claim is that the statement is false.
    parts:
        The claims an ``all`` claim joins.
    """

    verb: str
    target: str | tuple[str, ...] = ""
    run: str | None = None
    since: str = "stop"
    when: str = "after"
    only: bool = False
    other: str | None = None
    negate: bool = False
    parts: tuple[Claim, ...] = ()

    @property
    def targets(self) -> tuple[str, ...]:
        return self.target if isinstance(self.target, tuple) else (self.target,)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.verb == "all":
            out["all"] = [p.to_dict() for p in self.parts]
        elif self.verb == "raised":
            out["raised"] = True
        else:
            out[self.verb] = list(self.target) if isinstance(self.target, tuple) else self.target
        if self.run is not None:
            out["run"] = self.run
        if self.since != "stop":
            out["since"] = self.since
        if self.when != "after":
            out["when"] = self.when
        if self.only:
            out["only"] = True
        if self.other is not None:
            out["as"] = self.other
        if self.negate:
            out["not"] = True
        return out


@dataclass(frozen=True)
class Choice:
    """One answer of a choice question: its text, its claim, and why it is wrong when it is."""

    text: str
    claim: Claim
    explain: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"text": self.text, "claim": self.claim.to_dict()}
        if self.explain:
            out["explain"] = self.explain
        return out


@dataclass(frozen=True)
class Question:
    """A question asked just before a stop's op and answered by the real run after it."""

    ask: str
    kind: Literal["number", "choice"]
    read: Read | None = None
    choices: tuple[Choice, ...] = ()

    @property
    def labels(self) -> tuple[str, ...]:
        """The letters the choices are answered with: a, b, c..."""
        return tuple(LABELS[: len(self.choices)])

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ask": self.ask, "kind": self.kind}
        if self.read is not None:
            out["read"] = self.read.to_dict()
        if self.choices:
            out["choices"] = [c.to_dict() for c in self.choices]
        return out


@dataclass(frozen=True)
class Stop:
    """A moment of the lesson: where it is, what to look at, whether later ops stay hidden.

    ``scenario`` is set only for stops of a lesson file of its own (the interview
    questions): the built-in scenario whose run shows the answers.
    """

    at: At
    caption: str
    hide_future: bool = True
    questions: tuple[Question, ...] = ()
    scenario: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.scenario is not None:
            out["scenario"] = self.scenario
        out["at"] = self.at.to_dict()
        out["caption"] = self.caption
        if not self.hide_future:
            out["hide_future"] = False
        if self.questions:
            out["questions"] = [q.to_dict() for q in self.questions]
        return out


@dataclass(frozen=True)
class Lesson:
    """What a scenario teaches and where the views put the eye.

    Attributes
    ----------
    point:
        The lesson in one sentence.
    runs:
        Runs that lead, in order (the others follow); empty: every run, in the file's order.
    params:
        Parameters that lead in every run, in order; empty: the model's order.
    show:
        Quantities that lead, from :data:`QUANTITIES`.
    surface:
        ``"auto"`` (the usual plane), ``"none"`` (no surface: it teaches nothing here),
        a plane kind, or two parameter names: the plane along those two parameters.
    stops:
        The moments the lesson stops at, in time order, with their questions.
    """

    point: str = ""
    runs: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    show: tuple[str, ...] = ()
    surface: str | tuple[str, str] = "auto"
    stops: tuple[Stop, ...] = ()

    @property
    def surface_axes(self) -> tuple[str, str] | None:
        """The two parameters the surface is drawn over, when the lesson names them."""
        return self.surface if isinstance(self.surface, tuple) else None

    @property
    def questions(self) -> int:
        """How many questions the stops ask."""
        return sum(len(s.questions) for s in self.stops)

    def order_runs(self, names: Sequence[str]) -> list[str]:
        """``names`` with the leading runs first."""
        return [*(n for n in self.runs if n in names), *(n for n in names if n not in self.runs)]

    def order_params(self, names: Sequence[str]) -> list[str]:
        """``names`` with the leading parameters first."""
        return [*(n for n in self.params if n in names), *(n for n in names if n not in self.params)]

    def leads(self, quantity: str) -> bool:
        """Whether ``quantity`` is one the lesson puts first."""
        return quantity in self.show

    def first_run(self, names: Sequence[str]) -> str:
        """The run a stop without ``run`` is placed at: the first leading run, else the first run."""
        return self.order_runs(names)[0]

    def to_dict(self) -> dict[str, Any]:
        """The lesson as TOML-ready data (only what is set)."""
        out: dict[str, Any] = {"point": self.point}
        for key in ("runs", "params", "show"):
            if getattr(self, key):
                out[key] = list(getattr(self, key))
        if self.surface != "auto":
            out["surface"] = list(self.surface) if isinstance(self.surface, tuple) else self.surface
        if self.stops:
            out["stops"] = [s.to_dict() for s in self.stops]
        return out


def read_lesson(t: _Table, run_names: Sequence[str], error: Any) -> Lesson:
    """Read and check a ``[lesson]`` table; ``error(path, found, allowed)`` makes the sentence.

    Parameter names are checked later, against the real model (see :func:`check_params`);
    where the stops fall, against the runs' loops (see :func:`gradviz.engine.quiz.resolve_stops`).
    """
    point = t.get("point", "str", "")
    if not point.strip() or len(point) > POINT_LIMIT or not point.isprintable():
        raise error(
            t.key("point"),
            point,
            f"one sentence saying what the scenario shows ({POINT_LIMIT} printable "
            "characters at most, on one line)",
        )
    runs = tuple(t.get("runs", "strs", ()))
    for i, name in enumerate(runs):
        if name not in run_names:
            raise error(f"{t.key('runs')}[{i}]", name, "a run of this scenario: " + ", ".join(run_names))
    params = tuple(t.get("params", "strs", ()))
    show = tuple(t.get("show", "strs", ()))
    for i, q in enumerate(show):
        if q not in QUANTITIES:
            raise error(f"{t.key('show')}[{i}]", q, "one of " + ", ".join(QUANTITIES))
    raw = t.data.get("surface", "auto")
    t.used.add("surface")
    surface: str | tuple[str, str]
    if isinstance(raw, list):
        if len(raw) != 2 or not all(isinstance(v, str) for v in raw) or raw[0] == raw[1]:
            raise error(
                t.key("surface"),
                raw,
                "two different parameter names, or one of " + ", ".join(SURFACE_CHOICES),
            )
        surface = (raw[0], raw[1])
    elif raw in SURFACE_CHOICES:
        surface = str(raw)
    else:
        raise error(
            t.key("surface"), raw, "one of " + ", ".join(SURFACE_CHOICES) + ", or two parameter names"
        )
    for key, values in (("runs", runs), ("params", params), ("show", show)):
        if len(set(values)) != len(values):
            raise error(t.key(key), list(values), "each name at most once")
    stops = read_stops(t, "stops", run_names, error)
    t.finish(LESSON_KEYS)
    return Lesson(point=point, runs=runs, params=params, show=show, surface=surface, stops=stops)


# ---------------------------------------------------------------- stops


def _tables(t: _Table, name: str, error: ErrorMaker, allowed: str | None = None) -> list[tuple[Any, str]]:
    """The tables of an array of tables ``name`` in ``t``, each with its field path."""
    t.used.add(name)
    raw = t.data.get(name, [])
    if not isinstance(raw, list):
        header = re.sub(r"\[\d+\]", "", t.key(name))
        raise error(t.key(name), raw, allowed or f"an array of tables ([[{header}]])")
    return [(item, f"{t.key(name)}[{i}]") for i, item in enumerate(raw)]


def _sub(t: _Table, data: Any, path: str) -> _Table:
    return type(t)(data, path, t.where)


def _missing(t: _Table, name: str, allowed: str) -> ScenarioError:
    return ScenarioError(f"{t.where}: {t.key(name)}: missing; allowed: {allowed}.")


def _text(t: _Table, name: str, error: ErrorMaker, required: bool = True) -> str:
    """A caption, question or explanation: one line of printable text."""
    limit = TEXT_LIMITS[name]
    if not t.has(name):
        if required:
            raise _missing(t, name, f"a text of 1 to {limit} printable characters")
        t.used.add(name)
        return ""
    value = t.get(name, "str", "")
    if not value.strip() or len(value) > limit or not value.isprintable():
        raise error(t.key(name), value, f"1 to {limit} printable characters, on one line")
    return str(value.strip())


def _run_name(t: _Table, name: str, run_names: Sequence[str], error: ErrorMaker) -> str | None:
    if not t.has(name):
        t.used.add(name)
        return None
    value = t.get(name, "str", None)
    if value not in run_names:
        raise error(t.key(name), value, "a run of this scenario: " + ", ".join(run_names))
    return str(value)


def read_stops(
    t: _Table, name: str, run_names: Sequence[str], error: ErrorMaker, extra: Sequence[str] = ()
) -> tuple[Stop, ...]:
    """Read the array of stop tables ``name`` of ``t``; ``extra`` keys are left to the caller."""
    stops = []
    for data, path in _tables(t, name, error):
        st = _sub(t, data, path)
        stops.append(read_stop(st, run_names, error))
        st.finish((*extra, *STOP_KEYS))
    return tuple(stops)


def read_stop(t: _Table, run_names: Sequence[str], error: ErrorMaker) -> Stop:
    """Read one stop table (its keys are left for the caller to finish)."""
    if not t.has("at"):
        raise _missing(t, "at", "a table such as { iteration = 0, op = 'backward' }")
    at = _read_at(t.table("at"), run_names, error)
    caption = _text(t, "caption", error)
    hide = t.get("hide_future", "bool", True)
    questions = []
    for data, path in _tables(t, "questions", error):
        questions.append(_read_question(_sub(t, data, path), run_names, error))
    return Stop(at=at, caption=caption, hide_future=hide, questions=tuple(questions))


def _read_at(t: _Table, run_names: Sequence[str], error: ErrorMaker) -> At:
    run = _run_name(t, "run", run_names, error)
    if not t.has("iteration"):
        raise _missing(t, "iteration", "the iteration the stop is in, a whole number from 0")
    iteration = t.get("iteration", "int", 0)
    if iteration < 0:
        raise error(t.key("iteration"), iteration, "a whole number from 0")
    op = t.choice("op", OPS, OPS[0]) if t.has("op") else None
    nth = t.get("nth", "int", 1)
    if t.has("nth") and op is None:
        raise ScenarioError(
            f"{t.where}: {t.key('nth')}: counts occurrences of an op, but no op is given; "
            "allowed: nth together with op."
        )
    if nth < 1:
        raise error(t.key("nth"), nth, "a whole number from 1 (the first call of that op in the iteration)")
    t.finish(AT_KEYS)
    return At(iteration=iteration, op=op, nth=nth, run=run)


def _read_question(t: _Table, run_names: Sequence[str], error: ErrorMaker) -> Question:
    ask = _text(t, "ask", error)
    if not t.has("kind"):
        raise _missing(t, "kind", "'number' or 'choice'")
    kind = t.choice("kind", KINDS, "choice")
    if kind == "number":
        if not t.has("read"):
            raise _missing(t, "read", "a table such as { quantity = 'grad', param = 'weight' }")
        read = _read_read(t.table("read"), run_names, error)
        t.finish(("ask", "kind", "read"), " for a number question")
        return Question(ask=ask, kind="number", read=read)
    choices = []
    texts: dict[str, str] = {}
    for data, path in _tables(t, "choices", error):
        ct = _sub(t, data, path)
        choice = _read_choice(ct, run_names, error)
        key = choice.text.casefold()
        if key in texts:
            raise ScenarioError(
                f"{t.where}: {ct.key('text')}: found {quoted(choice.text)}, the text of {texts[key]} "
                "too; allowed: a different text for each choice."
            )
        texts[key] = path.rsplit(".", 1)[-1]
        choices.append(choice)
    if not MIN_CHOICES <= len(choices) <= MAX_CHOICES:
        count = f"{len(choices)} choice" + ("" if len(choices) == 1 else "s")
        raise ScenarioError(
            f"{t.where}: {t.key('choices')}: found {count}; allowed: {MIN_CHOICES} to {MAX_CHOICES} "
            "choices ([[...choices]] tables)."
        )
    t.finish(("ask", "kind", "choices"), " for a choice question")
    return Question(ask=ask, kind="choice", choices=tuple(choices))


def _read_read(t: _Table, run_names: Sequence[str], error: ErrorMaker) -> Read:
    if not t.has("quantity"):
        raise _missing(t, "quantity", "one of " + ", ".join(READS))
    quantity = t.choice("quantity", READS, READS[0])
    run = _run_name(t, "run", run_names, error)
    param = t.get("param", "str", None)
    if quantity in PARAM_READS and param is None:
        raise _missing(t, "param", f"the parameter to read ({quantity} is a parameter's)")
    if quantity in RUN_READS and param is not None:
        raise ScenarioError(
            f"{t.where}: {t.key('param')}: {quantity} is the run's, not a parameter's; allowed: no param."
        )
    t.finish(("quantity", "run", "param"))
    return Read(quantity=quantity, run=run, param=param)


def _read_choice(t: _Table, run_names: Sequence[str], error: ErrorMaker) -> Choice:
    text = _text(t, "text", error)
    if not t.has("claim"):
        raise _missing(t, "claim", "a table such as { changed = 'lr' } that the real run makes true or false")
    claim = _read_claim(t.table("claim"), run_names, error)
    explain = _text(t, "explain", error, required=False)
    t.finish(("text", "claim", "explain"))
    return Choice(text=text, claim=claim, explain=explain)


def _read_claim(t: _Table, run_names: Sequence[str], error: ErrorMaker, inner: bool = False) -> Claim:
    verbs = [v for v in VERBS if v in t.data]
    if len(verbs) != 1:
        allowed = [v for v in VERBS if not (inner and v == "all")]
        raise error(t.path, t.data, "a table with exactly one of " + ", ".join(allowed))
    verb = verbs[0]
    negate = t.get("not", "bool", False)
    if verb == "all":
        if inner:
            raise error(t.key("all"), t.data["all"], "claims other than all inside all")
        parts = []
        for data, path in _tables(t, "all", error, "a list of two or more claims"):
            parts.append(_read_claim(_sub(t, data, path), run_names, error, inner=True))
        if len(parts) < 2:
            raise error(t.key("all"), t.data["all"], "a list of two or more claims")
        t.finish(("all", "not"), " for a claim 'all'")
        return Claim(verb="all", negate=negate, parts=tuple(parts))
    run = _run_name(t, "run", run_names, error)
    target: str | tuple[str, ...]
    if verb == "changed":
        target = t.choice("changed", CHANGES, CHANGES[0])
    elif verb == "same":
        target = t.choice("same", SAMES, SAMES[0])
    elif verb == "raised":
        # The claim that the stop's op raised; `not = true` claims it ran through.
        if t.get("raised", "bool", True) is not True:
            raise error(t.key("raised"), False, "true (and `not = true` for an op that runs through)")
        target = ""
    else:
        target = _targets(t, verb, error)
    since = t.choice("since", SINCE, "stop") if verb in ("changed", "moved") else "stop"
    when = t.choice("when", WHEN, "after") if verb in ("cleared", "dirty", "none", "zeros") else "after"
    only = t.get("only", "bool", False) if verb == "filled" else False
    other = None
    if verb == "same":
        if not t.has("as"):
            raise _missing(t, "as", "the run to compare with: " + ", ".join(run_names))
        other = _run_name(t, "as", run_names, error)
        if other is not None and other == run:
            raise error(t.key("as"), other, "another run than " + quoted(run))
    t.finish((verb, "run", *VERB_KEYS[verb], "not"), f" for a claim {verb!r}")
    return Claim(
        verb=verb, target=target, run=run, since=since, when=when, only=only, other=other, negate=negate
    )


def _targets(t: _Table, verb: str, error: ErrorMaker) -> str | tuple[str, ...]:
    t.used.add(verb)
    raw = t.data[verb]
    allowed = "a parameter name, a module prefix such as 'G', '*' (every parameter), or a list of them"
    if isinstance(raw, str) and raw:
        return raw
    if not isinstance(raw, list) or not raw or not all(isinstance(v, str) and v for v in raw):
        raise error(t.key(verb), raw, allowed)
    if len(set(raw)) != len(raw):
        raise error(t.key(verb), raw, "each name at most once")
    return tuple(raw)


# ---------------------------------------------------------------- parameters


def expand(target: str, names: Sequence[str]) -> list[str]:
    """The parameters a claim's name stands for: itself, a module's (``"G"``), or every one (``"*"``)."""
    if target == ALL_PARAMS:
        return list(names)
    if target in names:
        return [target]
    return [n for n in names if n.startswith(target + ".")]


def expand_all(targets: Sequence[str], names: Sequence[str]) -> list[str]:
    """Every parameter ``targets`` stand for, in the model's order."""
    chosen = {n for t in targets for n in expand(t, names)}
    return [n for n in names if n in chosen]


def stop_paths(stop: Stop, path: str) -> Iterator[tuple[str, Question, Choice | None, Read | Claim]]:
    """Every read and claim of a stop with its field path (the claims of ``all`` one by one too)."""
    for qi, q in enumerate(stop.questions):
        qpath = f"{path}.questions[{qi}]"
        if q.read is not None:
            yield f"{qpath}.read", q, None, q.read
        for ci, choice in enumerate(q.choices):
            cpath = f"{qpath}.choices[{ci}].claim"
            yield cpath, q, choice, choice.claim
            for pi, part in enumerate(choice.claim.parts):
                yield f"{cpath}.all[{pi}]", q, choice, part


def _prefixes(names: Sequence[str]) -> list[str]:
    return sorted({n.split(".")[0] for n in names if "." in n})


def check_stop_params(stop: Stop, names: Sequence[str], where: str, path: str) -> None:
    """Check that every parameter a stop's reads and claims name exists in the model."""
    for field, _q, _c, item in stop_paths(stop, path):
        if isinstance(item, Read):
            if item.param is not None and item.param not in names:
                raise ScenarioError(
                    f"{where}: {field}.param: found {quoted(item.param)}, which is no parameter of "
                    f"this model; allowed: {', '.join(names)}."
                )
            continue
        if item.verb not in PARAM_VERBS:
            continue
        listed = isinstance(item.target, tuple)
        for i, target in enumerate(item.targets):
            if expand(target, names):
                continue
            shown = f"{field}.{item.verb}" + (f"[{i}]" if listed else "")
            groups = _prefixes(names)
            prefix = f", a module prefix ({', '.join(groups)})" if groups else ""
            raise ScenarioError(
                f"{where}: {shown}: found {quoted(target)}, which is no parameter of this model; "
                f"allowed: {', '.join(names)}{prefix} or '*'."
            )


def check_params(lesson: Lesson, names: Sequence[str], where: str) -> None:
    """Check that every parameter the lesson names exists in the model (named ``names``)."""
    # A leading name may also be a module's ("G"): its parameters lead together.
    modules = {n.rsplit(".", k)[0] for n in names for k in range(1, n.count(".") + 1)}
    named = [("lesson.params", p, modules) for p in lesson.params]
    if lesson.surface_axes:
        named += [("lesson.surface", p, set()) for p in lesson.surface_axes]
    for path, name, also in named:
        if name not in names and name not in also:
            raise ScenarioError(
                f"{where}: {path}: found {name!r}, which is no parameter of this model; "
                f"allowed: {', '.join(names)}."
            )
    for i, stop in enumerate(lesson.stops):
        check_stop_params(stop, names, where, f"lesson.stops[{i}]")
