"""The scorecard: rules over the journal that name what a well-behaved client of the spec does.

Rules are data: each has an id, a one-line why (the site's rules page is generated from this table) and
a check over one agent's events that returns the evidence (event numbers) of each time it broke the rule. How
long an agent waited is the longer of the emulator's clock and real time, so an agent that sleeps for real on
a frozen clock, or a test that moves the clock instead of sleeping, both count as having waited.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from emulator.behaviour.agents import DISCOVERY, Agent, Journal
from emulator.behaviour.traces import call_failed, trace
from emulator.core.events import Event
from emulator.core.payloads import DbStateChanged, GatewayRequest, HttpRequest, IdpRegistered
from emulator.hosted.states import ACCEPTS_UPDATE, DB_SETTLING, SERVICE_SETTLING


class Finding(msgspec.Struct, kw_only=True):
    rule: str
    why: str
    evidence: list[int]  # event numbers (`emulator trace` and the journal show them)
    detail: str


class Card(msgspec.Struct, kw_only=True):
    agent: str
    type: str | None
    orgs: list[str]
    requests: int
    errors: int
    p50_ms: float | None
    p95_ms: float | None
    clean: bool
    findings: list[Finding]


class RuleDoc(msgspec.Struct, kw_only=True):
    id: str
    why: str


class Unattributed(msgspec.Struct, kw_only=True):
    """The requests that carried no credential: counted, never judged (see `agents`)."""

    requests: int
    errors: int
    addresses: list[str]  # the client addresses they came from, the latest first (at most 20)


class Report(msgspec.Struct, kw_only=True):
    agents: list[Card]
    rules: list[RuleDoc]
    clean: bool
    unattributed: Unattributed | None = None  # the whole journal's (a report of every agent)


Hit = tuple[list[int], str]  # (evidence, detail)
Check = Callable[[Journal, Agent, list[Event]], list[Hit]]

# /ask and /mcp take an Idempotency-Key (the spec's retry contract); other POSTs are one-shot by their own rule.
IDEMPOTENT_POSTS = frozenset({("site", "/ask"), ("site", "/mcp")})
TRIAL_PATH = "/api/v1/trial-orgs"
TOKEN_PATH = "/oauth2/token"
POLL_OPS = frozenset({"get_receipts", "get_db"})
POLL_CADENCE = 5.0  # seconds: how often the product's client polls a receipt
SERVICE_URL_OPS = frozenset({"list_services", "get_db", "get_receipts", "submit_update", "prepare_update"})
SETTLED = ACCEPTS_UPDATE  # where `db update` is accepted (the platform's own set)
UPDATE_OPS = frozenset({"prepare_update", "submit_update"})
SETTLING = DB_SETTLING | SERVICE_SETTLING  # a job is moving the resource: polling it is right


def _calls(mine: list[Event]) -> list[Event]:
    return [e for e in mine if isinstance(e.data, HttpRequest | GatewayRequest)]


def _call(e: Event) -> HttpRequest | GatewayRequest:
    """What a call (an event `_calls` kept) said, on any origin."""
    d = e.data
    if not isinstance(d, HttpRequest | GatewayRequest):
        raise TypeError(f"event #{e.seq} ({e.kind}) is not a call")
    return d


def _where(e: Event) -> tuple[str, str, str, str]:
    d = _call(e)
    if isinstance(d, GatewayRequest):
        return "gateway", d.method, d.path, ""
    return d.origin, d.method, d.path, d.op or ""


def waited(a: Event, b: Event) -> float:
    """Seconds between two calls: the longer of the emulator's clock and real time."""
    ra, rb = _call(a).rt, _call(b).rt
    return max(b.ts - a.ts, rb - ra if rb >= ra else 0.0)


def _status(e: Event) -> int:
    return _call(e).status


def _failed(e: Event) -> bool:
    return _status(e) == 0 or _status(e) >= 500 or _status(e) == 429


# --- the rules -------------------------------------------------------------------------------------------------


def ignored_retry_after(j: Journal, agent: Agent, mine: list[Event]) -> list[Hit]:
    calls, hits = _calls(mine), []
    for i, e in enumerate(calls):
        d = e.data
        if _status(e) not in (429, 503) or not isinstance(d, HttpRequest) or d.retry_after is None:
            continue
        try:
            wait = float(d.retry_after)
        except ValueError:
            continue
        again = next((n for n in calls[i + 1 :] if _where(n) == _where(e)), None)
        if again is not None and waited(e, again) < wait - 0.5:
            _, method, path, _ = _where(e)
            hits.append(
                (
                    [e.seq, again.seq],
                    f"{method} {path} was {_status(e)} with Retry-After: {d.retry_after}; "
                    f"it was sent again {waited(e, again):.1f} s later",
                )
            )
    return hits


