"""The claim ceremony: an attempt (`claim_attempts`, this module its one writer) the person approves or denies on
the claim page (or the operator, or a service through `link_external_user`), and the 6-digit user code the agent then
completes the claim with (registrations.py's `complete_claim`). Attempt tokens and user codes are stored as hashes
only. Every time is the emulator's clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import aiosqlite

from emulator.config import Settings
from emulator.core.clock import iso
from emulator.core.context import Core
from emulator.core.errors import (
    ALREADY_CLAIMED,
    BAD_REQUEST,
    CLAIM_EXPIRED,
    CLAIM_REVOKED,
    CONFLICT,
    FORBIDDEN,
    GONE,
    INVALID_CLAIM_TOKEN,
    INVALID_LOGIN_HINT,
    INVALID_REQUEST,
    NOT_FOUND,
    ApiError,
)
from emulator.core.ids import secret_hash
from emulator.core.kinds import Kind
from emulator.core.payloads import IdpClaimConfirmed, IdpClaimDenied, IdpClaimStarted
from emulator.core.store import Db, fetch_one
from emulator.identity import agent_events
from emulator.identity.agent_events import ClaimAttemptData
from emulator.identity.records import AttemptRecord, OpenAttempt, RegistrationRecord
from emulator.identity.states import OPEN_ATTEMPTS, AttemptState, RegStatus, RegType
from emulator.identity.users import Users
from emulator.identity.wire import CLAIM_PAGE, Attempt, ClaimStart, ClaimStarted, Urls, claim_token_refused, valid_email


class Claims:
    def __init__(self, core: Core, urls: Urls, users: Users) -> None:
        self.core = core
        self.urls = urls
        self.users = users

    @property
    def _s(self) -> Settings:
        return self.core.settings

    async def new_attempt(
        self, conn: aiosqlite.Connection, reg_id: str, login_hint: str | None, now: float
    ) -> tuple[Attempt, agent_events.Recorded]:
        """Mint a claim attempt; it supersedes the previous one (its link and code stop working)."""
        await conn.execute(
            "UPDATE claim_attempts SET state = ? WHERE registration_id = ? AND state IN (?, ?, ?)",
            (AttemptState.SUPERSEDED, reg_id, *OPEN_ATTEMPTS),
        )
        token = self.core.ids.token("att_", 20)
        exp = now + self._s.attempt_ttl
        attempt_id = self.core.ids.ident("cla_")
        await conn.execute(
            "INSERT INTO claim_attempts (id, registration_id, token_hash, login_hint, state, expires_at, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (attempt_id, reg_id, secret_hash(token), login_hint, AttemptState.PENDING, exp, now),
        )
        data = ClaimAttemptData(
            id=attempt_id,
            agent_registration_id=reg_id,
            agent_registration_claim_id=agent_events.claim_id(reg_id),
            login_hint=login_hint,
            expires_at=iso(exp),
            created_at=iso(now),
            updated_at=iso(now),
        )
        started = await agent_events.record(
            conn, self.core, Kind.AGENT_REGISTRATION_CLAIM_ATTEMPT_CREATED, reg_id, data
        )
        return Attempt(f"{self.urls.auth}{CLAIM_PAGE}?token={token}", iso(exp)), started

    async def registration_by_claim_token(self, conn: aiosqlite.Connection, token: str | None) -> RegistrationRecord:
        if not token:
            raise claim_token_refused(token)
        reg = await fetch_one(
            conn, RegistrationRecord, "SELECT * FROM registrations WHERE claim_token_hash = ?", (secret_hash(token),)
        )
        if reg is None:
            raise INVALID_CLAIM_TOKEN("the claim token is not one this provider issued")
        if reg.revoked_at is not None:
            raise CLAIM_REVOKED("this registration was revoked; register again")
        if reg.status == RegStatus.CLAIMED:
            raise ALREADY_CLAIMED("this registration is already claimed")
        if reg.claim_expires_at <= self.core.clock.now():
            raise CLAIM_EXPIRED("the claim window of this registration has closed")
        return reg

    async def start_claim(self, body: ClaimStart) -> ClaimStarted:
        if body.type != RegType.SERVICE_AUTH:
            raise INVALID_REQUEST(
                'the claim method is type: "service_auth" (for anonymous registrations too)',
            )
        login_hint = body.login_hint
        if login_hint is not None and not valid_email(login_hint):
            raise INVALID_LOGIN_HINT("login_hint must be an e-mail address")
        now = self.core.clock.now()
        async with self.core.store.transaction() as conn:
            reg = await self.registration_by_claim_token(conn, body.claim_token)
            hint = (login_hint or reg.login_hint or "").strip() or None
            # an ID-JAG's registration names its e-mail (login_hint) whenever it names its upstream issuer
            if reg.upstream_iss is not None and (hint or "").lower() != str(reg.login_hint).lower():
                # its claim links the ID-JAG's upstream identity: only the account of the ID-JAG's e-mail may take it
                raise INVALID_LOGIN_HINT(f"this registration's claim is for {reg.login_hint}, the ID-JAG's e-mail")
            attempt, started = await self.new_attempt(conn, reg.id, hint, now)
        self.core.bus.publish(reg.id, IdpClaimStarted(login_hint=hint))
        agent_events.publish(self.core.bus, started)
        return ClaimStarted(reg.id, "service_auth", attempt)

    async def attempt_for(self, *, token: str | None = None, registration: str | None = None) -> OpenAttempt:
        """The current attempt, by the token of its verification URI or by registration id."""
        if token:
            where, args = "a.token_hash = ?", (secret_hash(token),)
        elif registration:
            where, args = "a.registration_id = ? AND a.state != ?", (registration, AttemptState.SUPERSEDED)
        else:
            raise BAD_REQUEST("name the claim: its verification_uri or its registration id")
        row = await open_attempt(self.core.store, where, *args)
        if row is None:
            raise NOT_FOUND("no pending claim matches")
        return row

    async def decide(self, attempt: OpenAttempt, email: str, approve: bool) -> str | None:
        """The person signed in as `email` approves (→ the user code, shown once) or denies the claim. Denying
        needs no e-mail: a person asked about an agent they do not know must not have to sign in to refuse it."""
        email = email.strip()
        if (approve or email) and not valid_email(email):
            raise BAD_REQUEST("sign in with an e-mail address")
        now = self.core.clock.now()
        async with self.core.store.transaction() as conn:
            # The attempt as it is now, in this transaction: a newer claim or a revocation committed since the page
            # read it closes it.
            current = await open_attempt(conn, "a.id = ?", attempt.id)
            if current is None:  # its registration was deleted meanwhile
                raise GONE("this claim is no more: its agent was deleted")
            code = await self.settle(conn, current, email, approve, now)
        decided = IdpClaimConfirmed if approve else IdpClaimDenied
        self.core.bus.publish(attempt.registration_id, decided(email=email or None))
        return code

    async def settle(
        self, conn: aiosqlite.Connection, attempt: OpenAttempt, email: str, approve: bool, now: float
    ) -> str | None:
        """The decision on a claim attempt inside the caller's transaction: the claim page's, the operator's and the
        service side's (`link_external_user`) alike. The caller journals it once committed."""
        closed = why_closed(attempt, now)
        if closed is not None:
            raise (GONE if closed.status == 410 else CONFLICT)(closed.text)
        refused = hint_refusal(attempt, email)
        if refused is not None:
            raise refused
        code = self.core.ids.digits(6) if approve else None
        if email:
            await self.users.ensure_user(conn, email, now)
        await conn.execute(
            "UPDATE claim_attempts SET state = ?, email = ?, user_code_hash = ?, code_expires_at = ? WHERE id = ?",
            (
                AttemptState.CONFIRMED if approve else AttemptState.DENIED,
                email or None,
                secret_hash(code) if code else None,
                now + self._s.attempt_ttl if code else None,
                attempt.id,
            ),
        )
        return code

    @staticmethod
    async def latest(conn: aiosqlite.Connection, reg_id: str) -> AttemptRecord | None:
        """The registration's current attempt (a superseded one never is)."""
        return await fetch_one(
            conn,
            AttemptRecord,
            "SELECT * FROM claim_attempts WHERE registration_id = ? AND state != ? ORDER BY created_at DESC LIMIT 1",
            (reg_id, AttemptState.SUPERSEDED),
        )

    @staticmethod
    async def complete(conn: aiosqlite.Connection, attempt_id: str) -> None:
        """The agent completed the claim with this attempt's user code."""
        await conn.execute("UPDATE claim_attempts SET state = ? WHERE id = ?", (AttemptState.COMPLETED, attempt_id))


