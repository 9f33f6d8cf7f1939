"""The wire types of `/_emulator`: what its endpoints answer and take. The CLI and the dashboard decode with
these same types, so a field renamed here is renamed for every consumer at once."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from emulator.core.clock import ClockState, iso
from emulator.core.events import Event
from emulator.core.faults import FaultList as FaultList  # the faults resource's types are core's, which answers
from emulator.core.faults import FaultRuleView as FaultRuleView  # with them; named here with the other wire types
from emulator.core.snapshots import SnapshotView
from emulator.hosted.keys import KeyView as KeyView  # the domain lists keys as these
from emulator.hosted.records import Database, Org, Receipt, Service
from emulator.hosted.secrets import SecretView as SecretView  # the domain lists secrets as these (never a value)
from emulator.identity.agents_api import AgentRegistrationView as AgentRegistrationView  # revoke's answer
from emulator.identity.deliveries import AttemptView as AttemptView  # the webhooks' views are the domain's
from emulator.identity.deliveries import DeliveryList as DeliveryList
from emulator.identity.deliveries import DeliveryView as DeliveryView
from emulator.identity.endpoints import WebhookAdd as WebhookAdd
from emulator.identity.endpoints import WebhookCreated as WebhookCreated
from emulator.identity.endpoints import WebhookList as WebhookList
from emulator.identity.endpoints import WebhookRemoved as WebhookRemoved
from emulator.identity.endpoints import WebhookView as WebhookView
from emulator.identity.service_keys import ServiceKeyCreated as ServiceKeyCreated  # its key shown once
from emulator.identity.service_keys import ServiceKeyView as ServiceKeyView  # never a key or its hash
from emulator.runtime.metering import DatabaseUsage
from emulator.runtime.tables import HostedTable as HostedTable  # the runtime reads a database's tables as these
from emulator.tunnel.forward import ProxyStatus


class ClockView(msgspec.Struct):
    now: float
    iso: str
    frozen: bool
    offset: float

    @classmethod
    def of(cls, state: ClockState) -> ClockView:
        return cls(state.now, state.iso, state.frozen, round(state.offset, 3))


class RuntimeView(msgspec.Struct):
    kind: str  # the launcher: "process" or "docker"
    unenforced_limits: list[str]  # plan limits this runtime cannot hold a workload to
    base_image: str | None
    profile: str  # "developer" or "throwaway"
    spares: bool  # whether running workloads keep a spare (as the profile says, unless set)
    build_cache: str | None  # the per-user cache of built environments; None: off


class LimitsView(msgspec.Struct):
    ask_rate_limit: int
    ask_rate_window: int
    idempotency_ttl: int


class Endpoints(msgspec.Struct, kw_only=True):
    """Where a running emulator's origins listen: its status's `endpoints`, and endpoints.json's."""

    site: str
    base_url: str  # the site's, under the name the pixeltable client knows
    auth: str
    api: str
    tunnel: str  # DOMAIN:PORT, the hosted databases' TLS tunnel
    proxy: str  # the CONNECT proxy's URL
    ca_bundle: str  # a path: the local CA's bundle (with the system's CAs)
    runtime: str
    s3: str

    def exports(self) -> dict[str, str]:
        """The environment that points clients at this emulator (what `emulator env` prints, `emulator exec` sets,
        the test kit and an evaluation's agents get)."""
        return {
            "EMULATOR_URL": self.site,
            "EMULATOR_AUTH_URL": self.auth,
            # What the unmodified pixeltable client reads: `pxt new` asks the site for a trial, and every
            # later command sends the trial's key to the control plane.
            "PIXELTABLE_SITE_URL": self.site,
            "PIXELTABLE_API_URL": self.api,
            # Hosted databases: <org>-<db>.<domain> through the emulator's CONNECT proxy (no /etc/hosts edit),
            # over TLS that the emulator's local CA signs (the bundle also holds the system's CAs).
            "PIXELTABLE_CLOUD_HOST": self.tunnel,
            "HTTPS_PROXY": self.proxy,
            "NO_PROXY": "127.0.0.1,localhost,::1",
            "SSL_CERT_FILE": self.ca_bundle,
            "REQUESTS_CA_BUNDLE": self.ca_bundle,
        }


class EndpointsFile(Endpoints, kw_only=True):
    """`<state dir>/endpoints.json`, written once the emulator serves: where it is, and who serves it."""

    pid: int
    version: str
    started_at: str
    state_dir: str


