"""The recording of a watched loop: versioned JSON, loaded without executing anything.

Format ``gradviz-recording``, version 1, one JSON object (strict JSON: a non-finite
number is written as the string ``"nan"``, ``"inf"`` or ``"-inf"``)::

    {
      "format": "gradviz-recording", "version": 1,
      "gradviz": "0.1.0", "torch": "2.13.0",
      "script": "train.py" | null, "argv": ["train.py", "--lr", "3"],
      "steps": 50,                  # the updates the observer was asked to watch
      "observed_updates": 12,       # the updates it saw (optimizer steps and manual updates)
      "stopped": "limit" | "end" | "...",   # why it stopped watching
      "sampling": {"full_up_to": 4096, "sample_size": 32,
                   "how": "..."},   # larger tensors: values at sample_index only
      "params": [{"id": 0, "name": "model.weight", "shape": [1, 2], "numel": 2,
                  "optimizer": 0 | null, "sample_index": [..] | null, "device": "cpu"}],
      "optimizers": [{"id": 0, "name": "SGD #0", "type": "SGD", "params": [0, 1], "steps": 12}],
      "events": [{"op": "backward" | "zero_grad" | "step" | "update",
                  "file": "train.py", "line": 42, "step": 0,
                  "who": "SGD #0", "filled": [0, 1], "params": [0, 1],
                  "loss": 0.42,             # a backward's loss, when it is one number
                  "grads": {"0": [..]},     # the .grad it left (values, or the sample)
                  "zeros": [0],             # a zero_grad's parameters left holding zeros, not None
                  "calls": [["train.py", 30]]}],  # the line of each other user file it was called
                                                  # from, innermost first
      "updates": [{"event": 3, "step": 0, "op": "step",
                   "params": {"0": {"norm": 1.2, "grad": 0.3 | "none",
                                    "values": [..], "grad_values": [..],     # small tensors
                                    "sample": [..], "grad_sample": [..],     # large ones
                                    "lr": 0.1,                               # a step's
                                    "state": {"momentum_buffer": [..], "step": 3.0}}}}],
      "final": {"0": {"values": [..]} | {"sample": [..]}},  # when the watch ended
      "findings": [{"file": "train.py", "line": 42, "severity": "warning", "message": "...",
                    "event": 7}],   # the op it is about, when there is one
      "sources": {"train.py": ["import torch", ...]}
    }

``updates`` are taken just before each update (optimizer step) uses ``.grad``, or just
after a manual update was seen; a step's ``state`` is the optimizer's state for that
parameter then (tensors like the parameter's values or sample, numbers as they are).
``final`` holds the parameters as the watch ended (after the last update it saw).
``loss``, ``grads``, ``zeros``, ``calls``, ``lr``, ``state``, ``final`` and ``device`` may be absent.
``sources`` holds the lines of the user's files that ran, as read from the files (at most 5,000 lines
of 500 characters per file, 50 files).

The observer never writes more than 20,000 events, 4,096 tensors (named in at most 200
characters), 4,096 numbers in one list, 8 callers per event or paths longer than 4,096
characters, and the loader refuses a file holding more: loading stays quick and small
whatever a file claims. A recording is at most 512 MB.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradviz.engine.errors import UserError, one_line, quoted
from gradviz.engine.files import NotAFileError, read_bounded
from gradviz.engine.jsonform import strict_json
from gradviz.export.atomic import write_bytes
from gradviz.export.outputs import check_output_file
from gradviz.watch.findings import SEVERITIES, Finding
from gradviz.watch.observer import (
    FULL_VALUES,
    MAX_CALLERS,
    MAX_EVENTS,
    MAX_PARAMS,
    NAME_CHARS,
    PATH_CHARS,
    SAMPLE_SIZE,
    SOURCE_FILES,
    SOURCE_LINE_CHARS,
    SOURCE_LINES,
)

FORMAT = "gradviz-recording"
VERSION = 1
OPS = ("backward", "zero_grad", "step", "update")
MAX_BYTES = 512 * 1024 * 1024


@dataclass
class Recording:
    """What a watch saw: events, per-parameter numbers, findings and the user's source lines."""

    data: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    @property
    def events(self) -> list[dict[str, Any]]:
        return list(self.data.get("events", []))

    @property
    def params(self) -> list[dict[str, Any]]:
        return list(self.data.get("params", []))

    @property
    def updates(self) -> list[dict[str, Any]]:
        return list(self.data.get("updates", []))

    @property
    def sources(self) -> dict[str, list[str]]:
        return dict(self.data.get("sources", {}))

    def to_json(self) -> dict[str, Any]:
        out = dict(self.data)
        out["findings"] = [
            {"file": f.file, "line": f.line, "severity": f.severity, "message": f.message}
            | ({} if f.event is None else {"event": f.event})
            for f in self.findings
        ]
        return strict_json(out)

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write the recording as JSON, whole or not at all; returns the path."""
        target = os.fspath(path)
        # Checked again: while the script ran, a FIFO or a folder may have taken the path's place.
        check_output_file(target, "recording.json")
        data = json.dumps(self.to_json(), allow_nan=False, separators=(",", ":")).encode("utf-8")
        try:
            write_bytes(Path(target), data)
        except OSError as exc:
            raise UserError(
                f"cannot write the recording {quoted(target)} ({one_line(exc.strerror or str(exc), 100)})."
            ) from None
        return target


# ------------------------------------------------------------------ loading


class _Bad(Exception):
    pass


def load_recording(path: str | os.PathLike[str]) -> Recording:
    """Read and check a recording; anything wrong with it is one sentence (``UserError``)."""
    name = quoted(os.fspath(path), 200, bare=True)
    try:
        raw = read_bounded(path, MAX_BYTES + 1)
    except FileNotFoundError:
        raise UserError(f"{name}: no such recording.") from None
    except NotAFileError as exc:
        raise UserError(f"{name} is {exc.kind}, not a recording.") from None
    except OSError as exc:
        raise UserError(f"{name}: cannot read it ({one_line(exc.strerror or str(exc), 100)}).") from None
    except ValueError:  # a path holding a NUL character
        raise UserError(f"{name}: is not a path a file can have.") from None
    if len(raw) > MAX_BYTES:
        raise UserError(f"{name} is larger than 512 MB: not a recording gradviz wrote.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{name} is not a gradviz recording (not UTF-8 text).") from None

    def refuse(constant: str) -> None:
        raise _Bad(f"it holds {constant}, which strict JSON does not")

    try:
        data = json.loads(text, parse_constant=refuse)
    except json.JSONDecodeError as exc:
        # Cut off inside a number, a string or before the closing braces: the error lies at the end.
        near_end = exc.pos >= len(text.rstrip()) - 40 or exc.msg.startswith("Unterminated string")
        if text.lstrip().startswith("{") and near_end:
            raise UserError(
                f"{name} is cut short (it ends inside the JSON): a truncated recording."
            ) from None
        raise UserError(
            f"{name} is not a gradviz recording (invalid JSON at line {exc.lineno}, column {exc.colno})."
        ) from None
    except (_Bad, RecursionError) as exc:
        raise UserError(f"{name} is not a gradviz recording ({exc}).") from None
    except ValueError as exc:  # json's integers of more than 4,300 digits
        if "integer string conversion" not in str(exc):
            raise
        raise UserError(
            f"{name} is not a gradviz recording (a whole number in it has more than 4,300 digits)."
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UserError(f'{name} is not a gradviz recording (no "format": "{FORMAT}").')
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UserError(f"{name} has no valid recording version (found {quoted(version)}).")
    if version > VERSION:
        raise UserError(
            f"{name} is a recording of version {version:,}, from a newer gradviz; "
            f"this one reads version {VERSION}: update gradviz."
        )
    try:
        findings = _check(data)
    except _Bad as exc:
        raise UserError(f"{name} is not a valid gradviz recording: {exc}.") from None
    data = {k: v for k, v in data.items() if k != "findings"}
    return Recording(data, findings)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool)) or v in ("nan", "inf", "-inf")


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise _Bad(what)


def _list(data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    _need(isinstance(value, list), f'"{key}" should be a list')
    return value  # type: ignore[return-value]


def _at_most(count: int, limit: int, what: str, unit: str) -> None:
    """Refuse more of something than the observer ever writes (it stops, or cuts, at ``limit``)."""
    _need(count <= limit, f"{what} has {count:,} {unit}; a recording gradviz wrote has at most {limit:,}")


def _text(value: Any, limit: int, what: str) -> bool:
    """Whether ``value`` is a string, refusing one longer than ``limit``."""
    if isinstance(value, str):
        _at_most(len(value), limit, what, "characters")
        return True
    return False


def _check_values(entry: dict[str, Any], where: str, keys: tuple[str, ...]) -> None:
    for k in keys:
        if k in entry:
            _need(
                isinstance(entry[k], list) and all(_is_num(x) for x in entry[k]),
                f"{where}.{k} should be a list of numbers",
            )
            _at_most(len(entry[k]), FULL_VALUES, f"{where}.{k}", "values")


def _check(data: dict[str, Any]) -> list[Finding]:
    params = _list(data, "params")
    _at_most(len(params), MAX_PARAMS, '"params"', "tensors")
    for i, p in enumerate(params):
        where = f"params[{i}]"
        _need(isinstance(p, dict), f"{where} should be an object")
        _need(p.get("id") == i, f"{where} should have id {i}")
        _need(_text(p.get("name"), NAME_CHARS, f"{where}.name"), f"{where} has no name")
        shape = p.get("shape")
        _need(isinstance(shape, list) and all(_is_int(d) and d >= 0 for d in shape), f"{where} has no shape")
        _need(_is_int(p.get("numel")) and p["numel"] >= 0, f"{where} has no numel")
        sample = p.get("sample_index")
        _need(
            sample is None or (isinstance(sample, list) and all(_is_int(x) for x in sample)),
            f"{where}.sample_index should be a list of whole numbers or null",
        )
        _at_most(len(sample or ()), SAMPLE_SIZE, f"{where}.sample_index", "elements")
    n = len(params)
    for i, o in enumerate(_list(data, "optimizers")):
        _need(isinstance(o, dict) and isinstance(o.get("name"), str), f"optimizers[{i}] has no name")
        ids = o.get("params")
        _need(
            isinstance(ids, list) and all(_is_int(x) and 0 <= x < n for x in ids),
            f"optimizers[{i}].params should list parameter ids",
        )
    events = _list(data, "events")
    _at_most(len(events), MAX_EVENTS, '"events"', "ops")
    for i, ev in enumerate(events):
        where = f"events[{i}]"
        _need(isinstance(ev, dict), f"{where} should be an object")
        _need(ev.get("op") in OPS, f"{where}.op should be one of {', '.join(OPS)}")
        _need(_text(ev.get("file"), PATH_CHARS, f"{where}.file"), f"{where} has no file")
        _need(_is_int(ev.get("line")) and ev["line"] >= 0, f"{where} has no line")
        _need(_is_int(ev.get("step")) and ev["step"] >= 0, f"{where} has no step")
        _need("loss" not in ev or _is_num(ev["loss"]), f"{where}.loss should be a number")
        grads = ev.get("grads", {})
        _need(isinstance(grads, dict), f"{where}.grads should be an object")
        for key, values in grads.items():
            _need(key.isdigit() and int(key) < n, f"{where}.grads has an unknown parameter {quoted(key)}")
            _check_values({"values": values}, f"{where}.grads[{key}]", ("values",))
        for key in ("filled", "params", "zeros"):
            ids = ev.get(key, [])
            _need(
                isinstance(ids, list) and all(_is_int(x) and 0 <= x < n for x in ids),
                f"{where}.{key} should list parameter ids",
            )
        calls = ev.get("calls", [])
        _need(
            isinstance(calls, list)
            and all(
                isinstance(c, list) and len(c) == 2 and isinstance(c[0], str) and _is_int(c[1]) and c[1] >= 0
                for c in calls
            ),
            f"{where}.calls should list [file, line] pairs",
        )
        _at_most(len(calls), MAX_CALLERS, f"{where}.calls", "callers")
        for c in calls:
            _text(c[0], PATH_CHARS, f"{where}.calls file")
    for i, u in enumerate(_list(data, "updates")):
        where = f"updates[{i}]"
        _need(isinstance(u, dict), f"{where} should be an object")
        _need(_is_int(u.get("event")) and 0 <= u["event"] < len(events), f"{where}.event should be an event")
        values = u.get("params")
        _need(isinstance(values, dict), f"{where}.params should be an object")
        for key, entry in values.items():
            _need(key.isdigit() and int(key) < n, f"{where}.params has an unknown parameter {quoted(key)}")
            _need(
                isinstance(entry, dict) and _is_num(entry.get("norm")), f"{where}.params[{key}] has no norm"
            )
            _need(
                _is_num(entry.get("grad")) or entry.get("grad") == "none",
                f"{where}.params[{key}] has no grad norm",
            )
            _check_values(entry, f"{where}.params[{key}]", ("values", "grad_values", "sample", "grad_sample"))
            _need("lr" not in entry or _is_num(entry["lr"]), f"{where}.params[{key}].lr should be a number")
            state = entry.get("state", {})
            _need(isinstance(state, dict), f"{where}.params[{key}].state should be an object")
            for k, v in state.items():
                _need(
                    _is_num(v) or (isinstance(v, list) and all(_is_num(x) for x in v)),
                    f"{where}.params[{key}].state[{quoted(k)}] should be a number or a list of numbers",
                )
    final = data.get("final", {})
    _need(isinstance(final, dict), '"final" should be an object')
    for key, entry in final.items():
        _need(key.isdigit() and int(key) < n, f'"final" has an unknown parameter {quoted(key)}')
        _need(isinstance(entry, dict), f"final[{key}] should be an object")
        _check_values(entry, f"final[{key}]", ("values", "sample"))
    findings: list[Finding] = []
    for i, f in enumerate(_list(data, "findings")):
        where = f"findings[{i}]"
        _need(isinstance(f, dict), f"{where} should be an object")
        _need(isinstance(f.get("file"), str) and _is_int(f.get("line")), f"{where} has no file and line")
        _need(f.get("severity") in SEVERITIES, f"{where}.severity should be one of {', '.join(SEVERITIES)}")
        _need(isinstance(f.get("message"), str), f"{where} has no message")
        at = f.get("event")
        _need(at is None or (_is_int(at) and 0 <= at < len(events)), f"{where}.event should be an event")
        findings.append(Finding(f["file"], f["line"], f["severity"], f["message"], at))
    sources = data.get("sources")
    if not isinstance(sources, dict):
        raise _Bad('"sources" should be an object')
    _at_most(len(sources), SOURCE_FILES, '"sources"', "files")
    for key, lines in sources.items():
        where = f"sources[{quoted(key)}]"
        _text(key, PATH_CHARS, "a file name in sources")
        _need(
            isinstance(lines, list) and all(isinstance(x, str) for x in lines),
            f"{where} should be a list of lines",
        )
        _at_most(len(lines), SOURCE_LINES, where, "lines")
        _at_most(max(map(len, lines), default=0), SOURCE_LINE_CHARS, f"a line of {where}", "characters")
    return findings


def recording_from(observer: Any, *, script: str | None, argv: list[str]) -> Recording:
    """The recording of what ``observer`` saw (after it was uninstalled)."""
    import torch

    import gradviz
    from gradviz.watch.observer import FULL_VALUES, SAMPLE_SIZE, WHOLE_VALUES, read_sources

    if observer.stopped_early:
        stopped = observer.stopped_early
    else:
        stopped = "limit" if observer._closing else "end"
    data: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "gradviz": gradviz.__version__,
        "torch": torch.__version__,
        "script": script,
        "argv": list(argv),
        "steps": observer.limit,
        "observed_updates": observer.updates,
        "stopped": stopped,
        "sampling": {
            "full_up_to": FULL_VALUES,
            "sample_size": SAMPLE_SIZE,
            "whole_total": WHOLE_VALUES,
            "how": f"a tensor of at most {FULL_VALUES} elements is recorded whole while those recorded "
            f"whole hold at most {WHOLE_VALUES} together; any other by {SAMPLE_SIZE} elements of its "
            "flattened values at sample_index (evenly spaced, first and last included); "
            "norms are always of the whole tensor; values are float32 written as short decimals",
        },
        "params": [
            {
                "id": p.id,
                "name": p.name,
                "shape": p.shape,
                "numel": p.numel,
                "optimizer": p.optimizer,
                "sample_index": None if p.sample is None else p.sample.tolist(),
                "device": p.device,
            }
            for p in observer.order
        ],
        "optimizers": [
            {"id": o.id, "name": o.name, "type": o.name.split(" ")[0], "params": o.params, "steps": o.steps}
            for o in observer.optims.values()
        ],
        "events": [ev.to_json() for ev in observer.events],
        "updates": observer.update_records(),
        "final": observer.final_record(),
        "sources": read_sources(observer.files),
    }
    return Recording(data, list(observer.findings))
