"""A lab: one or more runs stepped in lock-step from the same weights over the same batches.

Time in a lab is counted in ticks. One iteration is a fixed number of ticks:
the runs' op sequences are lined up (a run without ``zero_grad`` waits while the
reference zeroes), so the same tick shows the same moment of every run.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from gradviz.engine.devices import resolve_device
from gradviz.engine.errors import ScenarioError
from gradviz.engine.lesson import check_params
from gradviz.engine.loop import OpSlot
from gradviz.engine.record import (
    SCALARS_KEPT,
    History,
    Keyframe,
    OpRecord,
    PackedSnapshot,
    RunHistory,
    Snapshot,
)
from gradviz.engine.run import Mode, Run
from gradviz.engine.scenario import Scenario

# Models whose whole snapshot stays under this many floats keep a full record per op;
# larger ones keep scalars per op and a snapshot every few iterations.
FULL_RECORD_FLOATS = 4096
# Bytes of packed keyframe per iteration that larger models may spend (with the
# per-op columns this keeps a 17k-parameter MLP with Adam under 4 KB per iteration).
KEYFRAME_BUDGET = 3990
# Full records kept per run: the recent past (about a minute of full-speed Play). Older ones are
# thinned to keyframes and rebuilt by replay; at about 450 bytes a record this is some 10 MB a run.
RECENT_OPS = 20_000


def _merged_order(keys: list[list[tuple]]) -> list[tuple]:
    """The shortest common order of all runs' op keys, each run's order kept."""
    merged = list(keys[0])
    for other in keys[1:]:
        sm = difflib.SequenceMatcher(a=merged, b=other, autojunk=False)
        out: list[tuple] = []
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            out += merged[i1:i2]
            if tag != "equal":
                out += other[j1:j2]
        merged = out
    return merged


def line_up(programs: Sequence[Sequence[OpSlot]]) -> list[list[OpSlot | None]]:
    """Each tick of one iteration: the op every run performs then, or ``None`` where it waits.

    Every run performs each of its own ops exactly once per iteration, in its
    own order; lining the runs up only decides at which tick. The same op may
    sit at two ticks when two runs order it differently (one run zeroes before
    its forward, another after its backward): each run performs it at the one
    tick its own order reaches it.
    """
    order = _merged_order([[s.key for s in ops] for ops in programs])
    rows: list[list[OpSlot | None]] = [[None] * len(programs) for _ in order]
    for r, ops in enumerate(programs):
        tick = 0
        for slot in ops:
            # The merged order holds each run's order as a subsequence, so the
            # first match from here on always exists.
            while order[tick] != slot.key:
                tick += 1
            rows[tick][r] = slot
            tick += 1
    return rows


class Lab:
    """Runs of a scenario, stepped together, recorded into a :class:`History`.

    Parameters
    ----------
    scenario:
        What to run.
    record:
        ``"auto"`` keeps a full record per op for small models and keyframes for
        large ones; ``"full"`` or ``"light"`` force one; ``"bare"`` records nothing
        (the peer that recording is measured against). ``"stream"`` makes the
        same full records as ``"full"``, but the history keeps only each run's
        latest op (and keyframe 0): memory stays flat however long the lab
        runs, for a reader that takes each record as it comes (``trace``). A
        streaming lab cannot go back: :meth:`seek` and records of earlier ops
        need the ops it forgot.
    keyframe_every:
        Iterations between keyframes of a ``light`` lab; by default chosen after
        the first iteration so that keyframes cost about ``KEYFRAME_BUDGET``
        bytes per iteration.
    recent:
        Full records a ``full`` lab keeps per run (``RECENT_OPS`` by default);
        older ones are thinned to keyframes and rebuilt by replay when read.
    scalars:
        Ops whose :class:`~gradviz.engine.record.Scalars` the lab keeps per run, the newest
        (``SCALARS_KEPT`` by default): what the window reads of each op as it comes.
    """

    def __init__(
        self,
        scenario: Scenario,
        record: str = "auto",
        keyframe_every: int | None = None,
        recent: int = RECENT_OPS,
        scalars: int = SCALARS_KEPT,
    ) -> None:
        self.scenario = scenario
        self.device = resolve_device(scenario.device)
        where = scenario.where
        try:
            self.runs = [Run(spec, scenario, self.device) for spec in scenario.runs]
        except ScenarioError as exc:
            raise ScenarioError(f"{where}: {exc}") from None
        if scenario.lesson is not None:
            check_params(scenario.lesson, self.runs[0].names, where)
        self.streaming = record == "stream"
        if self.streaming:
            record = "full"
        if record == "auto":
            # Parameters, .grad and up to two state tensors each (Adam's moments).
            record = "full" if self.runs[0].layout.total * 4 <= FULL_RECORD_FLOATS else "light"
        self.mode: Mode = record  # type: ignore[assignment]
        # 0 until the first iteration is done: only then does the optimizer's state exist,
        # and with it the size of a keyframe.
        self.keyframe_every = keyframe_every or (1 if self.mode == "full" else 0)
        self.schedule = line_up([r.program.ops for r in self.runs])
        self.ticks_per_iteration = len(self.schedule)
        self.tick = 0
        kept = (1 if self.streaming else recent) if self.mode == "full" else 0
        self.history = History([r.name for r in self.runs], kept, self.schedule, self._rebuild, scalars)
        if self.mode != "bare":
            for run in self.runs:
                self.history[run.name].keep_keyframe(0, Keyframe(run.current, None))
        if self.mode == "light" and self.keyframe_every:
            self._space_keyframes()
        self._shadows: dict[str, Run] = {}
        self._shadow_at: dict[str, int] = {}  # the op each shadow last performed

    # ---------------------------------------------------------------- stepping
    @property
    def iteration(self) -> int:
        """The iteration the next tick belongs to."""
        return self.tick // self.ticks_per_iteration

    @property
    def stopped(self) -> bool:
        """True when every run has diverged or failed."""
        return not any(r.active for r in self.runs)

    def run(self, name: str) -> Run:
        return next(r for r in self.runs if r.name == name)

    def _keyframe(self, run: Run, h: RunHistory, iteration: int) -> None:
        """Keep a light run's state at the start of ``iteration`` if it is a keyframe's turn."""
        packed = None
        if not self.keyframe_every:
            packed = PackedSnapshot(run.capture(grads=not run.grads_unread_at_iteration_start))
            self.keyframe_every = max(1, math.ceil(packed.nbytes / KEYFRAME_BUDGET))
            self._space_keyframes()
        if iteration % self.keyframe_every == 0:
            packed = packed or PackedSnapshot(run.capture(grads=not run.grads_unread_at_iteration_start))
            h.keep_keyframe(iteration, Keyframe(packed, run.last_loss))

    def _space_keyframes(self) -> None:
        """Tell a light lab's histories the spacing of its keyframes, which their thinning keeps to."""
        for h in self.history.runs.values():
            h.spacing = self.keyframe_every

    def advance(self, before: int | None = None) -> list[tuple[str, int]]:
        """Perform the next tick that has an op for some running run (and lies before tick ``before``).

        Returns ``(run name, op index)`` of each op performed. A lab that keeps no
        full records makes none of them here (:meth:`step` does, or :meth:`record` later).
        """
        return [(run.name, index) for run, index in self._tick(before, self.mode)]

    def _tick(self, before: int | None, mode: Mode) -> list[tuple[Run, int]]:
        """:meth:`advance`, each op performed in ``mode``: the runs that performed one, and its index."""
        while not self.stopped and (before is None or self.tick < before):
            iteration, slot_index = divmod(self.tick, self.ticks_per_iteration)
            done = []
            for r, run in enumerate(self.runs):
                if not run.active:
                    continue
                h = self.history[run.name]
                # Iteration 0 starts from the state the lab was built with, kept already; the
                # records of a lab that keeps them hold the rest (RunHistory.keyframe).
                if slot_index == 0 and iteration and self.mode == "light":
                    self._keyframe(run, h, iteration)
                slot = self.schedule[slot_index][r]
                if slot is None:
                    continue
                index = len(h)
                run.execute(slot, iteration, mode)
                done.append((run, index))
                if mode == "bare":
                    continue
                if self.streaming:
                    h.forget_all()
                recorded = run if mode == "full" else None  # what the op left, copied
                h.append(self.tick, run.last_loss, run.grad_norm, run.param_norm, recorded)
            self.tick += 1
            if done:
                return done
        return []

    def step(self, before: int | None = None) -> list[OpRecord]:
        """Perform the next tick that has an op for some running run (and lies before tick
        ``before``); return its records.

        A lab that keeps no full records makes these as the ops run, on its live
        runs: the records :meth:`record` would rebuild, at the cost of their copies.
        """
        if self.mode == "bare":
            self.advance(before)
            return []
        done = self._tick(before, "full")
        return [run.record(index, self.tick - 1) for run, index in done]  # the tick just performed

    def run_iterations(self, iterations: int) -> None:
        """Step until ``iterations`` more iterations are done (or every run stopped)."""
        end = (self.iteration + iterations) * self.ticks_per_iteration
        while self.tick < end and not self.stopped:
            self._tick(end, self.mode)

    def step_iteration(self) -> list[OpRecord]:
        """Step to the end of the current iteration; return the records of its ops."""
        records: list[OpRecord] = []
        target = self.iteration + 1
        end = target * self.ticks_per_iteration
        while self.tick < end and not self.stopped:
            records += self.step(end)
        return records

    def iterate(self, iterations: int) -> Iterator[OpRecord]:
        """Step until ``iterations`` iterations are done (or every run stopped), yielding records."""
        end = iterations * self.ticks_per_iteration
        while self.tick < end and not self.stopped:
            yield from self.step(end)

    # ------------------------------------------------------------ going back
    def _replay(
        self, run: Run, last: int, record: bool = False, resume_after: int | None = None
    ) -> OpRecord | None:
        """Perform ``run``'s ops up to its op ``last``: from the keyframe before that op's iteration,
        or on from op ``resume_after`` (the op ``run`` has just performed).

        With ``record``, op ``last`` is performed in ``full`` mode and its record returned. Only
        ops the run performed before are performed again, so none of them finds it stopped (its
        last one may stop it again).
        """
        h = self.history[run.name]
        ops = run.program.ops
        n = len(ops)
        if resume_after is None:
            iteration = h.keyframe_before(max(last, 0) // n)
            run.restore(*h.keyframe(iteration))
            first = iteration * n
        else:
            first = resume_after + 1
        for i in range(first, last if record else last + 1):
            run.replay(ops[i % n], i // n)
        if not record:
            return None
        run.execute(ops[last % n], last // n, "full")
        return run.record(last, h.ticks.tick_of(last))

    def seek(self, tick: int) -> None:
        """Go back to the moment just after ``tick`` (``-1``: the start) and forget later ops.

        Stepping on from there repeats exactly what happened the first time:
        the same batches and the same arithmetic.
        """
        if self.streaming:
            raise ValueError("a streaming lab keeps no earlier ops to go back to")
        tick = max(-1, min(tick, self.tick - 1))
        self._shadow_at.clear()
        for run in self.runs:
            h = self.history[run.name]
            last = h.index_at(tick)
            # A run that diverged at that op stays stopped there: a replay raises an error again,
            # as the op did, but checks no value.
            diverged = run.status == "diverged" and last == len(h) - 1
            self._replay(run, last)
            if diverged:
                run.status = "diverged"
            h.truncate(tick)
            if len(h):
                run.recapture()
                run.grad_norm, run.param_norm = self._norms(run, h)
        self.tick = tick + 1

    def _norms(self, run: Run, h: RunHistory) -> tuple[float, float]:
        """The norms of ``.grad`` and the parameters after the run's last op, as it recorded them:
        kept, or (a seek far back) from the state the replay left."""
        try:
            kept = h.scalars(len(h) - 1)
            return kept.grad_norm, kept.param_norm
        except IndexError:
            return run.norms()

    def record(self, run_name: str, index: int) -> OpRecord:
        """The full record of op ``index`` of a run: kept, or rebuilt by replay from a keyframe
        (or on from the op rebuilt last, where that lies between: rebuild ops in order)."""
        return self.history[run_name].records[index]

    def _shadow(self, run_name: str, r: int) -> Run:
        """The second copy of run ``r`` that rebuilds and replays perform on, made when first needed."""
        shadow = self._shadows.get(run_name)
        if shadow is None:
            shadow = self._shadows[run_name] = Run(self.scenario.runs[r], self.scenario, self.device)
        return shadow

    def _rebuild(self, run_name: str, index: int) -> OpRecord:
        """The record of op ``index`` of a run, made again by replaying its ops on a second copy of it."""
        if self.streaming:
            raise ValueError("a streaming lab keeps no earlier ops to rebuild")
        h = self.history[run_name]
        r = [x.name for x in self.runs].index(run_name)
        shadow = self._shadow(run_name, r)
        n = len(shadow.program.ops)
        iteration = index // n
        # Going on from the last rebuild is cheaper than from the keyframe when it lies
        # between them: views asking for an op and then the next one pay for one replay.
        at = self._shadow_at.pop(run_name, None)
        resume = at if at is not None and h.keyframe_before(iteration) * n <= at < index else None
        record = self._replay(shadow, index, record=True, resume_after=resume)
        assert record is not None and record.index == index
        self._shadow_at[run_name] = index
        return record

    def step_params(self, run_name: str, block: int = 4096) -> Iterator[np.ndarray]:
        """The run's parameters after each of its ``step`` ops so far, in order, ``block`` at a time
        (``(k, P)`` float32 arrays): the kept records' own, and the thinned past's replayed from
        the start on a second copy of the run, exactly as they were.

        Memory stays at one block however long the history; the path of a plane made late in a
        long session is drawn from these.
        """
        if self.streaming:
            raise ValueError("a streaming lab keeps no earlier ops to replay")
        h = self.history[run_name]
        r = [x.name for x in self.runs].index(run_name)
        kept_from = h.recent_from if h.keep_records else len(h)
        ops = self.runs[r].program.ops
        if kept_from > 0:
            # Ops whose records are gone: replayed from the start, the parameters read after each step.
            shadow = self._shadow(run_name, r)
            self._shadow_at.pop(run_name, None)  # where the last rebuild left it no longer holds
            shadow.restore(*h.keyframe(0))
        out: list[np.ndarray] = []
        for i in range(len(h)):
            slot = ops[i % len(ops)]
            if i < kept_from:
                shadow.replay(slot, i // len(ops))
            if slot.op == "step":
                out.append(shadow.param_copy() if i < kept_from else h.recent.params_after(i))
                if len(out) == block:
                    yield np.stack(out)
                    out = []
        if out:
            yield np.stack(out)

    def record_at(self, run_name: str, tick: int) -> OpRecord | None:
        """The record of the run's last op at or before ``tick``; ``None`` before its first."""
        index = self.history[run_name].index_at(tick)
        return None if index < 0 else self.record(run_name, index)

    def initial(self, run_name: str) -> Snapshot:
        """The state of a run before its first op."""
        return self.history[run_name].keyframe(0)[0]


def parameter_count(lab: Lab) -> int:
    """Number of trainable scalars in one run of ``lab``."""
    return lab.runs[0].layout.total


def set_threads(n: int = 1) -> None:
    """Set the threads of PyTorch's ops and of numpy's BLAS, for the whole process.

    Training steps of small models run fastest on one: more only contend. numpy's BLAS
    would start a thread per core for a dot product of a large model's tensors and keep
    them spinning between calls, against the window's and the lab's own threads.
    """
    torch.set_num_threads(n)
    threadpool_limits(n, user_api="blas")
