"""The distribution holds everything the emulator reads at run time: the wheel (built as users' pip builds it, from
the sdist) has every data file of the packages and every file of fixtures/ and examples/, where emulator/shipped.py
finds them. And the shipped Dockerfile, built from the repository root, stops at once naming `emulator image build`.
(scripts/smoke-installed.sh runs the installed wheel itself.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from emulator import shipped
from emulator.container.image import CONTEXT_MARKER

ROOT = Path(__file__).resolve().parent.parent
SKIP = {"__pycache__", ".pytest_cache", ".ruff_cache"}


def files_under(folder: Path) -> set[str]:
    """Every file below `folder` (links followed, as the build follows them), relative to it."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        dirnames[:] = [d for d in dirnames if d not in SKIP]
        out |= {str((Path(dirpath) / f).relative_to(folder)) for f in filenames if not f.endswith(".pyc")}
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The names in the wheel `python -m build` makes (the sdist first, then the wheel from it)."""
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], capture_output=True, text=True, timeout=600
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (path,) = out.glob("*.whl")
    with zipfile.ZipFile(path) as z:
        return set(z.namelist())


def test_the_wheel_holds_every_data_file_the_program_reads(wheel: set[str]) -> None:
    # What emulator/shipped.py and tui/app.py name, as they name it.
    named = [shipped.DOCS / "index.md", shipped.INTEGRATIONS, shipped.WORLD, shipped.DOCKERFILE]
    named += [shipped.EXAMPLES / "eval" / "careful_agent.py", shipped.TASKS / "create-a-trial" / "task.toml"]
    named += [shipped.TASK_SCHEMA]
    packaged = {
        "emulator/fixtures/site/index.md",
        "emulator/fixtures/integrations.json",
        "emulator/fixtures/world.toml",
        "emulator/container/Dockerfile",
        "emulator/examples/eval/careful_agent.py",
        "emulator/fixtures/tasks/create-a-trial/task.toml",
        "emulator/eval/task.schema.json",
        "tui/dashboard.tcss",
        "emulator/core/store/migrations/0001_foundation.sql",
    }
    assert all(p.is_file() for p in named), [p for p in named if not p.is_file()]
    assert packaged <= wheel, sorted(packaged - wheel)


def test_no_file_of_fixtures_examples_or_the_packages_is_missing_from_the_wheel(wheel: set[str]) -> None:
    # The top-level folders, as package data of `emulator` (its links emulator/fixtures, emulator/examples) ...
    expected = {f"emulator/{top}/{f}" for top in ("fixtures", "examples") for f in files_under(ROOT / top)}
    # ... and every file of the packages (code and data): a new data file not in package-data fails here.
    expected |= {f"{package}/{f}" for package in ("emulator", "tui") for f in files_under(ROOT / package)}
    assert len(expected) > 300
    assert sorted(expected - wheel) == []
    # Nothing of the source tree beyond the packages: no tests, no top-level fixtures/ or examples/ packages.
    tops = {name.split("/")[0] for name in wheel if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"emulator", "tui"}


def docker_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not docker_answers(), reason="no Docker engine answers (docker info)")
def test_the_dockerfile_built_from_the_repository_root_stops_at_once_naming_emulator_image_build() -> None:
    started = time.monotonic()
    done = subprocess.run(
        ["docker", "build", "-f", "emulator/container/Dockerfile", "-t", "pxt-emulator-test:root-context", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    took = time.monotonic() - started
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-2000:]
    assert CONTEXT_MARKER in output and "emulator image build" in output, output[-2000:]
    # It stopped on the marker, before pulling a base image or copying the dependencies.
    assert "site/" not in output.split(CONTEXT_MARKER)[-1] and "pull" not in output.lower(), output[-2000:]
    assert took < 120, f"{took:.0f} s"
