"""A scenario's lesson: its point in one sentence, and what the views should lead with.

The ``[lesson]`` table of a scenario file is data, read and checked like every
other table (unknown keys are errors). Its focus says which runs and
parameters lead (shown first and kept in view in the ``.grad`` inspector),
which quantities lead (the inspector's columns and the readouts), and which
plane the loss surface uses, or that the surface is left out because it
teaches nothing here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gradviz.engine.errors import ScenarioError

if TYPE_CHECKING:
    from gradviz.engine.scenario import _Table

LESSON_KEYS = ("point", "runs", "params", "show", "surface")
# What a lesson can put first: the inspector's columns (value, .grad, what this backward added,
# what was already there, the optimizer's state) and the readouts of lr, memory and loss.
QUANTITIES = ("value", "grad", "fresh", "stale", "state", "lr", "memory", "loss")
# How the loss surface is drawn: the usual choice, none at all, or a plane kind.
SURFACE_CHOICES = ("auto", "none", "random", "pca", "three-points")


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
    """

    point: str = ""
    runs: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    show: tuple[str, ...] = ()
    surface: str | tuple[str, str] = "auto"

    @property
    def surface_axes(self) -> tuple[str, str] | None:
        """The two parameters the surface is drawn over, when the lesson names them."""
        return self.surface if isinstance(self.surface, tuple) else None

    def order_runs(self, names: Sequence[str]) -> list[str]:
        """``names`` with the leading runs first."""
        return [*(n for n in self.runs if n in names), *(n for n in names if n not in self.runs)]

    def order_params(self, names: Sequence[str]) -> list[str]:
        """``names`` with the leading parameters first."""
        return [*(n for n in self.params if n in names), *(n for n in names if n not in self.params)]

    def leads(self, quantity: str) -> bool:
        """Whether ``quantity`` is one the lesson puts first."""
        return quantity in self.show

    def to_dict(self) -> dict[str, Any]:
        """The lesson as TOML-ready data (only what is set)."""
        out: dict[str, Any] = {"point": self.point}
        for key in ("runs", "params", "show"):
            if getattr(self, key):
                out[key] = list(getattr(self, key))
        if self.surface != "auto":
            out["surface"] = list(self.surface) if isinstance(self.surface, tuple) else self.surface
        return out


def read_lesson(t: _Table, run_names: Sequence[str], error: Any) -> Lesson:
    """Read and check a ``[lesson]`` table; ``error(path, found, allowed)`` makes the sentence.

    Parameter names are checked later, against the real model (see :func:`check_params`).
    """
    point = t.get("point", "str", "")
    if not point.strip():
        raise error(t.key("point"), point, "one sentence saying what the scenario shows")
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
    t.finish(LESSON_KEYS)
    return Lesson(point=point, runs=runs, params=params, show=show, surface=surface)


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
