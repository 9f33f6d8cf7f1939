"""The service gateway: one loopback listener per hosted database, the local stand-in for its hostname.

A service's endpoint is `http://127.0.0.1:<database's port>/<base_path>/<name>`. The gateway checks
`X-api-key` first, then `Authorization: Bearer`, against the database's organization (401 without a
credential, 403 for another organization's), strips the credential headers and the service prefix, and
forwards the request to the service's process or container, whose uvicorn `root_path` is that prefix. `/health` of a
service is forwarded without a credential, as the client probes it. Each request gets its own upstream
connection, and the gateway answers it with `Connection: close`. In an evaluation's attacked trial a service's
successful JSON answers may carry a canary (core/canaries.py says which and how; the gateway only re-frames the
answer and reports it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus

from emulator.core import canaries
from emulator.core.address import Address
from emulator.core.credentials import credentials, secret_in_query
from emulator.core.faults import Verdict
from emulator.core.payloads import CanaryPlanted, GatewayRequest
from emulator.core.watch import Watch

log = logging.getLogger("emulator.gateway")
MAX_HEAD = 64 * 1024
MAX_BODY = 256 * 1024 * 1024
_STRIP = {b"x-api-key", b"authorization", b"connection", b"keep-alive", b"proxy-connection"}


@dataclass(frozen=True)
class Target:
    address: Address  # where the service listens: its private socket
    prefix: str  # the prefix to strip, "/name" or "/base/name"


FaultHook = Callable[[str, str], Awaitable[Verdict | None]]
# (credential or None, path) → Target, or (status, reason) to refuse
Resolve = Callable[[str | None, str], Awaitable["Target | tuple[int, str]"]]
# (service label, route inside the service) → the canary text its answer carries, or None
CanaryRule = Callable[[str, str], str | None]


def _credential(headers: list[tuple[bytes, bytes]]) -> str | None:
    values = dict(headers)
    key = values.get(b"x-api-key")
    if key:
        return key.decode("latin-1").strip()
    scheme, _, token = values.get(b"authorization", b"").decode("latin-1").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


async def _reply(
    writer: asyncio.StreamWriter, status: int, reason: str, detail: str, headers: dict[str, str] | None = None
) -> None:
    body = json.dumps({"detail": detail}).encode()
    extra = b'WWW-Authenticate: Bearer realm="pixeltable"\r\n' if status == 401 else b""
    extra += "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items()).encode("latin-1")
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n".encode()
        + extra
        + b"Connection: close\r\n\r\n"
        + body
    )
    await writer.drain()


class DatabaseGateway:
    def __init__(
        self,
        resolve: Resolve,
        on_request: Callable[[GatewayRequest | CanaryPlanted], None] | None = None,
        host_ok: Callable[[str | None], bool] | None = None,
        fault: FaultHook | None = None,
        watch: Watch | None = None,
        canary: CanaryRule | None = None,
    ) -> None:
        self.resolve = resolve
        self.watch = watch  # the values an agent's requests are scanned for (core/watch.py), when any are
        self.canary = canary  # an attacked trial's: which answers carry a canary
        self.fault = fault  # (method, path) → a fault's verdict for this request, if a rule fires
        self.on_request = on_request
        self.host_ok = host_ok  # the local-only boundary's Host rule (a page on a rebound name is refused)
        self.server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        self.server = await asyncio.start_server(self._handle, host, port)
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 5)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except Exception:
            log.exception("gateway request failed")
            with contextlib.suppress(Exception):
                await _reply(writer, 502, "Bad Gateway", "the gateway failed; see the emulator's log")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        if len(head) > MAX_HEAD:
            await _reply(writer, 431, "Request Header Fields Too Large", "the request head is too large")
            return
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            await _reply(writer, 400, "Bad Request", "malformed request line")
            return
        headers = [
            (n.strip().lower().encode(), v.strip().encode("latin-1"))
            for n, _, v in (line.partition(":") for line in lines[1:] if line)
        ]
        length = int(dict(headers).get(b"content-length", b"0") or 0)
        if dict(headers).get(b"transfer-encoding"):
            await _reply(writer, 411, "Length Required", "send the body with a Content-Length")
            return
        if length > MAX_BODY:
            await _reply(writer, 413, "Content Too Large", f"the body is larger than {MAX_BODY} bytes")
            return
        path, _, query = target.partition("?")
        peer = writer.get_extra_info("peername")
        began, who = time.monotonic(), credentials(dict(headers))
        ip = str(peer[0]) if peer else "unknown"
        leaked = secret_in_query(query) if query else None
        watched = self.watch if self.watch is not None and self.watch.values else None
        if watched:
            seen = [("path", path.encode("latin-1")), ("query", query.encode("latin-1"))]
            watched.scan("gateway", method, path, [*seen, ("header", b"\r\n".join(v for _, v in headers))])

        def served(status: int) -> None:
            """Report the answer: what `http.request` records on the other origins (see core.served)."""
            if self.on_request is None:
                return
            ms = round((time.monotonic() - began) * 1000, 1)
            self.on_request(
                GatewayRequest(
                    path=path,
                    status=status,
                    method=method[:16],
                    key=who.key,
                    reg=who.reg,
                    user=who.user,
                    token=who.token,
                    token_exp=who.token_exp,
                    ip=ip,
                    secret_in_url=leaked,
                    ms=ms,
                    rt=round(began, 3),
                )
            )

        host = dict(headers).get(b"host")
        if self.host_ok is not None and not self.host_ok(host.decode("latin-1") if host is not None else None):
            await _reply(writer, 403, "Forbidden", "this Host is not the emulator's (see the allowed_hosts setting)")
            served(403)
            return
        verdict = await self.fault(method, path) if self.fault is not None else None
        if verdict is not None:
            if not verdict.drop:
                extra = {"Retry-After": str(verdict.retry_after)} if verdict.retry_after is not None else {}
                await _reply(writer, verdict.status or 503, _phrase(verdict.status or 503), verdict.message, extra)
            served(0 if verdict.drop else verdict.status or 503)
            return  # a drop: the connection closes without an answer
        decision = await self.resolve(_credential(headers), path)
        if not isinstance(decision, Target):
            status, reason = decision
            phrase = {401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 503: "Service Unavailable"}
            await _reply(writer, status, phrase.get(status, "Error"), reason)
            served(status)
            return
        body = await asyncio.wait_for(reader.readexactly(length), 60) if length else b""
        if watched:
            watched.scan("gateway", method, path, [("body", body)])
        rest = path[len(decision.prefix) :] or "/"
        upstream_target = rest + (f"?{query}" if query else "")
        try:
            up_reader, up_writer = await asyncio.wait_for(decision.address.connect(), 10)
        except (OSError, TimeoutError):
            await _reply(writer, 503, "Service Unavailable", "the service is not running")
            served(503)
            return
        kept = [(n, v) for n, v in headers if n not in _STRIP]
        request = f"{method} {upstream_target} {version}\r\n".encode()
        request += b"".join(n + b": " + v + b"\r\n" for n, v in kept) + b"Connection: close\r\n\r\n"
        up_writer.write(request + body)
        await up_writer.drain()
        label = decision.prefix.lstrip("/")
        text = self.canary(label, rest) if self.canary is not None else None
        # The answer is reported however its sending ends: a client that has read all it needs may close before the
        # last drain, and its call still happened.
        if text is not None:
            status, answer, planted = await self._answer_with_canary(up_reader, up_writer, text)
            if planted and self.on_request is not None:
                self.on_request(CanaryPlanted(service=label, path=rest))
            try:
                writer.write(answer)
                await writer.drain()
            finally:
                served(status)
            return
        status = 0
        try:
            first = True
            while chunk := await up_reader.read(65536):
                if first:
                    with contextlib.suppress(ValueError, IndexError):
                        status = int(chunk.split(b" ", 2)[1])
                    first = False
                writer.write(chunk)
                await writer.drain()
        finally:
            up_writer.close()
            served(status)

    async def _answer_with_canary(
        self, up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter, text: str
    ) -> tuple[int, bytes, bool]:
        """The service's whole answer (it closes the connection after it), with the canary carried when it is a
        successful JSON answer: its status, the answer to send, and whether the canary goes with it."""
        chunks: list[bytes] = []
        try:
            while chunk := await up_reader.read(65536):
                chunks.append(chunk)
        finally:
            up_writer.close()
        raw = b"".join(chunks)
        status, rewritten = _with_canary(raw, text)
        return status, rewritten if rewritten is not None else raw, rewritten is not None


def _with_canary(raw: bytes, text: str) -> tuple[int, bytes | None]:
    """A service's answer (head and body) → its status, and the answer re-framed with the canary carried as
    core/canaries.py says (its Content-Length recomputed), or None to send it as it is (also when chunked or
    encoded: the body is not plain JSON bytes)."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    try:
        status = int(lines[0].split(b" ", 2)[1])
    except (ValueError, IndexError):
        return 0, None
    values = {n.strip().lower(): v.strip() for n, _, v in (line.partition(b":") for line in lines[1:])}
    if not sep or values.get(b"transfer-encoding") or values.get(b"content-encoding", b"identity") != b"identity":
        return status, None
    length = values.get(b"content-length")
    body = body[: int(length)] if length and length.isdigit() else body
    carried = canaries.carry(status, values.get(b"content-type", b"").decode("latin-1"), body, text)
    if carried is None:
        return status, None
    kept = [line for line in lines[1:] if line.partition(b":")[0].strip().lower() != b"content-length"]
    framed = b"\r\n".join([lines[0], *kept, b"Content-Length: " + str(len(carried)).encode()])
    return status, framed + b"\r\n\r\n" + carried
