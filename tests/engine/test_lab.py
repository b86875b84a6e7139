"""Lock-step runs, determinism, seek, divergence, replay of large models, and the Qt-free rule."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from gradviz.engine import Lab, OpRecord, load_builtin, loads_scenario
from gradviz.engine.errors import DeviceError
from gradviz.engine.record import PackedSnapshot
from gradviz.engine.run import Run
from gradviz.engine.scenario import builtin_names

from .helpers import DIVERGING, MLP, builtin_lab


def _same(a: OpRecord, b: OpRecord) -> None:
    assert (a.run, a.index, a.tick, a.op, a.iteration, a.micro) == (
        b.run,
        b.index,
        b.tick,
        b.op,
        b.iteration,
        b.micro,
    )
    assert a.loss == b.loss or (a.loss != a.loss and b.loss != b.loss)
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])
        if a.grads[k] is None or b.grads[k] is None:
            assert a.grads[k] is None and b.grads[k] is None
        else:
            np.testing.assert_array_equal(a.grads[k], b.grads[k])
        assert a.state[k].keys() == b.state[k].keys()
        for key in a.state[k]:
            np.testing.assert_array_equal(a.state[k][key], b.state[k][key])
    # What the inspector reads besides: what a backward added, what .grad held before it.
    for mine, theirs in ((a.fresh_grads, b.fresh_grads), (a.stale_grads, b.stale_grads)):
        assert (mine is None) == (theirs is None)
        for k, value in (mine or {}).items():
            other = theirs[k]  # type: ignore[index]
            assert (value is None) == (other is None)
            if value is not None:
                np.testing.assert_array_equal(value, other)
    assert (a.diverged, a.error, dict(a.lr)) == (b.diverged, b.error, dict(b.lr))


def test_the_same_seed_gives_the_same_history_and_another_seed_another():
    first = list(builtin_lab("forgot-zero-grad").iterate(10))
    second = list(builtin_lab("forgot-zero-grad").iterate(10))
    for a, b in zip(first, second, strict=True):
        _same(a, b)
    other = list(builtin_lab("forgot-zero-grad", seed=7).iterate(10))
    assert any(a.loss != b.loss for a, b in zip(first, other, strict=True))


@pytest.mark.parametrize("name", ["forgot-zero-grad", "grad-accumulation", "gan-detach", "zero-grad-myths"])
def test_seek_back_and_step_on_repeats_exactly(name):
    lab = builtin_lab(name)
    first = list(lab.iterate(8))
    end_tick = lab.tick
    for target in (-1, 5, lab.ticks_per_iteration * 3 - 1, lab.ticks_per_iteration * 4 + 2):
        lab.seek(target)
        assert lab.tick == target + 1
        assert all(r.tick <= target for run in lab.runs for r in lab.history[run.name].records)
        again = []
        while lab.tick < end_tick:
            again += lab.step()
        assert len(again) == len([r for r in first if r.tick > target])
        for a, b in zip([r for r in first if r.tick > target], again, strict=True):
            _same(a, b)


def test_record_at_and_initial_give_every_moment():
    lab = builtin_lab("forgot-zero-grad")
    lab.run_iterations(3)
    assert lab.record_at("reference", -1) is None
    assert lab.initial("yours").params["weight"].item() == -1.0
    rec = lab.record_at("yours", 6)
    assert rec is not None and rec.tick <= 6 and rec.run == "yours"


def test_large_models_keep_keyframes_and_rebuild_any_op_exactly():
    scenario = loads_scenario(MLP, "test")
    light = Lab(scenario)
    assert light.mode == "light"
    light.run_iterations(2)
    assert light.keyframe_every > 1
    light.run_iterations(2 * light.keyframe_every + 1)
    full = Lab(scenario, record="full")
    reference = list(full.iterate(2 * light.keyframe_every + 3))
    h = light.history["yours"]
    assert len(h) == len(reference)
    for index in (0, 5, len(h) // 2, len(h) - 1):
        _same(light.record("yours", index), reference[index])
    np.testing.assert_allclose(h.loss, [np.nan if r.loss is None else r.loss for r in reference])
    # Keyframes, not full records, are what a large model keeps.
    assert len(h.keyframes) == 3


@pytest.mark.parametrize("name", ["forgot-zero-grad", "gan-detach", "net-vs-optimizer-zero-grad"])
def test_the_parameters_after_every_step_are_the_same_whether_records_were_kept_thinned_or_never_made(name):
    scenario = load_builtin(name)
    kept, thinned = Lab(scenario, recent=10**9), Lab(scenario, recent=40)
    light = Lab(scenario, record="light", keyframe_every=3)
    for lab in (kept, thinned, light):
        lab.run_iterations(30)
    for run in kept.runs:
        want = np.concatenate(list(kept.step_params(run.name)))
        assert len(want) == 30 * [slot.op for slot in run.program.ops].count("step")
        for lab in (thinned, light):  # the past these no longer keep is replayed from the start
            np.testing.assert_array_equal(np.concatenate(list(lab.step_params(run.name, block=7))), want)


@pytest.mark.parametrize("name", builtin_names())
def test_a_light_lab_records_the_ops_it_steps_as_a_full_lab_does(name):
    scenario = load_builtin(name)
    full = Lab(scenario, record="full", recent=10**9)
    light = Lab(scenario, record="light", keyframe_every=2)
    # Ops stepped with records, between runs of ops without (whose state a record must not miss),
    # and after going back.
    for unrecorded, recorded in ((0, 9), (13, 5), (1, 2), (30, 7)):
        for _ in range(unrecorded):
            light.advance()
        made = [rec for _ in range(recorded) for rec in light.step()]
        assert made and all(rec.run in full.history.runs for rec in made)
        while full.tick < light.tick:
            full.advance()
        for rec in made:
            _same(rec, full.record(rec.run, rec.index))
        if unrecorded == 13:
            light.seek(light.tick - 11)
            full.seek(light.tick - 1)


def test_rebuilding_op_after_op_goes_on_from_the_last_rebuild_and_stays_exact():
    scenario = loads_scenario(MLP, "test")
    light, full = Lab(scenario, record="light", keyframe_every=3), Lab(scenario, record="full")
    reference = list(full.iterate(8))
    light.run_iterations(8)
    performed = []
    shadow_execute = Run.execute

    def counting(run, *args):
        performed.append(run)
        return shadow_execute(run, *args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Run, "execute", counting)
        first = light.record("yours", 13)
        before = len(performed)
        for index in range(14, 31):  # on past the keyframe at iteration 6 (op 24)
            _same(light.record("yours", index), reference[index])
        # Each next op cost one op, not a replay from the keyframe.
        assert len(performed) - before == 17
        _same(first, reference[13])
        _same(light.record("yours", 2), reference[2])  # going back replays from the keyframe
        light.seek(20)
        light.run_iterations(2)
        _same(light.record("yours", 21), reference[21])


def test_a_step_that_writes_grad_in_place_is_recorded_as_pytorch_leaves_it():
    # SGD with Nesterov momentum in its multi-tensor form (the default on a GPU) adds the
    # momentum into .grad during step(): the record after backward must keep what backward
    # left, the record after step what step left, though .grad is the same tensor.
    text = """
        [model]
        kind = "linear"
        [data]
        kind = "line"
        [optimizer]
        kind = "SGD"
        lr = 0.05
        momentum = 0.9
        nesterov = true
        """
    scenario = loads_scenario(textwrap.dedent(text), "test")
    lab = Lab(scenario)
    plain = Run(scenario.runs[0], scenario, lab.device)
    for run in (lab.runs[0], plain):
        for group in run.optimizers["optimizer"].param_groups:
            group["foreach"] = True
    lab.runs[0]._grad_writers = lab.runs[0]._ops_writing_grads()
    lab.run_iterations(3)  # records are read only after stepping on
    records = lab.history[lab.runs[0].name].records
    optimizer, (phase,) = plain.optimizers["optimizer"], plain.phases.values()
    for i in range(3):
        optimizer.zero_grad()
        plain.task.loss(phase, plain.task.batch(i), i, plain.loop).backward()
        after_backward = {n: p.grad.clone() for n, p in plain.task.params.items()}
        optimizer.step()
        back, step = records[4 * i + 2], records[4 * i + 3]
        assert (back.op, step.op) == ("backward", "step")
        for name, p in plain.task.params.items():
            np.testing.assert_array_equal(back.grads[name], after_backward[name].numpy())
            np.testing.assert_array_equal(step.grads[name], p.grad.numpy())
        assert not np.array_equal(step.grads["weight"], back.grads["weight"])  # the step wrote .grad


def test_packed_keyframes_come_back_bit_for_bit_in_less_memory():
    lab = Lab(loads_scenario(MLP, "test"), record="full")
    lab.run_iterations(3)
    run = lab.runs[0]
    specials = torch.tensor([np.nan, np.inf, -np.inf, -0.0, 1e-45, 3.4e38])
    with torch.no_grad():
        run.tensors[0].view(-1)[: len(specials)] = specials
    snap = run.capture()
    bits = specials.numpy().view(np.uint32).tolist()
    assert snap.param_flat[: len(specials)].view(np.uint32).tolist() == bits
    packed = PackedSnapshot(snap)
    back = packed.unpack()
    for name in ("param_flat", "grad_flat", "state_flat"):
        assert getattr(back, name).view(np.uint32).tolist() == getattr(snap, name).view(np.uint32).tolist()
    assert (back.grad_present, back.state_keys, back.lr) == (snap.grad_present, snap.state_keys, snap.lr)
    raw = sum(a.nbytes for a in (snap.param_flat, snap.grad_flat, snap.state_flat))
    assert packed.nbytes < 0.9 * raw


def test_divergence_marks_the_run_stops_it_and_lets_the_others_go_on():
    scenario = loads_scenario(DIVERGING, "test")
    lab = Lab(scenario)
    records = list(lab.iterate(200))
    yours = [r for r in records if r.run == "yours"]
    assert lab.run("yours").status == "diverged"
    assert yours[-1].diverged and all(not r.diverged for r in yours[:-1])
    last = yours[-1]
    assert not np.isfinite(last.loss if last.op == "forward" else last.params["weight"]).all()
    assert lab.run("reference").status == "running"
    assert max(r.iteration for r in records if r.run == "reference") == 199
    # Back to a moment after it diverged, and on: it stays stopped at its last op, the other goes on.
    lab.seek(lab.tick - 10)
    assert lab.run("yours").status == "diverged" and len(lab.history["yours"]) == len(yours)
    lab.run_iterations(5)
    assert lab.run("yours").status == "diverged" and len(lab.history["yours"]) == len(yours)
    assert lab.record("yours", len(yours) - 1).diverged
    # Back to before it diverged: it runs again, and diverges at the same op.
    lab.seek(yours[-1].tick - 1)
    assert lab.run("yours").active
    again = [r for r in lab.iterate(200) if r.run == "yours"]
    assert [r.index for r in again] == [yours[-1].index] and again[0].diverged


def test_an_error_in_the_users_loop_stops_that_run_with_pytorchs_message():
    scenario = loads_scenario(
        """
        [model]
        kind = "linear"
        [data]
        kind = "line"
        [optimizer]
        kind = "manual"
        lr = 0.1
        [loop]
        zero_grad = "manual"
        set_to_none = false
        """,
        "test",
    )
    lab = Lab(scenario)
    records = list(lab.iterate(3))
    assert len(records) == 1 and records[0].op == "zero_grad"
    assert lab.run("yours").status == "error"
    assert "NoneType" in records[0].error  # p.grad.zero_() on a None .grad, as in user code


def test_an_absent_device_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(DeviceError, match="not available"):
        Lab(load_builtin("standard-loop").with_overrides(device="cuda"))
    assert Lab(load_builtin("standard-loop").with_overrides(device="auto")).device.type in ("cpu", "mps")


def test_the_engine_imports_and_runs_with_qt_blocked():
    code = textwrap.dedent(
        """
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("PySide6", "pyqtgraph", "shiboken6"):
                    raise ImportError("Qt is blocked in this test: " + name)

        sys.meta_path.insert(0, Block())
        import importlib, pkgutil
        import gradviz.engine
        for module in pkgutil.iter_modules(gradviz.engine.__path__):
            importlib.import_module("gradviz.engine." + module.name)
        from gradviz.engine import Lab, load_builtin
        lab = Lab(load_builtin("forgot-zero-grad"))
        lab.run_iterations(2)
        import gradviz.cli
        import gradviz.export
        assert not any(m.split(".")[0] in ("PySide6", "pyqtgraph") for m in sys.modules)
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
