"""``gradviz watch SCRIPT.py [ARGS...]``: run a script as ``python SCRIPT.py ARGS`` would, watched.

The script runs in this process through ``runpy.run_path(run_name="__main__")`` with
``sys.argv`` set to ``[SCRIPT, *ARGS]``, the script's folder first on ``sys.path`` and the
working directory unchanged; its output passes through. The findings are printed to
stderr after the script ends, one line each. A script that raises gets its traceback as
Python prints it, plus one gradviz line where the error is a ``.grad`` mistake.

Exit status: the script's own (its ``SystemExit`` code; 1 for an exception); with
``strict``, 3 when the script ended well but a warning was found.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import runpy
import sys
import traceback
from typing import Any, TextIO

from gradviz.engine.errors import UserError, one_line, quoted
from gradviz.engine.files import NotAFileError, read_bounded
from gradviz.export.outputs import check_output_file
from gradviz.streams import as_python_gives_them
from gradviz.watch.findings import Finding

STRICT_STATUS = 3
MAX_SCRIPT_BYTES = 64 * 1024 * 1024
# The scripts' globals, alive until the process ends as those of `python SCRIPT.py` are: freed
# as soon as the script returns instead, objects such as a DistributedDataParallel model can
# abort the process on their way out.
_FINISHED_SCRIPTS: list[dict[str, Any]] = []


def check_script(path: str) -> str:
    """The script's path, after checking that it is a Python file that can be read."""
    shown = quoted(path, bare=True)
    try:
        source = read_bounded(path, MAX_SCRIPT_BYTES + 1)
    except FileNotFoundError:
        raise UserError(f"{shown}: no such file.") from None
    except NotAFileError as exc:
        hint = " (give the script, such as train.py)" if exc.kind == "a folder" else ""
        raise UserError(f"{shown} is {exc.kind}, not a Python file{hint}.") from None
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else None
        raise UserError(f"{shown}: cannot read it ({one_line(reason or 'not a valid path', 100)}).") from None
    if len(source) > MAX_SCRIPT_BYTES or b"\0" in source:
        raise UserError(f"{shown} is not a Python file (it holds binary data or is larger than 64 MB).")
    if not path.endswith((".py", ".pyw")):
        try:
            compile(source, path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            raise UserError(f"{shown} is not a Python file (give a script such as train.py).") from None
    return path


def check_output(path: str | None) -> None:
    """Check, before the script runs, that the recording can be written at ``path``."""
    if path is not None:
        check_output_file(path, "recording.json")


def run_script(
    script: str,
    args: list[str],
    *,
    steps: int = 50,
    output: str | None = None,
    strict: bool = False,
    stderr: TextIO | None = None,
) -> int:
    """Run ``script`` watched; print its findings; return the exit status.

    Under ``torchrun`` only rank 0 is watched, and says so; every other rank becomes
    ``python SCRIPT.py ARGS`` itself (the process is replaced), so it prints nothing of
    gradviz's, writes no recording and ends exactly as the plain script would.
    """
    from gradviz.watch import distributed_rank, watch, watched_rank

    err = stderr or sys.stderr
    check_script(script)
    check_output(output)
    where = distributed_rank()
    if where is not None and where[0] == 0:
        err.write(
            f"gradviz: started by torchrun ({where[1]} processes): watching rank 0 only; "
            "the other ranks run unwatched.\n"
        )
        err.flush()
    if not watched_rank():
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, script, *args])
    argv = [script, *args]
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    folder = os.path.dirname(os.path.abspath(script))
    sys.argv = argv
    if sys.path and sys.path[0] in ("", os.getcwd()):
        sys.path[0] = folder
    else:
        sys.path.insert(0, folder)
    status = 0
    failure: BaseException | None = None
    try:
        with watch(steps, script=script, argv=argv) as rec, as_python_gives_them():
            try:
                _FINISHED_SCRIPTS.append(runpy.run_path(script, run_name="__main__"))
            except SystemExit as exc:
                status = _exit_status(exc, err)
            except BaseException as exc:
                failure = exc
                status = 130 if isinstance(exc, KeyboardInterrupt) else 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    if failure is not None:
        _print_traceback(failure, script, err)
    lines: list[str] = []
    if failure is not None:
        grad_error = explain_error(failure, rec)
        if grad_error is not None:
            rec.findings.insert(0, grad_error)
    for f in rec.findings:
        lines.append(one_line(str(f)))
    stopped = rec.data.get("stopped", "end")
    if stopped not in ("limit", "end"):
        seen = rec.data.get("observed_updates", 0)
        lines.append(f"gradviz: stopped watching after {seen} updates: {stopped}.")
    for line in lines:
        err.write(f"{one_line(line)}\n")
    if output is not None:
        rec.save(output)
    err.flush()
    if status == 0 and strict and any(f.severity == "warning" for f in rec.findings):
        return STRICT_STATUS
    return status


