"""Outputs that appear whole or not at all: a temporary sibling, renamed over the target at the end.

The temporary file or folder lives in the target's own folder, so the final
``os.replace`` is a rename within one file system: a reader sees either the
previous output or the new one, never half of either.

A temporary is named ``.NAME.PID.XXXXXXXX.SUFFIX``: the target's name, the
writing process's id and eight random hex digits. A writer killed outright
(``kill -9``, a power cut) cannot clean up after itself, so every new writer
for the same target first removes the temporaries of exactly that pattern
whose process no longer exists (:func:`remove_stale`); a temporary whose
writer is still running, or any other file, is never touched.

Renames and removals run :func:`~gradviz.export.interrupt.shielded` from
Ctrl+C and ``kill``, and :meth:`AtomicFile.commit` is a safe point
(:func:`~gradviz.export.interrupt.check_interrupt`): an interrupted export
leaves the previous output as it was and no temporary behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

from gradviz.export.interrupt import check_interrupt, shielded

_SUFFIX = re.compile(r"\.[A-Za-z0-9]+")
# A folder swapped out by AtomicFolder.commit waits here, as "previous", until the new one is in place.
_OLD_SUFFIX = ".old"
_PREVIOUS = "previous"


def _pattern(target: Path) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(target.name)}\.([1-9][0-9]{{0,9}})\.[0-9a-f]{{8}}(\.[A-Za-z0-9]+)")


def _new_temp(target: Path, suffix: str, make: Callable[[Path], None]) -> Path:
    if not _SUFFIX.fullmatch(suffix):
        raise ValueError(f"a temporary's suffix must be a dot and letters or digits, not {suffix!r}")
    while True:
        path = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}{suffix}"
        try:
            make(path)
        except FileExistsError:
            continue
        return path


def _make_file(path: Path) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _make_folder(path: Path) -> None:
    path.mkdir(mode=0o700)


def writer_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a zombie, or one of another user, counts as alive)."""
    if os.name != "posix":
        # Elsewhere os.kill(pid, 0) would end that process, not ask about it: assume it lives.
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True
    return True


def stale_temporaries(target: Path) -> list[Path]:
    """Temporaries named for ``target`` by this module whose writing process is gone, sorted."""
    pattern = _pattern(target)
    found = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return []
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is not None and not writer_alive(int(match.group(1))):
            found.append(Path(entry.path))
    return sorted(found)


def remove_stale(target: Path) -> list[Path]:
    """Remove the temporaries for ``target`` that killed writers left; returns what was removed.

    A folder that was being swapped out when its writer died holds the previous
    output; it goes back to ``target`` when nothing else took that place.
    Failures (a file another user owns) are skipped: this is tidying, never a
    reason for an export to fail.
    """
    removed = []
    for path in stale_temporaries(target):
        with shielded(), contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink():
                previous = path / _PREVIOUS
                if path.name.endswith(_OLD_SUFFIX) and previous.is_dir() and not os.path.lexists(target):
                    os.replace(previous, target)
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path)
    return removed


def _ordinary_permissions(path: Path, mode: int) -> None:
    # The temporary was made private (0600/0700); an exported picture is an ordinary document.
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, mode & ~mask)


class AtomicFile:
    """A temporary file next to ``target`` that :meth:`commit` renames onto it.

    Creating one first removes stale temporaries of ``target`` (see :func:`remove_stale`).

    Parameters
    ----------
    target:
        The file to write; its folder must exist.
    suffix:
        Suffix of the temporary name, a dot and letters or digits (encoders may
        pick the format from it).
    """

    def __init__(self, target: Path, suffix: str = ".tmp") -> None:
        self.target = target
        remove_stale(target)
        self.temp = _new_temp(target, suffix, _make_file)
        self.done = False

    def commit(self) -> Path:
        """Rename the temporary file onto the target (replacing any previous file).

        Raises
        ------
        Interrupted
            When a signal came during the export (the last safe point before the target changes).
        """
        check_interrupt()
        with shielded():
            _ordinary_permissions(self.temp, 0o666)
            os.replace(self.temp, self.target)
            self.done = True
        return self.target

    def abort(self) -> None:
        """Remove the temporary file; the target is left as it was. Calling it again does nothing."""
        with shielded():
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

    Creating one first removes stale temporaries of ``target`` (see
    :func:`remove_stale`). An existing target folder is replaced only as a
    whole; until the new folder is in place the old one stays where it was.
    """

    def __init__(self, target: Path) -> None:
        self.target = target
        remove_stale(target)
        self.temp = _new_temp(target, ".tmp", _make_folder)
        self.done = False

    def commit(self) -> Path:
        """Move the temporary folder to the target, swapping out an earlier export.

        Raises
        ------
        Interrupted
            When a signal came during the export (the last safe point before the target changes).
        """
        check_interrupt()
        with shielded():
            _ordinary_permissions(self.temp, 0o777)
            if not self.target.exists():
                os.replace(self.temp, self.target)
            else:
                old = _new_temp(self.target, _OLD_SUFFIX, _make_folder)
                os.replace(self.target, old / _PREVIOUS)
                try:
                    os.replace(self.temp, self.target)
                except BaseException:
                    os.replace(old / _PREVIOUS, self.target)
                    raise
                finally:
                    shutil.rmtree(old, ignore_errors=True)
            self.done = True
        return self.target

    def abort(self) -> None:
        """Remove the temporary folder and what was written into it. Calling it again does nothing."""
        with shielded():
            if not self.done:
                shutil.rmtree(self.temp, ignore_errors=True)
                self.done = True
