"""The exported proxy's other half: a `CONNECT` to any host outside the tunnel domain is relayed byte for byte.

The relay never looks inside (TLS to the target is the client's own), and is bounded: a connect timeout, an
idle timeout, a cap on relays open at once, and half-closed connections carried through (a client that shuts
its sending side still gets the rest of the answer). A target that refuses, cannot be resolved or reached is
answered 502, one that does not answer in time 504, each with a one-line reason. Every relay, refused or not,
is one `proxy.relay` event: host, port, route, status, outcome, bytes each way and duration, never a payload.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import msgspec

from emulator.core.egress import EgressPolicy, Upstream, strip_brackets
from emulator.core.payloads import ProxyRelay

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0
IDLE_TIMEOUT = 300.0
MAX_RELAYS = 256
_CHUNK = 64 * 1024
_MAX_HEAD = 8192

Reply = Callable[..., Awaitable[None]]  # (status, phrase, body, **headers)
OnEvent = Callable[[ProxyRelay], object]


class ProxyStatus(msgspec.Struct):
    """What `emulator status` shows of the proxy: the policy and the route, never an upstream's credentials."""

    egress: str
    upstream: str | None
    upstream_source: str | None  # the setting or environment variable that named the upstream
    no_proxy: str | None
    active_relays: int


