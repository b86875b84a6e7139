"""The `gradviz` command: output a script can rely on, and one sentence with status 2 for bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gradviz import cli
from gradviz.engine import builtin_names


def _strict(line: str) -> dict:
    def refuse(name: str) -> None:
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(line, parse_constant=refuse)


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_every_builtin_with_a_line(capsys):
    code, out, _ = _run(capsys, "list")
    assert code == 0
    lines = out.strip().splitlines()
    assert [line.split()[0] for line in lines] == builtin_names()
    assert "(default)" in next(line for line in lines if line.startswith("forgot-zero-grad"))


def test_trace_writes_strict_json_lines(capsys):
    code, out, err = _run(capsys, "trace", "two-batch-accumulation")
    assert code == 0 and err == ""
    objs = [_strict(line) for line in out.splitlines()]
    header, ops, end = objs[0], objs[1:-1], objs[-1]
    assert header["type"] == "header" and header["scenario"] == "two-batch-accumulation"
    assert header["device"] == "cpu" and header["runs"][0]["name"] == "yours"
    assert "optimizer.zero_grad()" in header["runs"][0]["source"]
    assert [o["op"] for o in ops] == ["zero_grad", "forward", "backward", "forward", "backward", "step"]
    for o in ops:
        for key in (
            "run",
            "index",
            "iteration",
            "op",
            "line",
            "loss",
            "params",
            "grads",
            "state",
            "lr",
            "diverged",
        ):
            assert key in o
    assert ops[0]["loss"] is None and ops[0]["grads"] == {"weight": None}
    assert ops[2]["grads"] == {"weight": [[-16.0]]} and ops[2]["fresh_grads"] == {"weight": [[-16.0]]}
    assert ops[4]["grads"] == {"weight": [[-20.0]]} and ops[4]["fresh_grads"] == {"weight": [[-4.0]]}
    assert "fresh_grads" not in ops[5]
    assert ops[5]["params"]["weight"][0][0] == pytest.approx(1.2)
    assert ops[5]["lr"] == {"optimizer": 0.01}
    assert end == {"type": "end", "runs": {"yours": {"status": "finished", "error": None, "loss": 2.0}}}


def test_trace_options(capsys):
    code, out, _ = _run(capsys, "trace", "standard-loop", "--iterations", "3", "--seed", "5", "--lr", "0.2")
    assert code == 0
    objs = [_strict(line) for line in out.splitlines()]
    assert objs[0]["seed"] == 5 and objs[0]["iterations"] == 3
    ops = objs[1:-1]
    assert len(ops) == 12 and {o["iteration"] for o in ops} == {0, 1, 2}
    assert all(o["lr"] == {"optimizer": 0.2} for o in ops)


def test_divergence_at_a_high_lr_ends_in_a_clean_trace(capsys):
    code, out, err = _run(capsys, "trace", "forgot-zero-grad", "--lr", "5", "--iterations", "200")
    assert code == 0
    # Said once per run in gradviz's words, no library warning.
    assert sorted(err.splitlines()) == [
        "gradviz: run 'reference' diverged at iteration 19 (loss inf); the trace ends there for it.",
        "gradviz: run 'yours' diverged at iteration 20 (loss inf); the trace ends there for it.",
    ]
    objs = [_strict(line) for line in out.splitlines()]
    ops = objs[1:-1]
    assert any(o["loss"] in ("inf", "nan") for o in ops)
    for run in ("yours", "reference"):
        mine = [o for o in ops if o["run"] == run]
        assert mine[-1]["diverged"] is True and not any(o["diverged"] for o in mine[:-1])
    assert objs[-1]["runs"]["yours"]["status"] == "diverged"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["trace", "no-such-scenario"], "no built-in scenario 'no-such-scenario'"),
        (["trace", "standard-loop", "--device", "cuda"], "'cuda' is not available"),
        (["trace", "standard-loop", "--device", "tpu"], "--device 'tpu'"),
        (["trace", "standard-loop", "--lr", "-1"], "found -1.0; allowed: a learning rate from 0 to 1e6"),
        (
            ["trace", "standard-loop", "--iterations", "0"],
            "found 0; allowed: a whole number from 1 to 1,000,000",
        ),
        (["trace", "standard-loop", "--iterations", "many"], "found 'many'; allowed: a whole number"),
        (["check", "/no/such/file.toml"], "no such file"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_is_one_sentence_and_status_2(capsys, args, fragment):
    try:
        code = cli.main(args)
    except SystemExit as exc:  # argparse's own usage errors leave through SystemExit
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert fragment in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_check_accepts_a_good_file_and_rejects_a_bad_one(capsys, tmp_path):
    good = tmp_path / "good.toml"
    good.write_text('[model]\nkind = "quadratic"\ncondition = 20\n[optimizer]\nkind = "Adam"\nlr = 0.1\n')
    code, out, _ = _run(capsys, "check", str(good))
    assert code == 0 and "ok" in out
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\nkind = "quadratic"\nconditon = 20\n')
    code, _, err = _run(capsys, "check", str(bad))
    assert code == 2 and "model.conditon" in err and "Did you mean 'condition'?" in err


def test_internal_errors_exit_1_without_traceback(capsys, monkeypatch):
    def boom(args):
        raise RuntimeError("kaboom")

    monkeypatch.setitem(cli.COMMANDS, "list", boom)
    code, _, err = _run(capsys, "list")
    assert code == 1 and "internal error" in err and "kaboom" in err and "Traceback" not in err


def test_the_installed_command_runs():
    out = subprocess.run(
        [sys.executable, "-m", "gradviz", "trace", "forgot-zero-grad", "--iterations", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert _strict(lines[0])["scenario"] == "forgot-zero-grad"
    assert len(lines) == 1 + 2 * (3 + 4) + 1  # header, two iterations of 3 + 4 ops, end
    version = subprocess.run([sys.executable, "-m", "gradviz", "--version"], capture_output=True, text=True)
    assert version.stdout.startswith("gradviz ")
