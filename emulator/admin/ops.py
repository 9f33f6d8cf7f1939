"""Every operation of the operator API (`/_emulator`), as one table: its method, its path (a Litestar template),
the wire type of its body and of its answer.

Both sides read it: each route module takes its path from its op (`@get(ops.STATUS.path)`), and every client
(admin/client.py's, for the CLI, the dashboard, the test kit, evaluation and the Testcontainers module) calls an op
rather than writing a path: `client.run(ops.SNAPSHOT_LOAD.call(name="before"))` answers a `SnapshotLoaded`.
tests/test_operator_ops.py holds the routes and this table one to one. An op is data only: it imports no web
framework and no transport.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote, urlencode

import msgspec

from emulator.admin.wire import (
    AgentRegistrationView,
    ClaimDecided,
    ClaimDecision,
    ClaimList,
    ClockMove,
    ClockView,
    DatabaseList,
    DeliveryList,
    EventView,
    FaultList,
    FaultRelease,
    FaultRemoved,
    FaultRuleView,
    FaultsCleared,
    FaultsReleased,
    JournalPage,
    KeyList,
    LoginDecided,
    LoginDecision,
    LoginList,
    LogLines,
    OrgList,
    RegistrationDeleted,
    RegistrationList,
    ResetRequest,
    ResetView,
    SecretList,
    ServiceAnswer,
    ServiceCall,
    ServiceKeyCreate,
    ServiceKeyCreated,
    ServiceKeyList,
    ServiceKeyView,
    ServiceList,
    SnapshotDeleted,
    SnapshotList,
    SnapshotLoaded,
    SnapshotSave,
    StatusView,
    Switches,
    TableList,
    TrialClaim,
    TrialClaimed,
    TrialList,
    UsageList,
    UserList,
    VerbAccepted,
    WatchSet,
    WatchView,
    WebhookAdd,
    WebhookCreated,
    WebhookList,
    WebhookRemoved,
)
from emulator.behaviour.records import Record
from emulator.behaviour.scorecard import Report
from emulator.behaviour.traces import Trace
from emulator.core.faults import FaultSpec
from emulator.core.operatorpath import ADMIN_PREFIX
from emulator.core.snapshots import SnapshotView
from emulator.hosted.declared import Applied
from emulator.identity.idjag import Minted, MintRequest

B = TypeVar("B")
A = TypeVar("A")
T = TypeVar("T")

Method = Literal["GET", "POST", "DELETE"]
JSON = "application/json"
# A body sent as it is, not as the op's wire type: what a test gives to see the emulator's own check of it.
Plain = Mapping[str, object]
QueryValue = str | int | None

_PARAM = re.compile(r"\{(\w+)(?::(\w+))?\}")


@dataclass(frozen=True)
class Call(Generic[A]):
    """One request of an op, ready to send to any emulator's site: method, path (its parameters filled), query, body
    (encoded JSON, bytes, or a file streamed from disk) and the type its answer decodes as."""

    method: Method
    path: str
    answer: type[A]
    query: tuple[tuple[str, str], ...] = ()
    content: bytes | Path | None = None
    media: str | None = None  # the body's Content-Type
    timeout: float | None = None  # seconds, when not the client's usual
    stream: bool = False  # an event stream (Server-Sent Events), read as it comes

    @property
    def target(self) -> str:
        """The path with its query, as sent."""
        return self.path + ("?" + urlencode(self.query) if self.query else "")

    def decode(self, raw: bytes) -> A:
        """The answer as the op's type (bytes stay bytes: a file)."""
        if self.answer is bytes:
            return raw  # type: ignore[return-value]  # A is bytes here
        return msgspec.json.decode(raw, type=self.answer)

    def within(self, seconds: float) -> Call[A]:
        return replace(self, timeout=seconds)

    def answered_as(self, answer: type[T]) -> Call[T]:
        """The same request, its answer read as another type: for the one route whose answer depends on its body
        (a fault's hold answers the fault list, a rule the rule)."""
        return Call(self.method, self.path, answer, self.query, self.content, self.media, self.timeout, self.stream)


