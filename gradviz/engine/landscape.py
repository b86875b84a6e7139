"""Loss surfaces of any model over a plane through weight space.

A :class:`Plane` is a centre and two directions in the flat parameter space of
a run. Four kinds are offered: the two parameters themselves (the true surface
of a two-parameter model), filter-normalised random directions (Li et al.
2018, "Visualizing the Loss Landscape of Neural Nets"), the top two principal
components of a recorded path, and the plane through the start and two runs'
current points. :func:`project` places paths and gradients on a plane and says
how far each lies off it, because a projected path can mislead.

:func:`point_loss` makes the loss of a run's model at points of a plane, on
its whole dataset and with the loss the run trains on, and :func:`evaluate_grid`
evaluates it over a grid (a coarse preview first, cancellable): in closed form where the loss is a
quadratic (linear regression with (half) MSE) or a known formula (the 2-D test
functions), by hand-batched matmuls for MLPs and logistic regression, and by
``torch.func.vmap`` over ``functional_call`` for anything else (the GAN).
Parameter values come from the plane alone: the live model is read for its
structure and data, never written, so a worker may evaluate while the runs
step.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal, NamedTuple

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vmap

from gradviz.engine.errors import UserError
from gradviz.engine.lab import Lab
from gradviz.engine.record import Layout
from gradviz.engine.run import Run
from gradviz.engine.scenario import LoopSpec
from gradviz.engine.surface import SurfaceModel, surface_model
from gradviz.engine.zoo import GAN, MLP, Batch, Linear, LinearOffset, Logistic, Phase, Surface2D, Task

PlaneKind = Literal["parameters", "random", "pca", "three-points"]
Method = Literal["auto", "closed-form", "matmul", "vmap"]
Extent = tuple[tuple[float, float], tuple[float, float]]

# One chunk of grid points keeps its widest activation near this size: large
# enough for efficient matmuls and few calls, small enough to stay in cache (4 MB
# measured best on two cores for MLPs 32 and 128 wide: 8 points of the wider one;
# 2 and 8 MB were a few per cent slower).
CHUNK_BYTES = 4 * 1024 * 1024
# On a GPU there is no cache to stay in; larger chunks amortise kernel launches.
GPU_CHUNK_BYTES = 64 * 1024 * 1024
# Points per chunk when activations are tiny (vmap's per-call overhead dominates).
MAX_CHUNK = 4096
# Sizes tried for the coarse preview, largest first; 21 and 11 are exact subgrids of 101.
COARSE_SIZES = (21, 11, 6)
# A path whose second principal component is smaller than this share of its first (in length, not
# variance) runs along a line: that component is rounding noise, no direction of the path.
MIN_PC_RATIO = 1e-5
# Work allowed for the coarse preview: about 0.1 s on two cores of these machines.
COARSE_FLOPS = 5e9

# One Linear layer of a hand-batched MLP: offsets of its weight and bias (-1: none)
# in the flat vector, its fan-in and fan-out, and the activation after it.
Layer = tuple[int, int, int, int, Literal["tanh", "relu"] | None]


def _never() -> bool:
    return False


# ------------------------------------------------------------------- planes
@dataclass(frozen=True, eq=False)
class Plane:
    """A plane through weight space: ``centre + a * directions[0] + b * directions[1]``.

    Attributes
    ----------
    kind:
        How it was made: ``"parameters"``, ``"random"``, ``"pca"`` or ``"three-points"``.
    layout:
        Names and shapes of the parameters, in the order of the flat vectors.
    centre:
        The point at coordinates (0, 0), shape ``(P,)``, float64.
    directions:
        The two directions, shape ``(2, P)``, float64; not necessarily orthogonal
        or of unit length (filter-normalised directions are neither).
    labels:
        Axis labels for the two coordinates.
    """

    kind: str
    layout: Layout
    centre: np.ndarray
    directions: np.ndarray
    labels: tuple[str, str]

    def __post_init__(self) -> None:
        total = self.layout.total
        if self.centre.shape != (total,) or self.directions.shape != (2, total):
            raise ValueError(
                f"a plane over {total} parameters needs a centre of shape ({total},) and directions of "
                f"shape (2, {total}); got {self.centre.shape} and {self.directions.shape}"
            )

    @cached_property
    def _coordinates_of(self) -> np.ndarray:
        """The (P, 2) matrix that maps an offset from the centre to least-squares coordinates."""
        return np.linalg.pinv(self.directions)

    def point(self, a: float, b: float) -> np.ndarray:
        """The flat parameter vector at coordinates ``(a, b)``."""
        return self.centre + a * self.directions[0] + b * self.directions[1]


class Projection(NamedTuple):
    """Where vectors fall on a plane: coordinates ``(M, 2)`` and distances off it ``(M,)``."""

    coords: np.ndarray
    residuals: np.ndarray


def flatten(layout: Layout, values: Mapping[str, np.ndarray | None]) -> np.ndarray:
    """A per-parameter mapping (params, ``.grad``) as one float64 vector in ``layout`` order.

    ``None`` (a ``.grad`` that is ``None``) counts as zeros.
    """
    parts = []
    for name, size in zip(layout.names, layout.sizes, strict=True):
        v = values.get(name)
        parts.append(np.zeros(size) if v is None else np.asarray(v, dtype=np.float64).reshape(-1))
    return np.concatenate(parts) if parts else np.zeros(0)


def parameter_plane(layout: Layout) -> Plane:
    """The true surface of a model with exactly two parameter values.

    The centre is zero and the directions are the unit axes, so coordinates are
    the parameter values themselves and the axes are named after them.
    """
    if layout.total != 2:
        raise UserError(
            f"The parameter plane needs a model with two parameter values; this one has {layout.total}."
        )
    if len(layout.names) == 2:
        labels = (layout.names[0], layout.names[1])
    else:
        labels = (f"{layout.names[0]}[0]", f"{layout.names[0]}[1]")
    return Plane("parameters", layout, np.zeros(2), np.eye(2), labels)


def filter_normalised(direction: np.ndarray, centre: np.ndarray, layout: Layout) -> np.ndarray:
    """Li et al.'s filter normalisation of a flat ``direction`` against the weights ``centre``.

    Each filter (row along the first axis) of a parameter with two or more axes
    is rescaled to the norm of the same filter of the weights; parameters with
    one axis or none (biases) get zeros, as the paper's code does by default
    (``ignore="biasbn"``), so the picture is not dominated by biases.
    """
    out = np.zeros_like(direction, dtype=np.float64)
    offset = 0
    for shape, size in zip(layout.shapes, layout.sizes, strict=True):
        if len(shape) >= 2:
            d = direction[offset : offset + size].reshape(shape[0], -1)
            w = centre[offset : offset + size].reshape(shape[0], -1)
            # The paper's 1e-10 keeps an all-zero random filter from dividing by zero.
            scale = np.linalg.norm(w, axis=1) / (np.linalg.norm(d, axis=1) + 1e-10)
            out[offset : offset + size] = (d * scale[:, None]).reshape(-1)
        offset += size
    return out


def random_plane(centre: np.ndarray, layout: Layout, seed: int = 0) -> Plane:
    """Two seeded Gaussian directions, filter-normalised at ``centre`` (Li et al. 2018).

    Raises
    ------
    UserError
        When a direction is zero: the model has only 1-D parameters or all-zero weights.
    """
    rng = np.random.default_rng(seed)
    centre = np.asarray(centre, dtype=np.float64)
    dirs = np.stack([filter_normalised(rng.standard_normal(layout.total), centre, layout) for _ in range(2)])
    if not np.all(np.linalg.norm(dirs, axis=1) > 0):
        raise UserError(
            "Filter-normalised directions are zero for this model (its weights are zero or it has only "
            "1-D parameters); use the parameter plane or the principal components of its path."
        )
    return Plane("random", layout, centre, dirs, ("direction 1 (filter-normalised)", "direction 2"))


def pca_plane(trajectory: np.ndarray | Sequence[np.ndarray], layout: Layout, seed: int = 0) -> Plane:
    """The top two principal components of a path, centred at its last point (Li et al. 2018, sec. 7).

    The components are those of the offsets of every point from the last one, so
    the final point is the origin and the directions are unit vectors (coordinates
    are distances in weight space). Signs are chosen so the path starts at
    negative coordinates.

    A path that runs along a line (its second component under :data:`MIN_PC_RATIO`
    of its first) has no second direction: the plane's second direction is then a
    seeded random one at right angles to the first, and its label says so. A small
    but real share is written with the digits it needs, never as "0%".

    Raises
    ------
    UserError
        When the path has not moved yet.
    """
    path = np.asarray(trajectory, dtype=np.float64).reshape(-1, layout.total)
    centre = path[-1]
    offsets = path - centre
    _, s, vt = np.linalg.svd(offsets, full_matrices=False)
    if not (len(s) and s[0] > 0):
        raise UserError("The path has not moved yet; step further or use another plane.")
    share = s**2 / np.sum(s**2)
    dirs = np.zeros((2, layout.total))
    dirs[0] = vt[0]
    line = len(s) < 2 or not s[1] >= MIN_PC_RATIO * s[0]
    if line:
        across = np.random.default_rng(seed).standard_normal(layout.total)
        across -= (across @ dirs[0]) * dirs[0]
        norm = float(np.linalg.norm(across))
        if not norm > 0:
            raise UserError("The path runs along the model's only direction; a loss curve shows it.")
        dirs[1] = across / norm
        second = "random, at right angles (the path is a line)"
    else:
        dirs[1] = vt[1]
        second = f"PC2 ({percent(share[1])})"
    for k in range(1 if line else 2):
        if dirs[k] @ offsets[0] > 0:
            dirs[k] = -dirs[k]
    return Plane("pca", layout, centre, dirs, (f"PC1 ({percent(share[0])} of the path)", second))


def percent(share: float) -> str:
    """A share as a percentage with the digits it needs: 97%, 3%, 0.42%, 0.0031%; never 0% unless it is 0."""
    if share <= 0:
        return "0%"
    if share >= 0.01:
        return f"{share:.0%}"
    return f"{100 * share:.2g}%"


def three_point_plane(
    start: np.ndarray,
    yours: np.ndarray,
    reference: np.ndarray,
    layout: Layout,
    names: tuple[str, str] = ("yours", "reference"),
) -> Plane:
    """The plane through the start and two runs' points; all three lie in it exactly.

    The centre is ``start``; the first direction is the unit vector towards
    ``yours`` and the second the unit vector of the part of ``reference - start``
    orthogonal to it, so coordinates are distances and angles are true.

    Raises
    ------
    UserError
        When the three points are on one line (for example, before any step).
    """
    start = np.asarray(start, dtype=np.float64)
    u = np.asarray(yours, dtype=np.float64) - start
    v = np.asarray(reference, dtype=np.float64) - start
    nu = float(np.linalg.norm(u))
    if nu == 0:
        raise UserError(f"{names[0]!r} is still at the start, so no plane runs through the three points yet.")
    u = u / nu
    v = v - (u @ v) * u
    nv = float(np.linalg.norm(v))
    if not nv > 1e-12 * max(nu, 1.0):
        raise UserError(
            f"The start, {names[0]!r} and {names[1]!r} lie on one line, so they do not define a plane."
        )
    labels = (f"towards {names[0]}", f"towards {names[1]} (orthogonal part)")
    return Plane("three-points", layout, start, np.stack([u, v / nv]), labels)


def project(
    plane: Plane, vectors: np.ndarray | Sequence[np.ndarray], *, displacement: bool = False
) -> Projection:
    """Coordinates of points (or displacements) on ``plane`` and their distance off it.

    Parameters
    ----------
    plane:
        The plane.
    vectors:
        Flat parameter vectors, shape ``(P,)`` or ``(M, P)``.
    displacement:
        ``False`` for points (a path: the centre is subtracted first); ``True``
        for displacements such as gradients or steps, which are projected as they are.

    Returns
    -------
    Projection
        ``coords`` ``(M, 2)``: the least-squares coordinates; ``residuals`` ``(M,)``:
        the Euclidean distance between each vector and its projection.
    """
    v = np.asarray(vectors, dtype=np.float64).reshape(-1, plane.layout.total)
    offsets = v if displacement else v - plane.centre
    coords = offsets @ plane._coordinates_of
    residuals = np.linalg.norm(offsets - coords @ plane.directions, axis=1)
    return Projection(coords, residuals)


def fit_extent(coords: np.ndarray, margin: float = 0.25, minimum: float = 1e-3) -> Extent:
    """A range for each axis that holds ``coords`` ``(M, 2)`` with ``margin`` of the span added.

    Non-finite coordinates (a diverged run) are left out; each half-width is at
    least ``minimum`` so a single point still gets a picture around it.
    """
    c = np.asarray(coords, dtype=np.float64).reshape(-1, 2)
    c = c[np.isfinite(c).all(axis=1)]
    if len(c) == 0:
        c = np.zeros((1, 2))
    lo, hi = c.min(axis=0), c.max(axis=0)
    mid, half = (lo + hi) / 2, np.maximum((hi - lo) * (0.5 + margin), minimum)
    return (
        (float(mid[0] - half[0]), float(mid[0] + half[0])),
        (float(mid[1] - half[1]), float(mid[1] + half[1])),
    )


# ---------------------------------------------------------- planes of a lab
def current_params(run: Run) -> np.ndarray:
    """The run's parameters now, as one float64 vector (read from the live tensors)."""
    with torch.no_grad():
        return np.concatenate([p.detach().cpu().double().reshape(-1).numpy() for p in run.tensors])


