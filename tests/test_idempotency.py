"""`Idempotency-Key` on POST /ask and POST /mcp."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

from tests.conftest import Emulator


def key() -> str:
    return str(uuid.uuid4())


async def test_retry_replays_the_first_answer_without_running_again(emu: Emulator) -> None:
    k = key()
    async with emu.client() as c:
        first = await c.post("/ask", json={"query": "embedding index"}, headers={"Idempotency-Key": k})
        assert first.status_code == 200 and "Idempotent-Replayed" not in first.headers
        asks_before = len(emu.journal("site.ask"))
        again = await c.post("/ask", json={"query": "embedding index"}, headers={"Idempotency-Key": k})
        assert again.status_code == 200
        assert again.content == first.content  # same query_id: not generated again
        assert again.headers["Idempotent-Replayed"] == "true"
        # A replay is not new work: it spends no quota.
        assert first.headers["RateLimit"] == again.headers["RateLimit"] == '"ask";r=9;t=60'
        replays = emu.journal("site.ask")[asks_before:]
        assert [e["data"]["replayed"] for e in replays] == [True]


async def test_draft_quoted_key_is_the_same_key(emu: Emulator) -> None:
    k = key()
    async with emu.client() as c:
        first = await c.post("/ask", json={"query": "views"}, headers={"Idempotency-Key": k})
        quoted = await c.post("/ask", json={"query": "views"}, headers={"Idempotency-Key": f'"{k}"'})
        assert quoted.content == first.content


async def test_same_key_with_a_different_body_is_422(emu: Emulator) -> None:
    k = key()
    async with emu.client() as c:
        await c.post("/ask", json={"query": "views"}, headers={"Idempotency-Key": k})
        r = await c.post("/ask", json={"query": "snapshots"}, headers={"Idempotency-Key": k})
        assert r.status_code == 422
        error = r.json()["error"]
        assert error["status"] == 422 and error["retryable"] is False
        assert "different request" in error["message"]


async def test_key_scope_is_per_client(emu: Emulator) -> None:
    k = key()
    async with emu.client() as a, emu.client() as b:
        ra = await a.post("/ask", json={"query": "views"}, headers={"Idempotency-Key": k})
        rb = await b.post("/ask", json={"query": "views"}, headers={"Idempotency-Key": k})
        assert ra.json()["query_id"] != rb.json()["query_id"]


@pytest.mark.parametrize("value", ["", '""', "k" * 257])
async def test_key_outside_1_to_256_characters_is_400(emu: Emulator, value: str) -> None:
    async with emu.client() as c:
        r = await c.post("/ask", json={"query": "views"}, headers={"Idempotency-Key": value})
        assert r.status_code == 400
        assert "1 to 256 characters" in r.json()["error"]["message"]


async def test_256_characters_is_accepted(emu: Emulator) -> None:
    async with emu.client() as c:
        r = await c.post("/ask", json={"query": "views"}, headers={"Idempotency-Key": "k" * 256})
        assert r.status_code == 200


async def test_replay_window_is_ten_minutes_of_emulator_time(emu: Emulator) -> None:
    k = key()
    async with emu.client() as c:
        first = await c.post("/ask", json={"query": "views"}, headers={"Idempotency-Key": k})
        emu.advance("9m59s")
        inside = await c.post("/ask", json={"query": "views"}, headers={"Idempotency-Key": k})
        assert inside.content == first.content
        emu.advance("1s")
        after = await c.post("/ask", json={"query": "views"}, headers={"Idempotency-Key": k})
        assert after.status_code == 200 and "Idempotent-Replayed" not in after.headers
        assert after.json()["query_id"] != first.json()["query_id"]


async def test_same_key_while_the_first_still_runs_is_409(emu: Emulator) -> None:
    k = key()
    admin = emu.admin()
    admin.post("/_emulator/faults", json={"hold": "/ask"}).raise_for_status()
    since = emu.journal()[-1]["seq"]
    async with emu.client() as c:
        first = asyncio.create_task(c.post("/ask", json={"query": "views"}, headers={"Idempotency-Key": k}))
        # Until the emulator says the first request is held (bounded by the read timeout).
        params = {"since": since, "kinds": "fault.held"}
        async with c.stream("GET", "/_emulator/events", params=params) as stream:
            async for line in stream.aiter_lines():
                if line.startswith("data: "):
                    break
        second = await c.post("/ask", json={"query": "views"}, headers={"Idempotency-Key": k})
        assert second.status_code == 409
        assert second.json()["error"]["retryable"] is True
        assert admin.post("/_emulator/faults/release", json={"path": "/ask"}).json()["released"] == 1
        done = await first
        assert done.status_code == 200
        third = await c.post("/ask", json={"query": "views"}, headers={"Idempotency-Key": k})
        assert third.content == done.content
    admin.close()


async def test_streamed_answers_are_not_stored(emu: Emulator) -> None:
    k = key()
    async with emu.client() as c:
        headers = {"Idempotency-Key": k, "Accept": "text/event-stream"}
        one = await c.post("/ask", json={"query": "views"}, headers=headers)
        two = await c.post("/ask", json={"query": "views"}, headers=headers)
        assert one.headers["content-type"].startswith("text/event-stream")
        assert "Idempotent-Replayed" not in two.headers
        begin = [next(line for line in r.text.split("\n") if line.startswith("data: ")) for r in (one, two)]
        assert begin[0] != begin[1]  # a fresh query_id each time


async def test_429_is_not_stored_so_the_client_can_retry(emu: Emulator) -> None:
    k = key()
    async with emu.client() as c:
        for _ in range(10):
            await c.get("/ask", params={"q": "x y"})
        limited = await c.post("/ask", json={"query": "views"}, headers={"Idempotency-Key": k})
        assert limited.status_code == 429
        emu.advance(60)
        r = await c.post("/ask", json={"query": "views"}, headers={"Idempotency-Key": k})
        assert r.status_code == 200 and "Idempotent-Replayed" not in r.headers


async def test_mcp_replays_the_first_jsonrpc_response(emu: Emulator) -> None:
    k = key()
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "search_docs", "arguments": {"query": "api keys"}},
    }
    async with emu.client() as c:
        first = await c.post("/mcp", json=call, headers={"Idempotency-Key": k})
        # Same message, other key order and spacing: the same request.
        same = await c.post(
            "/mcp",
            content=b'{"id":7, "params":{"arguments":{"query":"api keys"},"name":"search_docs"},'
            b'"method":"tools/call","jsonrpc":"2.0"}',
            headers={"Idempotency-Key": k, "Content-Type": "application/json"},
        )
        assert same.content == first.content and same.headers["Idempotent-Replayed"] == "true"
        other = await c.post("/mcp", json={**call, "id": 8}, headers={"Idempotency-Key": k})
        assert other.status_code == 422
        assert other.json()["error"]["code"] == -32600


async def test_replay_survives_a_restart(start_emulator, tmp_path) -> None:
    k = key()
    state = tmp_path / "persist"
    e = start_emulator("--no-watch", state_dir=state)
    async with e.client("127.0.9.9") as c:
        first = await c.post("/ask", json={"query": "views"}, headers={"Idempotency-Key": k})
    assert e.stop() == 0
    e2 = start_emulator("--no-watch", state_dir=state)
    async with httpx.AsyncClient(base_url=e2.url, transport=httpx.AsyncHTTPTransport(local_address="127.0.9.9")) as c:
        again = await c.post("/ask", json={"query": "views"}, headers={"Idempotency-Key": k})
    assert again.content == first.content and again.headers["Idempotent-Replayed"] == "true"
