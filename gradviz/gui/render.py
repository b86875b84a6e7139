"""PNG pictures of the window: the output path checked first, the file written atomically."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice
from PySide6.QtGui import QImage


def check_writable(path: str | Path) -> Path:
    """The output path, after checking its folder exists and can be written; UserError if not."""
    from gradviz.engine.errors import UserError

    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise UserError(f"{p} is a folder; give a file name such as {p / 'gradviz.png'}.")
    if not folder.is_dir():
        raise UserError(f"The folder {folder} does not exist; create it or choose another output path.")
    if not os.access(folder, os.W_OK):
        raise UserError(f"The folder {folder} cannot be written; choose another output path.")
    return p


def png_bytes(image: QImage) -> bytes:
    """``image`` encoded as PNG."""
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buffer, "PNG"):  # type: ignore[call-overload]  # the stubs want bytes; Qt wants str
        raise OSError("the image could not be encoded as PNG")
    buffer.close()
    return bytes(data.data())


def save_png(image: QImage, path: str | Path) -> None:
    """Write ``image`` as a PNG atomically (temporary file in the same folder, then a rename)."""
    from gradviz.engine.errors import UserError
    from gradviz.export.atomic import write_bytes

    p = check_writable(path)
    try:
        write_bytes(p, png_bytes(image))
    except OSError as exc:
        raise UserError(f"{p} cannot be written ({exc.strerror or exc}).") from None
