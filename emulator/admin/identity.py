"""`/_emulator` for the identity provider's side: agent registrations, pending claims and `pxt login` sign-ins,
and the person's acts on them (approve or deny)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

from litestar import Request
from litestar.di import NamedDependency

from emulator.admin import ops
from emulator.admin.context import operator_of
from emulator.admin.operation import operation
from emulator.admin.wire import (
    ClaimDecided,
    ClaimDecision,
    ClaimList,
    LatestClaimView,
    LoginDecided,
    LoginDecision,
    LoginList,
    MembershipView,
    PendingClaimView,
    PendingLoginView,
    RegistrationList,
    RegistrationView,
    SessionView,
    UserList,
    UserView,
)
from emulator.core.clock import iso
from emulator.core.errors import BAD_REQUEST, CONFLICT, GONE, NOT_FOUND, UNAUTHORIZED
from emulator.core.store import record
from emulator.identity.agent_events import status_of
from emulator.identity.idjag import Minted, MintRequest
from emulator.identity.records import RegistrationRecord
from emulator.identity.views import LatestClaim, UserOverview, latest_claims, users_overview
from emulator.identity.wire import POST_CLAIM_SCOPES, PRE_CLAIM_SCOPES, valid_email


def _attempt_token(claim: str | None) -> str | None:
    if claim and "token=" in claim:
        return parse_qs(urlsplit(claim).query).get("token", [""])[0] or None
    return claim


# A claim the person acts on: none found, one closed (claimed, revoked, lapsed) or already decided, a bad e-mail.
_CLAIM_REFUSALS = (BAD_REQUEST, UNAUTHORIZED, NOT_FOUND, CONFLICT, GONE)


async def _decide(request: Request[Any, Any, Any], body: ClaimDecision, approve: bool) -> ClaimDecided:
    identity = operator_of(request).identity
    attempt = await identity.attempt_for(token=_attempt_token(body.claim), registration=body.registration)
    code = await identity.decide(attempt, body.email, approve)
    answer = ClaimDecided(attempt.registration_id, body.email.strip(), approve)
    if code:
        decided = await identity.attempt_for(registration=attempt.registration_id)
        answer.user_code, answer.expires_at = code, iso(decided.code_expires_at or decided.expires_at)
    return answer


@operation(ops.CLAIM_APPROVE, body="decision", errors=_CLAIM_REFUSALS)
async def claims_approve(request: Request[Any, Any, Any], decision: NamedDependency[ClaimDecision]) -> ClaimDecided:
    """The person signs in and approves: the answer shows the 6-digit user code, once."""
    return await _decide(request, decision, True)


@operation(ops.CLAIM_DENY, body="decision", errors=_CLAIM_REFUSALS)
async def claims_deny(request: Request[Any, Any, Any], decision: NamedDependency[ClaimDecision]) -> ClaimDecided:
    return await _decide(request, decision, False)


@operation(ops.REGISTRATIONS)
async def registrations_list(request: Request[Any, Any, Any]) -> RegistrationList:
    core = operator_of(request).core
    rows = await core.store.fetchall(
        "SELECT r.*, (SELECT slug FROM orgs o WHERE o.id = r.trial_org_id) AS trial, "
        "(SELECT COUNT(*) FROM access_tokens t WHERE t.registration_id = r.id) AS tokens, "
        "(SELECT MAX(issued_at) FROM access_tokens t WHERE t.registration_id = r.id) AS last_token_at "
        "FROM registrations r ORDER BY r.created_at"
    )
    now = core.clock.now()
    claims = await latest_claims(core.store, now)
    return RegistrationList(
        [
            RegistrationView(
                id=r["id"],
                type=r["type"],
                status=r["status"],
                login_hint=r["login_hint"],
                claimed_email=r["claimed_email"],
                scopes=POST_CLAIM_SCOPES if r["status"] == "claimed" else PRE_CLAIM_SCOPES,
                trial=r["trial"],
                trial_org_id=r["trial_org_id"],
                tokens_issued=r["tokens"],
                last_token_at=iso(r["last_token_at"]) if r["last_token_at"] else None,
                created_at=iso(r["created_at"]),
                claim=_claim_view(claims.get(r["id"])),
                revoked_at=iso(r["revoked_at"]) if r["revoked_at"] is not None else None,
                service_status=status_of(record(r, RegistrationRecord), now),
            )
            for r in rows
        ]
    )


@operation(ops.LOGIN_APPROVE, body="decision", errors=[BAD_REQUEST, NOT_FOUND, GONE])
async def logins_approve(request: Request[Any, Any, Any], decision: NamedDependency[LoginDecision]) -> LoginDecided:
    await operator_of(request).logins.decide(decision.user_code, decision.email, not decision.deny)
    return LoginDecided(decision.user_code.upper(), decision.email.strip(), not decision.deny)


@operation(ops.LOGINS)
async def logins_pending(request: Request[Any, Any, Any]) -> LoginList:
    core = operator_of(request).core
    rows = await core.store.fetchall(
        "SELECT user_code, state, email, expires_at FROM device_logins WHERE state = 'pending' AND expires_at > ? "
        "ORDER BY created_at",
        (core.clock.now(),),
    )
    return LoginList([PendingLoginView(r["user_code"], iso(r["expires_at"])) for r in rows])


@operation(ops.ID_JAG, body="ask", status_code=201, errors=[BAD_REQUEST])
async def id_jag_mint(request: Request[Any, Any, Any], ask: NamedDependency[MintRequest]) -> Minted:
    """An ID-JAG from the upstream issuer the emulator plays, for a test person: what the person's own identity
    provider would give the agent by token exchange. Every field can make a bad one on purpose."""
    operator = operator_of(request)
    if not valid_email(ask.email):
        raise BAD_REQUEST("email must be an e-mail address")
    return operator.identity.upstream.mint(ask, operator.core.clock.now())


@operation(ops.CLAIMS)
async def claims_pending(request: Request[Any, Any, Any]) -> ClaimList:
    """Claim attempts a person can still act on: `pending` (not yet approved) or `confirmed` (code shown)."""
    core = operator_of(request).core
    rows = await core.store.fetchall(
        "SELECT a.registration_id, a.login_hint, a.state, a.email, a.expires_at FROM claim_attempts a "
        "JOIN registrations r ON r.id = a.registration_id WHERE r.status = 'registered' "
        "AND a.state IN ('pending', 'confirmed') AND a.expires_at > ? ORDER BY a.created_at",
        (core.clock.now(),),
    )
    return ClaimList(
        [
            PendingClaimView(r["registration_id"], r["login_hint"], r["state"], r["email"], iso(r["expires_at"]))
            for r in rows
        ]
    )


@operation(ops.USERS)
async def users_list(request: Request[Any, Any, Any]) -> UserList:
    """Every person who signed in, with their organizations and roles and their `pxt login` sessions."""
    core = operator_of(request).core
    users = await users_overview(core.store, core.clock.now())
    return UserList([_user_view(u) for u in users])


def _claim_view(claim: LatestClaim | None) -> LatestClaimView | None:
    return None if claim is None else LatestClaimView(claim.state, claim.email, iso(claim.expires_at))


def _user_view(user: UserOverview) -> UserView:
    return UserView(
        id=user.id,
        email=user.email,
        created_at=iso(user.created_at),
        orgs=[MembershipView(org, role) for org, role in user.orgs],
        sessions=[
            SessionView(
                id=s.id,
                org=s.org,
                created_at=iso(s.created_at),
                expires_at=iso(s.expires_at),
                revoked_at=iso(s.revoked_at) if s.revoked_at is not None else None,
                state=s.state,
            )
            for s in user.sessions
        ],
    )


HANDLERS = [
    users_list,
    claims_pending,
    claims_approve,
    claims_deny,
    registrations_list,
    logins_pending,
    logins_approve,
    id_jag_mint,
]
