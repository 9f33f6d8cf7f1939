"""The wire types of `/_emulator`: what its endpoints answer and take. The CLI and the dashboard decode with
these same types, so a field renamed here is renamed for every consumer at once."""

from __future__ import annotations

from typing import Any

import msgspec

from emulator.core.clock import ClockState, iso
from emulator.core.events import Event
from emulator.hosted.records import Database, Org, Service


class ClockView(msgspec.Struct):
    now: float
    iso: str
    frozen: bool
    offset: float

    @classmethod
    def of(cls, state: ClockState) -> ClockView:
        return cls(state.now, state.iso, state.frozen, round(state.offset, 3))


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


class DatabaseView(msgspec.Struct):
    """A hosted database as the operator sees it: its state, generation, environment and whether its server runs."""

    org: str
    db: str
    state: str
    generation: int
    environment: str | None
    last_build_outcome: str | None
    failure_reason: str | None
    server: dict[str, Any] | None
    gateway_port: int | None
    receipt: Any
    updated_at: str

    @classmethod
    def of(cls, d: Database, server: dict[str, Any] | None) -> DatabaseView:
        return cls(
            org=d.slug,
            db=d.name,
            state=d.state,
            generation=d.generation,
            environment=(d.env_digest or "")[:12] or None,
            last_build_outcome=d.last_build_outcome,
            failure_reason=d.failure_reason,
            server=server,
            gateway_port=d.gateway_port,
            receipt=d.receipt,
            updated_at=iso(d.updated_at),
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


class LogLineView(msgspec.Struct):
    id: int
    ts_ms: int
    service: str | None
    line: str


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


class KeyView(msgspec.Struct):
    """An API key by name; a revoked (deleted) one keeps its name, organization and when it was revoked."""

    org: str
    name: str
    key_type: str | None  # "user" | "runtime"; None for a revoked key
    grants: list[str]
    created_at: str | None
    created_by: str | None
    last_used_at: str | None  # its newest control-plane call in the journal
    revoked_at: str | None