class _Failed(Exception):
    def __init__(self, status: int, outcome: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.outcome = outcome
        self.reason = reason


_PHRASES = {403: "Forbidden", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


@dataclass
class _Record:
    host: str
    port: int
    route: str = "direct"  # or "upstream"
    status: int = 200
    outcome: str = "closed"
    reason: str | None = None
    bytes_up: int = 0  # client to target
    bytes_down: int = 0
    started: float = field(default_factory=time.monotonic)

    def payload(self) -> ProxyRelay:
        return ProxyRelay(
            host=self.host,
            port=self.port,
            route=self.route,
            status=self.status,
            outcome=self.outcome,
            reason=self.reason,
            bytes_up=self.bytes_up,
            bytes_down=self.bytes_down,
            duration_ms=round((time.monotonic() - self.started) * 1000, 1),
        )


class ForwardProxy:
    """Relays CONNECTs for hosts outside the tunnel domain, under the egress policy, directly or upstream."""

    def __init__(
        self,
        policy: EgressPolicy,
        upstream: Upstream | None = None,
        on_event: OnEvent | None = None,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
        max_relays: int = MAX_RELAYS,
    ) -> None:
        self.policy = policy
        self.upstream = upstream
        self._on_event = on_event
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self.max_relays = max_relays
        self.active = 0

    def status(self) -> ProxyStatus:
        upstream = self.upstream
        return ProxyStatus(
            egress=self.policy.describe(),
            upstream=upstream.display if upstream else None,
            upstream_source=upstream.source if upstream else None,
            no_proxy=upstream.no_proxy if upstream and upstream.no_proxy else None,
            active_relays=self.active,
        )

    def _emit(self, record: _Record) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(record.payload())
        except Exception:
            log.exception("proxy event handler failed")

    async def serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        host: str,
        port: int,
        rest: bytes,
        reply: Reply,
    ) -> None:
        """Answer the client's `CONNECT host:port` (already parsed) and relay until both sides are done."""
        record = _Record(host, port)
        try:
            if not self.policy.allows(host, port):
                raise _Failed(
                    403,
                    "denied",
                    f"the emulator's proxy_egress setting ({self.policy.describe()}) does not allow {host}:{port}; "
                    "change proxy_egress (emulator up --proxy-egress allow, or add the host to its list)",
                )
            if self.active >= self.max_relays:
                raise _Failed(503, "busy", f"{self.max_relays} relayed connections are open; try again")
            self.active += 1
            try:
                target_reader, target_writer = await self._open(record)
                try:
                    await reply(200, "Connection established")
                    await self._relay(reader, writer, target_reader, target_writer, rest, record)
                finally:
                    target_writer.close()
                    with contextlib.suppress(TimeoutError, OSError):
                        await asyncio.wait_for(target_writer.wait_closed(), 5)
            finally:
                self.active -= 1
        except asyncio.CancelledError:
            record.outcome = "shutdown"  # the emulator is stopping
            raise
        except _Failed as f:
            record.status, record.outcome, record.reason = f.status, f.outcome, f.reason
            headers = {"Retry_After": "1"} if f.status == 503 else {}
            await reply(f.status, _PHRASES[f.status], f.reason + "\n", **headers)
        finally:
            self._emit(record)

    # -- opening the connection -----------------------------------------------------------------------------

    async def _open(self, record: _Record) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        upstream = self.upstream
        if upstream is not None and not upstream.bypassed_for(record.host, record.port):
            record.route = "upstream"
            return await self._open_upstream(upstream, record)
        return await self._connect(strip_brackets(record.host), record.port, f"{record.host}:{record.port}")

    async def _connect(self, host: str, port: int, what: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            async with asyncio.timeout(self.connect_timeout):
                return await asyncio.open_connection(host, port, limit=_CHUNK)
        except TimeoutError:
            raise _Failed(504, "timeout", f"{what} did not answer within {self.connect_timeout:g} s") from None
        except socket.gaierror:
            raise _Failed(502, "unresolved", f"{what}: the name could not be resolved") from None
        except ConnectionRefusedError:
            raise _Failed(502, "refused", f"{what} refused the connection") from None
        except OSError as e:
            raise _Failed(502, "unreachable", f"{what} is unreachable: {e.strerror or e}") from None

    async def _open_upstream(
        self, upstream: Upstream, record: _Record
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        what = f"the upstream proxy {upstream.display} (from {upstream.source})"
        reader, writer = await self._connect(strip_brackets(upstream.host), upstream.port, what)
        target = f"{record.host}:{record.port}"
        head = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
        if upstream.authorization:
            head += f"Proxy-Authorization: {upstream.authorization}\r\n"
        try:
            writer.write(head.encode() + b"\r\n")
            async with asyncio.timeout(self.connect_timeout):
                await writer.drain()
                answer = await reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            writer.close()
            reason = f"{what} did not answer the CONNECT within {self.connect_timeout:g} s"
            raise _Failed(504, "timeout", reason) from None
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            writer.close()
            raise _Failed(502, "upstream_failed", f"{what} closed the connection without answering") from None
        status_line = answer.split(b"\r\n", 1)[0].decode("latin-1")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or parts[1] != "200":
            writer.close()
            shown = status_line[:120].strip() or "nothing"
            raise _Failed(502, "upstream_refused", f"{what} answered {shown} to CONNECT {target}")
        return reader, writer

    # -- the relay ------------------------------------------------------------------------------------------

    async def _relay(
        self,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
        target_reader: asyncio.StreamReader,
        target_writer: asyncio.StreamWriter,
        rest: bytes,
        record: _Record,
    ) -> None:
        """Copy both ways until both sides have finished sending, either side fails, or nothing moves for
        idle_timeout. A side that finishes sending (EOF) is passed on as a half-close, and the other
        direction goes on: an HTTP/1.0 client that shuts down its side still reads the whole answer."""
        loop = asyncio.get_running_loop()
        last = loop.time()

        async def pump(read: asyncio.StreamReader, write: asyncio.StreamWriter, up: bool, first: bytes) -> None:
            nonlocal last
            data = first
            while True:
                if data:
                    last = loop.time()
                    if up:
                        record.bytes_up += len(data)
                    else:
                        record.bytes_down += len(data)
                    write.write(data)
                    await write.drain()
                data = await read.read(_CHUNK)
                if not data:
                    break
            if write.can_write_eof() and not write.is_closing():
                with contextlib.suppress(OSError):
                    write.write_eof()

        pumps = {
            asyncio.create_task(pump(client_reader, target_writer, True, rest)),
            asyncio.create_task(pump(target_reader, client_writer, False, b"")),
        }
        pending: set[asyncio.Task[None]] = set(pumps)
        try:
            while pending:
                remaining = last + self.idle_timeout - loop.time()
                if remaining <= 0:
                    record.outcome = "idle_timeout"
                    record.reason = f"nothing was sent either way for {self.idle_timeout:g} s"
                    return
                done, pending = await asyncio.wait(pending, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    error = task.exception()
                    if error is not None:
                        record.outcome = "reset"
                        record.reason = f"{type(error).__name__}: {error}"[:200]
                        return
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
