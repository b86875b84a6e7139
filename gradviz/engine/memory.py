"""How much memory a scenario's lab needs, checked against what this machine has, before anything is built.

The estimate is worked out from the scenario alone (no torch, no model), so
``check``, ``trace``, ``export``, ``snapshot`` and the window all refuse a model
that cannot fit with the same sentence, before allocating any of it. It counts,
in bytes:

- per run, the parameters, their ``.grad`` and the optimizer's state (0 to 3
  tensors the size of the parameters), five times over: the live tensors, the
  run's latest snapshot, the packed keyframe it started from, and the live
  tensors and snapshot of the run that rebuilds a large model's records by
  replay (measured on a 3-million-parameter MLP: 40 bytes per parameter with
  plain SGD);
- per run, the activations a forward keeps for backward: a batch through every
  layer, three floats per unit (output, activation, gradient);
- once, the loss surface: its plane (a centre and two directions in double
  precision, their pseudo-inverse, the single-precision copies the matmuls
  read) and one chunk of grid points' weights (measured: 100 bytes per
  parameter), plus two activation buffers of every data point through the
  widest layer;
- the data set itself.

A scenario may use at most :data:`MEMORY_FRACTION` of the memory that is
available now (``MemAvailable`` in ``/proc/meminfo``, or the free physical
pages, and no more than a cgroup's limit leaves): the rest is for Python, torch,
the window, and the other programs of the machine. Where the free memory cannot
be read, nothing is refused.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradviz.engine.scenario import DataSpec, ModelSpec, OptimizerSpec, Scenario

MEMORY_FRACTION = 0.5
FLOAT_BYTES = 4
# Copies of (parameters, .grad, optimizer state) a run holds at most (see above).
COPIES_PER_RUN = 5
SURFACE_BYTES_PER_PARAMETER = 100
# Activations kept per unit of a layer during a forward and its backward.
ACTIVATION_FLOATS_PER_UNIT = 3
# The surface's activation chunk, as gradviz.engine.landscape sizes it on the CPU.
SURFACE_CHUNK_BYTES = 4 * 1024 * 1024
INPUTS_OF_DATA = {"line": 1, "blobs": 2, "wave": 2, "gaussian": 1, "sequence": 1, "none": 0}


def layer_widths(model: ModelSpec, data: DataSpec) -> list[tuple[int, int]]:
    """(fan in, fan out) of every ``Linear`` layer of the model, in order; none for 2-D functions."""
    kind = model.kind
    if kind in ("linear", "linear-offset"):
        return [(1, 1)]
    if kind == "logistic":
        return [(2, 1)]
    if kind == "mlp":
        dims = [1 if data.kind == "line" else 2, *model.widths, 1]
        return list(itertools.pairwise(dims))
    if kind == "gan":
        h = model.hidden
        return [(1, h), (h, 1)] * 2
    if kind == "rnn":
        # torch.nn.RNN(1, h): input-to-hidden and hidden-to-hidden, each with a bias; the head.
        h = model.hidden
        return [(1, h), (h, h), (h, 1)]
    return []


def parameter_count(model: ModelSpec, data: DataSpec) -> int:
    """Trainable scalars of one run of a scenario with this model and data."""
    kind = model.kind
    if kind in ("quadratic", "rosenbrock", "saddle"):
        return 2
    layers = layer_widths(model, data)
    total = sum(fan_in * fan_out + fan_out for fan_in, fan_out in layers)
    if kind in ("linear", "linear-offset") and not model.bias:
        total -= 1
    if kind == "linear-offset":
        total += 1
    return total


def state_tensors(optimizer: OptimizerSpec) -> int:
    """Tensors the size of the parameters the optimizer keeps as state."""
    kind, options = optimizer.kind, optimizer.options
    if kind == "SGD":
        return 1 if options.get("momentum", 0) else 0
    if kind in ("Adam", "AdamW"):
        return 3 if options.get("amsgrad", False) else 2
    if kind == "RMSprop":
        return 1 + bool(options.get("momentum", 0)) + bool(options.get("centered", False))
    if kind == "Adagrad":
        return 1
    return 0


@dataclass(frozen=True)
class Estimate:
    """The memory a scenario's lab needs, and what dominates it.

    Attributes
    ----------
    total:
        Bytes in all.
    parameters:
        Trainable scalars of one run.
    runs:
        Runs of the scenario.
    model_bytes:
        Bytes that grow with the parameters (runs and the surface's plane).
    data_bytes:
        Bytes that grow with the data points and the batch (activations, the data set).
    """

    total: int
    parameters: int
    runs: int
    model_bytes: int
    data_bytes: int


def estimate(scenario: Scenario) -> Estimate:
    """The bytes a lab of ``scenario`` needs at most, by the rules in this module's docstring."""
    model, data = scenario.model, scenario.data
    params = parameter_count(model, data)
    layers = layer_widths(model, data)
    units = sum(fan_out for _, fan_out in layers)
    widest = max((fan_out for _, fan_out in layers), default=1)
    n = data.n if data.kind != "none" else 0
    batch = data.batch_size if data.kind != "none" else 0
    run_bytes = sum(
        COPIES_PER_RUN * (2 + state_tensors(run.optimizer)) * params * FLOAT_BYTES for run in scenario.runs
    )
    surface_bytes = SURFACE_BYTES_PER_PARAMETER * params
    activation_bytes = len(scenario.runs) * batch * units * ACTIVATION_FLOATS_PER_UNIT * FLOAT_BYTES
    # Two buffers of at least one grid point's activations: all n points through the widest layer.
    surface_buffers = 2 * max(SURFACE_CHUNK_BYTES, n * widest * FLOAT_BYTES) if layers else 0
    data_set = n * (INPUTS_OF_DATA.get(data.kind, 2) + 1) * FLOAT_BYTES
    model_bytes = run_bytes + surface_bytes
    data_bytes = activation_bytes + surface_buffers + data_set
    return Estimate(model_bytes + data_bytes, params, len(scenario.runs), model_bytes, data_bytes)


def _meminfo_available() -> int | None:
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            fields = line.split()
            return int(fields[1]) * 1024 if len(fields) > 1 and fields[1].isdigit() else None
    return None


def _sysconf_available() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def _cgroup_left() -> int | None:
    """What a cgroup (v2) memory limit leaves this process, if one is set."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
    except OSError:
        return None
    if not limit.isdigit() or not used.isdigit():
        return None  # "max": no limit
    return max(int(limit) - int(used), 0)


def available_bytes() -> int | None:
    """Memory this machine has available now, in bytes; ``None`` where it cannot be read."""
    found = [v for v in (_meminfo_available() or _sysconf_available(), _cgroup_left()) if v is not None]
    return min(found) if found else None


def gigabytes(n: float) -> str:
    """Bytes as a short figure for a sentence: ``3.8 GB``, ``512 MB``."""
    if n >= 1e9:
        return f"{n / 1e9:.1f} GB"
    return f"{max(n / 1e6, 0.1):.1f} MB" if n < 1e8 else f"{n / 1e6:.0f} MB"


def memory_problem(scenario: Scenario) -> str | None:
    """Why ``scenario`` cannot fit in this machine's memory, as the end of a sentence; ``None`` if it fits.

    The text starts with the field to change (``model.widths`` or ``data.n``).
    """
    available = available_bytes()
    if available is None:
        return None
    need = estimate(scenario)
    if need.total <= MEMORY_FRACTION * available:
        return None
    runs = f"{need.runs} run{'s' if need.runs != 1 else ''}"
    free = f"this machine has {gigabytes(available)} free, and a scenario may use half of that"
    if need.data_bytes > need.model_bytes:
        return (
            f"data.n: {scenario.data.n:,} data points through a model of {need.parameters:,} parameters "
            f"need about {gigabytes(need.total)} for {runs} and its loss surface; {free}; "
            "allowed: fewer data points, a smaller batch or smaller widths"
        )
    model = "an MLP" if scenario.model.kind == "mlp" else f"a {scenario.model.kind} model"
    field = {"mlp": "model.widths", "gan": "model.hidden"}.get(scenario.model.kind, "model.kind")
    return (
        f"{field}: {model} of {need.parameters:,} parameters needs about {gigabytes(need.total)} "
        f"for {runs} and its loss surface; {free}; allowed: smaller widths or fewer runs"
    )
