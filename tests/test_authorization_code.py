"""The authorization code grant with PKCE on the identity provider: the person's sign-in page, codes, client ID
metadata documents, and the MCP SDK's OAuth clients (authorization code with a metadata document over TLS, and the
jwt-bearer `IdentityAssertionOAuthProvider`) completing against the emulator unmodified."""

from __future__ import annotations

import base64
import datetime
import hashlib
import http.server
import json
import re
import secrets
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import jwt
import pytest

from tests.agent_flow import register
from tests.conftest import Emulator

REDIRECT = "http://127.0.0.1:9/callback"  # never reached: the tests read the Location


class _Docs(http.server.BaseHTTPRequestHandler):
    docs: ClassVar[dict[str, bytes]] = {}

    def do_GET(self) -> None:
        body = self.docs.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body or b"{}")

    def log_message(self, format: str, *args: object) -> None:
        pass


class DocServer:
    """Client ID metadata documents served on loopback (http, or https with a CA of the test's own)."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        handler = type("Handler", (_Docs,), {"docs": {}})
        self.docs: dict[str, bytes] = handler.docs
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.scheme = "https" if tls else "http"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def client(self, name: str, redirect_uris: list[str], client_id: str | None = None) -> str:
        url = f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}/clients/{name}.json"
        doc = {"client_id": client_id or url, "client_name": f"Test {name}", "redirect_uris": redirect_uris}
        self.docs[f"/clients/{name}.json"] = json.dumps(doc).encode()
        return url

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def docs() -> Iterator[DocServer]:
    server = DocServer()
    yield server
    server.close()


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def hidden_fields(page: str) -> dict[str, str]:
    import html

    found = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', page)
    return {name: html.unescape(value) for name, value in found}


async def sign_in(c: httpx.AsyncClient, emu: Emulator, url: str, email: str, decision: str = "approve") -> str:
    """As the person's browser: open the page, post its form back (from the provider's own origin); the Location."""
    page = await c.get(url)
    assert page.status_code == 200, page.text
    assert "Sign in to Pixeltable Cloud" in page.text
    form = {**hidden_fields(page.text), "email": email, "decision": decision}
    r = await c.post(emu.auth + "/oauth2/authorize", data=form, headers={"Origin": emu.auth})
    assert r.status_code == 303, r.text
    return r.headers["location"]


def query(location: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


def authorize_url(emu: Emulator, cid: str, challenge: str, **extra: str) -> str:
    params = {
        "response_type": "code",
        "client_id": cid,
        "redirect_uri": REDIRECT,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "st-1",
        "resource": emu.url,
        **extra,
    }
    return emu.auth + "/oauth2/authorize?" + urlencode(params)


async def test_code_flow_end_to_end(client: httpx.AsyncClient, emu: Emulator, docs: DocServer) -> None:
    cid = docs.client("e2e", [REDIRECT])
    verifier, challenge = pkce()
    location = await sign_in(client, emu, authorize_url(emu, cid, challenge), "ada@example.com")
    back = query(location)
    assert location.startswith(REDIRECT) and back["state"] == "st-1" and back["code"].startswith("ac_")
    form = {
        "grant_type": "authorization_code",
        "code": back["code"],
        "code_verifier": verifier,
        "redirect_uri": REDIRECT,
        "client_id": cid,
        "resource": emu.url,
    }
    r = await client.post(emu.auth + "/oauth2/token", data=form)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["token_type"] == "Bearer" and answer["refresh_token"].startswith("prt_")
    keys = (await client.get(emu.auth + "/.well-known/jwks.json")).json()
    key = jwt.PyJWK(keys["keys"][0])
    claims = jwt.decode(
        answer["access_token"],
        key,
        algorithms=["ES256"],
        audience=emu.url,
        issuer=emu.auth,
        options={"verify_exp": False},
    )  # the emulator's clock is frozen in the past
    assert jwt.get_unverified_header(answer["access_token"])["typ"] == "at+jwt"
    assert claims["sub"].startswith("user_") and claims["email"] == "ada@example.com" and claims["client_id"] == cid
    assert set(claims["scope"].split()) == set(answer["scope"].split())

    # a code works once
    again = await client.post(emu.auth + "/oauth2/token", data=form)
    assert again.status_code == 400 and "already used" in again.json()["error_description"]

    # the refresh token rotates and is bound to its client
    other = await client.post(
        emu.auth + "/oauth2/token",
        data={"grant_type": "refresh_token", "refresh_token": answer["refresh_token"], "client_id": cid + "x"},
    )
    assert other.status_code == 400 and other.json()["error"] == "invalid_grant"
    refreshed = await client.post(
        emu.auth + "/oauth2/token",
        data={"grant_type": "refresh_token", "refresh_token": answer["refresh_token"], "client_id": cid},
    )
    assert refreshed.status_code == 200 and refreshed.json()["refresh_token"] != answer["refresh_token"]
    spent = await client.post(
        emu.auth + "/oauth2/token",
        data={"grant_type": "refresh_token", "refresh_token": answer["refresh_token"], "client_id": cid},
    )
    assert spent.status_code == 400 and spent.json()["error"] == "invalid_grant"

    # the site's agent endpoint says what the token is
    trial = await client.post("/api/v1/trial-orgs", headers={"Authorization": f"Bearer {answer['access_token']}"})
    assert trial.status_code == 401 and "person's access token" in trial.text
    kinds = [e["kind"] for e in emu.journal(kinds="idp.authorized")]
    assert kinds and kinds[-1] == "idp.authorized"


async def test_code_bindings(client: httpx.AsyncClient, emu: Emulator, docs: DocServer) -> None:
    cid = docs.client("bind", [REDIRECT])
    verifier, challenge = pkce()

    async def code() -> str:
        return query(await sign_in(client, emu, authorize_url(emu, cid, challenge), "bo@example.com"))["code"]

    base = {"grant_type": "authorization_code", "redirect_uri": REDIRECT, "client_id": cid, "code_verifier": verifier}
    cases = [
        ({"code_verifier": secrets.token_urlsafe(48)}, "code_verifier"),
        ({"client_id": cid + "?other"}, "another client_id"),
        ({"redirect_uri": REDIRECT + "2"}, "redirect_uri"),
        ({"resource": emu.url + "/mcp"}, "resource"),
    ]
    for change, words in cases:
        r = await client.post(emu.auth + "/oauth2/token", data={**base, "code": await code(), **change})
        assert r.status_code == 400 and words in r.json()["error_description"], r.text
    # short-lived on the emulator's clock
    late = await code()
    emu.advance(61)
    r = await client.post(emu.auth + "/oauth2/token", data={**base, "code": late})
    assert r.status_code == 400 and "expired" in r.json()["error_description"]


async def test_refusals(client: httpx.AsyncClient, emu: Emulator, docs: DocServer) -> None:
    cid = docs.client("refuse", [REDIRECT])
    _, challenge = pkce()
    # before the redirect URI is known good: the person sees a page, nothing goes to the redirect URI
    for bad, words in [
        ({"client_id": "my-app"}, "registers no clients"),
        ({"client_id": cid.replace("refuse", "missing")}, "answered 404"),
        ({"redirect_uri": "http://evil.example/cb"}, "not one the client"),
    ]:
        r = await client.get(authorize_url(emu, cid, challenge, **bad))
        assert r.status_code == 400 and words in r.text and "text/html" in r.headers["content-type"], r.text
    # after: to the client, with the state
    for bad, error in [
        ({"code_challenge_method": "plain"}, "invalid_request"),
        ({"code_challenge": ""}, "invalid_request"),
        ({"response_type": "token"}, "unsupported_response_type"),
        ({"scope": "admin:everything"}, "invalid_scope"),
        ({"resource": "https://elsewhere.example/"}, "invalid_target"),
    ]:
        r = await client.get(authorize_url(emu, cid, challenge, **bad))
        assert r.status_code == 303, r.text
        back = query(r.headers["location"])
        assert back["error"] == error and back["state"] == "st-1", back
    # the person denies: access_denied at the redirect URI
    denied = query(await sign_in(client, emu, authorize_url(emu, cid, challenge), "", decision="deny"))
    assert denied["error"] == "access_denied" and denied["state"] == "st-1" and "code" not in denied
    # a cross-site form post is refused by the boundary (Origin)
    page = await client.get(authorize_url(emu, cid, challenge))
    form = {**hidden_fields(page.text), "email": "eve@example.com", "decision": "approve"}
    r = await client.post(emu.auth + "/oauth2/authorize", data=form, headers={"Origin": "https://evil.example"})
    assert r.status_code == 403
    # a document whose client_id is not its own URL
    liar = docs.client("liar", [REDIRECT], client_id="https://someone-else.example/client.json")
    r = await client.get(authorize_url(emu, liar, challenge))
    assert r.status_code == 400 and "not its own URL" in r.text


# --- the MCP SDK's clients -----------------------------------------------------------------------------------


def _tls(tmp: Path) -> tuple[ssl.SSLContext, Path]:
    """A CA of the test's own and a certificate for 127.0.0.1 it signed: (the server's context, the CA's file)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    import ipaddress

    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_file, cert_file, key_file = tmp / "ca.pem", tmp / "cert.pem", tmp / "key.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return context, ca_file


