"""Scripts watched once for the whole session, shared by every test that reads what the same run
printed, found or recorded (each run is a real subprocess, and they are what the watch tests spend
their time on)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.watch import scripts
from tests.watch.test_watch import watch


@dataclass(frozen=True)
class Watched:
    """One ``gradviz watch -o rec.json`` run of a script in a folder of its own."""

    folder: Path
    proc: subprocess.CompletedProcess

    @property
    def recording(self) -> Path:
        return self.folder / "rec.json"


def _watched(factory: pytest.TempPathFactory, name: str, source: str, *options: str, **files: str) -> Watched:
    folder = factory.mktemp(name)
    for file, text in files.items():
        (folder / f"{file}.py").write_text(text)
    return Watched(folder, watch(folder, source, "-o", "rec.json", *options))


@pytest.fixture(scope="session")
def tutorial(tmp_path_factory: pytest.TempPathFactory) -> Watched:
    return _watched(tmp_path_factory, "tutorial", scripts.TUTORIAL)


@pytest.fixture(scope="session")
def forgot(tmp_path_factory: pytest.TempPathFactory) -> Watched:
    return _watched(tmp_path_factory, "forgot", scripts.FORGOT)


@pytest.fixture(scope="session")
def accumulation(tmp_path_factory: pytest.TempPathFactory) -> Watched:
    return _watched(tmp_path_factory, "accumulation", scripts.ACCUMULATION, "--strict")


@pytest.fixture(scope="session")
def several_files(tmp_path_factory: pytest.TempPathFactory) -> Watched:
    return _watched(tmp_path_factory, "several", scripts.SEVERAL_FILES, helpers=scripts.HELPERS)
