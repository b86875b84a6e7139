"""Scenarios: typed, validated descriptions of a lab, loaded from and saved to TOML.

A scenario file is data. Loading parses TOML and checks every field against
what the engine accepts; nothing in the file is ever executed.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from gradviz.engine.errors import ScenarioError, one_line, quoted
from gradviz.engine.files import NotAFileError, read_bounded
from gradviz.engine.lesson import Lesson, read_lesson

Op = Literal["zero_grad", "forward", "backward", "step"]
OPS: tuple[Op, ...] = ("zero_grad", "forward", "backward", "step")
ZERO_GRAD_VIA = ("optimizer", "model", "manual")
FAKE_MODES = ("detach", "no_grad", "none")
# What an RNN's loop does with the hidden state between chunks of the sequence.
HIDDEN_MODES = ("detach", "keep")
# How many times backward() may run through one forward's graph.
MAX_BACKWARDS = 4
DEVICES = ("cpu", "cuda", "mps", "auto")
OPTIMIZER_KINDS = ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "manual")
# Switches that pick an implementation rather than a behaviour: they would make
# runs differ for reasons the app cannot show, so files may not set them.
IMPLEMENTATION_SWITCHES = ("foreach", "fused", "capturable", "differentiable")

MODEL_KEYS: dict[str, tuple[str, ...]] = {
    "linear": ("bias", "loss"),
    "linear-offset": ("bias", "loss", "offset_every"),
    "logistic": (),
    "mlp": ("widths", "activation"),
    "quadratic": ("condition", "start"),
    "rosenbrock": ("start",),
    "saddle": ("start",),
    "gan": ("hidden",),
    "rnn": ("hidden",),
}
DATA_FOR_MODEL: dict[str, tuple[str, ...]] = {
    "linear": ("line",),
    "linear-offset": ("line",),
    "logistic": ("blobs",),
    "mlp": ("wave", "blobs", "line"),
    "quadratic": ("none",),
    "rosenbrock": ("none",),
    "saddle": ("none",),
    "gan": ("gaussian",),
    "rnn": ("sequence",),
}
DATA_KEYS: dict[str, tuple[str, ...]] = {
    "line": ("n", "batch_size", "shuffle", "noise", "slope", "intercept", "x"),
    "blobs": ("n", "batch_size", "shuffle", "noise", "separation"),
    "wave": ("n", "batch_size", "shuffle", "noise"),
    "gaussian": ("n", "batch_size", "shuffle", "mean", "std"),
    "sequence": ("n", "batch_size", "noise"),
    "none": (),
}
LOOP_KEYS = (
    "order", "zero_grad", "set_to_none", "accumulate", "scale_loss", "fake",
    "backwards", "retain_graph", "hidden",
)  # fmt: skip
# The largest magnitude a float32 holds: parameters, data and optimizer arithmetic
# are float32, and torch refuses (mid-run) a Python float it cannot convert.
FLOAT32_MAX = 3.4028234663852886e38


def number_text(value: float) -> str:
    """A bound as messages write it: ``1,000,000``, ``1e6``, ``3.4e38``, ``0``."""
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    text = f"{value:.3g}"
    mantissa, _, exponent = text.partition("e")
    return mantissa if not exponent else f"{mantissa}e{int(exponent)}"


@dataclass(frozen=True)
class Bounds:
    """A closed range of numbers and how messages name it: one definition for files and options."""

    low: float
    high: float
    what: str = "a number"

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high

    def allowed(self) -> str:
        return f"{self.what} from {number_text(self.low)} to {number_text(self.high)}"


SEEDS = Bounds(0, 2**63 - 1, "a whole number")
ITERATIONS = Bounds(1, 1_000_000, "a whole number")
LEARNING_RATES = Bounds(0.0, 1e6, "a learning rate")
FLOATS = Bounds(-FLOAT32_MAX, FLOAT32_MAX, "a number")
# The command line's own ranges (files have no such fields): an export or a snapshot steps
# the window's lab, which keeps every op, so how far they go is bounded.
SNAPSHOT_OPS = Bounds(0, 10_000, "a whole number of ops")
EXPORT_ITERATIONS = Bounds(1, 10_000, "a whole number of iterations")
EXPORT_OPS = Bounds(1, 100_000, "a whole number of ops")
# GIF delays are whole hundredths of a second up to 655.35 s; 0.1 fps is 10 s a frame.
FRAME_RATES = Bounds(0.1, 60.0, "frames per second")
# What an init table may name: parameter names as PyTorch writes them (weight, 0.bias, D.2.weight).
PARAMETER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.]{0,99}")
# Nested lists in init: a parameter has at most two axes here; a few more are refused with a sentence.
MAX_INIT_DEPTH = 4


@dataclass(frozen=True)
class ModelSpec:
    """Which model to build and its shape. Keys not used by ``kind`` are rejected."""

    kind: str = "linear"
    bias: bool = True
    loss: str = "mse"
    offset_every: int = 1
    widths: tuple[int, ...] = (32, 32)
    activation: str = "tanh"
    condition: float = 10.0
    start: tuple[float, float] | None = None
    hidden: int = 8
    init: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DataSpec:
    """The synthetic dataset: its kind, size, batching and shape parameters."""

    kind: str = "line"
    n: int = 64
    batch_size: int = 16
    shuffle: bool = True
    noise: float = 0.1
    slope: float = 2.0
    intercept: float = 0.5
    x: tuple[float, ...] | None = None
    separation: float = 2.0
    mean: float = 3.0
    std: float = 0.5


@dataclass(frozen=True)
class OptimizerSpec:
    """A ``torch.optim`` class (or ``manual``) with its keyword arguments."""

    kind: str = "SGD"
    lr: float = 0.05
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LoopSpec:
    """One iteration of the training loop, as the user would write it."""

    order: tuple[Op, ...] = ("zero_grad", "forward", "backward", "step")
    zero_grad: str = "optimizer"
    set_to_none: bool = True
    accumulate: int = 1
    scale_loss: bool = False
    fake: str = "detach"
    backwards: int = 1
    retain_graph: bool = False
    hidden: str = "detach"


@dataclass(frozen=True)
class RunSpec:
    """One run of a lab: a name, a note, its loop and its optimizer."""

    name: str
    note: str
    loop: LoopSpec
    optimizer: OptimizerSpec


@dataclass(frozen=True)
class Scenario:
    """A whole lab: model, data, and one or more runs stepped in lock-step."""

    name: str
    title: str
    summary: str
    seed: int
    iterations: int
    device: str
    model: ModelSpec
    data: DataSpec
    runs: tuple[RunSpec, ...]
    path: Path | None = None
    lesson: Lesson | None = None

    def with_overrides(
        self,
        *,
        lr: float | None = None,
        seed: int | None = None,
        iterations: int | None = None,
        device: str | None = None,
    ) -> Scenario:
        """Return a copy with the command line's overrides applied and checked."""
        where = self.where
        runs = self.runs
        if lr is not None:
            _check_lr(lr, where, "--lr")
            runs = tuple(replace(r, optimizer=replace(r.optimizer, lr=lr)) for r in runs)
            for r in runs:
                _check_optimizer(r.optimizer, where, "--lr")
        if seed is not None:
            check_bounds(seed, SEEDS, None, "--seed")
        if iterations is not None:
            check_bounds(iterations, ITERATIONS, None, "--iterations")
        if device is not None and device not in DEVICES:
            raise ScenarioError(
                f"--device {quoted(device)} is not a device gradviz knows; allowed: {', '.join(DEVICES)}."
            )
        return replace(
            self,
            runs=runs,
            seed=self.seed if seed is None else seed,
            iterations=self.iterations if iterations is None else iterations,
            device=self.device if device is None else device,
        )

    @property
    def where(self) -> str:
        """How messages name this scenario: its file, or its name."""
        return shown_path(self.path) if self.path is not None else quoted(self.name, bare=True)

    def to_dict(self) -> dict[str, Any]:
        """The scenario as plain TOML-ready data (only values that differ from defaults)."""
        out: dict[str, Any] = {
            "name": self.name,
            "title": self.title,
            "summary": self.summary,
            "seed": self.seed,
            "iterations": self.iterations,
            "device": self.device,
        }
        model = _changed(self.model, ModelSpec(), always=("kind",))
        if self.model.init:
            model["init"] = dict(self.model.init)
        out["model"] = model
        out["data"] = _changed(self.data, DataSpec(kind=self.data.kind), always=("kind",))
        base = self.runs[0]
        out["optimizer"] = _optimizer_dict(base.optimizer)
        out["loop"] = _changed(base.loop, LoopSpec())
        out["runs"] = []
        for run in self.runs:
            entry: dict[str, Any] = {"name": run.name}
            if run.note:
                entry["note"] = run.note
            entry.update(_changed(run.loop, base.loop))
            if run.optimizer != base.optimizer:
                entry["optimizer"] = {
                    k: v
                    for k, v in _optimizer_dict(run.optimizer).items()
                    if _optimizer_dict(base.optimizer).get(k) != v
                }
            out["runs"].append(entry)
        if self.lesson is not None:
            out["lesson"] = self.lesson.to_dict()
        return out


