"""Numbers as short text: finite values to four significant digits, inf and NaN spelled out."""

from __future__ import annotations

import math

import numpy as np

NONE_TEXT = "None"


def number(value: float | None, digits: int = 4) -> str:
    """One number as text; ``None`` stays the word ``None`` (never ``0``)."""
    if value is None:
        return NONE_TEXT
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "0"
    text = f"{value:.{digits}g}"
    return text.replace("e+", "e")


def signed(value: float, digits: int = 3) -> str:
    """A number with its sign always written, for changes (``+0.3``, ``-4``)."""
    text = number(value, digits)
    return text if text.startswith("-") or text in ("nan", "0") else "+" + text


def finite_norm(values: np.ndarray) -> float | None:
    """The Euclidean norm of the finite elements, in double precision; ``None`` where none is finite."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    square = float(flat.dot(flat))
    if not math.isfinite(square):  # some element is inf or nan: the norm of the others
        flat = flat[np.isfinite(flat)]
        if flat.size == 0:
            return None
        square = float(flat.dot(flat))
    return math.sqrt(square)


def array(values: np.ndarray | None, limit: int = 4) -> str:
    """A tensor as text: a scalar for one element, a short list for a few, a summary otherwise."""
    if values is None:
        return NONE_TEXT
    flat = np.asarray(values).reshape(-1)
    if flat.size == 1:
        return number(flat[0])
    if flat.size <= limit:
        return "[" + ", ".join(number(v, 3) for v in flat) + "]"
    norm = finite_norm(flat)
    if norm is None:
        return f"{flat.size} values, none finite"
    return f"{flat.size} values, norm {number(norm, 3)}"


def full(values: np.ndarray | None) -> str:
    """Every element, for tooltips."""
    if values is None:
        return ".grad is None: PyTorch holds no gradient tensor here (not a tensor of zeros)."
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    shown = ", ".join(number(v, 5) for v in flat[:64])
    more = f", … ({flat.size} in all)" if flat.size > 64 else ""
    return f"shape {list(np.shape(values))}: [{shown}{more}]"
