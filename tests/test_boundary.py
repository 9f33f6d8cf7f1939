"""No web page can drive the emulator, and no credential outlives its revocation.

A page can make a browser send requests to loopback with its own `Origin`, or (DNS rebinding) with its own
name in `Host`, and send a form or `text/plain` POST without any preflight. Each origin refuses them in its
own error format, and what they would have changed stays as it was.
"""

from __future__ import annotations

import socket
import stat
import time

import httpx
import pytest

from emulator.hosted.logins import CLIENT_ID
from tests import agent_flow as flow
from tests.conftest import Emulator

EVIL = "http://evil.example"


def admin_clock(e: Emulator) -> float:
    return float(httpx.get(e.url + "/_emulator/clock").json()["now"])


async def test_a_foreign_host_is_refused_on_every_origin(client: httpx.AsyncClient, emu: Emulator) -> None:
    before = admin_clock(emu)
    bad = {"Host": "evil.example", "Origin": EVIL}
    mcp = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=bad)
    assert mcp.status_code == 403 and "Host 'evil.example' is not this emulator's" in mcp.json()["error"]["message"]
    moved = await client.post("/_emulator/clock", json={"advance": "48h"}, headers={"Host": "evil.example:8700"})
    assert moved.status_code == 403
    assert admin_clock(emu) == before  # nothing moved
    idp = await client.post(emu.auth + "/agent/identity", json={"type": "anonymous"}, headers=bad)
    assert idp.status_code == 403 and idp.json()["error"] == "forbidden"
    api = await client.post(emu.api, json={"operation_type": "list_orgs"}, headers={"Host": "evil.example"})
    assert api.status_code == 403 and api.text.startswith("Forbidden : the Host")
    # the loopback names and the configured host all work
    for host in ("localhost", "127.0.0.1", f"127.0.0.1:{emu.url.rsplit(':', 1)[1]}"):
        assert (await client.get("/health", headers={"Host": host})).status_code == 200


async def test_a_web_page_cannot_change_state(client: httpx.AsyncClient, emu: Emulator) -> None:
    page = {"Origin": EVIL}
    # a text/plain POST needs no preflight: refused for its Origin, and for not being JSON even without one
    body = b'{"trials_enabled": false}'
    r = await client.post("/_emulator/switches", content=body, headers={**page, "Content-Type": "text/plain"})
    assert r.status_code == 403 and "web page at 'http://evil.example'" in r.json()["error"]["message"]
    r = await client.post("/_emulator/switches", content=body, headers={"Content-Type": "text/plain"})
    assert r.status_code == 415
    assert (await client.get("/_emulator/switches")).json()["trials_enabled"] is True
    # claiming any trial for oneself, or reading the journal from a page
    r = await client.post("/_emulator/trials/claim", json={"org": "x", "email": "me@evil.example"}, headers=page)
    assert r.status_code == 403
    assert (await client.get("/_emulator/journal", headers=page)).status_code == 403
    # MCP requires an allowed Origin on every request
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    assert (await client.post("/mcp", json=call, headers=page)).status_code == 403
    assert (await client.post("/mcp", json=call, headers={"Origin": emu.url})).status_code == 200
    # the identity provider: JSON only, and no foreign page
    r = await client.post(
        emu.auth + "/agent/identity", content=b'{"type":"anonymous"}', headers={"Content-Type": "text/plain"}
    )
    assert r.status_code == 415 and r.json()["error"] == "unsupported_media_type"
    r = await client.post(emu.auth + "/agent/identity", json={"type": "anonymous"}, headers=page)
    assert r.status_code == 403
    # the control plane
    r = await client.post(emu.api, json={"operation_type": "list_orgs"}, headers=page)
    assert r.status_code == 403 and r.text.startswith("Forbidden : requests from the web page")


async def test_what_any_page_may_still_read(client: httpx.AsyncClient, emu: Emulator) -> None:
    page = {"Origin": EVIL}
    ask = await client.get("/ask", params={"query": "embedding index"}, headers=page)
    assert ask.status_code == 200 and ask.headers["access-control-allow-origin"] == "*"
    for path in ("/.well-known/jwks.json", "/.well-known/oauth-authorization-server"):
        r = await client.get(emu.auth + path, headers=page)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"


def test_allowed_origins_and_hosts_widen_the_boundary(start_emulator) -> None:
    e = start_emulator(env={"EMULATOR_ALLOWED_ORIGINS": "http://app.local:3000", "EMULATOR_ALLOWED_HOSTS": "emu.test"})
    with httpx.Client(base_url=e.url) as c:
        ok = c.post("/_emulator/switches", json={"trials_enabled": True}, headers={"Origin": "http://app.local:3000"})
        assert ok.status_code == 200
        assert c.get("/health", headers={"Host": "emu.test:8700"}).status_code == 200
        assert c.get("/health", headers={"Host": "other.test"}).status_code == 403


