"""The service side of agent registration: a service calls the identity provider's agents API about the agents that
reach it, with a service key. The client is the unmodified `workos` SDK (`client.agents`), pointed at the emulator's
identity provider; agents are plain HTTP (tests/agent_flow.py); time is moved with the emulator's clock."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from workos import WorkOSClient
from workos._errors import (
    AuthenticationError,
    AuthorizationError,
    BadRequestError,
    ConflictError,
    NotFoundError,
)
from workos.agents.models import AgentAdminLinkClaimAttemptToExternalUserRequestUser as ExternalUser

from tests import agent_flow as flow
from tests.conftest import Emulator


def service_key(emu: Emulator, name: str = "backend") -> dict[str, Any]:
    with emu.admin() as c:
        r = c.post("/_emulator/service-keys", json={"name": name})
    assert r.status_code == 201, r.text
    return r.json()


def sdk(emu: Emulator, key: str) -> WorkOSClient:
    return WorkOSClient(api_key=key, client_id="client_emulator", base_url=emu.auth, max_retries=0)


@pytest.fixture
def workos(emu: Emulator) -> WorkOSClient:
    return sdk(emu, service_key(emu)["key"])


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMULATOR_")}
    return subprocess.run(
        [sys.executable, "-m", "emulator", *args], capture_output=True, text=True, timeout=60, env=env
    )


async def start_claim(c: httpx.AsyncClient, emu: Emulator, claim_token: str, hint: str | None = None) -> str:
    """A new claim attempt; the opaque attempt token of its verification_uri."""
    body = {"type": "service_auth", "claim_token": claim_token, **({"login_hint": hint} if hint else {})}
    r = await c.post(emu.auth + "/agent/identity/claim", json=body)
    assert r.status_code == 200, r.text
    return flow.attempt_token(r.json()["attempt"]["verification_uri"])


async def complete(c: httpx.AsyncClient, emu: Emulator, claim_token: str, code: str) -> httpx.Response:
    return await c.post(
        emu.auth + "/agent/identity/claim/complete", json={"claim_token": claim_token, "user_code": code}
    )


# --- validate ---------------------------------------------------------------------------------------------------


async def test_validate_an_access_token(client: httpx.AsyncClient, emu: Emulator, workos: WorkOSClient) -> None:
    reg, token = await flow.access_token(client, emu)
    ok = workos.agents.create_validate(type="access_token", credential=token)
    assert ok.valid is True and ok.registration_id == reg["id"] and ok.expires_at is not None
    aimed = workos.agents.create_validate(type="access_token", credential=token, audience=emu.url)
    assert aimed.valid is True
    elsewhere = workos.agents.create_validate(type="access_token", credential=token, audience="https://other.test")
    assert (elsewhere.valid, elsewhere.registration_id, elsewhere.expires_at) == (False, None, None)
    assertion = workos.agents.create_validate(type="access_token", credential=reg["identity"]["assertion"])
    assert assertion.valid is False  # an identity assertion is not an access token
    garbage = workos.agents.create_validate(type="access_token", credential="not-a-token")
    assert (garbage.valid, garbage.registration_id, garbage.expires_at) == (False, None, None)

    emu.advance("301s")  # access tokens live 300 s of emulator time
    expired = workos.agents.create_validate(type="access_token", credential=token)
    assert expired.valid is False


async def test_validate_a_trial_api_key(client: httpx.AsyncClient, emu: Emulator, workos: WorkOSClient) -> None:
    reg, _, trial = await flow.new_trial(client, emu)
    ok = workos.agents.create_validate(type="api_key", credential=trial["api_key"])
    assert ok.valid is True and ok.registration_id == reg["id"]
    assert ok.expires_at is not None and ok.expires_at.isoformat().replace("+00:00", "Z") == trial["expires_at"]
    for wrong in ("pxtk_" + "0" * 48, "garbage"):
        assert workos.agents.create_validate(type="api_key", credential=wrong).valid is False
    # the access token is not an API key, whatever the service calls it
    assert workos.agents.create_validate(type="api_key", credential=reg["identity"]["assertion"]).valid is False


# --- link a claim attempt to the service's user -------------------------------------------------------------------


async def test_link_external_user_gives_the_code_that_completes_the_claim(
    client: httpx.AsyncClient, emu: Emulator, workos: WorkOSClient
) -> None:
    reg = await flow.register(client, emu, type="service_auth", login_hint="svc-ana@example.org")
    attempt = flow.attempt_token(reg["claim"]["attempt"]["verification_uri"])
    before = workos.agents.get_registration(reg["id"])
    assert before.status == "unverified" and before.kind == "service_auth" and before.revoked_at is None
    assert before.claim is not None and before.claim.claim_completion is None
    assert before.agent_identity.userland_user_id is None and before.organization_id is None

    with pytest.raises(AuthorizationError) as wrong:  # the claim names another person, as the page refuses
        workos.agents.update_attempts(
            type="link_external_user",
            claim_attempt_token=attempt,
            user=ExternalUser(email="eve@example.org", external_id="ext-eve"),
        )
    assert wrong.value.status_code == 403 and wrong.value.code == "forbidden"

    linked = workos.agents.update_attempts(
        type="link_external_user",
        claim_attempt_token=attempt,
        user=ExternalUser(email="svc-ana@example.org", external_id="ext-ana"),
    )
    assert linked.id == reg["id"] and linked.status == "unverified" and linked.organizations == []
    assert len(linked.user_code) == 6 and linked.user_code.isdigit()

    with pytest.raises(ConflictError) as again:  # a claim link works once, as on the page
        workos.agents.update_attempts(
            type="link_external_user",
            claim_attempt_token=attempt,
            user=ExternalUser(email="svc-ana@example.org", external_id="ext-ana"),
        )
    assert again.value.status_code == 409

    done = await complete(client, emu, reg["claim"]["token"], linked.user_code)
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "claimed"

    after = workos.agents.get_registration(reg["id"])
    assert after.status == "verified" and after.agent_identity.userland_user_id is not None
    assert after.claim is not None and after.claim.claim_completion is not None
    assert after.claim.claim_completion.claimed_at >= after.created_at
    with emu.admin() as c:
        users = {u["email"]: u for u in c.get("/_emulator/users").json()["users"]}
    assert users["svc-ana@example.org"]["id"] == after.agent_identity.userland_user_id

    # A superseded attempt's link is refused with the reference's code.
    other = await flow.register(client, emu)
    old = await start_claim(client, emu, other["claim"]["token"])
    await start_claim(client, emu, other["claim"]["token"])
    with pytest.raises(Exception) as superseded:
        workos.agents.update_attempts(
            type="link_external_user",
            claim_attempt_token=old,
            user=ExternalUser(email="b@example.org", external_id="b"),
        )
    assert getattr(superseded.value, "status_code", None) == 410
    assert getattr(superseded.value, "code", None) == "claim_expired"
    with pytest.raises(NotFoundError) as unknown:
        workos.agents.update_attempts(
            type="link_external_user",
            claim_attempt_token="att_nope",
            user=ExternalUser(email="b@example.org", external_id="b"),
        )
    assert unknown.value.code == "entity_not_found"


async def test_a_user_of_several_organizations_needs_organization_id(
    client: httpx.AsyncClient, emu: Emulator, workos: WorkOSClient
) -> None:
    world = """
