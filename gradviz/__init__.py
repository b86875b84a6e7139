"""gradviz: watch a real PyTorch training loop one op at a time."""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # ``gradviz.watch(steps=50)`` loads the watch (and, when it starts, torch) on first use only.
    if name == "watch":
        import importlib

        return importlib.import_module("gradviz.watch")
    raise AttributeError(f"module 'gradviz' has no attribute {name!r}")
