"""Hostile input to the `gradviz` command: one line naming what was wrong, exit status 2, no work done.

Each case once ended in a traceback, a hang, unbounded memory or silent success.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gradviz import cli
from gradviz.engine import Lab, ScenarioError, builtin_names, load_builtin, load_scenario_file
from gradviz.engine import memory as memory_module
from gradviz.engine.errors import quoted
from gradviz.engine.memory import estimate, parameter_count
from gradviz.engine.scenario import SEEDS, loads_scenario


def torch_has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


BIG_MLP = '[model]\nkind = "mlp"\nwidths = [4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096]\n'
BIG_MLP += '[data]\nkind = "wave"\n'


def _main(*args: str) -> int:
    try:
        return cli.main(list(args))
    except SystemExit as exc:  # argparse's usage errors
        return int(exc.code or 0)


def refused(capsys, *args: str) -> str:
    """Run the command; check it refused with one line and status 2; return that line."""
    code = _main(*args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "\x1b" not in err
    return lines[0]


def scenario_file(tmp_path: Path, text: str, name: str = "bad.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if an export or a snapshot gets as far as building its lab."""

    def reached(*args, **kwargs):
        raise AssertionError("the command did work before refusing its input")

    import gradviz.gui.controller
    import gradviz.gui.export_frames

    monkeypatch.setattr(gradviz.gui.export_frames, "export_animation", reached)
    monkeypatch.setattr(gradviz.gui.controller, "Controller", reached)


# ------------------------------------------------------------ 1. deep nesting


@pytest.mark.parametrize(
    "text",
    [
        "x = " + "[" * 800 + "]" * 800,
        "x = " + "{a = " * 700 + "1" + "}" * 700,
        "[model]\ninit = { weight = " + "[" * 950 + "1" + "]" * 950 + " }",
    ],
)
def test_deeply_nested_values_are_refused_naming_the_file(capsys, tmp_path, text):
    path = scenario_file(tmp_path, text + "\n")
    err = refused(capsys, "check", path)
    assert err.startswith(f"gradviz: {path}: values are nested too deeply")


def test_init_lists_nested_past_a_parameters_axes_are_refused(tmp_path):
    with pytest.raises(
        ScenarioError, match=r"model\.init\.weight\[0\]\[0\]\[0\]\[0\]: found .*nested at most 4 deep"
    ):
        loads_scenario("[model]\ninit = { weight = [[[[[1.0]]]]] }\n", "f.toml")


