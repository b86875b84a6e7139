"""The ``gradviz`` command: open the app, list and check scenarios, trace runs headless, export animations.

Exit status: 0 on success, 2 when the user's input is wrong (one sentence on
stderr), 1 on an internal error.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import IO, Any, NoReturn

import gradviz
from gradviz.engine.errors import one_line, quoted
from gradviz.engine.jsonform import strict_json
from gradviz.engine.scenario import (
    EXPORT_ITERATIONS,
    EXPORT_OPS,
    FRAME_RATES,
    ITERATIONS,
    LEARNING_RATES,
    SEEDS,
    SNAPSHOT_OPS,
    Bounds,
    Scenario,
    number_problem,
)

DEFAULT_SCENARIO = "forgot-zero-grad"
SIZES = "320x240 to 7680x4320"


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one sentence and exit status 2.

    Whatever the user typed is echoed through :func:`quoted`: an unknown choice,
    unrecognised arguments, a value its option refuses.
    """

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: {one_line(message)}; see `{self.prog} --help`.\n")
        raise SystemExit(2)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices:
            choices = ", ".join(map(repr, action.choices))
            raise argparse.ArgumentError(action, f"invalid choice: {quoted(value)} (choose from {choices})")

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            shown = ", ".join(quoted(a, 40) for a in extras[:3])
            more = f" and {len(extras) - 3:,} more" if len(extras) > 3 else ""
            self.error(f"unrecognized arguments: {shown}{more}")
        return parsed


def _whole(bounds: Bounds) -> Callable[[str], int]:
    """An option's type: a whole number inside ``bounds`` (the range files use where they share it)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # also numbers of more than 4,300 digits
            raise argparse.ArgumentTypeError(f"found {quoted(text)}; allowed: {bounds.allowed()}") from None
        if not bounds.holds(value):
            raise argparse.ArgumentTypeError(f"found {quoted(value)}; allowed: {bounds.allowed()}")
        return value

    return parse


def _real(bounds: Bounds) -> Callable[[str], float]:
    """An option's type: a finite number inside ``bounds`` that float32 holds."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"found {quoted(text)}; allowed: {bounds.allowed()}") from None
        problem = number_problem(value, bounds)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return value

    return parse


