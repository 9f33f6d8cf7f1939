"""The states of identity's rows, and the states derived from them: one enum each, the one place their words are
written.

The values are the protocol's own words, stored as they are in SQLite (the migrations' CHECKs list them) and shown
as they are on the wire; `StrEnum` keeps them strings there. SQL binds `?` to a member instead of writing the word
into its text (tests/test_layering.py checks that no identity/ or hosted/ module does).
"""

from __future__ import annotations

from enum import StrEnum


class RegStatus(StrEnum):
    """`registrations.status`."""

    REGISTERED = "registered"  # not (yet) a person's: its claim window is open until claim_expires_at
    CLAIMED = "claimed"  # a person's: a completed claim, a claimed trial, an ID-JAG of a linked identity


class RegType(StrEnum):
    """`registrations.type`: how the agent registered."""

    ANONYMOUS = "anonymous"
    SERVICE_AUTH = "service_auth"
    IDENTITY_ASSERTION = "identity_assertion"  # an ID-JAG


class AttemptState(StrEnum):
    """`claim_attempts.state`: a claim link and what the person (or operator, or service) decided on it."""

    PENDING = "pending"  # waiting for the person
    CONFIRMED = "confirmed"  # approved: its user code was shown once
    DENIED = "denied"
    COMPLETED = "completed"  # the agent completed the claim with its user code
    SUPERSEDED = "superseded"  # a newer attempt replaced it


OPEN_ATTEMPTS = (AttemptState.PENDING, AttemptState.CONFIRMED, AttemptState.DENIED)
"""The attempts a new one supersedes."""


class ClaimState(StrEnum):
    """A claim attempt's state as a person reads it (views.claim_state): the stored one, or `lapsed` for a pending
    link or a shown code whose time has passed. A superseded attempt is never shown."""

    PENDING = "pending"
    CONFIRMED = "confirmed"
    DENIED = "denied"
    COMPLETED = "completed"
    LAPSED = "lapsed"


class DeliveryState(StrEnum):
    """`webhook_deliveries.state`."""

    PENDING = "pending"  # a try is due at next_at
    DELIVERED = "delivered"
    FAILED = "failed"  # its last try failed


class EventStatus(StrEnum):
    """A registration's status as the service side reads it (WorkOS's `AgentRegistration.status`), derived from its
    row (agent_events.status_of)."""

    UNVERIFIED = "unverified"
    VERIFIED = "verified"
    EXPIRED = "expired"
    REVOKED = "revoked"


class CredentialState(StrEnum):
    """A service key's state, derived from its `revoked_at`."""

    LIVE = "live"
    REVOKED = "revoked"


class SessionState(StrEnum):
    """A `pxt login` session's state, derived from its row (views.session_state). Here, not in hosted/states.py
    beside the device login's: the operator's view of people (views.users_overview) derives it, and identity
    imports nothing of hosted."""

    ACTIVE = "active"
    REVOKED = "revoked"  # logged out
    EXPIRED = "expired"  # its refresh token's time passed
