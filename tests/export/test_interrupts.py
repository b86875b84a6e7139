"""Ctrl+C, ``kill`` and ``kill -9`` during an export: status 130 or 143, the previous output kept."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from gradviz.export import GifWriter, PngFolderWriter, VideoWriter
from gradviz.export.atomic import AtomicFile, AtomicFolder, remove_stale, stale_temporaries
from gradviz.export.interrupt import Interrupted, InterruptGuard, check_interrupt, shielded
from tests.export.conftest import leftovers

posix_only = pytest.mark.skipif(os.name != "posix", reason="signals and process ids as POSIX has them")

# Small enough to start quickly, long enough that drawing and encoding each take a moment.
EXPORT = ["forgot-zero-grad", "--size", "640x480", "--views", "surface"]
PREVIOUS = b"GIF89a an earlier export, which must stay byte for byte"


def frames(n: int, size: tuple[int, int] = (64, 48)) -> list[np.ndarray]:
    w, h = size
    return [np.full((h, w, 3), 40 * i % 256, dtype=np.uint8) for i in range(n)]


def dead_pid() -> int:
    """The id of a process that surely no longer exists: one started, ended and reaped here."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def export_command(output: Path, iterations: int = 15) -> list[str]:
    export = [*EXPORT, "--iterations", str(iterations), "-o", str(output)]
    return [sys.executable, "-m", "gradviz", "export", *export]


def export_env() -> dict[str, str]:
    return dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONFAULTHANDLER="1")


# --- the guard itself, in this process ------------------------------------------------------------


@posix_only
def test_guard_holds_a_signal_until_a_safe_point_and_restores_the_handler() -> None:
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(Interrupted) as caught, InterruptGuard() as guard:
        signal.raise_signal(signal.SIGINT)  # recorded, not raised: this line is no safe point
        assert guard.received == signal.SIGINT
        signal.raise_signal(signal.SIGTERM)  # a second signal does not replace the first
        check_interrupt()
        pytest.fail("check_interrupt should have raised")
    assert (caught.value.signum, caught.value.exit_status) == (signal.SIGINT, 130)
    assert isinstance(caught.value, KeyboardInterrupt)
    assert signal.getsignal(signal.SIGINT) is before
    check_interrupt()  # without a guard, a no-op


@posix_only
def test_a_signal_after_the_last_safe_point_still_ends_the_block_interrupted() -> None:
    with pytest.raises(Interrupted) as caught, InterruptGuard():
        signal.raise_signal(signal.SIGTERM)
    assert caught.value.exit_status == 143
    # Another exception on its way out is kept as the cause.
    with pytest.raises(Interrupted) as caught, InterruptGuard():
        signal.raise_signal(signal.SIGINT)
        raise ValueError("failed while stopping")
    assert isinstance(caught.value.__cause__, ValueError)


@posix_only
def test_guards_nest_and_ignored_signals_stay_ignored() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with InterruptGuard() as outer:
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            with InterruptGuard() as inner:
                signal.raise_signal(signal.SIGHUP)  # ignored, as nohup asked
                inner.check()
                signal.raise_signal(signal.SIGINT)
                with pytest.raises(Interrupted):
                    inner.check()
            # The inner guard left the handlers and the record to the outer one.
            assert signal.getsignal(signal.SIGINT) == outer._record
            outer.received = None
    finally:
        signal.signal(signal.SIGHUP, previous)


@posix_only
def test_shielded_delivers_a_held_signal_when_the_section_ends() -> None:
    done = []
    with pytest.raises(KeyboardInterrupt), shielded():
        signal.raise_signal(signal.SIGINT)
        done.append("the whole section ran")
    assert done == ["the whole section ran"]
    with InterruptGuard() as guard:
        with shielded():  # inside a guard, the guard keeps the record
            signal.raise_signal(signal.SIGINT)
        assert guard.received == signal.SIGINT
        guard.received = None