def _size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"found {quoted(text)}; allowed: WIDTHxHEIGHT such as 1280x720, from {SIZES}"
        ) from None
    if not (320 <= w <= 7680 and 240 <= h <= 4320):
        raise argparse.ArgumentTypeError(f"found {quoted(text)}; allowed: a size from {SIZES}")
    return w, h


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``gradviz`` command and its subcommands."""
    p = _Parser(prog="gradviz", description="Watch a real PyTorch training loop one op at a time.")
    p.add_argument("--version", action="version", version=f"gradviz {gradviz.__version__}")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)

    o = sub.add_parser("open", help="open the app on a scenario (the default without a command)")
    o.add_argument(
        "scenario",
        nargs="?",
        default=DEFAULT_SCENARIO,
        help="built-in name, TOML file, or a recording (.json)",
    )
    o.add_argument(
        "--lesson", action="store_true", help="start the scenario's lesson: its stops, questions and answers"
    )

    sub.add_parser("list", help="list the built-in scenarios")

    c = sub.add_parser("check", help="validate a scenario file")
    c.add_argument("file")

    q = sub.add_parser("quiz", help="answer a lesson's questions; the real run reveals the answers")
    q.add_argument("scenario", nargs="?", help="built-in name or TOML file (default: interview questions)")

    w = sub.add_parser(
        "watch", help="run a training script as python would, watched: its zero_grad mistakes by line"
    )
    w.add_argument(
        "--steps",
        type=_whole(WATCH_STEPS),
        default=50,
        metavar="N",
        help="steps or manual updates to watch, 1 to 1,000,000 (default 50); the rest runs unwatched",
    )
    w.add_argument("-o", "--output", metavar="REC", help="write the recording (JSON) to REC")
    w.add_argument("--strict", action="store_true", help="exit status 3 when a warning is found")
    w.add_argument("script", metavar="SCRIPT.py", help="the training script")
    w.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="the script's own arguments")

    t = sub.add_parser("trace", help="run a scenario headless and write JSON Lines to stdout")
    t.add_argument("scenario", help="built-in name or TOML file")
    t.add_argument(
        "--iterations",
        type=_whole(ITERATIONS),
        help="iterations to run, 1 to 1,000,000 (default: the scenario's)",
    )
    t.add_argument("--device", help="cpu, cuda, mps or auto (default: the scenario's)")
    t.add_argument(
        "--seed",
        type=_whole(SEEDS),
        help="seed for weights and batches, 0 to 2**63 - 1 (default: the scenario's)",
    )
    t.add_argument("--lr", type=_real(LEARNING_RATES), help="learning rate for every optimizer, 0 to 1e6")

    s = sub.add_parser("snapshot", help="render the window offscreen after N ops and write a PNG")
    s.add_argument("scenario", help="built-in name, TOML file, or a recording (.json)")
    s.add_argument("-o", "--output", required=True, help="PNG file to write")
    s.add_argument(
        "--ops",
        type=_whole(SNAPSHOT_OPS),
        default=12,
        help="ticks to step before the picture, 0 to 10,000 (default 12)",
    )
    s.add_argument(
        "--size", type=_size, default=(1280, 720), help=f"WIDTHxHEIGHT, {SIZES} (default 1280x720)"
    )
    s.add_argument("--presentation", action="store_true", help="presentation mode: large type, no chrome")
    s.add_argument(
        "--3d",
        dest="three_d",
        action="store_true",
        help="show the 3-D surface too (needs OpenGL: without a display, run under xvfb-run)",
    )

    g = sub.add_parser("graph", help="write the autograd graph one backward() walks: JSON, DOT, SVG or PNG")
    g.add_argument("scenario", help="built-in name or TOML file")
    g.add_argument("-o", "--output", required=True, metavar="OUT", help="OUT.json, .dot, .svg or .png")
    g.add_argument("--run", metavar="R", help="the run (default: the scenario's first)")
    g.add_argument(
        "--iteration",
        type=_whole(GRAPH_ITERATIONS),
        default=0,
        metavar="I",
        help="iteration, from 0 (default 0)",
    )
    g.add_argument(
        "--backward",
        type=_whole(GRAPH_BACKWARDS),
        default=1,
        metavar="K",
        help="which backward() of the iteration, from 1 (default 1)",
    )

    e = sub.add_parser("export", help="export an animation: GIF, MP4/WebM video or PNG frames")
    e.add_argument("scenario", help="built-in name, TOML file, or a recording (.json)")
    e.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT",
        help="OUT.gif, .mp4, .webm, or a folder for PNG frames",
    )
    length = e.add_mutually_exclusive_group()
    length.add_argument(
        "--iterations",
        type=_whole(EXPORT_ITERATIONS),
        metavar="N",
        help="iterations to run, 1 to 10,000 (default: scenario's)",
    )
    length.add_argument(
        "--ops",
        type=_whole(EXPORT_OPS),
        metavar="N",
        help="ops to run instead of whole iterations, 1 to 100,000",
    )
    e.add_argument(
        "--from",
        dest="first",
        type=_whole(_FIRST),
        metavar="I",
        help="first op or iteration shown (1; 0: the start); at most 100,000 ops or 10,000 iterations",
    )
    e.add_argument(
        "--to",
        dest="last",
        type=_whole(_LAST),
        metavar="J",
        help="last op or iteration shown (default: the end); at most 100,000 ops or 10,000 iterations",
    )
    e.add_argument("--per-frame", choices=("op", "iteration"), default="op", help="a frame per op (default)")
    e.add_argument(
        "--fps",
        type=_real(FRAME_RATES),
        default=4.0,
        metavar="F",
        help="frames per second, 0.1 to 60 (default 4; GIF at most 50)",
    )
    e.add_argument(
        "--size",
        type=_size,
        metavar="WxH",
        help=f"WIDTHxHEIGHT, {SIZES} (default 1280x720; 640x480 for one view)",
    )
    e.add_argument(
        "--views",
        metavar="LIST",
        help="comma-separated from surface,grads,code,timeline (default: those of all, or with "
        "--presentation of code,surface,grads, that --size holds readably) and surface3d, "
        "the 3-D surface (needs OpenGL: run under xvfb-run -a "
        "without a display), and graph, the autograd graph each forward builds and backward walks",
    )
    e.add_argument("--caption", choices=("narration", "none"), default="narration", help="sentence per frame")
    e.add_argument(
        "--lesson",
        action="store_true",
        help="the scenario's lesson: ops played to each stop, its question held, then the reveal",
    )
    e.add_argument("--presentation", action="store_true", help="large type, as in presentation mode")
    e.add_argument("--device", help="cpu, cuda, mps or auto (default: the scenario's)")
    e.add_argument("--lr", type=_real(LEARNING_RATES), help="learning rate for every optimizer, 0 to 1e6")
    return p


# gradviz graph: the scenario's own length bounds --iteration further.
GRAPH_ITERATIONS = Bounds(0, ITERATIONS.high - 1, "a whole number")
GRAPH_BACKWARDS = Bounds(1, 1_000, "a whole number")

# --from and --to in either unit; cmd_export narrows them to the unit of --per-frame.
_FIRST = Bounds(0, EXPORT_OPS.high, "a whole number")
_LAST = Bounds(1, EXPORT_OPS.high, "a whole number")


def _check_export_range(args: argparse.Namespace) -> None:
    """--from and --to in the unit of --per-frame: an export steps at most so far."""
    from gradviz.engine.scenario import check_bounds

    if args.per_frame != "iteration":
        return
    within = EXPORT_ITERATIONS
    unit = "(with --per-frame iteration)"
    if args.first is not None:
        check_bounds(args.first, Bounds(0, within.high, within.what), None, f"--from {unit}")
    if args.last is not None:
        check_bounds(args.last, within, None, f"--to {unit}")


# --------------------------------------------------------------------- JSON


def _plain(value: Any) -> Any:
    if value is None:
        return None
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def record_to_json(rec: Any) -> dict[str, Any]:
    """One op record as the JSON object ``gradviz trace`` writes."""
    out: dict[str, Any] = {
        "type": "op",
        "run": rec.run,
        "index": rec.index,
        "tick": rec.tick,
        "iteration": rec.iteration,
        "phase": rec.phase,
        "micro": rec.micro,
        "op": rec.op,
        "line": rec.line,
        "loss": rec.loss,
        "params": {k: _plain(v) for k, v in rec.params.items()},
        "grads": {k: _plain(v) for k, v in rec.grads.items()},
    }
    if rec.op == "backward":
        out["fresh_grads"] = {k: _plain(v) for k, v in (rec.fresh_grads or {}).items()}
    out["state"] = {p: {k: _plain(v) for k, v in s.items()} for p, s in rec.state.items()}
    out["lr"] = dict(rec.lr)
    out["memory"] = dict(rec.memory)
    out["diverged"] = rec.diverged
    out["error"] = rec.error
    return strict_json(out)


def _write(stream: IO[str], obj: dict[str, Any]) -> None:
    stream.write(json.dumps(obj, allow_nan=False, separators=(",", ":")) + "\n")


# ----------------------------------------------------------------- commands


def cmd_list(args: argparse.Namespace) -> int:
    from gradviz.engine.scenario import builtin_names, load_builtin

    names = builtin_names()
    width = max(len(n) for n in names)
    scenarios = [load_builtin(name) for name in names]
    titles = [sc.title + ("  (default)" if sc.name == DEFAULT_SCENARIO else "") for sc in scenarios]
    title_width = max(len(t) for t in titles)
    for name, sc, title in zip(names, scenarios, titles, strict=True):
        note = _lesson_note(sc)
        line = f"{name:<{width}}  {title:<{title_width}}" + (f"  lesson: {note}" if note else "")
        print(line.rstrip())
    return 0


def _lesson_note(scenario: Any) -> str:
    """``3 stops, 4 questions`` where the scenario's lesson has stops; empty where it has none."""
    stops = scenario.lesson.stops if scenario.lesson is not None else ()
    if not stops:
        return ""
    questions = sum(len(s.questions) for s in stops)
    plural = ("" if len(stops) == 1 else "s", "" if questions == 1 else "s")
    return f"{len(stops)} stop{plural[0]}, {questions} question{plural[1]}"


