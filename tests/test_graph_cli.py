"""`gradviz graph`: one backward()'s autograd graph as JSON, DOT, SVG or PNG; bad input in one sentence."""

from __future__ import annotations

import json
import shutil

import pytest

from gradviz import cli
from gradviz.engine import builtin_names, load_builtin

HAVE_DOT = shutil.which("dot") is not None


def _run(capsys, *args: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(args))
    except SystemExit as exc:  # argparse's own usage errors leave through SystemExit
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def _check_ids(data: dict) -> None:
    ids = [n["id"] for n in data["nodes"]]
    assert ids == list(range(len(ids))) and ids
    assert data["root"] == 0 and data["nodes"][0]["kind"] == "loss"
    assert all(len(e) == 2 and 0 <= e[0] < len(ids) and 0 <= e[1] < len(ids) for e in data["edges"])
    assert len(set(data["order"])) == len(data["order"]) and set(data["order"]) <= set(ids)
    assert data["order"][0] == 0
    for n in data["nodes"]:
        assert set(n) == {"id", "name", "kind", "param", "shape", "saved"}
        assert (n["kind"] == "parameter") == (n["param"] is not None)
        assert all(s["freed"] for s in n["saved"])  # after a backward without retain_graph


@pytest.mark.parametrize("name", builtin_names())
def test_graph_of_every_builtin_as_json_and_dot(capsys, tmp_path, name):
    out = tmp_path / "g.json"
    code, printed, err = _run(capsys, "graph", name, "-o", str(out))
    assert code == 0, err
    assert printed.strip() == str(out)
    data = json.loads(out.read_text())
    assert data["scenario"] == name and data["run"] == load_builtin(name).runs[0].name
    assert data["iteration"] == 0 and data["backward"] == 1
    _check_ids(data)
    assert any(n["kind"] == "parameter" for n in data["nodes"])
    dot = tmp_path / "g.dot"
    assert _run(capsys, "graph", name, "-o", str(dot))[0] == 0
    text = dot.read_text()
    cuts = [c for c in data["cuts"] if c["node"] is not None]
    assert text.startswith("digraph") and text.count(" -> ") == len(data["edges"]) + len(cuts)
    if HAVE_DOT:
        svg = tmp_path / "g.svg"
        assert _run(capsys, "graph", name, "-o", str(svg))[0] == 0
        assert "<svg" in svg.read_text()


def test_run_iteration_and_backward_choose_the_graph(capsys, tmp_path):
    out = tmp_path / "g.json"
    code, _, err = _run(
        capsys,
        "graph",
        "gan-detach",
        "--run",
        "no-detach",
        "--iteration",
        "3",
        "--backward",
        "2",
        "-o",
        str(out),
    )
    assert code == 0, err
    data = json.loads(out.read_text())
    assert (data["run"], data["iteration"], data["backward"]) == ("no-detach", 3, 2)
    _check_ids(data)
    # The second backward is the generator's: loss_g reaches G's and D's parameters.
    params = {n["param"] for n in data["nodes"] if n["param"]}
    assert {p[0] for p in params} == {"D", "G"}


@pytest.mark.skipif(not HAVE_DOT, reason="Graphviz's dot is not installed")
def test_png(capsys, tmp_path):
    out = tmp_path / "g.png"
    assert _run(capsys, "graph", "standard-loop", "-o", str(out))[0] == 0
    assert out.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["gan-detach", "--run", "nobody"], "has no run 'nobody'; its runs: no-detach, detach, no-grad."),
        (["gan-detach", "--run", "x\x1b[31m"], "'x\\x1b[31m'"),
        (["gan-detach", "--iteration", "20"], "runs iterations 0 to 19"),
        (["gan-detach", "--iteration", "-1"], "found -1"),
        (["gan-detach", "--iteration", "many"], "found 'many'"),
        (
            ["standard-loop", "--backward", "2"],
            "found 2; an iteration of run 'yours' makes 1 backward() call.",
        ),
        (["gan-detach", "--backward", "3"], "makes 2 backward() calls, numbered 1 to 2"),
        (["gan-detach", "--backward", "0"], "found 0"),
        (["no-such-scenario"], "no built-in scenario 'no-such-scenario'"),
    ],
)
def test_bad_choices_are_one_sentence_and_status_2(capsys, tmp_path, args, fragment):
    code, _, err = _run(capsys, "graph", *args, "-o", str(tmp_path / "g.json"))
    assert code == 2
    assert fragment in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "g.json").exists()


