"""A one-line progress bar on a terminal's stderr; silent when the output is piped or logged."""

from __future__ import annotations

import time
from types import TracebackType
from typing import IO, Self

PHASES = {"render": "drawing frames", "encode": "encoding"}
WIDTH = 28
# Redraw at most this often: a terminal repaint per frame costs more than the frame.
INTERVAL = 0.1


class ProgressBar:
    """Call as ``bar(phase, done, total)``; draws only when ``stream`` is a terminal.

    Parameters
    ----------
    stream:
        Where to draw (the command line passes stderr, so stdout stays clean).
    enabled:
        Force drawing on or off; by default only on a terminal.
    """

    def __init__(self, stream: IO[str], enabled: bool | None = None) -> None:
        self.stream = stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self._last = 0.0
        self._drawn = False

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last < INTERVAL:
            return
        self._last = now
        filled = WIDTH * done // max(total, 1)
        bar = "█" * filled + "·" * (WIDTH - filled)
        self.stream.write(f"\r{PHASES.get(phase, phase):<15} {bar} {done}/{total}\x1b[K")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """Clear the bar's line so that what follows starts clean."""
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