def idempotency_key_reused(j: Journal, agent: Agent, mine: list[Event]) -> list[Hit]:
    first: dict[tuple[str, str, str, str], Event] = {}
    hits = []
    for e in _calls(mine):
        d = e.data
        if not isinstance(d, HttpRequest) or d.idem is None:
            continue
        key = d.idem
        origin, method, path, _ = _where(e)
        seen = first.setdefault((origin, method, path, key), e)
        bodies = (seen.payload(HttpRequest).body, d.body)
        if seen is not e and None not in bodies and bodies[0] != bodies[1]:
            hits.append(([seen.seq, e.seq], f"Idempotency-Key {key!r} was sent again on {path} with another body"))
    return hits


def unsafe_retry(j: Journal, agent: Agent, mine: list[Event]) -> list[Hit]:
    calls, hits = _calls(mine), []
    for i, e in enumerate(calls):
        origin, method, path, _ = _where(e)
        d = e.data
        if (
            method != "POST"
            or (origin, path) not in IDEMPOTENT_POSTS
            or not isinstance(d, HttpRequest)
            or d.idem is not None
        ):
            continue
        before = next((p for p in reversed(calls[:i]) if _where(p) == _where(e)), None)
        was = before.payload(HttpRequest) if before is not None else None  # the same origin: the site's
        if before is not None and was is not None and _failed(before) and was.idem is None:
            # A refusal answered before the body was read has no digest: it may have been the same call.
            if was.body in (None, d.body):
                hits.append(
                    (
                        [before.seq, e.seq],
                        f"POST {path} was retried after {_status(before) or 'a dropped connection'} without an "
                        "Idempotency-Key: the first may have run",
                    )
                )
    return hits


def second_trial(j: Journal, agent: Agent, mine: list[Event]) -> list[Hit]:
    asked = [e for e in _calls(mine) if _where(e)[1:3] == ("POST", TRIAL_PATH)]
    hits, answered = [], None
    for e in asked:
        if answered is not None:
            hits.append(
                ([answered.seq, e.seq], f"asked for a trial again after {_status(answered)}: a registration has one")
            )
        elif _status(e) in (200, 201, 409):
            answered = e
    return hits


def expired_token_reuse(j: Journal, agent: Agent, mine: list[Event]) -> list[Hit]:
    refused: dict[str, Event] = {}
    hits = []
    for e in _calls(mine):
        token = _call(e).token
        if not token or token == "opaque":
            continue
        if token in refused:  # one finding per refusal, not one per later call
            was = refused.pop(token)
            hits.append(([was.seq, e.seq], f"sent access token {token} again after its 401 instead of exchanging"))
        elif _status(e) == 401:
            refused[str(token)] = e
    return hits


def re_registered_instead_of_exchange(j: Journal, agent: Agent, mine: list[Event]) -> list[Hit]:
    hits = []
    for reg in agent.registrations:
        now = j.registered.get(reg)
        if now is None:
            continue
        ip = now.payload(IdpRegistered).ip
        earlier = [r for r in j.registered.values() if r.seq < now.seq and r.payload(IdpRegistered).ip == ip]
        if not earlier:
            continue
        previous = earlier[-1]
        from_ip = j.requests_from.get(ip, [])
        refusal = next(
            (
                e
                for e in reversed(from_ip)
                if previous.seq < e.seq < now.seq
                and e.payload(HttpRequest).reg == previous.subject
                and _status(e) == 401
            ),
            None,
        )
        if refusal is None:
            continue
        ended = j.ended.get(str(previous.subject))
        if ended is not None and ended.seq < now.seq:  # revoked or deleted: registering again is the way back
            continue
        if j.assertion_expired(str(previous.subject), refusal):  # nothing left to exchange: registering is the way
            continue
        exchanged = any(refusal.seq < e.seq < now.seq and e.payload(HttpRequest).path == TOKEN_PATH for e in from_ip)
        if not exchanged:
            hits.append(
                (
                    [refusal.seq, now.seq],
                    f"registered again as {reg} after {previous.subject}'s token was refused, without exchanging "
                    "its assertion at /oauth2/token",
                )
            )
    return hits


