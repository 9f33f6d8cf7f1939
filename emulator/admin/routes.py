"""`/_emulator/*`: the emulator's own control API (state, clock, events), used by the CLI and the TUI."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import msgspec
from litestar import Request, Response, get, post
from litestar.response import Stream

from emulator import __version__
from emulator.config import parse_when
from emulator.core import jsonbody
from emulator.core.clock import MAX_TIME, ClockState, iso, parse_duration
from emulator.core.errors import ApiError
from emulator.core.events import Event
from emulator.idp.identity import POST_CLAIM_SCOPES, PRE_CLAIM_SCOPES
from emulator.site.state import site_of
from emulator.site.trials import claim_trial

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
            "switches": site.core.switches.snapshot(),
            "runtime": {
                "kind": site.cloud.runtime.kind if site.cloud else None,
                "unenforced_limits": list(site.cloud.runtime.unenforced) if site.cloud else [],
            },
            "proxy": site.proxy.status() if site.proxy else None,
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


# --- the human and operator side (what a person does in a browser, and platform switches) ---------


class ClaimDecision(msgspec.Struct, forbid_unknown_fields=True):
    """Play the person on a pending agent claim: by its verification_uri (or attempt token) or registration."""

    email: str
    claim: str | None = None
    registration: str | None = None


def _attempt_token(claim: str | None) -> str | None:
    if claim and "token=" in claim:
        return parse_qs(urlsplit(claim).query).get("token", [""])[0] or None
    return claim


async def _decide(request: Request[Any, Any, Any], approve: bool) -> Response[bytes]:
    identity = site_of(request).identity
    body = _decode(await request.body(), ClaimDecision)
    attempt = await identity.attempt_for(token=_attempt_token(body.claim), registration=body.registration)
    code = await identity.decide(attempt, body.email, approve)
    answer = {"registration": attempt["registration_id"], "email": body.email.strip(), "approved": approve}
    return _json({**answer, "user_code": code} if code else answer)


@post("/_emulator/claims/approve", status_code=200)
async def claims_approve(request: Request[Any, Any, Any]) -> Response[bytes]:
    """The person signs in and approves: the answer shows the 6-digit user code, once."""
    return await _decide(request, True)


@post("/_emulator/claims/deny", status_code=200)
async def claims_deny(request: Request[Any, Any, Any]) -> Response[bytes]:
    return await _decide(request, False)


class TrialClaim(msgspec.Struct, forbid_unknown_fields=True):
    """Claim a trial as a person: `org` is its slug (or org id)."""

    org: str
    email: str


@post("/_emulator/trials/claim", status_code=200)
async def trials_claim(request: Request[Any, Any, Any]) -> Response[bytes]:
    site = site_of(request)
    body = _decode(await request.body(), TrialClaim)
    row = await site.core.store.fetchone("SELECT id FROM orgs WHERE slug = ? OR id = ?", (body.org, body.org))
    if row is None:
        raise ApiError(404, "not_found", f"no organization {body.org!r} (an unclaimed trial is deleted after 48 h)")
    slug = await claim_trial(site, org_id=row["id"], email=body.email)
    return _json({"org": slug, "email": body.email.strip(), "state": "claimed"})


@get("/_emulator/trials")
async def trials_list(request: Request[Any, Any, Any]) -> Response[bytes]:
    core = site_of(request).core
    now = core.clock.now()
    rows = await core.store.fetchall(
        "SELECT o.*, (SELECT json_group_array(name) FROM api_keys k WHERE k.org_id = o.id) AS keys "
        "FROM orgs o WHERE o.trial = 1 ORDER BY o.created_at"
    )
    return _json(
        {
            "trials": [
                {
                    "org": r["slug"],
                    "org_id": r["id"],
                    "state": r["state"],
                    "registration": r["registration_id"],
                    "network": r["network"],
                    "created_at": iso(r["created_at"]),
                    "expires_at": iso(r["expires_at"]) if r["expires_at"] else None,
                    "seconds_left": max(0, int(r["expires_at"] - now)) if r["expires_at"] else None,
                    "api_keys": msgspec.json.decode(r["keys"]),
                }
                for r in rows
            ]
        }
    )


@get("/_emulator/registrations")
async def registrations_list(request: Request[Any, Any, Any]) -> Response[bytes]:
    core = site_of(request).core
    rows = await core.store.fetchall(
        "SELECT r.*, (SELECT slug FROM orgs o WHERE o.id = r.trial_org_id) AS trial, "
        "(SELECT COUNT(*) FROM access_tokens t WHERE t.registration_id = r.id) AS tokens, "
        "(SELECT MAX(issued_at) FROM access_tokens t WHERE t.registration_id = r.id) AS last_token_at "
        "FROM registrations r ORDER BY r.created_at"
    )
    return _json(
        {
            "registrations": [
                {
                    "id": r["id"],
                    "type": r["type"],
                    "status": r["status"],
                    "login_hint": r["login_hint"],
                    "claimed_email": r["claimed_email"],
                    "scopes": POST_CLAIM_SCOPES if r["status"] == "claimed" else PRE_CLAIM_SCOPES,
                    "trial": r["trial"],
                    "trial_org_id": r["trial_org_id"],
                    "tokens_issued": r["tokens"],
                    "last_token_at": iso(r["last_token_at"]) if r["last_token_at"] else None,
                    "created_at": iso(r["created_at"]),
                }
                for r in rows
            ]
        }
    )


class LoginDecision(msgspec.Struct, forbid_unknown_fields=True):
    """Play the person on the `pxt login` page: approve (or deny) the sign-in showing `user_code`."""

    user_code: str
    email: str
    deny: bool = False


@post("/_emulator/logins/approve", status_code=200)
async def logins_approve(request: Request[Any, Any, Any]) -> Response[bytes]:
    body = _decode(await request.body(), LoginDecision)
    await site_of(request).logins.decide(body.user_code, body.email, not body.deny)
    return _json({"user_code": body.user_code.upper(), "email": body.email.strip(), "approved": not body.deny})


@get("/_emulator/logins")
async def logins_pending(request: Request[Any, Any, Any]) -> Response[bytes]:
    core = site_of(request).core
    rows = await core.store.fetchall(
        "SELECT user_code, state, email, expires_at FROM device_logins WHERE state = 'pending' AND expires_at > ? "
        "ORDER BY created_at",
        (core.clock.now(),),
    )
    return _json({"pending": [{"user_code": r["user_code"], "expires_at": iso(r["expires_at"])} for r in rows]})


@get("/_emulator/databases")
async def databases_list(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Every hosted database: its state, generation, environment and whether its server runs."""
    site = site_of(request)
    rows = await site.core.store.fetchall(
        "SELECT d.*, o.slug FROM databases d JOIN orgs o ON o.id = d.org_id ORDER BY o.slug, d.name"
    )
    runtime = site.cloud.runtime if site.cloud else None
    return _json(
        {
            "runtime": runtime.kind if runtime else None,
            "unenforced_limits": list(runtime.unenforced) if runtime else [],
            "databases": [
                {
                    "org": r["slug"],
                    "db": r["name"],
                    "state": r["state"],
                    "generation": r["generation"],
                    "environment": (r["env_digest"] or "")[:12] or None,
                    "last_build_outcome": r["last_build_outcome"],
                    "failure_reason": r["failure_reason"],
                    "server": runtime.status(r["org_id"], r["name"]) if runtime else None,
                    "receipt": msgspec.json.decode(r["receipt"]) if r["receipt"] else None,
                }
                for r in rows
            ],
        }
    )