[[orgs]]
name = "svc-one"
display_name = "Service One"
[[orgs]]
name = "svc-two"
[[users]]
email = "many@example.org"
orgs = ["svc-one", "svc-two"]
"""
    with emu.admin() as c:
        applied = c.post("/_emulator/apply?name=orgs.toml", content=world, headers={"Content-Type": "application/toml"})
        assert applied.status_code == 200, applied.text
        ids = {o["org"]: o["org_id"] for o in c.get("/_emulator/orgs").json()["orgs"]}
    reg = await flow.register(client, emu)
    attempt = await start_claim(client, emu, reg["claim"]["token"])
    user = ExternalUser(email="many@example.org", external_id="ext-many")
    with pytest.raises(BadRequestError) as unnamed:
        workos.agents.update_attempts(type="link_external_user", claim_attempt_token=attempt, user=user)
    assert ids["svc-one"] in unnamed.value.message
    with pytest.raises(AuthorizationError):
        workos.agents.update_attempts(
            type="link_external_user", claim_attempt_token=attempt, user=user, organization_id="org_not_theirs"
        )
    linked = workos.agents.update_attempts(
        type="link_external_user", claim_attempt_token=attempt, user=user, organization_id=ids["svc-two"]
    )
    assert {(o.id, o.name) for o in linked.organizations} == {
        (ids["svc-one"], "Service One"),
        (ids["svc-two"], "svc-two"),
    }
    # The same external_id finds the same person again, whatever e-mail the service sends.
    with emu.admin() as c:
        users = [u for u in c.get("/_emulator/users").json()["users"] if u["email"] == "many@example.org"]
    assert len(users) == 1


async def test_a_refused_link_makes_no_one(client: httpx.AsyncClient, emu: Emulator, workos: WorkOSClient) -> None:
    """Every refusal comes before anything is written: a person the service named, refused for an organization that
    is not theirs, is neither made nor journaled."""
    reg = await flow.register(client, emu)
    attempt = await start_claim(client, emu, reg["claim"]["token"])
    since = emu.journal()[-1]["seq"]
    user = ExternalUser(email="nobody-yet@example.org", external_id="ext-nobody")
    with pytest.raises(AuthorizationError):
        workos.agents.update_attempts(
            type="link_external_user", claim_attempt_token=attempt, user=user, organization_id="org_not_theirs"
        )
    with emu.admin() as c:
        assert all(u["email"] != "nobody-yet@example.org" for u in c.get("/_emulator/users").json()["users"])
    assert not [e for e in emu.journal(kinds="idp.user_created", since=since) if "nobody-yet" in str(e["data"])]
    # The attempt is still open: the same link without the bad organization works.
    linked = workos.agents.update_attempts(type="link_external_user", claim_attempt_token=attempt, user=user)
    assert len(linked.user_code) == 6


async def test_after_a_seeded_reset_new_keys_and_endpoints_are_not_the_kept_ones(
    start_emulator: Callable[..., Emulator],
) -> None:
    """A reset keeps service keys and webhook endpoints but puts a seeded id generator back to its start: the next
    key and endpoint are drawn again rather than colliding with the kept ones."""
    e = start_emulator("--no-watch", "--seed", "7")
    first = service_key(e, "one")
    with e.admin() as c:
        hook = c.post("/_emulator/webhooks", json={"url": "http://127.0.0.1:9/a"})
        assert hook.status_code == 201, hook.text
        assert c.post("/_emulator/reset", json={}).status_code == 200
        again = c.post("/_emulator/service-keys", json={"name": "two"})
        assert again.status_code == 201, again.text
        hook2 = c.post("/_emulator/webhooks", json={"url": "http://127.0.0.1:9/b"})
        assert hook2.status_code == 201, hook2.text
    assert again.json()["key"] != first["key"] and again.json()["id"] != first["id"]
    assert hook2.json()["id"] != hook.json()["id"]
    assert sdk(e, first["key"]).agents.create_validate(type="access_token", credential="x").valid is False
    assert sdk(e, again.json()["key"]).agents.create_validate(type="access_token", credential="x").valid is False


# --- revocation ---------------------------------------------------------------------------------------------------


async def test_revocation_is_refused_on_every_origin(
    client: httpx.AsyncClient, emu: Emulator, workos: WorkOSClient
) -> None:
    # An anonymous agent with a trial, then claimed through the service: it holds every kind of credential.
    reg, _, trial = await flow.new_trial(client, emu)
    attempt = await start_claim(client, emu, reg["claim"]["token"])
    linked = workos.agents.update_attempts(
        type="link_external_user",
        claim_attempt_token=attempt,
        user=ExternalUser(email="rev@example.org", external_id="ext-rev"),
    )
    claimed = (await complete(client, emu, reg["claim"]["token"], linked.user_code)).json()
    assertion, refresh = claimed["identity"]["assertion"], claimed["identity"]["refresh_token"]["value"]
    token = (await flow.exchange(client, emu, assertion)).json()["access_token"]
    assert (await flow.list_orgs(client, emu, trial["api_key"])).status_code == 200
    assert workos.agents.create_validate(type="access_token", credential=token).valid is True
    seen = emu.journal()[-1]["seq"]

    first = workos.agents.revoke_registration(reg["id"])
    assert first.status == "revoked" and first.revoked_at is not None
    emu.advance("5s")
    second = workos.agents.revoke_registration(reg["id"])
    assert second.revoked_at == first.revoked_at and second.status == "revoked"
    assert workos.agents.get_registration(reg["id"]).status == "revoked"
    events = [e for e in emu.journal(since=seen) if e["subject"] == reg["id"]]
    assert [e["kind"] for e in events].count("agent.registration.revoked") == 1
    revoked = [e for e in events if e["kind"] == "idp.revoked"]
    assert len(revoked) == 1 and revoked[0]["data"]["by"].startswith("skey_")

    # the identity provider: the assertion, the refresh token, the claim
    r = await flow.exchange(client, emu, assertion)
    assert r.status_code == 400 and r.json()["error"] == "invalid_grant" and "revoked" in r.json()["error_description"]
    r = await client.post(emu.auth + "/agent/identity", json={"type": "refresh", "refresh_token": refresh})
    assert r.status_code == 400 and r.json()["code"] == "invalid_refresh_token"
    r = await client.post(
        emu.auth + "/agent/identity/claim", json={"type": "service_auth", "claim_token": reg["claim"]["token"]}
    )
    assert r.status_code == 410 and r.json()["code"] == "claim_revoked"
    r = await complete(client, emu, reg["claim"]["token"], "123456")
    assert r.status_code == 410 and r.json()["code"] == "claim_revoked"
    # the site: the access token
    r = await flow.create_trial(client, emu, token)
    assert r.status_code == 401 and "revoked" in r.json()["message"]
    assert "resource_metadata" in r.headers["www-authenticate"]
    # the control plane: the trial's key
    r = await flow.list_orgs(client, emu, trial["api_key"])
    assert r.status_code == 401 and "revoked" in r.text
    # the service side
    assert workos.agents.create_validate(type="access_token", credential=token).valid is False
    assert workos.agents.create_validate(type="api_key", credential=trial["api_key"]).valid is False

    with emu.admin() as c:
        listed = {r["id"]: r for r in c.get("/_emulator/registrations").json()["registrations"]}
    assert listed[reg["id"]]["service_status"] == "revoked"
    assert listed[reg["id"]]["revoked_at"] == first.revoked_at.isoformat().replace("+00:00", "Z")


async def test_operator_revokes_and_deletes(client: httpx.AsyncClient, emu: Emulator, workos: WorkOSClient) -> None:
    reg, token = await flow.access_token(client, emu)
    seen = emu.journal()[-1]["seq"]
    r = cli("registration", "revoke", reg["id"], "--url", emu.url)
    assert r.returncode == 0, r.stderr
    assert "revoked" in r.stdout
    assert (await flow.create_trial(client, emu, token)).status_code == 401
    by = [e["data"]["by"] for e in emu.journal(kinds="idp.revoked", since=seen) if e["subject"] == reg["id"]]
    assert by == ["operator"]

    r = cli("registration", "delete", reg["id"], "--url", emu.url, "--json")
    assert r.returncode == 0, r.stderr
    with pytest.raises(NotFoundError) as gone:
        workos.agents.get_registration(reg["id"])
    assert gone.value.code == "entity_not_found"
    assert [e["subject"] for e in emu.journal(kinds="agent.registration.deleted", since=seen)] == [reg["id"]]
    with emu.admin() as c:
        assert c.delete(f"/_emulator/registrations/{reg['id']}").status_code == 404
        assert c.post(f"/_emulator/registrations/{reg['id']}/revoke").status_code == 404
    with pytest.raises(NotFoundError):
        workos.agents.revoke_registration(reg["id"])


# --- service keys and bad requests ----------------------------------------------------------------------------------


async def test_a_service_key_is_required(emu: Emulator) -> None:
    with pytest.raises(AuthenticationError):
        sdk(emu, "sk_test_" + "0" * 32).agents.get_registration("agent_reg_x")
    made = service_key(emu, "to-revoke")
    assert sdk(emu, made["key"]).agents.create_validate(type="api_key", credential="x").valid is False
    with emu.admin() as c:
        revoked = c.delete(f"/_emulator/service-keys/{made['id']}")
        assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
        listed = c.get("/_emulator/service-keys").json()["service_keys"]
    mine = next(k for k in listed if k["id"] == made["id"])
    assert mine["hint"] == made["key"][-4:] and "key" not in mine and mine["revoked_at"] is not None
    with pytest.raises(AuthenticationError) as refused:
        sdk(emu, made["key"]).agents.create_validate(type="api_key", credential="x")
    assert refused.value.code == "unauthorized" and "revoked" in refused.value.message
    async with emu.client() as c:
        r = await c.post(emu.auth + "/agents/credentials/validate", json={"type": "api_key", "credential": "x"})
    assert r.status_code == 401 and set(r.json()) >= {"message", "code"}


async def test_malformed_bodies_are_400(emu: Emulator, workos: WorkOSClient) -> None:
    with pytest.raises(BadRequestError):
        workos.agents.create_validate(type="password", credential="x")
    key = {"Authorization": f"Bearer {workos._api_key}"}
    async with emu.client() as c:
        for body in (b"{", b"[]", b'{"type": "api_key"}', b'{"type": "api_key", "credential": 5}'):
            r = await c.post(emu.auth + "/agents/credentials/validate", content=body, headers=key)
            assert r.status_code == 400, body
            assert r.json()["code"] == "bad_request" and r.json()["message"]
            # without a key, the same body is the 401: the key is checked before any body is read
            anonymous = await c.post(emu.auth + "/agents/credentials/validate", content=body)
            assert anonymous.status_code == 401 and anonymous.json()["code"] == "unauthorized", body
        extra = {"type": "api_key", "credential": "x", "surprise": 1}
        r = await c.post(emu.auth + "/agents/credentials/validate", json=extra, headers=key)
        assert r.status_code == 400 and "surprise" in r.json()["message"]
        link = {
            "type": "link_external_user",
            "claim_attempt_token": "att_x",
            "user": {"email": "not-mail", "external_id": "e"},
        }
        r = await c.patch(emu.auth + "/agents/claims/attempts", json=link, headers=key)
        assert r.status_code == 400
        r = await c.patch(emu.auth + "/agents/claims/attempts", json={**link, "type": "other"}, headers=key)
        assert r.status_code == 400


def test_cli_service_key_works_with_the_sdk(emu: Emulator) -> None:
    made = cli("service-key", "create", "ci runner", "--url", emu.url)
    assert made.returncode == 0, made.stderr
    key = next(line for line in made.stdout.splitlines() if line.startswith("sk_test_"))
    assert sdk(emu, key).agents.create_validate(type="access_token", credential="x").valid is False
    listed = cli("service-key", "list", "--url", emu.url)
    assert "ci runner" in listed.stdout and key not in listed.stdout and key[-4:] in listed.stdout
    key_id = made.stdout.split()[0]
    assert cli("service-key", "revoke", key_id, "--url", emu.url).returncode == 0
    with pytest.raises(AuthenticationError):
        sdk(emu, key).agents.create_validate(type="access_token", credential="x")


def test_declared_service_key(emu: Emulator) -> None:
    world = '[[service_keys]]\nname = "declared"\nkey = "sk_test_declared0123456789abcdef"\n'
    with emu.admin() as c:
        for outcome in ("created", "unchanged"):
            r = c.post("/_emulator/apply?name=keys.toml", content=world, headers={"Content-Type": "application/toml"})
            assert r.status_code == 200, r.text
            assert r.json()["applied"]["service_keys"][outcome] == 1
        bad = c.post(
            "/_emulator/apply?name=keys.toml",
            content='[[service_keys]]\nname = "x"\nkey = "sk_live_nope"\n',
            headers={"Content-Type": "application/toml"},
        )
        assert bad.status_code == 400 and "keys.toml:3" in bad.text
    sdk(emu, "sk_test_declared0123456789abcdef").agents.create_validate(type="api_key", credential="x")


async def test_the_setting_service_api_key_is_accepted(start_emulator: Callable[..., Emulator]) -> None:
    key = "sk_test_fromsettings0123456789"
    e = start_emulator("--no-watch", "--service-api-key", key)
    assert sdk(e, key).agents.create_validate(type="api_key", credential="x").valid is False
    with pytest.raises(AuthenticationError):
        sdk(e, key + "0").agents.create_validate(type="api_key", credential="x")