@dataclass(frozen=True)
class Op(Generic[B, A]):
    """One operation: `path` is the route's template (`{name:str}`, `{who:path}`), under ADMIN_PREFIX."""

    method: Method
    path: str
    body: type[B] | None
    answer: type[A]
    body_media: tuple[str, ...] = (JSON,)  # what its body may be sent as (the first is the client's)
    answer_media: str = JSON
    stream: bool = False
    params: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(m.group(1) for m in _PARAM.finditer(self.path)))

    def url_path(self, **params: str) -> str:
        """The path with its parameters filled, each escaped (a `path` parameter keeps its slashes)."""
        if set(params) != set(self.params):
            raise TypeError(f"{self.method} {self.path} takes {', '.join(self.params) or 'no parameters'}")

        def fill(m: re.Match[str]) -> str:
            return quote(params[m.group(1)], safe="/" if m.group(2) == "path" else "")

        return _PARAM.sub(fill, self.path)

    def call(
        self,
        body: B | Plain | bytes | Path | None = None,
        *,
        query: Mapping[str, QueryValue] | None = None,
        media: str | None = None,
        **params: str,
    ) -> Call[A]:
        """This op's request: `params` fill the path, `body` is its wire type (or plain JSON, or the bytes or file
        of a body that is not JSON), `query` drops what is None."""
        content: bytes | Path | None
        if isinstance(body, (bytes, Path)):
            content, kind = body, media or self.body_media[0]
        elif body is not None:
            content, kind = msgspec.json.encode(body), JSON
        elif self.method == "POST":
            content, kind = b"{}", JSON  # an act that takes no body sends an empty object
        else:
            content, kind = None, None
        pairs = tuple((k, str(v)) for k, v in (query or {}).items() if v is not None)
        return Call(self.method, self.url_path(**params), self.answer, pairs, content, kind, stream=self.stream)


def _get(tail: str, answer: type[A], *, media: str = JSON, stream: bool = False) -> Op[None, A]:
    return Op("GET", ADMIN_PREFIX + tail, None, answer, answer_media=media, stream=stream)


def _post(tail: str, body: type[B] | None, answer: type[A], *, media: tuple[str, ...] = (JSON,)) -> Op[B, A]:
    return Op("POST", ADMIN_PREFIX + tail, body, answer, body_media=media)


def _delete(tail: str, answer: type[A]) -> Op[None, A]:
    return Op("DELETE", ADMIN_PREFIX + tail, None, answer)


IMPORT_MEDIA = ("application/gzip", "application/octet-stream")  # core/boundary.py lets these through, and only here
TOML = "application/toml"

# --- the emulator itself (admin/emulator.py) ---
STATUS = _get("/status", StatusView)
CA_PEM = _get("/ca.pem", bytes, media="application/x-pem-file")
CLOCK = _get("/clock", ClockView)
CLOCK_MOVE = _post("/clock", ClockMove, ClockView)
JOURNAL = _get("/journal", JournalPage)  # query: since, kinds, limit
EVENTS = _get("/events", EventView, media="text/event-stream", stream=True)  # query: since, kinds
SWITCHES = _get("/switches", Switches)
SWITCHES_SET = _post("/switches", dict[str, bool], Switches)

# --- faults (admin/faults.py) ---
FAULTS = _get("/faults", FaultList)
FAULT_ADD = _post("/faults", FaultSpec, FaultRuleView)  # a hold answers the FaultList instead (Call.answered_as)
FAULTS_CLEAR = _delete("/faults", FaultsCleared)
FAULT_REMOVE = _delete("/faults/{rule_id:str}", FaultRemoved)
FAULTS_RELEASE = _post("/faults/release", FaultRelease, FaultsReleased)

