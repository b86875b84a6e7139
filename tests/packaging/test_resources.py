"""Generated code and icons match their sources; desktop files validate and agree with the app."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import gradviz

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"
APP_ID = "io.github.gradviz.Gradviz"


def _build_resources():
    spec = importlib.util.spec_from_file_location("build_resources", PACKAGING / "build_resources.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_files_are_up_to_date_with_ui_and_assets():
    stale = _build_resources().stale()
    assert stale == [], "run `python packaging/build_resources.py`: " + ", ".join(map(str, stale))


def test_generated_code_says_so_at_the_top():
    for path in [
        *(ROOT / "gradviz" / "gui" / "forms").glob("*.py"),
        ROOT / "gradviz" / "gui" / "resources_rc.py",
    ]:
        assert "do not edit, regenerate" in path.read_text().splitlines()[0], path


def test_hicolor_icons_cover_16_to_512():
    for n in (16, 24, 32, 48, 64, 128, 256, 512):
        assert (ROOT / f"assets/icons/hicolor/{n}x{n}/apps/{APP_ID}.png").is_file()
    assert (ROOT / f"assets/icons/hicolor/scalable/apps/{APP_ID}.svg").is_file()


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing: .ci/run installs it")
        pytest.skip(f"{name} is not installed")
    return found


def test_desktop_file_validates_and_names_the_app():
    desktop = PACKAGING / f"{APP_ID}.desktop"
    out = subprocess.run([_tool("desktop-file-validate"), str(desktop)], capture_output=True, text=True)
    assert out.returncode == 0 and not out.stdout.strip(), out.stdout + out.stderr
    text = desktop.read_text()
    assert f"Icon={APP_ID}\n" in text
    assert re.search(r"^Categories=Education;$", text, re.M)  # one main category


def test_metainfo_validates_and_carries_the_version():
    meta = PACKAGING / f"{APP_ID}.metainfo.xml"
    out = subprocess.run(
        [_tool("appstreamcli"), "validate", "--no-net", "--pedantic", str(meta)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    root = ET.parse(meta).getroot()
    assert root.findtext("id") == APP_ID
    assert root.find("launchable").text == f"{APP_ID}.desktop"
    assert root.find("releases/release").get("version") == gradviz.__version__