# ------------------------------------------------------- 2. FIFOs and devices


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "scenario.toml"
    os.mkfifo(fifo)
    done = subprocess.run(
        [sys.executable, "-m", "gradviz", "check", str(fifo)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert (
        done.stderr
        == f"gradviz: {fifo}: is a FIFO (named pipe), not a scenario file; allowed: a .toml file.\n"
    )


@pytest.mark.parametrize(
    ("command", "name", "message"),
    [
        ("snapshot", "pipe.toml", "pipe.toml: is a FIFO (named pipe), not a scenario file"),
        ("snapshot", "pipe", "pipe: is a FIFO (named pipe), not a scenario file"),  # not sniffed
        ("export", "pipe.json", "pipe.json is a FIFO (named pipe), not a recording"),
        ("open", "pipe.toml", "pipe.toml: is a FIFO (named pipe), not a scenario file"),
        ("open", "pipe.json", "pipe.json is a FIFO (named pipe), not a recording"),
        ("watch", "pipe.py", "pipe.py is a FIFO (named pipe), not a Python file"),
    ],
)
def test_every_command_refuses_a_fifo_without_waiting_for_a_writer(
    capsys, tmp_path, monkeypatch, deadline, command, name, message
):
    monkeypatch.chdir(tmp_path)
    os.mkfifo(name)
    out = {"snapshot": ["-o", "x.png"], "export": ["-o", "x.gif"]}.get(command, [])
    assert refused(capsys, command, name, *out) == f"gradviz: {message}" + (
        "; allowed: a .toml file." if "scenario" in message else "."
    )


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_is_refused_before_reading_it(capsys, device):
    if not Path(device).exists():
        pytest.skip(f"{device} is absent")
    err = refused(capsys, "trace", device)
    assert err == f"gradviz: {device}: is a character device, not a scenario file; allowed: a .toml file."


def test_reading_stops_after_the_size_limit(tmp_path, monkeypatch):
    from gradviz.engine import scenario

    monkeypatch.setattr(scenario, "MAX_FILE_BYTES", 10)
    path = tmp_path / "long.toml"
    path.write_text("# " + "x" * 100)
    reads: list[int] = []
    real_read = os.read

    def read(fd: int, n: int) -> bytes:
        reads.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(scenario.os, "read", read)
    with pytest.raises(ScenarioError, match="larger than 1 MB"):
        load_scenario_file(path)
    assert sum(reads) <= 11


# --------------------------------------------------- 3. floats float32 cannot hold


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[optimizer]\nlr = 1e308\n",
            "optimizer.lr: found 1e+308, which float32 parameters cannot hold; "
            "allowed: a learning rate from 0 to 1e6.",
        ),
        ("[optimizer]\nlr = nan\n", "optimizer.lr: found nan; allowed: a learning rate from 0 to 1e6."),
        ("[optimizer]\nlr = inf\n", "optimizer.lr: found inf; allowed: a learning rate from 0 to 1e6."),
        (
            "[optimizer]\nlr = 1e7\n",
            "optimizer.lr: found 10000000.0; allowed: a learning rate from 0 to 1e6.",
        ),
        (
            "[optimizer]\nmomentum = 1e300\n",
            "optimizer.momentum: found 1e+300, which float32 parameters cannot hold; "
            "allowed: a number from -3.4e38 to 3.4e38.",
        ),
        (
            "[optimizer]\nkind = 'Adam'\nbetas = [0.9, 1e39]\n",
            "optimizer.betas[1]: found 1e+39, which float32 parameters cannot hold",
        ),
        ("[data]\nslope = -1e39\n", "data.slope: found -1e+39, which float32 parameters cannot hold"),
        ("[data]\nx = [1.0, 1e40]\n", "data.x[1]: found 1e+40, which float32 parameters cannot hold"),
        ("[model]\ninit = { weight = 4e38 }\n", "model.init.weight: found 4e+38, which float32"),
        (
            "[optimizer]\nlr = " + "1" * 400 + "\n",
            "optimizer.lr: found a whole number of about 400 digits, which float32",
        ),
    ],
)
def test_floats_must_fit_float32(capsys, tmp_path, text, message):
    path = scenario_file(tmp_path, text)
    assert refused(capsys, "check", path).startswith(f"gradviz: {path}: {message}")


def test_lr_option_out_of_float32(capsys):
    err = refused(capsys, "trace", "standard-loop", "--lr", "1e308")
    assert err == (
        "gradviz trace: argument --lr: found 1e+308, which float32 parameters cannot hold; "
        "allowed: a learning rate from 0 to 1e6; see `gradviz trace --help`."
    )
    assert "found nan" in refused(capsys, "export", "standard-loop", "-o", "x.gif", "--lr", "nan")


def test_a_huge_lr_runs_diverges_and_says_so(capsys):
    code = _main("trace", "standard-loop", "--lr", "1e6")
    out, err = capsys.readouterr()
    assert code == 0
    assert err == "gradviz: run 'yours' diverged at iteration 3 (loss inf); the trace ends there for it.\n"
    objs = [json.loads(line, parse_constant=lambda name: pytest.fail(name)) for line in out.splitlines()]
    assert objs[-1]["runs"]["yours"]["status"] == "diverged"


