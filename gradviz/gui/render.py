"""PNG pictures of the window: the output path checked first, the file written atomically."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice
from PySide6.QtGui import QImage


def check_writable(path: str | Path) -> Path:
    """The output path, after checking a file can be made in its folder; UserError if not."""
    from gradviz.export.outputs import check_output_file

    return check_output_file(path)


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