class _Memory:
    """The SDK's TokenStorage, in memory."""

    def __init__(self) -> None:
        self.tokens: Any = None
        self.client: Any = None

    async def get_tokens(self) -> Any:
        return self.tokens

    async def set_tokens(self, tokens: Any) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> Any:
        return self.client

    async def set_client_info(self, client_info: Any) -> None:
        self.client = client_info


async def test_mcp_sdk_authorization_code_with_a_metadata_document_over_tls(
    tmp_path: Path, start_emulator: Any
) -> None:
    """The MCP SDK's OAuthClientProvider, unmodified: resource metadata, server metadata, the client's https
    metadata document (served with the test's own CA, which the emulator trusts through SSL_CERT_FILE), the
    person's page, the code exchanged with PKCE."""
    import httpx2
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata
    from pydantic import AnyUrl

    context, ca_file = _tls(tmp_path)
    server = DocServer(context)
    try:
        emu = start_emulator("--no-watch", env={"SSL_CERT_FILE": str(ca_file)})
        redirect = "http://127.0.0.1:9/mcp-callback"
        cid = server.client("mcp", [redirect])
        landed: dict[str, str] = {}

        async def redirect_handler(url: str) -> None:
            async with httpx.AsyncClient(timeout=20) as browser:
                landed.update(query(await sign_in(browser, emu, url, "sam@example.com")))

        async def callback_handler() -> AuthorizationCodeResult:
            return AuthorizationCodeResult(code=landed["code"], state=landed.get("state"))

        storage = _Memory()
        provider = OAuthClientProvider(
            server_url=emu.url + "/api/v1/trial-orgs",
            client_metadata=OAuthClientMetadata(redirect_uris=[AnyUrl(redirect)], client_name="Test mcp"),
            storage=storage,
            redirect_handler=redirect_handler,
            callback_handler=callback_handler,
            client_metadata_url=cid,
        )
        async with httpx2.AsyncClient(auth=provider, timeout=20) as c:
            r = await c.post(emu.url + "/api/v1/trial-orgs")
        assert storage.client.client_id == cid  # the metadata document's URL, no registration
        assert storage.tokens is not None and storage.tokens.refresh_token
        claims = jwt.decode(storage.tokens.access_token, options={"verify_signature": False})
        assert claims["client_id"] == cid and claims["sub"].startswith("user_") and claims["aud"] == emu.url
        # the retried call carried the person's token; the trial endpoint is an anonymous agent's, and says so
        assert r.status_code == 401 and "person's access token" in r.text
    finally:
        server.close()