def test_no_library_warning_reaches_the_terminal():
    done = subprocess.run(
        [sys.executable, "-m", "gradviz", "trace", "standard-loop", "--lr", "1e6", "--iterations", "10"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0
    assert (
        done.stderr
        == "gradviz: run 'yours' diverged at iteration 3 (loss inf); the trace ends there for it.\n"
    )


# ---------------------------------------------------------------- 4. memory


@pytest.fixture
def small_machine(monkeypatch):
    monkeypatch.setattr(memory_module, "available_bytes", lambda: 2_100_000_000)


def test_a_model_too_large_for_the_machine_is_refused_everywhere(capsys, tmp_path, small_machine, no_work):
    path = scenario_file(tmp_path, BIG_MLP)
    expected = (
        f"gradviz: {path}: model.widths: an MLP of 117,485,569 parameters needs about 16.5 GB for 1 run "
        "and its loss surface; this machine has 2.1 GB free, and a scenario may use half of that; "
        "allowed: smaller widths or fewer runs."
    )
    assert refused(capsys, "check", path) == expected
    assert refused(capsys, "trace", path) == expected
    assert refused(capsys, "export", path, "-o", str(tmp_path / "out.gif")) == expected
    assert refused(capsys, "open", path) == expected  # offscreen in the tests: no dialog to wait on


def test_snapshot_refuses_a_model_too_large_for_the_machine(capsys, tmp_path, small_machine):
    path = scenario_file(tmp_path, BIG_MLP)
    err = refused(capsys, "snapshot", path, "-o", str(tmp_path / "out.png"))
    assert err.startswith(f"gradviz: {path}: model.widths: an MLP of 117,485,569 parameters needs about")
    assert not (tmp_path / "out.png").exists()


def test_too_many_data_points_through_wide_layers_name_data_n(tmp_path, small_machine):
    text = (
        "[model]\nkind = 'mlp'\nwidths = [4096]\n[data]\nkind = 'wave'\nn = 1000000\nbatch_size = 1000000\n"
    )
    with pytest.raises(
        ScenarioError, match=r"data\.n: 1,000,000 data points through a model of 16,385 param"
    ):
        loads_scenario(text, "f.toml")


def test_memory_is_not_refused_where_it_cannot_be_read(monkeypatch):
    monkeypatch.setattr(memory_module, "available_bytes", lambda: None)
    loads_scenario(BIG_MLP, "f.toml")


def test_every_builtin_fits_a_small_machine(small_machine):
    for name in builtin_names():
        assert estimate(load_builtin(name)).total < 100_000_000


@pytest.mark.parametrize(
    "text",
    [
        *[
            f"[model]\nkind = 'mlp'\nwidths = [7, 5]\n[data]\nkind = '{kind}'\n"
            for kind in ("wave", "blobs", "line")
        ],
        "[model]\nkind = 'gan'\nhidden = 5\n[data]\nkind = 'gaussian'\n",
        "[model]\nkind = 'linear-offset'\nbias = false\n",
        "[model]\nkind = 'logistic'\n[data]\nkind = 'blobs'\n",
        "[model]\nkind = 'saddle'\n[data]\nkind = 'none'\n",
    ],
)
def test_the_parameter_count_is_the_real_models(text):
    scenario = loads_scenario(text, "f.toml")
    assert parameter_count(scenario.model, scenario.data) == Lab(scenario, record="bare").runs[0].layout.total


def test_the_parameter_count_of_every_builtin():
    for name in builtin_names():
        sc = load_builtin(name)
        assert parameter_count(sc.model, sc.data) == Lab(sc, record="bare").runs[0].layout.total, name


# --------------------------------------------------------- 5. echoed user text


def test_quoted_escapes_shortens_and_quotes():
    assert quoted("momentun") == "'momentun'"
    assert quoted("a\nb") == "'a\\nb'"
    assert quoted("\x1b[2J") == "'\\x1b[2J'"
    assert quoted("\u202eevil") == "'\\u202eevil'"
    assert quoted("it's") == "'it\\'s'"
    assert quoted("日本") == "'日本'"
    assert quoted("x" * 500_000) == "'" + "x" * 60 + "\u2026' (500,000 characters)"
    assert quoted("/tmp/a.toml", bare=True) == "/tmp/a.toml"
    assert quoted("/tmp/a\n.toml", bare=True) == "'/tmp/a\\n.toml'"
    assert quoted(1e308) == "1e+308"
    assert quoted(list(range(1000))) == "[0, 1, 2, 3, 4, 5, ...]"
    assert quoted(2**20_000) == "a whole number of about 6,021 digits"
    assert quoted(-(2**200)) == "-a whole number of about 61 digits"


def test_a_long_unknown_key_is_shortened(capsys, tmp_path):
    path = scenario_file(tmp_path, "a" * 500_000 + " = 1\n")
    err = refused(capsys, "check", path)
    assert f"{path}: 'aaaa" in err and "\u2026' (500,000 characters): unknown key; allowed: data" in err
    assert len(err) < 400


def test_a_key_with_newlines_stays_on_one_line(capsys, tmp_path):
    path = scenario_file(tmp_path, '"a\\nb\\nc\\nd\\ne" = 1\n')
    assert refused(capsys, "check", path).startswith(f"gradviz: {path}: 'a\\nb\\nc\\nd\\ne': unknown key;")


def test_terminal_escapes_are_shown_not_sent(capsys, tmp_path):
    path = scenario_file(tmp_path, '"\\u001b[2J" = 1\n')
    assert "'\\x1b[2J': unknown key" in refused(capsys, "check", path)
    path = scenario_file(tmp_path, '[optimizer]\n"\\u001b]0;x\\u0007" = 2\n')
    assert "optimizer.'\\x1b]0;x\\x07': unknown key" in refused(capsys, "check", path)
    path = scenario_file(tmp_path, '[optimizer]\n"\\u001b[2J" = 2\n')
    assert "optimizer.'\\x1b[2J': unknown key for optimizer 'SGD'" in refused(capsys, "check", path)
    path = scenario_file(tmp_path, '[model]\nkind = "\\u001b[2J"\n')
    assert "model.kind: found '\\x1b[2J'; allowed: one of" in refused(capsys, "check", path)
    path = scenario_file(tmp_path, '[model]\ninit = { "\\u001b[2J" = 1.0 }\n')
    assert "model.init: found '\\x1b[2J'; allowed: parameter names" in refused(capsys, "check", path)


def test_a_path_with_a_newline_is_quoted(capsys, tmp_path):
    err = refused(capsys, "check", str(tmp_path / "a\nb.toml"))
    assert err == f"gradviz: '{tmp_path}/a\\nb.toml': no such file."


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["\x1b[2J"], "invalid choice: '\\x1b[2J' (choose from 'open', "),
        (["list", "\x1b[2J", "x" * 1000], "unrecognized arguments: '\\x1b[2J', 'xxxxxxxx"),
        (["export", "standard-loop", "-o", "x.gif", "--per-frame", "a\nb"], "invalid choice: 'a\\nb'"),
        (["trace", "standard-loop", "--lr", "\x1b[2J"], "argument --lr: found '\\x1b[2J'; allowed:"),
        (["trace", "no\x1bsuch"], "There is no built-in scenario 'no\\x1bsuch'"),
        (["trace", "standard-loop", "--device", "\x1b[2J"], "--device '\\x1b[2J' is not a device"),
        (["export", "standard-loop", "-o", "x.\x1b[2J"], "cannot write '.\\x1b[2J' files"),
        (["export", "standard-loop", "-o", "x.gif", "--views", "su\x1brface"], "unknown view 'su\\x1brface'"),
        (["trace", "a" * 5000], "no built-in scenario 'aaaa"),
        (
            ["trace", "x/" + "a" * 5000 + ".toml"],
            "\u2026' (5,007 characters): cannot be read (File name too long).",
        ),
    ],
)
def test_cli_arguments_are_echoed_quoted(capsys, args, fragment):
    assert fragment in refused(capsys, *args)


