"""The history: records hold copies and no tensor, and a long run's memory stays bounded while
every op of its thinned past comes back exactly as it was recorded."""

from __future__ import annotations

import gc
import subprocess
import sys
import tracemalloc
import types
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from gradviz.engine import Lab, OpRecord, load_builtin, loads_scenario
from gradviz.engine.copying import flat_copy
from gradviz.engine.record import THINNED_EVERY, Grads, Snapshot, floats
from gradviz.engine.scenario import builtin_names

from .helpers import DIVERGING, MLP


def _reachable(root: object) -> Iterator[object]:
    """Every object reachable from ``root``, following numpy arrays to the memory they view."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        yield obj
        if isinstance(obj, type | types.ModuleType | types.FunctionType):
            continue
        if isinstance(obj, np.ndarray):
            if obj.base is not None:
                stack.append(obj.base)
            continue
        stack.extend(gc.get_referents(obj))


def _tensors_in(root: object) -> list[str]:
    return [type(o).__name__ for o in _reachable(root) if isinstance(o, torch.Tensor)]


def test_no_record_or_keyframe_holds_a_tensor():
    # Labs whose backwards add to an existing .grad (hooks catch what each delivers), accumulate
    # micro-batches, and step two optimizers; and a large model whose records are rebuilt.
    labs = [Lab(load_builtin(name)) for name in ("forgot-zero-grad", "grad-accumulation", "gan-detach")]
    labs.append(Lab(loads_scenario(MLP, "test")))
    for lab in labs:
        lab.run_iterations(6)
        for run in lab.runs:
            h = lab.history[run.name]
            assert len(h) > 0
            records = [h.records[i] for i in range(len(h))]
            assert any(r.fresh is not None for r in records)
            for root in (records, h.keyframes, run.current):
                assert _tensors_in(root) == [], (lab.scenario.name, run.name)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _grads_same(a: Grads | None, b: Grads | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.present == b.present and _same_bits(a.flat, b.flat)


def _snapshots_same(a: Snapshot, b: Snapshot) -> bool:
    return (
        _same_bits(a.weights.flat, b.weights.flat)
        and _grads_same(a.grad_copy, b.grad_copy)
        and (a.state_keys, a.state_other, dict(a.lr)) == (b.state_keys, b.state_other, dict(b.lr))
    )


def _assert_bit_for_bit(a: OpRecord, b: OpRecord) -> None:
    assert (a.run, a.index, a.tick, a.iteration, a.slot, a.diverged, a.error) == (
        b.run,
        b.index,
        b.tick,
        b.iteration,
        b.slot,
        b.diverged,
        b.error,
    )
    assert repr(a.loss) == repr(b.loss)  # exact, and nan equals nan
    assert _snapshots_same(a.snapshot, b.snapshot)
    assert _grads_same(a.fresh, b.fresh) and _grads_same(a.prior, b.prior)


@pytest.mark.parametrize("name", [*builtin_names(), "diverging"])
def test_the_records_a_history_keeps_are_the_records_its_ops_returned_as_they_ran(name: str):
    # Thinned as it goes, then cut back by a seek and stepped on: every record still kept reads as
    # the op's own did, with what a backward added and found, a footprint, an error or divergence.
    scenario = loads_scenario(DIVERGING, "test") if name == "diverging" else load_builtin(name)
    lab = Lab(scenario, recent=60)
    returned = {run.name: [] for run in lab.runs}
    for rec in lab.iterate(40):
        returned[rec.run].append(rec)
    lab.seek(lab.tick - 2 * lab.ticks_per_iteration - 1)
    for run in lab.runs:
        del returned[run.name][len(lab.history[run.name]) :]
    for rec in lab.iterate(45):
        returned[rec.run].append(rec)
    assert any(lab.history[run.name].recent_from > 0 for run in lab.runs)  # thinned
    for run in lab.runs:
        h = lab.history[run.name]
        assert 0 < len(h.recent) <= len(h) == len(returned[run.name])
        for index in range(h.recent_from, len(h)):
            kept, ran = h.records[index], returned[run.name][index]
            _assert_bit_for_bit(kept, ran)
            assert kept.footprint == ran.footprint
    stopped = [r for records in returned.values() for r in records if r.error or r.diverged]
    assert bool(stopped) == (name in ("backward-twice", "rnn-tbptt", "diverging"))


def test_seek_into_the_thinned_past_gives_each_op_the_record_it_had_when_it_ran():
    lab = Lab(load_builtin("forgot-zero-grad"), recent=80)
    iterations = 3 * THINNED_EVERY + 7
    recorded = {run.name: [] for run in lab.runs}
    for rec in lab.iterate(iterations):
        recorded[rec.run].append(rec)
    for run in lab.runs:
        h = lab.history[run.name]
        assert len(h.recent) < 100 < len(h) == len(recorded[run.name])  # the past is thinned
        assert all(k % THINNED_EVERY == 0 for k in h.keyframes if k < h.recent[0].iteration)
        # The last op before a thinned keyframe is the farthest from the keyframe before it.
        far = h.index_at(2 * THINNED_EVERY * lab.ticks_per_iteration - 1)
        for index in (0, 1, 5, far, far + 1, far + 2, h.recent_from - 1, h.recent_from):
            _assert_bit_for_bit(lab.record(run.name, index), recorded[run.name][index])
    # Going back into the thinned past and stepping on repeats every op exactly.
    target = lab.ticks_per_iteration * (THINNED_EVERY + 3) + 2
    end = lab.tick
    lab.seek(target)
    again = []
    while lab.tick < end:
        again += lab.step()
    first = [r for name in recorded for r in recorded[name] if r.tick > target]
    assert len(again) == len(first)
    for a in again:
        _assert_bit_for_bit(a, recorded[a.run][a.index])


def test_seek_far_into_a_long_thinned_past_lands_where_a_lab_that_kept_every_record_is():
    # Thousands of ops: most of the past is thinned to a keyframe every THINNED_EVERY iterations.
    scenario = load_builtin("forgot-zero-grad")
    thinned, whole = Lab(scenario, recent=200), Lab(scenario, recent=10**9)
    iterations = 12 * THINNED_EVERY + 9
    for lab in (thinned, whole):
        lab.run_iterations(iterations)
    tpi = thinned.ticks_per_iteration
    for run in thinned.runs:
        h = thinned.history[run.name]
        assert len(h.recent) < 300 < len(h)
        first_kept = h.recent[0].iteration
        assert [k for k in h.keyframes if k < first_kept] == list(range(0, first_kept, THINNED_EVERY))
    # The last op of an iteration just before a thinned keyframe: the most replayed to reach.
    target = (7 * THINNED_EVERY) * tpi - 1
    for lab in (thinned, whole):
        lab.seek(target)
    for run in thinned.runs:
        a, b = thinned.history[run.name], whole.history[run.name]
        assert len(a) == len(b) and a.index_at(target) == b.index_at(target) == len(a) - 1
        _assert_bit_for_bit(thinned.record(run.name, len(a) - 1), whole.record(run.name, len(b) - 1))
        for index in (0, len(a) // 3, len(a) - 2):
            _assert_bit_for_bit(thinned.record(run.name, index), whole.record(run.name, index))
    # Stepping on from there repeats in both exactly what the first pass did.
    for _ in range(3 * tpi):
        for a, b in zip(thinned.step(), whole.step(), strict=True):
            _assert_bit_for_bit(a, b)


def test_keyframes_far_back_grow_sparser_and_their_ops_are_still_rebuilt_bit_for_bit():
    from gradviz.engine.record import SPARSE_AFTER, SPARSE_FACTOR

    scenario = load_builtin("forgot-zero-grad")
    thinned, whole = Lab(scenario, recent=400), Lab(scenario, recent=10**9)
    sparse_every = SPARSE_FACTOR * THINNED_EVERY  # a small model's far spacing (its bytes never double it)
    iterations = SPARSE_AFTER + 3 * sparse_every + 11
    for lab in (thinned, whole):
        lab.run_iterations(iterations)
    tpi = thinned.ticks_per_iteration
    for run in thinned.runs:
        h = thinned.history[run.name]
        first_kept = h.recent[0].iteration
        far = first_kept - SPARSE_AFTER
        kept = list(h.keyframes)
        assert [k for k in kept if k < far] == list(range(0, far, sparse_every)), "sparse far back"
        nearer = [k for k in kept if far <= k < first_kept]
        assert nearer == list(range(-(-far // THINNED_EVERY) * THINNED_EVERY, first_kept, THINNED_EVERY))
        # The op farthest from the sparse keyframe before it, and its neighbours.
        farthest = h.index_at((2 * sparse_every) * tpi - 1)
        for index in (farthest - 1, farthest, farthest + 1, h.index_at(far * tpi)):
            _assert_bit_for_bit(thinned.record(run.name, index), whole.record(run.name, index))


def _far_keyframes(lab: Lab, run: str) -> tuple[list[int], int]:
    """The iterations of a run's keyframes in its far past (a lab without full records: before the
    newest keyframe by more than SPARSE_AFTER iterations), and the bytes they keep."""
    from gradviz.engine import record

    h = lab.history[run]
    far = max(h.keyframes) - record.SPARSE_AFTER
    kept = [k for k in h.keyframes if k < far]
    return kept, sum(h.keyframes[k].nbytes for k in kept)


def test_a_large_models_far_keyframes_stay_within_their_bytes_and_every_op_is_still_rebuilt_exactly(
    monkeypatch,
):
    # A lab without full records (a large model's) keeps a packed keyframe every few iterations,
    # some 4 KB an iteration: an hour of Play kept them all. Far back they now thin, their spacing
    # doubling whenever they outgrow their bytes. Scaled down: a small model recorded the large
    # models' way, a near past of 60 iterations, and the far past's bytes of about 12 keyframes.
    from gradviz.engine import record

    scenario = load_builtin("forgot-zero-grad")
    lab = Lab(scenario, record="light", keyframe_every=3)
    one = lab.history[lab.runs[0].name].keyframes[0].packed().nbytes
    monkeypatch.setattr(record, "SPARSE_AFTER", 60)
    monkeypatch.setattr(record, "FAR_KEYFRAME_BYTES", 12 * one)
    whole = Lab(scenario, recent=10**9)
    for iterations in (200, 400, 900):
        for each in (lab, whole):
            each.run_iterations(iterations - each.iteration)
        for run in lab.runs:
            h = lab.history[run.name]
            kept, nbytes = _far_keyframes(lab, run.name)
            assert nbytes <= 12 * one and len(kept) >= 6, (iterations, kept)
            assert all(k % h.sparse_every == 0 for k in kept)
            newest = max(h.keyframes)
            assert [k for k in h.keyframes if k >= newest - 60] == list(range(newest - 60, newest + 1, 3))
    h = lab.history[lab.runs[0].name]
    assert h.sparse_every >= 4 * 8 * 3, "the far spacing doubled (twice) as the past grew"
    tpi = lab.ticks_per_iteration
    for run in lab.runs:
        kept, _ = _far_keyframes(lab, run.name)
        # The op farthest from the far keyframe before it, its neighbours, and the first op.
        farthest = lab.history[run.name].index_at(kept[2] * tpi - 1)
        for index in (0, farthest - 1, farthest, farthest + 1):
            _assert_bit_for_bit(lab.record(run.name, index), whole.record(run.name, index))
    # Back into the far past and on from there: every op as the first time, thinned the same way.
    target = kept[1] * tpi + 5
    for each in (lab, whole):
        each.seek(target)
    for _ in range(2 * tpi):
        for a, b in zip(lab.step(), whole.step(), strict=True):
            _assert_bit_for_bit(a, b)
    for run in lab.runs:
        kept, nbytes = _far_keyframes(lab, run.name)
        assert nbytes <= 12 * one and kept == sorted(kept)
    # Back to the start, the far past is gone, and so is its spacing: Play again keeps as at first.
    for each in (lab, whole):
        each.seek(-1)
        each.run_iterations(200)
    for run in lab.runs:
        assert lab.history[run.name].sparse_every == 8 * 3
        for index in (0, len(lab.history[run.name]) // 3):
            _assert_bit_for_bit(lab.record(run.name, index), whole.record(run.name, index))


def _traced_growth(lab: Lab, chunks: int, iterations: int) -> list[float]:
    """Bytes traced per iteration over each of ``chunks`` runs of ``iterations`` iterations, kept
    (a collection first each time: cycles torch's profiler hooks leave would count while they wait)."""
    tracemalloc.start()
    try:
        out = []
        for _ in range(chunks):
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            lab.run_iterations(iterations)
            gc.collect()
            out.append((tracemalloc.get_traced_memory()[0] - before) / iterations)
        return out
    finally:
        tracemalloc.stop()


def test_memory_per_iteration_stays_bounded_as_iterations_grow():
    scenario = load_builtin("forgot-zero-grad")
    recent = 400  # records per run; thinning drops an eighth of them at a time
    thinned, full = Lab(scenario, recent=recent), Lab(scenario, recent=10**9)
    chunk = 8 * THINNED_EVERY  # iterations: whole keyframe spans and thinning cycles
    for lab in (thinned, full):
        lab.run_iterations(1)
    growth = _traced_growth(thinned, 4, chunk)
    kept = _traced_growth(full, 1, chunk // 2)
    runs = len(scenario.runs)
    # The first chunk fills the recent past; after it, memory grows by the thinned past alone
    # (per op a tick, a loss and two norms, and a share of a keyframe), no faster later than at
    # first, and by a small fraction of what full records cost (themselves some 700 bytes a run).
    steady = growth[1:]
    assert max(steady[1:]) <= 1.15 * steady[0] + 16
    assert max(steady) / runs < 150
    assert max(steady) < 0.2 * kept[0]
    for run in thinned.runs:
        assert len(thinned.history[run.name].recent) <= recent + recent // 8


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_records_of_a_cuda_lab_hold_no_tensor():
    lab = Lab(load_builtin("forgot-zero-grad").with_overrides(device="cuda"))
    lab.run_iterations(8)
    records = [rec for run in lab.runs for rec in lab.history[run.name].records]
    # Somewhere a backward added to an existing .grad, and hooks caught what it delivered.
    assert any(r.fresh is not None and r.fresh is not r.snapshot.grad_copy for r in records)
    keyframes = [lab.history[run.name].keyframes for run in lab.runs]
    assert _tensors_in((records, keyframes, [run.current for run in lab.runs])) == []


def test_copies_that_go_through_torch_keep_no_tensor_alive():
    # The path a GPU tensor, a dtype numpy lacks or a tensor that requires grad takes.
    tensors = [torch.ones(2, dtype=torch.bfloat16), torch.full((2, 2), 3.0, requires_grad=True)]
    values = flat_copy(tensors)
    assert floats(values).tolist() == [1.0, 1.0, 3.0, 3.0, 3.0, 3.0]
    assert _tensors_in(values) == []


def test_a_norm_past_single_precision_is_exact_in_double_and_prints_no_numpy_warning():
    # A run that never clears .grad piles gradients up past float32's squares during a long Play:
    # the norm is redone in double, and nothing is printed to the terminal (pytest shows every
    # warning, so the app's own settings are checked in a process of their own).
    code = (
        "import numpy as np; from gradviz.engine.run import _norm; "
        "print(_norm([np.full(4, 1e30, dtype=np.float32), np.ones(3, dtype=np.float32)]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert float(done.stdout) == pytest.approx(2e30, rel=1e-6)
    assert done.stderr == ""


@pytest.mark.parametrize("recorded", ["light", "full"])
def test_random_steps_and_seeks_over_a_thinned_far_past_rebuild_every_op_as_it_ran(monkeypatch, recorded):
    # Far keyframes thinned and their spacing doubled, truncated by seeks back and made again:
    # any op asked for at any point is the op a lab that kept every record has. Two runs, one of
    # them holding a parameter outside its model; scaled down: a near past of 40 iterations, and
    # the far past's bytes of a few keyframes.
    import random

    from gradviz.engine import record

    scenario = load_builtin("net-vs-optimizer-zero-grad").with_overrides(iterations=5000)
    if recorded == "light":
        lab = Lab(scenario, record="light", keyframe_every=3)
    else:
        lab = Lab(scenario, recent=200)
    one = max(k.packed().nbytes for h in lab.history.runs.values() for k in h.keyframes.values())
    monkeypatch.setattr(record, "SPARSE_AFTER", 40)
    monkeypatch.setattr(record, "FAR_KEYFRAME_BYTES", 6 * one)
    whole = Lab(scenario, recent=10**9)
    rng = random.Random(7)
    doubled = False
    for _ in range(25):
        if rng.random() < 0.7:
            iterations = rng.randrange(1, 120)
            for each in (lab, whole):
                each.run_iterations(iterations)
        else:
            tick = rng.randrange(-1, lab.tick)
            for each in (lab, whole):
                each.seek(tick)
        for run in lab.runs:
            h = lab.history[run.name]
            assert len(h) == len(whole.history[run.name])
            doubled |= h.sparse_every > 8 * h.spacing
            far = [k for k in h.keyframes if 0 < k < h._sparse_to]
            assert sum(h.keyframes[k].nbytes for k in far) <= 6 * one
            for index in rng.sample(range(len(h)), min(3, len(h))):
                _assert_bit_for_bit(lab.record(run.name, index), whole.record(run.name, index))
    assert doubled or recorded == "full", "the far spacing doubled along the way"