# --- snapshots and reset (admin/snapshots.py) ---
RESET = _post("/reset", ResetRequest, ResetView)
SNAPSHOTS = _get("/snapshots", SnapshotList)
SNAPSHOT_SAVE = _post("/snapshots", SnapshotSave, SnapshotView)
SNAPSHOT_LOAD = _post("/snapshots/{name:str}/load", None, SnapshotLoaded)
SNAPSHOT_DELETE = _delete("/snapshots/{name:str}", SnapshotDeleted)
SNAPSHOT_EXPORT = _get("/snapshots/{name:str}/export", bytes, media="application/gzip")
SNAPSHOT_IMPORT = _post("/snapshots/import", bytes, SnapshotView, media=IMPORT_MEDIA)  # query: name

# --- declared states (admin/declared.py) ---
APPLY = _post("/apply", bytes, Applied, media=(TOML, JSON))  # a file, or a DeclaredState as JSON; query: name

# --- behaviour (admin/behaviour.py) ---
TRACE = _get("/traces/{who:path}", Trace)
REPORT = _get("/report", Report)  # query: agent
RECORD = _get("/record", Record)  # query: agent

# --- the person's acts and identity (admin/identity.py) ---
CLAIMS = _get("/claims", ClaimList)
CLAIM_APPROVE = _post("/claims/approve", ClaimDecision, ClaimDecided)
CLAIM_DENY = _post("/claims/deny", ClaimDecision, ClaimDecided)
REGISTRATIONS = _get("/registrations", RegistrationList)
LOGINS = _get("/logins", LoginList)
LOGIN_APPROVE = _post("/logins/approve", LoginDecision, LoginDecided)
ID_JAG = _post("/id-jag", MintRequest, Minted)
USERS = _get("/users", UserList)

# --- the service side (admin/agents.py) ---
SERVICE_KEY_CREATE = _post("/service-keys", ServiceKeyCreate, ServiceKeyCreated)
SERVICE_KEYS = _get("/service-keys", ServiceKeyList)
SERVICE_KEY_REVOKE = _delete("/service-keys/{key_id:str}", ServiceKeyView)
REGISTRATION_REVOKE = _post("/registrations/{registration_id:str}/revoke", None, AgentRegistrationView)
REGISTRATION_DELETE = _delete("/registrations/{registration_id:str}", RegistrationDeleted)

# --- organizations (admin/orgs.py) ---
ORGS = _get("/orgs", OrgList)
TRIALS = _get("/trials", TrialList)
TRIAL_CLAIM = _post("/trials/claim", TrialClaim, TrialClaimed)
KEYS = _get("/keys", KeyList)

# --- hosted databases and services (admin/databases.py) ---
DATABASES = _get("/databases", DatabaseList)
DATABASE_LOGS = _get("/databases/{org:str}/{db:str}/logs", LogLines)  # query: since
DATABASE_TABLES = _get("/databases/{org:str}/{db:str}/tables", TableList)  # query: rows
DATABASE_STOP = _post("/databases/{org:str}/{db:str}/stop", None, VerbAccepted)
DATABASE_START = _post("/databases/{org:str}/{db:str}/start", None, VerbAccepted)
SERVICE_CALL = _post("/services/{org:str}/{db:str}/call", ServiceCall, ServiceAnswer)
SERVICES = _get("/services", ServiceList)
USAGE = _get("/usage", UsageList)

# --- what an evaluation watches (admin/watch.py) ---
WATCH = _get("/watch", WatchView)
WATCH_SET = _post("/watch", WatchSet, WatchView)
SECRETS = _get("/secrets", SecretList)

# --- the registration events' webhooks (admin/webhooks.py) ---
WEBHOOKS = _get("/webhooks", WebhookList)
WEBHOOK_ADD = _post("/webhooks", WebhookAdd, WebhookCreated)
WEBHOOK_DELIVERIES = _get("/webhooks/deliveries", DeliveryList)  # query: endpoint, event
WEBHOOK_REMOVE = _delete("/webhooks/{endpoint_id:str}", WebhookRemoved)

DATABASE_VERBS: dict[str, Op[None, VerbAccepted]] = {"start": DATABASE_START, "stop": DATABASE_STOP}


def every() -> list[Op[Any, Any]]:
    """Every op of this table, in its order."""
    return [v for v in globals().values() if isinstance(v, Op)]