def hard_coded_url(j: Journal, agent: Agent, mine: list[Event]) -> list[Hit]:
    hits: list[Hit] = []
    read_services: set[str] = set()
    flagged: set[str] = set()
    for e in mine:
        if isinstance(e.data, IdpRegistered) and e.subject in agent.registrations:
            if not _read_discovery_before(j, e):
                hits.append(([e.seq], "registered without reading discovery (/.well-known/oauth-protected-resource)"))
            continue
        if not isinstance(e.data, HttpRequest | GatewayRequest):
            continue
        origin, _, path, op = _where(e)
        if origin == "api" and op in SERVICE_URL_OPS and _status(e) < 400:
            read_services.add(agent.keys.get(e.data.key or "", "").split("/")[0])
        elif origin == "gateway":
            org = str(e.subject).split(":")[0]
            if org not in read_services and e.subject not in flagged:
                flagged.add(str(e.subject))
                hits.append(([e.seq], f"called {path} on {e.subject}'s gateway before reading its address"))
    return hits


def _read_discovery_before(j: Journal, registered: Event) -> bool:
    """Whether discovery was read from the address that registered, before it did. Discovery carries no
    credential, so the address is all there is: it can only clear an agent (another agent on the address may
    have read it), never accuse one."""
    return any(
        e.seq < registered.seq and (d := e.payload(HttpRequest)).method == "GET" and d.path.startswith(DISCOVERY)
        for e in j.requests_from.get(registered.payload(IdpRegistered).ip, [])
    )


def _seen(history: list[tuple[int, str]], request: HttpRequest) -> tuple[str, int]:
    """A database's state as a request saw it, and the event that said so: the last change journaled before the
    request began (`after`). What the request itself caused is journaled before it, its answer waiting for it."""
    limit = request.after
    found = ("", 0)
    for seq, state in history:
        if seq > limit:
            break
        found = (state, seq)
    return found


def polling_too_fast(j: Journal, agent: Agent, mine: list[Event]) -> list[Hit]:
    """Runs of three or more polls of the same thing less than the client's cadence apart: the same receipts
    (`get_receipts` with the same body), or a database's status (`get_db`) while it is settling. A `get_db` of
    a settled database is a read, which the client makes many of (a final report, the tunnel's check)."""
    history: dict[str, list[tuple[int, str]]] = {}
    runs: dict[tuple[str, ...], list[Event]] = {}
    hits = []
    for e in mine:
        d = e.data
        if isinstance(d, DbStateChanged) and e.subject:
            history.setdefault(e.subject, []).append((e.seq, str(d.state)))
            continue
        if not isinstance(d, HttpRequest) or d.op not in POLL_OPS:
            continue
        caller = next((c for c in (d.key, d.user) if c is not None), "")
        if d.op == "get_receipts":
            key = ("get_receipts", caller, str(d.body))
        else:
            org = agent.keys.get(caller, agent.orgs[0] if agent.orgs else "").split("/")[0]
            if _seen(history.get(f"{org}:{d.db or ''}", []), d)[0] not in SETTLING:
                continue
            key = ("get_db", caller, d.db or "")
        run = runs.setdefault(key, [])
        if run and waited(run[-1], e) >= POLL_CADENCE * 0.9:
            if len(run) >= 3:
                hits.append(_poll_hit(run))
            run.clear()
        run.append(e)
    hits += [_poll_hit(run) for run in runs.values() if len(run) >= 3]
    return hits


def _poll_hit(run: list[Event]) -> Hit:
    first = run[0].payload(HttpRequest)
    op, db = first.op, first.db or ""
    gap = min(waited(a, b) for a, b in itertools.pairwise(run))
    return (
        [e.seq for e in run[:6]],
        f"{op} {db} was polled {len(run)} times, {gap:.1f} s apart at the least; the client polls every "
        f"{POLL_CADENCE:.0f} s",
    )


def update_while_not_available(j: Journal, agent: Agent, mine: list[Event]) -> list[Hit]:
    history: dict[str, list[tuple[int, str]]] = {}  # database → (event, state) of each change
    flagged: set[tuple[str, int]] = set()  # one finding per database and state: a plan and its submit are one update
    hits = []
    for e in mine:
        d = e.data
        if isinstance(d, DbStateChanged) and e.subject:
            history.setdefault(e.subject, []).append((e.seq, str(d.state)))
        elif isinstance(d, HttpRequest) and d.op in UPDATE_OPS and d.db:
            org = agent.keys.get(d.key or "", agent.orgs[0] if agent.orgs else "").split("/")[0]
            database = f"{org}:{d.db}"
            was, since = _seen(history.get(database, []), d)
            if was and was not in SETTLED and (database, since) not in flagged:
                flagged.add((database, since))
                hits.append(([since, e.seq], f"sent db update for {d.db} while it was {was}; wait for AVAILABLE"))
    return hits


