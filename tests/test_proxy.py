"""The exported proxy relays the rest of the internet: hosts outside the tunnel domain, byte for byte.

Everything here is on loopback: origin servers and a stand-in upstream proxy of the test's own, in this
process, and real emulators started with the settings under test. A name such as `example.invalid` is only
ever sent to the stand-in upstream, never resolved.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Self

import pytest

from tests.conftest import Emulator, free_ports

TIMEOUT = 20.0
PAYLOAD = bytes(range(256)) * 2048  # 512 KiB of every byte value


class Origin:
    """A loopback TCP server of the test's own. `echo` reads to EOF, then sends everything back and closes (so
    it only answers a client whose half-close got through); `silent` accepts and never sends anything."""

    def __init__(self, mode: str = "echo") -> None:
        self.mode = mode
        self.connections = 0
        self.server: asyncio.Server | None = None
        self._held: list[asyncio.StreamWriter] = []

    async def start(self) -> Self:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.mode == "silent":
            self._held.append(writer)
            await reader.read()  # until the relay gives up on it
            writer.close()
            return
        data = await reader.read()
        writer.write(data)
        await writer.drain()
        writer.close()

    async def close(self) -> None:
        assert self.server is not None
        for writer in self._held:
            writer.close()
        self.server.close()
        await self.server.wait_closed()


class Upstream(Origin):
    """A stand-in corporate proxy: records each CONNECT head, then answers 200 and echoes (or, `stall`, never
    answers at all)."""

    def __init__(self, mode: str = "echo") -> None:
        super().__init__(mode)
        self.heads: list[str] = []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head.decode("latin-1"))
        if self.mode == "stall":
            self._held.append(writer)
            await reader.read()
            writer.close()
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await Origin._handle(self, reader, writer)


@pytest.fixture
async def origin() -> AsyncIterator[Origin]:
    o = await Origin().start()
    yield o
    await o.close()


async def open_through(proxy: str, target: str) -> tuple[bytes, asyncio.StreamReader, asyncio.StreamWriter]:
    """CONNECT target through the proxy URL (http://host:port): the proxy's answer head, and the stream."""
    host, _, port = proxy.removeprefix("http://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    async with asyncio.timeout(TIMEOUT):
        head = await reader.readuntil(b"\r\n\r\n")
    return head, reader, writer


async def refusal(proxy: str, target: str) -> tuple[bytes, bytes]:
    """A refused CONNECT: its head and its body (the proxy closes after the body)."""
    head, reader, writer = await open_through(proxy, target)
    async with asyncio.timeout(TIMEOUT):
        body = await reader.read()
    writer.close()
    return head, body


async def echo_through(proxy: str, target: str, payload: bytes = PAYLOAD) -> bytes:
    """Send payload through a relay to an echoing server, half-close, and read the answer to the end."""
    head, reader, writer = await open_through(proxy, target)
    assert head == b"HTTP/1.1 200 Connection established\r\n\r\n", head
    writer.write(payload)
    await writer.drain()
    writer.write_eof()  # the origin answers only once it has seen the end: the half-close must get through
    async with asyncio.timeout(TIMEOUT):
        answer = await reader.read()
    writer.close()
    return answer


async def relays(e: Emulator, count: int) -> list[dict[str, Any]]:
    """The first `count` proxy.relay events, waiting for them: a relay is journaled once it has ended."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        found = await asyncio.to_thread(e.journal, "proxy.relay")
        if len(found) >= count or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.05)


async def cli(*args: str) -> str:
    """What an `emulator` command prints (run off the event loop, which serves the test's own servers)."""
    cmd = [sys.executable, "-m", "emulator", *args]
    return (await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, check=True)).stdout


def emulator_with(start: Callable[..., Emulator], *args: str, **settings: Any) -> Emulator:
    """An emulator whose proxy settings come from the keyword arguments (as EMULATOR_* variables); the upstream
    is `none` unless given, whatever the machine's own environment says."""
    env = {"EMULATOR_UPSTREAM_PROXY": "none", "HTTPS_PROXY": "", "ALL_PROXY": "", "NO_PROXY": ""}
    env |= {f"EMULATOR_{name.upper()}": str(value) for name, value in settings.items()}
    return start(*args, env=env)


async def test_other_hosts_are_relayed_byte_for_byte(start_emulator: Callable[..., Emulator], origin: Origin) -> None:
    e = emulator_with(start_emulator)
    assert await echo_through(e.endpoints["proxy"], f"127.0.0.1:{origin.port}") == PAYLOAD
    assert await echo_through(e.endpoints["proxy"], f"localhost:{origin.port}", b"hello") == b"hello"
    first, second = await relays(e, 2)
    assert {k: first[k] for k in ("kind", "subject")} == {"kind": "proxy.relay", "subject": f"127.0.0.1:{origin.port}"}
    data = first["data"]
    assert data["host"] == "127.0.0.1" and data["port"] == origin.port
    assert (data["route"], data["status"], data["outcome"]) == ("direct", 200, "closed")
    assert data["bytes_up"] == len(PAYLOAD) and data["bytes_down"] == len(PAYLOAD)
    assert data["duration_ms"] >= 0
    assert second["data"]["host"] == "localhost" and second["data"]["bytes_up"] == 5
    # an event describes the connection, never its payload
    fields = {"host", "port", "route", "status", "outcome", "reason", "bytes_up", "bytes_down", "duration_ms"}
    assert set(data) == fields
    assert origin.connections == 2


async def test_upstream_proxy_from_the_environment(start_emulator: Callable[..., Emulator], origin: Origin) -> None:
    upstream = await Upstream().start()
    try:
        e = start_emulator(
            env={
                "EMULATOR_UPSTREAM_PROXY": "",
                "HTTPS_PROXY": f"http://user:p%40ss@127.0.0.1:{upstream.port}",
                "ALL_PROXY": "",
                "NO_PROXY": "skip.invalid",
            }
        )
        proxy = e.endpoints["proxy"]
        # A name nobody can resolve reaches the stand-in upstream as it was sent: the emulator never resolved it.
        assert await echo_through(proxy, "example.invalid:443") == PAYLOAD
        assert len(upstream.heads) == 1
        lines = upstream.heads[0].split("\r\n")
        assert lines[0] == "CONNECT example.invalid:443 HTTP/1.1"
        assert "Host: example.invalid:443" in lines
        assert "Proxy-Authorization: Basic dXNlcjpwQHNz" in lines  # user:p@ss, from the URL
        # Loopback targets and NO_PROXY's hosts go directly.
        assert await echo_through(proxy, f"127.0.0.1:{origin.port}", b"direct") == b"direct"
        head, body = await refusal(proxy, "skip.invalid:443")
        assert head.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
        assert body == b"skip.invalid:443: the name could not be resolved\n"
        # the tunnel domain never goes upstream either
        head, _ = await refusal(proxy, "nothere.pxt.test:443")
        assert head.startswith(b"HTTP/1.1 403 ")
        assert len(upstream.heads) == 1
        events = [ev["data"] for ev in await relays(e, 3)]
        assert [(d["host"], d["route"], d["status"]) for d in events] == [
            ("example.invalid", "upstream", 200),
            ("127.0.0.1", "direct", 200),
            ("skip.invalid", "direct", 502),
        ]
        status = e.admin().get("/_emulator/status").json()["proxy"]
        assert status["upstream"] == f"http://127.0.0.1:{upstream.port}"  # never the credentials
        assert status["upstream_source"] == "HTTPS_PROXY" and status["egress"] == "allow"
        out = await cli("status", "--url", e.url)
        assert f"egress       allow (other hosts through the proxy: via http://127.0.0.1:{upstream.port}" in out
        assert "p%40ss" not in out and "p@ss" not in out
    finally:
        await upstream.close()


async def test_upstream_that_refuses_or_stalls(start_emulator: Callable[..., Emulator]) -> None:
    stalled = await Upstream("stall").start()
    try:
        e = emulator_with(start_emulator, upstream_proxy=f"http://127.0.0.1:{stalled.port}", proxy_connect_timeout=1)
        t0 = time.monotonic()
        head, body = await refusal(e.endpoints["proxy"], "example.invalid:443")
        assert head.startswith(b"HTTP/1.1 504 Gateway Timeout\r\n")
        assert (
            body
            == (
                f"the upstream proxy http://127.0.0.1:{stalled.port} (from upstream_proxy) did not answer "
                "the CONNECT within 1 s\n"
            ).encode()
        )
        assert time.monotonic() - t0 < TIMEOUT
        [event] = await relays(e, 1)
        data = event["data"]
        assert (data["status"], data["outcome"], data["route"]) == (504, "timeout", "upstream")
    finally:
        await stalled.close()
    # an upstream that is not there: 502 with the reason
    [dead] = free_ports(1)
    e = emulator_with(start_emulator, upstream_proxy=f"127.0.0.1:{dead}")
    head, body = await refusal(e.endpoints["proxy"], "example.invalid:443")
    assert head.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
    assert body == f"the upstream proxy http://127.0.0.1:{dead} (from upstream_proxy) refused the connection\n".encode()


async def test_egress_deny_and_allow_list(start_emulator: Callable[..., Emulator], origin: Origin) -> None:
    other = await Origin().start()
    try:
        e = emulator_with(start_emulator, "--proxy-egress", "deny")
        head, body = await refusal(e.endpoints["proxy"], f"127.0.0.1:{origin.port}")
        assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n")
        assert (
            body
            == (
                f"the emulator's proxy_egress setting (deny) does not allow 127.0.0.1:{origin.port}; "
                "change proxy_egress (emulator up --proxy-egress allow, or add the host to its list)\n"
            ).encode()
        )
        assert origin.connections == 0
        [event] = await relays(e, 1)
        assert (event["data"]["status"], event["data"]["outcome"]) == (403, "denied")

        policy = f"127.0.0.1:{origin.port},*.example.invalid"
        e = emulator_with(start_emulator, "--proxy-egress", policy)
        assert await echo_through(e.endpoints["proxy"], f"127.0.0.1:{origin.port}", b"allowed") == b"allowed"
        head, body = await refusal(e.endpoints["proxy"], f"127.0.0.1:{other.port}")
        assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n") and b"proxy_egress" in body
        assert other.connections == 0
        assert e.admin().get("/_emulator/status").json()["proxy"]["egress"] == policy
    finally:
        await other.close()


async def test_refused_target_idle_timeout_and_cap(start_emulator: Callable[..., Emulator]) -> None:
    silent = await Origin("silent").start()
    [dead] = free_ports(1)
    try:
        e = emulator_with(start_emulator, proxy_idle_timeout=1, proxy_max_relays=1)
        proxy = e.endpoints["proxy"]
        head, body = await refusal(proxy, f"127.0.0.1:{dead}")
        assert head.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
        assert body == f"127.0.0.1:{dead} refused the connection\n".encode()

        head, reader, writer = await open_through(proxy, f"127.0.0.1:{silent.port}")
        assert head.startswith(b"HTTP/1.1 200 ")
        # the one relay allowed is open: the next is 503 with Retry-After
        busy, body = await refusal(proxy, f"127.0.0.1:{silent.port}")
        assert busy.startswith(b"HTTP/1.1 503 Service Unavailable\r\n") and b"\r\nRetry-After: 1\r\n" in busy
        assert body == b"1 relayed connections are open; try again\n"
        # nothing moves either way: the relay closes by itself
        async with asyncio.timeout(TIMEOUT):
            assert await reader.read() == b""
        writer.close()
        events = [ev["data"] for ev in await relays(e, 3)]
        assert [(d["status"], d["outcome"]) for d in events] == [(502, "refused"), (503, "busy"), (200, "idle_timeout")]
        # and the slot is free again
        head, _, writer = await open_through(proxy, f"127.0.0.1:{silent.port}")
        assert head.startswith(b"HTTP/1.1 200 ")
        writer.close()
    finally:
        await silent.close()


def test_an_upstream_pointing_at_the_emulator_itself_is_refused(tmp_path: Any) -> None:
    site, auth, api, tunnel, s3 = free_ports(5)
    cmd = [sys.executable, "-m", "emulator", "up", "--runtime", "process", "--state-dir", str(tmp_path)]
    cmd += ["--site-port", site, "--auth-port", auth, "--api-port", api, "--tunnel-port", tunnel, "--s3-port", s3]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HTTPS_PROXY": f"http://127.0.0.1:{tunnel}"}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 1
    assert r.stderr.strip() == (
        f"emulator: HTTPS_PROXY=http://127.0.0.1:{tunnel} is this emulator's own proxy (a shell set up with "
        "`emulator env` exports it): unset it where the emulator starts, or set upstream_proxy = none "
        "(EMULATOR_UPSTREAM_PROXY=none) to relay directly"
    )
    assert not (tmp_path / "endpoints.json").exists()


def test_bad_proxy_settings_are_refused(tmp_path: Any) -> None:
    def up(*args: str, **env: str) -> str:
        cmd = [sys.executable, "-m", "emulator", "up", "--state-dir", str(tmp_path), *args]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", **env})
        assert r.returncode != 0
        return r.stderr.strip()

    assert "proxy_egress: 'exa mple.com' is not a host pattern" in up("--proxy-egress", "exa mple.com")
    assert "upstream_proxy: socks5:// proxies are not supported" in up("--upstream-proxy", "socks5://127.0.0.1:1080")
    assert "ALL_PROXY: socks5:// proxies are not supported" in up(ALL_PROXY="socks5://127.0.0.1:1080")
    assert "proxy_idle_timeout must be more than 0" in up(EMULATOR_PROXY_IDLE_TIMEOUT="0")


async def test_events_command_shows_relays(start_emulator: Callable[..., Emulator], origin: Origin) -> None:
    e = emulator_with(start_emulator)
    assert await echo_through(e.endpoints["proxy"], f"127.0.0.1:{origin.port}", b"x") == b"x"
    await relays(e, 1)
    out = await cli("events", "--url", e.url, "--kinds", "proxy")
    assert f"proxy.relay [127.0.0.1:{origin.port}] host=127.0.0.1 port={origin.port} route=direct status=200" in out
    assert "bytes_up=1 bytes_down=1" in out
    event = json.loads(await cli("events", "--url", e.url, "--kinds", "proxy", "--json"))
    assert event["kind"] == "proxy.relay" and event["data"]["outcome"] == "closed"