def cmd_check(args: argparse.Namespace) -> int:
    from gradviz.engine.lab import Lab
    from gradviz.engine.scenario import load_scenario_file

    scenario = load_scenario_file(args.file)
    # Building the lab checks what only the real model can tell (parameter names in init).
    Lab(scenario.with_overrides(device="cpu"), record="bare")
    from gradviz.engine.quiz import check_lesson

    # Every lesson stop is stepped to and each question answered by the real run.
    lesson = check_lesson(scenario)
    runs = ", ".join(quoted(r.name, 40, bare=True) for r in scenario.runs)
    print(f"{scenario.where}: ok: {quoted(scenario.name)}, model {scenario.model.kind}, runs: {runs}.")
    if lesson[0]:
        print(f"{scenario.where}: lesson ok: {_lesson_note(scenario)}, each answered by the real run.")
    _note_absent_device(scenario)
    return 0


def _note_absent_device(scenario: Any) -> None:
    """The file is valid wherever it runs; say so when its device is not on this machine."""
    from gradviz.engine.devices import device_status

    reason = device_status().get(scenario.device)
    if reason is not None:
        print(
            f"{scenario.where}: note: its device {quoted(scenario.device)} is not on this machine "
            f"({reason}); it runs where that device is; here, give trace or export `--device cpu`.",
            file=sys.stderr,
        )


