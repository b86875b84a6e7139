"""A finding: one line like a compiler's, at a file and line of the user's code."""

from __future__ import annotations

import os
from dataclasses import dataclass

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    """One thing gradviz noticed about a training loop, at ``file:line`` of the user's code."""

    file: str
    line: int
    severity: str  # "error", "warning" or "info"
    message: str
    event: int | None = None  # the observed op it is about (an index into the recording's events)

    def __str__(self) -> str:
        return f"{shown_path(self.file)}:{self.line}: {self.severity}: {self.message}"


def shown_path(path: str) -> str:
    """A path as a message shows it: relative to the working directory when it lies inside it."""
    if not os.path.isabs(path):
        return path
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return path if rel.startswith(os.pardir) else rel
