"""A recording replayed: real scripts watched in a subprocess, their recordings read back as the
window's history (Qt-free), and the command line on recordings good and bad."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gradviz.engine.errors import UserError
from gradviz.watch.replay import NO_SURFACE, is_recording, load_replay, path_surface
from tests.watch import scripts
from tests.watch.test_watch import ROOT, _line, watch

# A forgotten zero_grad that prints what PyTorch computed, to compare the replay with.
PRINTING = (
    scripts.HEADER
    + """\
model = nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

for step in range(6):
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
    print("loss", loss.item())
print("weight", *model.weight.flatten().tolist())
print("momentum", *optimizer.state[model.weight]["momentum_buffer"].flatten().tolist())
"""
)


def recorded(tmp_path: Path, source: str, name: str = "rec.json") -> tuple[Path, subprocess.CompletedProcess]:
    proc = watch(tmp_path, source, "-o", name)
    assert proc.returncode == 0, proc.stderr
    return tmp_path / name, proc


@pytest.fixture(scope="module")
def printing(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    return recorded(tmp_path_factory.mktemp("printing"), PRINTING)


def _printed(proc: subprocess.CompletedProcess, what: str) -> list[list[float]]:
    return [
        [float(v) for v in line.split()[1:]] for line in proc.stdout.splitlines() if line.startswith(what)
    ]


def test_the_replay_holds_every_observed_op_at_the_users_own_lines(printing):
    path, _ = printing
    replay = load_replay(path)
    history = replay.history.runs[replay.run]
    backward, step = _line(PRINTING, "loss.backward()"), _line(PRINTING, "optimizer.step()")
    assert replay.run == "train.py"
    assert list(history.ops) == ["backward", "step"] * 6
    assert list(history.lines) == [backward, step] * 6
    assert replay.info.runs[0].source.splitlines() == PRINTING.splitlines()
    assert replay.position(3) == "op 4 of 12 · after update 2 of 6"


def test_losses_weights_and_momentum_are_the_scripts_own(printing):
    path, proc = printing
    replay = load_replay(path)
    history = replay.history.runs[replay.run]
    losses = [loss for op, loss in zip(history.ops, history.loss, strict=True) if op == "backward"]
    np.testing.assert_allclose(losses, [v[0] for v in _printed(proc, "loss")], rtol=1e-6)
    last = replay.history.record(replay.run, len(history) - 1)
    assert last is not None
    np.testing.assert_allclose(last.params["model.weight"].ravel(), _printed(proc, "weight")[0], rtol=1e-6)
    momentum = last.state["model.weight"]["momentum_buffer"]
    np.testing.assert_allclose(momentum.ravel(), _printed(proc, "momentum")[0], rtol=1e-6)
    assert last.lr == {"SGD #0": 0.01}


def test_a_backward_shows_the_stale_grad_and_what_it_added(printing):
    path, _ = printing
    replay = load_replay(path)
    first_step = replay.history.record(replay.run, 1)
    second = replay.history.record(replay.run, 2)  # the backward that adds to the used .grad
    assert first_step is not None and second is not None
    stale = second.stale_grads
    fresh = second.fresh_grads
    assert stale is not None and fresh is not None
    np.testing.assert_array_equal(stale["model.weight"], first_step.grads["model.weight"])
    np.testing.assert_allclose(
        stale["model.weight"] + fresh["model.weight"], second.grads["model.weight"], rtol=1e-6
    )
    before = replay.history.record(replay.run, 0)
    assert before is not None and before.stale_grads is not None
    assert before.stale_grads["model.weight"] is None, "no .grad before the first backward"


def test_the_finding_is_linked_to_the_backward_that_carried_the_gradient(printing):
    path, _ = printing
    replay = load_replay(path)
    [linked] = replay.findings
    assert linked.finding.line == _line(PRINTING, "loss.backward()")
    assert linked.tick == 2, "the second backward is the first to add to a used .grad"
    assert linked.text.startswith("train.py:")


def test_the_surface_says_why_there_is_none_and_gives_the_paths_plane(printing):
    path, _ = printing
    replay = load_replay(path)
    surface = path_surface(replay)
    assert surface.kind == "pca" and not np.isfinite(surface.Z).any()
    assert surface.note.startswith(NO_SURFACE)
    assert surface.title.startswith("No loss surface for a recording (no model or data in it)")
    assert surface.title.endswith("its path over the principal-components plane")
    assert len(replay.path) == 7, "the start and the parameters after each of the 6 steps"


def test_a_sampled_recording_draws_its_path_over_the_plane_of_the_values_it_holds(several_files):
    replay = load_replay(several_files.recording)
    assert replay.sampled == ("model.2.weight",)
    assert "model.2.weight (32 of 6,400 values)" in replay.info.runs[0].names
    surface = path_surface(replay)
    assert surface.kind == "pca" and not np.isfinite(surface.Z).any()
    assert len(replay.path) == 5, "the start and the parameters after each of the 4 steps"
    recorded_values = 6_801 - 6_400 + 32
    assert replay.path[0].size == recorded_values
    assert surface.note.startswith(NO_SURFACE)
    assert f"the {recorded_values:,} values recorded of 6,801 (model.2.weight by a sample" in surface.note
    assert "principal-components" not in surface.title, "the plane is not that of the weights"
    assert surface.title.endswith(
        "nor a path through all its weights: model.2.weight was sampled; "
        f"the path of the {recorded_values:,} values recorded"
    )


def test_an_op_in_another_file_shows_that_file_and_where_the_next_op_runs(several_files):
    replay = load_replay(several_files.recording)
    history = replay.history.runs[replay.run]
    backward = _line(scripts.SEVERAL_FILES, "loss.backward()")
    step = _line(scripts.HELPERS, "optimizer.step()")
    assert replay.run == "train.py" and history.ops[:2] == ["backward", "step"]
    assert list(history.lines[:2]) == [backward, step]
    script, helpers = replay.info.code_at(0), replay.info.code_at(1)
    assert script is replay.info and replay.info.code_at(-1) is replay.info
    assert script.runs[0].source.splitlines() == scripts.SEVERAL_FILES.splitlines()
    assert helpers.runs[0].source.splitlines() == scripts.HELPERS.splitlines()
    assert script.runs[0].file in ("", "train.py") and helpers.runs[0].file == "helpers.py"
    assert "helpers.py: the op at the cursor ran here, called from the script." in helpers.runs[0].note
    # In train.py the step is marked at the line that calls into helpers.py; helpers.py has no line of
    # the backward that follows, so its note says where that runs.
    call = _line(scripts.SEVERAL_FILES, "update(model, optimizer)")
    assert [slot.line for (slot,) in replay.info.schedule[:3]] == [backward, call, 0]
    assert helpers.runs[0].note.endswith(f"The next op, backward(), runs at line {backward} of train.py.")
    assert (
        replay.info.code_at(replay.history.last_tick)
        .runs[0]
        .note.endswith("helpers.py: the op at the cursor ran here, called from the script.")
    ), "after the last op nothing runs next"
    [finding] = replay.findings
    assert finding.text == (
        f"train.py:{backward}: warning: backward() added to .grad that still held the gradient used by the "
        f"step at line {step} of helpers.py; nothing cleared it in between (missing optimizer.zero_grad()?)"
    )


def test_another_file_missing_from_the_recording_is_read_now_or_said_to_be_gone(several_files, tmp_path):
    data = json.loads(several_files.recording.read_text())
    [helpers] = [f for f in data["sources"] if f.endswith("helpers.py")]
    del data["sources"][helpers]
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    shown = load_replay(edited).info.code_at(1).runs[0]
    assert shown.source.splitlines() == scripts.HELPERS.splitlines(), "read from the file as it is now"
    assert "as it reads now: the recording holds no copy, so it may have changed since" in shown.note
    data["events"] = [
        dict(ev, file=str(tmp_path / "gone.py")) if ev["file"] == helpers else ev for ev in data["events"]
    ]
    edited.write_text(json.dumps(data))
    shown = load_replay(edited).info.code_at(1).runs[0]
    assert shown.source == ""
    backward = _line(scripts.SEVERAL_FILES, "loss.backward()")
    assert shown.note.endswith(
        "gone.py is neither in the recording nor on this computer: its lines cannot be shown. "
        f"The next op, backward(), runs at line {backward} of train.py."
    )


def test_after_the_last_op_no_line_is_marked_next(printing):
    from gradviz.gui.window_history import Moment

    replay = load_replay(printing[0])
    last = replay.history.last_tick
    step = _line(PRINTING, "optimizer.step()")
    next_slot = Moment(replay.info, replay.history, last - 1).next_slot(replay.run)
    assert next_slot is not None and next_slot.line == step
    assert Moment(replay.info, replay.history, last).next_slot(replay.run) is None, "not the first op's line"


def test_recordings_are_told_apart_from_scenarios(tmp_path, printing):
    path, _ = printing
    assert is_recording(str(path))
    other = tmp_path / "rec.gradviz"
    other.write_bytes(path.read_bytes())
    assert is_recording(str(other)), "by its content, whatever its name"
    toml = tmp_path / "s.toml"
    toml.write_text('name = "x"\n')
    assert not is_recording(str(toml))
    assert not is_recording("forgot-zero-grad")


# ------------------------------------------------------------------ bad input


def _bad_recordings(good: Path, folder: Path) -> dict[str, Path]:
    text = good.read_text()
    data = json.loads(text)
    out = {}
    out["truncated"] = folder / "truncated.json"
    out["truncated"].write_text(text[: len(text) // 2])
    future = dict(data, version=7)
    out["future"] = folder / "future.json"
    out["future"].write_text(json.dumps(future))
    nonsense = json.loads(text)
    nonsense["updates"][0]["params"]["0"]["values"] = [1.0, 2.0, 3.0, 4.0, 5.0]  # a (1, 2) weight
    out["nonsense"] = folder / "nonsense.json"
    out["nonsense"].write_text(json.dumps(nonsense))
    edited = json.loads(text)
    edited["events"][0]["op"] = "explode"
    out["edited"] = folder / "edited.json"
    out["edited"].write_text(json.dumps(edited))
    calls = json.loads(text)
    calls["events"][0]["calls"] = ["train.py", 3]  # a pair, not a list of pairs
    out["calls"] = folder / "calls.json"
    out["calls"].write_text(json.dumps(calls))
    out["huge"] = folder / "huge.json"  # json refuses to read an integer this long
    out["huge"].write_text(text.replace("{", '{"huge": ' + "9" * 5000 + ", ", 1))
    # More than the observer ever writes: each would take minutes or gigabytes to draw.
    many = json.loads(text)
    many["events"] = (many["events"] * 20001)[:20001]
    out["many_events"] = folder / "many_events.json"
    out["many_events"].write_text(json.dumps(many))
    named = json.loads(text)
    named["params"][0]["name"] = "w" * 100_000
    out["long_name"] = folder / "long_name.json"
    out["long_name"].write_text(json.dumps(named))
    lines = json.loads(text)
    lines["sources"] = {"train.py": ["x" * 100_000]}
    out["long_line"] = folder / "long_line.json"
    out["long_line"].write_text(json.dumps(lines))
    out["fifo"] = folder / "fifo.json"  # read, it would wait for a writer forever
    os.mkfifo(out["fifo"])
    return out


EXPECTED = {
    "truncated": "is cut short",
    "future": "from a newer gradviz",
    "nonsense": "do not fit together",
    "edited": "events[0].op should be one of",
    "calls": "events[0].calls should list [file, line] pairs",
    "huge": "more than 4,300 digits",
    "many_events": '"events" has 20,001 ops; a recording gradviz wrote has at most 20,000',
    "long_name": "params[0].name has 100,000 characters; a recording gradviz wrote has at most 200",
    "long_line": "a line of sources['train.py'] has 100,000 characters",
    "fifo": "is a FIFO (named pipe), not a recording",
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_a_bad_recording_is_one_sentence(tmp_path, printing, kind, deadline):
    bad = _bad_recordings(printing[0], tmp_path)[kind]
    with pytest.raises(UserError, match=re.escape(EXPECTED[kind])) as caught:
        load_replay(bad)
    assert "\n" not in str(caught.value)


def _gradviz(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", QT_QPA_PLATFORM="offscreen")
    return subprocess.run(
        [sys.executable, "-m", "gradviz", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


# Each command meets one kind of bad recording in a process of its own, the others through the same
# entry point in this one (a process costs seconds of start-up; what it adds is the exit status).
IN_A_PROCESS = {"snapshot": "truncated", "export": "future", "open": "nonsense"}


@pytest.mark.parametrize("command", sorted(IN_A_PROCESS))
def test_the_command_line_refuses_a_bad_recording_with_status_2(
    tmp_path, printing, command, capsys, monkeypatch, deadline
):
    from gradviz.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    out = {"snapshot": ["-o", "x.png"], "export": ["-o", "x.gif"], "open": []}[command]
    for kind, bad in _bad_recordings(printing[0], tmp_path).items():
        if kind == IN_A_PROCESS[command]:
            proc = _gradviz(tmp_path, command, str(bad), *out)
            status, err = proc.returncode, proc.stderr
        else:
            status, err = main([command, str(bad), *out]), capsys.readouterr().err
        assert status == 2, (kind, err)
        [line] = err.splitlines()
        assert line.startswith("gradviz: ") and EXPECTED[kind] in line, kind
        assert not (tmp_path / "x.png").exists() and not (tmp_path / "x.gif").exists()


def test_snapshot_and_export_draw_a_recording(tmp_path, printing, capsys):
    from PIL import Image

    from gradviz.cli import main

    path, _ = printing
    proc = _gradviz(tmp_path, "snapshot", str(path), "-o", "x.png", "--ops", "3")
    assert proc.returncode == 0, proc.stderr
    assert Image.open(tmp_path / "x.png").size == (1280, 720)
    proc = _gradviz(tmp_path, "export", str(path), "-o", "x.gif", "--size", "1280x720")
    assert proc.returncode == 0, proc.stderr
    with Image.open(tmp_path / "x.gif") as gif:
        assert gif.n_frames == 12, "a frame after each of the 12 observed ops"
    assert main(["export", str(path), "-o", str(tmp_path / "y.gif"), "--lr", "0.1"]) == 2
    assert "a recording replays what its script did" in capsys.readouterr().err


def test_every_grad_of_an_accumulation_loop_is_known_from_the_backwards_ledger(accumulation):
    replay = load_replay(accumulation.recording)
    history = replay.history.runs[replay.run]
    backwards = 0
    for i, op in enumerate(history.ops):
        rec = replay.history.record(replay.run, i)
        assert rec is not None
        for g in rec.grads.values():
            assert g is None or np.isfinite(g).all()
        if op == "backward":
            backwards += 1
            stale, fresh = rec.stale_grads, rec.fresh_grads
            assert stale is not None and fresh is not None
            before = stale["model.weight"]
            total = fresh["model.weight"] if before is None else before + fresh["model.weight"]
            np.testing.assert_allclose(total, rec.grads["model.weight"], rtol=1e-5)
    assert backwards == 16


def test_a_recording_saved_again_is_the_same_file(tmp_path, printing):
    from gradviz.watch import load_recording

    path, _ = printing
    again = load_recording(path).save(tmp_path / "again.json")
    assert json.loads(Path(again).read_text()) == json.loads(path.read_text())
