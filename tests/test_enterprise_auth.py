"""MCP's enterprise-managed authorization at the identity provider: a client holding an ID-JAG from the person's
own identity provider (the upstream issuer the emulator plays) sends it to `/oauth2/token` as a jwt-bearer grant
and gets the person's access token for the resource the ID-JAG names. The MCP SDK's client for this leg
(`IdentityAssertionOAuthProvider`, unmodified) completes it; each refusal is checked on the wire as a client sends
it (httpx), and the registration's own jwt-bearer assertions keep working beside it."""

from __future__ import annotations

import base64
import time
from typing import Any

import httpx
import jwt
import pytest

from tests.agent_flow import register
from tests.conftest import Emulator

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
CLIENT = "https://client.example/mcp-client"

_people = iter(range(10_000))


def person() -> str:
    return f"ent{next(_people)}-{time.monotonic_ns()}@example.org"


async def mint(c: httpx.AsyncClient, emu: Emulator, email: str, **claims: Any) -> str:
    """An ID-JAG from the upstream issuer the emulator plays, for CLIENT and the site unless told otherwise."""
    ask = {"email": email, "client_id": CLIENT, "resource": emu.url, **claims}
    r = await c.post(emu.url + "/_emulator/id-jag", json=ask)
    assert r.status_code == 201, r.text
    return r.json()["id_jag"]


async def grant(c: httpx.AsyncClient, emu: Emulator, assertion: str, **form: str) -> httpx.Response:
    body = {"grant_type": JWT_BEARER, "assertion": assertion, "client_id": CLIENT, **form}
    return await c.post(emu.auth + "/oauth2/token", data={k: v for k, v in body.items() if v is not None})


async def test_id_jag_gives_the_persons_token(client: httpx.AsyncClient, emu: Emulator) -> None:
    email = person()
    r = await grant(client, emu, await mint(client, emu, email), resource=emu.url)
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    body = r.json()
    assert body["token_type"] == "Bearer" and "refresh_token" not in body  # a fresh ID-JAG, not a refresh
    claims = jwt.decode(body["access_token"], options={"verify_signature": False})
    header = jwt.get_unverified_header(body["access_token"])
    assert header["typ"] == "at+jwt"
    assert claims["iss"] == emu.auth and claims["aud"] == emu.url and claims["client_id"] == CLIENT
    assert claims["email"] == email and claims["sub"].startswith("user_")
    assert claims["scope"] == body["scope"] and body["scope"]
    # the same upstream identity is the same person next time (linked at first use)
    again = await grant(client, emu, await mint(client, emu, email))
    assert again.status_code == 200, again.text
    assert jwt.decode(again.json()["access_token"], options={"verify_signature": False})["sub"] == claims["sub"]


async def test_an_id_jag_for_the_control_plane_acts_as_the_person(client: httpx.AsyncClient, emu: Emulator) -> None:
    """An ID-JAG naming the control plane as its resource: the person's token is accepted there as a `pxt login`
    session is (create an organization, list it); a token for the site is refused there."""
    email = person()
    r = await grant(client, emu, await mint(client, emu, email, resource=emu.api))
    assert r.status_code == 200, r.text
    token = r.json()["access_token"]
    assert jwt.decode(token, options={"verify_signature": False})["aud"] == emu.api
    bearer = {"Authorization": f"Bearer {token}"}
    slug = f"ent-{time.monotonic_ns()}"
    made = await client.post(emu.api, json={"operation_type": "create_org", "org": slug}, headers=bearer)
    assert made.status_code == 200, made.text
    listed = await client.post(emu.api, json={"operation_type": "list_orgs"}, headers=bearer)
    assert listed.status_code == 200, listed.text
    assert [o["org"] for o in listed.json()["orgs"]] == [slug]
    site = (await grant(client, emu, await mint(client, emu, email))).json()["access_token"]
    refused = await client.post(
        emu.api, json={"operation_type": "list_orgs"}, headers={"Authorization": f"Bearer {site}"}
    )
    assert refused.status_code == 401 and "not issued for this control plane" in refused.text
    assert 'error="invalid_token"' in refused.headers["www-authenticate"]


async def test_client_authentication_basic_names_the_client(client: httpx.AsyncClient, emu: Emulator) -> None:
    assertion = await mint(client, emu, person())
    basic = base64.b64encode(f"{CLIENT.replace(':', '%3A').replace('/', '%2F')}:s3cret".encode()).decode()
    body = {"grant_type": JWT_BEARER, "assertion": assertion}
    r = await client.post(emu.auth + "/oauth2/token", data=body, headers={"Authorization": f"Basic {basic}"})
    assert r.status_code == 200, r.text
    bad = await client.post(emu.auth + "/oauth2/token", data=body, headers={"Authorization": "Basic !!"})
    assert bad.status_code == 400 and bad.json()["error"] == "invalid_client"