class StatusView(msgspec.Struct):
    version: str
    endpoints: dict[str, str]
    clock: ClockView
    state_dir: str
    docs: str
    events: int  # the journal's last event number
    switches: dict[str, bool]
    runtime: RuntimeView
    proxy: ProxyStatus
    limits: LimitsView


class EventView(msgspec.Struct):
    seq: int
    ts: float
    iso: str
    kind: str
    subject: str | None
    data: dict[str, Any]  # the kind's payload as JSON (core.payloads; `Payload.read` types it again)

    @classmethod
    def of(cls, e: Event) -> EventView:
        return cls(e.seq, e.ts, iso(e.ts), e.kind, e.subject, msgspec.to_builtins(e.data))


class JournalPage(msgspec.Struct):
    """GET /_emulator/journal: events after `since`, oldest first, and the journal's last event number."""

    events: list[EventView]
    last_seq: int


class ServerView(msgspec.Struct):
    """A database's server while it runs."""

    ready: bool  # it answers on its private socket


class UsageView(msgspec.Struct):
    """What a hosted database's workloads used since the emulator started (a reset clears it): its servers,
    prepare_project runs, services and spares, and the process runtime's Postgres. CPU seconds; the most resident
    memory they held together at one reading (read once a second while they run)."""

    cpu_seconds: float
    peak_memory_mb: float

    @classmethod
    def of(cls, u: DatabaseUsage) -> UsageView:
        return cls(u.cpu_seconds, round(u.peak_memory_bytes / 2**20, 1))


class DatabaseUsageView(msgspec.Struct, kw_only=True):
    org: str  # the organization's slug
    db: str
    usage: UsageView
    running: int  # its workloads (and Postgres) running now


class UsageList(msgspec.Struct):
    """GET /_emulator/usage: every database's usage, after a reading taken for the answer; deleted ones included."""

    databases: list[DatabaseUsageView]

    @property
    def cpu_seconds(self) -> float:
        return round(sum((d.usage.cpu_seconds for d in self.databases), 0.0), 3)

    @property
    def peak_memory_mb(self) -> float:
        """The databases' peaks summed (each its own, not necessarily at the same moment)."""
        return round(sum((d.usage.peak_memory_mb for d in self.databases), 0.0), 1)


class DatabaseView(msgspec.Struct):
    """A hosted database as the operator sees it: its state, generation, environment and whether its server runs."""

    org: str
    db: str
    state: str
    generation: int
    environment: str | None
    last_build_outcome: str | None
    failure_reason: str | None
    server: ServerView | None  # None while it does not run
    gateway_port: int | None
    receipt: Receipt | None
    updated_at: str
    usage: UsageView | None = None  # None: none of its workloads ran since the emulator started

    @classmethod
    def of(cls, d: Database, ready: bool | None, usage: DatabaseUsage | None = None) -> DatabaseView:
        """`ready`: whether its server answers yet, None when it does not run."""
        return cls(
            org=d.slug,
            db=d.name,
            state=d.state,
            generation=d.generation,
            environment=(d.env_digest or "")[:12] or None,
            last_build_outcome=d.last_build_outcome,
            failure_reason=d.failure_reason,
            server=None if ready is None else ServerView(ready),
            gateway_port=d.gateway_port,
            receipt=d.receipt,
            updated_at=iso(d.updated_at),
            usage=None if usage is None else UsageView.of(usage),
        )


class OrgView(msgspec.Struct):
    org: str
    org_id: str
    trial: bool
    state: str
    registration: str | None
    network: str | None
    created_at: str
    expires_at: str | None
    expires_ts: float | None
    seconds_left: int | None
    api_keys: list[str]
    admins: list[str]
    databases: list[DatabaseView]

    @classmethod
    def of(cls, o: Org, keys: list[str], admins: list[str], dbs: list[DatabaseView], now: float) -> OrgView:
        return cls(
            org=o.slug,
            org_id=o.id,
            trial=o.trial,
            state=o.state,
            registration=o.registration_id,
            network=o.network,
            created_at=iso(o.created_at),
            expires_at=iso(o.expires_at) if o.expires_at else None,
            expires_ts=o.expires_at,
            seconds_left=max(0, int(o.expires_at - now)) if o.expires_at else None,
            api_keys=keys,
            admins=admins,
            databases=dbs,
        )