@get("/_emulator/databases/{org:str}/{db:str}/logs")
async def database_logs(request: Request[Any, Any, Any], org: str, db: str, since: int = 0) -> Response[bytes]:
    """A database's log lines (its server's output and the emulator's notes), after line id `since`."""
    core = site_of(request).core
    row = await core.store.fetchone("SELECT id FROM orgs WHERE slug = ? OR id = ?", (org, org))
    if row is None:
        raise ApiError(404, "not_found", f"no organization {org!r}")
    lines = await core.store.fetchall(
        "SELECT id, ts_ms, service, line FROM log_lines WHERE org_id = ? AND db = ? AND id > ? ORDER BY id LIMIT 5000",
        (row["id"], db, since),
    )
    return _json(
        {
            "lines": [
                {"id": r["id"], "ts_ms": r["ts_ms"], "service": r["service"] or None, "line": r["line"]} for r in lines
            ]
        }
    )


@get("/_emulator/switches")
async def switches_get(request: Request[Any, Any, Any]) -> Response[bytes]:
    return _json(site_of(request).core.switches.snapshot())


@post("/_emulator/switches", status_code=200)
async def switches_set(request: Request[Any, Any, Any]) -> Response[bytes]:
    switches = site_of(request).core.switches
    body = _decode(await request.body(), dict[str, bool])
    for name, value in body.items():
        switches.set(name, value)
    return _json(switches.snapshot())


HANDLERS = [
    status,
    clock_get,
    clock_move,
    journal,
    events,
    faults_get,
    faults_add,
    faults_release,
    claims_approve,
    claims_deny,
    trials_claim,
    trials_list,
    registrations_list,
    switches_get,
    switches_set,
    logins_approve,
    logins_pending,
    databases_list,
    database_logs,
]
