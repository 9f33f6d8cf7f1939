"""What the emulator reads at run time besides its code, found through importlib.resources: package data of
`emulator` (the dashboard's stylesheet is `tui`'s, found the same way in tui/app.py), so an installed wheel reads
its own copy and never a source tree.

`emulator/fixtures` and `emulator/examples` are links to the project's top-level `fixtures/` and `examples/`: in a
checkout (an editable install, or `PYTHONPATH` at the clone) they resolve there, and in the wheel their files are the
package's own (pyproject.toml's package-data).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def _packaged(package: str, *parts: str) -> Path:
    # A package installed in a directory (a wheel, an editable install, a checkout): a real path, which the docs
    # watcher, subprocesses and the image build need. Resolved, so a checkout's link gives the top-level folder.
    return Path(str(resources.files(package).joinpath(*parts))).resolve()


FIXTURES = _packaged("emulator", "fixtures")
EXAMPLES = _packaged("emulator", "examples")
DOCS = FIXTURES / "site"
INTEGRATIONS = FIXTURES / "integrations.json"
WORLD = FIXTURES / "world.toml"
TASKS = FIXTURES / "tasks"
DOCKERFILE = _packaged("emulator", "container", "Dockerfile")
TASK_SCHEMA = _packaged("emulator", "eval", "task.schema.json")  # the JSON Schema of task.toml (eval/schema.py)


def task(name: str) -> Path | None:
    """The shipped evaluation task `name` (`create-a-trial`), if there is one."""
    path = TASKS / name
    return path if name and "/" not in name and (path / "task.toml").is_file() else None


def task_names() -> list[str]:
    return sorted(p.name for p in TASKS.iterdir() if (p / "task.toml").is_file())
