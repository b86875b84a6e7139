"""A recording replayed in the window's views: what a watch saw, as a ``LabInfo`` and a ``WindowHistory``.

No lab and no model: every op of the recording is one tick of one run (named after the
user's script), already on the history, so stepping and seeking only move the cursor. The
code panel shows the user's own file; the .grad inspector, optimizer state and timeline
read records rebuilt from the recording's numbers:

- parameters after an op are those of the next record that saw them (a step's record is
  taken just before it, a manual update's just after it, ``final`` as the watch ended);
- a ``.grad`` after an op is the one the last backward left (its ledger) or the last
  update read, ``None`` or zeros after a ``zero_grad``; only in a recording without the
  ledger, the one the next update read when nothing touched it in between, and otherwise
  unknown: shown as NaN;
- a step's optimizer state is the one the next step found (``final`` after the last).

Large tensors were recorded by a sample of their elements: such a parameter stands in
the views as its sample, named so. The loss surface needs the user's model and data,
which no recording holds; the path is drawn over its principal-components plane instead
(:func:`path_surface`): that of the recorded values, said so where some are samples.

The code panel shows the file of the op at the cursor: the script's, or another file the
script called into (from the recording's copy, else as it reads now, else a sentence why
not), and marks the next op's line only where it lies in the file shown, and none after
the last op. An export's counter counts ops and updates, as the status bar does.

Qt-free: the window, ``gradviz snapshot`` and ``gradviz export`` all replay through it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from gradviz.engine.errors import UserError, quoted
from gradviz.engine.files import read_bounded
from gradviz.gui.window_history import Entry, LabInfo, PlaneSurface, RunInfo, StepResult, WindowHistory
from gradviz.watch.findings import Finding, shown_path
from gradviz.watch.observer import SOURCE_LINE_CHARS, SOURCE_LINES
from gradviz.watch.recording import Recording, load_recording

if TYPE_CHECKING:
    from gradviz.engine.record import Grads, Layout
    from gradviz.engine.scenario import Op

RECORDING_SUFFIXES = (".json",)
NO_SURFACE = (
    "No loss surface for a recording: the loss at other weights needs the script's own model and "
    "data, and a recording holds neither."
)
OP_OF: dict[str, Op] = {"backward": "backward", "zero_grad": "zero_grad", "step": "step", "update": "step"}


def is_recording(source: object) -> bool:
    """Whether ``source`` names a recording rather than a scenario: a ``.json`` file, or a file
    whose text starts with ``{`` (a scenario is TOML, which cannot)."""
    if not isinstance(source, str | os.PathLike):
        return False
    path = os.fspath(source)
    if path.lower().endswith(RECORDING_SUFFIXES):
        return True
    try:
        head = read_bounded(path, 256)
    except (OSError, ValueError):  # not a regular file (a FIFO is not read): the scenario loader says why
        return False
    return head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{")


@dataclass(frozen=True)
class LinkedFinding:
    """A finding of the recording with the tick of the op it is about (-1 when none ran there)."""

    finding: Finding
    tick: int

    @property
    def text(self) -> str:
        return str(self.finding)


@dataclass(frozen=True)
class Replay:
    """A recording as the window draws it."""

    info: LabInfo
    history: WindowHistory
    findings: tuple[LinkedFinding, ...]
    file: str  # the user's file the code panel shows
    path: tuple[np.ndarray, ...]  # flat parameters at the start and after each update (whole ones only)
    sampled: tuple[str, ...]  # parameters recorded by a sample of their elements
    updates: int
    source: str  # the recording's path ("" when made from one in memory)

    @property
    def run(self) -> str:
        return self.info.runs[0].name

    def position(self, tick: int) -> str:
        """Where the cursor is, for the status bar and an export's counter:
        "op 7 of 20 · after update 3 of 10"."""
        assert self.info.position is not None
        return self.info.position(tick)


def load_replay(path: str | os.PathLike[str]) -> Replay:
    """Load and check a recording and make its replay; any problem is one sentence (``UserError``)."""
    rec = load_recording(path)
    try:
        return replay_of(rec, os.fspath(path))
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        # Checked by the loader field by field; what is left is numbers that do not fit together.
        raise UserError(
            f"{quoted(os.fspath(path), 200, bare=True)} is not a valid gradviz recording: "
            f"its parts do not fit together ({type(exc).__name__})."
        ) from None


def replay_of(rec: Recording, where: str = "") -> Replay:
    """The window's view of ``rec`` (``where``: the file it came from, for the title)."""
    # The engine's record types bring torch with them: imported here, once a recording is opened.
    from gradviz.engine.loop import OpSlot
    from gradviz.engine.record import Grads, Layout, OpRecord, Snapshot, Weights
    from gradviz.engine.scenario import DataSpec, LoopSpec, ModelSpec, OptimizerSpec, RunSpec, Scenario

    data = rec.data
    events = rec.events
    if not events:
        raise UserError(
            f"{quoted(where or 'the recording', 200, bare=True)} holds no observed op: nothing to replay "
            "(did the script call backward() while it was watched?)."
        )
    params = rec.params
    file = _main_file(events, data.get("script"))
    run = os.path.basename(file) or "script"
    names = tuple(_shown_name(p) for p in params)
    shapes = tuple(_shown_shape(p) for p in params)
    layout = Layout(names, shapes)
    sizes = layout.sizes
    sampled = tuple(p["name"] for p in params if p.get("sample_index") is not None)
    values = _ValueTimeline(rec, names, sizes)
    owner = _owners(data)

    ticks = len(events)
    before_grads, before_present = values.grads_after(-1)
    before = Grads(_float32_bytes(before_grads), before_present)
    records: list[OpRecord] = []
    entries: list[Entry] = []
    loss = math.nan
    for tick, ev in enumerate(events):
        if ev["op"] == "backward" and "loss" in ev:
            loss = _num(ev["loss"])
        flat = values.params_after(tick)
        grads, present = values.grads_after(tick)
        state_keys, state_flat, state_other = values.state_after(tick)
        lr = values.lr_after(tick, owner)
        weights = Weights(
            layout, _float32_bytes(np.concatenate([flat, state_flat])), state_keys, state_other, lr
        )
        snap = Snapshot(weights, Grads(_float32_bytes(grads), present))
        op = OP_OF[ev["op"]]
        fresh: Grads | None = None
        prior = None
        if op == "backward":
            prior = before
            fresh = _delivered(
                layout, (before_grads, before_present), (grads, present), set(ev.get("filled", []))
            )
        before_grads, before_present, before = grads, present, snap.grad_copy
        line = ev["line"]  # in its own file: the code panel shows the file of the op at the cursor
        op_record = OpRecord(
            run,
            tick,
            tick,
            int(ev["step"]),
            OpSlot("", op, 0, line, line, line),
            None if math.isnan(loss) else loss,
            not math.isfinite(loss) and not math.isnan(loss),
            None,
            snap,
            fresh,
            prior,
        )
        records.append(op_record)
        finite_g = grads[np.isfinite(grads)]
        entries.append(
            Entry(
                tick=tick,
                op=op,
                line=line,
                loss=loss,
                grad_norm=float(np.linalg.norm(finite_g)) if finite_g.size == grads.size else math.nan,
                param_norm=float(np.linalg.norm(flat)),
                status="diverged" if op_record.diverged else "running",
                record=op_record,
            )
        )

    optimizers = data.get("optimizers", [])
    kind = optimizers[0]["type"] if optimizers else "manual"
    last_lr = next(iter(values.lr_after(ticks - 1, owner).values()), math.nan)
    spec = RunSpec(
        name=run,
        note="",
        loop=LoopSpec(),
        optimizer=OptimizerSpec(kind=kind, lr=last_lr),
    )
    title = f"{shown_path(file)}, as recorded" + (f" ({os.path.basename(where)})" if where else "")
    n_updates = int(data.get("observed_updates", 0))
    scenario = Scenario(
        name=os.path.splitext(os.path.basename(where))[0] if where else run,
        title=title,
        summary=f"A recording of {shown_path(file)}: {ticks} ops observed, {n_updates} updates.",
        seed=0,
        iterations=1,
        device=_device(params),
        model=ModelSpec(),
        data=DataSpec(),
        runs=(spec,),
        path=None,
        lesson=None,
    )
    files = _files(rec, events, file, where)
    source, note = files[file]
    run_info = RunInfo(name=run, note=note, source=source, ops=(), names=names, shapes=shapes, spec=spec)
    # The next op is marked in the file shown (that of the op before it): at its own line, or at the
    # line of that file that called into the next op's (0: neither; the code panel's note says where).
    schedule = tuple(
        (OpSlot("", r.op, 0, r.line if t == 0 else _line_in(ev, events[t - 1]["file"]), r.line, r.line),)
        for t, (r, ev) in enumerate(zip(records, events, strict=True))
    )
    initial_flat = values.params_after(-1)
    g0, p0 = values.grads_after(-1)
    initial = Snapshot(
        Weights(layout, _float32_bytes(initial_flat), (), (), {}), Grads(_float32_bytes(g0), p0)
    )
    info = LabInfo(
        scenario=scenario,
        runs=(run_info,),
        ticks_per_iteration=ticks,
        schedule=schedule,
        device=scenario.device,
        devices={},
        surface=None,
        full_records=True,
        initial={run: initial},
        parameter_count=sum(int(p["numel"]) for p in params),
        recorded=True,
    )
    shown_at: list[LabInfo] = []  # the lab as the code panel shows it after each op
    info = replace(
        info,
        position=partial(_position, tuple(r.op for r in records), n_updates),
        code_at=partial(_code_at, shown_at),
    )
    labs: dict[tuple[str, str], LabInfo] = {}  # by (file shown, note): one lab each
    for t, ev in enumerate(events):
        text, note = files[ev["file"]]
        after = _next_elsewhere(events, t)
        note = " ".join(n for n in (note, after) if n)
        key = (ev["file"], note)
        if key not in labs:
            same = key == (file, run_info.note)
            shown = replace(run_info, source=text, note=note, file=os.path.basename(ev["file"]))
            labs[key] = info if same else replace(info, runs=(shown,))
        shown_at.append(labs[key])
    history = WindowHistory(info)
    history.extend(StepResult({run: tuple(entries)}, (), {run: None}, -2, {}, True))
    linked = tuple(LinkedFinding(f, _tick_of(f, events)) for f in rec.findings)
    path: tuple[np.ndarray, ...] = ()
    if params:
        path = (initial_flat, *(r.snapshot.param_flat for r in records if r.op == "step"))
    return Replay(info, history, linked, file, path, sampled, n_updates, where)


def path_surface(replay: Replay) -> PlaneSurface:
    """The recorded path's principal-components plane, with no loss on it (NaN): the recording
    holds no model or data to evaluate. Where tensors were recorded by a sample of their elements,
    the plane is that of the recorded coordinates, and says so. UserError where none can be made."""
    from gradviz.engine.landscape import fit_extent, pca_plane, project

    if len(replay.path) < 3:
        raise UserError(f"{NO_SURFACE} Its path has too few updates for a plane.")
    path = np.stack(replay.path)
    if not np.isfinite(path).all():
        raise UserError(f"{NO_SURFACE} Nor is there a path: some values were not recorded at every update.")
    layout = replay.history.runs[replay.run].records[0]
    assert layout is not None
    try:
        plane = pca_plane(path, layout.snapshot.layout)
    except UserError:
        raise UserError(
            f"{NO_SURFACE} Its path does not move in two directions, so it has no plane."
        ) from None
    (x0, x1), (y0, y1) = fit_extent(project(plane, path).coords)
    xs, ys = np.linspace(x0, x1, 3), np.linspace(y0, y1, 3)
    note = f"{NO_SURFACE} The path is drawn over its principal-components plane."
    title = (
        "No loss surface for a recording (no model or data in it): "
        "its path over the principal-components plane"
    )
    if replay.sampled:
        more = len(replay.sampled) - 2
        few = ", ".join(replay.sampled[:2]) + (f" and {more} more" if more > 0 else "")
        note = (
            f"{NO_SURFACE} The path is drawn over the principal-components plane of the "
            f"{path.shape[1]:,} values recorded of {replay.info.parameter_count:,} ({few} by a sample "
            f"of {'its' if len(replay.sampled) == 1 else 'their'} elements): a plane through those "
            "coordinates only."
        )
        title = (
            f"No loss surface for a recording (no model or data in it), nor a path through all its weights: "
            f"{few} {'was' if len(replay.sampled) == 1 else 'were'} sampled; the path of the "
            f"{path.shape[1]:,} values recorded"
        )
    return PlaneSurface(
        kind="pca",
        plane=plane,
        xs=xs,
        ys=ys,
        Z=np.full((3, 3), np.nan),
        final=True,
        note=note,
        method="none",
        title=title,
    )


# ------------------------------------------------------------------ helpers


def _position(ops: tuple[str, ...], updates: int, tick: int) -> str:
    if tick < 0:
        return f"before the first observed op · {updates} updates recorded"
    done = sum(1 for op in ops[: tick + 1] if op == "step")
    return f"op {tick + 1} of {len(ops)} · after update {done} of {updates}"


def _code_at(shown_at: list[LabInfo], tick: int) -> LabInfo:
    """The lab showing the file of the op at ``tick`` (the first op's before it)."""
    return shown_at[min(max(tick, 0), len(shown_at) - 1)]


def _line_in(ev: Mapping[str, Any], file: str) -> int:
    """The line of ``file`` where ``ev`` ran or that called into where it ran; 0 where none did."""
    if ev["file"] == file:
        return int(ev["line"])
    return next((int(line) for f, line in ev.get("calls", []) if f == file), 0)


def _next_elsewhere(events: list[dict[str, Any]], t: int) -> str:
    """Where the op after ``t`` runs, in words, when no line of ``t``'s file can be marked for it."""
    if t + 1 >= len(events) or _line_in(events[t + 1], events[t]["file"]):
        return ""
    ev = events[t + 1]
    what = "the manual update" if ev["op"] == "update" else f"{ev['op']}()"
    return f"The next op, {what}, runs at line {ev['line']} of {os.path.basename(ev['file'])}."


def _files(rec: Recording, events: list[dict[str, Any]], main: str, where: str) -> dict[str, tuple[str, str]]:
    """The source of each file an op ran in, and a note on it for the code panel: as the recording
    holds it, else as the file reads now (it may have changed since), else a sentence why none."""
    out: dict[str, tuple[str, str]] = {}
    sources = rec.sources
    for file in dict.fromkeys([main, *(ev["file"] for ev in events)]):
        shown = shown_path(file)
        if file in sources:
            text = "\n".join(sources[file])
            note = "" if file == main else f"{shown}: the op at the cursor ran here, called from the script."
        else:
            now = _read_now(file, where)
            text = now or ""
            if now is None:
                note = f"{shown} is neither in the recording nor on this computer: its lines cannot be shown."
            else:
                note = f"{shown} as it reads now: the recording holds no copy, so it may have changed since."
        out[file] = (text, note)
    return out


def _read_now(file: str, where: str) -> str | None:
    """A user's file as it reads now: at its path, or next to the recording for a relative path."""
    candidates = [file]
    if not os.path.isabs(file) and where:
        candidates.append(os.path.join(os.path.dirname(os.path.abspath(where)), file))
    for path in candidates:
        try:
            # As much as a recording would hold of it: its lines, 4 bytes a character at most in UTF-8.
            raw = read_bounded(path, SOURCE_LINES * (SOURCE_LINE_CHARS + 1) * 4)
        except (OSError, ValueError):  # missing, or not a regular file (a FIFO would block)
            continue
        lines = raw.decode("utf-8", errors="replace").splitlines()[:SOURCE_LINES]
        return "\n".join(line[:SOURCE_LINE_CHARS] for line in lines)
    return None


def _main_file(events: list[dict[str, Any]], script: Any) -> str:
    """The user's file most ops ran in (the script itself when it ties)."""
    counts: dict[str, int] = {}
    for ev in events:
        counts[ev["file"]] = counts.get(ev["file"], 0) + 1
    best = max(counts.values())
    tied = [f for f, c in counts.items() if c == best]
    return script if isinstance(script, str) and script in tied else tied[0]


def _shown_name(p: Mapping[str, Any]) -> str:
    sample = p.get("sample_index")
    if sample is None:
        return str(p["name"])
    return f"{p['name']} ({len(sample)} of {int(p['numel']):,} values)"


def _shown_shape(p: Mapping[str, Any]) -> tuple[int, ...]:
    sample = p.get("sample_index")
    if sample is not None:
        return (len(sample),)
    shape = tuple(int(d) for d in p["shape"])
    if math.prod(shape) != int(p["numel"]):
        raise ValueError("shape and numel disagree")
    return shape


def _device(params: list[dict[str, Any]]) -> str:
    devices = sorted({str(p.get("device", "cpu")) for p in params})
    return ", ".join(devices) or "cpu"


def _owners(data: Mapping[str, Any]) -> dict[int, str]:
    """Parameter id -> the name of the optimizer that holds it."""
    out: dict[int, str] = {}
    for o in data.get("optimizers", []):
        for pid in o["params"]:
            out.setdefault(pid, o["name"])
    return out


def _num(v: Any) -> float:
    return float(v)  # "nan", "inf" and "-inf" included


def _array(values: list[Any], size: int) -> np.ndarray:
    out = np.array([_num(v) for v in values], dtype=np.float64)
    if out.size != size:
        raise ValueError(f"{out.size} values where {size} were expected")
    return out


def _delivered(
    layout: Layout,
    before: tuple[np.ndarray, tuple[bool, ...]],
    after: tuple[np.ndarray, tuple[bool, ...]],
    filled: set[int],
) -> Grads:
    """What one backward added to each ``.grad``: the new one less the old (absent where it added nothing)."""
    from gradviz.engine.record import Grads

    old, new = layout.split(before[0], before[1]), layout.split(after[0], after[1])
    parts: list[np.ndarray] = []
    present: list[bool] = []
    for pid, name in enumerate(layout.names):
        now, was = new[name], old[name]
        present.append(pid in filled and now is not None)
        if present[-1]:
            parts.append(np.ravel(now if was is None else now - was).astype(np.float32))
    flat = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    return Grads(_float32_bytes(flat), tuple(present))


def _float32_bytes(values: np.ndarray) -> bytes:
    """``values`` as the float32 bytes a record's copy holds."""
    return np.asarray(values, np.float32).tobytes()


def _tick_of(f: Finding, events: list[dict[str, Any]]) -> int:
    """The op a finding is about: the one it names, else the first at its line."""
    if f.event is not None:
        return f.event
    return next((i for i, ev in enumerate(events) if ev["file"] == f.file and ev["line"] == f.line), -1)


class _ValueTimeline:
    """Each parameter's values, ``.grad`` and optimizer state after each op, from the records."""

    def __init__(self, rec: Recording, names: tuple[str, ...], sizes: tuple[int, ...]) -> None:
        self.names, self.sizes = names, sizes
        self.events = rec.events
        n = len(sizes)
        self.first_step: list[int | None] = [None] * n
        # (position, values): valid after the op at ``position`` (-1: before the first).
        self.values: list[list[tuple[int, np.ndarray]]] = [[] for _ in range(n)]
        self.states: list[list[tuple[int, dict[str, Any]]]] = [[] for _ in range(n)]
        self.lrs: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        # Per parameter, the ops that touched its .grad: (event, kind, grad or None or "zeros").
        self.touches: list[list[tuple[int, str, Any]]] = [[] for _ in range(n)]
        self.update_grads: dict[tuple[int, int], np.ndarray | None] = {}
        for u in rec.updates:
            e = u["event"]
            position = e - 1 if u["op"] == "step" else e
            for key, entry in u["params"].items():
                pid = int(key)
                vals = entry.get("values", entry.get("sample"))
                if vals is not None:
                    self.values[pid].append((position, _array(vals, sizes[pid])))
                if "state" in entry:
                    self.states[pid].append((position, entry["state"]))
                if "lr" in entry:
                    self.lrs[pid].append((position, _num(entry["lr"])))
                g = entry.get("grad_values", entry.get("grad_sample"))
                if entry["grad"] == "none":
                    self.update_grads[(pid, e)] = None
                elif g is not None:
                    self.update_grads[(pid, e)] = _array(g, sizes[pid])
        last = len(self.events) - 1
        for key, entry in rec.data.get("final", {}).items():
            pid = int(key)
            vals = entry.get("values", entry.get("sample"))
            if vals is not None:
                self.values[pid].append((last, _array(vals, sizes[pid])))
            if "state" in entry:
                self.states[pid].append((last, entry["state"]))
        for pid in range(n):
            self.values[pid].sort(key=lambda item: item[0])
            self.states[pid].sort(key=lambda item: item[0])
        for e, ev in enumerate(self.events):
            op = ev["op"]
            if op == "backward":
                left = ev.get("grads", {})
                for pid in ev.get("filled", []):
                    g = left.get(str(pid))
                    self.touches[pid].append((e, "fill", None if g is None else _array(g, sizes[pid])))
            elif op == "zero_grad":
                zeros = set(ev.get("zeros", []))
                for pid in ev.get("params", []):
                    self.touches[pid].append((e, "clear", "zeros" if pid in zeros else None))
            else:
                for pid in ev.get("params", []):
                    if op == "step" and self.first_step[pid] is None:
                        self.first_step[pid] = e
                    if (pid, e) in self.update_grads:
                        self.touches[pid].append((e, "update", self.update_grads[(pid, e)]))

    def params_after(self, tick: int) -> np.ndarray:
        parts = []
        for pid, size in enumerate(self.sizes):
            known = self.values[pid]
            later = next((v for pos, v in known if pos >= tick), None)
            if later is None:
                later = known[-1][1] if known else np.full(size, np.nan)
            parts.append(later)
        return np.concatenate(parts) if parts else np.zeros(0)

    def grads_after(self, tick: int) -> tuple[np.ndarray, tuple[bool, ...]]:
        parts, present = [], []
        for pid, size in enumerate(self.sizes):
            touches = self.touches[pid]
            before = [t for t in touches if t[0] <= tick]
            after = next((t for t in touches if t[0] > tick), None)
            last = before[-1] if before else None
            if last is not None and (last[1] == "update" or (last[1] == "fill" and last[2] is not None)):
                g: Any = last[2]  # what the update read, or what the backward left
            elif after is not None and after[1] == "update":
                g = after[2]  # nothing touched it between this op and the update that read it
            elif last is not None and last[1] == "clear":
                g = np.zeros(size) if last[2] == "zeros" else None
            elif last is None:
                g = None
            else:
                g = np.full(size, np.nan)  # filled here, but never read by an update as it was
            if g is None:
                present.append(False)
            else:
                present.append(True)
                parts.append(np.asarray(g, dtype=np.float64))
        flat = np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)
        return flat, tuple(present)

    def state_after(self, tick: int) -> tuple[tuple[Any, ...], np.ndarray, tuple[Any, ...]]:
        """The optimizer state after ``tick``: none before a parameter's first step; after it, what
        the next step found (or what the watch's end found); left out where nothing saw it."""
        keys: list[tuple[str, str, tuple[int, ...], str]] = []
        other: list[tuple[str, str, Any]] = []
        parts: list[np.ndarray] = []
        for pid, size in enumerate(self.sizes):
            first = self.first_step[pid]
            if first is None or first > tick:
                continue
            later = next((s for pos, s in self.states[pid] if pos >= tick), None)
            if later is None:
                continue
            for key, v in sorted(later.items()):
                if isinstance(v, list):
                    keys.append((self.names[pid], key, (size,), "float32"))
                    parts.append(_array(v, size))
                else:
                    other.append((self.names[pid], key, _num(v)))
        flat = np.concatenate(parts) if parts else np.zeros(0)
        return tuple(keys), flat, tuple(other)

    def lr_after(self, tick: int, owner: Mapping[int, str]) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, lrs in enumerate(self.lrs):
            if not lrs or pid not in owner:
                continue
            later = next((lr for pos, lr in lrs if pos >= tick), lrs[-1][1])
            out.setdefault(owner[pid], later)
        return out
