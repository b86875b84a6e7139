"""Which kind of output a path asks for, and whether it can be written, decided before any work.

``.gif``, ``.mp4`` (H.264) and ``.webm`` (VP9) are written in this process (video
through PyAV, see :mod:`gradviz.export.video`); a path without an extension (or an
existing folder) is a folder of numbered PNGs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gradviz.engine.errors import UserError, quoted
from gradviz.engine.scenario import FRAME_RATES, check_bounds

VIDEO_SUFFIXES = (".mp4", ".webm")
FORMATS = "a .gif file, an .mp4 or .webm video, or a folder name (no extension) for numbered PNGs"
FRAME_NAME = re.compile(r"frame-\d+\.png")


@dataclass(frozen=True)
class Output:
    """A checked output: where it goes and in which form.

    Attributes
    ----------
    path:
        The file or folder to write.
    kind:
        ``"gif"``, ``"video"`` or ``"pngs"``.
    """

    path: Path
    kind: str


def _shown(path: Path) -> str:
    return quoted(str(path), 160, bare=True)


def check_writable_folder(folder: Path) -> None:
    """Check that files can be made in ``folder``, by making and removing one.

    Permission bits say too little: root may write anywhere they allow, yet not
    into ``/proc`` or ``/sys`` or onto a read-only file system. Creating a file
    is what the export will do, so it is what is tried, before any work.

    Raises
    ------
    UserError
        For a folder that does not exist, a file in its place, or one that cannot be written.
    """
    if not folder.exists():
        raise UserError(
            f"The folder {_shown(folder)} does not exist; create it or choose another output path."
        )
    if not folder.is_dir():
        raise UserError(f"{_shown(folder)} is a file, not a folder; choose another output path.")
    try:
        _probe(folder)
    except OSError as exc:
        # A folder that exists yet answers "no such file" takes no new files (/proc).
        missing = isinstance(exc, FileNotFoundError)
        reason = "it takes no new files" if missing else exc.strerror or type(exc).__name__
        raise UserError(
            f"The folder {_shown(folder)} cannot be written ({reason}); choose another output path."
        ) from None


def _probe(folder: Path) -> None:
    """Make a file in ``folder`` and remove it; OSError if the folder takes none.

    Where the system can (Linux's ``O_TMPFILE``) the file has no name, so
    nothing is left in the folder even if the process is stopped halfway.
    """
    unnamed = getattr(os, "O_TMPFILE", 0)
    if unnamed:
        try:
            os.close(os.open(folder, unnamed | os.O_WRONLY, 0o600))
            return
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
    fd, name = tempfile.mkstemp(prefix=".gradviz-check-", dir=folder)
    try:
        os.close(fd)
    finally:
        with contextlib.suppress(OSError):  # made but not removable: writing works, as asked
            os.unlink(name)


def _regular_or_absent(p: Path) -> None:
    """A path about to be replaced must be a plain file: a device or FIFO in its place is refused."""
    try:
        mode = os.stat(p).st_mode
    except (FileNotFoundError, NotADirectoryError):  # the folder's check says why
        return
    if not stat.S_ISREG(mode):
        raise UserError(f"{_shown(p)} exists and is not a plain file; give the path of a new or plain file.")


def check_output_file(path: str | Path, example: str = "gradviz.png") -> Path:
    """Check that one file (a snapshot's PNG, a recording) can be written at ``path``, before any work.

    ``example`` is the file name a message suggests when ``path`` is a folder.

    Raises
    ------
    UserError
        For a folder in the file's place, a device or FIFO there, or a folder that cannot be written.
    """
    if not str(path):
        raise UserError(f"The output path is empty; give a file name such as {example}.")
    p = Path(path).expanduser()
    try:
        if p.is_dir():
            raise UserError(f"{_shown(p)} is a folder; give a file name such as {_shown(p / example)}.")
        _regular_or_absent(p)
        check_writable_folder(p.parent if str(p.parent) else Path("."))
    except (OSError, ValueError) as exc:
        raise UserError(f"{_shown(p)} cannot be used as an output path ({_reason(exc)}).") from None
    return p


def _reason(exc: Exception) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or "not a valid path"


def check_fps(fps: float, output: Output) -> None:
    """Check a frame rate for ``output`` before any work: 0.1 to 60, and a GIF at most 50.

    GIF frame delays are whole hundredths of a second that browsers round up
    below 2: faster GIFs play slower.
    """
    from gradviz.export.gif import MAX_GIF_FPS

    check_bounds(fps, FRAME_RATES, None, "--fps")
    if output.kind == "gif" and fps > MAX_GIF_FPS:
        raise UserError(
            f"--fps: found {quoted(fps)}; allowed: at most {MAX_GIF_FPS:g} frames per second for a GIF "
            "(browsers slow faster ones down), or an .mp4."
        )


def is_earlier_export(folder: Path) -> bool:
    """Whether ``folder`` holds nothing but numbered frames (so replacing it loses nothing else)."""
    return all(FRAME_NAME.fullmatch(p.name) for p in folder.iterdir())


def check_output(path: str | Path) -> Output:
    """Decide the output kind of ``path`` and check it can be written, before anything is rendered.

    Parameters
    ----------
    path:
        ``*.gif``, ``*.mp4``, ``*.webm``, or a folder (existing, or a name without an extension).

    Returns
    -------
    Output
        The output to hand to :func:`gradviz.export.open_writer`.

    Raises
    ------
    UserError
        For an unknown extension, a missing or read-only folder, or a folder
        that holds files other than an earlier export.
    """
    try:
        return _check_output(path)
    except (OSError, ValueError) as exc:  # a name too long, a folder that cannot be listed
        raise UserError(f"{_shown(Path(path))} cannot be used as an output path ({_reason(exc)}).") from None


def _check_output(path: str | Path) -> Output:
    text = str(path)
    p = Path(path).expanduser()
    folder = p.parent if str(p.parent) else Path(".")
    wants_folder = text.endswith(("/", os.sep)) or p.is_dir() or not p.suffix
    if wants_folder and p.suffix.lower() in (".gif", *VIDEO_SUFFIXES):
        # Numbered PNGs in a folder named like a GIF are not what the name promises.
        raise UserError(
            f"{_shown(Path(text))} names a folder (for numbered PNGs) yet ends in {p.suffix.lower()}; "
            f"give a {p.suffix.lower()} file's path, or a folder name without an extension."
        )
    if wants_folder:
        if p.exists() and not p.is_dir():
            raise UserError(f"{_shown(p)} is a file; give a folder name for numbered PNGs, or a .gif path.")
        check_writable_folder(folder)
        if p.is_dir() and not is_earlier_export(p):
            raise UserError(
                f"The folder {_shown(p)} holds other files; give a new or empty folder for the numbered PNGs."
            )
        return Output(p, "pngs")
    suffix = p.suffix.lower()
    if suffix not in (".gif", *VIDEO_SUFFIXES):
        hint = " (for one picture use `gradviz snapshot`)" if suffix in (".png", ".jpg", ".jpeg") else ""
        raise UserError(
            f"gradviz cannot write {quoted(p.suffix, 20, bare=True)} files{hint}; give {FORMATS}."
        )
    _regular_or_absent(p)
    check_writable_folder(folder)
    if suffix in VIDEO_SUFFIXES:
        return Output(p, "video")
    return Output(p, "gif")