@posix_only
def test_writers_stop_at_their_safe_points_and_leave_nothing(tmp_path: Path) -> None:
    gif = tmp_path / "a.gif"
    gif.write_bytes(PREVIOUS)
    writer = GifWriter(gif, (64, 48), fps=8)
    for f in frames(6):
        writer.add(f)
    encoded = []

    def progress(done: int, total: int) -> None:
        encoded.append(done)
        if done == 2:
            signal.raise_signal(signal.SIGINT)

    with pytest.raises(Interrupted), InterruptGuard(), writer:
        writer.commit(progress)
    assert encoded == [1, 2] and gif.read_bytes() == PREVIOUS

    pngs = tmp_path / "frames"
    with pytest.raises(Interrupted), InterruptGuard(), PngFolderWriter(pngs, (64, 48)) as folder:
        for i, f in enumerate(frames(5)):
            if i == 3:
                signal.raise_signal(signal.SIGTERM)
            folder.add(f)
    assert len(folder) == 3 and not pngs.exists()
    assert leftovers(tmp_path) == []


@posix_only
@pytest.mark.parametrize("suffix", [".mp4", ".webm"])
def test_video_stops_between_frames_and_before_its_rename(tmp_path: Path, suffix: str) -> None:
    video = tmp_path / f"a{suffix}"
    video.write_bytes(PREVIOUS)
    # A signal between two frames: add() stops at its top, the encoder's temporary goes.
    with pytest.raises(Interrupted), InterruptGuard(), VideoWriter(video, (64, 48), fps=8) as writer:
        for i, f in enumerate(frames(5)):
            if i == 3:
                signal.raise_signal(signal.SIGINT)
            writer.add(f)
    assert len(writer) == 3 and video.read_bytes() == PREVIOUS
    assert leftovers(tmp_path) == []
    # A signal after the last frame: commit() stops while it flushes, before the rename.
    writer = VideoWriter(video, (64, 48), fps=8)
    for f in frames(5):
        writer.add(f)
    with pytest.raises(Interrupted) as caught, InterruptGuard():
        signal.raise_signal(signal.SIGTERM)
        writer.commit()
    assert caught.value.exit_status == 143
    assert video.read_bytes() == PREVIOUS and leftovers(tmp_path) == []


@posix_only
def test_cli_export_in_process_stops_between_frames(qapp, capsys, tmp_path: Path) -> None:
    from gradviz import cli
    from gradviz.export import progress as progress_module

    drawn = []

    def bar(self, phase: str, done: int, total: int) -> None:
        drawn.append((phase, done))
        if (phase, done) == ("render", 2):
            signal.raise_signal(signal.SIGTERM)

    out = tmp_path / "a.gif"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(progress_module.ProgressBar, "__call__", bar)
        code = cli.main(["export", "forgot-zero-grad", "-o", str(out), "--ops", "6", "--views", "surface"])
    assert code == 143 and drawn == [("render", 1), ("render", 2)]
    assert not out.exists() and leftovers(tmp_path) == []
    assert capsys.readouterr().out == ""
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@posix_only
def test_cli_export_stops_while_it_steps_the_runs_before_the_first_frame(
    qapp, capsys, tmp_path: Path
) -> None:
    from gradviz import cli
    from gradviz.engine.lab import Lab

    steps = []
    real_advance = Lab.advance

    def advance(self: Lab, *args: object, **kwargs: object) -> object:
        steps.append(1)
        if len(steps) == 3:
            signal.raise_signal(signal.SIGTERM)
        return real_advance(self, *args, **kwargs)

    out = tmp_path / "a.gif"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Lab, "advance", advance)
        code = cli.main(
            [*("export", *EXPORT, "-o", str(out)), "--iterations", "2000", "--per-frame", "iteration"]
        )
    assert code == 143, capsys.readouterr().err
    assert len(steps) <= 4, "the export stepped on long after the signal came"
    assert not out.exists() and leftovers(tmp_path) == []


# --- Ctrl+C at random moments, in real processes ----------------------------------------------------


@dataclass(frozen=True)
class Moment:
    """When to interrupt one export: a phase, and how long after the phase begins."""

    output: str  # "gif", "previous" (a GIF over an earlier one) or "pngs"
    phase: str  # "start-up", "drawing" or "encoding"
    delay: float

    def __str__(self) -> str:
        return f"{self.output} {self.phase} +{self.delay:.3f}s"


# Drawing gets half the interrupts: that is where Python's own handler crashed about one in two.
PHASES = {
    "gif": {"start-up": 2, "drawing": 3, "encoding": 2},
    "previous": {"start-up": 2, "drawing": 3, "encoding": 2},
    "pngs": {"start-up": 2, "drawing": 4},  # frames are written as they are drawn: no encoding phase
}
# Seconds after the phase begins. Start-up (from the guard on: Qt's imports, the lab, the surface)
# takes seconds; drawing the frames about half of one; encoding them about a fifth.
SPANS = {"start-up": (0.0, 1.5), "drawing": (0.0, 0.3), "encoding": (0.0, 0.05)}