@dataclass(frozen=True)
class Closed:
    """Why a claim link takes no decision any more: the status of a refused decision, a title and a text."""

    status: int
    title: str
    text: str


def hint_refusal(attempt: AttemptRecord, email: str) -> ApiError | None:
    """A claim for a named person (its login_hint) is decided only as that person (e-mail, in any case)."""
    hint = attempt.login_hint
    if hint and email and hint.lower() != email.strip().lower():
        return FORBIDDEN(f"this claim is for {hint}; sign in with that account")
    return None


# An attempt's row as why_closed reads it (its registration's type, status and revocation with it).
ATTEMPT_COLUMNS = (
    "a.*, r.type AS registration_type, r.status AS registration_status, r.revoked_at AS registration_revoked_at"
)


async def open_attempt(db: Db, where: str, *args: object) -> OpenAttempt | None:
    """The claim attempt `where` names (on `a`, a `?` for each of `args`) with what `why_closed` reads of its
    registration; the newest when several match."""
    return await fetch_one(
        db,
        OpenAttempt,
        f"SELECT {ATTEMPT_COLUMNS} FROM claim_attempts a JOIN registrations r ON r.id = a.registration_id "
        f"WHERE {where} ORDER BY a.created_at DESC LIMIT 1",
        args,
    )


def why_closed(attempt: OpenAttempt, now: float, readable: Callable[[float], str] = iso) -> Closed | None:
    """Whether a claim link still takes a decision. It works once: approved or denied, it is used."""
    if attempt.registration_revoked_at is not None:
        return Closed(410, "This agent was revoked", "The service revoked this agent; it must register again.")
    if attempt.state == AttemptState.SUPERSEDED:
        return Closed(
            410, "This claim link was replaced", "The agent started a newer claim: use the newest link it gives you."
        )
    if attempt.state == AttemptState.COMPLETED or attempt.registration_status == RegStatus.CLAIMED:
        return Closed(409, "This claim link was already used", "The agent is already linked to an account.")
    if attempt.state in (AttemptState.CONFIRMED, AttemptState.DENIED):
        approved = attempt.state == AttemptState.CONFIRMED
        done = "approved" if approved else "denied"
        who = f" as {attempt.email}" if attempt.email else ""
        again = " Its user code was shown once; the agent starts a new claim for a new one." if approved else ""
        return Closed(409, "This claim link was already used", f"It was {done}{who}; it works once.{again}")
    if attempt.expires_at <= now:
        return Closed(410, "This claim link expired", f"It was valid until {readable(attempt.expires_at)}.")
    return None
