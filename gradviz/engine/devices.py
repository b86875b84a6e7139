"""Which compute devices this machine has, and turning a device name into a torch.device."""

from __future__ import annotations

import torch

from gradviz.engine.errors import DeviceError


def device_status() -> dict[str, str | None]:
    """Each device name mapped to ``None`` when usable here, else the reason it is not."""
    status: dict[str, str | None] = {"cpu": None}
    if torch.cuda.is_available():
        status["cuda"] = None
    elif not torch.backends.cuda.is_built():
        status["cuda"] = "this PyTorch build has no CUDA support"
    else:
        status["cuda"] = "no CUDA GPU is visible to PyTorch"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        status["mps"] = None
    else:
        status["mps"] = "Apple's Metal (MPS) backend is not available on this machine"
    return status


def resolve_device(name: str) -> torch.device:
    """``cpu``, ``cuda``, ``mps`` or ``auto`` (the fastest present) as a ``torch.device``.

    Raises :class:`DeviceError` with the reason when the device is absent.
    """
    status = device_status()
    if name == "auto":
        for candidate in ("cuda", "mps", "cpu"):
            if status[candidate] is None:
                return torch.device(candidate)
    if name not in status:
        raise DeviceError(f"Unknown device {name!r}; allowed: cpu, cuda, mps, auto.")
    reason = status[name]
    if reason is not None:
        raise DeviceError(f"The device {name!r} is not available: {reason}; use --device cpu or auto.")
    return torch.device(name)
