"""The wheel holds everything gradviz needs at run time and works from a fresh environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("gradviz_lab-*.whl")
    return built


def test_wheel_contents(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"gradviz"}
    for needed in (
        "gradviz/engine/scenarios/forgot-zero-grad.toml",
        "gradviz/gui/forms/ui_about.py",
        "gradviz/gui/resources_rc.py",
    ):
        assert needed in names
    assert not any("/tests/" in n or n.endswith(".pyc") for n in names)


@pytest.mark.slow
def test_fresh_environment_runs_the_commands(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q"]
    # The CPU build of torch first, as the README's set-up does.
    subprocess.run([*pip, "torch==2.13.0"], check=True, capture_output=True, timeout=900)
    subprocess.run([*pip, str(wheel)], check=True, capture_output=True, timeout=900)
    gradviz = str(env_dir / "bin" / "gradviz")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": ""}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [gradviz, *args], cwd=outside, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        return done

    assert "forgot-zero-grad" in run("list").stdout
    lines = run("trace", "forgot-zero-grad", "--iterations", "3").stdout.splitlines()
    assert json.loads(lines[0])["type"] == "header" and json.loads(lines[-1])["type"] == "end"
    run("snapshot", "forgot-zero-grad", "--ops", "8", "-o", "shot.png")
    assert (outside / "shot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    run("export", "forgot-zero-grad", "--iterations", "2", "--size", "800x600", "-o", "loop.gif")
    assert (outside / "loop.gif").read_bytes()[:6] == b"GIF89a"
