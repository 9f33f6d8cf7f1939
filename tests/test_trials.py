"""`POST /api/v1/trial-orgs`: the 201 and every error status of the spec, each for its reason."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime

import httpx
import pytest

from tests import agent_flow as flow
from tests.conftest import Emulator


async def test_a_trial_with_everything_the_spec_lists(client: httpx.AsyncClient, emu: Emulator) -> None:
    now = (await client.get("/_emulator/clock")).json()["now"]
    reg, token = await flow.access_token(client, emu)
    r = await flow.create_trial(client, emu, token)
    assert r.status_code == 201 and r.headers["cache-control"] == "no-store"
    trial = r.json()
    assert set(trial) == {"org", "org_id", "db", "api_key", "api_url", "claim_url", "expires_at"}
    assert re.fullmatch(r"agent-[0-9a-f]{6}", trial["org"]) and len(trial["org"]) <= 29
    assert trial["org_id"].startswith("org_") and trial["db"] == "main"
    assert trial["api_url"] == emu.api and trial["claim_url"].startswith(emu.url + "/claim/")
    expires = datetime.fromisoformat(trial["expires_at"])
    assert expires.timestamp() == int(now) + 48 * 3600 and expires.tzinfo == UTC
    orgs = (await flow.list_orgs(client, emu, trial["api_key"])).json()["orgs"]
    assert [(o["org"], o["org_id"], o["default_db"]) for o in orgs] == [(trial["org"], trial["org_id"], "main")]
    listed = {t["org"]: t for t in (await client.get("/_emulator/trials")).json()["trials"]}[trial["org"]]
    assert listed["state"] == "unclaimed" and listed["seconds_left"] == 48 * 3600 and listed["api_keys"] == ["trial"]
    events = [e for e in emu.journal("trial.created") if e["subject"] == trial["org"]]
    assert events and events[0]["data"]["registration"] == reg["id"]


async def test_401_without_a_token_names_the_resource_metadata(client: httpx.AsyncClient, emu: Emulator) -> None:
    r = await flow.create_trial(client, emu, None)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{emu.url}/.well-known/oauth-protected-resource"'
    )
    assert set(r.json()) == {"message"} and "bearer token is required" in r.json()["message"]


@pytest.mark.parametrize("token", ["garbage", "a.b.c"])
async def test_401_for_a_token_that_is_not_one(emu: Emulator, token: str) -> None:
    async with emu.client() as c:
        r = await flow.create_trial(c, emu, token)
    assert r.status_code == 401 and 'error="invalid_token"' in r.headers["www-authenticate"]


async def test_401_for_a_token_of_another_registration_type(emu: Emulator) -> None:
    async with emu.client() as c:
        reg = await flow.register(c, emu, type="service_auth", login_hint="svc@example.org")
        code = await flow.approve(c, emu, "svc@example.org", registration=reg["id"])
        done = await c.post(
            emu.auth + "/agent/identity/claim/complete", json={"claim_token": reg["claim"]["token"], "user_code": code}
        )
        token = (await flow.exchange(c, emu, done.json()["identity"]["assertion"])).json()["access_token"]
        r = await flow.create_trial(c, emu, token)
    assert r.status_code == 401 and "anonymous registrations" in r.json()["message"]


async def test_409_on_a_second_trial_and_403_once_the_trial_is_claimed(emu: Emulator) -> None:
    async with emu.client() as c:
        _, token, trial = await flow.new_trial(c, emu)
        again = await flow.create_trial(c, emu, token)
        assert again.status_code == 409 and "already has a trial" in again.json()["message"]
        page = await c.get(trial["claim_url"])
        assert page.status_code == 200 and trial["org"] in page.text and 'name="email"' in page.text
        claimed = await c.post(trial["claim_url"], data={"email": "boss@example.org"})
        assert claimed.status_code == 200 and "You own" in claimed.text
        r = await flow.create_trial(c, emu, token)
        assert r.status_code == 403 and "claimed" in r.json()["message"]
        # The link worked once: it is spent.
        assert (await c.get(trial["claim_url"])).status_code == 404
        listed = {t["org"]: t for t in (await c.get("/_emulator/trials")).json()["trials"]}[trial["org"]]
        assert listed["state"] == "claimed" and listed["expires_at"] is None


@pytest.mark.parametrize(
    ("switch", "fragment"),
    [("cloud_reachable", "could not be reached"), ("trials_enabled", "not available on this host")],
)
async def test_503_when_the_cloud_is_down_or_trials_are_off(start_emulator, switch: str, fragment: str) -> None:
    e: Emulator = start_emulator("--no-watch")
    async with e.client() as c:
        await c.post(e.url + "/_emulator/switches", json={switch: False})
        _, token = await flow.access_token(c, e)
        r = await flow.create_trial(c, e, token)
        assert r.status_code == 503 and fragment in r.json()["message"]
        await c.post(e.url + "/_emulator/switches", json={switch: True})
        assert (await flow.create_trial(c, e, token)).status_code == 201


async def test_429_when_capacity_is_used_up(start_emulator) -> None:
    e: Emulator = start_emulator("--no-watch", env={"EMULATOR_TRIAL_CAPACITY": "1"})
    async with e.client() as a, e.client() as b:
        await flow.new_trial(a, e)
        _, token = await flow.access_token(b, e)
        r = await flow.create_trial(b, e, token)
        assert r.status_code == 429 and "no trials are available" in r.json()["message"]


async def test_429_when_the_network_holds_ten_unclaimed_trials(emu: Emulator) -> None:
    # Eleven agents on eleven addresses of one /24 network.
    clients = [emu.client(f"127.250.7.{i}") for i in range(10, 21)]
    trials = []
    for c in clients[:10]:
        trials.append((await flow.new_trial(c, emu))[2])
    _, token = await flow.access_token(clients[10], emu)
    r = await flow.create_trial(clients[10], emu, token)
    assert r.status_code == 429 and "10 unclaimed trials" in r.json()["message"]
    # Another network is not affected; claiming one frees a place in this one.
    async with emu.client("127.250.8.10") as other:
        await flow.new_trial(other, emu)
    await clients[0].post("/_emulator/trials/claim", json={"org": trials[0]["org"], "email": "n@example.org"})
    assert (await flow.create_trial(clients[10], emu, token)).status_code == 201
    for c in clients:
        await c.aclose()


async def test_claim_page_refuses_a_non_email(client: httpx.AsyncClient, emu: Emulator) -> None:
    _, _, trial = await flow.new_trial(client, emu)
    r = await client.post(trial["claim_url"], data={"email": "not-an-email"})
    assert r.status_code == 400 and "e-mail" in r.text


async def test_one_registration_gets_one_trial_however_many_ask_at_once(emu: Emulator) -> None:
    """The "already has a trial" check runs in the transaction that creates it: 20 concurrent requests with one
    token give one 201 and nineteen 409s."""
    async with emu.client() as c:
        _, token = await flow.access_token(c, emu)
        answers = await asyncio.gather(*(flow.create_trial(c, emu, token) for _ in range(20)))
    statuses = sorted(r.status_code for r in answers)
    assert statuses == [201] + [409] * 19
