"""What the dashboard knows about the emulator, and which snapshot each event kind makes stale.

The dashboard never polls: it reads the event stream, and an event names which of these small snapshots
to fetch again. Time-dependent columns (a trial's time left) are computed here from the emulator's clock,
which is estimated locally between `clock.moved` events when it runs.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from emulator.admin.client import EmulatorClient
from emulator.admin.wire import (
    ClaimList,
    EventView,
    FaultList,
    FaultRuleView,
    KeyList,
    KeyView,
    LoginList,
    OrgList,
    OrgView,
    PendingClaimView,
    PendingLoginView,
    RegistrationList,
    RegistrationView,
    ServiceList,
    ServiceView,
    SnapshotList,
    UserList,
    UserView,
)
from emulator.behaviour.scorecard import Card, Report, Unattributed
from emulator.core.kinds import Kind
from emulator.core.payloads import ClockMoved, EmulatorReset, SnapshotLoaded
from emulator.core.snapshots import SnapshotView

# What one snapshot's fetch answers (switches come as a bare name -> on mapping).
Snapshot = (
    RegistrationList
    | ClaimList
    | LoginList
    | OrgList
    | ServiceList
    | UserList
    | KeyList
    | dict[str, bool]
    | Report
    | FaultList
    | SnapshotList
)
# Snapshot name -> its fetch. Each is one small collection.
SNAPSHOTS: dict[str, Callable[[EmulatorClient], Awaitable[Snapshot]]] = {
    "registrations": EmulatorClient.registrations,
    "claims": EmulatorClient.claims,
    "logins": EmulatorClient.logins,
    "orgs": EmulatorClient.orgs,
    "services": EmulatorClient.services,
    "users": EmulatorClient.users,
    "keys": EmulatorClient.keys,
    "switches": EmulatorClient.switches,
    "agents": EmulatorClient.report,
    "faults": EmulatorClient.faults,
    "snapshots": EmulatorClient.snapshots,
}
ALL = frozenset(SNAPSHOTS)

_ORGS, _REGS, _CLAIMS = frozenset({"orgs"}), frozenset({"registrations"}), frozenset({"claims", "registrations"})
_USERS, _KEYS = frozenset({"users"}), frozenset({"keys"})
# Event kind -> the snapshots it makes stale (a kind not named here stales none).
_AFFECTS: dict[str, frozenset[str]] = {
    Kind.IDP_LOGIN_STARTED: frozenset({"logins"}),
    **dict.fromkeys((Kind.IDP_LOGIN_APPROVED, Kind.IDP_LOGIN_DENIED), frozenset({"logins", "users"})),
    **dict.fromkeys((Kind.IDP_USER_CREATED, Kind.IDP_SESSION), _USERS),
    **dict.fromkeys(
        (
            Kind.IDP_REGISTERED,
            Kind.IDP_CLAIM_STARTED,
            Kind.IDP_CLAIM_CONFIRMED,
            Kind.IDP_CLAIM_DENIED,
        ),
        _CLAIMS,
    ),
    Kind.IDP_CLAIMED: _CLAIMS | _USERS,
    **dict.fromkeys((Kind.IDP_REFRESHED, Kind.IDP_TOKEN_ISSUED), _REGS),
    Kind.IDP_TOKEN_REVOKED: _REGS | _USERS,  # an access token, or a `pxt login` session (logout)
    # The service side revoked or deleted a registration (its trial key stops working too); a claim window closed.
    **dict.fromkeys(
        (Kind.IDP_REVOKED, Kind.AGENT_REGISTRATION_DELETED, Kind.AGENT_REGISTRATION_EXPIRED), _CLAIMS | _KEYS
    ),
    **dict.fromkeys(
        (Kind.TRIAL_CREATED, Kind.TRIAL_CLAIMED, Kind.TRIAL_EXPIRED),
        frozenset({"orgs", "registrations", "claims", "users", "keys"}),
    ),
    Kind.CLOUD_ORG_CREATED: _ORGS | _USERS,
    **dict.fromkeys((Kind.CLOUD_KEY_CREATED, Kind.CLOUD_KEY_UPDATED, Kind.CLOUD_KEY_DELETED), _ORGS | _KEYS),
    Kind.CLOUD_CALL: _KEYS,  # a key's last use
    Kind.SWITCH_CHANGED: frozenset({"switches"}),
    # A rule armed, fired (a counted rule may be spent) or a request held. Removing a rule publishes nothing:
    # the dashboard fetches the rules again after its own removal and whenever the Faults view is shown.
    **dict.fromkeys((Kind.FAULT_ARMED, Kind.FAULT_FIRED, Kind.FAULT_HELD, Kind.FAULT_REMOVED), frozenset({"faults"})),
    **dict.fromkeys((Kind.SNAPSHOT_SAVED, Kind.SNAPSHOT_DELETED, Kind.SNAPSHOT_IMPORTED), frozenset({"snapshots"})),
    Kind.STATE_APPLIED: ALL,
    Kind.DB_STATE: frozenset({"orgs", "services"}),
    **dict.fromkeys(
        (
            Kind.DB_UPDATE_ACCEPTED,
            Kind.DB_START_ACCEPTED,
            Kind.DB_STOP_ACCEPTED,
            Kind.DB_RESTART_ACCEPTED,
            Kind.DB_DELETE_ACCEPTED,
            Kind.DB_RECEIPT,
            Kind.DB_RESIZED,
            Kind.DB_EXITED,
            Kind.TUNNEL_CONNECTED,
            Kind.TUNNEL_CLOSED,
        ),
        _ORGS,
    ),
    **dict.fromkeys(
        (
            Kind.SERVICE_ACCEPTED,
            Kind.SERVICE_STOP_ACCEPTED,
            Kind.SERVICE_RESTART_ACCEPTED,
            Kind.SERVICE_DELETE_ACCEPTED,
            Kind.SERVICE_STATE,
            Kind.SERVICE_RESIZED,
        ),
        frozenset({"services"}),
    ),
    # Pending claims and sign-ins lapse with time, and sessions expire.
    Kind.CLOCK_MOVED: frozenset({"claims", "logins", "registrations", "users"}),
    Kind.EMULATOR_STARTED: ALL,
    Kind.EMULATOR_RESET: ALL,
    Kind.SNAPSHOT_LOADED: ALL,  # a whole other world: everything is fetched again
}


# An agent's first steps make the Agents view stale at once; its calls (http.request and gateway.request, which
# come by the hundred) mark it for the once-a-second refresh instead (AGENT_ACTIVITY).
for _kind in (Kind.IDP_REGISTERED, Kind.TRIAL_CREATED, Kind.TRIAL_CLAIMED, Kind.TRIAL_EXPIRED, Kind.CLOUD_ORG_CREATED):
    _AFFECTS[_kind] = _AFFECTS.get(_kind, frozenset()) | {"agents"}
AGENT_ACTIVITY = frozenset({Kind.HTTP_REQUEST, Kind.GATEWAY_REQUEST, Kind.DB_STATE})


def affected(kind: str) -> frozenset[str]:
    return _AFFECTS.get(kind, frozenset())


@dataclass
class Clock:
    """The emulator's clock as last reported, advanced locally while it runs (no polling needed)."""

    now: float = 0.0
    frozen: bool = True
    at: float = field(default_factory=time.monotonic)

    def set(self, now: float, frozen: bool) -> None:
        self.now, self.frozen, self.at = now, frozen, time.monotonic()

    def current(self) -> float:
        return self.now if self.frozen else self.now + (time.monotonic() - self.at)

    def label(self) -> str:
        if not self.now:
            return "clock unknown"
        stamp = datetime.fromtimestamp(self.current(), UTC).strftime("%Y-%m-%d %H:%M:%SZ")
        return f"{stamp} {'(frozen)' if self.frozen else '(running)'}"