class ServiceView(msgspec.Struct):
    org: str
    db: str
    service: str
    base_path: str
    state: str
    generation: int
    endpoint: str | None
    error: str | None
    updated_at: str

    @classmethod
    def of(cls, s: Service, endpoint: str | None) -> ServiceView:
        return cls(s.slug, s.db, s.name, s.base_path, s.state, s.generation, endpoint, s.error, iso(s.updated_at))


class TableList(msgspec.Struct):
    """GET /_emulator/databases/{org}/{db}/tables: what the database holds, read by its own pixeltable."""

    org: str
    db: str
    tables: list[HostedTable]


class ServiceCall(msgspec.Struct, forbid_unknown_fields=True):
    """POST /_emulator/services/{org}/{db}/call: the operator's request to a running service (past its gateway)."""

    service: str  # its label, "name" or "base/name"
    path: str  # the route, e.g. "/docs"
    method: str = "POST"
    # the request's JSON body, as given (null: none); a factory, so the schema shows no default it cannot encode
    json: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))

    def __post_init__(self) -> None:
        if not self.path.startswith("/") or "\r" in self.path or "\n" in self.path or " " in self.path:
            raise ValueError("path must be a route beginning with /, without spaces")
        if self.method not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            raise ValueError("method must be one of GET, POST, PUT, PATCH, DELETE")


class ServiceAnswer(msgspec.Struct):
    """What the service answered the operator's call: its status, content type and body (as text)."""

    status: int
    content_type: str
    body: str


class LogLineView(msgspec.Struct):
    id: int
    ts_ms: int
    service: str | None
    line: str


# --- the collections, as each endpoint wraps them ---------------------------------------------------------


class OrgList(msgspec.Struct):
    now: float  # the emulator's clock when the list was read
    orgs: list[OrgView]


class TrialList(msgspec.Struct):
    trials: list[OrgView]


class DatabaseList(msgspec.Struct):
    runtime: str
    unenforced_limits: list[str]
    databases: list[DatabaseView]


class ServiceList(msgspec.Struct):
    services: list[ServiceView]


class LogLines(msgspec.Struct):
    lines: list[LogLineView]


class SnapshotList(msgspec.Struct):
    snapshots: list[SnapshotView]


class FaultsReleased(msgspec.Struct):
    """POST /_emulator/faults/release: how many held requests went on, and the rules and holds left (FaultList's
    fields, after `released`: the order the answer has always had)."""

    released: int
    rules: list[FaultRuleView]
    holds: dict[str, int]
    waiting: list[str]


class Switches(msgspec.Struct):
    """GET and POST /_emulator/switches: each runtime switch's value, in core/switches.SWITCHES's order (held to it by
    tests/test_operator_ops.py)."""

    anonymous_registration: bool
    service_auth_registration: bool
    identity_assertion_registration: bool
    trials_enabled: bool
    cloud_reachable: bool


# --- agent registrations, claims and sign-ins -------------------------------------------------------------


class LatestClaimView(msgspec.Struct):
    """A registration's newest claim attempt."""

    state: str  # "pending" | "confirmed" | "denied" | "completed" | "lapsed"
    email: str | None  # who decided it
    expires_at: str


class RegistrationView(msgspec.Struct):
    id: str
    type: str
    status: str  # "registered" | "claimed"
    login_hint: str | None
    claimed_email: str | None
    scopes: list[str]
    trial: str | None  # its trial's slug while the trial lives
    trial_org_id: str | None
    tokens_issued: int
    last_token_at: str | None
    created_at: str
    claim: LatestClaimView | None
    revoked_at: str | None = None  # revoked by the service side or the operator
    service_status: str = "unverified"  # as the service side reads it: unverified, verified, expired or revoked


class RegistrationList(msgspec.Struct):
    registrations: list[RegistrationView]


class PendingClaimView(msgspec.Struct):
    """A claim attempt a person can still act on."""

    registration: str
    login_hint: str | None
    state: str  # "pending" | "confirmed"
    email: str | None
    expires_at: str


class ClaimList(msgspec.Struct):
    claims: list[PendingClaimView]


class PendingLoginView(msgspec.Struct):
    """A `pxt login` sign-in waiting for the person."""

    user_code: str
    expires_at: str


class LoginList(msgspec.Struct):
    pending: list[PendingLoginView]


# --- what the operator's acts take --------------------------------------------------------------------------


