"""The real PyTorch side of gradviz: scenarios, models, loops, runs and their history.

Nothing here imports Qt; the CLI, the tests and the exporters use it headless.
"""

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

__all__ = [
    "DeviceError",
    "History",
    "Lab",
    "OpRecord",
    "Scenario",
    "ScenarioError",
    "Snapshot",
    "UserError",
    "builtin_names",
    "dumps_scenario",
    "load_builtin",
    "load_scenario",
    "load_scenario_file",
    "loads_scenario",
]
