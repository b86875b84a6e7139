"""The C heap of a long session: freed memory kept for reuse, and given back once in a while.

glibc hands each of the surface's evaluation chunks back to the system and faults it in
again on the next: :func:`tune_malloc` keeps freed memory instead. Over a long Play, though,
the columns that grow with every op move as they grow and leave their old places free,
where nothing of their size fits again: :func:`release_freed` gives those pages back (the
controller calls it every half a minute of Play and at its pause).
"""

from __future__ import annotations

import ctypes
import functools
import sys


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def tune_malloc() -> None:
    """Keep glibc from returning freed buffers to the OS and faulting them back on every op."""
    libc = _libc()
    if libc is None:
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_trim_threshold, 1 << 30)
    libc.mallopt(m_mmap_threshold, 32 << 20)


def release_freed() -> None:
    """Give the OS back the pages of memory the heap holds free (a few milliseconds)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
