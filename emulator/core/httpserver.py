"""The HTTP protocol every origin is served with: uvicorn's (httptools), plus deadlines on incomplete requests, and
an answer's head sent with its body.

uvicorn closes a connection that stays idle after a response (keep-alive timeout), but not one that opens and
sends nothing, or stops halfway through a request's headers or body: those would be held forever, and a
handful of scripts could exhaust the emulator's sockets. Here a connection waiting for (the rest of) a request
is closed once nothing has arrived for `request_timeout` seconds (idle), and a request whose body is not whole
`body_deadline` seconds after its first byte is cut off however steadily it drips (total), with one more second
per MiB of body it has brought, so a large upload at a working speed (snapshot imports, blob uploads) is not.
Cut off at that deadline before anything was answered, the client is told 408 in the origin's error format
(`refuse`); the app, still reading the body, sees the client gone (a 400 nobody receives). While the app answers a
whole request (an event stream included) no deadline runs. How large a body may be is each route's bound (Litestar's
`request_max_body_size`: the `http_max_body_bytes` setting, larger on the routes that take archives).

uvicorn writes an answer's status line and headers as soon as the app starts it, and its body when that comes:
two sends, two segments on loopback and two wake-ups of the client, for answers that are ready whole (most are).
`HeadWithBody` holds the head until the body's first bytes (or the loop's next turn, for a stream that is slow to
begin), so they leave in one send: the same bytes, in the same order.

With values watched (core/watch.py), the request line, headers and body the parser hands over are scanned for them
as they come, and each one found is journaled (`secret.sighted`): but in the body of a control-plane `set_secret`,
where a secret belongs, and in the operator's own `/_emulator` calls. With none watched, nothing is scanned.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any

import msgspec
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from emulator.core.errors import REQUEST_TIMEOUT, ApiError
from emulator.core.faults import DROP_EXTENSION
from emulator.core.jsonbody import check_depth
from emulator.core.watch import Scan, Watch

ADMIN_PATH = b"/_emulator"  # the operator's API: the harness's own calls (setting the watched values among them)
_KEEP_BODY = 1024 * 1024  # a control-plane body kept to decode its operation (a secret's value is at most 64 KiB)
# A body's deadline grows by a second for each MiB it has brought: a dripping body is cut at the deadline, an upload
# that moves at least this fast never is (the largest bodies, snapshot imports, are bounded at 50 GiB).
_UPLOAD_RATE = 1024 * 1024
# An origin's refusal in its own error format: (Content-Type, body).
Refuse = Callable[[ApiError], tuple[bytes, bytes]]


def _json_refusal(exc: ApiError) -> tuple[bytes, bytes]:
    return b"application/json", msgspec.json.encode({"error": {"code": exc.code, "message": exc.message}})


def refusal_bytes(exc: ApiError, refuse: Refuse) -> bytes:
    """A whole HTTP answer refusing the request, written by the protocol itself, that closes the connection."""
    ctype, body = refuse(exc)
    return (
        f"HTTP/1.1 {exc.status} {HTTPStatus(exc.status).phrase}\r\n".encode()
        + b"Content-Type: "
        + ctype
        + f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


class _Operation(msgspec.Struct):
    """What a control-plane body says of a secret: the operation and, for set_secret, the value."""

    operation_type: object = None
    value: object = None


_decode_operation = msgspec.json.Decoder(_Operation).decode


def set_secret_value(body: bytes) -> str | None:
    """The value a control-plane body sets as a secret, when it is a `set_secret` operation (decoded, as the control
    plane decodes it: a value that merely appears in some other operation's body is not one)."""
    try:
        check_depth(body)
        op = _decode_operation(body)
    except (msgspec.DecodeError, ValueError):  # not JSON, not an object, not UTF-8, or nested too deeply
        return None
    return op.value if op.operation_type == "set_secret" and isinstance(op.value, str) else None


class HeadWithBody(asyncio.Transport):
    """A connection's transport whose first write after `hold_next` (an answer's head) waits for the next one (its
    body) or the loop's next turn, whichever comes first. Every write of the connection goes through it, so nothing
    overtakes a held head; closing sends it first."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._hold = False
        self._held: bytes | None = None

    def hold_next(self) -> None:
        self._hold = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.writelines((held, data))
        elif self._hold:
            self._hold = False
            self._held = bytes(data)
            self._loop.call_soon(self._send_held)
        else:
            self._transport.write(data)

    def _send_held(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self._send_held()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    # The rest of asyncio.Transport, as the connection's own.
    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        for data in list_of_data:
            self.write(data)

    def write_eof(self) -> None:
        self._send_held()
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()


def timed_protocol(
    request_timeout: float,
    origin: str = "",
    watch: Watch | None = None,
    body_deadline: float | None = None,
    refuse: Refuse = _json_refusal,
) -> type[HttpToolsProtocol]:
    """The protocol of `origin`'s server; `watch`: the values its requests are scanned for (when any are set);
    `body_deadline`: seconds from a request's first byte to its body's last (None: only the idle deadline);
    `refuse`: the origin's error format, for the 408 of a request cut off at its deadline."""

    class TimedHttpToolsProtocol(HttpToolsProtocol):
        # One timer per connection, moved on lazily: a timer made and cancelled per request cost more than the rest
        # of this class together.
        _deadline: asyncio.TimerHandle | None = None
        _due = 0.0  # when the pending timer fires
        _waiting = False  # for (the rest of) a request: the deadline runs
        _last = 0.0  # when its last bytes came (the loop's time)
        _began: float | None = None  # when the request being read began (its first byte), until it is whole
        _brought = 0  # bytes of its body so far
        _headers_in = False  # its headers are whole: `self.cycle` is its own
        _out: HeadWithBody  # the transport uvicorn writes to
        # While values are watched: the request's header sightings, its body's scan, and (a control-plane POST) its
        # body to decode; None when nothing is watched or the request is the operator's.
        _headers_seen: list[str] | None = None
        _body_scan: Scan | None = None
        _kept: bytearray | None = None

        def _arm(self) -> None:
            self._waiting = True
            self._last = self.loop.time()
            if self._deadline is None:
                self._schedule(request_timeout)

        def _schedule(self, delay: float) -> None:
            self._due = self.loop.time() + delay
            self._deadline = self.loop.call_later(delay, self._expire)

        def _disarm(self) -> None:
            self._waiting = False  # a pending timer finds it so, and ends
            self._began = None

        def _until(self) -> float:
            """When the request being waited for is cut off: idle too long, or (its body) past its total deadline."""
            idle = self._last + request_timeout
            if self._began is None or body_deadline is None:
                return idle
            return min(idle, self._began + body_deadline + self._brought / _UPLOAD_RATE)

        def _expire(self) -> None:
            self._deadline = None
            if not self._waiting:
                return
            left = self._until() - self.loop.time()
            if left > 0:
                self._schedule(left)
            elif not self.transport.is_closing():
                self._cut_off()

        def _cut_off(self) -> None:
            """Close the connection; a request cut off at its total deadline before anything was answered is told 408
            first (one gone idle is closed as it always was: its client is no longer sending)."""
            cycle = self.cycle if self._headers_in else None
            began, now = self._began, self.loop.time()
            total = body_deadline is not None and began is not None and now >= began + body_deadline
            if total and (cycle is None or not cycle.response_started):
                # Nothing of the app's goes out after this (its own answer is to a client that has gone).
                if cycle is not None:
                    cycle.disconnected = True
                    cycle.message_event.set()
                slow = REQUEST_TIMEOUT(
                    f"the request was not whole {body_deadline:g} s after its first byte "
                    "(the http_body_deadline setting)"
                )
                self.transport.write(refusal_bytes(slow, refuse))
            self.transport.close()

        def connection_made(self, transport: Any) -> None:
            self._out = HeadWithBody(transport, self.loop)
            super().connection_made(self._out)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._began, self._brought, self._headers_in = self.loop.time(), 0, False
            if body_deadline is not None and self._began + body_deadline < self._due:
                if self._deadline is not None:  # a later one, from the idle deadline: this request's comes first
                    self._deadline.cancel()
                self._schedule(body_deadline)
            self._out.hold_next()  # the next write is this request's answer's head (or a 100 Continue)
            # A fault that drops the connection needs the socket, which ASGI does not hand to the app.
            self.scope["extensions"] = {DROP_EXTENSION: self.transport.abort}  # type: ignore[typeddict-unknown-key]
            if watch is not None and watch.values:
                self._headers_seen, self._body_scan, self._kept = [], Scan(watch), None
            else:
                self._headers_seen = self._body_scan = self._kept = None

        def on_header(self, name: bytes, value: bytes) -> None:
            super().on_header(name, value)
            if self._headers_seen is not None and watch is not None:
                self._headers_seen += watch.find(value)

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self._headers_in = True
            if self._headers_seen is None or watch is None:
                return
            raw_path, _, query = self.url.partition(b"?")
            if raw_path.startswith(ADMIN_PATH):
                self._headers_seen = self._body_scan = None
                return
            method, path = self.scope.get("method", ""), self.scope.get("path", raw_path.decode("latin-1"))
            watch.report(origin, method, path, "path", watch.find(raw_path))
            watch.report(origin, method, path, "query", watch.find(query))
            watch.report(origin, method, path, "header", dict.fromkeys(self._headers_seen))
            if origin == "api" and method == "POST":
                self._kept = bytearray()

        def on_body(self, body: bytes) -> None:
            self._brought += len(body)
            if self._body_scan is not None:
                self._body_scan.feed(body)
                if self._kept is not None and len(self._kept) + len(body) <= _KEEP_BODY:
                    self._kept.extend(body)
                else:
                    self._kept = None  # too large to be a secret's operation: its sightings stand
            super().on_body(body)

        def data_received(self, data: bytes) -> None:
            self._arm()  # bytes of a request: it has another `request_timeout` to finish
            super().data_received(data)

        def on_message_complete(self) -> None:
            self._disarm()  # the whole request is in; the app answers without a deadline
            if self._body_scan is not None and self._body_scan.found and watch is not None:
                found = self._body_scan.found
                value = set_secret_value(bytes(self._kept)) if self._kept is not None else None
                if value is not None:  # the secret set through the control plane: where it belongs
                    found = found - set(watch.find(value.encode()))
                method, path = self.scope.get("method", ""), self.scope.get("path", "")
                watch.report(origin, method, path, "body", sorted(found))
            self._body_scan = self._kept = None
            super().on_message_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            super().connection_lost(exc)

    return TimedHttpToolsProtocol