# -------------------------------------------------------------------- 6. seeds


def test_one_seed_range_for_files_and_the_command_line(capsys, tmp_path):
    allowed = f"allowed: {SEEDS.allowed()}"
    assert allowed == "allowed: a whole number from 0 to 9,223,372,036,854,775,807"
    for seed in ("99999999999999999999999", "9223372036854775808", "-1"):
        assert f"argument --seed: found {seed}; {allowed};" in refused(
            capsys, "trace", "standard-loop", "--seed", seed
        )
        path = scenario_file(tmp_path, f"seed = {seed}\n")
        assert refused(capsys, "check", path) == f"gradviz: {path}: seed: found {seed}; {allowed}."
    path = scenario_file(tmp_path, "seed = 0x" + "f" * 5000 + "\n")
    assert f"seed: found a whole number of about 6,021 digits; {allowed}." in refused(capsys, "check", path)
    path = scenario_file(tmp_path, "seed = " + "9" * 5000 + "\n")
    assert "a whole number has more than 4,300 digits" in refused(capsys, "check", path)
    code = _main("trace", "standard-loop", "--seed", str(2**63 - 1), "--iterations", "1")
    assert code == 0 and json.loads(capsys.readouterr().out.splitlines()[0])["seed"] == 2**63 - 1


# ------------------------------------------------------- 7. unwritable outputs


