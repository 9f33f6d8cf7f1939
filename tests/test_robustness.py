"""Bad input gets a clear 4xx in the surface's own format, never a 500, and the server keeps serving."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Emulator

DEEP = b"[" * 5000 + b"]" * 5000


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("POST", "/ask", DEEP, 400, "invalid_json"),
        ("POST", "/ask", b'{"query": "\xff\xfe"}', 400, "invalid_json"),
        ("POST", "/ask", b"null", 400, "bad_request"),
        ("POST", "/ask", b"\x00\x01", 400, "invalid_json"),
        ("POST", "/_emulator/clock", b'{"set": 1e300}', 400, "bad_request"),
        ("POST", "/_emulator/clock", b'{"advance": "99999999999d"}', 400, "bad_request"),
        ("POST", "/_emulator/clock", DEEP, 400, "bad_request"),
        ("POST", "/_emulator/faults", b'{"hold": 3}', 400, "bad_request"),
        ("POST", "/_emulator/faults", b'{"hold": "/ask", "count": 0}', 400, "bad_request"),
        ("GET", "/_emulator/journal?limit=x", b"", 400, "bad_request"),
        ("GET", "/docs/../../etc/passwd", b"", 404, "not_found"),
    ],
)
async def test_bad_input_is_a_clear_4xx(
    emu: Emulator, method: str, path: str, body: bytes, status: int, code: str
) -> None:
    async with emu.client() as c:
        r = await c.request(method, path, content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == status, r.text
        assert r.json()["error"]["code"] == code
        assert "Traceback" not in r.text
        assert (await c.get("/health")).status_code == 200


@pytest.mark.parametrize("body", [DEEP, b'{"jsonrpc": "2.0", "id": 1, "method": "\xff"}'])
async def test_mcp_bodies_that_do_not_decode_are_parse_errors(emu: Emulator, body: bytes) -> None:
    async with emu.client() as c:
        r = await c.post("/mcp", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and r.json()["error"]["code"] == -32700


async def test_oversized_body_is_413(client: httpx.AsyncClient) -> None:
    big = b"a" * (11 * 1024 * 1024)
    r = await client.post("/ask", content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["status"] == 413


async def test_undecodable_query_string_still_answers(client: httpx.AsyncClient) -> None:
    r = await client.get("/ask?query=%FF%FE")
    assert r.status_code == 200 and r.json()["results"] == []


async def test_fts_syntax_in_a_question_is_just_words(client: httpx.AsyncClient) -> None:
    r = await client.get("/ask", params={"query": '"NEAR(api keys) AND * OR -"'})
    assert r.status_code == 200 and r.json()["results"]
