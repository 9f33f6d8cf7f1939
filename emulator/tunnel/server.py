"""The database tunnel: the emulator's stand-in for Pixeltable Cloud's TLS sidecar, on one loopback port.

The real client opens `<org>-<db>.<domain>:<port>`, either directly or through the HTTP proxy in HTTPS_PROXY
(`CONNECT host:port`), does TLS with SNI and hostname verification, sends `PXT/1.0 CONNECT <org>/<db>` with
`Authorization: Bearer <credential>`, waits for `PXT/1.0 200`, and then speaks HTTP/1.1 to the database's
server over the same stream. This port serves both ways in:

* a plaintext `CONNECT` is answered as a proxy would. For `<label>.<domain>:<public_port>` the same connection
  then turns into the TLS endpoint in-process (tunnel hosts never leave this process); any other host is
  relayed by the forward proxy (`forward.py`) under the egress policy, so a shell with HTTPS_PROXY pointed
  here still reaches the rest of the internet; but a canary host (core/watch.py), which is answered here
  (`canary.py`), never relayed. A plain HTTP request is refused (405), but to a canary host;
* a connection whose first byte starts a TLS record (a ClientHello) is the TLS endpoint directly.

Every step before the relay is bounded in size and time. The relay copies bytes both ways, with
backpressure, until either side ends, then closes both.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import socket
import ssl
import urllib.parse
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from emulator.core.address import Address
from emulator.core.egress import EgressPolicy, valid_host
from emulator.core.faults import Verdict
from emulator.core.payloads import TunnelClosed, TunnelConnected, TunnelRefused
from emulator.core.watch import Watch
from emulator.tunnel import canary
from emulator.tunnel.forward import ForwardProxy
from emulator.tunnel.tlsfiles import TlsFiles, normalize_domain

FaultHook = Callable[[str, str], Awaitable[Verdict | None]]
log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 30.0  # the client's own handshake timeout (TLS + PXT/1.0)
MAX_HEAD = 8192  # a proxy request or a PXT/1.0 handshake, blank line included
AUTHORIZE_TIMEOUT = 30.0
BACKEND_CONNECT_TIMEOUT = 10.0  # the client's own TCP connect timeout
CLOSE_TIMEOUT = 5.0
_CHUNK = 64 * 1024
_TLS_HANDSHAKE_RECORD = 0x16
_MAX_REASON = 300

_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_PXT_CONNECT = re.compile(r"PXT/1\.0 CONNECT ([A-Za-z0-9_-]{1,100})/([A-Za-z0-9_-]{1,100})")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


@dataclass(frozen=True)
class Route:
    """Where the database's server listens, and who was let in (for logs and events)."""

    address: Address
    subject: str


@dataclass(frozen=True)
class Refusal:
    """A refused handshake: `PXT/1.0 <status> <reason>`. The reason is a sentence without its final period (the
    client appends one); control characters in it are replaced by spaces on the wire."""

    status: int
    reason: str

    def __post_init__(self) -> None:
        if not 400 <= self.status <= 599:
            raise ValueError(f"a refusal needs a 4xx or 5xx status, not {self.status}")


Authorize = Callable[[str, str, str], Awaitable[Route | Refusal]]  # (org, db, credential)
OnEvent = Callable[[TunnelConnected | TunnelClosed | TunnelRefused], object]


class _Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(status, reason)
        self.status = status
        self.reason = reason


class _HeadTooLarge(Exception):
    pass


def _clean(reason: str) -> str:
    """One line of printable text: a reason goes on a status line, where CR/LF would end it early."""
    text = _CONTROL.sub(" ", reason).strip()[:_MAX_REASON]
    return text or "refused"