def test_outputs_that_cannot_be_written_are_refused_before_any_work(capsys, tmp_path, no_work):
    # /proc takes no new files, for root too (whom permission bits do not stop).
    assert refused(capsys, "export", "standard-loop", "-o", "/proc/x.gif") == (
        "gradviz: The folder /proc cannot be written (it takes no new files); choose another output path."
    )
    assert "The folder /proc cannot be written" in refused(
        capsys, "snapshot", "standard-loop", "-o", "/proc/x.png"
    )
    missing = tmp_path / "missing"
    assert refused(capsys, "export", "standard-loop", "-o", str(missing / "x.gif")) == (
        f"gradviz: The folder {missing} does not exist; create it or choose another output path."
    )
    afile = tmp_path / "afile"
    afile.write_text("")
    assert f"{afile} is a file, not a folder" in refused(
        capsys, "export", "standard-loop", "-o", f"{afile}/x.gif"
    )
    assert f"{afile} is a file, not a folder" in refused(
        capsys, "snapshot", "standard-loop", "-o", f"{afile}/x.png"
    )
    assert f"{tmp_path} is a folder; give a file name" in refused(
        capsys, "snapshot", "standard-loop", "-o", str(tmp_path)
    )
    fifo = tmp_path / "pipe.gif"
    os.mkfifo(fifo)
    assert "is not a plain file" in refused(capsys, "export", "standard-loop", "-o", str(fifo))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".gradviz-check-")]


@pytest.mark.parametrize("name", ["d.gif", "d.mp4", "out.gif/"])
def test_a_folder_named_as_a_gif_or_video_is_refused(capsys, tmp_path, no_work, name):
    if not name.endswith("/"):
        (tmp_path / name).mkdir()
    line = refused(capsys, "export", "standard-loop", "-o", f"{tmp_path}/{name}")
    assert "names a folder (for numbered PNGs) yet ends in ." in line
    assert list(tmp_path.iterdir()) == ([] if name.endswith("/") else [tmp_path / name])