def moments(seed: int) -> list[Moment]:
    rng = random.Random(seed)
    pairs = [(out, phase) for out, counts in PHASES.items() for phase, n in counts.items() for _ in range(n)]
    rng.shuffle(pairs)
    return [Moment(out, phase, rng.uniform(*SPANS[phase])) for out, phase in pairs]


@dataclass
class Outcome:
    moment: Moment
    status: int | None
    problems: list[str]
    stderr: str


def temporaries(folder: Path) -> list[str]:
    return leftovers(folder)


def guarded(pid: int) -> bool:
    """Whether the export catches SIGTERM, which it does once its guard is in place (Linux tells).

    Before that, in Python's own start-up and the first imports, Ctrl+C is Python's
    KeyboardInterrupt, raised where no Qt code runs; elsewhere than Linux, assume so.
    """
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    caught = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(caught >> (signal.SIGTERM - 1) & 1)


def interrupt_once(moment: Moment, folder: Path, signum: int = signal.SIGINT) -> Outcome:
    """Start an export, interrupt it at ``moment``, and say what went wrong (nothing, ideally)."""
    folder.mkdir()
    target = folder / ("OUT" if moment.output == "pngs" else "OUT.gif")
    if moment.output == "previous":
        target.write_bytes(PREVIOUS)
    # stderr on a terminal, so the progress bar says when drawing starts.
    master, slave = os.openpty()
    proc = subprocess.Popen(
        export_command(target),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=export_env(),
        cwd=folder,
    )
    os.close(slave)
    err = bytearray()

    def pump(wait: float) -> bool:
        """Read what the export wrote to its terminal; False once it closed it."""
        ready, _, _ = select.select([master], [], [], wait)
        if not ready:
            return True
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the other end closed (Linux reports EIO)
            return False
        err.extend(chunk)
        return bool(chunk)

    problems = []
    start = time.monotonic()
    open_ = True
    try:
        if moment.phase == "start-up":
            while open_ and not guarded(proc.pid) and time.monotonic() < start + 120:
                open_ = pump(0.002)
            begun = time.monotonic()
            while open_ and time.monotonic() < begun + moment.delay:
                open_ = pump(0.005)
        elif moment.phase == "drawing":
            while open_ and b"drawing frames" not in err and time.monotonic() < start + 120:
                open_ = pump(0.05)
            time.sleep(moment.delay)
        else:
            while open_ and not temporaries(folder) and time.monotonic() < start + 120:
                open_ = pump(0.002)
            time.sleep(moment.delay)
        if proc.poll() is not None:
            problems.append(f"the export ended (status {proc.returncode}) before it was interrupted")
        else:
            proc.send_signal(signum)
        while open_:
            open_ = pump(1.0)
        try:
            status: int | None = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            status = proc.wait()
            problems.append("the export did not stop within a minute")
    finally:
        os.close(master)
        assert proc.stdout is not None
        printed = proc.stdout.read().decode()
        proc.stdout.close()
    if status != 128 + signum:
        problems.append(f"status {status}, not {128 + signum}")
    if printed:
        problems.append(f"it printed {printed.strip()!r}, as if it had finished")
    if moment.output == "previous":
        if not target.is_file() or target.read_bytes() != PREVIOUS:
            problems.append("the previous GIF was changed")
    elif target.exists():
        problems.append(f"{target.name} exists")
    left = temporaries(folder)
    if left:
        problems.append(f"temporaries left: {left}")
    return Outcome(moment, status, problems, err.decode("utf-8", "replace"))


@posix_only
def test_twenty_interrupts_at_random_moments_end_with_130_and_leave_nothing(tmp_path: Path) -> None:
    plan = moments(seed=20261201)
    assert len(plan) == 20 and sum(m.phase == "drawing" for m in plan) == 10
    with ThreadPoolExecutor(max_workers=3) as pool:
        outcomes = list(pool.map(lambda im: interrupt_once(im[1], tmp_path / f"run{im[0]}"), enumerate(plan)))
    failed = [o for o in outcomes if o.problems]
    report = "\n".join(f"{o.moment}: {'; '.join(o.problems)}\n{o.stderr[-1500:]}" for o in failed)
    assert not failed, f"{len(failed)} of {len(outcomes)} interrupts went wrong:\n{report}"


