"""`/oauth2/token` and `/oauth2/revoke`; tokens verified with PyJWT against the published JWKS."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import jwt
import pytest

from tests import agent_flow as flow
from tests.conftest import Emulator, free_ports


async def _verify(c: httpx.AsyncClient, emu: Emulator, token: str, audience: str) -> tuple[dict, dict]:
    """Verify a token the way any relying party would: fetch the JWKS, check signature, issuer, audience."""
    jwks = (await c.get(emu.auth + "/.well-known/jwks.json")).json()
    header = jwt.get_unverified_header(token)
    key = next(k for k in jwks["keys"] if k["kid"] == header["kid"])
    # The emulator's clock is frozen in the past; expiry is checked against it below, not the wall clock.
    claims = jwt.decode(
        token,
        jwt.PyJWK(key).key,
        algorithms=["ES256"],
        audience=audience,
        issuer=emu.auth,
        options={"verify_exp": False, "verify_iat": False},
    )
    return header, claims


async def test_assertion_and_access_token_verify_against_the_jwks(client: httpx.AsyncClient, emu: Emulator) -> None:
    now = (await client.get("/_emulator/clock")).json()["now"]
    reg = await flow.register(client, emu)
    header, claims = await _verify(client, emu, reg["identity"]["assertion"], emu.auth)
    assert header["alg"] == "ES256" and header["typ"] == "oauth-id-jag+jwt"
    assert claims["sub"] == claims["client_id"] == reg["id"]
    assert claims["iat"] == int(now) and claims["exp"] == int(now) + 3600

    r = await flow.exchange(client, emu, reg["identity"]["assertion"])
    assert r.headers["cache-control"] == "no-store" and r.headers["pragma"] == "no-cache"
    answer = r.json()
    assert answer["token_type"] == "Bearer" and answer["expires_in"] == 300
    header, claims = await _verify(client, emu, answer["access_token"], emu.url)
    assert header["typ"] == "at+jwt"
    assert claims["exp"] - claims["iat"] == 300 and claims["scope"] == "public:read free_tier:read"

    forged = answer["access_token"][:-4] + ("AAAA" if not answer["access_token"].endswith("AAAA") else "BBBB")
    with pytest.raises(jwt.InvalidSignatureError):
        await _verify(client, emu, forged, emu.url)


async def test_the_signing_key_survives_a_restart(start_emulator, tmp_path) -> None:
    state = tmp_path / "keys"
    site, auth, api = free_ports(3)
    ports = ("--site-port", site, "--auth-port", auth, "--api-port", api)
    e = start_emulator("--no-watch", *ports, state_dir=state)
    async with e.client() as c:
        first = (await c.get(e.auth + "/.well-known/jwks.json")).json()
        reg = await flow.register(c, e)
    e.stop()
    assert oct((state / "keys" / "idp-es256.jwk.json").stat().st_mode)[-3:] == "600"
    e2 = start_emulator("--no-watch", *ports, state_dir=state)
    async with e2.client() as c:
        assert (await c.get(e2.auth + "/.well-known/jwks.json")).json() == first
        # An assertion from before the restart still exchanges (same key, issuer and registration).
        assert (await flow.exchange(c, e2, reg["identity"]["assertion"])).status_code == 200


async def test_access_token_expires_after_five_minutes_and_renews_by_exchange(emu: Emulator) -> None:
    async with emu.client() as c:
        _, token = await flow.access_token(c, emu)
        emu.advance(299)
        # Not expired yet: the registration's trial is created with this token.
        ok = await flow.create_trial(c, emu, token)
        assert ok.status_code == 201
        reg2, token2 = await flow.access_token(c, emu)
        emu.advance(301)
        r = await flow.create_trial(c, emu, token2)
        assert r.status_code == 401 and "expired" in r.json()["message"]
        assert 'error="invalid_token"' in r.headers["www-authenticate"]
        renewed = (await flow.exchange(c, emu, reg2["identity"]["assertion"])).json()["access_token"]
        assert (await flow.create_trial(c, emu, renewed)).status_code == 201


async def test_an_expired_assertion_no_longer_exchanges(emu: Emulator) -> None:
    async with emu.client() as c:
        reg = await flow.register(c, emu)
        emu.advance("1h1s")
        r = await flow.exchange(c, emu, reg["identity"]["assertion"])
        assert (
            r.status_code == 400 and r.json()["error"] == "invalid_grant" and "expired" in r.json()["error_description"]
        )


@pytest.mark.parametrize(
    ("form", "error", "fragment"),
    [
        ({"grant_type": "client_credentials", "assertion": "x"}, "unsupported_grant_type", "jwt-bearer"),
        (
            {"grant_type": "urn:ietf:params:oauth:grant-type:device_code"},
            "unsupported_grant_type",
            "/agent/identity/claim/complete",
        ),
        ({"assertion": "x"}, "unsupported_grant_type", "jwt-bearer"),
        ({"grant_type": flow.JWT_BEARER}, "invalid_request", "assertion is required"),
        ({"grant_type": flow.JWT_BEARER, "assertion": "not.a.jwt"}, "invalid_grant", "not valid"),
        ({"grant_type": flow.JWT_BEARER, "assertion": "art_123"}, "invalid_grant", "type refresh"),
    ],
)
async def test_token_endpoint_oauth_errors(emu: Emulator, form: dict, error: str, fragment: str) -> None:
    async with emu.client() as c:
        r = await c.post(emu.auth + "/oauth2/token", data=form)
    assert r.status_code == 400
    assert r.json()["error"] == error and fragment in r.json()["error_description"]
    assert r.headers["cache-control"] == "no-store"


@pytest.mark.parametrize("valid", [True, False])
async def test_a_chunked_form_gets_the_same_answer_as_one_with_a_length(emu: Emulator, valid: bool) -> None:
    """A form with a small Content-Length is answered before the router (TokenFastPath), a chunked one by the route:
    the same status, headers and body shape, the same journal event."""
    async with emu.client() as c:
        reg = await flow.register(c, emu)
        form = f"grant_type={flow.JWT_BEARER}&assertion={reg['identity']['assertion'] if valid else 'not.a.jwt'}"
        ctype = {"Content-Type": "application/x-www-form-urlencoded"}

        async def chunks() -> AsyncIterator[bytes]:
            yield form[:20].encode()
            yield form[20:].encode()

        answers = [
            await c.post(emu.auth + "/oauth2/token", content=form.encode(), headers=ctype),
            await c.post(emu.auth + "/oauth2/token", content=chunks(), headers=ctype),
        ]
    assert "content-length" not in answers[1].request.headers  # really chunked
    for r in answers:
        assert r.status_code == (200 if valid else 400), r.text
        assert (r.headers["cache-control"], r.headers["pragma"]) == ("no-store", "no-cache")
        assert r.headers["content-type"] == "application/json"
    if valid:
        assert [set(r.json()) for r in answers] == [{"access_token", "token_type", "expires_in", "scope"}] * 2
        assert answers[0].json()["access_token"] != answers[1].json()["access_token"]  # two tokens, two records
    else:
        assert answers[0].json() == answers[1].json() and answers[0].json()["error"] == "invalid_grant"
    sent = [e for e in emu.journal("http.request") if e["data"]["path"] == "/oauth2/token"][-2:]
    assert [e["data"]["status"] for e in sent] == [r.status_code for r in answers]


async def test_json_body_is_refused_naming_the_form_encoding(client: httpx.AsyncClient, emu: Emulator) -> None:
    r = await client.post(emu.auth + "/oauth2/token", json={"grant_type": flow.JWT_BEARER, "assertion": "x"})
    assert r.status_code == 400 and r.json()["error"] == "invalid_request"
    assert "application/x-www-form-urlencoded" in r.json()["error_description"]


async def test_scope_may_narrow_but_not_widen(client: httpx.AsyncClient, emu: Emulator) -> None:
    reg = await flow.register(client, emu)
    narrow = await flow.exchange(client, emu, reg["identity"]["assertion"], scope="public:read")
    assert narrow.json()["scope"] == "public:read"
    wide = await flow.exchange(client, emu, reg["identity"]["assertion"], scope="public:read account:write")
    assert wide.status_code == 400 and wide.json()["error"] == "invalid_scope"


async def test_an_access_token_is_not_an_assertion_and_vice_versa(emu: Emulator) -> None:
    async with emu.client() as c:
        reg, token = await flow.access_token(c, emu)
        r = await flow.exchange(c, emu, token)
        assert r.json()["error"] == "invalid_grant" and "access token" in r.json()["error_description"]
        used_as_bearer = await flow.create_trial(c, emu, reg["identity"]["assertion"])
        assert used_as_bearer.status_code == 401 and "/oauth2/token" in used_as_bearer.json()["message"]


async def test_revocation(emu: Emulator) -> None:
    async with emu.client() as c:
        reg, token = await flow.access_token(c, emu)
        r = await c.post(emu.auth + "/oauth2/revoke", data={"token": token, "token_type_hint": "whatever"})
        assert r.status_code == 200 and r.content == b""
        refused = await flow.create_trial(c, emu, token)
        assert refused.status_code == 401 and "revoked" in refused.json()["message"]
        assert (await c.post(emu.auth + "/oauth2/revoke", data={"token": "unknown"})).status_code == 200
        missing = await c.post(emu.auth + "/oauth2/revoke", data={})
        assert missing.status_code == 400 and missing.json()["error"] == "invalid_request"
        # The assertion still mints a fresh token.
        fresh = (await flow.exchange(c, emu, reg["identity"]["assertion"])).json()["access_token"]
        assert (await flow.create_trial(c, emu, fresh)).status_code == 201


def test_a_checked_signature_is_remembered_for_the_same_key_only(tmp_path) -> None:
    """The signer remembers tokens it verified (an agent presents the same one many times): the claims it hands out
    are frozen, and a new key (a loaded snapshot's) forgets them all, so an old token is refused again."""
    from emulator.identity.signing import AgentClaims, InvalidToken, Signer

    signer = Signer.load_or_create(tmp_path / "a")
    sent = AgentClaims(
        iss="a", aud="a", sub="agent_reg_1", client_id="agent_reg_1", jti="at_1", iat=0, exp=1, registration_type="x"
    )
    token = signer.sign("at+jwt", sent)
    _, claims = signer.verify(token)
    with pytest.raises(AttributeError):
        claims.sub = "changed by a caller"  # pyright: ignore[reportAttributeAccessIssue]
    assert signer.verify(token) == ("at+jwt", sent)
    with pytest.raises(InvalidToken):
        signer.verify(token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB"))  # a bad signature never is
    Signer.load_or_create(tmp_path / "b")
    signer.reload(tmp_path / "b")
    with pytest.raises(InvalidToken):
        signer.verify(token)
