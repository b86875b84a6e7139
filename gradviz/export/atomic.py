"""Outputs that appear whole or not at all: a temporary sibling, renamed over the target at the end.

The temporary file or folder lives in the target's own folder, so the final
``os.replace`` is a rename within one file system: a reader sees either the
previous output or the new one, never half of either.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


class AtomicFile:
    """A temporary file next to ``target`` that :meth:`commit` renames onto it.

    Parameters
    ----------
    target:
        The file to write; its folder must exist.
    suffix:
        Suffix of the temporary name (tools such as ffmpeg pick the format from it).
    """

    def __init__(self, target: Path, suffix: str = ".tmp") -> None:
        self.target = target
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)
        os.close(fd)
        self.temp = Path(name)
        self.done = False

    def commit(self) -> Path:
        """Rename the temporary file onto the target (replacing any previous file)."""
        # mkstemp makes the file private (0600); an exported picture is an ordinary document.
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(self.temp, 0o666 & ~mask)
        os.replace(self.temp, self.target)
        self.done = True
        return self.target

    def abort(self) -> None:
        """Remove the temporary file; the target is left as it was."""
        if not self.done:
            self.temp.unlink(missing_ok=True)
            self.done = True


def write_bytes(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` whole or not at all, with ordinary file permissions."""
    out = AtomicFile(target)
    try:
        out.temp.write_bytes(data)
        out.commit()
    except BaseException:
        out.abort()
        raise


class AtomicFolder:
    """A temporary folder next to ``target`` that :meth:`commit` puts in its place.

    An existing target folder is replaced only as a whole, and only when
    ``replaceable`` says its contents are an earlier export; until the new
    folder is in place the old one stays where it was.
    """

    def __init__(self, target: Path) -> None:
        self.target = target
        self.temp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        self.done = False

    def commit(self) -> Path:
        """Move the temporary folder to the target, swapping out an earlier export."""
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(self.temp, 0o777 & ~mask)
        if not self.target.exists():
            os.replace(self.temp, self.target)
        else:
            parent = self.target.parent
            old = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.", suffix=".old", dir=parent))
            os.replace(self.target, old / "previous")
            try:
                os.replace(self.temp, self.target)
            except BaseException:
                os.replace(old / "previous", self.target)
                raise
            finally:
                shutil.rmtree(old, ignore_errors=True)
        self.done = True
        return self.target

    def abort(self) -> None:
        """Remove the temporary folder and what was written into it."""
        if not self.done:
            shutil.rmtree(self.temp, ignore_errors=True)
            self.done = True
