"""`/_emulator` for the emulator itself: status, clock, the event journal and its live stream, and the platform's
switches (faults are in admin/faults.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import msgspec
from litestar import Request, Response, get, post
from litestar.response import Stream

from emulator import __version__
from emulator.admin import ops
from emulator.admin.context import operator_of
from emulator.admin.wire import ClockMove, ClockView, EventView, LimitsView, RuntimeView, StatusView
from emulator.config import parse_when
from emulator.core import contract, jsonbody, openapi
from emulator.core.clock import MAX_TIME, parse_duration
from emulator.core.errors import BAD_REQUEST
from emulator.runtime.choose import build_cache_root
from emulator.tunnel.tlsfiles import TlsFiles

_encode = msgspec.json.Encoder().encode
MAX_EVENT = 2**63 - 1
T = TypeVar("T")


def json_response(value: Any, status: int = 200) -> Response[bytes]:
    return Response(_encode(value), status_code=status, media_type="application/json")


def decode(body: bytes, type_: type[T]) -> T:
    """An operator body as `type_` (empty reads as `{}`), refused as a 400 in the operator's envelope with msgspec's
    words. A route that takes its body typed gets it read the same way, through `operator_body`."""
    return jsonbody.decoder(type_, BAD_REQUEST, empty=b"{}")(body)


def operator_body(type_: type[T]) -> openapi.BodyDependency:
    """`dependencies={name: operator_body(T)}`: the handler's parameter `name: T` is its body, read as `decode` reads
    it (core/contract.py)."""
    return contract.body(type_, jsonbody.decoder(type_, BAD_REQUEST, empty=b"{}"))


@get(ops.CA_PEM.path, media_type="application/x-pem-file")
async def ca_certificate(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The local CA's certificate (not its key), for a client on another machine or outside the emulator's container:
    `emulator env --url` makes its own bundle with it (the client's system CAs and this one)."""
    s = operator_of(request).core.settings
    pem = await asyncio.to_thread(TlsFiles(s.state_dir / "tls", s.cloud_domain).ca_cert_path.read_bytes)
    return Response(pem, media_type="application/x-pem-file")


@get(ops.STATUS.path)
async def status(request: Request[Any, Any, Any]) -> Response[bytes]:
    operator = operator_of(request)
    s = operator.core.settings
    reconciler = operator.platform.reconciler
    return json_response(
        StatusView(
            version=__version__,
            endpoints=operator.endpoints,
            clock=ClockView.of(operator.core.clock.state()),
            state_dir=str(s.state_dir),
            docs=str(s.docs),
            events=operator.core.bus.last_seq,
            switches=operator.core.switches.snapshot(),
            runtime=RuntimeView(
                reconciler.kind,
                list(reconciler.unenforced),
                reconciler.supervisor.base_image,
                s.profile,
                s.keeps_spares,
                str(cache) if (cache := build_cache_root(s)) else None,
            ),
            proxy=operator.proxy.status(),
            limits=LimitsView(s.ask_rate_limit, s.ask_rate_window, s.idempotency_ttl),
        )
    )


@get(ops.CLOCK.path)
async def clock_get(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(ClockView.of(operator_of(request).core.clock.state()))


@post(
    ops.CLOCK_MOVE.path,
    status_code=200,
    dependencies={"move": operator_body(ClockMove)},
    responses=contract.errors(BAD_REQUEST),
)
async def clock_move(request: Request[Any, Any, Any], move: ClockMove) -> ClockView:
    core = operator_of(request).core
    try:
        advance = parse_duration(str(move.advance)) if move.advance is not None else None
    except ValueError as e:
        raise BAD_REQUEST(f"clock: advance: {e}") from None
    set_to: float | None = None
    if isinstance(move.set, (int, float)):
        set_to = float(move.set)
    elif isinstance(move.set, str):
        try:
            set_to = parse_when(move.set, "set").timestamp()
        except ValueError as e:
            raise BAD_REQUEST(f"clock: {e}") from None
    if advance is not None and advance < 0:
        raise BAD_REQUEST("clock: advance must not be negative; use set to go back")
    target = set_to if set_to is not None else core.clock.now()
    if not 0 <= target + (advance or 0) <= MAX_TIME:
        raise BAD_REQUEST("clock: the result must lie between 1970 and 9999")
    state = await core.move_clock(advance=advance, set_to=set_to, freeze=move.freeze)
    return ClockView.of(state)


def _since(request: Request[Any, Any, Any]) -> int | None:
    raw = request.query_params.get("since") or request.headers.get("last-event-id")
    if raw is None:
        return None
    try:
        since: int | None = max(0, int(raw))
    except ValueError:
        since = None
    if since is None or since > MAX_EVENT:  # events are numbered in SQLite's 64-bit integers
        raise BAD_REQUEST(f"since / Last-Event-ID must be an event number (0 to {MAX_EVENT})")
    return since


def _kinds(request: Request[Any, Any, Any]) -> tuple[str, ...]:
    raw = request.query_params.get("kinds", "")
    return tuple(k.strip() for k in raw.split(",") if k.strip())


@get(ops.JOURNAL.path, opt=openapi.query(since=int, kinds=str, limit=int))
async def journal(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Events after `since` (default 0), oldest first, at most `limit` (default 500, max 5000)."""
    core = operator_of(request).core
    try:
        limit = min(5000, max(1, int(request.query_params.get("limit", "500"))))
    except ValueError:
        raise BAD_REQUEST("limit must be a number") from None
    events = await core.bus.history(_since(request) or 0, _kinds(request), limit)
    return json_response({"events": [EventView.of(e) for e in events], "last_seq": core.bus.last_seq})


@get(ops.EVENTS.path, opt=openapi.query(since=int, kinds=str))
async def events(request: Request[Any, Any, Any]) -> Stream:
    """Live SSE feed: history after `since` / `Last-Event-ID` first (if given), then new events."""
    core = operator_of(request).core
    since, kinds = _since(request), _kinds(request)

    async def frames() -> AsyncIterator[bytes]:
        # The comment opens the stream at once; `retry:` rides in the first event's block, since a block of its own
        # is an event with empty data to SSE clients such as httpx-sse.
        yield b": emulator event stream\n\n"
        retry = b"retry: 1000\n"
        async for event in core.bus.follow(since, kinds):
            yield b"%sid: %d\ndata: %s\n\n" % (retry, event.seq, _encode(EventView.of(event)))
            retry = b""

    return Stream(frames(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@get(ops.SWITCHES.path)
async def switches_get(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(operator_of(request).core.switches.snapshot())


@post(ops.SWITCHES_SET.path, status_code=200, opt=openapi.body(dict[str, bool]))
async def switches_set(request: Request[Any, Any, Any]) -> Response[bytes]:
    switches = operator_of(request).core.switches
    body = decode(await request.body(), dict[str, bool])
    for name, value in body.items():
        switches.set(name, value)
    return json_response(switches.snapshot())


HANDLERS = [
    status,
    ca_certificate,
    clock_get,
    clock_move,
    journal,
    events,
    switches_get,
    switches_set,
]