def trajectory(lab: Lab, run_name: str) -> np.ndarray:
    """The run's path: its parameters at the start of every recorded iteration, then now."""
    h = lab.history[run_name]
    points = [h.keyframe(k)[0].param_flat.astype(np.float64) for k in h.keyframe_iterations()]
    points.append(current_params(lab.run(run_name)))
    return np.stack(points)


def plane_for(lab: Lab, run_name: str, kind: PlaneKind, *, seed: int = 0, other: str | None = None) -> Plane:
    """A plane of ``kind`` for a run of ``lab``, from its current state and history.

    Reads the live run, so call it where the lab is not stepping (the session
    worker); the plane then stays fixed while the runs step.

    Parameters
    ----------
    lab, run_name:
        The lab and the run whose model the plane lies in.
    kind:
        ``"parameters"`` (two-parameter models); ``"random"`` (centred at the run's
        current point); ``"pca"`` (the run's recorded path); ``"three-points"``
        (the start, this run's point and ``other``'s).
    seed:
        Seed of the random directions.
    other:
        The second run of the three-point plane; by default the lab's first other run.
    """
    run = lab.run(run_name)
    layout = run.layout
    if kind == "parameters":
        return parameter_plane(layout)
    if kind == "random":
        return random_plane(current_params(run), layout, seed=seed)
    if kind == "pca":
        return pca_plane(trajectory(lab, run_name), layout)
    if kind == "three-points":
        other = other or next((r.name for r in lab.runs if r.name != run_name), None)
        if other is None:
            raise UserError("The three-point plane needs a second run; this lab has only one.")
        start = lab.initial(run_name).param_flat
        ends = current_params(run), current_params(lab.run(other))
        return three_point_plane(start, *ends, layout, names=(run_name, other))
    raise UserError(f"Unknown plane kind {kind!r}; allowed: parameters, random, pca, three-points.")


