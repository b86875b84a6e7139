"""The real PyTorch side of gradviz: scenarios, models, loops, runs and their history.

Nothing here imports Qt; the CLI, the tests and the exporters use it headless.
Names are loaded on first use, so that importing ``gradviz.engine.errors`` (as
the window does before it shows) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gradviz.engine.errors import DeviceError, ScenarioError, UserError
    from gradviz.engine.lab import Lab
    from gradviz.engine.record import History, OpRecord, Snapshot
    from gradviz.engine.scenario import (
        Scenario,
        builtin_names,
        dumps_scenario,
        load_builtin,
        load_scenario,
        load_scenario_file,
        loads_scenario,
    )

_WHERE = {
    "DeviceError": "errors",
    "ScenarioError": "errors",
    "UserError": "errors",
    "Lab": "lab",
    "History": "record",
    "OpRecord": "record",
    "Snapshot": "record",
    "Scenario": "scenario",
    "builtin_names": "scenario",
    "dumps_scenario": "scenario",
    "load_builtin": "scenario",
    "load_scenario": "scenario",
    "load_scenario_file": "scenario",
    "loads_scenario": "scenario",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'gradviz.engine' has no attribute {name!r}")
    return getattr(importlib.import_module(f"gradviz.engine.{_WHERE[name]}"), name)
