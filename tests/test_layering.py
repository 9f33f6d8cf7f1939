"""The layering holds (issue 44 item 5): import-linter's contracts in pyproject.toml are kept, the operator API's
paths stay where they are allowed to be written, and no identity/ or hosted/ module writes a state word into SQL.

`.ci/run` runs `lint-imports` as a gate; this test runs the same contracts so that a local `pytest` catches a break
before CI does.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from enum import StrEnum
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


# --- states: no state word inside SQL text (issue 44 item 4, step 2.3) -----------------------------------------------

_SQL = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b|\b(FROM|WHERE|SET|VALUES)\b")


def _state_words() -> set[str]:
    """Every stored or derived state of identity's rows and of the hosted platform's: the values of the StrEnums of
    identity/states.py and hosted/states.py (the migrations' CHECKs list the same words)."""
    from emulator.hosted import states as hosted_states
    from emulator.identity import states as identity_states

    words: set[str] = set()
    for module in (identity_states, hosted_states):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, StrEnum) and value is not StrEnum:
                words.update(m.value for m in value)
    return words


def _state_words_in_sql(source: str, words: set[str]) -> list[tuple[int, str]]:
    """(line, word) for each state word quoted as an SQL string ('pending') inside a string literal that reads as SQL
    (adjacent literals are one constant to ast; an f-string's constant parts are read too)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _SQL.search(node.value):
            found += [(node.lineno, w) for w in re.findall(r"'([A-Za-z_]+)'", node.value) if w in words]
    return found


def test_no_identity_or_hosted_module_writes_a_state_word_into_sql() -> None:
    """SQL binds `?` to the state's enum member (`WHERE state = ?`, `(AttemptState.PENDING,)`) instead of writing
    `'pending'` into its text: a state's words live in its enum alone."""
    words = _state_words()
    assert {"pending", "claimed", "superseded", "delivered", "redeemed", "AVAILABLE"} <= words
    found: list[str] = []
    for folder in ("emulator/identity", "emulator/hosted"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            found += [f"{rel}:{line} '{w}'" for line, w in _state_words_in_sql(path.read_text(), words)]
    assert found == [], "\n".join(found)


def test_the_state_word_check_bites() -> None:
    words = _state_words()
    source = (
        "a = \"UPDATE claim_attempts SET state = 'superseded' WHERE registration_id = ? \"\n"
        "b = f\"SELECT id FROM registrations WHERE status = 'claimed' AND id = {x}\"\n"
        "c = \"the claim is 'pending'\"  # prose, not SQL\n"
        'd = "UPDATE claim_attempts SET state = ? WHERE id = ?"\n'
    )
    assert _state_words_in_sql(source, words) == [(1, "superseded"), (2, "claimed")]
