"""Harbor reads the shipped evaluation tasks: its own task loader (harbor 0.26.0, which needs Python 3.12 or later,
in a virtualenv of its own) finds in each `task.toml` and `instruction.md` the name, description, time
limit and instruction that `emulator eval` runs, and ignores the `[emulator]` section.

What Harbor would need to *run* one is an environment image and a verifier script (`environment/`, `tests/`): the
emulator as a container is another issue; here it reads them, with its verification off.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from emulator.eval.tasks import load
from tests.pxt_client import install_venv

ROOT = Path(__file__).resolve().parent.parent
TASKS = sorted(t for t in (ROOT / "fixtures" / "tasks").iterdir() if (t / "task.toml").is_file())
REQUIREMENT = "harbor==0.26.0"
VENV = Path.home() / ".cache" / "pxt-emulator" / "harbor-0.26.0"

READ = """
import json, sys
from harbor.models.task.task import Task
out = []
for path in sys.argv[1:]:
    t = Task(path, disable_verification=True)
    out.append({"name": t.name, "description": t.config.task.description, "timeout": t.config.agent.timeout_sec,
                "instruction": t.instruction})
print(json.dumps(out))
"""


def python_3_12() -> str:
    """A Python of 3.12 or later on this machine: on PATH, or one of pyenv's (whose shims run only the selected)."""
    found = [shutil.which(f"python3.{minor}") for minor in (14, 13, 12)]
    found += sorted(map(str, (Path.home() / ".pyenv" / "versions").glob("3.1[2-9]*/bin/python3")), reverse=True)
    for python in filter(None, found):
        probe = [python, "-c", "import sys; assert sys.version_info >= (3, 12)"]
        if subprocess.run(probe, capture_output=True, timeout=60).returncode == 0:
            return python
    raise AssertionError("Harbor needs Python 3.12 or later, and this machine has none")


def harbor_python() -> Path:
    return install_venv(VENV, REQUIREMENT, python_3_12()) / "bin" / "python"


def test_harbor_reads_every_shipped_task_as_emulator_eval_does() -> None:
    read = subprocess.run(
        [str(harbor_python()), "-c", READ, *map(str, TASKS)], capture_output=True, text=True, timeout=300
    )
    assert read.returncode == 0, read.stderr[-3000:]
    seen = json.loads(read.stdout)
    assert len(seen) == len(TASKS) >= 8
    for path, harbor in zip(TASKS, seen, strict=True):
        ours = load(path)
        assert harbor["name"] == ours.name and harbor["name"].startswith("pixeltable/"), path
        assert (harbor["description"], harbor["timeout"]) == (ours.description, ours.timeout), path
        assert harbor["instruction"] == ours.instruction, path