async def _read_head(read: Callable[[int], Awaitable[bytes]], buf: bytes) -> tuple[bytes, bytes] | None:
    """The bytes before the first blank line (CRLF CRLF) and whatever followed them; None if the peer closed
    first. Raises _HeadTooLarge once the head cannot fit in MAX_HEAD, so memory stays bounded."""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            if end + 4 > MAX_HEAD:
                raise _HeadTooLarge
            return buf[:end], buf[end + 4 :]
        if len(buf) >= MAX_HEAD:
            raise _HeadTooLarge
        chunk = await read(MAX_HEAD)
        if not chunk:
            return None
        buf += chunk


class _TlsStream:
    """Server-side TLS over an accepted connection, driven through memory BIOs.

    Not StreamWriter.start_tls: telling a ClientHello from a plaintext CONNECT means reading the first bytes, and
    start_tls cannot be handed bytes that were already read; a memory BIO can (asyncio's own TLS transport is
    built the same way). It is also independent of the event loop implementation (uvloop included).
    """

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ctx: ssl.SSLContext, initial: bytes
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        if initial:
            self._incoming.write(initial)
        self.obj = ctx.wrap_bio(self._incoming, self._outgoing, server_side=True)

    def _push(self) -> None:
        """Hand whatever TLS produced to the transport, synchronously, so records leave in the order made."""
        data = self._outgoing.read()
        if data and not self._writer.is_closing():
            self._writer.write(data)

    async def _pull(self) -> None:
        data = await self._reader.read(_CHUNK)
        if data:
            self._incoming.write(data)
        else:
            self._incoming.write_eof()

    async def handshake(self) -> None:
        while True:
            try:
                self.obj.do_handshake()
            except ssl.SSLWantReadError:
                self._push()
                if self._incoming.eof:
                    raise ConnectionError("the client closed the connection during the TLS handshake") from None
                await self._writer.drain()
                await self._pull()
            except ssl.SSLError:
                self._push()  # the alert that tells the client why
                raise
            else:
                self._push()
                await self._writer.drain()
                return

    async def read(self, n: int) -> bytes:
        """Up to n bytes of plaintext; b"" once the client has closed (with or without close_notify)."""
        while True:
            try:
                data = self.obj.read(n)
            except ssl.SSLWantReadError:
                self._push()
                if self._incoming.eof:
                    return b""
                await self._pull()
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                # http.client closes without close_notify: an abrupt EOF is the normal end of a tunnel
                return b""
            self._push()  # reading can answer post-handshake messages
            return data

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self.obj.write(view) :]
        self._push()
        await self._writer.drain()

    def close_notify(self) -> None:
        """Queue TLS close_notify; the caller then closes the transport, which flushes it."""
        with contextlib.suppress(ssl.SSLError, OSError, ValueError):
            self.obj.unwrap()  # raises SSLWantReadError after writing close_notify, as the peer's is not awaited
        self._push()


class _Tunnel:
    """Bookkeeping of one accepted connection, for events and logs."""

    def __init__(self, via: str) -> None:
        self.via = via
        self.org: str | None = None
        self.db: str | None = None
        self.bytes_up = 0  # client to database, after the handshake
        self.bytes_down = 0


