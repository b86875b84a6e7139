"""The standard streams when the shell closed one (``>&-``, ``<&-``) or what one leads to is full.

Python leaves a closed stream as ``None`` and reports a full disk behind
stdout (``> /dev/full``) as an ``OSError`` at the next flush; either would
otherwise end a command in an internal error. Here each is one sentence.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Iterator

from gradviz.engine.errors import UserError

# Errors of writing to a stream (no file name: not a file gradviz opened itself).
_WRITE_FAILURES = {errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG, errno.EBADF}


class ClosedStream:
    """Stands in for a standard stream the shell closed: using it says so, in one sentence."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _closed(self) -> UserError:
        use = "read answers from standard input" if self.name == "stdin" else "write to standard output"
        return UserError(f"cannot {use}: the shell closed it.")

    def write(self, text: str) -> int:
        raise self._closed()

    def readline(self, size: int = -1) -> str:
        raise self._closed()

    def flush(self) -> None:
        """Nothing to flush: nothing was ever written."""

    def isatty(self) -> bool:
        return False


# The standard streams the shell had closed, and what stands in for each.
_STOOD_IN: dict[str, object] = {}


def stand_in_for_closed() -> None:
    """Put a :class:`ClosedStream` where the shell closed stdin or stdout, and discard a closed
    stderr's text (there is nowhere to say anything)."""
    for name in ("stdin", "stdout"):
        if getattr(sys, name) is None:
            _STOOD_IN[name] = ClosedStream(name)
    if sys.stderr is None:
        _STOOD_IN["stderr"] = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (for the whole process)
    for name, stream in _STOOD_IN.items():
        setattr(sys, name, stream)


@contextlib.contextmanager
def as_python_gives_them() -> Iterator[None]:
    """The streams the shell closed as ``None`` again, as plain Python gives them to a script, for
    as long as a watched script runs."""
    stood_in = {name: stream for name, stream in _STOOD_IN.items() if getattr(sys, name) is stream}
    for name in stood_in:
        setattr(sys, name, None)
    try:
        yield
    finally:
        for name, stream in stood_in.items():
            setattr(sys, name, stream)


def is_output_failure(exc: OSError) -> bool:
    """Whether ``exc`` is writing to standard output failing (a full disk, an I/O error)."""
    return exc.filename is None and exc.errno in _WRITE_FAILURES


def discard_output() -> None:
    """Point stdout at the null device, so that the text still buffered is dropped quietly
    instead of failing again as the interpreter exits."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
