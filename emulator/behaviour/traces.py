"""One agent's causal chain across every origin, in journal order, on the emulator's clock."""

from __future__ import annotations

from typing import Any

import msgspec

from emulator.behaviour.agents import Agent, Journal
from emulator.core.clock import iso
from emulator.core.events import Event
from emulator.core.payloads import DbLog, GatewayRequest, HttpRequest, failed


class Step(msgspec.Struct, kw_only=True):
    seq: int
    at: str  # the emulator's clock, RFC 3339
    ts: float
    origin: str  # site, auth, api, gateway, tunnel, hosted, emulator
    kind: str
    what: str
    status: int | None = None
    ms: float | None = None
    subject: str | None = None
    # The event's payload as JSON. `Any` as the document shows it (`"type": "object"`): msgspec documents no `object`.
    data: dict[str, Any] = {}


class Trace(msgspec.Struct, kw_only=True):
    agent: Agent
    steps: list[Step]
    requests: int
    errors: int  # answers of 400 and above but a pending poll's, and dropped connections
    p50_ms: float | None
    p95_ms: float | None


_ORIGIN_OF = {
    "idp": "auth",
    "agent": "auth",
    "trial": "site",
    "cloud": "api",
    "db": "hosted",
    "service": "hosted",
    "disk": "hosted",
}


def step(e: Event) -> Step:
    d = e.data
    data: dict[str, object] = msgspec.to_builtins(d)  # any kind's fields, as the journal holds them
    said = data.get("status")
    status = said if isinstance(said, int) else None  # a call's, an exit's, …
    ms = d.ms if isinstance(d, HttpRequest | GatewayRequest) else None
    family = e.kind.split(".", 1)[0]
    if isinstance(d, HttpRequest):
        origin = d.origin
        what = f"{d.method} {d.path}" + (f" {d.op}" if d.op else "")
        what += f" {d.db}" if d.db else ""
    elif isinstance(d, GatewayRequest):
        origin, what = "gateway", f"{d.method} {d.path} ({e.subject})"
    elif isinstance(d, DbLog):
        origin, what = "hosted", f"log {e.subject}{'/' + d.service if d.service else ''}: {d.line}"
    else:
        origin = _ORIGIN_OF.get(family, family)
        brief = " ".join(f"{k}={v}" for k, v in data.items() if k not in ("ip",) and v not in (None, "", [], {}))
        what = f"{e.kind} {e.subject or ''} {brief}".strip()
    return Step(
        seq=e.seq,
        at=iso(e.ts),
        ts=e.ts,
        origin=origin,
        kind=e.kind,
        what=what[:400],
        status=status,
        ms=ms,
        subject=e.subject,
        data=data,
    )


def call_failed(d: HttpRequest | GatewayRequest) -> bool:
    """`core.payloads.failed` of a call on any origin (a gateway's answer has no error code)."""
    return failed(d.status, d.error_code if isinstance(d, HttpRequest) else None)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def trace(journal: Journal, agent: Agent, mine: list[Event] | None = None) -> Trace:
    events = journal.events_of(agent) if mine is None else mine
    steps = [step(e) for e in events]
    calls = [e.data for e in events if isinstance(e.data, HttpRequest | GatewayRequest)]
    latencies = [c.ms for c in calls]
    return Trace(
        agent=agent,
        steps=steps,
        requests=len(calls),
        errors=sum(1 for c in calls if call_failed(c)),
        p50_ms=percentile(latencies, 0.5),
        p95_ms=percentile(latencies, 0.95),
    )


def render(t: Trace) -> str:
    """The trace for people: a header, then one line per step."""
    a = t.agent
    head = [f"agent {a.id}" + (f" ({a.type})" if a.type else "")]
    if a.ips:
        head.append(f"  from {', '.join(a.ips)}")
    if a.orgs:
        head.append(f"  organizations: {', '.join(a.orgs)}")
    if a.keys:
        head.append(f"  keys: {', '.join(sorted(a.keys.values()))}")
    p = lambda v: "-" if v is None else f"{v:.1f} ms"  # noqa: E731
    head.append(f"  {t.requests} requests, {t.errors} errors, p50 {p(t.p50_ms)}, p95 {p(t.p95_ms)}")
    lines = []
    for s in t.steps:
        status = "" if s.status is None else ("drop" if s.status == 0 else str(s.status))
        ms = "" if s.ms is None else f"{s.ms:.0f}ms"
        lines.append(f"#{s.seq:<6} {s.at[11:19]} {s.origin:<7} {status:>4} {ms:>7}  {s.what}")
    return "\n".join(head + ([""] if lines else []) + lines)
