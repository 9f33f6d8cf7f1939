"""`/agent/identity`, the claim ceremony (verification page, user code, completion) and refresh."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests import agent_flow as flow
from tests.conftest import Emulator


async def test_anonymous_registration_has_the_nested_shape(client: httpx.AsyncClient, emu: Emulator) -> None:
    reg = await flow.register(client, emu)
    assert re.fullmatch(r"agent_reg_[0-9A-Z]{26}", reg["id"])
    assert reg["type"] == "anonymous"
    assert set(reg["identity"]) == {"assertion", "expires_at"} and reg["identity"]["assertion"].count(".") == 2
    assert reg["scopes"]["pre_claim"] == ["public:read", "free_tier:read"]
    assert set(reg["scopes"]["pre_claim"]) < set(reg["scopes"]["post_claim"])
    claim = reg["claim"]
    assert claim["token"].startswith("clm_") and claim["url"] == emu.auth + "/agent/identity/claim"
    assert claim["expires_at"].endswith("Z") and "attempt" not in claim
    assert "user_code" not in json.dumps(reg)


async def test_service_auth_gets_an_attempt_and_no_identity(client: httpx.AsyncClient, emu: Emulator) -> None:
    reg = await flow.register(client, emu, type="service_auth", login_hint="Ana@Example.org")
    assert reg["type"] == "service_auth" and "identity" not in reg
    assert reg["scopes"] == {"post_claim": ["public:read", "free_tier:read", "account:read", "account:write"]}
    attempt = reg["claim"]["attempt"]
    assert attempt["verification_uri"].startswith(emu.auth + "/claim?token=att_")
    assert "user_code" not in json.dumps(reg)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"type": "service_auth"}, 400, "invalid_request"),
        ({"type": "service_auth", "login_hint": "ana"}, 400, "invalid_login_hint"),
        ({"type": "service_auth", "login_hint": "  "}, 400, "invalid_login_hint"),
        ({"type": "service_auth", "login_hint": 7}, 400, "invalid_login_hint"),
        ({"type": "robot"}, 400, "invalid_request"),
        ({}, 400, "invalid_request"),
        ({"requested_credential_type": "api_key"}, 400, "invalid_request"),
        ({"type": "identity_assertion", "assertion": "x"}, 400, "issuer_not_enabled"),
        ({"type": "refresh"}, 400, "invalid_request"),
        ({"type": "refresh", "refresh_token": "art_nope"}, 400, "invalid_refresh_token"),
    ],
)
async def test_registration_refusals(emu: Emulator, body: dict, status: int, code: str) -> None:
    async with emu.client() as c:
        r = await c.post(emu.auth + "/agent/identity", json=body)
    assert r.status_code == status
    error = r.json()
    assert error["code"] == error["error"] == code and error["message"]


async def test_body_that_is_not_json_is_invalid_request(client: httpx.AsyncClient, emu: Emulator) -> None:
    r = await client.post(emu.auth + "/agent/identity", content=b"{type:", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["code"] == "invalid_request"


@pytest.mark.parametrize(
    ("switch", "body", "code"),
    [
        ("anonymous_registration", {"type": "anonymous"}, "anonymous_registration_disabled"),
        (
            "service_auth_registration",
            {"type": "service_auth", "login_hint": "a@b.co"},
            "service_auth_registration_disabled",
        ),
    ],
)
async def test_registration_types_can_be_switched_off(start_emulator, switch: str, body: dict, code: str) -> None:
    e: Emulator = start_emulator("--no-watch")
    async with e.client() as c:
        assert (await c.post(e.url + "/_emulator/switches", json={switch: False})).json()[switch] is False
        r = await c.post(e.auth + "/agent/identity", json=body)
        assert r.status_code == 403 and r.json()["code"] == code
        await c.post(e.url + "/_emulator/switches", json={switch: True})
        assert (await c.post(e.auth + "/agent/identity", json=body)).status_code == 200


async def test_switches_also_come_from_settings(start_emulator) -> None:
    e: Emulator = start_emulator("--no-watch", env={"EMULATOR_ANONYMOUS_REGISTRATION": "false"})
    async with e.client() as c:
        r = await c.post(e.auth + "/agent/identity", json={"type": "anonymous"})
        assert r.json()["code"] == "anonymous_registration_disabled"


async def test_registrations_are_rate_limited_with_retry_after(start_emulator) -> None:
    e: Emulator = start_emulator(
        "--no-watch", "--freeze-clock", "2026-05-01T00:00:00Z", env={"EMULATOR_REGISTRATION_RATE_LIMIT": "2"}
    )
    async with e.client() as c:
        for _ in range(2):
            assert (await c.post(e.auth + "/agent/identity", json={"type": "anonymous"})).status_code == 200
        r = await c.post(e.auth + "/agent/identity", json={"type": "anonymous"})
        assert r.status_code == 429 and r.headers["Retry-After"] == "60"
        assert r.json() == {
            "code": "rate_limit_exceeded",
            "error": "rate_limit_exceeded",
            "retry_after": 60,
            "message": "too many registrations from this address; try again in 60 seconds",
        }


# --- the claim ceremony -------------------------------------------------------------------------


async def test_service_auth_claim_through_the_verification_page(client: httpx.AsyncClient, emu: Emulator) -> None:
    reg = await flow.register(client, emu, type="service_auth", login_hint="dev@example.org")
    uri = reg["claim"]["attempt"]["verification_uri"]
    complete = {"claim_token": reg["claim"]["token"], "user_code": "000000"}

    r = await client.post(emu.auth + "/agent/identity/claim/complete", json=complete)
    assert r.status_code == 409 and r.json()["code"] == "claim_not_confirmed"

    page = await client.get(uri)
    assert page.status_code == 200 and 'name="email"' in page.text and "dev@example.org" in page.text
    token = flow.attempt_token(uri)
    wrong = await client.post(emu.auth + "/claim", data={"token": token, "email": "eve@example.org"})
    # the page may break a long e-mail only after its separators (<wbr>), on a phone
    assert wrong.status_code == 403 and "dev@example.org" in wrong.text.replace("<wbr>", "")
    shown = await client.post(
        emu.auth + "/claim", data={"token": token, "email": "DEV@example.org", "decision": "approve"}
    )
    assert shown.status_code == 200
    code = flow.must(re.search(r'<code class="usercode">(\d{6})</code>', shown.text)).group(1)

    bad = await client.post(emu.auth + "/agent/identity/claim/complete", json={**complete, "user_code": "12345"})
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_request"
    other = f"{(int(code) + 1) % 1_000_000:06d}"
    wrong_code = await client.post(emu.auth + "/agent/identity/claim/complete", json={**complete, "user_code": other})
    assert wrong_code.status_code == 401 and wrong_code.json()["code"] == "invalid_user_code"

    done = await client.post(emu.auth + "/agent/identity/claim/complete", json={**complete, "user_code": code})
    assert done.status_code == 200
    claimed = done.json()
    assert claimed["id"] == reg["id"] and claimed["status"] == "claimed"
    assert claimed["identity"]["refresh_token"]["value"].startswith("art_")
    token_answer = await flow.exchange(client, emu, claimed["identity"]["assertion"])
    assert token_answer.json()["scope"] == "public:read free_tier:read account:read account:write"

    again = await client.post(emu.auth + "/agent/identity/claim/complete", json={**complete, "user_code": code})
    assert again.status_code == 409 and again.json()["code"] == "already_claimed"
    regs = {r["id"]: r for r in (await client.get("/_emulator/registrations")).json()["registrations"]}
    assert regs[reg["id"]]["status"] == "claimed" and regs[reg["id"]]["claimed_email"] == "DEV@example.org"


async def test_denied_claim(client: httpx.AsyncClient, emu: Emulator) -> None:
    reg = await flow.register(client, emu, type="service_auth", login_hint="x@example.org")
    r = await client.post("/_emulator/claims/deny", json={"registration": reg["id"], "email": "x@example.org"})
    assert r.json()["approved"] is False and "user_code" not in r.json()
    done = await client.post(
        emu.auth + "/agent/identity/claim/complete", json={"claim_token": reg["claim"]["token"], "user_code": "123456"}
    )
    assert done.status_code == 403 and done.json()["code"] == "claim_denied"


async def test_a_new_attempt_replaces_the_old_link(client: httpx.AsyncClient, emu: Emulator) -> None:
    reg = await flow.register(client, emu, type="service_auth", login_hint="y@example.org")
    old = reg["claim"]["attempt"]["verification_uri"]
    r = await client.post(
        emu.auth + "/agent/identity/claim", json={"type": "service_auth", "claim_token": reg["claim"]["token"]}
    )
    assert r.status_code == 200 and r.json()["id"] == reg["id"]
    new = r.json()["attempt"]["verification_uri"]
    assert new != old
    assert (await client.get(old)).status_code == 410
    assert (await client.get(new)).status_code == 200


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"claim_token": "clm_unknown", "type": "service_auth"}, 401, "invalid_claim_token"),
        ({"claim_token": "clm_unknown"}, 400, "invalid_request"),
        ({"type": "login_hint", "claim_token": "clm_unknown"}, 400, "invalid_request"),
        ({"type": "service_auth", "claim_token": "clm_x", "login_hint": "nope"}, 400, "invalid_login_hint"),
    ],
)
async def test_claim_start_refusals(emu: Emulator, body: dict, status: int, code: str) -> None:
    async with emu.client() as c:
        r = await c.post(emu.auth + "/agent/identity/claim", json=body)
    assert r.status_code == status and r.json()["code"] == code


async def test_user_code_expires_after_ten_minutes(emu: Emulator) -> None:
    async with emu.client() as c:
        reg = await flow.register(c, emu, type="service_auth", login_hint="z@example.org")
        code = await flow.approve(c, emu, "z@example.org", registration=reg["id"])
        emu.advance("10m1s")
        r = await c.post(
            emu.auth + "/agent/identity/claim/complete", json={"claim_token": reg["claim"]["token"], "user_code": code}
        )
        assert r.status_code == 410 and r.json()["code"] == "user_code_expired"


async def test_anonymous_claim_revokes_pre_claim_tokens(emu: Emulator) -> None:
    async with emu.client() as c:
        reg, token = await flow.access_token(c, emu)
        started = await c.post(
            emu.auth + "/agent/identity/claim",
            json={"type": "service_auth", "claim_token": reg["claim"]["token"], "login_hint": "owner@example.org"},
        )
        code = await flow.approve(c, emu, "owner@example.org", claim=started.json()["attempt"]["verification_uri"])
        done = await c.post(
            emu.auth + "/agent/identity/claim/complete", json={"claim_token": reg["claim"]["token"], "user_code": code}
        )
        assert done.status_code == 200
        old = await flow.create_trial(c, emu, token)
        assert old.status_code == 401 and "revoked" in old.json()["message"]
        # The pre-claim assertion is superseded too.
        stale = await flow.exchange(c, emu, reg["identity"]["assertion"])
        assert stale.status_code == 400 and stale.json()["error"] == "invalid_grant"
        fresh = (await flow.exchange(c, emu, done.json()["identity"]["assertion"])).json()["access_token"]
        claimed = await flow.create_trial(c, emu, fresh)
        assert claimed.status_code == 403 and "claimed" in claimed.json()["message"]


async def test_refresh_rotates_and_a_spent_token_is_refused(emu: Emulator) -> None:
    async with emu.client() as c:
        reg = await flow.register(c, emu, type="service_auth", login_hint="r@example.org")
        code = await flow.approve(c, emu, "r@example.org", registration=reg["id"])
        done = await c.post(
            emu.auth + "/agent/identity/claim/complete", json={"claim_token": reg["claim"]["token"], "user_code": code}
        )
        first = done.json()["identity"]["refresh_token"]["value"]
        r = await c.post(emu.auth + "/agent/identity", json={"type": "refresh", "refresh_token": first})
        assert r.status_code == 200
        body = r.json()
        assert body["id"] == reg["id"] and body["type"] == "refresh"
        second = body["identity"]["refresh_token"]["value"]
        assert second != first
        assert (await flow.exchange(c, emu, body["identity"]["assertion"])).status_code == 200
        spent = await c.post(emu.auth + "/agent/identity", json={"type": "refresh", "refresh_token": first})
        assert spent.status_code == 400 and spent.json()["code"] == "invalid_refresh_token"


async def test_secrets_are_stored_hashed(emu: Emulator) -> None:
    import sqlite3

    async with emu.client() as c:
        reg = await flow.register(c, emu, type="service_auth", login_hint="h@example.org")
        code = await flow.approve(c, emu, "h@example.org", registration=reg["id"])
        _, _, trial = await flow.new_trial(c, emu)
    db = sqlite3.connect(emu.state_dir / "emulator.sqlite3")
    dump = "\n".join(db.iterdump())
    for secret in (
        reg["claim"]["token"],
        flow.attempt_token(reg["claim"]["attempt"]["verification_uri"]),
        trial["api_key"],
        trial["claim_url"].rsplit("/", 1)[1],
    ):
        assert secret not in dump
    (stored,) = db.execute(
        "SELECT user_code_hash FROM claim_attempts WHERE registration_id = ? AND state = 'confirmed'", (reg["id"],)
    ).fetchone()
    assert re.fullmatch(r"[0-9a-f]{64}", stored) and code not in stored
