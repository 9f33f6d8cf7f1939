"""Read-only views of identity for the operator (`/_emulator`): each registration's newest claim, and every person
with their organizations and `pxt login` sessions. No hash and no secret ever leaves here."""

from __future__ import annotations

from dataclasses import dataclass, field

from emulator.core.store import Store, fetch_all
from emulator.identity.records import LatestAttempt, MembershipRecord, PersonRecord, SessionRow
from emulator.identity.states import AttemptState, ClaimState, SessionState


def claim_state(state: AttemptState, expires_at: float, code_expires_at: float | None, now: float) -> ClaimState:
    """A claim attempt's state as a person reads it: a pending link, or a code shown but not yet used, whose
    time has passed is `lapsed` (the agent must start a new claim); otherwise the stored state."""
    if state == AttemptState.PENDING and expires_at <= now:
        return ClaimState.LAPSED
    if state == AttemptState.CONFIRMED and (code_expires_at or expires_at) <= now:
        return ClaimState.LAPSED
    return ClaimState(state)  # superseded is never read here (latest_claims)


@dataclass(frozen=True)
class LatestClaim:
    """A registration's newest claim attempt: its state (`pending`, `confirmed`, `denied`, `completed`, `lapsed`),
    the e-mail it was decided as, and when its link lapses."""

    state: ClaimState
    email: str | None
    expires_at: float


async def latest_claims(db: Store, now: float) -> dict[str, LatestClaim]:
    """Each registration's newest claim attempt (a superseded one never is)."""
    rows = await fetch_all(
        db,
        LatestAttempt,
        "SELECT a.registration_id, a.state, a.email, a.expires_at, a.code_expires_at FROM claim_attempts a "
        "WHERE a.state != ? ORDER BY a.created_at",
        (AttemptState.SUPERSEDED,),
    )
    return {
        r.registration_id: LatestClaim(
            claim_state(r.state, r.expires_at, r.code_expires_at, now), r.email, r.expires_at
        )
        for r in rows
    }


def session_state(revoked_at: float | None, expires_at: float, now: float) -> SessionState:
    """A `pxt login` session: `revoked` (logged out), `expired` (its refresh token's time passed) or `active`."""
    if revoked_at is not None:
        return SessionState.REVOKED
    return SessionState.EXPIRED if expires_at <= now else SessionState.ACTIVE


@dataclass(frozen=True)
class SessionRecord:
    """A `pxt login` session (its refresh token's expiry is the session's); never a token or its hash."""

    id: str
    org: str | None  # its organization's slug (its id once the organization is gone)
    created_at: float
    expires_at: float
    revoked_at: float | None
    state: SessionState


@dataclass(frozen=True)
class UserOverview:
    id: str
    email: str
    created_at: float
    orgs: list[tuple[str, str]] = field(default_factory=list)  # (organization slug, role)
    sessions: list[SessionRecord] = field(default_factory=list)


async def users_overview(db: Store, now: float) -> list[UserOverview]:
    """Every person who signed in: their organizations and roles, and their `pxt login` sessions."""
    users = await fetch_all(db, PersonRecord, "SELECT id, email, created_at FROM users ORDER BY created_at, email")
    members = await fetch_all(
        db,
        MembershipRecord,
        "SELECT m.user_id, o.slug, m.role FROM org_members m JOIN orgs o ON o.id = m.org_id ORDER BY o.slug",
    )
    sessions = await fetch_all(
        db,
        SessionRow,
        "SELECT s.id, s.user_id, (SELECT slug FROM orgs o WHERE o.id = s.org_id) AS org, s.org_id, "
        "s.refresh_expires_at, s.created_at, s.revoked_at FROM sessions s ORDER BY s.created_at",
    )
    out = {u.id: UserOverview(u.id, u.email, u.created_at) for u in users}
    for m in members:
        if m.user_id in out:
            out[m.user_id].orgs.append((m.slug, m.role))
    for s in sessions:
        if s.user_id in out:
            out[s.user_id].sessions.append(
                SessionRecord(
                    s.id,
                    s.org or s.org_id,
                    s.created_at,
                    s.refresh_expires_at,
                    s.revoked_at,
                    session_state(s.revoked_at, s.refresh_expires_at, now),
                )
            )
    return list(out.values())
