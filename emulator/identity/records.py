"""Typed records of identity's tables: one frozen struct per row read, decoded once where it is read
(core/store/records.py's `record`, `fetch_one`, `fetch_all`). Hash columns are read only where a rule compares them."""

from __future__ import annotations

import msgspec

from emulator.identity.states import AttemptState, RegStatus, RegType


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
