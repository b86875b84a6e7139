"""Reading a file the user named: a regular file only, and never more of it than asked.

Every file gradviz reads on the user's word (a scenario, a recording, a script, a
source file a recording names) goes through :func:`read_bounded`: a FIFO would
block the read until some other process writes to it, a device such as
``/dev/zero`` never ends, and a file of gigabytes would be read whole.
"""

from __future__ import annotations

import os
import stat

# What a path that is not a regular file is, in the words of a message.
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
# Not every system has each flag; O_NONBLOCK makes even a FIFO open at once, without a writer.
_FLAGS = os.O_RDONLY | sum(getattr(os, name, 0) for name in ("O_NONBLOCK", "O_CLOEXEC", "O_BINARY"))


class NotAFileError(OSError):
    """A path that names something other than a regular file (``kind``: "a FIFO (named pipe)", ...)."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"is {kind}")
        self.kind = kind


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The first ``limit`` bytes of the regular file at ``path`` (all of it when shorter).

    The path is checked before it is opened and the opened file again (it may
    have been swapped in between), so nothing is read from anything else.

    Raises
    ------
    NotAFileError
        For a folder, a FIFO, a device or a socket.
    OSError
        For a file that cannot be opened or read (``FileNotFoundError`` first among them).
    ValueError
        For a path holding a NUL character.
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotAFileError(_kind(mode))
    fd = os.open(path, _FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotAFileError(_kind(mode))
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
