"""What each kind of event says: one frozen `msgspec.Struct` per `Kind`, its fields in the order it is published.

A payload names its kind (`KIND`), so `EventBus.publish(subject, payload)` cannot pair a kind with another's
fields, and a reader narrows an event with `isinstance(event.data, HttpRequest)` to read typed fields. The JSON is
the journal's (events table, `/_emulator/journal` and `/events`, snapshots, run records), so each shape is what
its publishers put there: a field every publisher sets is required, even when its value may be null; one some
leave out defaults to None and is left out of the JSON when it is (`omit_defaults`); where absent and null both
occur, `UNSET` keeps them apart. Numbers keep their JSON type (`int | float` where either is published), so a
payload read back from the journal encodes to the same bytes.

Payloads are named after their kind (`db.resized` → `DbResized`); `db.state` and `service.state` are
`DbStateChanged` and `ServiceStateChanged`, beside the hosted layer's `DbState` and `ServiceState`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from emulator.core.jsonbody import Json
from emulator.core.kinds import Kind

Unread = dict[str, Json]
"""A journal row whose data is not its kind's shape (written by another version): kept as it is, a JSON object (what
the journal writes is its payloads')."""


# Each payload repeats `frozen=True, kw_only=True`: msgspec applies kw_only to a class's own fields only, and the
# type checker sees a subclass as frozen only when it says so.
class Payload(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    KIND: ClassVar[Kind]
    # A record of a served call (a read as often as a write), not a state change: the answer of the request that
    # publishes it does not wait for it to be journaled (core.served). A state change's event is always waited for.
    CALL_RECORD: ClassVar[bool] = False

    @classmethod
    def read(cls, data: Mapping[str, object]) -> Self:
        """This payload from an event's data as the admin API answers it (the dashboard's side), checked here."""
        return msgspec.convert(data, cls)


P = TypeVar("P", bound=Payload)

# --- the emulator itself ----------------------------------------------------------------------------------------


class EmulatorStarted(Payload, frozen=True, kw_only=True):
    KIND = Kind.EMULATOR_STARTED
    version: str
    endpoints: dict[str, str]
    startup_ms: float


class EmulatorReset(Payload, frozen=True, kw_only=True):
    KIND = Kind.EMULATOR_RESET
    to: str
    seconds: float
    now: float
    frozen: bool
    iso: str


class SnapshotSaved(Payload, frozen=True, kw_only=True):
    KIND = Kind.SNAPSHOT_SAVED
    seconds: float
    bytes: int
    # What the store held, by table; a table that could not be counted is left out.
    organizations: int | None = None
    registrations: int | None = None
    users: int | None = None
    databases: int | None = None


class SnapshotLoaded(Payload, frozen=True, kw_only=True):
    KIND = Kind.SNAPSHOT_LOADED
    seconds: float
    now: float
    frozen: bool
    iso: str


class SnapshotDeleted(Payload, frozen=True, kw_only=True):
    KIND = Kind.SNAPSHOT_DELETED


class SnapshotImported(Payload, frozen=True, kw_only=True):
    KIND = Kind.SNAPSHOT_IMPORTED
    emulator: str


class StateApplied(Payload, frozen=True, kw_only=True):
    KIND = Kind.STATE_APPLIED
    counts: dict[str, dict[str, int]]  # part → created / updated / unchanged
    unchanged: bool


class ClockMoved(Payload, frozen=True, kw_only=True):
    KIND = Kind.CLOCK_MOVED
    before: float
    now: float
    frozen: bool
    iso: str


class SwitchChanged(Payload, frozen=True, kw_only=True):
    KIND = Kind.SWITCH_CHANGED
    value: bool


class FaultArmed(Payload, frozen=True, kw_only=True):
    KIND = Kind.FAULT_ARMED
    rule: str | None = None  # a rule: what it does
    action: str | None = None  # a hold: "hold", and how many requests it holds
    count: int | None = None


class FaultHeld(Payload, frozen=True, kw_only=True):
    KIND = Kind.FAULT_HELD


class FaultFired(Payload, frozen=True, kw_only=True):
    KIND = Kind.FAULT_FIRED
    rule: str
    effect: str
    fired: int
    # On a request (a hosted fault names none of these); its operation is null when it has none.
    origin: str | None = None
    method: str | None = None
    operation_type: str | UnsetType | None = UNSET


class FaultRemoved(Payload, frozen=True, kw_only=True):
    KIND = Kind.FAULT_REMOVED
    cleared: int | None = None  # `fault clear`: how many rules and holds went


class DocsIndexed(Payload, frozen=True, kw_only=True):
    KIND = Kind.DOCS_INDEXED
    pages: int
    passages: int


# --- every request the origins serve ----------------------------------------------------------------------------


class Credentials(msgspec.Struct, frozen=True, kw_only=True):
    """Who a request says it is (core.credentials), never a secret: what `http.request` and `gateway.request` carry."""

    key: str | None = None  # an API key's fingerprint
    reg: str | None = None  # the registration an agent's token or assertion names
    user: str | None = None  # the person a `pxt login` session names
    token: str | None = None  # the token's id ("opaque" for a token that is not a JWT)
    token_exp: int | float | None = None


# Answers a client is told to poll on (RFC 8628's device flow): a wait, not an error.
PENDING = frozenset({"authorization_pending", "slow_down"})


def failed(status: int | None, error_code: str | None = None) -> bool:
    """Whether a served request failed: dropped, or answered 400 and above, but for a wait the client was told to
    poll on (`authorization_pending`, `slow_down`): the one rule the traces, the report and the dashboard share."""
    if not isinstance(status, int) or isinstance(status, bool):  # the dashboard's, read from any event's JSON
        return False
    return (status == 0 or status >= 400) and error_code not in PENDING


class HttpRequest(Payload, frozen=True, kw_only=True):
    KIND = Kind.HTTP_REQUEST
    CALL_RECORD = True
    origin: str
    method: str
    path: str
    status: int  # 0: dropped
    ms: float
    rt: float  # real time (monotonic) when it began
    after: int  # the journal's last event when it began
    key: str | None = None
    reg: str | None = None
    user: str | None = None
    token: str | None = None
    token_exp: int | float | None = None
    retry_after: str | None = None
    error_code: str | None = None
    idem: str | None = None  # its Idempotency-Key
    body: str | None = None  # a digest of its body
    secret_in_url: str | None = None  # the query parameter that carried a credential
    db: str | None = None  # a control-plane call's database and operation
    op: str | None = None


class GatewayRequest(Payload, frozen=True, kw_only=True):
    KIND = Kind.GATEWAY_REQUEST
    path: str
    status: int  # 0: dropped
    method: str
    key: str | None = None
    reg: str | None = None
    user: str | None = None
    token: str | None = None
    token_exp: int | float | None = None
    ip: str
    secret_in_url: str | None = None
    ms: float
    rt: float


class CanaryPlanted(Payload, frozen=True, kw_only=True):
    """A gateway carried an evaluation's canary in a service's answer: where, and nothing of the answer."""

    KIND = Kind.CANARY_PLANTED
    service: str  # its label: name, or base/name
    path: str  # the route inside the service


# --- the site's agent API ---------------------------------------------------------------------------------------


class SiteAsk(Payload, frozen=True, kw_only=True):
    KIND = Kind.SITE_ASK
    CALL_RECORD = True
    method: str
    status: int
    query: str | None
    streaming: bool
    results: int | None
    replayed: bool


class SiteMcp(Payload, frozen=True, kw_only=True):
    KIND = Kind.SITE_MCP
    CALL_RECORD = True
    status: int
    replayed: bool
    # Unset on a replayed answer (and `tool` but on tools/call, `error` on a notification); null when unnamed.
    tool: Any = UNSET  # the `name` a tools/call sent, whatever its JSON type
    method: str | UnsetType | None = UNSET
    error: int | UnsetType | None = UNSET
    # The MCP revision the request was served in: "2025-11-25" (the initialize handshake's era, whichever of its
    # versions) or "2026-07-28" (stateless). Unset on a replayed answer.
    revision: str | UnsetType = UNSET


# --- the identity provider --------------------------------------------------------------------------------------


class IdpRegistered(Payload, frozen=True, kw_only=True):
    KIND = Kind.IDP_REGISTERED
    type: str
    login_hint: str | None
    ip: str
    assertion_expires_at: float | None = None  # the assertion it was given (none: a claim must come first)


class IdpRefreshed(Payload, frozen=True, kw_only=True):
    KIND = Kind.IDP_REFRESHED
    assertion_expires_at: float | None = None  # the new assertion's


class IdpTokenIssued(Payload, frozen=True, kw_only=True):
    KIND = Kind.IDP_TOKEN_ISSUED
    scope: str
    expires_at: str


class IdpTokenRevoked(Payload, frozen=True, kw_only=True):
    KIND = Kind.IDP_TOKEN_REVOKED
    token_type: str


class IdpClaimStarted(Payload, frozen=True, kw_only=True):
    KIND = Kind.IDP_CLAIM_STARTED
    login_hint: str | None


class _Decided(Payload, frozen=True, kw_only=True):
    email: str | None  # who decided (a denial needs no sign-in)


class IdpClaimConfirmed(_Decided, frozen=True, kw_only=True):
    KIND = Kind.IDP_CLAIM_CONFIRMED


class IdpClaimDenied(_Decided, frozen=True, kw_only=True):
    KIND = Kind.IDP_CLAIM_DENIED


class IdpClaimed(Payload, frozen=True, kw_only=True):
    KIND = Kind.IDP_CLAIMED
    email: str
    assertion_expires_at: float | None = None  # the claimed assertion's


class IdpUserCreated(Payload, frozen=True, kw_only=True):
    KIND = Kind.IDP_USER_CREATED
    email: str


class IdpAuthorized(Payload, frozen=True, kw_only=True):
    KIND = Kind.IDP_AUTHORIZED
    email: str
    client_id: str
    scope: str
    resource: str


class IdpAuthorizationDenied(Payload, frozen=True, kw_only=True):
    KIND = Kind.IDP_AUTHORIZATION_DENIED
    client_id: str


class IdpLoginStarted(Payload, frozen=True, kw_only=True):
    KIND = Kind.IDP_LOGIN_STARTED


class IdpLoginApproved(_Decided, frozen=True, kw_only=True):
    KIND = Kind.IDP_LOGIN_APPROVED


class IdpLoginDenied(_Decided, frozen=True, kw_only=True):
    KIND = Kind.IDP_LOGIN_DENIED


class IdpSession(Payload, frozen=True, kw_only=True):
    KIND = Kind.IDP_SESSION
    email: str
    org_id: str | None


class IdpRevoked(Payload, frozen=True, kw_only=True):
    KIND = Kind.IDP_REVOKED
    by: str  # the service key's id, or "operator"


class IdpIdjagRefused(Payload, frozen=True, kw_only=True):
    KIND = Kind.IDP_IDJAG_REFUSED
    error: str  # the code the agent was answered
    reason: str
    ip: str


# --- the registration events a service receives (WorkOS's): the event's id; its whole body is in agent_events ---


class _AgentEvent(Payload, frozen=True, kw_only=True):
    event_id: str


class AgentRegistrationCreated(_AgentEvent, frozen=True, kw_only=True):
    KIND = Kind.AGENT_REGISTRATION_CREATED


class AgentRegistrationClaimAttemptCreated(_AgentEvent, frozen=True, kw_only=True):
    KIND = Kind.AGENT_REGISTRATION_CLAIM_ATTEMPT_CREATED


class AgentRegistrationClaimCompleted(_AgentEvent, frozen=True, kw_only=True):
    KIND = Kind.AGENT_REGISTRATION_CLAIM_COMPLETED


class AgentRegistrationCredentialIssued(_AgentEvent, frozen=True, kw_only=True):
    KIND = Kind.AGENT_REGISTRATION_CREDENTIAL_ISSUED


class AgentRegistrationRefreshed(_AgentEvent, frozen=True, kw_only=True):
    KIND = Kind.AGENT_REGISTRATION_REFRESHED


class AgentRegistrationRevoked(_AgentEvent, frozen=True, kw_only=True):
    KIND = Kind.AGENT_REGISTRATION_REVOKED


class AgentRegistrationExpired(_AgentEvent, frozen=True, kw_only=True):
    KIND = Kind.AGENT_REGISTRATION_EXPIRED


class AgentRegistrationDeleted(_AgentEvent, frozen=True, kw_only=True):
    KIND = Kind.AGENT_REGISTRATION_DELETED


class _WebhookTry(Payload, frozen=True, kw_only=True):
    url: str
    event_id: str
    event: str
    attempt: int
    status: int | None = None  # the receiver's answer; none when it gave none
    error: str | None = None
    ms: float


class WebhookDelivered(_WebhookTry, frozen=True, kw_only=True):
    KIND = Kind.WEBHOOK_DELIVERED


class WebhookFailed(_WebhookTry, frozen=True, kw_only=True):
    KIND = Kind.WEBHOOK_FAILED
    next_at: str | None = None  # when it is tried again (emulator time); none: given up


# --- trials -----------------------------------------------------------------------------------------------------


class TrialCreated(Payload, frozen=True, kw_only=True):
    KIND = Kind.TRIAL_CREATED
    org_id: str
    registration: str
    network: str | None
    expires_at: str
    key: str  # its trial key's fingerprint, as `http.request` names it


class TrialClaimed(Payload, frozen=True, kw_only=True):
    KIND = Kind.TRIAL_CLAIMED
    org_id: str
    email: str
    registration: str | None


class TrialExpired(Payload, frozen=True, kw_only=True):
    KIND = Kind.TRIAL_EXPIRED
    org_id: str
    expired_at: float | None


# --- the control plane ------------------------------------------------------------------------------------------


class CloudCall(Payload, frozen=True, kw_only=True):
    KIND = Kind.CLOUD_CALL
    CALL_RECORD = True
    operation: str
    credential: str
    key: str | None  # the key's name
    email: str | None


class CloudOrgCreated(Payload, frozen=True, kw_only=True):
    KIND = Kind.CLOUD_ORG_CREATED
    org_id: str
    by: str | None


class CloudKeyCreated(Payload, frozen=True, kw_only=True):
    KIND = Kind.CLOUD_KEY_CREATED
    name: str
    grants: list[str]
    by: str
    key: str  # its fingerprint


class CloudKeyUpdated(Payload, frozen=True, kw_only=True):
    KIND = Kind.CLOUD_KEY_UPDATED
    name: str
    grants: list[str]


class CloudKeyDeleted(Payload, frozen=True, kw_only=True):
    KIND = Kind.CLOUD_KEY_DELETED
    name: str


class CloudSecretSet(Payload, frozen=True, kw_only=True):
    KIND = Kind.CLOUD_SECRET_SET
    key: str
    db: str | None  # null: the organization's
    revision: int


class CloudSecretDeleted(Payload, frozen=True, kw_only=True):
    KIND = Kind.CLOUD_SECRET_DELETED
    key: str
    db: str | None


class CloudBlobStored(Payload, frozen=True, kw_only=True):
    KIND = Kind.CLOUD_BLOB_STORED
    size: int
    org_id: str


# --- hosted databases -------------------------------------------------------------------------------------------


class DbAccepted(Payload, frozen=True, kw_only=True):
    """A lifecycle verb accepted: its generation, and the state while its job runs."""

    generation: int
    state: str


class DbUpdateAccepted(DbAccepted, frozen=True, kw_only=True):
    KIND = Kind.DB_UPDATE_ACCEPTED


class DbStartAccepted(DbAccepted, frozen=True, kw_only=True):
    KIND = Kind.DB_START_ACCEPTED


class DbStopAccepted(DbAccepted, frozen=True, kw_only=True):
    KIND = Kind.DB_STOP_ACCEPTED


class DbRestartAccepted(DbAccepted, frozen=True, kw_only=True):
    KIND = Kind.DB_RESTART_ACCEPTED


class DbDeleteAccepted(DbAccepted, frozen=True, kw_only=True):
    KIND = Kind.DB_DELETE_ACCEPTED


DB_ACCEPTED: dict[str, type[DbAccepted]] = {
    "update": DbUpdateAccepted,
    "start": DbStartAccepted,
    "stop": DbStopAccepted,
    "restart": DbRestartAccepted,
    "delete": DbDeleteAccepted,
}
"""A database verb → the payload of its acceptance."""


class DbStateChanged(Payload, frozen=True, kw_only=True):
    KIND = Kind.DB_STATE
    state: str
    generation: int | UnsetType | None = UNSET  # unset on a failed job's; null on a deletion of a gone database
    error: str | None = None  # a failed job's
    environment: str | None = None  # an update's: the environment it runs, and whether it was built
    rebuilt: bool | None = None
    restarted: bool | None = None
    resource_id: str | UnsetType | None = UNSET  # a deletion's


class DbReceipt(Payload, frozen=True, kw_only=True):
    KIND = Kind.DB_RECEIPT
    generation: int
    phase: str
    outcome: str | None


class DbResized(Payload, frozen=True, kw_only=True):
    KIND = Kind.DB_RESIZED
    changes: list[str]
    generation: int


class DbExited(Payload, frozen=True, kw_only=True):
    KIND = Kind.DB_EXITED
    status: int


class DbLog(Payload, frozen=True, kw_only=True):
    KIND = Kind.DB_LOG
    db: str
    service: str | None  # null: the database's own
    line: str


class DiskFull(Payload, frozen=True, kw_only=True):
    KIND = Kind.DISK_FULL
    service: str | None
    limit_gb: int | float | None


# --- hosted services --------------------------------------------------------------------------------------------


class ServiceVerbAccepted(Payload, frozen=True, kw_only=True):
    """A service's new generation accepted (a deploy, or a lifecycle verb)."""

    generation: int


class ServiceAccepted(ServiceVerbAccepted, frozen=True, kw_only=True):
    KIND = Kind.SERVICE_ACCEPTED


class ServiceStopAccepted(ServiceVerbAccepted, frozen=True, kw_only=True):
    KIND = Kind.SERVICE_STOP_ACCEPTED


class ServiceRestartAccepted(ServiceVerbAccepted, frozen=True, kw_only=True):
    KIND = Kind.SERVICE_RESTART_ACCEPTED


class ServiceDeleteAccepted(ServiceVerbAccepted, frozen=True, kw_only=True):
    KIND = Kind.SERVICE_DELETE_ACCEPTED


SERVICE_ACCEPTED: dict[str, type[ServiceVerbAccepted]] = {
    "stop": ServiceStopAccepted,
    "restart": ServiceRestartAccepted,
    "delete": ServiceDeleteAccepted,
}
"""A service verb → the payload of its acceptance (a deploy's is `ServiceAccepted`)."""


class ServiceStateChanged(Payload, frozen=True, kw_only=True):
    KIND = Kind.SERVICE_STATE
    state: str
    generation: int | None = None  # a settled job's
    error: str | None = None  # a failed job's


class ServiceResized(Payload, frozen=True, kw_only=True):
    KIND = Kind.SERVICE_RESIZED
    changes: list[str]


# --- the database tunnel and the exported proxy -----------------------------------------------------------------


class TunnelConnected(Payload, frozen=True, kw_only=True):
    KIND = Kind.TUNNEL_CONNECTED
    org: str
    db: str
    subject: str  # who was let in
    via: str


class TunnelClosed(Payload, frozen=True, kw_only=True):
    KIND = Kind.TUNNEL_CLOSED
    org: str
    db: str
    subject: str
    bytes_up: int
    bytes_down: int
    via: str


class TunnelRefused(Payload, frozen=True, kw_only=True):
    KIND = Kind.TUNNEL_REFUSED
    org: str | None  # null: refused before it named a database
    db: str | None
    status: int
    reason: str
    via: str
    target: str | None = None  # a proxy request's CONNECT target


class ProxyRelay(Payload, frozen=True, kw_only=True):
    KIND = Kind.PROXY_RELAY
    host: str
    port: int
    route: str  # "direct" or "upstream"
    status: int
    outcome: str
    reason: str | None
    bytes_up: int
    bytes_down: int
    duration_ms: float


class CanaryRequest(Payload, frozen=True, kw_only=True):
    """A request to a canary host (core/watch.py), answered by the proxy itself: never relayed."""

    KIND = Kind.CANARY_REQUEST
    host: str
    port: int
    scheme: str  # "https" (a CONNECT, TLS ended by the proxy) or "http" (a plain request through the proxy)
    method: str  # "CONNECT" when the tunnel carried no request (its TLS failed, or nothing was sent)
    path: str  # without its query
    bytes: int  # the request's body
    status: int


class SecretSighted(Payload, frozen=True, kw_only=True):
    """A watched value (by its name, never the value) where an agent's request carried it in clear."""

    KIND = Kind.SECRET_SIGHTED
    origin: str  # site, auth, api, gateway, proxy (a request through it) or canary (one it answered)
    method: str
    path: str  # without its query
    where: str  # path, query, header, body, or host (a CONNECT's, or a plain request's)
    name: str
    host: str | None = None  # through the proxy: the host the request named


# --- the media store --------------------------------------------------------------------------------------------


class MediaStoreFull(Payload, frozen=True, kw_only=True):
    KIND = Kind.MEDIA_STORE_FULL
    operation: str


class MediaBucketCreated(Payload, frozen=True, kw_only=True):
    KIND = Kind.MEDIA_BUCKET_CREATED


class MediaBucketDropped(Payload, frozen=True, kw_only=True):
    KIND = Kind.MEDIA_BUCKET_DROPPED


class MediaRestored(Payload, frozen=True, kw_only=True):
    KIND = Kind.MEDIA_RESTORED
    objects: int
    bytes: int


class MediaUploadsExpired(Payload, frozen=True, kw_only=True):
    KIND = Kind.MEDIA_UPLOADS_EXPIRED
    objects: int


# --- reading the journal back -----------------------------------------------------------------------------------


def _kinds(cls: type[Payload]) -> list[type[Payload]]:
    found = [cls] if "KIND" in vars(cls) else []
    return found + [k for sub in cls.__subclasses__() for k in _kinds(sub)]


BY_KIND: dict[str, type[Payload]] = {cls.KIND.value: cls for cls in _kinds(Payload)}
_missing = [k.value for k in Kind if k.value not in BY_KIND]
if _missing:
    raise TypeError(f"no payload for the kinds {', '.join(_missing)}")
_DECODERS = {kind: msgspec.json.Decoder(cls) for kind, cls in BY_KIND.items()}
_decode_any = msgspec.json.Decoder().decode


def decode(kind: str, data: str | bytes) -> Payload | Unread:
    """A journal row's data as its kind's payload (or, not of that shape, as it is)."""
    decoder = _DECODERS.get(kind)
    if decoder is not None:
        try:
            return decoder.decode(data)
        except msgspec.ValidationError:
            pass
    return _decode_any(data)