class TunnelServer:
    """One loopback port that is both the tunnel's TLS endpoint and the HTTP proxy in front of it."""

    def __init__(
        self,
        ca: TlsFiles,
        domain: str,
        public_port: int,
        authorize: Authorize,
        on_event: OnEvent | None = None,
        forward: ForwardProxy | None = None,
        fault: FaultHook | None = None,
        watch: Watch | None = None,
    ) -> None:
        self.domain = normalize_domain(domain)
        self.watch = watch  # the values scanned for and the canary hosts answered here (an evaluation's)
        self.fault = fault  # (method, "/ORG/DB") → a fault's verdict for this session, if a rule fires
        # Hosts outside the tunnel domain: relayed under the forward proxy's policy (none relayed by default).
        self.forward = forward or ForwardProxy(EgressPolicy("deny"))
        if self.domain != ca.domain:
            # the leaf would not cover the tunnel hosts, and every client would fail hostname verification
            raise ValueError(f"the CA's certificate is for {ca.domain}, not {self.domain}")
        self.public_port = public_port
        self._authorize = authorize
        self._on_event = on_event
        self._server_names: weakref.WeakKeyDictionary[ssl.SSLObject, str] = weakref.WeakKeyDictionary()
        self.use_ca(ca)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False

    async def start(self, sock: socket.socket) -> None:
        """Serve on an already-bound socket (listen() is called here if it was not yet)."""
        if self._server is not None:
            raise RuntimeError("the tunnel server is already started")
        self._server = await asyncio.start_server(self._handle, sock=sock, limit=_CHUNK)

    async def close(self) -> None:
        """Stop accepting, end every open tunnel, and wait for them, at most CLOSE_TIMEOUT seconds each step."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), CLOSE_TIMEOUT)

    # -- plumbing -------------------------------------------------------------------------------------------

    def use_ca(self, ca: TlsFiles) -> None:
        """Serve the leaf `ca` issued (at start, and when a loaded snapshot brought its own CA)."""
        self._ca = ca
        self._canary_contexts: dict[str, ssl.SSLContext] = {}
        context = ca.server_context()
        context.sni_callback = self._remember_server_name
        # the client never resumes sessions (a new context per tunnel), so tickets would only be extra records
        context.num_tickets = 0
        self._context = context

    def _remember_server_name(self, obj: ssl.SSLObject, name: str | None, ctx: ssl.SSLContext) -> None:
        # a server-side SSLObject does not expose the SNI it was sent; this callback is the only place to see it
        if name is not None:
            self._server_names[obj] = name

    def _emit(self, event: TunnelConnected | TunnelClosed | TunnelRefused) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(event)
        except Exception:
            log.exception("tunnel event handler failed on %s", event.KIND)

    def _refused(self, tunnel: _Tunnel, status: int, reason: str, target: str | None = None) -> None:
        log.info("tunnel refused (%s) %s/%s: %s %s", tunnel.via, tunnel.org, tunnel.db, status, reason)
        self._emit(
            TunnelRefused(org=tunnel.org, db=tunnel.db, status=status, reason=reason, via=tunnel.via, target=target)
        )

    def _tunnel_label(self, host: str) -> str | None:
        """The single label before the domain in host, or None when host is not a tunnel host of this domain."""
        host = host.lower().rstrip(".")
        suffix = "." + self.domain
        if not host.endswith(suffix):
            return None
        label = host[: -len(suffix)]
        return label if _LABEL.fullmatch(label) else None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if self._closing or task is None:
            writer.transport.abort()
            return
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            pass  # close() ends the connection; a cancelled handler task would be logged as an error by asyncio
        except Exception:
            log.exception("tunnel connection from %s failed", writer.get_extra_info("peername"))
        finally:
            self._tasks.discard(task)
            writer.close()
            try:
                await asyncio.wait_for(writer.wait_closed(), CLOSE_TIMEOUT)
            except (TimeoutError, OSError, ssl.SSLError):
                writer.transport.abort()  # a peer that does not read keeps no buffer alive past the timeout

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT):
                first = await reader.read(MAX_HEAD)
        except (TimeoutError, OSError):
            return
        if not first:
            return
        if first[0] == _TLS_HANDSHAKE_RECORD:
            await self._serve_tls(reader, writer, first, _Tunnel("direct"))
            return
        after_connect = await self._serve_proxy(reader, writer, first)
        if after_connect is not None:
            await self._serve_tls(reader, writer, after_connect, _Tunnel("proxy"))

    # -- the proxy ------------------------------------------------------------------------------------------

    async def _http_reply(
        self, writer: asyncio.StreamWriter, status: int, phrase: str, body: str = "", **hdr: str
    ) -> None:
        data = body.encode()
        head = f"HTTP/1.1 {status} {phrase}\r\n"
        if status != 200:
            head += f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(data)}\r\nConnection: close\r\n"
        head += "".join(f"{name.replace('_', '-')}: {value}\r\n" for name, value in hdr.items())
        writer.write(head.encode() + b"\r\n" + data)
        with contextlib.suppress(OSError):
            await writer.drain()

    async def _serve_proxy(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, first: bytes
    ) -> bytes | None:
        """Answer a proxy request; after a 200 to an allowed CONNECT, the bytes already read past it (to go to TLS),
        else None (the connection is done)."""
        tunnel = _Tunnel("proxy")
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT):
                got = await _read_head(reader.read, first)
        except TimeoutError:
            await self._http_reply(writer, 408, "Request Timeout", "the proxy request did not arrive in time\n")
            return None
        except _HeadTooLarge:
            await self._http_reply(writer, 400, "Bad Request", "the proxy request is too large\n")
            return None
        except OSError:
            return None
        if got is None:
            return None
        head, rest = got
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        well_formed = (
            len(parts) == 3
            and _TOKEN.fullmatch(parts[0]) is not None
            and parts[2] in ("HTTP/1.1", "HTTP/1.0")
            and all(":" in line for line in lines[1:])
        )
        if not well_formed:
            self._refused(tunnel, 400, "malformed proxy request")
            await self._http_reply(writer, 400, "Bad Request", "malformed proxy request\n")
            return None
        method, target = parts[0], parts[1]
        watch = self.watch if self.watch is not None and (self.watch.values or self.watch.canary_hosts) else None
        if method != "CONNECT":
            if watch is not None:  # a plain request carries its URL, headers and body in clear
                host = urllib.parse.urlsplit(target).hostname or ""
                if watch.is_canary(host):
                    port = urllib.parse.urlsplit(target).port or 80
                    await canary.answer(watch, host, port, "http", lines, rest, reader.read, self._writer_of(writer))
                    return None
                path = urllib.parse.urlsplit(target).path
                seen = [("host", host.encode()), ("path", path.encode()), ("query", target.partition("?")[2].encode())]
                seen += [("header", "\r\n".join(lines[1:]).encode("latin-1")), ("body", rest)]
                watch.scan("proxy", method, path, seen, host=host)
            self._refused(tunnel, 405, f"{method} is not supported by this proxy", target=target[:200])
            await self._http_reply(writer, 405, "Method Not Allowed", "this proxy only does CONNECT\n", Allow="CONNECT")
            return None
        host, sep, port_text = target.rpartition(":")
        if not sep or not host or not (port_text.isascii() and port_text.isdigit()) or len(port_text) > 5:
            self._refused(tunnel, 400, "malformed CONNECT target", target=target[:200])
            await self._http_reply(writer, 400, "Bad Request", "the CONNECT target must be host:port\n")
            return None
        if not valid_host(host):
            self._refused(tunnel, 400, "malformed CONNECT target", target=target[:200])
            await self._http_reply(writer, 400, "Bad Request", "the CONNECT target must be host:port\n")
            return None
        port = int(port_text)
        name = host.lower().rstrip(".")
        if watch is not None:
            watch.scan("proxy", "CONNECT", "", [("host", host.encode())], host=host)
            if watch.is_canary(name) and name != self.domain and not name.endswith("." + self.domain):
                await self._http_reply(writer, 200, "Connection established")
                await self._serve_canary(reader, writer, watch, host, port, rest)
                return None
        if name != self.domain and not name.endswith("." + self.domain):
            reply = functools.partial(self._http_reply, writer)
            await self.forward.serve(reader, writer, host, port, rest, reply)
            return None
        if self._tunnel_label(host) is None or port != self.public_port:
            # the tunnel domain never leaves this process: only its database hosts, on this port, exist
            self._refused(tunnel, 403, "no such tunnel host", target=target[:200])
            body = f"in {self.domain} this proxy only reaches <org>-<db>.{self.domain}:{self.public_port}\n"
            await self._http_reply(writer, 403, "Forbidden", body)
            return None
        await self._http_reply(writer, 200, "Connection established")
        return rest

    @staticmethod
    def _writer_of(writer: asyncio.StreamWriter) -> Callable[[bytes], Awaitable[None]]:
        async def write(data: bytes) -> None:
            writer.write(data)
            await writer.drain()

        return write

    async def _serve_canary(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        watch: Watch,
        host: str,
        port: int,
        rest: bytes,
    ) -> None:
        """End the tunnel's TLS here, with a certificate for `host`, and answer its request (canary.py)."""
        name = host.lower().rstrip(".")
        context = self._canary_contexts.get(name)
        if context is None:
            context = await asyncio.to_thread(canary.context_for, self._ca, name)
            self._canary_contexts[name] = context
        tls = _TlsStream(reader, writer, context, rest)
        try:
            try:
                async with asyncio.timeout(HANDSHAKE_TIMEOUT):
                    await tls.handshake()
                    got = await _read_head(tls.read, b"")
            except (TimeoutError, _HeadTooLarge, ssl.SSLError, OSError) as e:
                log.info("canary %s: no request through the tunnel: %s", name, type(e).__name__)
                got = None
            if got is None:
                canary.tunnel_unused(watch, name, port)
                return
            head, after = got
            await canary.answer(
                watch, name, port, "https", head.decode("latin-1").split("\r\n"), after, tls.read, tls.write
            )
        finally:
            tls.close_notify()

    # -- the TLS endpoint -----------------------------------------------------------------------------------

    async def _serve_tls(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, initial: bytes, tunnel: _Tunnel
    ) -> None:
        tls = _TlsStream(reader, writer, self._context, initial)
        try:
            await self._serve_handshake(tls, tunnel)
        finally:
            tls.close_notify()

    async def _refuse_pxt(self, tls: _TlsStream, tunnel: _Tunnel, status: int, reason: str) -> None:
        reason = _clean(reason)
        self._refused(tunnel, status, reason)
        with contextlib.suppress(OSError, ssl.SSLError):
            await tls.write(f"PXT/1.0 {status} {reason}\r\n\r\n".encode())

    async def _serve_handshake(self, tls: _TlsStream, tunnel: _Tunnel) -> None:
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT):
                await tls.handshake()
                got = await _read_head(tls.read, b"")
        except _HeadTooLarge:
            await self._refuse_pxt(tls, tunnel, 400, f"the handshake is larger than {MAX_HEAD} bytes")
            return
        except TimeoutError:
            log.info("tunnel handshake (%s) timed out", tunnel.via)
            return
        except (ssl.SSLError, OSError) as e:
            # a client that does not trust the certificate, or that is not speaking TLS, ends up here
            log.info("tunnel TLS handshake (%s) failed: %s", tunnel.via, e)
            return
        if got is None:
            return
        head, rest = got
        server_name = self._server_names.pop(tls.obj, None)
        try:
            org, db, credential = self._parse_handshake(head, tunnel)
            verdict = await self.fault("CONNECT", f"/{org}/{db}") if self.fault is not None else None
            if verdict is not None:
                if verdict.drop:
                    return  # closed without an answer
                raise _Refused(verdict.status or 503, verdict.message)
            expected = f"{org}-{db}.{self.domain}".lower()
            if server_name is None or server_name.lower().rstrip(".") != expected:
                raise _Refused(403, f"the TLS server name {server_name or '(none)'} is not the host of {org}/{db}")
            decision = await self._decide(org, db, credential)
            if isinstance(decision, Refusal):
                raise _Refused(decision.status, decision.reason)
            try:
                async with asyncio.timeout(BACKEND_CONNECT_TIMEOUT):
                    backend_reader, backend_writer = await decision.address.connect(limit=_CHUNK)
            except (OSError, TimeoutError) as e:
                log.warning("tunnel %s/%s: backend %s unreachable: %s", org, db, decision.address, e)
                raise _Refused(503, "the database is not reachable") from None
        except _Refused as r:
            await self._refuse_pxt(tls, tunnel, r.status, r.reason)
            return
        try:
            try:
                await tls.write(b"PXT/1.0 200 OK\r\n\r\n")
            except (OSError, ssl.SSLError):
                return  # the client left before its answer
            log.info("tunnel open (%s) %s/%s for %s", tunnel.via, org, db, decision.subject)
            self._emit(TunnelConnected(org=org, db=db, subject=decision.subject, via=tunnel.via))
            try:
                await self._relay(tls, backend_reader, backend_writer, rest, tunnel)
            finally:  # also when close() ends the tunnel
                up, down = tunnel.bytes_up, tunnel.bytes_down
                log.info("tunnel closed %s/%s: %d bytes up, %d down", org, db, up, down)
                self._emit(
                    TunnelClosed(org=org, db=db, subject=decision.subject, bytes_up=up, bytes_down=down, via=tunnel.via)
                )
        finally:
            backend_writer.close()
            with contextlib.suppress(TimeoutError, OSError):
                await asyncio.wait_for(backend_writer.wait_closed(), CLOSE_TIMEOUT)

    def _parse_handshake(self, head: bytes, tunnel: _Tunnel) -> tuple[str, str, str]:
        """(org, db, credential) from `PXT/1.0 CONNECT <org>/<db>` and its headers, or _Refused."""
        try:
            lines = head.decode("ascii").split("\r\n")
        except UnicodeDecodeError:
            raise _Refused(400, "the handshake is not ASCII text") from None
        match = _PXT_CONNECT.fullmatch(lines[0])
        if match is None:
            raise _Refused(400, "expected PXT/1.0 CONNECT <org>/<db>")
        org, db = match.group(1), match.group(2)
        tunnel.org, tunnel.db = org, db
        credential: str | None = None
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or _TOKEN.fullmatch(name) is None:
                raise _Refused(400, "malformed handshake header")
            if name.lower() == "authorization":
                scheme, _, token = value.strip().partition(" ")
                if scheme.lower() == "bearer" and token.strip():
                    credential = token.strip()
        if credential is None:
            raise _Refused(401, "a bearer credential is required")
        return org, db, credential

    async def _decide(self, org: str, db: str, credential: str) -> Route | Refusal:
        try:
            async with asyncio.timeout(AUTHORIZE_TIMEOUT):
                decision = await self._authorize(org, db, credential)
        except Exception:
            # 503, not 4xx: the client retries a 503 and gives up at once on a refusal
            log.exception("tunnel authorizer failed for %s/%s", org, db)
            return Refusal(503, "the tunnel cannot authorize connections right now")
        if not isinstance(decision, Route | Refusal):
            log.error("tunnel authorizer returned %r for %s/%s", decision, org, db)
            return Refusal(503, "the tunnel cannot authorize connections right now")
        return decision

    async def _relay(
        self,
        tls: _TlsStream,
        backend_reader: asyncio.StreamReader,
        backend_writer: asyncio.StreamWriter,
        rest: bytes,
        tunnel: _Tunnel,
    ) -> None:
        """Copy both ways until either side ends, counting bytes on tunnel. Each direction holds at most one chunk
        and waits on drain(), so a slow reader slows its writer instead of growing a buffer."""

        async def up() -> None:
            data = rest  # bytes the client sent right behind its handshake, if any
            while True:
                if data:
                    tunnel.bytes_up += len(data)
                    backend_writer.write(data)
                    await backend_writer.drain()
                data = await tls.read(_CHUNK)
                if not data:
                    return

        async def down() -> None:
            while data := await backend_reader.read(_CHUNK):
                tunnel.bytes_down += len(data)
                await tls.write(data)

        tasks = [asyncio.create_task(up()), asyncio.create_task(down())]
        try:
            # either side ending ends the tunnel: TLS cannot be half-closed, and the client never half-closes
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, OSError | ssl.SSLError):
                log.warning("tunnel relay failed: %r", result)