def cmd_trace(args: argparse.Namespace) -> int:
    from gradviz.engine.collector import set_aside_imports
    from gradviz.engine.lab import Lab, set_threads
    from gradviz.engine.scenario import load_scenario

    scenario = load_scenario(args.scenario).with_overrides(
        lr=args.lr, seed=args.seed, iterations=args.iterations, device=args.device
    )
    set_threads(1)
    set_aside_imports()
    # Each record is written as it comes and then forgotten: memory stays flat over any length.
    lab = Lab(scenario, record="stream")
    out = sys.stdout
    _write(
        out,
        {
            "type": "header",
            "scenario": scenario.name,
            "title": scenario.title,
            "device": str(lab.device),
            "seed": scenario.seed,
            "iterations": scenario.iterations,
            "ticks_per_iteration": lab.ticks_per_iteration,
            "runs": [
                {
                    "name": run.name,
                    "note": run.spec.note,
                    "source": run.program.source,
                    "params": {n: list(s) for n, s in zip(run.layout.names, run.layout.shapes, strict=True)},
                }
                for run in lab.runs
            ],
        },
    )
    stopped: dict[str, str] = {}
    for rec in lab.iterate(scenario.iterations):
        _write(out, record_to_json(rec))
        if (rec.diverged or rec.error) and rec.run not in stopped:
            stopped[rec.run] = _stop_sentence(rec)
    _write(
        out,
        {
            "type": "end",
            "runs": {
                # A run still going when the iterations ran out has finished them all.
                r.name: {
                    "status": "finished" if r.status == "running" else r.status,
                    "error": r.error,
                    "loss": strict_json(r.last_loss),
                }
                for r in lab.runs
            },
        },
    )
    out.flush()
    for sentence in stopped.values():  # what the JSON says, once, in words, after it
        sys.stderr.write(f"gradviz: {sentence}\n")
    return 0


def _stop_sentence(rec: Any) -> str:
    """Why a run's trace ends at ``rec``, in one sentence."""
    run = quoted(rec.run, 40)
    if rec.error:
        return (
            f"run {run} stopped at iteration {rec.iteration} with an error "
            f"({one_line(rec.error, 200).rstrip('.')}); the trace ends there for it."
        )
    loss = "none" if rec.loss is None else f"{rec.loss:.4g}"
    return f"run {run} diverged at iteration {rec.iteration} (loss {loss}); the trace ends there for it."


def _lesson_scenario(source: str, verb: str) -> Scenario:
    """The scenario ``--lesson`` plays; a recording, or a scenario without lesson stops, is refused
    before any work."""
    from gradviz.engine.errors import UserError
    from gradviz.engine.scenario import load_scenario
    from gradviz.watch.replay import is_recording

    if is_recording(source):
        raise UserError(f"A recording carries no lesson; leave out --lesson to {verb} what it did.")
    scenario = load_scenario(source)
    if scenario.lesson is None or not scenario.lesson.stops:
        raise UserError(
            f"{quoted(scenario.name)} has no lesson stops to {verb}; leave out --lesson "
            "(`gradviz list` shows the scenarios that carry a lesson)."
        )
    return scenario


