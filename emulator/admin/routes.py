"""`/_emulator/*`: the emulator's own control API (state, clock, events), used by the CLI and the TUI."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
from litestar import Request, Response, get, post
from litestar.response import Stream

from emulator import __version__
from emulator.config import parse_when
from emulator.core import jsonbody
from emulator.core.clock import MAX_TIME, ClockState, iso, parse_duration
from emulator.core.errors import ApiError
from emulator.core.events import Event
from emulator.site.state import site_of

_encode = msgspec.json.Encoder().encode


class ClockView(msgspec.Struct):
    now: float
    iso: str
    frozen: bool
    offset: float

    @classmethod
    def of(cls, state: ClockState) -> ClockView:
        return cls(state.now, state.iso, state.frozen, round(state.offset, 3))


class ClockMove(msgspec.Struct, forbid_unknown_fields=True):
    """Body of POST /_emulator/clock. Applied in this order: freeze, set, advance, resume."""

    advance: str | float | None = None  # seconds, or "90s", "15m", "48h", "2d"
    set: str | float | None = None  # ISO 8601 or epoch seconds
    freeze: bool | None = None  # true freezes, false lets it run again


class EventView(msgspec.Struct):
    seq: int
    ts: float
    iso: str
    kind: str
    subject: str | None
    data: dict[str, Any]

    @classmethod
    def of(cls, e: Event) -> EventView:
        return cls(e.seq, e.ts, iso(e.ts), e.kind, e.subject, e.data)


def _json(value: Any, status: int = 200) -> Response[bytes]:
    return Response(_encode(value), status_code=status, media_type="application/json")


@get("/_emulator/status")
async def status(request: Request[Any, Any, Any]) -> Response[bytes]:
    site = site_of(request)
    s = site.core.settings
    return _json(
        {
            "version": __version__,
            "endpoints": site.endpoints,
            "clock": ClockView.of(site.core.clock.state()),
            "state_dir": str(s.state_dir),
            "docs": str(s.docs),
            "events": site.core.bus.last_seq,
            "limits": {
                "ask_rate_limit": s.ask_rate_limit,
                "ask_rate_window": s.ask_rate_window,
                "idempotency_ttl": s.idempotency_ttl,
            },
        }
    )


@get("/_emulator/clock")
async def clock_get(request: Request[Any, Any, Any]) -> Response[bytes]:
    return _json(ClockView.of(site_of(request).core.clock.state()))


@post("/_emulator/clock", status_code=200)
async def clock_move(request: Request[Any, Any, Any]) -> Response[bytes]:
    core = site_of(request).core
    move = _decode(await request.body(), ClockMove)
    try:
        advance = parse_duration(str(move.advance)) if move.advance is not None else None
    except ValueError as e:
        raise ApiError(400, "bad_request", f"clock: advance: {e}") from None
    set_to: float | None = None
    if isinstance(move.set, (int, float)):
        set_to = float(move.set)
    elif isinstance(move.set, str):
        try:
            set_to = parse_when(move.set, "set").timestamp()
        except ValueError as e:
            raise ApiError(400, "bad_request", f"clock: {e}") from None
    if advance is not None and advance < 0:
        raise ApiError(400, "bad_request", "clock: advance must not be negative; use set to go back")
    target = set_to if set_to is not None else core.clock.now()
    if not 0 <= target + (advance or 0) <= MAX_TIME:
        raise ApiError(400, "bad_request", "clock: the result must lie between 1970 and 9999")
    state = await core.move_clock(advance=advance, set_to=set_to, freeze=move.freeze)
    return _json(ClockView.of(state))


def _since(request: Request[Any, Any, Any]) -> int | None:
    raw = request.query_params.get("since") or request.headers.get("last-event-id")
    if raw is None:
        return None
    try:
        return max(0, int(raw))
    except ValueError:
        raise ApiError(400, "bad_request", "since / Last-Event-ID must be an event number") from None


def _kinds(request: Request[Any, Any, Any]) -> tuple[str, ...]:
    raw = request.query_params.get("kinds", "")
    return tuple(k.strip() for k in raw.split(",") if k.strip())


@get("/_emulator/journal")
async def journal(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Events after `since` (default 0), oldest first, at most `limit` (default 500, max 5000)."""
    core = site_of(request).core
    try:
        limit = min(5000, max(1, int(request.query_params.get("limit", "500"))))
    except ValueError:
        raise ApiError(400, "bad_request", "limit must be a number") from None
    events = await core.bus.history(_since(request) or 0, _kinds(request), limit)
    return _json({"events": [EventView.of(e) for e in events], "last_seq": core.bus.last_seq})


@get("/_emulator/events")
async def events(request: Request[Any, Any, Any]) -> Stream:
    """Live SSE feed: history after `since` / `Last-Event-ID` first (if given), then new events."""
    core = site_of(request).core
    since, kinds = _since(request), _kinds(request)

    async def frames() -> AsyncIterator[bytes]:
        yield b": emulator event stream\nretry: 1000\n\n"
        async for event in core.bus.follow(since, kinds):
            yield b"id: %d\ndata: %s\n\n" % (event.seq, _encode(EventView.of(event)))

    return Stream(frames(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


class FaultRule(msgspec.Struct, forbid_unknown_fields=True):
    """Body of POST /_emulator/faults: hold the next `count` requests to the path `hold`."""

    hold: str
    count: int = 1


class FaultRelease(msgspec.Struct, forbid_unknown_fields=True):
    path: str | None = None


@get("/_emulator/faults")
async def faults_get(request: Request[Any, Any, Any]) -> Response[bytes]:
    return _json(site_of(request).core.faults.snapshot())


@post("/_emulator/faults", status_code=200)
async def faults_add(request: Request[Any, Any, Any]) -> Response[bytes]:
    faults = site_of(request).core.faults
    rule = _decode(await request.body(), FaultRule)
    if rule.count < 1:
        raise ApiError(400, "bad_request", "faults: count must be at least 1")
    faults.hold(rule.hold, rule.count)
    return _json(faults.snapshot())


@post("/_emulator/faults/release", status_code=200)
async def faults_release(request: Request[Any, Any, Any]) -> Response[bytes]:
    faults = site_of(request).core.faults
    release = _decode(await request.body(), FaultRelease)
    return _json({"released": faults.release(release.path), **faults.snapshot()})


def _decode(body: bytes, type_: Any) -> Any:
    try:
        return jsonbody.decode(body or b"{}", type_)
    except jsonbody.NotJson as e:
        raise ApiError(400, "bad_request", str(e)) from None


HANDLERS = [status, clock_get, clock_move, journal, events, faults_get, faults_add, faults_release]
