"""A long Play's far past is thinned to what is drawn, and every number shown there stays exact.

The thresholds are lowered through the same parameters the app's defaults fill in (the window
keeps 256 ops of each curve whole instead of 200,000), so a few thousand ops reach the thinned past.
"""

from __future__ import annotations

import bisect

import numpy as np

from gradviz.engine import Lab, load_scenario
from gradviz.engine.columns import BUCKET, Increasing, Scheduled
from gradviz.engine.scenario import Scenario
from gradviz.gui.views.timeline import PeakLine
from gradviz.gui.window_history import Moment, StepResult, WindowHistory, describe_lab, entries_since
from tests.engine.plain import plain_loop

WHOLE = 256
TICKS = 4_000  # 1,000 iterations: 3,000 ops of one run, 4,000 of the other


def _scenario() -> Scenario:
    builtin = load_scenario("forgot-zero-grad")
    return builtin.with_overrides(iterations=TICKS // 4 + 4)


def _played() -> tuple[Lab, WindowHistory]:
    """A lab keeping few records and scalars, played into a window keeping ``WHOLE`` ops whole,
    a few ticks per result as Play sends them, with the runs' distance at every tick."""
    lab = Lab(_scenario(), recent=40, scalars=300)
    history = WindowHistory(describe_lab(lab), whole=WHOLE)
    known = {r.name: 0 for r in lab.runs}
    while lab.tick < TICKS:
        distance = []
        for _ in range(7):
            lab.step()
            a, b = (r.param_copy().astype(np.float64) for r in lab.runs)
            distance.append((lab.tick - 1, (float(np.linalg.norm(a - b)),)))
        history.extend(StepResult(entries_since(lab, known), tuple(distance), {}, -2, {}, False))
        known = {r.name: len(lab.history[r.name]) for r in lab.runs}
    return lab, history


def _bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_a_moment_in_the_thinned_past_shows_what_pytorch_computed_bit_for_bit() -> None:
    lab, history = _played()
    scenario = lab.scenario
    full = Lab(scenario, recent=10**9)  # keeps every record and every scalar
    full.run_iterations(TICKS // 4)
    tick = 1_201  # iteration 300: yours' forward, the backward before it still in .grad
    moment = Moment(history.info, history, tick)
    for run in lab.runs:
        rt = history.runs[run.name]
        i = rt.index_at(tick)
        assert i < rt.loss.thinned and rt.records[i] is None, "the moment lies in the thinned past"
        assert lab.history[run.name].scalars_from > i, "the lab no longer keeps its scalars either"
    assert moment.record("yours") is None
    history.add_fetched({(run, i): lab.record(run, i) for run, i in history.missing(tick)})
    assert history.missing(tick) == []
    plain = {spec.name: plain_loop(scenario, spec, TICKS // 4) for spec in scenario.runs}
    for run in lab.runs:
        i = history.runs[run.name].index_at(tick)
        shown, truth = moment.record(run.name), full.record(run.name, i)
        assert shown is not None and shown.index == i and shown.tick == truth.tick
        assert shown.loss == truth.loss == full.history[run.name].loss[i]
        assert _bits(shown.snapshot.param_flat, truth.snapshot.param_flat)
        assert _bits(shown.snapshot.grad_flat, truth.snapshot.grad_flat)
        assert dict(shown.lr) == dict(truth.lr) and shown.slot == truth.slot
        by_hand = plain[run.name][i]
        assert by_hand.op == shown.op
        for name, value in by_hand.params.items():
            assert _bits(shown.params[name], value), (run.name, name)
        for name, grad in by_hand.grads.items():
            got = shown.grads[name]
            assert (got is None) == (grad is None) and (grad is None or _bits(got, grad)), (run.name, name)
    back = moment.last_backward("yours")  # iteration 299's, still in .grad at the forward
    assert back is not None and back.op == "backward"
    assert back.index == history.runs["yours"].index_at(tick) - 2
    # The count of backward() calls .grad holds is worked out, not stored: yours never clears it.
    assert moment.backward_count("yours") == 300 and moment.backward_count("reference") == 0


def test_the_lab_goes_back_into_the_thinned_past_and_steps_on_as_a_lab_that_kept_everything() -> None:
    lab, _ = _played()
    full = Lab(lab.scenario, recent=10**9, scalars=10**9)
    full.run_iterations(TICKS // 4)
    target = 1_202
    for each in (lab, full):
        each.seek(target)
    for run in lab.runs:
        # Worked out again from the state the replay left where the scalars are gone: the same
        # single-precision figures the other lab kept.
        a, b = lab.run(run.name), full.run(run.name)
        assert np.float32(a.grad_norm) == np.float32(b.grad_norm)
        assert np.float32(a.param_norm) == np.float32(b.param_norm)
    for _ in range(40):
        for mine, theirs in zip(lab.step(), full.step(), strict=True):
            assert mine.index == theirs.index and mine.loss == theirs.loss
            assert _bits(mine.snapshot.weights.flat, theirs.snapshot.weights.flat)
            assert _bits(mine.snapshot.grad_flat, theirs.snapshot.grad_flat)
    for run in lab.runs:
        h, f = lab.history[run.name], full.history[run.name]
        assert len(h) == len(f) and h.scalars(len(h) - 1) == f.scalars(len(f) - 1)


def test_the_thinned_past_draws_each_buckets_lowest_and_highest_at_their_own_ops() -> None:
    lab, history = _played()
    full = Lab(lab.scenario, recent=10**9)
    full.run_iterations(lab.iteration + 1)
    for run in lab.runs:
        rt = history.runs[run.name]
        truth = {
            "loss": np.asarray(full.history[run.name].loss, dtype=np.float64)[: len(rt)],
            "grad": np.asarray(full.history[run.name].grad_norm, dtype=np.float64)[: len(rt)],
        }
        for key, column in (("loss", rt.loss), ("grad", rt.grad_norm)):
            assert len(column) == len(truth[key]) and column.thinned >= len(column) - WHOLE - 2 * BUCKET
            drawn = column[:]
            assert np.array_equal(drawn[column.thinned :], truth[key][column.thinned :], equal_nan=True)
            for start in range(0, column.thinned, BUCKET):
                got, want = drawn[start : start + BUCKET], truth[key][start : start + BUCKET]
                if not np.isfinite(want).all():  # kept whole: the loss before the first forward
                    assert np.array_equal(got, want, equal_nan=True)
                    continue
                lo, hi = int(want.argmin()), int(want.argmax())
                assert got[lo] == want[lo] == got.min() and got[hi] == want[hi] == got.max(), (key, start)
            # The timeline's curve, drawn from the column, keeps every one of its buckets' extremes.
            line = PeakLine(most=16)
            x, y = line.update(rt.ticks, column, len(column))
            assert line.k >= BUCKET and line.drawn <= 4 * 16 + 4 * line.k
            for start in range(0, column.thinned - line.k + 1, line.k):
                want = truth[key][start : start + line.k]
                inside = (x >= rt.ticks[start]) & (x <= rt.ticks[start + line.k - 1] + 1)
                if np.isfinite(want).all():
                    assert y[inside].min() == want.min() and y[inside].max() == want.max(), (key, start)
    # The distance between the runs is a curve of the same kind, thinned alike.
    (distance,) = history.distance
    assert distance.thinned > 0 and len(distance) == len(history.distance_ticks) == lab.tick
    assert list(history.distance_ticks[:5]) == [0, 1, 2, 3, 4]


def test_the_window_keeps_a_few_bytes_an_op_in_the_thinned_past() -> None:
    _, history = _played()
    ops = sum(len(rt) for rt in history.runs.values())
    kept = sum(rt.loss.nbytes + rt.grad_norm.nbytes for rt in history.runs.values())
    kept += sum(column.nbytes for column in history.distance) + history.distance_ticks.nbytes
    whole = 2 * WHOLE * (8 + 4) + WHOLE * 8 + 2 * 2 * BUCKET * 12  # the whole parts, and one slice
    # Unthinned, these curves cost 12 bytes an op (loss and norm) and 12 a tick (distance, its tick).
    assert (kept - whole) / ops < 2.0


def test_foretold_columns_keep_only_what_differs_and_increasing_ones_a_byte_a_step() -> None:
    statuses = Scheduled(["running"])
    for i in range(3000):
        statuses.append("diverged" if i == 2999 else "running")
    assert statuses[-1] == "diverged" and statuses[2998] == "running"
    assert statuses._other == {2999: "diverged"}, "only the status the schedule did not foretell"
    statuses.truncate(2999)
    assert len(statuses) == 2999 and statuses._other == {}
    values = [0, 0, 3, 300, 301, 70_000, *range(70_001, 73_000)]
    column = Increasing()
    for v in values[:4]:
        column.append(v)
    column.extend(values[4:])
    assert list(column) == values and column[3] == 300 and column[2047] == values[2047]
    assert list(column[1020:1030]) == values[1020:1030]
    assert column.nbytes < 2 * len(values)
    for probe in (-1, 0, 2, 3, 299, 300, 301, 69_999, 70_000, 71_018, 71_019, 71_020, 72_999, 73_000):
        assert column.count_at_most(probe) == bisect.bisect_right(values, probe)
    column.truncate(1500)
    column.append(values[1499] + 1)
    assert list(column) == [*values[:1500], values[1499] + 1]


def test_a_foretold_column_finds_the_ops_with_a_value_as_reading_each_op_would() -> None:
    """The surface finds a frame's steps without reading every op; ops unlike the pattern count too."""
    rng = np.random.default_rng(3)
    for pattern in (["zero_grad", "forward", "backward", "step"], ["step"], [], ["forward", "step", "step"]):
        ops: Scheduled[str] = Scheduled(pattern)
        for i in range(200):
            foretold = pattern[i % len(pattern)] if pattern else "forward"
            ops.append(foretold if rng.random() < 0.8 else str(rng.choice(["step", "forward"])))
        for start, stop in ((0, 200), (37, 38), (3, 170), (150, 400), (-5, 9), (90, 90)):
            read = [i for i in range(max(start, 0), min(stop, len(ops))) if ops[i] == "step"]
            assert ops.indices("step", start, stop).tolist() == read, (pattern, start, stop)
