"""`/_emulator` for the emulator itself: status, clock, the event journal and its live stream, and the platform's
switches (faults are in admin/faults.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any

import msgspec
from litestar import Request, Response
from litestar.di import NamedDependency
from litestar.params import HeaderParameter, QueryParameter
from litestar.response import Stream

from emulator import __version__
from emulator.admin import ops
from emulator.admin.context import operator_of
from emulator.admin.operation import operation
from emulator.admin.wire import (
    ClockMove,
    ClockView,
    EventView,
    JournalPage,
    LimitsView,
    RuntimeView,
    StatusView,
    Switches,
)
from emulator.config import parse_when
from emulator.core import openapi
from emulator.core.clock import MAX_TIME, parse_duration
from emulator.core.errors import BAD_REQUEST
from emulator.runtime.choose import build_cache_root
from emulator.tunnel.tlsfiles import TlsFiles

_encode = msgspec.json.Encoder().encode
MAX_EVENT = 2**63 - 1

# The query and header the journal and the event stream read, as strings: a bad one is refused in the operator's
# words (`_since`, "limit must be a number"), not Litestar's.
Since = Annotated[str | None, QueryParameter(name="since", description="an event number (0 and up)")]
LastEventId = Annotated[
    str | None, HeaderParameter(name="last-event-id", description="the last event seen (as `since`)")
]
Kinds = Annotated[str | None, QueryParameter(name="kinds", description="event kinds, comma-separated")]
Limit = Annotated[str | None, QueryParameter(name="limit", description="a number: 1 to 5000 (500)")]


@operation(ops.CA_PEM)
async def ca_certificate(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The local CA's certificate (not its key), for a client on another machine or outside the emulator's container:
    `emulator env --url` makes its own bundle with it (the client's system CAs and this one)."""
    s = operator_of(request).core.settings
    pem = await asyncio.to_thread(TlsFiles(s.state_dir / "tls", s.cloud_domain).ca_cert_path.read_bytes)
    return Response(pem, media_type=ops.CA_PEM.answer_media)


@operation(ops.STATUS)
async def status(request: Request[Any, Any, Any]) -> StatusView:
    operator = operator_of(request)
    s = operator.core.settings
    reconciler = operator.platform.reconciler
    return StatusView(
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


@operation(ops.CLOCK)
async def clock_get(request: Request[Any, Any, Any]) -> ClockView:
    return ClockView.of(operator_of(request).core.clock.state())


@operation(ops.CLOCK_MOVE, body="move", errors=[BAD_REQUEST])
async def clock_move(request: Request[Any, Any, Any], move: NamedDependency[ClockMove]) -> ClockView:
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


def _since(since: str | None, last_event_id: str | None) -> int | None:
    raw = since or last_event_id
    if raw is None:
        return None
    try:
        number: int | None = max(0, int(raw))
    except ValueError:
        number = None
    if number is None or number > MAX_EVENT:  # events are numbered in SQLite's 64-bit integers
        raise BAD_REQUEST(f"since / Last-Event-ID must be an event number (0 to {MAX_EVENT})")
    return number


def _kinds(raw: str | None) -> tuple[str, ...]:
    return tuple(k.strip() for k in (raw or "").split(",") if k.strip())


@operation(ops.JOURNAL, errors=[BAD_REQUEST])
async def journal(
    request: Request[Any, Any, Any],
    since: Since = None,
    last_event_id: LastEventId = None,
    kinds: Kinds = None,
    limit: Limit = None,
) -> JournalPage:
    """Events after `since` (default 0), oldest first, at most `limit` (default 500, max 5000)."""
    core = operator_of(request).core
    try:
        most = min(5000, max(1, int(limit if limit is not None else "500")))
    except ValueError:
        raise BAD_REQUEST("limit must be a number") from None
    events = await core.bus.history(_since(since, last_event_id) or 0, _kinds(kinds), most)
    return JournalPage([EventView.of(e) for e in events], core.bus.last_seq)


def _event_stream() -> openapi.Body:
    """The stream's answer as the document shows it: Server-Sent Events, each `data:` an EventView."""
    _, components = openapi.schema_of(EventView)
    stream = openapi.event_stream("EventView")
    return openapi.Body({ops.EVENTS.answer_media: stream}, components, description="one EventView a data:")


@operation(ops.EVENTS, errors=[BAD_REQUEST], opt=openapi.custom_answer(_event_stream()))
async def events(
    request: Request[Any, Any, Any], since: Since = None, last_event_id: LastEventId = None, kinds: Kinds = None
) -> Stream:
    """Live SSE feed: history after `since` / `Last-Event-ID` first (if given), then new events."""
    core = operator_of(request).core
    after, wanted = _since(since, last_event_id), _kinds(kinds)

    async def frames() -> AsyncIterator[bytes]:
        # The comment opens the stream at once; `retry:` rides in the first event's block, since a block of its own
        # is an event with empty data to SSE clients such as httpx-sse.
        yield b": emulator event stream\n\n"
        retry = b"retry: 1000\n"
        async for event in core.bus.follow(after, wanted):
            yield b"%sid: %d\ndata: %s\n\n" % (retry, event.seq, _encode(EventView.of(event)))
            retry = b""

    return Stream(frames(), media_type=ops.EVENTS.answer_media, headers={"Cache-Control": "no-cache"})


@operation(ops.SWITCHES)
async def switches_get(request: Request[Any, Any, Any]) -> Switches:
    return msgspec.convert(operator_of(request).core.switches.snapshot(), Switches)


@operation(ops.SWITCHES_SET, body="wanted", errors=[BAD_REQUEST])
async def switches_set(request: Request[Any, Any, Any], wanted: NamedDependency[dict[str, bool]]) -> Switches:
    switches = operator_of(request).core.switches
    for name, value in wanted.items():
        switches.set(name, value)
    return msgspec.convert(switches.snapshot(), Switches)


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
