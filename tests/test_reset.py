"""`emulator reset` and `POST /_emulator/reset`: a running emulator back to an empty state, without a restart.

(The hosted side, with running workloads, is the last step of tests/test_pxt_cloud.py, for both runtimes.)
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable

import httpx

from tests import agent_flow as flow
from tests.conftest import Emulator
from tests.test_media_store import presign

FROZEN = "2030-01-01T00:00:00Z"


def cli(e: Emulator, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "emulator", *args, "--state-dir", str(e.state_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_reset_forgets_everything_a_run_made(start_emulator: Callable[..., Emulator]) -> None:
    e = start_emulator("--no-watch", "--freeze-clock", FROZEN, env={"EMULATOR_ASK_RATE_LIMIT": "2"})
    async with e.client() as c:
        # A run: a registration and its trial, a key, a secret, a media object, an idempotent call, a rate window
        # used up, the clock moved, a switch flipped, a fault armed.
        reg, token, t = await flow.new_trial(c, e)
        key = t["api_key"]
        made = await c.post(e.api, json={"operation_type": "create_key", "name": "extra"}, headers={"X-api-key": key})
        assert made.status_code in (200, 201), made.text
        secret = {"operation_type": "set_secret", "db": "main", "key": "S", "value": "v"}
        assert (await c.post(e.api, json=secret, headers={"X-api-key": key})).status_code == 200
        put = (await presign(c, e, t, "photos/a.png", "put")).json()["url"]
        assert (await c.put(put, content=b"png" * 100)).status_code == 200
        get = (await presign(c, e, t, "photos/a.png", "get")).json()["url"]
        ask = {"query": "what is pixeltable"}
        first = await c.post(e.url + "/ask", json=ask, headers={"Idempotency-Key": "k-1"})
        assert first.status_code == 200
        assert (await c.post(e.url + "/ask", json=ask)).status_code == 200
        assert (await c.post(e.url + "/ask", json=ask)).status_code == 429  # the window of 2 is used up
        e.advance("3h")
        assert e.admin().post("/_emulator/switches", json={"trials_enabled": False}).status_code == 200
        assert e.admin().post("/_emulator/faults", json={"hold": "/ask"}).status_code == 201

        done = cli(e, "reset")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("reset to empty in ") and "2030-01-01T00:00:00" in done.stdout

        admin = e.admin()
        assert admin.get("/_emulator/registrations").json()["registrations"] == []
        assert admin.get("/_emulator/trials").json()["trials"] == []
        assert admin.get("/_emulator/databases").json()["databases"] == []
        assert admin.get("/_emulator/clock").json()["iso"].startswith("2030-01-01T00:00:00")
        assert admin.get("/_emulator/switches").json()["trials_enabled"] is True
        assert admin.get("/_emulator/faults").json() == {"rules": [], "holds": {}, "waiting": []}
        assert [ev["kind"] for ev in e.journal()] == ["emulator.reset"]  # the journal starts again
        # The old credentials are gone with what they named; the object and its bucket too.
        assert (
            await c.post(e.api, json={"operation_type": "list_orgs"}, headers={"X-api-key": key})
        ).status_code == 401
        assert (await flow.create_trial(c, e, token)).status_code == 401
        assert (await c.get(get)).status_code in (403, 404)
        # The rate window and the idempotency record are fresh: the same key is a new call, not a replay.
        again = await c.post(e.url + "/ask", json=ask, headers={"Idempotency-Key": "k-1"})
        assert again.status_code == 200 and "idempotent-replayed" not in {h.lower() for h in again.headers}
        # And the emulator works as new: the same client gets a trial again.
        _, _, t2 = await flow.new_trial(c, e)
        assert t2["org"] != t["org"] or t2["api_key"] != key
        assert reg["id"] not in {r["id"] for r in admin.get("/_emulator/registrations").json()["registrations"]}


async def test_reset_over_http_is_json_only_and_refuses_other_targets(emu: Emulator) -> None:
    async with httpx.AsyncClient(timeout=30) as c:
        refused = await c.post(emu.url + "/_emulator/reset", json={"to": "yesterday"})
        assert refused.status_code == 400 and "to" in refused.text
        form = await c.post(emu.url + "/_emulator/reset", content=b"to=empty", headers={"Content-Type": "text/plain"})
        assert form.status_code == 415  # a web page cannot send it without a preflight
        assert (await c.post(emu.url + "/_emulator/reset", json={})).status_code == 200


async def test_a_reset_between_tests_is_fast(start_emulator: Callable[..., Emulator]) -> None:
    """Not timed here (the benchmark measures it): ten resets in a row, each leaving a working emulator."""
    e = start_emulator("--no-watch")
    async with e.client() as c:
        for _ in range(10):
            await flow.new_trial(c, e)
            r = await asyncio.to_thread(e.admin().post, "/_emulator/reset", json={"to": "empty"})
            assert r.status_code == 200 and r.json()["reset"] is True
        assert e.admin().get("/_emulator/trials").json()["trials"] == []