async def test_a_revoked_pxt_login_session_stops_working(client: httpx.AsyncClient, emu: Emulator) -> None:
    started = (await client.post(emu.auth + "/user_management/authorize/device", data={"client_id": CLIENT_ID})).json()
    approved = await client.post(
        "/_emulator/logins/approve", json={"user_code": started["user_code"], "email": "rev@example.org"}
    )
    assert approved.status_code == 200
    grant = {
        "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
        "device_code": started["device_code"],
        "client_id": CLIENT_ID,
    }
    session = (await client.post(emu.auth + "/user_management/authenticate", data=grant)).json()
    bearer = {"Authorization": f"Bearer {session['access_token']}"}
    assert (await client.post(emu.api, json={"operation_type": "list_orgs"}, headers=bearer)).status_code == 200
    revoked = await client.post(emu.auth + "/oauth2/revoke", data={"token": session["refresh_token"]})
    assert revoked.status_code == 200
    r = await client.post(emu.api, json={"operation_type": "list_orgs"}, headers=bearer)
    assert r.status_code == 401 and "signed out" in r.text  # the access token died with its session
    refresh = {"grant_type": "refresh_token", "refresh_token": session["refresh_token"], "client_id": CLIENT_ID}
    assert (await client.post(emu.auth + "/user_management/authenticate", data=refresh)).status_code == 400


async def test_a_secret_too_large_for_an_environment_is_refused(emu: Emulator) -> None:
    async with emu.client() as c:
        _, _, t = await flow.new_trial(c, emu)
        key = {"X-api-key": t["api_key"]}
        big = {"operation_type": "set_secret", "key": "BIG", "value": "x" * (64 * 1024 + 1)}
        r = await c.post(emu.api, json=big, headers=key)
        assert r.status_code == 400 and "at most 64 KiB" in r.text
        ok = await c.post(emu.api, json={**big, "value": "x" * 1000}, headers=key)
        assert ok.status_code == 200


@pytest.mark.parametrize("sig", ["%C3%A9", "forged"])
async def test_a_bad_blob_signature_is_403(client: httpx.AsyncClient, emu: Emulator, sig: str) -> None:
    r = await client.get(f"{emu.api}/blobs/{'a' * 64}?exp=99999999999&sig={sig}")
    assert r.status_code == 403 and "signature" in r.text


def test_state_is_private_to_the_user(emu: Emulator) -> None:
    assert stat.S_IMODE(emu.state_dir.stat().st_mode) == 0o700  # nothing inside is reachable by others
    for key in (emu.state_dir / "keys").iterdir():
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
    assert stat.S_IMODE((emu.state_dir / "tls").stat().st_mode) == 0o700


async def test_a_key_with_grants_acts_only_as_its_grants(emu: Emulator) -> None:
    async with emu.client() as c:
        _, _, t = await flow.new_trial(c, emu)
        org = t["org"]

        async def call(api_key: str, /, **body: object) -> httpx.Response:
            return await c.post(emu.api, json=body, headers={"X-api-key": api_key})

        made = await call(t["api_key"], operation_type="create_key", name="reader", grants=[f"access:pxt://{org}:main"])
        reader = made.json()["key"]["api_key"]
        assert (await call(reader, operation_type="get_db", db="main")).status_code == 200
        for body in (
            {"operation_type": "create_key", "name": "escalated"},
            {"operation_type": "set_secret", "key": "K", "value": "v"},
            {"operation_type": "delete_key", "name": "trial"},
            {"operation_type": "stop_db", "db": "main"},
            {"operation_type": "restart_service", "db": "main", "service_name": "ingest"},
        ):
            r = await call(reader, **body)
            assert r.status_code == 403 and "grants" in r.text, (body, r.text)
        listed = (await call(t["api_key"], operation_type="list_keys")).json()["keys"]
        assert {k["name"] for k in listed} == {"trial", "reader"}  # nothing was created or deleted
        # the tunnel asks the same question: a key for another database is refused before anything starts
        other = (
            await call(
                t["api_key"], operation_type="create_key", name="svc", grants=[f"access:pxt://{org}:main/services"]
            )
        ).json()["key"]["api_key"]
        assert (await call(other, operation_type="get_db", db="main")).status_code == 403


def test_idle_and_incomplete_connections_are_closed(start_emulator) -> None:
    e = start_emulator(env={"EMULATOR_HTTP_REQUEST_TIMEOUT": "1"})
    ports = [int(url.rsplit(":", 1)[1]) for url in (e.url, e.auth, e.api)]
    socks = []
    for port in ports:
        for first in (
            b"",
            b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n",
            b"POST /x HTTP/1.1\r\nContent-Length: 9\r\n\r\nab",
        ):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(first)
            socks.append(s)
    started = time.monotonic()
    for i, s in enumerate(socks):
        with s:
            got = b""
            while chunk := s.recv(4096):
                got += chunk
            # closed by the emulator; the first two are not answered at all (the third may get the app's
            # early refusal, but is not held either)
            assert got == b"" or i % 3 == 2, got
    assert time.monotonic() - started < 8
    # a complete request is still answered, and a live event stream is not cut
    assert httpx.get(e.url + "/health").status_code == 200
    with httpx.stream("GET", e.url + "/_emulator/events", timeout=10) as r:
        time.sleep(2.5)
        httpx.post(e.url + "/_emulator/clock", json={"advance": "1s"}).raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data:") and "clock.moved" in line:
                break
