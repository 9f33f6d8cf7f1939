"""Clients older than the emulator supports (pixeltable < 0.7.18) are told so, in the control plane's error format,
instead of `unknown operation_type` or a field-validation error: with the requests recorded from the real 0.7.10 and
0.6.8 clients, and with the real 0.7.10 `pxt` itself (installed once into a cached virtualenv, as tests/pxt_client.py
does for 0.7.21).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from emulator.cloud.compat import MIN_CLIENT
from tests.agent_flow import new_trial
from tests.conftest import Emulator
from tests.pxt_client import Pxt, install_client
from tests.test_pxt_client import emulator_env

# Recorded from the real clients (their `requests` session sends no version: `User-Agent: python-requests/2.34.2`).
UPDATE_DB_0_7_10 = {
    "operation_type": "update_db",
    "org": "ORG",
    "db": "main",
    "target": {
        "fingerprint": {
            "files": {"pixeltable.toml": "e61d688d12ccf400fed4d49ecaf99d80da93b0626a9f414fe5d341cb419b5302"},
            "python_version": "3.11",
            "system_dependencies": [],
            "pixeltable_version": "0.7.10",
            "uv_options": None,
            "installed_from_project": {},
            "vars": {},
        },
        "pxt_md_version": 56,
        "default_bucket": None,
        "cpu": None,
        "memory_mb": None,
        "disk_gb": None,
        "workers": None,
    },
    "dry_run": True,
    "force_image_build": False,
}
LIST_SECRETS_0_7_10 = {"operation_type": "list_secrets", "org": None, "db": None}
BUCKET_CREDENTIALS_0_6_8 = {
    "operation_type": "get_bucket_credentials",
    "org_slug": "ORG",
    "db_slug": "main",
    "bucket_name": "home",
    "prefix": None,
}
UPGRADE = f"Upgrade to pixeltable >= {MIN_CLIENT}"


async def trial_of(emu: Emulator) -> dict[str, str]:
    async with emu.client() as c:
        return (await new_trial(c, emu))[2]


def _post(e: Emulator, key: str, org: str, body: dict[str, object]) -> httpx.Response:
    sent = json.loads(json.dumps(body).replace('"ORG"', json.dumps(org)))
    return httpx.post(e.api, json=sent, headers={"X-api-key": key}, timeout=30)


@pytest.mark.parametrize(
    ("body", "client", "why"),
    [
        (UPDATE_DB_0_7_10, "pixeltable 0.7.10", "it sent update_db"),
        (LIST_SECRETS_0_7_10, f"pixeltable older than {MIN_CLIENT}", "it sent list_secrets"),
        (BUCKET_CREDENTIALS_0_6_8, f"pixeltable older than {MIN_CLIENT}", "sent db_slug, org_slug"),
    ],
    ids=["0.7.10 update_db", "0.7.10 list_secrets", "0.6.8 get_bucket_credentials"],
)
async def test_an_old_clients_request_is_told_to_upgrade(
    emu: Emulator, body: dict[str, object], client: str, why: str
) -> None:
    trial = await trial_of(emu)
    r = _post(emu, trial["api_key"], trial["org"], body)
    assert r.status_code == 400 and r.headers["content-type"].startswith("text/plain")
    assert r.text.startswith(f"Bad Request : this client ({client}) is older than the emulator supports: ")
    assert why in r.text and UPGRADE in r.text, r.text


async def test_a_supported_clients_request_is_served_as_before(emu: Emulator) -> None:
    trial = await trial_of(emu)
    listed = _post(emu, trial["api_key"], trial["org"], {"operation_type": "list_all_secrets", "org": None, "db": None})
    assert listed.status_code == 200, listed.text
    unknown = _post(emu, trial["api_key"], trial["org"], {"operation_type": "no_such_operation"})
    assert unknown.status_code == 400 and "unknown operation_type" in unknown.text and UPGRADE not in unknown.text


OLD = "0.7.10"


def old_pxt() -> Path:
    """The real `pxt` of pixeltable 0.7.10, installed once (bounded: 30 minutes) into a cached virtualenv."""
    venv = Path(os.environ.get("PXT_OLD_CLIENT_VENV", Path.home() / ".cache" / "pxt-emulator" / f"client-{OLD}"))
    return install_client(venv, f"pixeltable=={OLD}")


def test_the_real_0_7_10_pxt_is_told_to_upgrade(emu: Emulator, tmp_path: Path) -> None:
    trial = asyncio.run(trial_of(emu))
    env = {**emulator_env(emu), "PIXELTABLE_API_KEY": trial["api_key"]}
    pxt = Pxt(old_pxt(), tmp_path / "home", env)
    project = tmp_path / "project"
    project.mkdir()
    try:
        assert pxt("whoami").returncode == 0  # what it shares with a supported client still works
        listed = pxt("secret", "list")
        assert listed.returncode != 0
        assert "older than the emulator supports" in listed.stderr and UPGRADE in listed.stderr, listed.stderr
        init = subprocess.run([str(pxt.exe), "init"], cwd=project, env=pxt.env, capture_output=True, text=True)
        assert init.returncode == 0, init.stderr
        with open(project / "pixeltable.toml", "a") as f:
            f.write(f"\n[[pixeltable.database]]\nname = 'pxt://{trial['org']}:main'\n")
        update = subprocess.run(
            [str(pxt.exe), "db", "update", f"pxt://{trial['org']}:main", "-f"],
            cwd=project,
            env=pxt.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert update.returncode != 0
        assert f"this client (pixeltable {OLD}) is older than the emulator supports" in update.stderr, update.stderr
    finally:
        pxt.stop_daemon()