class ClockMove(msgspec.Struct, forbid_unknown_fields=True):
    """Body of POST /_emulator/clock. Applied in this order: freeze, set, advance, resume."""

    advance: str | float | None = None  # seconds, or "90s", "15m", "48h", "2d"
    set: str | float | None = None  # ISO 8601 or epoch seconds
    freeze: bool | None = None  # true freezes, false lets it run again


class FaultRelease(msgspec.Struct, forbid_unknown_fields=True):
    path: str | None = None


class ClaimDecision(msgspec.Struct, forbid_unknown_fields=True):
    """Play the person on a pending agent claim: by its verification_uri (or attempt token) or registration."""

    email: str
    claim: str | None = None
    registration: str | None = None


class TrialClaim(msgspec.Struct, forbid_unknown_fields=True):
    """Claim a trial as a person: `org` is its slug (or org id)."""

    org: str
    email: str


class LoginDecision(msgspec.Struct, forbid_unknown_fields=True):
    """Play the person on the `pxt login` page: approve (or deny) the sign-in showing `user_code`."""

    user_code: str
    email: str
    deny: bool = False


# --- people and keys, for the operator (never a secret, a token or a hash) ---------------------------------


class MembershipView(msgspec.Struct):
    org: str
    role: str  # "admin" | "member"


class SessionView(msgspec.Struct):
    """A `pxt login` session: its refresh token's expiry is the session's."""

    id: str
    org: str | None
    created_at: str
    expires_at: str
    revoked_at: str | None
    state: str  # "active" | "expired" | "revoked"


class UserView(msgspec.Struct):
    id: str
    email: str
    created_at: str
    orgs: list[MembershipView]
    sessions: list[SessionView]


class UserList(msgspec.Struct):
    users: list[UserView]


class KeyList(msgspec.Struct):
    keys: list[KeyView]


class SecretList(msgspec.Struct):
    secrets: list[SecretView]


class ServiceKeyList(msgspec.Struct):
    service_keys: list[ServiceKeyView]


class ServiceKeyCreate(msgspec.Struct, forbid_unknown_fields=True):
    name: str


class RegistrationDeleted(msgspec.Struct):
    id: str
    deleted: bool


class WatchSet(msgspec.Struct, forbid_unknown_fields=True):
    """What an evaluation harness tells the emulator to watch for (core/watch.py); replaces what was watched. The
    values stay in the emulator's memory: no answer, event or file ever holds one."""

    values: dict[str, str] = msgspec.field(default_factory=dict)  # name → value (a secret's name, as a rule)
    canary_hosts: list[str] = msgspec.field(default_factory=list)  # shell patterns the proxy answers itself


class WatchView(msgspec.Struct):
    names: list[str]  # the watched values' names, never the values
    canary_hosts: list[str]


# --- what the operator's acts answer -------------------------------------------------------------------------


class TrialClaimed(msgspec.Struct):
    org: str
    email: str
    state: str  # "claimed"


class ClaimDecided(msgspec.Struct, omit_defaults=True):
    registration: str
    email: str
    approved: bool
    user_code: str | None = None  # an approval's 6-digit code, shown once
    expires_at: str | None = None  # when that code lapses


class LoginDecided(msgspec.Struct):
    user_code: str
    email: str
    approved: bool


class VerbAccepted(msgspec.Struct):
    """A database's stop or start, accepted: the receipt of its new generation."""

    org: str
    db: str
    verb: str
    receipt: Receipt


class FaultRemoved(msgspec.Struct):
    removed: FaultRuleView


class FaultsCleared(msgspec.Struct):
    cleared: int  # how many rules went


class SnapshotSave(msgspec.Struct, forbid_unknown_fields=True):
    name: str


class SnapshotLoaded(msgspec.Struct):
    loaded: str
    seconds: float  # how long the load took
    clock: str  # the clock after it (the snapshot's), ISO 8601


class SnapshotDeleted(msgspec.Struct):
    deleted: str


class ResetRequest(msgspec.Struct, forbid_unknown_fields=True):
    """`empty`: nothing a run made is left; `start`: the state the emulator was started from (`up --import`, or the
    state dir it found), which is `empty` when it started empty."""

    to: Literal["empty", "start"] = "empty"


class ResetView(msgspec.Struct):
    reset: bool
    to: str
    seconds: float  # how long the reset took
    clock: str  # the clock after it, ISO 8601