@dataclass(frozen=True)
class ExpiredTrial:
    """A trial deleted while we watched (or in the journal backlog): what was known of it, if anything, and what
    its `trial.expired` event told."""

    known: OrgView | None
    org_id: str | None
    expired_at: float | None


@dataclass
class Model:
    clock: Clock = field(default_factory=Clock)
    version: str = ""
    last_seq: int = 0
    registrations: list[RegistrationView] = field(default_factory=list)
    claims: dict[str, PendingClaimView] = field(default_factory=dict)  # registration id -> pending claim
    logins: list[PendingLoginView] = field(default_factory=list)
    orgs: list[OrgView] = field(default_factory=list)
    services: list[ServiceView] = field(default_factory=list)
    users: list[UserView] = field(default_factory=list)
    keys: list[KeyView] = field(default_factory=list)
    agents: list[Card] = field(default_factory=list)  # the scorecard's cards
    unattributed: Unattributed | None = None  # the requests no credential names: counted, not judged
    switches: dict[str, bool] = field(default_factory=dict)
    faults: list[FaultRuleView] = field(default_factory=list)  # the armed rules, as `emulator fault list`
    holds: dict[str, int] = field(default_factory=dict)  # path -> requests still to hold
    waiting: list[str] = field(default_factory=list)  # paths of requests held now
    snapshots: list[SnapshotView] = field(default_factory=list)
    # Trials deleted while we watched, by name: kept, so they show as deleted rather than vanish.
    expired: dict[str, ExpiredTrial] = field(default_factory=dict)

    def apply_snapshot(self, body: Snapshot) -> None:
        match body:
            case RegistrationList():
                self.registrations = body.registrations
            case ClaimList():
                self.claims = {c.registration: c for c in body.claims}
            case LoginList():
                self.logins = body.pending
            case OrgList():
                self.orgs = body.orgs
                live = {o.org for o in self.orgs}
                self.expired = {slug: e for slug, e in self.expired.items() if slug not in live}
            case ServiceList():
                self.services = body.services
            case UserList():
                self.users = body.users
            case KeyList():
                self.keys = body.keys
            case dict():
                self.switches = dict(body)
            case Report():
                self.agents, self.unattributed = body.agents, body.unattributed
            case FaultList():
                self.faults, self.holds, self.waiting = body.rules, body.holds, body.waiting
            case SnapshotList():
                self.snapshots = body.snapshots

    def note_event(self, event: EventView, *, live: bool = True) -> None:
        """What an event tells directly, without a fetch. A replayed event (`live` False: one from before the
        snapshots we hold) must not set the clock: its `now` is old, and the status read at attach is current."""
        kind, subject, data = event.kind, event.subject, event.data
        moved = next((p for p in (ClockMoved, EmulatorReset, SnapshotLoaded) if p.KIND == kind), None)
        if live and moved is not None:
            clock = moved.read(data)
            self.clock.set(clock.now, clock.frozen)
        if kind in (Kind.EMULATOR_RESET, Kind.SNAPSHOT_LOADED):
            self.expired = {}
        elif kind == Kind.TRIAL_EXPIRED and subject:
            known = next((o for o in self.orgs if o.org == subject), None)
            self.expired[subject] = ExpiredTrial(known, data.get("org_id"), data.get("expired_at"))
            self.orgs = [o for o in self.orgs if o.org != subject]

    def trials(self) -> list[OrgView]:
        return [o for o in self.orgs if o.trial]

    def deleted_trial(self, org_id: str | None) -> str | None:
        """The name of a trial deleted while we watched (or in the backlog), by its org id."""
        if not org_id:
            return None
        return next((slug for slug, e in self.expired.items() if e.org_id == org_id), None)