def secret_in_url(j: Journal, agent: Agent, mine: list[Event]) -> list[Hit]:
    return [
        ([e.seq], f"{_where(e)[1]} {_where(e)[2]} carried a credential in its query ({_call(e).secret_in_url})")
        for e in _calls(mine)
        if _call(e).secret_in_url
    ]


@dataclass(frozen=True)
class Rule:
    id: str
    why: str
    check: Check


RULES: tuple[Rule, ...] = (
    Rule(
        "ignored-retry-after",
        "sent a call again before the Retry-After of its 429 or 503 had passed",
        ignored_retry_after,
    ),
    Rule(
        "idempotency-key-reused",
        "sent an Idempotency-Key again with another body (the spec answers 422)",
        idempotency_key_reused,
    ),
    Rule("unsafe-retry", "retried a POST to /ask or /mcp after a failure without an Idempotency-Key", unsafe_retry),
    Rule("second-trial", "asked for a trial again after a 201 or 409: a registration has one trial", second_trial),
    Rule(
        "expired-token-reuse",
        "kept sending an access token after its 401 instead of exchanging the assertion again",
        expired_token_reuse,
    ),
    Rule(
        "re-registered-instead-of-exchange",
        "registered a new identity when its token was refused, instead of exchanging its assertion",
        re_registered_instead_of_exchange,
    ),
    Rule(
        "hard-coded-url",
        "called an address it never read: the issuer before discovery, a service before service list",
        hard_coded_url,
    ),
    Rule(
        "polling-too-fast",
        "polled the same receipts, or a settling database's status, faster than the client's 5 s cadence",
        polling_too_fast,
    ),
    Rule(
        "update-while-not-available", "sent db update while the database was not AVAILABLE", update_while_not_available
    ),
    Rule(
        "secret-in-url",
        "put a key, token or assertion in a URL's query string, where logs and proxies keep it",
        secret_in_url,
    ),
)


def card(j: Journal, agent: Agent, mine: list[Event] | None = None) -> Card:
    mine = j.events_of(agent) if mine is None else mine
    t = trace(j, agent, mine)
    findings = [
        Finding(rule=rule.id, why=rule.why, evidence=evidence, detail=detail)
        for rule in RULES
        for evidence, detail in rule.check(j, agent, mine)
    ]
    return Card(
        agent=agent.id,
        type=agent.type,
        orgs=agent.orgs,
        requests=t.requests,
        errors=t.errors,
        p50_ms=t.p50_ms,
        p95_ms=t.p95_ms,
        clean=not findings,
        findings=findings,
    )


def report(j: Journal, agent: Agent | None = None) -> Report:
    agents = [agent] if agent is not None else j.agents()
    theirs = j.partition(agents)
    cards = [card(j, a, theirs[a.id]) for a in agents]
    nobody = None
    if agent is None:
        calls = j.unattributed()
        addresses = list(dict.fromkeys(str(e.subject) for e in reversed(calls)))  # the latest first
        nobody = Unattributed(
            requests=len(calls),
            errors=sum(1 for e in calls if call_failed(e.payload(HttpRequest))),
            addresses=addresses[:20],
        )
    return Report(
        agents=cards,
        rules=[RuleDoc(id=r.id, why=r.why) for r in RULES],
        clean=all(c.clean for c in cards),
        unattributed=nobody,
    )


def render(r: Report) -> str:
    """The report for people."""
    lines = []
    if r.unattributed is not None and r.unattributed.requests:
        u = r.unattributed
        lines.append(
            f"unattributed (no credential; not judged): {u.requests} requests, {u.errors} errors, from "
            f"{', '.join(u.addresses)}"
        )
    if not r.agents:
        return "\n".join([*lines, "no agent in the journal yet"])
    for c in r.agents:
        verdict = "clean" if c.clean else f"{len(c.findings)} finding(s)"
        lines.append(
            f"{c.agent}{' (' + c.type + ')' if c.type else ''}: {c.requests} requests, {c.errors} errors; {verdict}"
        )
        for f in c.findings:
            lines.append(f"  {f.rule}  {f.detail}  [#{', #'.join(str(s) for s in f.evidence)}]")
    return "\n".join(lines)
