"""Which kind of output a path asks for, and whether it can be written, decided before any work.

``.gif``, ``.mp4`` (H.264) and ``.webm`` (VP9) are written in this process (video
through PyAV, see :mod:`gradviz.export.video`); a path without an extension (or an
existing folder) is a folder of numbered PNGs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from gradviz.engine.errors import UserError

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


def _writable_folder(folder: Path, shown: Path) -> None:
    if not folder.is_dir():
        raise UserError(f"The folder {folder} does not exist; create it or choose another output path.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"The folder {folder} cannot be written; choose another output path than {shown}.")


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
    text = str(path)
    p = Path(path).expanduser()
    folder = p.parent if str(p.parent) else Path(".")
    wants_folder = text.endswith(("/", os.sep)) or p.is_dir() or not p.suffix
    if wants_folder:
        if p.exists() and not p.is_dir():
            raise UserError(f"{p} is a file; give a folder name for numbered PNGs, or a .gif path.")
        _writable_folder(folder, p)
        if p.is_dir() and not is_earlier_export(p):
            raise UserError(
                f"The folder {p} holds other files; give a new or empty folder for the numbered PNGs."
            )
        return Output(p, "pngs")
    suffix = p.suffix.lower()
    if suffix not in (".gif", *VIDEO_SUFFIXES):
        hint = " (for one picture use `gradviz snapshot`)" if suffix in (".png", ".jpg", ".jpeg") else ""
        raise UserError(f"gradviz cannot write {suffix} files{hint}; give {FORMATS}.")
    _writable_folder(folder, p)
    if suffix in VIDEO_SUFFIXES:
        return Output(p, "video")
    return Output(p, "gif")