def fmt_left(seconds: float | None) -> str:
    """Time left as a person reads it: `47h 59m`, `59m 30s`, `12s`."""
    if seconds is None:
        return "—"
    s = int(seconds)
    if s <= 0:
        return "due"
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s}s"


def fmt_span(seconds: float) -> str:
    """A span exactly, for a move of the clock: `48h 00m 01s`, `48h 00m`, `1m 30s`, `0.25s`."""
    if 0 < seconds < 1:
        return f"{seconds:.3g}s"
    s = round(seconds)
    h, m, sec = s // 3600, s % 3600 // 60, s % 60
    if h:
        return f"{h}h {m:02d}m" + (f" {sec:02d}s" if sec else "")
    if m:
        return f"{m}m {sec:02d}s" if sec else f"{m}m"
    return f"{sec}s"


def fmt_ago(then: float | None, now: float) -> str:
    if then is None:
        return "—"
    s = int(now - then)
    if s < 60:
        return "just now" if s < 5 else f"{s}s ago"
    if s < 3600:
        return f"{s // 60}m ago"
    if s < 86400:
        return f"{s // 3600}h ago"
    return f"{s // 86400}d ago"


def parse_iso(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def fmt_instant(ts: float | None) -> str:
    """An instant (epoch seconds) as the emulator's API writes it: `2026-11-24T15:42:27Z`."""
    if ts is None:
        return "—"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fmt_stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%m-%d %H:%M:%S")
