"""ID-JAG registration (`type: identity_assertion`): the upstream issuer the emulator plays mints an ID-JAG for a
person, the agent registers with it and gets tokens without a claim, and each bad assertion gets its named error."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from emulator.testkit import Testkit
from tests import agent_flow as flow
from tests.conftest import FROZEN_AT, Emulator

ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"


@pytest.fixture(scope="module")
def jag_emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """An emulator with ID-JAG registration switched on from its settings."""
    e = Emulator(
        tmp_path_factory.mktemp("jag"),
        ["--no-watch", "--freeze-clock", FROZEN_AT, "--identity-assertion-registration"],
    ).start()
    yield e
    e.stop()


@pytest.fixture
async def jc(jag_emu: Emulator) -> AsyncIterator[httpx.AsyncClient]:
    async with jag_emu.client() as c:
        yield c


@pytest.fixture(scope="module")
def kit(jag_emu: Emulator) -> Iterator[Testkit]:
    k = Testkit.attach(jag_emu.url)
    yield k
    k.stop()


_people = iter(range(10_000))


def person() -> str:
    return f"person{next(_people)}-{time.monotonic_ns()}@example.org"


async def present(c: httpx.AsyncClient, e: Emulator, assertion: str, assertion_type: str = ID_JAG) -> httpx.Response:
    body = {"type": "identity_assertion", "assertion_type": assertion_type, "assertion": assertion}
    return await c.post(e.auth + "/agent/identity", json=body)


async def test_discovery_advertises_id_jag_only_when_switched_on(jag_emu: Emulator, emu: Emulator) -> None:
    async with httpx.AsyncClient() as c:
        on = (await c.get(jag_emu.auth + "/.well-known/oauth-authorization-server")).json()["agent_auth"]
        off = (await c.get(emu.auth + "/.well-known/oauth-authorization-server")).json()["agent_auth"]
        site_on = (await c.get(jag_emu.url + "/.well-known/oauth-authorization-server")).json()["agent_auth"]
    assert "identity_assertion" in on["identity_types_supported"]
    assert on["identity_assertion"] == {"assertion_types_supported": [ID_JAG]}
    assert site_on == on
    assert "identity_assertion" not in off["identity_types_supported"] and "identity_assertion" not in off


async def test_switched_off_it_is_issuer_not_enabled(jag_emu: Emulator, kit: Testkit, jc: httpx.AsyncClient) -> None:
    minted = kit.acts.id_jag(person())
    async with jag_emu.client() as c:
        off = await c.post(jag_emu.url + "/_emulator/switches", json={"identity_assertion_registration": False})
        assert off.is_success
        try:
            r = await present(c, jag_emu, minted.id_jag)
            found = (await c.get(jag_emu.auth + "/.well-known/oauth-authorization-server")).json()["agent_auth"]
        finally:
            await c.post(jag_emu.url + "/_emulator/switches", json={"identity_assertion_registration": True})
    assert r.status_code == 400 and r.json()["code"] == "issuer_not_enabled"
    assert "identity_assertion" not in found["identity_types_supported"]
    r = await present(jc, jag_emu, minted.id_jag)  # not spent by the refusal
    assert r.status_code == 200, r.text


async def test_an_id_jag_registers_its_person_s_agent_claimed_with_tokens(
    jag_emu: Emulator, kit: Testkit, jc: httpx.AsyncClient
) -> None:
    email = person()
    minted = kit.acts.id_jag(email)
    # The ID-JAG is what the person's provider would issue: verifiable against the upstream issuer's published keys.
    meta = (await jc.get(jag_emu.auth + "/upstream/.well-known/openid-configuration")).json()
    assert meta["issuer"] == jag_emu.auth + "/upstream" == minted.issuer
    keys = jwt.PyJWKClient(meta["jwks_uri"])
    header = jwt.get_unverified_header(minted.id_jag)
    assert header["typ"] == "oauth-id-jag+jwt"
    claims = jwt.decode(  # its times are the emulator's clock (frozen in the past), not this machine's
        minted.id_jag,
        keys.get_signing_key_from_jwt(minted.id_jag),
        algorithms=["ES256"],
        audience=jag_emu.auth,
        options={"verify_exp": False},
    )
    assert claims["email"] == email and claims["email_verified"] is True and claims["auth_time"] <= claims["iat"]

    r = await present(jc, jag_emu, minted.id_jag)
    assert r.status_code == 200, r.text
    reg = r.json()
    assert reg["type"] == "identity_assertion" and "claim" not in reg
    assert reg["scopes"] == {"post_claim": ["public:read", "free_tier:read", "account:read", "account:write"]}
    assertion = reg["identity"]["assertion"]
    own = jwt.decode(assertion, options={"verify_signature": False})
    assert own["sub"] == reg["id"] and own["email"] == email and own["registration_type"] == "identity_assertion"

    token = await flow.exchange(jc, jag_emu, assertion)
    assert token.status_code == 200, token.text
    assert token.json()["scope"] == "public:read free_tier:read account:read account:write"

    regs = (await jc.get(jag_emu.url + "/_emulator/registrations")).json()["registrations"]
    mine = next(x for x in regs if x["id"] == reg["id"])
    assert mine["type"] == "identity_assertion" and mine["status"] == "claimed" and mine["claimed_email"] == email
    created = [e for e in jag_emu.journal(kinds="agent.registration.created") if e["subject"] == reg["id"]]
    assert len(created) == 1


def _foreign(claims: dict[str, Any], kid: str) -> str:
    """An ID-JAG with the upstream's issuer and key id, signed by a key that is not the upstream's."""
    key = ec.generate_private_key(ec.SECP256R1())
    return jwt.encode(claims, key, algorithm="ES256", headers={"typ": "oauth-id-jag+jwt", "kid": kid})


@pytest.mark.parametrize(
    ("case", "status", "code", "says"),
    [
        ("wrong typ", 400, "invalid_grant", "typ"),
        ("foreign key", 400, "invalid_grant", "signature"),
        ("expired", 400, "invalid_grant", "expired"),
        ("unverified e-mail", 400, "invalid_grant", "verified e-mail"),
        ("another audience", 400, "invalid_grant", "not this provider"),
        ("stale auth_time", 401, "login_required", "signed in 7200 s ago"),
        ("no auth_time", 401, "login_required", "no auth_time"),
        ("untrusted issuer", 400, "issuer_not_enabled", "not trusted"),
        ("wrong assertion_type", 400, "invalid_request", "assertion_type"),
    ],
)
async def test_each_bad_assertion_gets_its_named_error(
    jag_emu: Emulator, kit: Testkit, jc: httpx.AsyncClient, case: str, status: int, code: str, says: str
) -> None:
    email = person()
    assertion_type = ID_JAG
    if case == "wrong typ":
        token = kit.acts.id_jag(email, typ="JWT").id_jag
    elif case == "expired":
        token = kit.acts.id_jag(email, expires_in=-300).id_jag
    elif case == "unverified e-mail":
        token = kit.acts.id_jag(email, email_verified=False).id_jag
    elif case == "another audience":
        token = kit.acts.id_jag(email, audience="https://elsewhere.example").id_jag
    elif case == "stale auth_time":
        token = kit.acts.id_jag(email, auth_age=7200).id_jag
    elif case == "no auth_time":
        token = kit.acts.id_jag(email, auth_time=False).id_jag
    elif case == "wrong assertion_type":
        token, assertion_type = kit.acts.id_jag(email).id_jag, "urn:ietf:params:oauth:token-type:jwt"
    else:
        good = jwt.decode(kit.acts.id_jag(email).id_jag, options={"verify_signature": False})
        kid = jwt.get_unverified_header(kit.acts.id_jag(email).id_jag)["kid"]
        if case == "untrusted issuer":
            good["iss"] = "https://idp.elsewhere.example"
        token = _foreign(good, kid)
    r = await present(jc, jag_emu, token, assertion_type)
    assert r.status_code == status, r.text
    body = r.json()
    assert body["code"] == code == body["error"] and says in body["message"], body
    if status == 401:
        challenge = r.headers["WWW-Authenticate"]
        assert challenge.startswith('AgentAuth error="login_required"') and 'max_age="3600"' in challenge
        assert body["error_description"] == body["message"] and "claim" not in body
    refused = jag_emu.journal(kinds="idp.idjag_refused")
    assert any(e["data"]["error"] == code and says in e["data"]["reason"] for e in refused)


async def test_a_replayed_jti_is_refused(jag_emu: Emulator, kit: Testkit, jc: httpx.AsyncClient) -> None:
    minted = kit.acts.id_jag(person())
    assert (await present(jc, jag_emu, minted.id_jag)).status_code == 200
    again = await present(jc, jag_emu, minted.id_jag)
    assert again.status_code == 400 and again.json()["code"] == "invalid_grant"
    assert "already used" in again.json()["message"]
    # A new ID-JAG with the same jti is a replay too: the jti is what is spent, not the token's bytes.
    same = kit.acts.id_jag(person(), jti=minted.jti)
    assert (await present(jc, jag_emu, same.id_jag)).json()["code"] == "invalid_grant"


async def test_an_unlinked_account_needs_the_person_then_links(
    jag_emu: Emulator, kit: Testkit, jc: httpx.AsyncClient
) -> None:
    email = person()
    first = await present(jc, jag_emu, kit.acts.id_jag(email, sub="upstream-A").id_jag)
    assert first.status_code == 200  # a new person: their account is made and linked to (issuer, upstream-A)

    # The same e-mail from another upstream identity: the account exists but is not linked to it.
    r = await present(jc, jag_emu, kit.acts.id_jag(email, sub="upstream-B").id_jag)
    assert r.status_code == 401, r.text
    assert r.headers["WWW-Authenticate"] == 'AgentAuth error="interaction_required"'
    body = r.json()
    assert body["code"] == "interaction_required" == body["error"] and body["type"] == "identity_assertion"
    claim = body["claim"]
    assert claim["token"].startswith("clm_")
    assert claim["attempt"]["verification_uri"].startswith(jag_emu.auth + "/claim?token=att_")
    assert "user_code" not in json.dumps(body)

    # Its claim links the upstream identity: only the ID-JAG's e-mail may take it (not a hint the agent names).
    other = await jc.post(
        jag_emu.auth + "/agent/identity/claim",
        json={"type": "service_auth", "claim_token": claim["token"], "login_hint": "mallory@example.org"},
    )
    assert other.status_code == 400 and other.json()["code"] == "invalid_login_hint", other.text
    with pytest.raises(Exception, match="403"):
        kit.acts.approve_claim(claim["attempt"]["verification_uri"], "mallory@example.org")
    code = kit.acts.approve_claim(claim["attempt"]["verification_uri"], email)
    done = await jc.post(
        jag_emu.auth + "/agent/identity/claim/complete", json={"claim_token": claim["token"], "user_code": code}
    )
    assert done.status_code == 200, done.text
    assert (await flow.exchange(jc, jag_emu, done.json()["identity"]["assertion"])).status_code == 200

    # Linked now: the next ID-JAG of upstream-B registers at once.
    again = await present(jc, jag_emu, kit.acts.id_jag(email, sub="upstream-B").id_jag)
    assert again.status_code == 200 and "claim" not in again.json()


def _cli_id_jag(e: Emulator, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "emulator", "id-jag", person(), "--url", e.url, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_cli_mints_an_id_jag_that_registers(jag_emu: Emulator) -> None:
    def present_sync(token: str) -> httpx.Response:
        body = {"type": "identity_assertion", "assertion_type": ID_JAG, "assertion": token}
        return httpx.post(jag_emu.auth + "/agent/identity", json=body)

    r = present_sync(_cli_id_jag(jag_emu))
    assert r.status_code == 200, r.text
    assert present_sync(_cli_id_jag(jag_emu, "--auth-age", "2h")).json()["code"] == "login_required"


async def test_a_bad_mint_request_is_a_400(jag_emu: Emulator) -> None:
    async with httpx.AsyncClient() as c:
        r = await c.post(jag_emu.url + "/_emulator/id-jag", json={"email": "not an address"})
        assert r.status_code == 400
        r = await c.post(jag_emu.url + "/_emulator/id-jag", json={"email": "a@b.co", "auth_age": "long"})
        assert r.status_code == 400


def test_a_snapshot_keeps_id_jag_registrations_links_and_spent_jtis(start_emulator: Any) -> None:
    e: Emulator = start_emulator("--no-watch", "--identity-assertion-registration")
    kit = Testkit.attach(e.url)

    def present_sync(token: str) -> httpx.Response:
        body = {"type": "identity_assertion", "assertion_type": ID_JAG, "assertion": token}
        return httpx.post(e.auth + "/agent/identity", json=body)

    spent = kit.acts.id_jag("kept@example.org", sub="kept-upstream")
    reg = present_sync(spent.id_jag).json()
    kit.snapshots.save("jag")
    kit.reset()
    assert all(r["id"] != reg["id"] for r in httpx.get(e.url + "/_emulator/registrations").json()["registrations"])
    kit.snapshots.load("jag")
    regs = {r["id"]: r for r in httpx.get(e.url + "/_emulator/registrations").json()["registrations"]}
    assert regs[reg["id"]]["type"] == "identity_assertion" and regs[reg["id"]]["status"] == "claimed"
    # Its assertion still exchanges; its jti is still spent; its upstream identity is still linked.
    form = {"grant_type": flow.JWT_BEARER, "assertion": reg["identity"]["assertion"]}
    assert httpx.post(e.auth + "/oauth2/token", data=form).status_code == 200
    assert present_sync(spent.id_jag).json()["code"] == "invalid_grant"
    again = present_sync(kit.acts.id_jag("kept@example.org", sub="kept-upstream").id_jag)
    assert again.status_code == 200 and "claim" not in again.json()
    kit.stop()


async def test_a_trace_shows_an_id_jag_agent_and_its_registration_events(
    jag_emu: Emulator, kit: Testkit, jc: httpx.AsyncClient
) -> None:
    reg = (await present(jc, jag_emu, kit.acts.id_jag(person()).id_jag)).json()
    assert (await flow.exchange(jc, jag_emu, reg["identity"]["assertion"])).status_code == 200
    trace = kit.trace(reg["id"])
    assert trace.agent.type == "identity_assertion"
    kinds = [s.kind for s in trace.steps]
    assert "agent.registration.created" in kinds and "agent.registration.credential.issued" in kinds
    created = next(s for s in trace.steps if s.kind == "agent.registration.created")
    assert created.origin == "auth"


TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_TOKEN = "urn:ietf:params:oauth:token-type:id_token"


def _exchange_form(e: Emulator, subject: str, **over: str) -> dict[str, str]:
    return {
        "grant_type": TOKEN_EXCHANGE,
        "requested_token_type": ID_JAG,
        "subject_token": subject,
        "subject_token_type": ID_TOKEN,
        "audience": e.auth,
        **over,
    }


async def test_an_agent_exchanges_the_person_s_id_token_for_an_id_jag_at_the_upstream(
    jag_emu: Emulator, kit: Testkit, jc: httpx.AsyncClient
) -> None:
    """RFC 8693 at the upstream's token endpoint, as the agent would at the person's own provider."""
    email = person()
    signed_in = kit.acts.id_jag(email, id_token=True, auth_age=30)
    assert signed_in.id_token and not signed_in.id_jag
    meta = (await jc.get(jag_emu.auth + "/upstream/.well-known/openid-configuration")).json()
    assert meta["grant_types_supported"] == [TOKEN_EXCHANGE]
    r = await jc.post(meta["token_endpoint"], data=_exchange_form(jag_emu, signed_in.id_token, scope="api.read"))
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["issued_token_type"] == ID_JAG and got["token_type"] == "N_A" and got["scope"] == "api.read"
    assert r.headers["Cache-Control"] == "no-store"
    claims = jwt.decode(got["access_token"], options={"verify_signature": False})
    assert claims["email"] == email and claims["sub"] == signed_in.sub and claims["aud"] == jag_emu.auth
    assert claims["iat"] - claims["auth_time"] == 30  # the person's sign-in, carried from the ID token
    reg = await present(jc, jag_emu, got["access_token"])
    assert reg.status_code == 200 and reg.json()["type"] == "identity_assertion", reg.text


@pytest.mark.parametrize(
    ("case", "code"),
    [
        ("another audience", "invalid_target"),
        ("an ID-JAG as the subject", "invalid_grant"),
        ("a foreign subject", "invalid_grant"),
        ("another grant", "unsupported_grant_type"),
        ("another requested type", "invalid_request"),
        ("no subject", "invalid_request"),
    ],
)
async def test_the_upstream_token_exchange_refuses_in_rfc_6749_s_format(
    jag_emu: Emulator, kit: Testkit, jc: httpx.AsyncClient, case: str, code: str
) -> None:
    id_token = kit.acts.id_jag(person(), id_token=True).id_token or ""
    form = _exchange_form(jag_emu, id_token)
    if case == "another audience":
        form["audience"] = "https://elsewhere.example"
    elif case == "an ID-JAG as the subject":
        form["subject_token"] = kit.acts.id_jag(person()).id_jag
    elif case == "a foreign subject":
        claims = jwt.decode(id_token, options={"verify_signature": False})
        form["subject_token"] = jwt.encode(claims, ec.generate_private_key(ec.SECP256R1()), algorithm="ES256")
    elif case == "another grant":
        form["grant_type"] = "client_credentials"
    elif case == "another requested type":
        form["requested_token_type"] = "urn:ietf:params:oauth:token-type:access_token"
    else:
        del form["subject_token"]
    r = await jc.post(jag_emu.auth + "/upstream/oauth2/token", data=form)
    assert r.status_code == 400 and r.json()["error"] == code, r.text
    assert r.json()["error_description"]
    as_json = await jc.post(jag_emu.auth + "/upstream/oauth2/token", json=form)
    assert as_json.status_code == 400 and as_json.json()["error"] == "invalid_request"