def test_watch_checks_its_output_before_the_script_runs(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text("open('ran', 'w').close()\n")
    os.mkfifo("pipe.json")
    cases = {
        "pipe.json": "pipe.json exists and is not a plain file",
        "/dev/null": "/dev/null exists and is not a plain file",  # as root, once replaced by a file
        "/proc/x.json": "The folder /proc cannot be written (it takes no new files)",
        "": "The output path is empty; give a file name such as recording.json.",
        str(tmp_path): f"{tmp_path} is a folder; give a file name such as {tmp_path / 'recording.json'}.",
        "n" * 300 + ".json": "cannot be used as an output path (File name too long)",
    }
    for output, message in cases.items():
        assert message in refused(capsys, "watch", "-o", output, "train.py"), output
    assert not Path("ran").exists(), "the script ran before its output was refused"
    assert stat.S_ISFIFO(os.stat("pipe.json").st_mode) and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_watch_refuses_a_binary_script_and_shows_a_syntax_error_as_python_does(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("binary.py").write_bytes(bytes(range(256)) * 8)
    assert refused(capsys, "watch", "binary.py") == (
        "gradviz: binary.py is not a Python file (it holds binary data or is larger than 64 MB)."
    )
    Path("syntax.py").write_text("import torch\nprint(1\n")
    assert _main("watch", "syntax.py") == 1  # as `python syntax.py`
    err = capsys.readouterr().err
    assert err.splitlines() == [
        '  File "syntax.py", line 2',
        "    print(1",
        "         ^",
        "SyntaxError: '(' was never closed",
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_refused(capsys, tmp_path, no_work):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        assert "cannot be written (Permission denied)" in refused(
            capsys, "export", "standard-loop", "-o", str(folder / "x.gif")
        )
    finally:
        folder.chmod(0o700)


# ----------------------------------------------------------------- 8. --fps


def test_frame_rates_are_checked_before_any_work(capsys, tmp_path, no_work):
    out = str(tmp_path / "x.gif")
    assert "argument --fps: found 0.001; allowed: frames per second from 0.1 to 60;" in refused(
        capsys, "export", "standard-loop", "-o", out, "--fps", "0.001"
    )
    assert refused(capsys, "export", "standard-loop", "-o", out, "--fps", "55") == (
        "gradviz: --fps: found 55.0; allowed: at most 50 frames per second for a GIF "
        "(browsers slow faster ones down), or an .mp4."
    )
    assert "found inf" in refused(capsys, "export", "standard-loop", "-o", out, "--fps", "inf")
    help_text = cli.build_parser()._subparsers._group_actions[0].choices["export"].format_help()  # type: ignore[union-attr]
    help_text = " ".join(help_text.split())
    assert "frames per second, 0.1 to 60 (default 4; GIF at most 50)" in help_text


# ------------------------------------------------------ 9. every number option


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["snapshot", "standard-loop", "-o", "x.png", "--ops", "-5"],
            "argument --ops: found -5; allowed: a whole number of ops from 0 to 10,000",
        ),
        (
            ["snapshot", "standard-loop", "-o", "x.png", "--ops", "1000000000000"],
            "found 1000000000000; allowed: a whole number of ops from 0 to 10,000",
        ),
        (
            ["trace", "standard-loop", "--iterations", "1000000000000"],
            "found 1000000000000; allowed: a whole number from 1 to 1,000,000",
        ),
        (
            ["export", "standard-loop", "-o", "x.gif", "--iterations", "20000"],
            "found 20000; allowed: a whole number of iterations from 1 to 10,000",
        ),
        (
            ["export", "standard-loop", "-o", "x.gif", "--ops", "0"],
            "found 0; allowed: a whole number of ops from 1 to 100,000",
        ),
        (
            ["export", "standard-loop", "-o", "x.gif", "--from", "-1"],
            "argument --from: found -1; allowed: a whole number from 0 to 100,000",
        ),
        (
            ["export", "standard-loop", "-o", "x.gif", "--to", "1000000000000"],
            "argument --to: found 1000000000000; allowed",
        ),
        (
            ["export", "standard-loop", "-o", "x.gif", "--per-frame", "iteration", "--from", "20000"],
            "--from (with --per-frame iteration): found 20000; "
            "allowed: a whole number of iterations from 0 to 10,000.",
        ),
        (
            ["export", "standard-loop", "-o", "x.gif", "--per-frame", "iteration", "--to", "10001"],
            "--to (with --per-frame iteration): found 10001",
        ),
        (
            ["snapshot", "standard-loop", "-o", "x.png", "--size", "99999999999999999999x2"],
            "argument --size: found '99999999999999999999x2'; allowed: a size from 320x240 to 7680x4320",
        ),
        (["snapshot", "standard-loop", "-o", "x.png", "--size", "big"], "found 'big'; allowed: WIDTHxHEIGHT"),
    ],
)
def test_number_options_have_ranges_checked_before_any_work(
    capsys, tmp_path, monkeypatch, no_work, args, message
):
    monkeypatch.chdir(tmp_path)
    assert message in refused(capsys, *args)


def test_write_snapshot_bounds_its_ops(tmp_path):
    from gradviz.engine.errors import UserError
    from gradviz.gui.snapshot import write_snapshot

    with pytest.raises(
        UserError, match=r"--ops: found -5; allowed: a whole number of ops from 0 to 10,000\."
    ):
        write_snapshot("standard-loop", str(tmp_path / "x.png"), ops=-5, size=(640, 480), presentation=False)