# ------------------------------------------------------------- evaluation
class PointLoss:
    """The loss at points of a plane, given as coordinates; the base of the evaluation methods.

    Attributes
    ----------
    method:
        ``"closed-form"``, ``"matmul"`` or ``"vmap"``.
    chunk:
        Points evaluated per batch; cancellation is checked between batches.
    flops_per_point:
        Floating-point operations of the loss at one point (0 for closed forms).
    """

    method = ""
    chunk = MAX_CHUNK
    flops_per_point = 0.0

    def batch(self, coords: np.ndarray) -> np.ndarray:
        """The loss at up to ``chunk`` points, ``(C, 2)`` coordinates -> ``(C,)`` float64."""
        raise NotImplementedError

    def __call__(self, coords: np.ndarray, cancelled: Callable[[], bool] = _never) -> np.ndarray | None:
        """The loss at every point of ``coords`` ``(M, 2)``; ``None`` if ``cancelled()`` turned true."""
        coords = np.asarray(coords, dtype=np.float64).reshape(-1, 2)
        out = np.empty(len(coords))
        with torch.no_grad():
            for start in range(0, len(coords), self.chunk):
                if cancelled():
                    return None
                out[start : start + self.chunk] = self.batch(coords[start : start + self.chunk])
        return out


class QuadraticLoss(PointLoss):
    """Exact loss of a model linear in its parameters with (half) MSE, from six dataset means.

    With ``A`` the design matrix (one column per parameter value) the residual at
    ``(a, b)`` is ``r0 + a*u + b*w`` with ``r0 = A @ centre - y``, ``u = A @ d1``,
    ``w = A @ d2``; its mean square needs only the means of the six products,
    so any grid costs microseconds.
    """

    method = "closed-form"

    def __init__(self, design: np.ndarray, target: np.ndarray, plane: Plane, factor: float) -> None:
        r0 = design @ plane.centre - target
        u, w = design @ plane.directions[0], design @ plane.directions[1]
        self.moments = tuple(
            float(np.mean(p * q)) for p, q in ((r0, r0), (r0, u), (r0, w), (u, u), (u, w), (w, w))
        )
        self.factor = factor

    def batch(self, coords: np.ndarray) -> np.ndarray:
        a, b = coords[:, 0], coords[:, 1]
        rr, ru, rw, uu, uw, ww = self.moments
        with np.errstate(over="ignore", invalid="ignore"):
            z = rr + 2 * a * ru + 2 * b * rw + a * a * uu + 2 * a * b * uw + b * b * ww
            # Rounding can push the exact minimum a hair below zero.
            return self.factor * np.maximum(z, 0.0)


