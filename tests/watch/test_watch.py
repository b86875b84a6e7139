"""``gradviz watch``: real scripts run unchanged in a subprocess, their zero_grad mistakes found by line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradviz.engine.errors import UserError
from gradviz.watch import FORMAT, VERSION, load_recording
from tests.watch import scripts

ROOT = Path(__file__).resolve().parents[2]


def _line(source: str, text: str) -> int:
    """The line number of the first line of ``source`` that contains ``text``."""
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def watch(
    tmp_path: Path, source: str, *options: str, args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    (tmp_path / "train.py").write_text(source)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "gradviz", "watch", *options, "train.py", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def findings(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("train.py:")]


@pytest.mark.parametrize(
    "source",
    [
        scripts.DOCS,
        scripts.SET_TO_NONE_FALSE,
        scripts.GAN_DETACH,
        scripts.MANUAL_ZEROES,
        scripts.DCGAN,
        scripts.EPOCHS,
        scripts.PARAM_GROUPS,
    ],
    ids=["docs", "set-to-none-false", "gan-detach", "manual-sgd", "dcgan", "epochs", "param-groups"],
)
def test_a_correct_loop_gets_no_finding(tmp_path, source):
    proc = watch(tmp_path, source)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_the_tutorial_gets_no_finding_and_its_own_output_passes_through(tutorial):
    proc = tutorial.proc
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.startswith("loss ")


def test_accumulation_gets_only_the_k_backwards_note(accumulation):
    proc = accumulation.proc
    assert proc.returncode == 0, proc.stderr
    step = _line(scripts.ACCUMULATION, "optimizer.step()")
    backward = _line(scripts.ACCUMULATION, "loss.backward()")
    assert findings(proc) == [
        f"train.py:{step}: info: 4 backward() calls (line {backward}) add into .grad before each step() "
        "here; if the loss is meant as an average over them, divide each loss by 4"
    ]


def test_a_forgotten_zero_grad_is_found_at_the_backward(forgot):
    proc = forgot.proc
    assert proc.returncode == 0, "a warning leaves the script's own exit status"
    backward = _line(scripts.FORGOT, "loss.backward()")
    step = _line(scripts.FORGOT, "optimizer.step()")
    assert findings(proc) == [
        f"train.py:{backward}: warning: backward() added to .grad that still held the gradient used by "
        f"the step at line {step}; nothing cleared it in between (missing optimizer.zero_grad()?)"
    ]


def test_strict_exits_3_on_a_warning_and_steps_limits_the_watch(tmp_path):
    proc = watch(tmp_path, scripts.FORGOT, "--strict", "--steps", "3", "-o", "rec.json")
    assert proc.returncode == 3
    assert len(findings(proc)) == 1
    rec = load_recording(tmp_path / "rec.json")
    assert rec.data["observed_updates"] == 3 and rec.data["stopped"] == "limit"
    assert [ev["op"] for ev in rec.events].count("step") == 3


def test_clearing_between_backward_and_step_learns_nothing(tmp_path):
    proc = watch(tmp_path, scripts.CLEARED_BEFORE_STEP)
    src = scripts.CLEARED_BEFORE_STEP
    zero, backward, step = (_line(src, t) for t in ("zero_grad()", "backward()", "step()"))
    assert findings(proc) == [
        f"train.py:{zero}: warning: zero_grad() cleared the .grad that backward() at line {backward} had "
        f"filled, before step() at line {step} used it; step() sees None: nothing is learned"
    ]


def test_clearing_to_zeros_between_backward_and_step_learns_nothing_either(tmp_path):
    proc = watch(tmp_path, scripts.ZEROED_BEFORE_STEP)
    src = scripts.ZEROED_BEFORE_STEP
    zero, backward, step = (_line(src, t) for t in ("zero_grad(", "backward()", "step()"))
    assert findings(proc) == [
        f"train.py:{zero}: warning: zero_grad() cleared the .grad that backward() at line {backward} had "
        f"filled, before step() at line {step} used it; step() sees zeros: nothing is learned"
    ]


def test_module_zero_grad_misses_a_parameter_outside_the_module(tmp_path):
    proc = watch(tmp_path, scripts.MODULE_ZERO_GRAD)
    src = scripts.MODULE_ZERO_GRAD
    zero, step = _line(src, "model.zero_grad()"), _line(src, "optimizer.step()")
    assert findings(proc) == [
        f"train.py:{zero}: warning: Linear.zero_grad() clears only its module's parameters; offset is "
        f"held by the optimizer stepped at line {step} but lies outside the module, so its .grad carries "
        "over from step to step (call the optimizer's zero_grad())"
    ]


def test_a_gan_without_detach_leaks_the_discriminators_loss_into_the_generator(tmp_path):
    proc = watch(tmp_path, scripts.GAN_NO_DETACH)
    src = scripts.GAN_NO_DETACH
    backward_d, step_d, step_g = (_line(src, t) for t in ("loss_d.backward", "opt_d.step", "opt_g.step"))
    assert findings(proc) == [
        f"train.py:{backward_d}: warning: backward() filled the .grad of parameters of another optimizer "
        f"(G.weight, G.bias), which steps on them at line {step_g} without clearing them first: this "
        f"loss, meant for the step at line {step_d}, leaks into that update (detach() the input the two "
        "losses share?)"
    ]


def test_a_manual_loop_that_never_zeroes(tmp_path):
    proc = watch(tmp_path, scripts.MANUAL_NEVER_ZEROES)
    src = scripts.MANUAL_NEVER_ZEROES
    backward, update = _line(src, "loss.backward()"), _line(src, "W -= lr")
    assert findings(proc) == [
        f"train.py:{backward}: warning: backward() added to .grad that still held the gradient used by "
        f"the update at line {update}; nothing cleared it in between (missing W.grad.zero_() and "
        "b.grad.zero_()?)"
    ]


def test_a_manual_loop_that_zeroes_before_the_update_learns_nothing(tmp_path):
    proc = watch(tmp_path, scripts.MANUAL_ZEROES_FIRST)
    src = scripts.MANUAL_ZEROES_FIRST
    backward, update = _line(src, "loss.backward()"), _line(src, "W -= lr")
    assert findings(proc) == [
        f"train.py:{update}: warning: the update here moved nothing: W.grad and b.grad had been zeroed "
        f"since backward() at line {backward} filled them, so the update used zeros and nothing is "
        "learned (zero .grad after the update, not before)"
    ]


def test_a_grad_that_is_none_raises_with_the_traceback_and_one_gradviz_line(tmp_path):
    proc = watch(tmp_path, scripts.GRAD_IS_NONE)
    assert proc.returncode == 1
    line = _line(scripts.GRAD_IS_NONE, "W -= lr * W.grad")
    err = proc.stderr.splitlines()
    assert err[0] == "Traceback (most recent call last):"
    assert f'  File "train.py", line {line}, in <module>' in err
    assert "TypeError: unsupported operand type(s) for *: 'float' and 'NoneType'" in err
    assert err[-1] == f"train.py:{line}: error: W.grad is None here: nothing has called backward() yet"
    assert "gradviz" not in "\n".join(err[:-1])  # the watch's wrappers are not in the traceback


def test_info_on_parameters_without_gradients_and_zeros_that_move(tmp_path):
    frozen = watch(tmp_path, scripts.FROZEN)
    step = _line(scripts.FROZEN, "optimizer.step()")
    assert findings(frozen) == [
        f"train.py:{step}: info: the optimizer stepped here holds 2 parameters that never received a "
        "gradient in the observed steps (unused.weight, unused.bias)"
    ]
    moved = watch(tmp_path, scripts.ZEROS_MOVED, "--strict")
    assert moved.returncode == 0  # info is no warning
    step = _line(scripts.ZEROS_MOVED, "optimizer.step()")
    assert findings(moved) == [
        f"train.py:{step}: info: step() moved head.weight, head.bias although their .grad were zeros, not "
        "None: momentum or weight decay still acts on them (zero_grad(set_to_none=True) would leave them "
        "alone)"
    ]


def test_arguments_name_and_exit_status_are_the_scripts(tmp_path):
    proc = watch(tmp_path, scripts.ARGS_AND_EXIT, args=("--lr", "3", "--steps", "7"))
    assert proc.returncode == 4, proc.stderr
    assert proc.stdout.splitlines()[-2:] == ["--lr 3 --steps 7", "__main__"]


def test_a_missing_or_non_python_file_is_one_sentence(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for name, what in (("nothere.py", "no such file"), ("data.bin", "is not a Python file")):
        if name == "data.bin":
            (tmp_path / name).write_bytes(b"\x00\x01binary")
        proc = subprocess.run(
            [sys.executable, "-m", "gradviz", "watch", name],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert proc.returncode == 2
        assert proc.stderr.count("\n") == 1 and what in proc.stderr, proc.stderr


def test_the_recording_round_trips(forgot):
    proc = forgot.proc
    assert proc.returncode == 0, proc.stderr
    data = json.loads(forgot.recording.read_text())
    assert data["format"] == FORMAT and data["version"] == VERSION
    rec = load_recording(forgot.recording)
    assert [str(f) for f in rec.findings] == findings(proc)
    assert rec.data["observed_updates"] == 5 and rec.data["stopped"] == "end"
    ops = [ev["op"] for ev in rec.events]
    assert ops[:2] == ["backward", "step"] and ops.count("step") == 5
    assert {p["name"] for p in rec.params} == {"model.weight", "model.bias"}
    assert all(ev["file"] == "train.py" and ev["line"] > 0 for ev in rec.events)
    first = rec.updates[0]["params"]["0"]
    assert len(first["values"]) == 2 and isinstance(first["norm"], float)
    assert rec.sources["train.py"] == scripts.FORGOT.splitlines()


def _rec(tmp_path: Path, text: str) -> str:
    path = tmp_path / "rec.json"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_recording(path)
    message = str(info.value)
    assert "\n" not in message and message.endswith(".")
    return message


def test_a_broken_recording_is_one_sentence(tmp_path, tutorial):
    assert tutorial.proc.returncode == 0
    good = tutorial.recording.read_text()
    assert "cut short" in _rec(tmp_path, good[: len(good) // 2])
    future = json.loads(good) | {"version": 99}
    assert "newer gradviz" in _rec(tmp_path, json.dumps(future))
    assert "not a gradviz recording" in _rec(tmp_path, '{"hello": 1}')
    assert "not a gradviz recording" in _rec(tmp_path, "[1, 2")
    assert "not a gradviz recording" in _rec(tmp_path, "nonsense")
    (tmp_path / "bytes.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(UserError, match="not UTF-8"):
        load_recording(tmp_path / "bytes.json")
    broken = json.loads(good)
    broken["events"][0]["op"] = "explode"
    assert "events[0].op" in _rec(tmp_path, json.dumps(broken))
    broken = json.loads(good)
    broken["updates"][0]["params"] = {"99": {"norm": 1, "grad": 1}}
    assert "unknown parameter" in _rec(tmp_path, json.dumps(broken))
    assert "NaN" in _rec(tmp_path, good.replace('"version":1', '"version":NaN'))


def test_a_grad_that_zero_grad_set_to_none_says_so(tmp_path):
    src = scripts.GRAD_NONE_AFTER_ZERO_GRAD
    proc = watch(tmp_path, src)
    assert proc.returncode == 1
    assert "AttributeError: 'NoneType' object has no attribute 'norm'" in proc.stderr
    line, zero = _line(src, "W.grad.norm()"), _line(src, "optimizer.zero_grad()")
    assert proc.stderr.splitlines()[-1] == (
        f"train.py:{line}: error: W.grad is None here: zero_grad() at line {zero} set it to None "
        "(set_to_none=True is its default)"
    )


def test_what_the_watch_writes_stays_within_what_the_loader_reads(tmp_path):
    # A name and a line longer than the format holds are cut by the observer, never refused after the run.
    name = "w" * 300
    source = (
        f"import torch\n{name} = torch.zeros(2, requires_grad=True)  # {'x' * 1000}\n"
        f"opt = torch.optim.SGD([{name}], lr=0.1)\n"
        f"for _ in range(2):\n    opt.zero_grad()\n    ({name} - 1).pow(2).sum().backward()\n    opt.step()\n"
    )
    proc = watch(tmp_path, source, "-o", "rec.json")
    assert proc.returncode == 0, proc.stderr
    rec = load_recording(tmp_path / "rec.json")
    assert [p["name"] for p in rec.params] == [name[:200]]
    assert max(map(len, rec.sources["train.py"])) == 500


def test_saving_refuses_a_fifo_that_took_the_paths_place_while_the_script_ran(tmp_path, forgot):
    rec = load_recording(forgot.recording)
    fifo = tmp_path / "rec.json"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="exists and is not a plain file"):
        rec.save(fifo)
    assert fifo.is_fifo()
