"""Watch a real training script unchanged and flag its ``zero_grad`` mistakes by line.

Qt-free; torch is imported only when a watch starts::

    import gradviz

    with gradviz.watch(steps=50) as rec:
        train()
    for finding in rec.findings:
        print(finding)  # train.py:42: warning: backward() added to .grad that ...
    rec.save("train.gradviz.json")

``gradviz watch SCRIPT.py`` does the same for a script (see :mod:`gradviz.watch.runner`).
The package itself is callable, so ``gradviz.watch(...)`` works whether ``gradviz.watch``
names the package or the function.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gradviz.watch.findings import Finding
from gradviz.watch.recording import FORMAT, VERSION, Recording, load_recording

__all__ = [
    "FORMAT",
    "VERSION",
    "Finding",
    "Recording",
    "Watch",
    "distributed_rank",
    "load_recording",
    "watch",
    "watched_rank",
]


class Watch(Recording):
    """A recording that fills in when its ``with`` block ends."""

    def __init__(self) -> None:
        super().__init__()
        self.observer: Any = None
        self.watched = True


def distributed_rank() -> tuple[int, int] | None:
    """``(rank, world size)`` of a process that ``torchrun`` started (from its environment), else None."""
    import os

    try:
        rank = int(os.environ["RANK"])
        world = int(os.environ.get("WORLD_SIZE", "0"))
    except (KeyError, ValueError):
        return None
    return rank, world


def watched_rank() -> bool:
    """Whether this process is observed: always, except as a rank other than 0 under ``torchrun``."""
    where = distributed_rank()
    return where is None or where[0] == 0


@contextmanager
def watch(steps: int = 50, *, script: str | None = None, argv: list[str] | None = None) -> Iterator[Watch]:
    """Observe the training loop run inside the block, for its first ``steps`` updates.

    After the block (or earlier, once ``steps`` updates are seen) every hook is removed and
    every wrapper restored; ``rec.findings`` and ``rec.save(path)`` are then ready.

    In a process that ``torchrun`` started as any rank but 0 (its ``RANK`` environment
    variable), nothing is installed: the block runs untouched and ``rec.watched`` is False.
    """
    from gradviz.watch.observer import Observer
    from gradviz.watch.recording import recording_from

    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        from gradviz.engine.errors import UserError, quoted

        raise UserError(f"steps should be a whole number of at least 1, found {quoted(steps)}.")
    rec = Watch()
    if not watched_rank():
        rec.watched = False
        yield rec
        return
    observer = Observer(steps)
    rec.observer = observer
    observer.install()
    try:
        yield rec
    finally:
        observer.uninstall()
        done = recording_from(observer, script=script, argv=list(argv or []))
        rec.data, rec.findings = done.data, done.findings


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return watch(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