def _exit_status(exc: SystemExit, err: TextIO) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF if code >= 0 else code % 256
    err.write(f"{code}\n")  # as Python does: the message on stderr, status 1
    return 1


def _print_traceback(exc: BaseException, script: str, err: TextIO) -> None:
    """The traceback as ``python SCRIPT.py`` prints it: from the script's own frame on, without
    the watch's wrappers in between."""
    target = os.path.abspath(script)
    ours = os.path.dirname(os.path.abspath(__file__)) + os.sep
    kept = []
    t = exc.__traceback__
    while t is not None and os.path.abspath(t.tb_frame.f_code.co_filename) != target:
        t = t.tb_next
    while t is not None:
        if not os.path.abspath(t.tb_frame.f_code.co_filename).startswith(ours):
            kept.append(t)
        t = t.tb_next
    for a, b in itertools.pairwise(kept):
        a.tb_next = b
    if kept:
        kept[-1].tb_next = None
    # No frame of the script's (a SyntaxError): Python shows the offending line, and only that.
    exc.__traceback__ = kept[0] if kept else None
    err.write("".join(traceback.format_exception(exc)))


_NONE_MATH = re.compile(r"unsupported operand type\(s\) for .*'NoneType'|'NoneType' object")
_GRAD = re.compile(r"([A-Za-z_][\w.]*(?:\[[^\]]*\])?)\.grad\b(?!_)")


def explain_error(exc: BaseException, rec: Any) -> Finding | None:
    """A gradviz line for an exception that a ``.grad`` still ``None`` caused, at the user's line."""
    if not isinstance(exc, TypeError | AttributeError) or not _NONE_MATH.search(str(exc)):
        return None
    observer = getattr(rec, "observer", None)
    skip = getattr(observer, "_skip", ()) or ()
    frame_file, frame_line = None, 0
    for fs in traceback.extract_tb(exc.__traceback__):
        if fs.filename.startswith(skip) or fs.filename.startswith("<"):
            continue
        frame_file, frame_line, text = fs.filename, fs.lineno or 0, fs.line or ""
    if frame_file is None:
        return None
    text = _line(frame_file, frame_line)
    match = _GRAD.search(text)
    if match is None:
        return None
    name = match.group(1)
    events = [ev for ev in (observer.events if observer is not None else [])]
    backwards = [ev for ev in events if ev.op == "backward"]
    clears = [ev for ev in events if ev.op == "zero_grad"]
    if not backwards:
        why = "nothing has called backward() yet"
    elif clears and clears[-1].index > backwards[-1].index:
        why = f"zero_grad() at line {clears[-1].line} set it to None (set_to_none=True is its default)"
    else:
        why = (
            f"the backward() at line {backwards[-1].line} did not reach it "
            "(is it used in the loss, and does it have requires_grad=True?)"
        )
    return Finding(frame_file, frame_line, "error", f"{name}.grad is None here: {why}")


def _line(path: str, lineno: int) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for i, text in enumerate(fh, 1):
                if i == lineno:
                    return text
    except OSError:
        pass
    return ""
