"""The layering holds (issue 44 item 5): import-linter's contracts in pyproject.toml are kept, and the operator API's
paths stay where they are allowed to be written.

`.ci/run` runs `lint-imports` as a gate; this test runs the same contracts so that a local `pytest` catches a break
before CI does.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# `/_emulator` path literals in emulator/ and tui/ outside the operator API's table (admin/ops.py) and ADMIN_PREFIX's
# own line (core/operatorpath.py): none (issue 44 item 3, one operator client). The route modules take their paths
# from the table (`@get(ops.STATUS.path)`) and a caller names an op (`ops.STATUS.call()`), never a path.
OPERATOR_PATH_LITERALS_AT_MOST = 0
PATH_HOMES = ("emulator/admin/ops.py", "emulator/core/operatorpath.py")


def test_import_contracts_are_kept() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe, "import-linter is one of the test dependencies (pip install -e '.[test]')"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([exe, "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def test_a_broken_layer_is_caught(tmp_path: Path) -> None:
    """The contracts bite: a copy of the tree in which the domain imports an HTTP origin fails the check."""
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe
    copy = tmp_path / "tree"
    copy.mkdir()
    for name in ("emulator", "tui"):
        shutil.copytree(ROOT / name, copy / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    clock = copy / "emulator" / "hosted" / "states.py"
    clock.write_text(clock.read_text() + "\nimport emulator.site.app  # noqa: E402\n")
    env = {**os.environ, "PYTHONPATH": str(copy)}
    run = subprocess.run([exe, "--no-cache"], cwd=copy, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "emulator.hosted.states -> emulator.site.app" in run.stdout


def _operator_paths(path: Path) -> list[int]:
    """Lines of string literals (f-strings included) that hold an operator API path, not prose."""
    lines: list[int] = []
    tree = ast.parse(path.read_text(), str(path))
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values)
            inside.update(id(v) for v in node.values)
            if "/_emulator" in text and " " not in text.strip():
                lines.append(node.lineno)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in inside
            and "/_emulator" in node.value
            and " " not in node.value.strip()
        ):
            lines.append(node.lineno)
    return lines


def test_operator_paths_only_fall() -> None:
    found: list[str] = []
    for folder in ("emulator", "tui"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in PATH_HOMES:
                continue
            found += [f"{rel}:{line}" for line in _operator_paths(path)]
    assert len(found) <= OPERATOR_PATH_LITERALS_AT_MOST, "\n".join(found)