def cmd_open(args: argparse.Namespace) -> int:
    from gradviz.gui.app import run_app

    if args.lesson:
        _lesson_scenario(args.scenario, "open")

    return run_app(args.scenario, lesson=args.lesson)


def cmd_snapshot(args: argparse.Namespace) -> int:
    from gradviz.gui.snapshot import write_snapshot

    write_snapshot(
        args.scenario,
        args.output,
        ops=args.ops,
        size=args.size,
        presentation=args.presentation,
        three_d=args.three_d,
    )
    _print_path(args.output)
    return 0


def _print_path(path: object) -> None:
    """The path written, on stdout for scripts to read: whole, with control characters escaped."""
    print(one_line(str(path), 10_000))


def cmd_export(args: argparse.Namespace) -> int:
    from gradviz.export.interrupt import InterruptGuard

    # Ctrl+C and kill wait for a safe point (between frames) from before Qt is first imported on:
    # raised in Python code that Qt's C++ is running (a paint, PySide's own set-up), they crash it.
    with InterruptGuard():
        return _export(args)


def _export(args: argparse.Namespace) -> int:
    from gradviz.engine.errors import UserError
    from gradviz.engine.scenario import load_scenario
    from gradviz.export import check_output
    from gradviz.export.outputs import check_fps
    from gradviz.export.progress import ProgressBar
    from gradviz.gui.export_frames import ExportRange, FrameStyle, export_animation
    from gradviz.gui.layout import DEFAULT_VIEWS, PRESENTATION_VIEWS, parse_views

    output = check_output(args.output)  # before building the lab: a typo in the path should fail at once
    check_fps(args.fps, output)
    _check_export_range(args)
    if args.lesson and (args.first, args.last, args.ops, args.iterations) != (None, None, None, None):
        raise UserError(
            "--lesson plays the lesson's own stops; leave out --from, --to, --ops and --iterations."
        )
    # Presentation mode shows the window's presentation views unless told otherwise. Views asked
    # for must fit the size; the default ones give way, the lesson's leading ones last.
    default = PRESENTATION_VIEWS if args.presentation else DEFAULT_VIEWS
    views = parse_views(args.views) if args.views is not None else default
    size = args.size or ((640, 480) if len(views) == 1 else (1280, 720))
    style = FrameStyle(
        size,
        views,
        caption=args.caption == "narration",
        presentation=args.presentation,
        fit=args.views is None,
    )
    frames = ExportRange(args.per_frame, args.first, args.last, args.ops, args.iterations, lesson=args.lesson)
    # A lesson's source is a scenario (a recording is refused by ``_lesson_scenario``).
    recording = None if args.lesson else _export_source(args)
    scenario: str | Scenario
    if recording is not None:
        scenario = recording
    else:
        loaded = _lesson_scenario(args.scenario, "export") if args.lesson else load_scenario(args.scenario)
        scenario = loaded.with_overrides(lr=args.lr, device=args.device)
    notes: list[str] = []
    with ProgressBar(sys.stderr) as bar:
        out = export_animation(
            scenario, args.output, style=style, fps=args.fps, frames=frames, progress=bar, note=notes.append
        )
    for sentence in notes:  # after the bar has cleared its line
        sys.stderr.write(f"gradviz: {sentence}\n")
    _print_path(out[0])
    return 0


def _export_source(args: argparse.Namespace) -> str | None:
    """The recording an export replays, or None for a scenario; a recording takes no --lr or --device."""
    from gradviz.engine.errors import UserError
    from gradviz.watch.replay import is_recording

    if not is_recording(args.scenario):
        return None
    if args.lr is not None or args.device is not None:
        raise UserError(
            "--lr and --device change a scenario's runs; a recording replays what its script did."
        )
    return str(args.scenario)


