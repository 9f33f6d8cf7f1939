"""The unmodified `pxt` CLI of pixeltable 0.7.21 against the emulator, configured only by `emulator env`."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Emulator
from tests.pxt_client import Pxt, ensure_client


@pytest.fixture(scope="session")
def pxt_exe() -> Path:
    return ensure_client()


def emulator_env(e: Emulator) -> dict[str, str]:
    """The exports `emulator env` prints, parsed the way a shell's eval would use them."""
    out = subprocess.run(
        [sys.executable, "-m", "emulator", "env", "--state-dir", str(e.state_dir)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    pairs = dict(re.findall(r"^export (\w+)=(\S+)$", out, re.M))
    assert pairs["PIXELTABLE_SITE_URL"] == e.url and pairs["PIXELTABLE_API_URL"] == e.api
    return pairs


@pytest.fixture
def pxt(pxt_exe: Path, start_emulator, tmp_path: Path) -> Iterator[tuple[Pxt, Emulator]]:
    e: Emulator = start_emulator("--no-watch")  # a running clock: the client compares expiry with its own
    client = Pxt(pxt_exe, tmp_path / "pxt-home", emulator_env(e))
    yield client, e
    client.stop_daemon()


def trials(e: Emulator) -> dict[str, dict]:
    return {t["org"]: t for t in httpx.get(e.url + "/_emulator/trials").json()["trials"]}


def test_pxt_new_creates_a_trial_and_its_key_works_until_it_expires(pxt: tuple[Pxt, Emulator]) -> None:
    run, e = pxt
    r = run("new")
    assert r.returncode == 0, r.stderr + r.stdout
    m = re.search(
        r"Created a free Pixeltable Cloud trial: organization (agent-[0-9a-f]{6}), with database main\.", r.stdout
    )
    assert m, r.stdout
    org = m.group(1)
    assert f"pxt://{org}:main" in r.stdout
    assert re.search(rf"Claim it at {re.escape(e.url)}/claim/tcl_[0-9a-f]+, or it is deleted at ", r.stdout)
    assert f"send the trial's API key to {e.api}." in r.stdout
    assert "warning" not in r.stderr
    assert trials(e)[org]["state"] == "unclaimed"

    again = run("new")
    assert again.returncode == 0 and "already has a Pixeltable Cloud trial" in again.stdout
    assert list(trials(e)) == [org]  # nothing new was created

    who = run("whoami")
    assert who.returncode == 0 and f"Trial pxt://{org}:main on {e.api}" in who.stdout

    e.advance("48h1s")
    assert org not in trials(e)
    rejected = run("whoami")
    assert rejected.returncode != 0
    assert "was rejected: the API key is not valid" in rejected.stdout + rejected.stderr


def test_pxt_new_reports_the_sites_refusal(pxt: tuple[Pxt, Emulator]) -> None:
    run, e = pxt
    httpx.post(e.url + "/_emulator/switches", json={"trials_enabled": False}).raise_for_status()
    r = run("new")
    assert r.returncode != 0
    assert f"{e.url} cannot create a trial right now: trials are not available on this host." in r.stdout + r.stderr
    httpx.post(e.url + "/_emulator/switches", json={"anonymous_registration": False, "trials_enabled": True})
    r = run("new")
    assert r.returncode != 0 and f"Trial databases are not available from {e.url}." in r.stdout + r.stderr