@pytest.mark.parametrize(
    ("output", "fragment"),
    [
        ("g.txt", "cannot write .txt; give a file ending in .json, .dot, .svg, .png"),
        ("noext", "cannot write noext"),
        ("/no/such/folder/g.json", "does not exist"),
        ("/proc/g.json", "cannot be written"),
        (".", "is a folder"),
    ],
)
def test_bad_outputs_are_one_sentence_and_status_2(capsys, tmp_path, monkeypatch, output, fragment):
    monkeypatch.chdir(tmp_path)
    if output == ".":
        (tmp_path / "d.json").mkdir()
        output = "d.json"
    code, _, err = _run(capsys, "graph", "standard-loop", "-o", output)
    assert code == 2
    assert fragment in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("suffix", [".svg", ".png"])
def test_without_dot_svg_and_png_name_what_to_install(capsys, tmp_path, monkeypatch, suffix):
    real_which = shutil.which
    monkeypatch.setattr(
        shutil, "which", lambda cmd, *a, **k: None if cmd == "dot" else real_which(cmd, *a, **k)
    )
    out = tmp_path / f"g{suffix}"
    code, _, err = _run(capsys, "graph", "standard-loop", "-o", str(out))
    assert code == 2
    assert "install Graphviz (the Debian package graphviz)" in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_a_run_that_stopped_before_the_backward(capsys, tmp_path):
    # A learning rate far too large: the loss is inf within a few iterations and the run stops.
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'name = "stops"\niterations = 5\n[model]\nkind = "quadratic"\n[optimizer]\nkind = "SGD"\nlr = 1e6\n'
    )
    code, _, err = _run(capsys, "graph", str(bad), "--iteration", "4", "-o", str(tmp_path / "g.json"))
    assert code == 2, err
    assert "stopped before iteration 4" in err and len(err.strip().splitlines()) == 1


def test_the_failing_second_backward_writes_the_freed_graph_and_pytorchs_error(capsys, tmp_path):
    out = tmp_path / "g.json"
    code, printed, err = _run(
        capsys, "graph", "backward-twice", "--run", "no-retain", "--backward", "2", "-o", str(out)
    )
    assert code == 0, err
    assert printed.strip() == str(out)
    assert "Trying to backward through the graph a second time" in err and len(err.strip().splitlines()) == 1
    assert "saved tensors freed" in err
    data = json.loads(out.read_text())
    assert data["error"].startswith("RuntimeError: Trying to backward through the graph a second time")
    assert data["order"] == [] and data["failed"] == 0  # it raised in the loss's own node
    saved = [s for n in data["nodes"] for s in n["saved"]]
    assert saved and all(s["freed"] for s in saved)
    dot = tmp_path / "g.dot"
    assert (
        _run(capsys, "graph", "backward-twice", "--run", "no-retain", "--backward", "2", "-o", str(dot))[0]
        == 0
    )
    assert "backward() raised here" in dot.read_text()


@pytest.mark.parametrize(("run", "how"), [("detach", "detach"), ("no-grad", "no_grad"), ("no-detach", None)])
def test_the_gan_cut_in_json_and_dot(capsys, tmp_path, run, how):
    out = tmp_path / "g.json"
    assert _run(capsys, "graph", "gan-detach", "--run", run, "-o", str(out))[0] == 0
    data = json.loads(out.read_text())
    if how is None:
        assert data["cuts"] == []
        return
    (cut,) = data["cuts"]
    assert (cut["tensor"], cut["how"]) == ("fake", how)
    assert data["nodes"][cut["node"]]["name"] == "AddmmBackward0"
    dot = tmp_path / "g.dot"
    assert _run(capsys, "graph", "gan-detach", "--run", run, "-o", str(dot))[0] == 0
    text = dot.read_text()
    assert ("fake.detach()" if how == "detach" else "made under torch.no_grad()") in text
