"""`/v1` aliases, the `API-Version` header, and `Deprecation` / `Sunset` for a deprecated version."""

from __future__ import annotations

from email.utils import parsedate_to_datetime

import httpx
import pytest

from tests.conftest import Emulator


@pytest.mark.parametrize("path", ["/health", "/v1/health"])
async def test_health(client: httpx.AsyncClient, path: str) -> None:
    r = await client.get(path)
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    assert r.headers["API-Version"] == "1"
    assert "Deprecation" not in r.headers and "Sunset" not in r.headers


async def test_v1_prefix_serves_the_same_resources(client: httpx.AsyncClient) -> None:
    ask = await client.post("/v1/ask", json={"query": "views"})
    assert ask.status_code == 200 and ask.json()["query"] == "views"
    assert (await client.get("/v1/ask", params={"q": "views"})).status_code == 200
    ping = await client.post("/v1/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert ping.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert (await client.get("/v1/.well-known/mcp")).json()["protocol"] == "mcp"


async def test_the_trial_endpoint_has_no_v1_alias(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/api/v1/trial-orgs")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


async def test_api_version_1_is_served(client: httpx.AsyncClient) -> None:
    r = await client.get("/health", headers={"API-Version": "1"})
    assert r.status_code == 200 and r.headers["API-Version"] == "1"


@pytest.mark.parametrize("value", ["2", "0", "v1", "1.0", ""])
async def test_other_api_versions_are_400_naming_the_served_ones(client: httpx.AsyncClient, value: str) -> None:
    for path in ("/health", "/ask?q=x", "/mcp"):
        r = await client.get(path, headers={"API-Version": value})
        assert r.status_code == 400
        error = r.json()["error"]
        assert error["code"] == "bad_request" and error["status"] == 400
        assert "versions served are: 1" in error["message"]
        assert r.headers["API-Version"] == "1"


async def test_error_and_stream_answers_carry_api_version(client: httpx.AsyncClient) -> None:
    assert (await client.get("/nowhere")).headers["API-Version"] == "1"
    r = await client.get("/ask", params={"q": "x y"}, headers={"Accept": "text/event-stream"})
    assert r.headers["API-Version"] == "1"


async def test_cors_lets_browsers_read_the_headers(client: httpx.AsyncClient) -> None:
    r = await client.get("/ask", params={"q": "x y"}, headers={"Origin": "https://agent.example"})
    assert r.headers["access-control-allow-origin"] == "*"
    exposed = {h.strip() for h in r.headers["access-control-expose-headers"].split(",")}
    assert {"RateLimit", "RateLimit-Policy", "Retry-After", "API-Version", "Deprecation", "Sunset"} <= exposed


async def test_deprecated_version_sends_deprecation_and_sunset(start_emulator) -> None:
    e: Emulator = start_emulator("--no-watch", "--deprecate", "1=2026-12-01,2027-06-01T12:00:00Z")
    async with e.client() as c:
        for r in (await c.get("/health"), await c.get("/ask", params={"q": "x y"}), await c.get("/nope")):
            assert r.headers["Deprecation"] == "@1796083200"  # RFC 9745: an SF Date
            sunset = parsedate_to_datetime(r.headers["Sunset"])  # RFC 8594: an HTTP-date
            assert sunset.isoformat() == "2027-06-01T12:00:00+00:00"
            assert r.headers["Sunset"].endswith(" GMT")


async def test_deprecation_from_the_environment_and_the_file(start_emulator, tmp_path) -> None:
    e = start_emulator("--no-watch", env={"EMULATOR_DEPRECATIONS": "1=2026-12-01"})
    async with e.client() as c:
        r = await c.get("/health")
        assert r.headers["Deprecation"] == "@1796083200" and "Sunset" not in r.headers
    state = tmp_path / "with-file"
    state.mkdir()
    (state / "emulator.toml").write_text(
        '[deprecations.1]\ndeprecated_at = 2026-12-01T00:00:00Z\nsunset_at = "2027-01-01"\n'
    )
    e2 = start_emulator("--no-watch", state_dir=state)
    async with e2.client() as c:
        r = await c.get("/health")
        assert r.headers["Deprecation"] == "@1796083200"
        assert r.headers["Sunset"] == "Fri, 01 Jan 2027 00:00:00 GMT"
