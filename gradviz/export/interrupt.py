"""Ctrl+C and ``kill`` during an export, acted on only where stopping is safe.

Python's own SIGINT handler raises KeyboardInterrupt at whatever line runs next.
During an export that is often a Python override that Qt's C++ is calling (a
view's ``paintEvent`` while a frame is rendered), and PySide cannot unwind an
exception through that C++ frame: the process dies of a segmentation fault, or
Qt swallows the exception and the export carries on as if nothing was asked.
A SIGTERM (``kill``) ends the process on the spot and leaves its temporary
files behind.

While an :class:`InterruptGuard` is active, SIGINT, SIGTERM and SIGHUP only
record that they came. The export acts on the request at its safe points, by
calling :func:`check_interrupt` between frames, between encoder writes and
before the final rename; there it raises :class:`Interrupted` (a
KeyboardInterrupt), which the writers' abort paths clean up after like any
cancel. Further signals during that cleanup are recorded too, never raised.

:func:`shielded` holds the same signals over a short section (a cleanup, a
rename) for callers that have no guard, and delivers them when it ends.

Signals can be handled only on the main thread; elsewhere both are no-ops.
Nothing here knows Qt.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import Any, Self

#: The signals a guard holds: Ctrl+C, ``kill``, and a closed terminal (where the platform has them).
SIGNALS: tuple[signal.Signals, ...] = tuple(
    s for s in (getattr(signal, name, None) for name in ("SIGINT", "SIGTERM", "SIGHUP")) if s is not None
)

_Handler = Callable[[int, FrameType | None], Any] | int | None


class Interrupted(KeyboardInterrupt):
    """An export stopped by a signal at one of its safe points.

    Attributes
    ----------
    signum:
        The signal that asked for it (the first one, when several came).
    exit_status:
        ``128 + signum``, what a shell reports for a command that signal ended:
        130 for Ctrl+C, 143 for ``kill``.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


_active: InterruptGuard | None = None


def check_interrupt() -> None:
    """Raise :class:`Interrupted` if a signal came while a guard is active; otherwise do nothing.

    Call it where stopping is safe: between frames, between encoder writes,
    before an output is renamed into place; never from code Qt calls
    (``paintEvent`` and other overrides).
    """
    guard = _active
    if guard is not None:
        guard.check()


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class InterruptGuard:
    """``with InterruptGuard():`` turns SIGINT, SIGTERM and SIGHUP into :class:`Interrupted` at safe points.

    On entry the signals' handlers are replaced by one that only records the
    first signal; on exit the previous handlers come back. A signal that is
    ignored on entry (``nohup``, a background job) stays ignored. Guards nest:
    an inner one shares the outer one's record and leaves the handlers to it.

    Leaving the block with a signal recorded raises :class:`Interrupted` unless
    a KeyboardInterrupt is already on its way out, so a signal that came after
    the last safe point (once the output was in place) still ends the command
    as interrupted; any other exception leaving the block is chained to it.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[signal.Signals, _Handler] = {}
        self._outer: InterruptGuard | None = None
        self._installed = False

    def _record(self, signum: int, frame: FrameType | None) -> None:
        # Runs between two Python lines, possibly inside a Qt override: record, never raise.
        if self.received is None:
            self.received = signum

    def check(self) -> None:
        """Raise :class:`Interrupted` if a signal was recorded."""
        owner = self._outer or self
        if owner.received is not None:
            raise Interrupted(owner.received)

    def __enter__(self) -> Self:
        global _active
        if _active is not None:
            self._outer = _active
            return self
        if not _on_main_thread():
            return self
        for s in SIGNALS:
            previous = signal.getsignal(s)
            if previous is signal.SIG_IGN:
                continue
            signal.signal(s, self._record)
            self._previous[s] = previous
        self._installed = True
        _active = self
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        global _active
        if not self._installed:
            return
        self._installed = False
        _active = None
        for s, previous in self._previous.items():
            signal.signal(s, previous)
        self._previous.clear()
        if self.received is not None and not (kind is not None and issubclass(kind, KeyboardInterrupt)):
            raise Interrupted(self.received) from exc


@contextmanager
def shielded() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP until the block ends, then deliver them as they would have been.

    For sections that must not stop halfway (removing a temporary, swapping a
    folder into place). Inside an active guard the guard already holds them; on
    the main thread without one, a signal that came is raised again at the end,
    to whatever handler was there before (Python's KeyboardInterrupt for Ctrl+C).
    """
    if _active is not None or not _on_main_thread():
        yield
        return
    guard = InterruptGuard()
    guard.__enter__()
    try:
        yield
    finally:
        received, guard.received = guard.received, None
        guard.__exit__(None, None, None)
        if received is not None:
            signal.raise_signal(received)
