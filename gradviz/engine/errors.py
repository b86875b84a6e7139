"""Errors that are the user's to fix: the CLI prints them as one sentence and exits 2.

Every message that echoes what the user typed (a key, a name, a value, a path)
shows it through :func:`quoted`, so that a message stays one short line
whatever the text holds: newlines, terminal escape codes or half a megabyte.
"""

from __future__ import annotations

import math
import reprlib


class UserError(Exception):
    """Bad input from the user: a scenario file, a name, an option or a device.

    The message is one complete sentence meant to be shown as it is.
    """


class ScenarioError(UserError):
    """A scenario file or table that does not validate."""


class DeviceError(UserError):
    """A requested device that this machine does not have."""


ELLIPSIS = "\u2026"
# Values other than strings: a few items of a list, a few levels of nesting.
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 3, 6, 6, 4
_REPR.maxstring, _REPR.maxother = 40, 40
# Integers longer than this many bits are described rather than written out:
# Python refuses to write ones of more than 4,300 digits at all.
_LONG_INT_BITS = 128


def _escape(ch: str) -> str:
    """One character as it may appear between single quotes on one line."""
    if ch == "\\" or ch == "'":
        return "\\" + ch
    if ch.isprintable():
        return ch
    return repr(ch)[1:-1]  # \n, \t, \x1b, \u202e, ...


def _value(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _LONG_INT_BITS:
        digits = int(value.bit_length() * math.log10(2)) + 1
        sign = "-" if value < 0 else ""
        return f"{sign}a whole number of about {digits:,} digits"
    try:
        return _REPR.repr(value)
    except (ValueError, RecursionError):
        return f"a {type(value).__name__}"


def quoted(value: object, limit: int = 60, *, bare: bool = False) -> str:
    """User text as it may appear in a one-line message: quoted, escaped and shortened.

    Parameters
    ----------
    value:
        What the user gave. A string is shown between single quotes with every
        character that does not print (newline, tab, terminal escape codes,
        bidirectional overrides) escaped as Python writes it (``\\n``,
        ``\\x1b``, ``\\u202e``). Any other value (a number, a list) is shown as
        a bounded ``repr``.
    limit:
        Characters of the text shown at most; longer text ends in an ellipsis
        followed by its full length, as in ``'aaaa…' (500,000 characters)``.
    bare:
        Show a string that needs neither escaping nor shortening as it is,
        without quotes (file paths, keys inside a dotted field name).

    Returns
    -------
    str
        One line, at most about ``limit`` characters plus the length note.
    """
    if not isinstance(value, str):
        shown = _value(value)
        return shown if len(shown) <= limit else shown[: max(limit - 1, 1)] + ELLIPSIS
    pieces: list[str] = []
    size = 0
    cut = False
    for ch in value:
        piece = _escape(ch)
        if size + len(piece) > limit:
            cut = True
            break
        pieces.append(piece)
        size += len(piece)
    body = "".join(pieces)
    if not cut:
        return body if bare and value and body == value else f"'{body}'"
    return f"'{body}{ELLIPSIS}' ({len(value):,} characters)"


def one_line(message: str, limit: int = 2000) -> str:
    """A message made safe to print as one line: control characters escaped, length bounded.

    The last guard before a message reaches the terminal; messages built with
    :func:`quoted` pass through unchanged.
    """
    if message.isprintable() and len(message) <= limit:
        return message
    text = "".join(map(_escape_control, message))
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


def _escape_control(ch: str) -> str:
    return ch if ch.isprintable() else repr(ch)[1:-1]
