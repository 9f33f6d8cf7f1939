"""Typed records of identity's tables: one frozen struct per row read, decoded once where it is read
(core/store/records.py's `record`, `fetch_one`, `fetch_all`). Hash columns are read only where a rule compares them."""

from __future__ import annotations

import msgspec

from emulator.identity.states import AttemptState, DeliveryState, RegStatus, RegType


class RegistrationRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A `registrations` row."""

    id: str
    type: RegType
    login_hint: str | None
    status: RegStatus
    claim_token_hash: str
    claim_expires_at: float
    claimed_email: str | None
    claimed_at: float | None
    trial_org_id: str | None
    client_ip: str | None
    created_at: float
    updated_at: float | None
    revoked_at: float | None
    expired_at: float | None
    upstream_iss: str | None
    upstream_sub: str | None


class AttemptRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A `claim_attempts` row."""

    id: str
    registration_id: str
    token_hash: str
    login_hint: str | None
    state: AttemptState
    email: str | None
    user_code_hash: str | None
    code_expires_at: float | None
    expires_at: float
    created_at: float


class OpenAttempt(AttemptRecord, frozen=True, kw_only=True):
    """A claim attempt with what `why_closed` reads of its registration (claims.ATTEMPT_COLUMNS)."""

    registration_type: RegType
    registration_status: RegStatus
    registration_revoked_at: float | None


class RefreshTokenRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A `refresh_tokens` row (its hash is its key)."""

    hash: str
    registration_id: str
    expires_at: float
    spent_at: float | None


class HeldRefreshToken(RefreshTokenRecord, frozen=True, kw_only=True):
    """A refresh token presented, with its registration's status and revocation."""

    status: RegStatus
    revoked_at: float | None


class TokenCheck(msgspec.Struct, frozen=True, kw_only=True):
    """What the site's check of an access token reads: its revocation, its registration's type and revocation."""

    revoked_at: float | None
    type: RegType
    registration_revoked_at: float | None


class UserRef(msgspec.Struct, frozen=True, kw_only=True):
    """A `users` row as the agents API reads it."""

    id: str
    email: str | None = None
    external_id: str | None = None


# --- webhooks: endpoints, deliveries and their tries, the events they carry -----------------------------------------


class EndpointRef(msgspec.Struct, frozen=True, kw_only=True):
    """What an event's recording reads of a live endpoint: the events it takes ([] for every one)."""

    id: str
    events: list[str]


class EndpointRecord(EndpointRef, frozen=True, kw_only=True):
    """A `webhook_endpoints` row; its secret sealed (secretbox.py)."""

    url: str
    secret_box: bytes
    created_at: float
    disabled_at: float | None = None


class PendingCount(msgspec.Struct, frozen=True):
    """An endpoint's deliveries still pending."""

    pending: int


class DueDelivery(msgspec.Struct, frozen=True, kw_only=True):
    """A pending delivery due now, and the endpoint it goes to."""

    id: str
    endpoint_id: str


class DeliveryAttempts(msgspec.Struct, frozen=True):
    """The tries a pending delivery has had."""

    attempts: int


class DeliveryRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A `webhook_deliveries` row with its endpoint's URL and its event's name (the delivery log)."""

    id: str
    endpoint_id: str
    event_id: str
    state: DeliveryState
    attempts: int
    next_at: float | None
    created_at: float
    url: str
    event: str


class TryRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A `webhook_attempts` row: one try of a delivery."""

    delivery_id: str
    attempt: int
    at: float
    status: int | None
    error: str | None
    ms: float


class EventRecord(msgspec.Struct, frozen=True, kw_only=True):
    """An `agent_events` row as its envelope reads it (`data`: the event's JSON, as written)."""

    id: str
    event: str
    data: str
    created_at: float


class DeliveryTry(EventRecord, frozen=True, kw_only=True):
    """A pending delivery about to be tried: its event, its endpoint's URL and sealed secret, the tries so far."""

    delivery_id: str
    endpoint_id: str
    event_id: str
    attempts: int
    url: str
    secret_box: bytes


# --- service keys ---------------------------------------------------------------------------------------------------


class ServiceKeyRef(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str = ""


class ServiceKeyRecord(ServiceKeyRef, frozen=True, kw_only=True):
    """A `service_keys` row, without its hash."""

    hint: str
    created_at: float
    revoked_at: float | None


# --- the operator's views (views.py) ---------------------------------------------------------------------------------


class LatestAttempt(msgspec.Struct, frozen=True, kw_only=True):
    """What the operator's view of claims reads of an attempt."""

    registration_id: str
    state: AttemptState
    email: str | None
    expires_at: float
    code_expires_at: float | None


class PersonRecord(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    email: str
    created_at: float


class MembershipRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A person's membership: the organization's slug and the role."""

    user_id: str
    slug: str
    role: str


class SessionRow(msgspec.Struct, frozen=True, kw_only=True):
    """A `sessions` row as the operator's view reads it (its organization's slug joined; never its token's hash)."""

    id: str
    user_id: str
    org: str | None
    org_id: str | None
    refresh_expires_at: float
    created_at: float
    revoked_at: float | None