async def test_mcp_sdk_authorization_code_reaches_the_control_plane(tmp_path: Path, start_emulator: Any) -> None:
    """The MCP SDK's OAuthClientProvider, unmodified, against the control plane: its first call is a 401 pointing at
    the control plane's resource metadata, the SDK discovers the issuer, the person signs in, and the retried call
    (list_orgs) is answered as the person's `pxt login` session would be. A token for another audience, or one the
    emulator's clock has expired, is refused."""
    import httpx2
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata
    from pydantic import AnyUrl

    from tests.test_enterprise_auth import grant, mint

    context, ca_file = _tls(tmp_path)
    server = DocServer(context)
    try:
        emu = start_emulator("--no-watch", env={"SSL_CERT_FILE": str(ca_file)})
        email = "cp@example.com"
        async with httpx.AsyncClient(timeout=20) as c:
            # the person has an organization already (made with the enterprise flow's token for the control plane)
            first = (await grant(c, emu, await mint(c, emu, email, resource=emu.api))).json()["access_token"]
            made = await c.post(
                emu.api,
                json={"operation_type": "create_org", "org": "cp-org"},
                headers={"Authorization": f"Bearer {first}"},
            )
            assert made.status_code == 200, made.text
        redirect = "http://127.0.0.1:9/mcp-callback"
        cid = server.client("mcp-cp", [redirect])
        landed: dict[str, str] = {}
        first_answers: list[tuple[int, str]] = []

        async def redirect_handler(url: str) -> None:
            assert query(url)["resource"] == emu.api  # RFC 8707: the control plane, from its metadata
            async with httpx.AsyncClient(timeout=20) as browser:
                landed.update(query(await sign_in(browser, emu, url, email)))

        async def callback_handler() -> AuthorizationCodeResult:
            return AuthorizationCodeResult(code=landed["code"], state=landed.get("state"))

        async def seen(response: httpx2.Response) -> None:
            if not first_answers:
                first_answers.append((response.status_code, response.headers.get("www-authenticate", "")))

        storage = _Memory()
        provider = OAuthClientProvider(
            server_url=emu.api,
            client_metadata=OAuthClientMetadata(redirect_uris=[AnyUrl(redirect)], client_name="Test mcp"),
            storage=storage,
            redirect_handler=redirect_handler,
            callback_handler=callback_handler,
            client_metadata_url=cid,
        )
        async with httpx2.AsyncClient(auth=provider, timeout=20, event_hooks={"response": [seen]}) as c2:
            r = await c2.post(emu.api, json={"operation_type": "list_orgs"})
        assert first_answers[0] == (401, f'Bearer resource_metadata="{emu.api}/.well-known/oauth-protected-resource"')
        assert r.status_code == 200, r.text
        assert [o["org"] for o in r.json()["orgs"]] == ["cp-org"]  # the person's organizations
        token = storage.tokens.access_token
        claims = jwt.decode(token, options={"verify_signature": False})
        assert claims["aud"] == emu.api and claims["client_id"] == cid and claims["email"] == email
        async with httpx.AsyncClient(timeout=20) as c:
            other = (await grant(c, emu, await mint(c, emu, email))).json()["access_token"]  # for the site
            refused = await c.post(
                emu.api, json={"operation_type": "list_orgs"}, headers={"Authorization": f"Bearer {other}"}
            )
            assert refused.status_code == 401 and "not issued for this control plane" in refused.text
            emu.advance(claims["exp"] - claims["iat"] + 1)
            expired = await c.post(
                emu.api, json={"operation_type": "list_orgs"}, headers={"Authorization": f"Bearer {token}"}
            )
            assert expired.status_code == 401 and "expired" in expired.text, expired.text
            assert 'error="invalid_token"' in expired.headers["www-authenticate"]
    finally:
        server.close()


async def test_mcp_sdk_identity_assertion_provider(client: httpx.AsyncClient, emu: Emulator) -> None:
    """The SDK's jwt-bearer client (SEP-990's leg 2), unmodified: it reads the issuer's metadata (which it refused
    before authorization_endpoint was there), sends the assertion to the token endpoint, and the call it guards
    succeeds with the token."""
    import httpx2
    from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider

    reg = await register(client, emu)
    assertion = reg["identity"]["assertion"]
    asked: list[tuple[str, str]] = []

    async def assertion_provider(audience: str, resource: str) -> str:
        asked.append((audience, resource))
        return assertion

    provider = IdentityAssertionOAuthProvider(
        server_url=emu.url + "/api/v1/trial-orgs",
        storage=_Memory(),
        client_id="sdk-client",
        client_secret="unused",
        issuer=emu.auth,
        assertion_provider=assertion_provider,
    )
    async with httpx2.AsyncClient(auth=provider, timeout=20) as c:
        r = await c.post(emu.url + "/api/v1/trial-orgs")
    assert asked and asked[0][0] == emu.auth
    assert r.status_code == 201, r.text
    assert r.json()["org_id"]
