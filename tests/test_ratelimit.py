"""The /ask rate limit: 10 per minute per client IP, on the emulator's clock, with the draft headers."""

from __future__ import annotations

import re

import httpx

from emulator.core.clock import Clock
from emulator.core.ratelimit import RateLimiter
from tests.conftest import Emulator

RATELIMIT = re.compile(r'^"ask";r=(\d+);t=(\d+)$')


def quota(r: httpx.Response) -> tuple[int, int]:
    """(remaining, reset) from a strictly parsed RateLimit header; also checks the policy header."""
    assert r.headers["RateLimit-Policy"] == '"ask";q=10;w=60'
    m = RATELIMIT.match(r.headers["RateLimit"])
    assert m, r.headers["RateLimit"]
    remaining, reset = int(m.group(1)), int(m.group(2))
    assert int(r.headers["Retry-After"]) == reset
    return remaining, reset


async def test_ten_requests_then_429(emu: Emulator) -> None:
    async with emu.client() as c:
        remaining = []
        for i in range(10):
            r = await (c.get("/ask", params={"q": f"tables {i}"}) if i % 2 else c.post("/ask", json={"q": "x y"}))
            assert r.status_code == 200
            remaining.append(quota(r)[0])
        assert remaining == list(range(9, -1, -1))
        r = await c.get("/ask", params={"q": "one too many"})
        assert r.status_code == 429
        assert quota(r) == (0, 60)  # the clock is frozen, so the window still has its full minute
        assert r.json() == {
            "error": {
                "code": "rate_limited",
                "message": "10 requests per minute per IP on /ask; retry in 60 s",
                "status": 429,
                "retryable": True,
            },
            "retry_after": 60,
        }
        assert (await c.post("/ask", json={"q": "post too"})).status_code == 429


async def test_bad_requests_count_too(emu: Emulator) -> None:
    async with emu.client() as c:
        for _ in range(10):
            r = await c.get("/ask")
            assert r.status_code == 400 and "RateLimit" in r.headers
        assert (await c.get("/ask", params={"q": "valid"})).status_code == 429


async def test_each_ip_has_its_own_window(emu: Emulator) -> None:
    async with emu.client() as a, emu.client() as b:
        for _ in range(10):
            await a.get("/ask", params={"q": "x y"})
        assert (await a.get("/ask", params={"q": "x y"})).status_code == 429
        r = await b.get("/ask", params={"q": "x y"})
        assert r.status_code == 200 and quota(r)[0] == 9


async def test_window_resets_when_the_clock_moves_past_it(emu: Emulator) -> None:
    async with emu.client() as c:
        for _ in range(10):
            await c.get("/ask", params={"q": "x y"})
        r = await c.get("/ask", params={"q": "x y"})
        assert r.status_code == 429
        emu.advance(45)
        r = await c.get("/ask", params={"q": "x y"})
        assert r.status_code == 429 and quota(r) == (0, 15)
        emu.advance(15)
        r = await c.get("/ask", params={"q": "x y"})
        assert r.status_code == 200 and quota(r) == (9, 60)


async def test_only_ask_is_limited(emu: Emulator) -> None:
    async with emu.client() as c:
        for _ in range(11):
            await c.get("/ask", params={"q": "x y"})
        for _ in range(12):
            assert (await c.get("/health")).status_code == 200
            r = await c.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert r.status_code == 200 and "RateLimit" not in r.headers


async def test_cors_preflight_does_not_count(emu: Emulator) -> None:
    async with emu.client() as c:
        for _ in range(12):
            r = await c.options(
                "/ask", headers={"Origin": "https://agent.example", "Access-Control-Request-Method": "POST"}
            )
            assert r.status_code == 204
            assert "RateLimit" in r.headers["access-control-expose-headers"]
        r = await c.get("/ask", params={"q": "x y"})
        assert quota(r)[0] == 9


async def test_limiter_window_math_on_a_frozen_clock() -> None:
    clock = Clock(frozen_at=1000.0)
    limiter = RateLimiter(clock, limit=2, window=60, policy="ask")
    assert limiter.hit("a").remaining == 1
    clock.advance(59.5)
    q = limiter.hit("a")
    assert (q.allowed, q.remaining, q.reset) == (True, 0, 1)
    assert not limiter.hit("a").allowed
    clock.advance(0.5)
    assert limiter.hit("a").allowed
    await limiter.sweep(clock.now() + 61)
    assert limiter.peek("a").remaining == 2