@pytest.mark.parametrize(
    ("claims", "form", "error", "words"),
    [
        ({"client_id": "https://other.example/client"}, {}, "invalid_grant", "issued to the client"),
        ({}, {"client_id": ""}, "invalid_client", "client_id is required"),
        ({"resource": "https://elsewhere.example/mcp"}, {}, "invalid_target", "issues tokens for"),
        ({"resource": None}, {}, "invalid_grant", "names no resource"),
        ({}, {"resource": "https://elsewhere.example/"}, "invalid_target", "issues tokens for"),
        ({"audience": "https://another-as.example"}, {}, "invalid_grant", "not this provider"),
        ({"expires_in": -120}, {}, "invalid_grant", "expired"),
        ({"auth_age": 10 * 3600}, {}, "invalid_grant", "signed in"),
        ({"auth_time": False}, {}, "invalid_grant", "auth_time"),
        ({"typ": "JWT"}, {}, "invalid_grant", "typ"),
        ({"email_verified": False}, {}, "invalid_grant", "verified e-mail"),
        ({}, {"scope": "admin:everything"}, "invalid_scope", "not offered"),
    ],
)
async def test_each_refusal(
    client: httpx.AsyncClient,
    emu: Emulator,
    claims: dict[str, Any],
    form: dict[str, str],
    error: str,
    words: str,
) -> None:
    minted = {k: v for k, v in claims.items() if v is not None}
    ask = {"email": person(), "client_id": CLIENT, "resource": emu.url, **minted}
    if "resource" in claims and claims["resource"] is None:
        del ask["resource"]
    r = await client.post(emu.url + "/_emulator/id-jag", json=ask)
    assert r.status_code == 201, r.text
    answer = await grant(client, emu, r.json()["id_jag"], **form)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == error and words in answer.json()["error_description"], answer.text


async def test_an_id_jag_works_once(client: httpx.AsyncClient, emu: Emulator) -> None:
    assertion = await mint(client, emu, person())
    assert (await grant(client, emu, assertion)).status_code == 200
    replay = await grant(client, emu, assertion)
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
    assert "already used" in replay.json()["error_description"]


async def test_a_refused_id_jag_is_not_spent(client: httpx.AsyncClient, emu: Emulator) -> None:
    """A check that fails after the signature (the resource) leaves the jti unused: the corrected request works."""
    assertion = await mint(client, emu, person())
    wrong = await grant(client, emu, assertion, client_id="https://other.example/client")
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"
    assert (await grant(client, emu, assertion)).status_code == 200


async def test_an_untrusted_issuer_is_invalid_grant(client: httpx.AsyncClient, emu: Emulator) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    now = int(time.time())
    forged = jwt.encode(
        {"iss": "https://idp.evil.example", "aud": emu.auth, "sub": "x", "client_id": CLIENT, "jti": "j1",
         "iat": now, "exp": now + 300, "resource": emu.url},
        key,
        algorithm="ES256",
        headers={"typ": "oauth-id-jag+jwt"},
    )  # fmt: skip
    r = await grant(client, emu, forged)
    assert r.status_code == 400 and r.json()["error"] == "invalid_grant" and "not trusted" in r.text


async def test_an_account_not_linked_is_refused(client: httpx.AsyncClient, emu: Emulator) -> None:
    """An upstream identity whose e-mail is an account not linked to it: the person must link it first."""
    email = person()
    first = await grant(client, emu, await mint(client, emu, email, sub="upstream-a"))
    assert first.status_code == 200
    other = await grant(client, emu, await mint(client, emu, email, sub="upstream-b"))
    assert other.status_code == 400 and other.json()["error"] == "invalid_grant"
    assert "not linked" in other.json()["error_description"]


async def test_registration_assertions_still_exchange(client: httpx.AsyncClient, emu: Emulator) -> None:
    """The registration's own assertion at the same grant: unchanged (an agent's token, no client_id needed)."""
    reg = await register(client, emu)
    r = await client.post(
        emu.auth + "/oauth2/token", data={"grant_type": JWT_BEARER, "assertion": reg["identity"]["assertion"]}
    )
    assert r.status_code == 200, r.text
    assert jwt.decode(r.json()["access_token"], options={"verify_signature": False})["sub"] == reg["id"]
    junk = await client.post(emu.auth + "/oauth2/token", data={"grant_type": JWT_BEARER, "assertion": "nope"})
    assert junk.status_code == 400 and junk.json()["error"] == "invalid_grant"


async def test_mcp_sdk_identity_assertion_provider_with_an_id_jag(client: httpx.AsyncClient, emu: Emulator) -> None:
    """The SDK's SEP-990 client, unmodified, with an ID-JAG the person's IdP minted for the resource it names."""
    import httpx2
    from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider

    from tests.test_authorization_code import _Memory

    email = person()
    asked: list[tuple[str, str]] = []

    async def assertion_provider(audience: str, resource: str) -> str:
        asked.append((audience, resource))
        return await mint(client, emu, email, audience=audience, resource=resource)

    storage = _Memory()
    provider = IdentityAssertionOAuthProvider(
        server_url=emu.url + "/api/v1/trial-orgs",
        storage=storage,
        client_id=CLIENT,
        client_secret="s3cret",
        issuer=emu.auth,
        assertion_provider=assertion_provider,
        token_endpoint_auth_method="client_secret_basic",
    )
    async with httpx2.AsyncClient(auth=provider, timeout=20) as c:
        r = await c.post(emu.url + "/api/v1/trial-orgs")
    assert asked == [(emu.auth, emu.url + "/api/v1/trial-orgs")]
    claims = jwt.decode(storage.tokens.access_token, options={"verify_signature": False})
    assert (
        claims["email"] == email and claims["client_id"] == CLIENT and claims["aud"] == emu.url + "/api/v1/trial-orgs"
    )
    # the retried call carried the person's token; the trial endpoint is an anonymous agent's, and says so
    assert r.status_code == 401 and "person's access token" in r.text