# ------------------------------------------------- 10. a trace's flat history


def test_a_streaming_lab_keeps_only_each_runs_last_op():
    scenario = load_builtin("forgot-zero-grad")
    lab = Lab(scenario, record="stream")
    full = Lab(scenario, record="full")
    streamed = [(r.run, r.index, r.tick, r.op, r.loss) for r in lab.iterate(3)]
    assert streamed == [(r.run, r.index, r.tick, r.op, r.loss) for r in full.iterate(3)]
    for _ in lab.iterate(2000):
        pass
    for run in lab.runs:
        h = lab.history[run.name]
        assert len(h.recent) == 1 and len(h.loss) == 1
        assert len(h) == 2000 * len(run.program.ops)
        assert list(h.keyframes) == [0]
        last = lab.record(run.name, len(h) - 1)
        assert last.index == len(h) - 1 and last.iteration == 1999
    with pytest.raises(ValueError, match="streaming"):
        lab.seek(3)


def test_trace_streams(capsys, monkeypatch):
    import gradviz.engine.lab

    made: list[Lab] = []

    class Recorded(gradviz.engine.lab.Lab):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(gradviz.engine.lab, "Lab", Recorded)
    assert _main("trace", "standard-loop", "--iterations", "300") == 0
    assert len(capsys.readouterr().out.splitlines()) == 1 + 300 * 4 + 1
    (lab,) = made
    assert lab.streaming and len(lab.history["yours"].recent) == 1


# ------------------------------------------------------- 11. open offscreen


def test_open_offscreen_says_why_instead_of_showing_a_dialog(capsys, tmp_path):
    assert os.environ["QT_QPA_PLATFORM"] == "offscreen"
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00junk")
    assert (
        refused(capsys, "open", str(binary))
        == f"gradviz: {binary}: is not UTF-8 text; a scenario is a TOML file."
    )
    assert refused(capsys, "open", "no-such-scenario") == (
        "gradviz: There is no built-in scenario 'no-such-scenario'; `gradviz list` shows them."
    )
    path = scenario_file(tmp_path, "[model]\ninit = { wieght = 1.0 }\n")  # only the built model can tell
    assert "model.init.wieght: no such parameter" in refused(capsys, "open", path)


def test_open_with_a_display_refuses_a_missing_name_before_the_window(capsys, monkeypatch):
    import gradviz.gui.app

    monkeypatch.setattr(gradviz.gui.app, "shows_windows", lambda: True)
    monkeypatch.setattr(gradviz.gui.app, "launch", lambda source: pytest.fail("the window was opened"))
    assert "no built-in scenario 'forgot-zero-gard'" in refused(capsys, "open", "forgot-zero-gard")
    assert "no such file" in refused(capsys, "open", "/no/such/file.toml")


# -------------------------------------------------- beyond: other hostile files


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[data]\nn = 99999999999999999999\n",
            "data.n: found 99999999999999999999; allowed: a number of points",
        ),
        (
            "[data]\nbatch_size = 9223372036854775807\n",
            "data.batch_size: found 9223372036854775807; allowed: 1 to n",
        ),
        ("[loop]\naccumulate = -3\n", "loop.accumulate: found -3; allowed: 1 to 64 micro-batches."),
        (
            "[model]\ninit = { weight = [" + ",".join(["1"] * 300_000) + "] }\n",
            "model.init.weight: found a value that does not fit",
        ),
        (
            'name = "a\\u202eb"\n',
            "name: found 'a\\u202eb'; allowed: 1 to 200 printable characters, on one line.",
        ),
        ('[[runs]]\nname = "' + "r" * 41 + '"\n', "runs[0].name: found 'rrrr"),
        ('title = "two\\nlines"\n', "title: found 'two\\nlines'"),
        ("x = [" + "1," * 10 + "\n", "not valid TOML"),
        (
            "[loop]\norder = []\n",
            "loop.order: found []; allowed: a list of one or more of 'zero_grad', 'forward'",
        ),
        ('name = "a\\u0000b"\n', "name: found 'a\\x00b'; allowed: 1 to 200 printable"),
        # Printed by `gradviz quiz` and `check`: a terminal escape would recolour the terminal.
        ('summary = "a\\u001b[31mb"\n', "summary: found 'a\\x1b[31mb'; allowed: at most 1000 printable"),
        ('[[runs]]\nnote = "two\\nlines"\n', "runs[0].note: found 'two\\nlines'; allowed: at most 300"),
        (
            '[lesson]\npoint = "\\u001b[2J"\n',
            "lesson.point: found '\\x1b[2J'; allowed: one sentence saying what the scenario shows",
        ),
    ],
)
def test_other_hostile_files(capsys, tmp_path, text, message):
    path = scenario_file(tmp_path, text)
    assert refused(capsys, "check", path).startswith(f"gradviz: {path}: {message}")