def _changed(obj: Any, default: Any, always: Sequence[str] = ()) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name == "init":
            continue
        if f.name in always or value != getattr(default, f.name):
            if value is None:
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def _optimizer_dict(spec: OptimizerSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": spec.kind, "lr": spec.lr}
    for k, v in spec.options.items():
        out[k] = list(v) if isinstance(v, tuple) else v
    return out


# ---------------------------------------------------------------- validation


class _Table:
    """A TOML table being read: remembers which keys were used, rejects the rest."""

    def __init__(self, data: Any, path: str, where: str) -> None:
        if not isinstance(data, dict):
            raise _error(where, path, data, "a table")
        self.data = data
        self.path = path
        self.where = where
        self.used: set[str] = set()

    def key(self, name: str) -> str:
        shown = quoted(name, 40, bare=True)
        return f"{self.path}.{shown}" if self.path else shown

    def has(self, name: str) -> bool:
        return name in self.data

    def get(self, name: str, kind: str, default: Any, bounds: Bounds = FLOATS) -> Any:
        self.used.add(name)
        if name not in self.data:
            return default
        return _convert(self.data[name], kind, self.key(name), self.where, bounds)

    def choice(self, name: str, allowed: Sequence[str], default: str) -> str:
        value = self.get(name, "str", default)
        if value not in allowed:
            raise _error(self.where, self.key(name), value, _one_of(allowed), _close(value, allowed))
        return str(value)

    def table(self, name: str) -> _Table:
        self.used.add(name)
        return _Table(self.data.get(name, {}), self.key(name), self.where)

    def finish(self, allowed: Sequence[str] | None = None, context: str = "") -> None:
        allowed = sorted(self.used) if allowed is None else list(allowed)
        for name in self.data:
            if name not in allowed:
                hint = _close(name, allowed)
                allowed_text = ", ".join(allowed) if allowed else "no keys"
                raise ScenarioError(
                    f"{self.where}: {self.key(name)}: unknown key{context}; allowed: {allowed_text}.{hint}"
                )


def _one_of(allowed: Sequence[str]) -> str:
    return "one of " + ", ".join(repr(a) for a in allowed)


def _close(word: Any, allowed: Sequence[str]) -> str:
    # A word far longer than every choice is close to none of them (and slow to compare).
    if not isinstance(word, str) or len(word) > 100:
        return ""
    match = difflib.get_close_matches(word, list(allowed), n=1, cutoff=0.6)
    return f" Did you mean {quoted(match[0])}?" if match else ""


def shown_path(path: str | Path) -> str:
    """A file path as messages show it: as it is when plain, else quoted and shortened."""
    return quoted(str(path), 160, bare=True)


def _error(where: str | None, path: str, found: Any, allowed: str, hint: str = "") -> ScenarioError:
    """The one sentence of a refused value: where, the field, what was found and what is allowed."""
    head = f"{where}: {path}" if where else path
    return ScenarioError(f"{head}: found {quoted(found)}; allowed: {allowed}.{hint}")


def check_bounds(value: float, bounds: Bounds, where: str | None, path: str) -> None:
    """Refuse ``value`` outside ``bounds`` with the sentence files and options share."""
    if not bounds.holds(value):
        raise _error(where, path, value, bounds.allowed())


def number_problem(value: Any, bounds: Bounds = FLOATS) -> str | None:
    """Why ``value`` is no finite number inside ``bounds`` that float32 holds, as
    ``found ...; allowed: ...``; ``None`` when it is one."""
    allowed = f"allowed: {bounds.allowed()}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"found {quoted(value)}; {allowed}"
    try:
        number = float(value)
    except OverflowError:  # an integer past any float
        number = math.inf
    if math.isnan(number) or (isinstance(value, float) and math.isinf(value)):
        return f"found {quoted(value)}; {allowed}"
    if abs(number) > FLOAT32_MAX:
        return f"found {quoted(value)}, which float32 parameters cannot hold; {allowed}"
    if not bounds.holds(number):
        return f"found {quoted(value)}; {allowed}"
    return None


def _float(value: Any, where: str | None, path: str, bounds: Bounds = FLOATS) -> float:
    """A finite number inside ``bounds`` that float32 tensors hold; ScenarioError otherwise."""
    problem = number_problem(value, bounds)
    if problem is not None:
        head = f"{where}: {path}" if where else path
        raise ScenarioError(f"{head}: {problem}.")
    return float(value)


def _convert(value: Any, kind: str, path: str, where: str, bounds: Bounds = FLOATS) -> Any:
    """Check ``value`` against a small type language: str, bool, int, float, floats, ints.

    Every float must be finite and within what float32 holds (and ``bounds``).
    """
    if kind == "str":
        if not isinstance(value, str):
            raise _error(where, path, value, "a string")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise _error(where, path, value, "true or false")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _error(where, path, value, "a whole number")
        return value
    if kind == "float":
        return _float(value, where, path, bounds)
    if kind in ("floats", "ints", "strs"):
        item = kind[:-1]
        if not isinstance(value, list):
            raise _error(where, path, value, f"a list of {item}s")
        return tuple(_convert(v, item, f"{path}[{i}]", where, bounds) for i, v in enumerate(value))
    raise AssertionError(kind)


def _check_lr(lr: float, where: str | None, path: str) -> None:
    _float(lr, where, path, LEARNING_RATES)


def _check_range(value: float, low: float, high: float, where: str, path: str) -> None:
    check_bounds(value, Bounds(low, high), where, path)


def _check_name(value: str, where: str, path: str, limit: int) -> None:
    """Names and titles are shown on one line (legends, messages, the window's title)."""
    if not value or len(value) > limit or not value.isprintable():
        raise _error(where, path, value, f"1 to {limit} printable characters, on one line")


def _check_prose(value: str, where: str, path: str, limit: int) -> None:
    """A summary or note may be empty; printed by `gradviz quiz` and shown in the window, it is one line."""
    if len(value) > limit or not value.isprintable():
        raise _error(where, path, value, f"at most {limit} printable characters, on one line")


def _read_model(t: _Table) -> ModelSpec:
    kind = t.choice("kind", tuple(MODEL_KEYS), "linear")
    d = ModelSpec()
    spec = ModelSpec(
        kind=kind,
        bias=t.get("bias", "bool", d.bias),
        loss=t.choice("loss", ("mse", "half_mse"), d.loss),
        offset_every=t.get("offset_every", "int", d.offset_every),
        widths=t.get("widths", "ints", d.widths),
        activation=t.choice("activation", ("tanh", "relu"), d.activation),
        condition=t.get("condition", "float", d.condition),
        start=t.get("start", "floats", d.start),
        hidden=t.get("hidden", "int", d.hidden),
        init=_read_init(t),
    )
    t.finish(("kind", "init", *MODEL_KEYS[kind]), f" for model kind {kind!r}")
    if spec.offset_every < 1:
        raise _error(t.where, t.key("offset_every"), spec.offset_every, "1 or more")
    if not spec.widths or any(w < 1 or w > 4096 for w in spec.widths) or len(spec.widths) > 8:
        raise _error(t.where, t.key("widths"), list(spec.widths), "1 to 8 widths from 1 to 4096")
    _check_range(spec.condition, 1.0, 1e6, t.where, t.key("condition"))
    if spec.start is not None and len(spec.start) != 2:
        raise _error(t.where, t.key("start"), list(spec.start), "two numbers [x, y]")
    if not 1 <= spec.hidden <= 1024:
        raise _error(t.where, t.key("hidden"), spec.hidden, "a width from 1 to 1024")
    return spec


def _read_init(t: _Table) -> dict[str, Any]:
    t.used.add("init")
    raw = t.data.get("init", {})
    path = t.key("init")
    if not isinstance(raw, dict):
        raise _error(t.where, path, raw, "a table of parameter name = number or nested list")
    for name, value in raw.items():
        if not PARAMETER_NAME.fullmatch(name):
            raise _error(t.where, path, name, "parameter names such as 'weight' or '0.bias' as keys")
        _check_nested_numbers(value, f"{path}.{name}", t.where)
    return dict(raw)


def _check_nested_numbers(value: Any, path: str, where: str, depth: int = 0) -> None:
    if isinstance(value, list):
        if depth >= MAX_INIT_DEPTH:
            raise _error(where, path, value, f"a number or lists nested at most {MAX_INIT_DEPTH} deep")
        for i, v in enumerate(value):
            _check_nested_numbers(v, f"{path}[{i}]", where, depth + 1)
        return
    _convert(value, "float", path, where)


def _read_data(t: _Table, model_kind: str) -> DataSpec:
    allowed_kinds = DATA_FOR_MODEL[model_kind]
    kind = t.choice("kind", allowed_kinds, allowed_kinds[0])
    d = DataSpec()
    spec = DataSpec(
        kind=kind,
        n=t.get("n", "int", d.n),
        batch_size=t.get("batch_size", "int", d.batch_size),
        shuffle=t.get("shuffle", "bool", d.shuffle),
        noise=t.get("noise", "float", d.noise),
        slope=t.get("slope", "float", d.slope),
        intercept=t.get("intercept", "float", d.intercept),
        x=t.get("x", "floats", None),
        separation=t.get("separation", "float", d.separation),
        mean=t.get("mean", "float", d.mean),
        std=t.get("std", "float", d.std),
    )
    t.finish(("kind", *DATA_KEYS[kind]), f" for data kind {kind!r}")
    if spec.x is not None:
        if not spec.x:
            raise _error(t.where, t.key("x"), [], "a non-empty list of numbers")
        spec = replace(spec, n=len(spec.x))
    if not 1 <= spec.n <= 1_000_000:
        raise _error(t.where, t.key("n"), spec.n, "a number of points from 1 to 1000000")
    if not 1 <= spec.batch_size <= spec.n and kind != "none":
        raise _error(t.where, t.key("batch_size"), spec.batch_size, f"1 to n ({spec.n})")
    _check_range(spec.noise, 0.0, 1e3, t.where, t.key("noise"))
    _check_range(spec.std, 1e-6, 1e3, t.where, t.key("std"))
    return spec


def _read_optimizer(t: _Table, base: OptimizerSpec | None) -> OptimizerSpec:
    kind = t.choice("kind", OPTIMIZER_KINDS, base.kind if base else "SGD")
    same_kind = base is not None and base.kind == kind
    lr = t.get("lr", "float", base.lr if base else 0.05, LEARNING_RATES)
    options = dict(base.options) if (base and same_kind) else {}
    allowed = optimizer_keywords(kind)
    for name, value in t.data.items():
        if name in ("kind", "lr"):
            continue
        if name in IMPLEMENTATION_SWITCHES:
            raise ScenarioError(
                f"{t.where}: {t.key(name)}: picks an implementation, not a behaviour, "
                "and cannot be set in a scenario."
            )
        if name not in allowed:
            listed = ", ".join(("lr", *allowed)) or "lr"
            raise ScenarioError(
                f"{t.where}: {t.key(name)}: unknown key for optimizer {kind!r}; "
                f"allowed: {listed}.{_close(name, list(allowed))}"
            )
        options[name] = _convert_option(value, allowed[name], t.key(name), t.where)
    spec = OptimizerSpec(kind=kind, lr=lr, options=options)
    _check_optimizer(spec, t.where, t.path or "optimizer")
    return spec


def optimizer_keywords(kind: str) -> dict[str, Any]:
    """Keyword arguments (other than ``lr``) that ``kind`` accepts, with their defaults."""
    if kind == "manual":
        return {}
    import inspect

    import torch

    cls = getattr(torch.optim, kind)
    out = {}
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name in ("self", "params", "lr") or name in IMPLEMENTATION_SWITCHES:
            continue
        out[name] = p.default
    return out


def _convert_option(value: Any, default: Any, path: str, where: str) -> Any:
    if isinstance(default, bool):
        return _convert(value, "bool", path, where)
    if isinstance(default, tuple):
        got = _convert(value, "floats", path, where)
        if len(got) != len(default):
            raise _error(where, path, value, f"a list of {len(default)} numbers")
        return got
    return _convert(value, "float", path, where)


def _check_optimizer(spec: OptimizerSpec, where: str, path: str) -> None:
    """Let PyTorch itself judge the hyperparameters, on a throwaway tensor."""
    if spec.kind == "manual":
        return
    import torch

    cls = getattr(torch.optim, spec.kind)
    try:
        cls([torch.zeros(1, requires_grad=True)], lr=spec.lr, **spec.options)
    except (ValueError, TypeError, RuntimeError) as exc:
        reason = one_line(str(exc).rstrip("."), 300)
        raise ScenarioError(f"{where}: {path}: torch.optim.{spec.kind} refuses it: {reason}.") from None


def _read_loop(t: _Table, base: LoopSpec) -> LoopSpec:
    order = t.get("order", "strs", base.order)
    if not order:  # a loop of no ops has no iterations to step, show or export
        raise _error(t.where, t.key("order"), [], f"a list of one or more of {', '.join(map(repr, OPS))}")
    for i, op in enumerate(order):
        if op not in OPS:
            raise _error(t.where, f"{t.key('order')}[{i}]", op, _one_of(OPS), _close(op, OPS))
    if len(set(order)) != len(order):
        raise _error(t.where, t.key("order"), list(order), "each op at most once")
    if "backward" in order and ("forward" not in order or order.index("forward") > order.index("backward")):
        raise _error(t.where, t.key("order"), list(order), "'forward' before 'backward'")
    spec = LoopSpec(
        order=tuple(order),
        zero_grad=t.choice("zero_grad", ZERO_GRAD_VIA, base.zero_grad),
        set_to_none=t.get("set_to_none", "bool", base.set_to_none),
        accumulate=t.get("accumulate", "int", base.accumulate),
        scale_loss=t.get("scale_loss", "bool", base.scale_loss),
        fake=t.choice("fake", FAKE_MODES, base.fake),
        backwards=t.get("backwards", "int", base.backwards),
        retain_graph=t.get("retain_graph", "bool", base.retain_graph),
        hidden=t.choice("hidden", HIDDEN_MODES, base.hidden),
    )
    if not 1 <= spec.backwards <= MAX_BACKWARDS:
        raise _error(
            t.where, t.key("backwards"), spec.backwards, f"1 to {MAX_BACKWARDS} backward() calls per forward"
        )
    if spec.backwards > 1 and "backward" not in order:
        raise _error(t.where, t.key("backwards"), spec.backwards, "1 for a loop without 'backward'")
    if not 1 <= spec.accumulate <= 64:
        raise _error(t.where, t.key("accumulate"), spec.accumulate, "1 to 64 micro-batches")
    if spec.accumulate > 1 and "backward" in order:
        f, b = order.index("forward"), order.index("backward")
        if b != f + 1:
            raise _error(
                t.where, t.key("order"), list(order), "'backward' right after 'forward' when accumulating"
            )
    return spec


def _check_run(scenario_model: ModelSpec, data: DataSpec, run: RunSpec, where: str, path: str) -> None:
    loop = run.loop
    if run.optimizer.kind == "manual" and loop.zero_grad == "optimizer" and "zero_grad" in loop.order:
        raise ScenarioError(
            f"{where}: {path}.zero_grad: found 'optimizer' but a manual update has no optimizer; "
            "allowed: 'model' or 'manual'."
        )
    if scenario_model.kind == "gan" and loop.accumulate != 1:
        raise _error(where, f"{path}.accumulate", loop.accumulate, "1 for the GAN")
    if data.kind != "none" and data.batch_size % loop.accumulate:
        raise ScenarioError(
            f"{where}: {path}.accumulate: found {loop.accumulate}, which does not divide "
            f"data.batch_size ({data.batch_size}); allowed: a divisor of the batch size."
        )


def parse_scenario(data: Mapping[str, Any], where: str, default_name: str = "scenario") -> Scenario:
    """Validate already-parsed TOML data into a :class:`Scenario`.

    Raises :class:`ScenarioError` naming ``where``, the field path, what was
    found and what is allowed.
    """
    top = _Table(dict(data), "", where)
    name = top.get("name", "str", default_name)
    if top.has("name"):
        _check_name(name, where, "name", 200)
    title = top.get("title", "str", name)
    if top.has("title"):
        _check_name(title, where, "title", 200)
    summary = top.get("summary", "str", "")
    _check_prose(summary, where, "summary", 1000)
    seed = top.get("seed", "int", 0)
    check_bounds(seed, SEEDS, where, "seed")
    iterations = top.get("iterations", "int", 50)
    check_bounds(iterations, ITERATIONS, where, "iterations")
    device = top.choice("device", DEVICES, "cpu")
    model = _read_model(top.table("model"))
    data_spec = _read_data(top.table("data"), model.kind)
    optimizer = _read_optimizer(top.table("optimizer"), None)
    loop_table = top.table("loop")
    loop = _read_loop(loop_table, LoopSpec())
    loop_table.finish(LOOP_KEYS)
    top.used.add("runs")
    raw_runs = top.data.get("runs", [{"name": "yours"}])
    if not isinstance(raw_runs, list) or not raw_runs:
        raise _error(where, "runs", raw_runs, "a non-empty array of tables ([[runs]])")
    if len(raw_runs) > 4:
        raise _error(where, "runs", f"{len(raw_runs)} runs", "1 to 4 runs")
    runs = []
    for i, raw in enumerate(raw_runs):
        rt = _Table(raw, f"runs[{i}]", where)
        run_name = rt.get("name", "str", f"run{i + 1}")
        _check_name(run_name, where, rt.key("name"), 40)
        note = rt.get("note", "str", "")
        _check_prose(note, where, rt.key("note"), 300)
        run_loop = _read_loop(rt, loop)
        run_opt = _read_optimizer(rt.table("optimizer"), optimizer) if rt.has("optimizer") else optimizer
        rt.finish(("name", "note", "optimizer", *LOOP_KEYS))
        run = RunSpec(name=run_name, note=note, loop=run_loop, optimizer=run_opt)
        _check_run(model, data_spec, run, where, f"runs[{i}]")
        runs.append(run)
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise _error(where, "runs", names, "distinct run names")
    lesson = None
    if top.has("lesson"):
        lesson = read_lesson(top.table("lesson"), names, functools.partial(_error, where))
    top.finish()
    scenario = Scenario(
        name=name,
        title=title,
        summary=summary,
        seed=seed,
        iterations=iterations,
        device=device,
        model=model,
        data=data_spec,
        runs=tuple(runs),
        lesson=lesson,
    )
    from gradviz.engine.memory import memory_problem

    problem = memory_problem(scenario)
    if problem is not None:
        raise ScenarioError(f"{where}: {problem}.")
    return scenario


def loads_scenario(text: str, where: str, default_name: str = "scenario") -> Scenario:
    """Parse and validate scenario TOML text; ``where`` names it in messages."""
    try:
        data = tomllib.loads(text)
        return parse_scenario(data, where, default_name)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{where}: not valid TOML: {one_line(str(exc), 300)}.") from None
    except RecursionError:
        raise ScenarioError(
            f"{where}: values are nested too deeply to read (arrays or tables hundreds of levels "
            "inside one another); allowed: a few levels, as in the examples."
        ) from None
    except ValueError as exc:  # tomllib's integers of more than 4,300 digits
        if "integer string conversion" not in str(exc):
            raise
        raise ScenarioError(
            f"{where}: not valid TOML for gradviz: a whole number has more than 4,300 digits; "
            f"allowed: numbers such as seeds from 0 to {number_text(SEEDS.high)}."
        ) from None


MAX_FILE_BYTES = 1_000_000


def load_scenario_file(path: str | Path) -> Scenario:
    """Load a scenario from a TOML file, with messages that name the file.

    Only a regular file of at most ``MAX_FILE_BYTES`` is read: a folder, a FIFO
    or a device is refused before anything is read from it.
    """
    p = Path(path)
    shown = shown_path(p)
    try:
        raw = read_bounded(p, MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ScenarioError(f"{shown}: no such file.") from None
    except NotAFileError as exc:
        allowed = "" if exc.kind == "a folder" else "; allowed: a .toml file"
        raise ScenarioError(f"{shown}: is {exc.kind}, not a scenario file{allowed}.") from None
    except OSError as exc:
        raise ScenarioError(f"{shown}: cannot be read ({exc.strerror or type(exc).__name__}).") from None
    except ValueError:  # a path holding a NUL character
        raise ScenarioError(f"{shown}: is not a path a file can have.") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ScenarioError(f"{shown}: the file is larger than 1 MB; a scenario is a short TOML file.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ScenarioError(f"{shown}: is not UTF-8 text; a scenario is a TOML file.") from None
    return replace(loads_scenario(text, shown, p.stem), path=p)


def builtin_names() -> list[str]:
    """Names of the built-in scenarios, in the order they are listed."""
    folder = resources.files("gradviz.engine") / "scenarios"
    names = sorted(f.name[:-5] for f in folder.iterdir() if f.name.endswith(".toml"))
    first = ["forgot-zero-grad", "standard-loop"]
    return [n for n in first if n in names] + [n for n in names if n not in first]


def load_builtin(name: str) -> Scenario:
    """Load a built-in scenario by name."""
    names = builtin_names()
    if name not in names:
        raise ScenarioError(
            f"There is no built-in scenario {quoted(name)}; `gradviz list` shows them.{_close(name, names)}"
        )
    text = (resources.files("gradviz.engine") / "scenarios" / f"{name}.toml").read_text("utf-8")
    return loads_scenario(text, f"built-in scenario {name!r}", name)


def load_scenario(name_or_path: str | Path) -> Scenario:
    """A built-in scenario by name, or a scenario file by path."""
    text = str(name_or_path)
    if text in builtin_names():
        return load_builtin(text)
    if text.endswith(".toml") or "/" in text or os.sep in text or _exists(text):
        return load_scenario_file(text)
    return load_builtin(text)


def _exists(text: str) -> bool:
    try:
        return Path(text).exists()
    except (OSError, ValueError):  # a name too long for a path, or one holding NUL
        return False


def dumps_scenario(scenario: Scenario) -> str:
    """Render a scenario as TOML that :func:`loads_scenario` reads back equal."""
    import tomli_w

    return tomli_w.dumps(scenario.to_dict())