def cmd_graph(args: argparse.Namespace) -> int:
    from pathlib import Path

    from gradviz.engine.errors import UserError
    from gradviz.engine.graph import FORMATS, capture_graph, render
    from gradviz.engine.lab import set_threads
    from gradviz.engine.scenario import load_scenario
    from gradviz.export.atomic import write_bytes
    from gradviz.export.outputs import check_output_file

    suffix = Path(args.output).suffix
    if suffix.lower() not in FORMATS:
        raise UserError(
            f"gradviz graph cannot write {quoted(suffix or args.output, 40, bare=True)}; "
            f"give a file ending in {', '.join(FORMATS)}."
        )
    path = check_output_file(args.output)  # before any work: a typo in the path should fail at once
    scenario = load_scenario(args.scenario)
    set_threads(1)
    graph = capture_graph(scenario, args.run, args.iteration, args.backward)
    header = {"scenario": scenario.name, "run": args.run or scenario.runs[0].name}
    header |= {"iteration": args.iteration, "backward": args.backward}
    write_bytes(path, render(graph, suffix, **header))
    _print_path(path)
    if graph.error is not None:
        saved = [s for n in graph.nodes for s in n.saved]
        freed = ", with its saved tensors freed" if saved and all(s.freed for s in saved) else ""
        print(
            f"gradviz: that backward() raised PyTorch's error ({one_line(graph.error, 160).rstrip('.')}); "
            f"the graph written is the one it was called on{freed}.",
            file=sys.stderr,
        )
    return 0


# gradviz watch: updates watched before the script runs on unwatched.
WATCH_STEPS = Bounds(1, 1_000_000, "a whole number")
# The warning filters Python starts with: a watched script sees its warnings as it would unwatched.
_SCRIPT_WARNINGS = list(warnings.filters)


def cmd_watch(args: argparse.Namespace) -> int:
    from gradviz.watch.runner import run_script

    with warnings.catch_warnings():
        warnings.resetwarnings()
        for action, message, category, module, lineno in reversed(_SCRIPT_WARNINGS):
            text = getattr(message, "pattern", message) or ""
            where = getattr(module, "pattern", module) or ""
            warnings.filterwarnings(action, text, category, where, lineno)  # type: ignore[arg-type]
        return run_script(
            args.script, list(args.args), steps=args.steps, output=args.output, strict=args.strict
        )


def cmd_quiz(args: argparse.Namespace) -> int:
    from gradviz.engine.quiz import interview_quiz, lesson_quiz, run_quiz
    from gradviz.engine.scenario import load_scenario

    quiz = interview_quiz() if args.scenario is None else lesson_quiz(load_scenario(args.scenario))
    run_quiz(quiz, sys.stdin, sys.stdout)
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "list": cmd_list,
    "check": cmd_check,
    "trace": cmd_trace,
    "open": cmd_open,
    "snapshot": cmd_snapshot,
    "export": cmd_export,
    "quiz": cmd_quiz,
    "watch": cmd_watch,
    "graph": cmd_graph,
}


def _execute(args: argparse.Namespace) -> int:
    """Run the command with library warnings silenced: what they mean, gradviz says in its own words.

    numpy warns of overflow in a norm when a run diverges; the trace says that
    the run diverged, once.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return COMMANDS[args.command](args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gradviz`` command; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command is None:
        args = build_parser().parse_args(["open"])
    from gradviz.engine.errors import UserError
    from gradviz.streams import discard_output, is_output_failure, stand_in_for_closed

    stand_in_for_closed()
    try:
        status = _execute(args)
        sys.stdout.flush()  # here, where a full disk behind stdout can still be said in a sentence
        return status
    except UserError as exc:
        sys.stderr.write(f"gradviz: {one_line(str(exc))}\n")
        return 2
    except BrokenPipeError:
        # The reader (say `| head`) went away: not an error of ours or theirs.
        sys.stderr.close()
        return 0
    except KeyboardInterrupt as exc:
        # As a shell reports a command a signal ended: 130 for Ctrl+C, 143 for kill.
        return int(getattr(exc, "exit_status", 130))
    except Exception as exc:
        if isinstance(exc, OSError) and is_output_failure(exc):
            discard_output()
            sys.stderr.write(f"gradviz: cannot write to standard output ({one_line(str(exc.strerror))}).\n")
            return 2
        sys.stderr.write(
            f"gradviz: internal error ({type(exc).__name__}: {one_line(str(exc), 500)}); "
            "please report it with the command you ran.\n"
        )
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