def test_an_empty_file_is_the_default_scenario_and_unicode_names_are_welcome(capsys, tmp_path):
    assert _main("check", scenario_file(tmp_path, "", "empty.toml")) == 0
    assert "ok: 'empty', model linear, runs: yours." in capsys.readouterr().out
    path = scenario_file(tmp_path, 'name = "ñame 日本"\n[[runs]]\nname = "日本"\n')
    assert _main("check", path) == 0
    assert "ok: 'ñame 日本', model linear, runs: 日本." in capsys.readouterr().out


# ------------------------------------------- 12. closed or full standard streams


@pytest.mark.parametrize(
    ("shell", "message"),
    [
        ("list >&-", "gradviz: cannot write to standard output: the shell closed it."),
        ("list >/dev/full", "gradviz: cannot write to standard output (No space left on device)."),
        (
            "quiz standard-loop <&- >/dev/null",
            "gradviz: cannot read answers from standard input: the shell closed it.",
        ),
    ],
)
def test_a_closed_or_full_standard_stream_is_one_sentence(shell, message):
    if not Path("/dev/full").exists() and "full" in shell:
        pytest.skip("/dev/full is absent")
    done = subprocess.run(
        f"{sys.executable} -m gradviz {shell}", shell=True, capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stderr) == (2, message + "\n")


# ------------------------------------------------------ 13. other options, refused


def test_an_empty_views_list_is_refused(capsys, tmp_path, no_work):
    assert refused(capsys, "export", "standard-loop", "-o", str(tmp_path / "x.gif"), "--views", "") == (
        "gradviz: --views needs at least one of code, surface, grads, timeline, surface3d, graph."
    )


def test_a_lesson_is_refused_where_there_is_none_before_the_window(capsys, tmp_path, monkeypatch):
    import gradviz.gui.app

    monkeypatch.setattr(gradviz.gui.app, "launch", lambda *args: pytest.fail("the window was opened"))
    path = scenario_file(tmp_path, 'name = "plain"\n')
    assert refused(capsys, "open", "--lesson", path) == (
        "gradviz: 'plain' has no lesson stops to open; leave out --lesson "
        "(`gradviz list` shows the scenarios that carry a lesson)."
    )


@pytest.mark.skipif(torch_has_cuda(), reason="this machine has the device")
def test_check_notes_a_device_this_machine_lacks(capsys, tmp_path):
    path = scenario_file(tmp_path, 'device = "cuda"\n')
    assert _main("check", path) == 0
    out, err = capsys.readouterr()
    assert "ok:" in out
    assert err.startswith(f"{path}: note: its device 'cuda' is not on this machine (")


def test_the_path_written_is_printed_with_control_characters_escaped(capsys, tmp_path):
    out = tmp_path / "g\x1b[31m.json"
    assert _main("graph", "standard-loop", "-o", str(out)) == 0
    assert capsys.readouterr().out == f"{tmp_path}/g\\x1b[31m.json\n" and out.exists()


def test_a_watched_script_sees_a_closed_stream_as_plain_python_does(tmp_path):
    script = tmp_path / "streams.py"
    script.write_text(
        "import sys\nassert sys.stdin is None and sys.stdout is None\nprint('ran', file=sys.stderr)\n"
    )
    done = subprocess.run(
        f"{sys.executable} -m gradviz watch {script} <&- >&-",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (0, "ran\n")