class FormulaLoss(PointLoss):
    """A 2-D test function, evaluated by its formula in :mod:`gradviz.engine.surface`."""

    method = "closed-form"

    def __init__(self, model: SurfaceModel, plane: Plane) -> None:
        self.model = model
        self.plane = plane

    def batch(self, coords: np.ndarray) -> np.ndarray:
        xy = self.plane.centre + coords @ self.plane.directions
        return self.model.evaluate(xy[:, 0], xy[:, 1])


class _TorchLoss(PointLoss):
    """Shared set-up of the torch methods: the plane as tensors on the model's device."""

    def __init__(self, plane: Plane, device: torch.device, dtype: torch.dtype) -> None:
        self.centre = torch.as_tensor(plane.centre, dtype=dtype, device=device)
        self.directions = torch.as_tensor(plane.directions, dtype=dtype, device=device)
        self.dtype, self.device = dtype, device

    def flat_params(self, coords: np.ndarray) -> torch.Tensor:
        """Parameter vectors ``(C, P)`` of the points: one small matmul for the whole chunk."""
        c = torch.as_tensor(coords, dtype=self.dtype, device=self.device)
        return torch.addmm(self.centre, c, self.directions)


class MatmulLoss(_TorchLoss):
    """Hand-batched MLP: every grid point's weights in one ``baddbmm`` per layer.

    Activations are laid out features by data, ``(C, width, N)``, so each layer is
    ``W @ H + b`` with ``W`` exactly as the flat vector stores it. This layout
    matters for the output layer: with width 1 it is a row vector times the
    activations, which runs at memory speed, while the other layout's
    ``(N, width) @ (width, 1)`` takes a slow path of the batched GEMM (measured on
    a 128-wide MLP: 15% of the surface's time, against 3% now).

    tanh(z) = 2 sigmoid(2z) - 1, and PyTorch's CPU sigmoid costs a quarter of its
    tanh (which would be a third of the whole surface). The factor 2 goes into the
    layer's weights and the affine ``2s - 1`` into the next layer's:
    ``W(2s - 1) + b = (2W)s + (b - W1)``. Both are linear in the parameters, so
    they are applied once to the plane's centre and directions; a chunk's weights
    are then one small matmul and its layers read them without copies. Two
    activation buffers are allocated once and reused, so the allocator neither
    returns nor faults back memory between chunks.
    """

    method = "matmul"

    def __init__(
        self,
        layers: Sequence[Layer],
        data: Batch,
        loss: Literal["mse", "bce"],
        plane: Plane,
        chunk_bytes: int,
    ) -> None:
        x, y = data
        super().__init__(plane, x.device, x.dtype)
        self.layers, self.loss = layers, loss
        n = x.shape[0]
        # Data along the last axis, as the activations: (features, N) and (outputs, N).
        self.x, self.y = x.reshape(n, -1).T.contiguous(), y.reshape(n, -1).T.contiguous()
        self.flops_per_point = 2.0 * n * sum(i * o for _, _, i, o, _ in layers)
        widest = max(out for _, _, _, out, _ in layers)
        self.chunk = int(min(MAX_CHUNK, max(1, chunk_bytes // (n * widest * x.element_size()))))
        self._buffers = [
            torch.empty(self.chunk * n * widest, dtype=x.dtype, device=x.device) for _ in range(2)
        ]
        effective = self._effective(torch.cat([self.centre[None], self.directions]))
        self.centre, self.directions = effective[0].contiguous(), effective[1:].contiguous()

    def _effective(self, flat: torch.Tensor) -> torch.Tensor:
        """Rows of flat parameters ``(K, P)`` as ``[W1, b1, W2, b2, ...]`` with tanh folded in."""
        k = flat.shape[0]
        parts, halved = [], False
        for w_at, b_at, fan_in, fan_out, act in self.layers:
            weight = flat[:, w_at : w_at + fan_in * fan_out].reshape(k, fan_out, fan_in)
            bias = flat[:, b_at : b_at + fan_out] if b_at >= 0 else flat.new_zeros(k, fan_out)
            if halved:
                weight, bias = 2 * weight, bias - weight.sum(dim=2)
            if act == "tanh":
                weight, bias = 2 * weight, 2 * bias
            parts += [weight.reshape(k, -1), bias]
            halved = act == "tanh"
        return torch.cat(parts, dim=1)

    def batch(self, coords: np.ndarray) -> np.ndarray:
        E = self.flat_params(coords)
        c, n = E.shape[0], self.x.shape[1]
        h = self.x.expand(c, *self.x.shape)
        at = 0
        for i, (_, _, fan_in, fan_out, act) in enumerate(self.layers):
            weight = E[:, at : at + fan_in * fan_out].view(c, fan_out, fan_in)
            bias = E[:, at + fan_in * fan_out : at + (fan_in + 1) * fan_out].unsqueeze(2)
            at += (fan_in + 1) * fan_out
            # A contiguous view of the buffer's head: matmuls write into it without a copy.
            out = self._buffers[i % 2][: c * fan_out * n].view(c, fan_out, n)
            h = torch.baddbmm(bias, weight, h, out=out)
            if act == "tanh":
                h.sigmoid_()
            elif act == "relu":
                h.relu_()
        if self.layers[-1][4] == "tanh":
            h = 2 * h - 1
        return _reduce(h, self.y, self.loss)


def _reduce(out: torch.Tensor, y: torch.Tensor, loss: Literal["mse", "bce"]) -> np.ndarray:
    """Each point's mean loss over the data, as training reduces it.

    ``out`` holds the outputs ``(C, outputs, N)`` of ``C`` points, ``y`` the targets ``(outputs, N)``.
    """
    if loss == "mse":
        per_point = (out - y).square_().mean(dim=(1, 2))
    else:
        target = y.expand_as(out)
        per_point = nn.functional.binary_cross_entropy_with_logits(out, target, reduction="none").mean(
            dim=(1, 2)
        )
    return per_point.double().cpu().numpy()


class _LossModule(nn.Module):
    """Private copies of a task's modules whose ``forward`` is the task's loss on one batch.

    ``functional_call`` swaps parameters of this module only; the live modules
    are never touched. Parameters outside the modules live in a ParameterDict
    that the twin task reads by key, so they are swapped too.
    """

    def __init__(self, task: Task, phase: Phase, batch: Batch, iteration: int, loop: LoopSpec) -> None:
        super().__init__()
        self.nets = nn.ModuleDict({k: copy.deepcopy(m) for k, m in task.modules.items()})
        self.outside = nn.ParameterDict(
            {k: nn.Parameter(p.detach().clone()) for k, p in task.outside.items()}
        )
        twin = task.twin()
        twin.modules = dict(self.nets.items())
        twin.outside = self.outside  # type: ignore[assignment]
        self.twin, self.phase, self.data, self.iteration, self.loop = twin, phase, batch, iteration, loop
        paths = {id(p): f"nets.{m}.{n}" for m, mod in task.modules.items() for n, p in mod.named_parameters()}
        paths.update({id(p): f"outside.{k}" for k, p in task.outside.items()})
        self.paths = [paths[id(p)] for p in task.params.values()]

    def forward(self) -> torch.Tensor:
        return self.twin.loss(self.phase, self.data, self.iteration, self.loop)


class VmapLoss(_TorchLoss):
    """The generic method: ``vmap`` of ``functional_call`` of the task's own loss over grid points."""

    method = "vmap"

    def __init__(
        self, module: _LossModule, layout: Layout, plane: Plane, chunk_bytes: int, widest: int, n: int
    ) -> None:
        dtype = next(iter(module.parameters()), torch.empty(0)).dtype
        device = next(iter(module.parameters()), torch.empty(0)).device
        super().__init__(plane, device, dtype)
        self.module, self.layout = module, layout
        self.chunk = int(min(MAX_CHUNK, max(1, chunk_bytes // (max(n, 1) * max(widest, 1) * 4))))
        self.flops_per_point = 2.0 * n * layout.total
        self._loss = vmap(self._one)

    def _one(self, flat: torch.Tensor) -> torch.Tensor:
        params, offset = {}, 0
        for path, shape, size in zip(self.module.paths, self.layout.shapes, self.layout.sizes, strict=True):
            params[path] = flat[offset : offset + size].view(shape)
            offset += size
        return functional_call(self.module, params, (), strict=True)

    def batch(self, coords: np.ndarray) -> np.ndarray:
        return self._loss(self.flat_params(coords)).double().cpu().numpy()


def full_batch(task: Task) -> Batch:
    """The whole dataset as one batch; for the GAN, the real samples and noise of one epoch."""
    if isinstance(task, GAN):
        # A shallow twin draws the batches, so the live task's shuffle cache is left alone.
        twin = copy.copy(task)
        per_epoch = task.data.n // task.data.batch_size
        parts = [twin.batch(i) for i in range(per_epoch)]
        return tuple(torch.cat(ts) for ts in zip(*parts, strict=True))
    return task.inputs


def _mlp_layers(
    task: Task,
) -> list[Layer] | None:
    """Offsets and sizes of each Linear layer of an MLP or logistic model, with its activation.

    ``None`` when the model is not a plain chain of Linear, Tanh and ReLU modules.
    """
    if not isinstance(task, MLP | Logistic) or task.outside or set(task.modules) != {"model"}:
        return None
    model = task.modules["model"]
    children = list(model) if isinstance(model, nn.Sequential) else [model]
    offsets, at = {}, 0
    for p in task.params.values():
        offsets[id(p)] = at
        at += p.numel()
    layers: list = []
    for child in children:
        if isinstance(child, nn.Linear):
            b_at = offsets[id(child.bias)] if child.bias is not None else -1
            layers.append([offsets[id(child.weight)], b_at, child.in_features, child.out_features, None])
        elif isinstance(child, nn.Tanh | nn.ReLU) and layers and layers[-1][4] is None:
            layers[-1][4] = "tanh" if isinstance(child, nn.Tanh) else "relu"
        else:
            return None
    return [tuple(layer) for layer in layers]


def _design(task: Task, layout: Layout, iteration: int) -> np.ndarray | None:
    """The design matrix ``(N, P)`` of a linear regression task; ``None`` for other tasks."""
    if type(task) not in (Linear, LinearOffset) or task.spec.loss not in ("mse", "half_mse"):
        return None
    x = task.inputs[0].detach().cpu().double().reshape(-1).numpy()
    active = isinstance(task, LinearOffset) and iteration % task.spec.offset_every == 0
    columns = {"weight": x, "bias": np.ones_like(x), "offset": np.full_like(x, float(active))}
    if set(layout.names) - set(columns) or layout.sizes != (1,) * len(layout.names):
        return None
    return np.stack([columns[name] for name in layout.names], axis=1)


def point_loss(
    lab: Lab,
    run_name: str,
    plane: Plane,
    *,
    method: Method = "auto",
    phase: str | None = None,
    iteration: int = 0,
    chunk_bytes: int | None = None,
) -> PointLoss:
    """The loss of a run's model at points of ``plane``, on its whole dataset.

    The loss is the one the run trains on, averaged over all its data (so a
    loss that training divides by the number of micro-batches is not divided).

    Parameters
    ----------
    lab, run_name:
        The run whose model, data, loss and device are used.
    plane:
        Where the points lie.
    method:
        ``"auto"`` picks the fastest exact method the model allows: ``"closed-form"``
        (linear regression with (half) MSE, the 2-D test functions), then
        ``"matmul"`` (MLPs and logistic regression), then ``"vmap"`` (any model).
    phase:
        For models with several losses (the GAN): whose loss; default the first.
    iteration:
        The iteration whose loss is meant, for losses that depend on it (an
        offset applied every few iterations).
    chunk_bytes:
        Target size of one chunk's widest activation; by default :data:`CHUNK_BYTES`
        on the CPU and :data:`GPU_CHUNK_BYTES` on other devices.

    Raises
    ------
    UserError
        When the requested method does not apply to this model.
    """
    run = lab.run(run_name)
    if plane.layout != run.layout:
        raise UserError(
            f"This plane is for another model; {run_name!r} has parameters {', '.join(run.names)}."
        )
    methods = (method,) if method != "auto" else ("closed-form", "matmul", "vmap")
    if chunk_bytes is None:
        chunk_bytes = CHUNK_BYTES if lab.device.type == "cpu" else GPU_CHUNK_BYTES
    for m in methods:
        found = _build(m, lab, run, plane, phase, iteration, chunk_bytes)
        if found is not None:
            return found
    raise UserError(f"The {method} method does not apply to the {lab.scenario.model.kind} model.")


def _build(
    method: str, lab: Lab, run: Run, plane: Plane, phase: str | None, iteration: int, chunk_bytes: int
) -> PointLoss | None:
    task = run.task
    if method == "closed-form":
        if isinstance(task, Surface2D):
            model = surface_model(lab, run.name)
            return None if model is None else FormulaLoss(model, plane)
        design = _design(task, run.layout, iteration)
        if design is None:
            return None
        y = task.inputs[1].detach().cpu().double().reshape(-1).numpy()
        return QuadraticLoss(design, y, plane, 0.5 if task.spec.loss == "half_mse" else 1.0)
    if method == "matmul":
        layers = _mlp_layers(task)
        if layers is None:
            return None
        bce = isinstance(task, Logistic) or task.data.kind == "blobs"
        return MatmulLoss(layers, task.inputs, "bce" if bce else "mse", plane, chunk_bytes)
    if method == "vmap":
        chosen = run.phases[phase] if phase is not None else next(iter(run.phases.values()))
        # The whole-dataset mean: no division by the number of micro-batches.
        loop = dataclasses.replace(run.loop, scale_loss=False)
        data = full_batch(task)
        module = _LossModule(task, chosen, data, iteration, loop)
        widest = max((p.shape[0] for p in task.params.values() if p.dim() >= 1), default=1)
        n = data[0].shape[0] if data else 1
        return VmapLoss(module, run.layout, plane, chunk_bytes, widest, n)
    return None


@dataclass(frozen=True)
class Grid:
    """The loss on a grid over a plane.

    Attributes
    ----------
    xs, ys:
        Coordinates along the plane's first and second direction.
    Z:
        ``Z[i, j]`` is the loss at ``(xs[i], ys[j])``; inf and NaN where the model diverges.
    labels:
        Axis labels (the plane's).
    elapsed:
        Seconds since the evaluation started.
    final:
        False for the coarse preview of a progressive evaluation.
    method:
        The evaluation method used.
    """

    xs: np.ndarray
    ys: np.ndarray
    Z: np.ndarray
    labels: tuple[str, str]
    elapsed: float
    final: bool
    method: str


def _axes(n: int, extent: float | Extent) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(extent, int | float):
        extent = ((-float(extent), float(extent)), (-float(extent), float(extent)))
    (x0, x1), (y0, y1) = extent
    return np.linspace(x0, x1, n), np.linspace(y0, y1, n)


def _points(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    gx, gy = np.meshgrid(xs, ys, indexing="ij")
    return np.stack([gx.ravel(), gy.ravel()], axis=1)


def coarse_size(loss: PointLoss) -> int:
    """The largest preview size of :data:`COARSE_SIZES` whose work fits :data:`COARSE_FLOPS`."""
    for size in COARSE_SIZES:
        if size * size * loss.flops_per_point <= COARSE_FLOPS:
            return size
    return COARSE_SIZES[-1]


def evaluate_grid(
    loss: PointLoss,
    labels: tuple[str, str],
    n: int,
    extent: float | Extent,
    *,
    progressive: bool = False,
    coarse: int | None = None,
    cancelled: Callable[[], bool] = _never,
    curve: bool = False,
) -> Iterator[Grid]:
    """The loss ``loss`` gives on a grid: the one evaluation of a surface, in the window and here.

    Parameters
    ----------
    loss, labels:
        The evaluator (see :func:`point_loss`) and the plane's axis labels.
    n:
        Points per axis.
    extent:
        ``((x0, x1), (y0, y1))`` in plane coordinates, or ``r`` for ``((-r, r), (-r, r))``.
    progressive:
        Yield a ``coarse`` x ``coarse`` grid over the same extent first. When
        ``coarse - 1`` divides ``n - 1`` its points are part of the full grid and
        are not evaluated twice.
    coarse:
        Points per axis of the preview; by default the largest of 21, 11 and 6
        whose cost stays near 0.1 s (:func:`coarse_size`).
    cancelled:
        Checked between chunks of points; once true the iterator ends without
        yielding the rest.
    curve:
        A loss curve (one parameter): ``n`` points along the first axis at the
        extent's lowest second coordinate.

    Yields
    ------
    Grid
        The coarse grid (``final=False``, progressive only), then the full grid.
    """
    t0 = time.perf_counter()
    xs, ys = _axes(n, extent)
    if curve:
        ys = ys[:1]
    Z = np.full((len(xs), len(ys)), np.nan)
    todo = np.ones(Z.shape, dtype=bool)
    coarse = coarse or coarse_size(loss)
    if progressive and 1 < coarse < n:
        stride = (n - 1) // (coarse - 1)
        exact = stride * (coarse - 1) == n - 1
        cx, cy = (xs[::stride], ys[::stride]) if exact else _axes(coarse, ((xs[0], xs[-1]), (ys[0], ys[-1])))
        if curve:
            cy = ys[:1]
        cz = loss(_points(cx, cy), cancelled)
        if cz is None:
            return
        cz = cz.reshape(len(cx), len(cy))
        yield Grid(cx, cy, cz, labels, time.perf_counter() - t0, False, loss.method)
        if exact:
            across = 1 if curve else stride
            Z[::stride, ::across] = cz
            todo[::stride, ::across] = False
    rest = loss(_points(xs, ys)[todo.ravel()], cancelled)
    if rest is None:
        return
    Z[todo] = rest
    yield Grid(xs, ys, Z, labels, time.perf_counter() - t0, True, loss.method)
