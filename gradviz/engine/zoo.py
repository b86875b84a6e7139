"""Models and seeded synthetic datasets, with the source text that builds and uses them.

A :class:`Task` owns the real ``torch.nn`` modules of one run, its batches, and
the Python lines the code panel shows for building the model and computing
the loss. The loss line and the loss computation sit side by side in each
task so the code shown and the code run cannot drift apart.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
import torch
from torch import nn

from gradviz.engine.errors import ScenarioError
from gradviz.engine.scenario import DataSpec, LoopSpec, ModelSpec, Scenario

Batch = tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class Phase:
    """One part of an iteration that has its own loss and optimizer (the GAN has two)."""

    name: str
    optimizer: str
    module: str
    params: tuple[str, ...]
    param_expr: str
    loss_var: str


def _generator(seed: int, *salt: int) -> torch.Generator:
    g = torch.Generator()
    mixed = seed
    for s in salt:
        mixed = (mixed * 1_000_003 + s + 1) % (2**63)
    g.manual_seed(mixed)
    return g


class Cut(NamedTuple):
    """A tensor the loss's code cut off the graph that made it: ``detach()`` or ``torch.no_grad()``.

    ``tensor`` is what went on into the loss (the real object, for finding where the loss's
    graph took it in); ``source`` the class of the ``grad_fn`` it was detached from, ``None``
    where no graph was built.
    """

    name: str
    how: Literal["detach", "no_grad"]
    tensor: torch.Tensor
    source: str | None


class Task:
    """Base class: modules, parameters, batches and source lines of one model kind."""

    batch_vars: tuple[str, ...] = ("x", "y")
    uses_iteration = False
    # The cuts the latest loss made, as its code made them.
    cuts: tuple[Cut, ...] = ()

    def __init__(self, model: ModelSpec, data: DataSpec, seed: int, device: torch.device) -> None:
        self.spec = model
        self.data = data
        self.seed = seed
        self.device = device
        self.modules: dict[str, nn.Module] = {}
        self.outside: dict[str, nn.Parameter] = {}
        # Models are initialised from the scenario's seed alone, so every run starts
        # from the same weights; the global RNG of the host program is left alone.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.build()
        self.params: dict[str, nn.Parameter] = {}
        prefix = len(self.modules) > 1
        for mname, module in self.modules.items():
            for pname, p in module.named_parameters():
                self.params[f"{mname}.{pname}" if prefix else pname] = p
        self.params.update(self.outside)
        self._apply_init(model.init)
        for module in self.modules.values():
            module.to(device)
        for p in self.outside.values():
            p.data = p.data.to(device)
        self.inputs = tuple(t.to(device) for t in self.make_data(_generator(seed, 1)))
        # The shuffled order of the latest epoch, split into batches: a function of
        # (seed, epoch) alone, so going back in time draws the same batches.
        self._epoch: tuple[int, tuple[torch.Tensor, ...]] = (-1, ())

    # -- to be provided by each kind
    def build(self) -> None:
        raise NotImplementedError

    def make_data(self, g: torch.Generator) -> Batch:
        return ()

    def model_lines(self) -> list[str]:
        """The lines that build the modules (and any parameter held outside them)."""
        raise NotImplementedError

    def setup_lines(self) -> list[str]:
        """The lines after the model's: the loss function and other fixed tensors."""
        return []

    def header(self) -> list[str]:
        """Everything before the optimizer: the model as built, its starting values, the loss.

        Executed as Python, these lines give the parameters the run starts from:
        the seed where a module keeps PyTorch's random initialisation, and the
        values ``model.init`` sets, set the same way in real PyTorch.
        """
        lines = [f"torch.manual_seed({self.seed})"] if self.random_start() else []
        return [*lines, *self.model_lines(), *self.init_lines(), *self.setup_lines()]

    def random_start(self) -> bool:
        """Whether some module parameter keeps the random value the seeded build gave it."""
        outside = set(self.outside)
        return any(name not in self.spec.init for name in self.params if name not in outside)

    def param_expr(self, name: str) -> str:
        """Parameter ``name`` as Python: ``model.weight``, ``model[0].bias``, ``D[2].weight``."""
        if name in self.outside:
            return name
        parts = name.split(".")
        owner = parts.pop(0) if len(self.modules) > 1 else next(iter(self.modules))
        return owner + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in parts)

    def init_lines(self) -> list[str]:
        """``model.init``'s values for module parameters, set in place without recording a graph."""
        body = []
        for name, value in self.spec.init.items():
            if name in self.outside or name not in self.params:
                continue
            target = self.param_expr(name)
            if _is_number(value):
                body.append(f"{INDENT}{target}.fill_({_literal(value)})")
            else:
                body.append(f"{INDENT}{target}.copy_({self.tensor_literal(name, value)})")
        return ["with torch.no_grad():", *body] if body else []

    def tensor_literal(self, name: str, value: Any) -> str:
        """``torch.tensor([...])`` of parameter ``name``'s shape holding ``value`` (number or nested list)."""
        shape = tuple(self.params[name].shape)
        if _is_number(value):
            nested = np.full(shape, float(value)).tolist()
        else:
            nested = np.asarray(value, dtype=np.float64).reshape(shape).tolist()
        return f"torch.tensor({_literal(nested)})"

    def outside_value(self, name: str, default: str) -> str:
        """The tensor an outside parameter is made from: ``model.init``'s value, else ``default``."""
        if name in self.spec.init:
            return self.tensor_literal(name, self.spec.init[name])
        return default

    def loop_head(self) -> str:
        return f"for {', '.join(self.batch_vars)} in batches:"

    def chunks_setup_lines(self, loop: LoopSpec) -> list[str]:
        """The lines before the loop over micro-batches (state the chunks carry from one to the next)."""
        return []

    def start_batch(self) -> None:
        """Called before the first micro-batch's forward of each iteration: state carried between
        micro-batches starts afresh here."""

    def twin(self) -> Task:
        """A shallow copy whose loss the loss surface evaluates at other weights (under ``vmap``)."""
        return copy.copy(self)

    def forward_lines(self, phase: Phase, names: Sequence[str], loop: LoopSpec) -> list[str]:
        raise NotImplementedError

    def loss(self, phase: Phase, batch: Batch, iteration: int, loop: LoopSpec) -> torch.Tensor:
        raise NotImplementedError

    # -- shared
    def phases(self) -> list[Phase]:
        names = tuple(self.params)
        expr = "model.parameters()"
        if self.outside:
            expr = "[*model.parameters(), " + ", ".join(self.outside) + "]"
        return [Phase("", "optimizer", "model", names, expr, "loss")]

    def batch(self, iteration: int) -> Batch:
        """The batch of ``iteration``: a fixed order per seed, a new shuffle per epoch."""
        if not self.inputs:
            return ()
        n, bs = self.data.n, self.data.batch_size
        per_epoch = n // bs
        epoch, j = divmod(iteration, per_epoch)
        if self.data.shuffle:
            if self._epoch[0] != epoch:
                order = torch.randperm(n, generator=_generator(self.seed, 2, epoch)).to(self.device)
                self._epoch = (epoch, order.split(bs))
            idx = self._epoch[1][j]
            return tuple(t.index_select(0, idx) for t in self.inputs)
        return tuple(t[j * bs : (j + 1) * bs] for t in self.inputs)

    def _apply_init(self, init: Mapping[str, Any]) -> None:
        for name, value in init.items():
            if name not in self.params:
                import difflib

                close = difflib.get_close_matches(name, list(self.params), n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ScenarioError(
                    f"model.init.{name}: no such parameter; the model has {', '.join(self.params)}.{hint}"
                )
            p = self.params[name]
            try:
                t = torch.as_tensor(value, dtype=p.dtype)
                with torch.no_grad():
                    p.copy_(t.expand_as(p) if t.dim() == 0 else t.reshape(p.shape))
            except (RuntimeError, ValueError):
                raise ScenarioError(
                    f"model.init.{name}: found a value that does not fit the shape "
                    f"{list(p.shape)}; allowed: a number or a nested list of that shape."
                ) from None

    @staticmethod
    def scaled(line: str, loop: LoopSpec) -> str:
        return f"{line} / {loop.accumulate}" if scales(loop) else line


INDENT = "    "


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _literal(value: Any) -> str:
    """A number or nested list as Python source that PyTorch reads back to the same float32 values."""
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    v = float(value)
    if math.isnan(v):
        return "float('nan')"
    if math.isinf(v):
        return "float('inf')" if v > 0 else "-float('inf')"
    return repr(v)


def scales(loop: LoopSpec) -> bool:
    """Whether the loss is divided by the number of micro-batches."""
    return loop.scale_loss and loop.accumulate > 1


def _scale(loss: torch.Tensor, loop: LoopSpec) -> torch.Tensor:
    return loss / loop.accumulate if scales(loop) else loss


class Linear(Task):
    """Linear regression ``y = w*x + b``: two parameters, so its loss surface is the true one."""

    def build(self) -> None:
        self.modules["model"] = nn.Linear(1, 1, bias=self.spec.bias)

    def make_data(self, g: torch.Generator) -> Batch:
        d = self.data
        if d.x is not None:
            x = torch.tensor(d.x, dtype=torch.float32).reshape(-1, 1)
        else:
            x = torch.randn(d.n, 1, generator=g)
        y = d.slope * x + d.intercept + d.noise * torch.randn(d.n, 1, generator=g)
        return x, y

    def model_lines(self) -> list[str]:
        args = "1, 1" if self.spec.bias else "1, 1, bias=False"
        return [f"model = torch.nn.Linear({args})"]

    def setup_lines(self) -> list[str]:
        return ["loss_fn = torch.nn.MSELoss()"] if self.spec.loss == "mse" else []

    def prediction(self, x: str) -> str:
        return f"model({x})"

    def forward_lines(self, phase: Phase, names: Sequence[str], loop: LoopSpec) -> list[str]:
        x, y = names
        pred = self.prediction(x)
        if self.spec.loss == "mse":
            return [self.scaled(f"loss = loss_fn({pred}, {y})", loop)]
        return [self.scaled(f"loss = (({pred} - {y}) ** 2).mean() / 2", loop)]

    def predict(self, x: torch.Tensor, iteration: int) -> torch.Tensor:
        return self.modules["model"](x)

    def loss(self, phase: Phase, batch: Batch, iteration: int, loop: LoopSpec) -> torch.Tensor:
        x, y = batch
        pred = self.predict(x, iteration)
        if self.spec.loss == "mse":
            loss = nn.functional.mse_loss(pred, y)
        else:
            loss = ((pred - y) ** 2).mean() / 2
        return _scale(loss, loop)


class LinearOffset(Linear):
    """Linear regression plus an ``offset`` parameter that the optimizer holds outside the model."""

    def build(self) -> None:
        super().build()
        self.outside["offset"] = nn.Parameter(torch.zeros(1))

    def model_lines(self) -> list[str]:
        offset = self.outside_value("offset", "torch.zeros(1)")
        return [*super().model_lines(), f"offset = torch.nn.Parameter({offset})  # not in model"]

    def loop_head(self) -> str:
        if self.spec.offset_every > 1:
            return "for i, (x, y) in enumerate(batches):"
        return super().loop_head()

    def prediction(self, x: str) -> str:
        if self.spec.offset_every > 1:
            return f"model({x}) + (offset if i % {self.spec.offset_every} == 0 else 0)"
        return f"model({x}) + offset"

    def predict(self, x: torch.Tensor, iteration: int) -> torch.Tensor:
        out = self.modules["model"](x)
        if iteration % self.spec.offset_every == 0:
            out = out + self.outside["offset"]
        return out


class Logistic(Task):
    """Logistic regression on two seeded Gaussian blobs in 2-D."""

    def build(self) -> None:
        self.modules["model"] = nn.Linear(2, 1)

    def make_data(self, g: torch.Generator) -> Batch:
        return _blobs(self.data, g)

    def model_lines(self) -> list[str]:
        return ["model = torch.nn.Linear(2, 1)"]

    def setup_lines(self) -> list[str]:
        return ["loss_fn = torch.nn.BCEWithLogitsLoss()"]

    def forward_lines(self, phase: Phase, names: Sequence[str], loop: LoopSpec) -> list[str]:
        x, y = names
        return [self.scaled(f"loss = loss_fn(model({x}), {y})", loop)]

    def loss(self, phase: Phase, batch: Batch, iteration: int, loop: LoopSpec) -> torch.Tensor:
        x, y = batch
        return _scale(nn.functional.binary_cross_entropy_with_logits(self.modules["model"](x), y), loop)


def _blobs(d: DataSpec, g: torch.Generator) -> Batch:
    labels = (torch.arange(d.n) % 2).float().reshape(-1, 1)
    centre = torch.tensor([[1.0, 1.0]]) * (d.separation / (2 * math.sqrt(2)))
    x = (2 * labels - 1) * centre + max(d.noise, 1e-3) * torch.randn(d.n, 2, generator=g)
    return x, labels


class MLP(Task):
    """A multilayer perceptron of configurable widths, for regression or classification."""

    def inputs_dim(self) -> int:
        return 1 if self.data.kind == "line" else 2

    def build(self) -> None:
        act = {"tanh": "Tanh", "relu": "ReLU"}[self.spec.activation]
        layers: list[nn.Module] = []
        width = self.inputs_dim()
        for w in self.spec.widths:
            layers += [nn.Linear(width, w), getattr(nn, act)()]
            width = w
        layers.append(nn.Linear(width, 1))
        self.modules["model"] = nn.Sequential(*layers)

    def make_data(self, g: torch.Generator) -> Batch:
        d = self.data
        if d.kind == "blobs":
            return _blobs(d, g)
        if d.kind == "line":
            x = torch.randn(d.n, 1, generator=g)
            return x, d.slope * x + d.intercept + d.noise * torch.randn(d.n, 1, generator=g)
        x = 4 * torch.rand(d.n, 2, generator=g) - 2
        y = torch.sin(x[:, :1] * 1.5) * torch.cos(x[:, 1:]) + d.noise * torch.randn(d.n, 1, generator=g)
        return x, y

    def model_lines(self) -> list[str]:
        act = {"tanh": "torch.nn.Tanh()", "relu": "torch.nn.ReLU()"}[self.spec.activation]
        dims = [self.inputs_dim(), *self.spec.widths, 1]
        parts = []
        for a, b in itertools.pairwise(dims[:-1]):
            parts += [f"torch.nn.Linear({a}, {b})", act]
        parts.append(f"torch.nn.Linear({dims[-2]}, 1)")
        return ["model = torch.nn.Sequential(", *[f"    {p}," for p in parts], ")"]

    def setup_lines(self) -> list[str]:
        loss = "BCEWithLogitsLoss" if self.data.kind == "blobs" else "MSELoss"
        return [f"loss_fn = torch.nn.{loss}()"]

    def forward_lines(self, phase: Phase, names: Sequence[str], loop: LoopSpec) -> list[str]:
        x, y = names
        return [self.scaled(f"loss = loss_fn(model({x}), {y})", loop)]

    def loss(self, phase: Phase, batch: Batch, iteration: int, loop: LoopSpec) -> torch.Tensor:
        x, y = batch
        out = self.modules["model"](x)
        if self.data.kind == "blobs":
            return _scale(nn.functional.binary_cross_entropy_with_logits(out, y), loop)
        return _scale(nn.functional.mse_loss(out, y), loop)


class Function2D(nn.Module):
    """A 2-D test function with its point as the one parameter ``xy``."""

    formula = ""

    def __init__(self, start: Sequence[float], condition: float = 1.0) -> None:
        super().__init__()
        self.xy = nn.Parameter(torch.tensor([float(v) for v in start]))
        self.condition = condition

    def forward(self) -> torch.Tensor:
        raise NotImplementedError


class Quadratic(Function2D):
    formula = "(x**2 + condition * y**2) / 2"

    def forward(self) -> torch.Tensor:
        x, y = self.xy[0], self.xy[1]
        return (x**2 + self.condition * y**2) / 2


class Rosenbrock(Function2D):
    formula = "(1 - x)**2 + 100 * (y - x**2)**2"

    def forward(self) -> torch.Tensor:
        x, y = self.xy[0], self.xy[1]
        return (1 - x) ** 2 + 100 * (y - x**2) ** 2


class Saddle(Function2D):
    formula = "(x**2 - y**2) / 2"

    def forward(self) -> torch.Tensor:
        x, y = self.xy[0], self.xy[1]
        return (x**2 - y**2) / 2


FUNCTIONS: dict[str, tuple[type[Function2D], tuple[float, float]]] = {
    "quadratic": (Quadratic, (-2.0, 1.5)),
    "rosenbrock": (Rosenbrock, (-1.5, 2.0)),
    "saddle": (Saddle, (-2.0, 0.05)),
}


class Surface2D(Task):
    """A 2-D test function: no data, the loss is the function at the current point."""

    batch_vars = ()

    def build(self) -> None:
        cls, start = FUNCTIONS[self.spec.kind]
        self.modules["model"] = cls(self.spec.start or start, self.spec.condition)

    def random_start(self) -> bool:
        return False  # the point starts where start= says

    def model_lines(self) -> list[str]:
        cls, start = FUNCTIONS[self.spec.kind]
        # A starting point given by model.init is the point the function is built at.
        pt = self.spec.init.get("xy", self.spec.start or start)
        args = f"start={_literal(np.asarray(pt, dtype=np.float64).reshape(2).tolist())}"
        if self.spec.kind == "quadratic":
            args += f", condition={self.spec.condition:g}"
        return [f"model = {cls.__name__}({args})  # one parameter: model.xy = [x, y]"]

    def init_lines(self) -> list[str]:
        return []  # start= carries the point

    def loop_head(self) -> str:
        return "for step in range(steps):"

    def forward_lines(self, phase: Phase, names: Sequence[str], loop: LoopSpec) -> list[str]:
        cls, _ = FUNCTIONS[self.spec.kind]
        return [self.scaled("loss = model()", loop) + f"  # {cls.formula}"]

    def loss(self, phase: Phase, batch: Batch, iteration: int, loop: LoopSpec) -> torch.Tensor:
        return _scale(self.modules["model"](), loop)


class GAN(Task):
    """A tiny 1-D GAN: generator ``G`` and discriminator ``D``, each with its own optimizer."""

    batch_vars = ("real", "z")

    def build(self) -> None:
        h = self.spec.hidden
        self.modules["D"] = nn.Sequential(nn.Linear(1, h), nn.Tanh(), nn.Linear(h, 1))
        self.modules["G"] = nn.Sequential(nn.Linear(1, h), nn.Tanh(), nn.Linear(h, 1))

    def make_data(self, g: torch.Generator) -> Batch:
        d = self.data
        return (d.mean + d.std * torch.randn(d.n, 1, generator=g),)

    def batch(self, iteration: int) -> Batch:
        (real,) = super().batch(iteration)
        z = torch.randn(real.shape[0], 1, generator=_generator(self.seed, 3, iteration))
        return real, z.to(self.device)

    def phases(self) -> list[Phase]:
        d = tuple(n for n in self.params if n.startswith("D."))
        g = tuple(n for n in self.params if n.startswith("G."))
        return [
            Phase("discriminator", "opt_d", "D", d, "D.parameters()", "loss_d"),
            Phase("generator", "opt_g", "G", g, "G.parameters()", "loss_g"),
        ]

    def model_lines(self) -> list[str]:
        h = self.spec.hidden
        net = f"torch.nn.Sequential(torch.nn.Linear(1, {h}), torch.nn.Tanh(), torch.nn.Linear({h}, 1))"
        return [f"D = {net}", f"G = {net}"]

    def setup_lines(self) -> list[str]:
        return [
            "bce = torch.nn.BCEWithLogitsLoss()",
            f"ones, zeros = torch.ones({self.data.batch_size}, 1), torch.zeros({self.data.batch_size}, 1)",
        ]

    def forward_lines(self, phase: Phase, names: Sequence[str], loop: LoopSpec) -> list[str]:
        real, z = names
        if phase.name == "generator":
            return [f"loss_g = bce(D(G({z})), ones)"]
        fake = "fake.detach()" if loop.fake == "detach" else "fake"
        loss_line = f"loss_d = bce(D({real}), ones) + bce(D({fake}), zeros)"
        if loop.fake == "no_grad":
            return ["with torch.no_grad():", f"    fake = G({z})", loss_line]
        return [f"fake = G({z})", loss_line]

    def loss(self, phase: Phase, batch: Batch, iteration: int, loop: LoopSpec) -> torch.Tensor:
        real, z = batch
        D, G = self.modules["D"], self.modules["G"]
        bce = nn.functional.binary_cross_entropy_with_logits
        ones = torch.ones_like(real)
        self.cuts = ()
        if phase.name == "generator":
            return bce(D(G(z)), ones)
        if loop.fake == "no_grad":
            with torch.no_grad():
                fake = G(z)
            self.cuts = (Cut("fake", "no_grad", fake, None),)
        else:
            fake = G(z)
            if loop.fake == "detach":
                made = fake
                fake = fake.detach()
                self.cuts = (Cut("fake", "detach", fake, _grad_fn_name(made)),)
        return bce(D(real), ones) + bce(D(fake), torch.zeros_like(real))


class RNN(Task):
    """A one-layer ``torch.nn.RNN`` and a linear head predicting a seeded wave's next value.

    With accumulation the sequence of each iteration is cut into chunks in time
    (truncated backpropagation through time): the hidden state goes from one chunk
    to the next, detached or not as the loop says.
    """

    def build(self) -> None:
        h = self.spec.hidden
        self.modules["rnn"] = nn.RNN(1, h)
        self.modules["head"] = nn.Linear(h, 1)
        self.hidden: torch.Tensor | None = None
        self.unrolled = False

    def make_data(self, g: torch.Generator) -> Batch:
        d = self.data
        t = torch.arange(d.n + 1, dtype=torch.float32)
        wave = torch.sin(0.5 * t) + d.noise * torch.randn(d.n + 1, generator=g)
        return wave[:-1].reshape(-1, 1), wave[1:].reshape(-1, 1)

    def batch(self, iteration: int) -> Batch:
        # A sequence is read in order: shuffling its points would destroy it.
        bs = self.data.batch_size
        j = iteration % (self.data.n // bs)
        return tuple(t[j * bs : (j + 1) * bs] for t in self.inputs)

    def phases(self) -> list[Phase]:
        expr = "[*rnn.parameters(), *head.parameters()]"
        return [Phase("", "optimizer", "rnn", tuple(self.params), expr, "loss")]

    def model_lines(self) -> list[str]:
        h = self.spec.hidden
        return [f"rnn = torch.nn.RNN(1, {h})", f"head = torch.nn.Linear({h}, 1)"]

    def setup_lines(self) -> list[str]:
        return ["loss_fn = torch.nn.MSELoss()"]

    def loop_head(self) -> str:
        return "for x, y in sequences:"

    def _zeros(self) -> str:
        return f"hidden = torch.zeros(1, {self.spec.hidden})"

    def chunks_setup_lines(self, loop: LoopSpec) -> list[str]:
        return [self._zeros()]

    def start_batch(self) -> None:
        self.hidden = torch.zeros(1, self.spec.hidden, device=self.device)

    def twin(self) -> Task:
        """The surface's copy: each evaluation starts from a zero hidden state, and the recurrence
        runs step by step, ``tanh(linear(x, W_ih, b_ih) + linear(h, W_hh, b_hh))`` as ``nn.RNN``
        computes it on the CPU, because ``vmap`` can batch those calls but not ``nn.RNN``'s."""
        twin = copy.copy(self)
        twin.hidden, twin.unrolled = None, True
        return twin

    def _recur(self, x: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rnn = self.modules["rnn"]
        if not self.unrolled:
            return rnn(x, hidden)
        w_ih, w_hh, b_ih, b_hh = (
            getattr(rnn, f"{k}_l0") for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        )
        linear = nn.functional.linear
        steps = []
        for x_t in x.split(1):
            hidden = torch.tanh(linear(x_t, w_ih, b_ih) + linear(hidden, w_hh, b_hh))
            steps.append(hidden)
        return torch.cat(steps), hidden

    def forward_lines(self, phase: Phase, names: Sequence[str], loop: LoopSpec) -> list[str]:
        x, y = names
        lines = [self._zeros()] if loop.accumulate == 1 else []
        if loop.accumulate > 1 and loop.hidden == "detach":
            lines.append("hidden = hidden.detach()")
        return [
            *lines,
            f"out, hidden = rnn({x}, hidden)",
            self.scaled(f"loss = loss_fn(head(out), {y})", loop),
        ]

    def loss(self, phase: Phase, batch: Batch, iteration: int, loop: LoopSpec) -> torch.Tensor:
        x, y = batch
        # The surface's twin evaluates the whole sequence from a zero state, each time afresh.
        hidden = self.hidden
        if hidden is None or self.unrolled:
            hidden = torch.zeros(1, self.spec.hidden, device=x.device)
        self.cuts = ()
        if loop.hidden == "detach":
            made = hidden
            hidden = hidden.detach()
            # The first chunk's zeros were made by no graph: nothing is cut there.
            self.cuts = (Cut("hidden", "detach", hidden, _grad_fn_name(made)),) if made.grad_fn else ()
        out, last = self._recur(x, hidden)
        if not self.unrolled:
            self.hidden = last
        return _scale(nn.functional.mse_loss(self.modules["head"](out), y), loop)


def _grad_fn_name(t: torch.Tensor) -> str | None:
    return None if t.grad_fn is None else type(t.grad_fn).__name__


TASKS: dict[str, type[Task]] = {
    "linear": Linear,
    "linear-offset": LinearOffset,
    "logistic": Logistic,
    "mlp": MLP,
    "quadratic": Surface2D,
    "rosenbrock": Surface2D,
    "saddle": Surface2D,
    "gan": GAN,
    "rnn": RNN,
}


def build_task(scenario: Scenario, device: torch.device) -> Task:
    """Build the model and data of ``scenario`` on ``device``, from its seed."""
    return TASKS[scenario.model.kind](scenario.model, scenario.data, scenario.seed, device)
