"""Strict JSON for what gradviz writes: non-finite floats as the strings "nan", "inf", "-inf"."""

from __future__ import annotations

import math
from typing import Any


def strict_json(value: Any) -> Any:
    """``value`` with every non-finite float (at any depth of lists, tuples and dicts) spelled out."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    return value
