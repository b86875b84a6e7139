"""Loss surfaces of two-parameter models, and a preview of the optimizer's next step.

Only models whose whole parameter vector is two numbers have a true surface
that can be drawn without choosing a plane: linear regression with a weight and
a bias, and the 2-D test functions. For them :func:`surface_model` returns a
:class:`SurfaceModel` that evaluates the loss over the *whole dataset* with
numpy alone, so a GUI thread can draw it without touching the live lab.
Surfaces of larger models come with planes and directions; here they are ``None``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from gradviz.engine.lab import Lab
from gradviz.engine.run import Run

FUNCTION_MINIMA = {"quadratic": (0.0, 0.0), "rosenbrock": (1.0, 1.0), "saddle": (0.0, 0.0)}


@dataclass(frozen=True)
class SurfaceModel:
    """The loss of a two-parameter model as a function of its two parameters.

    Attributes
    ----------
    kind:
        ``"linear"`` or a 2-D test function's name.
    axis_names:
        Labels of the x and y axes, e.g. ``("weight", "bias")`` or ``("xy[0]", "xy[1]")``.
    coefficients:
        For ``"linear"``: the means of x², x, x·y, y, y² over the dataset and the
        loss factor (1 for MSE, 1/2 for half MSE). For functions: the condition number.
    minimum:
        Where the loss is smallest (the saddle's stationary point for ``"saddle"``).
    """

    kind: str
    axis_names: tuple[str, str]
    coefficients: tuple[float, ...]
    minimum: tuple[float, float]

    def evaluate(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The loss at points ``(x, y)`` (arrays of one shape), in float64."""
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            if self.kind == "linear":
                sxx, sx, sxy, sy, syy, factor = self.coefficients
                # mean((w x + b - y)^2) expanded into the five dataset means.
                z = x * x * sxx + y * y + syy + 2 * x * y * sx - 2 * x * sxy - 2 * y * sy
                return factor * np.maximum(z, 0.0)
            if self.kind == "quadratic":
                return (x * x + self.coefficients[0] * y * y) / 2
            if self.kind == "rosenbrock":
                return (1 - x) ** 2 + 100 * (y - x * x) ** 2
            if self.kind == "saddle":
                return (x * x - y * y) / 2
        raise ValueError(f"no surface formula for {self.kind!r}")

    def grid(
        self, x_range: tuple[float, float], y_range: tuple[float, float], n: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The loss on an ``n`` x ``n`` grid: ``(xs, ys, Z)`` with ``Z[i, j]`` at ``(xs[i], ys[j])``."""
        xs = np.linspace(x_range[0], x_range[1], n)
        ys = np.linspace(y_range[0], y_range[1], n)
        grid_x, grid_y = np.meshgrid(xs, ys, indexing="ij")
        return xs, ys, self.evaluate(grid_x, grid_y)

    def point(self, params: dict[str, np.ndarray]) -> tuple[float, float]:
        """The (x, y) position of a run's parameters on this surface."""
        if self.kind == "linear":
            return float(params["weight"].reshape(-1)[0]), float(params["bias"].reshape(-1)[0])
        xy = params["xy"].reshape(-1)
        return float(xy[0]), float(xy[1])

    def points(self, flats: np.ndarray) -> np.ndarray:
        """The positions, ``(M, 2)``, of the parameter vectors ``flats`` (each flat, in the layout's order).

        The two axes are the model's whole parameter vector (weight then bias, or ``xy``), so a
        vector is its own position.
        """
        return np.asarray(flats, dtype=np.float64).reshape(-1, 2)

    def vector(self, values: dict[str, np.ndarray | None]) -> tuple[float, float] | None:
        """A per-parameter quantity (a gradient, a step) as an (x, y) vector; None if absent."""
        if self.kind == "linear":
            w, b = values.get("weight"), values.get("bias")
            if w is None and b is None:
                return None
            return (
                0.0 if w is None else float(w.reshape(-1)[0]),
                0.0 if b is None else float(b.reshape(-1)[0]),
            )
        xy = values.get("xy")
        if xy is None:
            return None
        flat = xy.reshape(-1)
        return float(flat[0]), float(flat[1])


def surface_model(lab: Lab, run_name: str | None = None) -> SurfaceModel | None:
    """The surface of ``lab``'s model when it has exactly two parameters, else ``None``.

    Every run of a lab shares the model and the data, so any run (the first by
    default) gives the same surface.
    """
    run = lab.runs[0] if run_name is None else lab.run(run_name)
    spec = lab.scenario.model
    layout = run.layout
    if spec.kind in FUNCTION_MINIMA and layout.names == ("xy",):
        coeff = (float(spec.condition),)
        return SurfaceModel(spec.kind, ("xy[0]", "xy[1]"), coeff, FUNCTION_MINIMA[spec.kind])
    if spec.kind == "linear" and layout.names == ("weight", "bias") and layout.total == 2:
        return _linear_model(run, half=spec.loss == "half_mse")
    return None


def _linear_model(run: Run, half: bool) -> SurfaceModel:
    x, y = (t.detach().double().cpu().reshape(-1) for t in run.task.inputs)
    sxx, sx, sxy = float((x * x).mean()), float(x.mean()), float((x * y).mean())
    sy, syy = float(y.mean()), float((y * y).mean())
    # The least-squares optimum: the normal equations of [x 1] in closed form.
    var = sxx - sx * sx
    if var > 1e-12:
        w = (sxy - sx * sy) / var
        b = sy - w * sx
    else:
        w, b = 0.0, sy
    coeff = (sxx, sx, sxy, sy, syy, 0.5 if half else 1.0)
    return SurfaceModel("linear", ("weight", "bias"), coeff, (w, b))


def preview_step(run: Run) -> dict[str, np.ndarray] | None:
    """Where the next ``step`` would move each parameter, without touching the live run.

    The step is taken by a copy of the run's own optimizer (same class, same
    state) on copies of the parameters and their ``.grad``, so the preview is
    PyTorch's arithmetic, not a re-implementation. Returns parameter name ->
    new value, or ``None`` for runs with more than one optimizer.
    """
    if len(run.phases) != 1 or not run.active:
        return None
    clones = []
    for p in run.tensors:
        c = p.detach().clone().requires_grad_(True)
        c.grad = None if p.grad is None else p.grad.detach().clone()
        clones.append(c)
    try:
        if run.optimizers:
            (opt,) = run.optimizers.values()
            twin = type(opt)(clones, **opt.defaults)
            twin.load_state_dict(copy.deepcopy(opt.state_dict()))
            twin.step()
        else:
            lr = run.spec.optimizer.lr
            with torch.no_grad():
                for c in clones:
                    if c.grad is None:
                        # The manual update would raise on this parameter; there is no step to show.
                        return None
                    c -= lr * c.grad
    except Exception:
        return None
    return {name: c.detach().cpu().numpy().copy() for name, c in zip(run.names, clones, strict=True)}