@posix_only
@pytest.mark.parametrize("phase", ["drawing", "encoding"])
def test_kill_ends_the_export_with_143_and_leaves_nothing(tmp_path: Path, phase: str) -> None:
    outcome = interrupt_once(Moment("previous", phase, 0.01), tmp_path / "run", signal.SIGTERM)
    assert not outcome.problems, f"{'; '.join(outcome.problems)}\n{outcome.stderr[-1500:]}"


# --- what a kill -9 leaves, and the next export's tidying -------------------------------------------


@posix_only
def test_temporaries_carry_the_writers_pid(tmp_path: Path) -> None:
    pid = os.getpid()
    file = AtomicFile(tmp_path / "a.gif", suffix=".gif")
    folder = AtomicFolder(tmp_path / "frames")
    assert file.temp.name.startswith(f".a.gif.{pid}.") and file.temp.suffix == ".gif"
    assert folder.temp.name.startswith(f".frames.{pid}.") and folder.temp.suffix == ".tmp"
    assert stale_temporaries(tmp_path / "a.gif") == []  # this process lives
    file.abort()
    folder.abort()
    assert leftovers(tmp_path) == []
    with pytest.raises(ValueError, match="suffix"):
        AtomicFile(tmp_path / "a.gif", suffix=".g/if")


@posix_only
@pytest.mark.parametrize("output", ["OUT.gif", "OUT"])
def test_the_next_export_removes_only_stale_temporaries_of_its_own_name(
    export, tmp_path: Path, output: str
) -> None:
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead, alive = dead_pid(), helper.pid
        stale_file = tmp_path / f".{output}.{dead}.0123abcd.gif"
        stale_folder = tmp_path / f".{output}.{dead}.4567cdef.tmp"
        live = tmp_path / f".{output}.{alive}.89abcdef.gif"
        kept = [
            live,
            tmp_path / f".{output}.notes",  # not of the pattern
            tmp_path / f".{output}.{dead}.0123abcd.gif.bak",  # not of the pattern
            tmp_path / f".{output}.{dead}.0123ABCD.gif",  # not of the pattern (upper-case hex)
            tmp_path / f".OTHER.gif.{dead}.0123abcd.gif",  # another target's
        ]
        for path in [stale_file, *kept]:
            path.write_bytes(b"x")
        stale_folder.mkdir()
        (stale_folder / "frame-0001.png").write_bytes(b"x")
        assert stale_temporaries(tmp_path / output) == sorted([stale_file, stale_folder])
        export(tmp_path / output, ops=2)
        assert (tmp_path / output).exists()
        assert leftovers(tmp_path) == sorted(p.name for p in kept)
    finally:
        helper.kill()
        helper.wait()
    # Once its writer is gone, the last one is stale too.
    assert remove_stale(tmp_path / output) == [live]


@posix_only
def test_a_folder_swapped_out_when_its_writer_died_comes_back(tmp_path: Path) -> None:
    target = tmp_path / "frames"
    old = tmp_path / f".frames.{dead_pid()}.0123abcd.old"
    (old / "previous").mkdir(parents=True)
    (old / "previous" / "frame-0001.png").write_bytes(b"previous")
    assert remove_stale(target) == [old]
    assert (target / "frame-0001.png").read_bytes() == b"previous" and leftovers(tmp_path) == []


@posix_only
@pytest.mark.parametrize("output", ["OUT.gif", "OUT"])
def test_after_a_kill_9_the_next_export_leaves_no_temporary(tmp_path: Path, output: str) -> None:
    target = tmp_path / output
    proc = subprocess.Popen(
        export_command(target), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=export_env()
    )
    try:
        deadline = time.monotonic() + 120
        while not leftovers(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the export ended before it could be killed"
    left = leftovers(tmp_path)
    assert left and all(name.startswith(f".{output}.{proc.pid}.") for name in left), left
    again = subprocess.run(
        export_command(target, iterations=1), capture_output=True, env=export_env(), timeout=120
    )
    assert again.returncode == 0, again.stderr.decode()
    assert target.exists() and leftovers(tmp_path) == []
