"""Agent registrations (`registrations`, this module its one writer): anonymous, service_auth and ID-JAG
registrations, the claim's completion (the registration becomes its person's), the unclaimed window's expiry, what
trials and declared states do to a registration, and its revocation and deletion (the agents API's acts). Claim
tokens are stored as hashes only. Every time is the emulator's clock."""

from __future__ import annotations

from typing import Literal

import aiosqlite
from msgspec import UNSET, UnsetType

from emulator.config import Settings
from emulator.core.clock import iso
from emulator.core.context import Core
from emulator.core.errors import (
    ANONYMOUS_REGISTRATION_DISABLED,
    BAD_REQUEST,
    CLAIM_DENIED,
    CLAIM_EXPIRED,
    CLAIM_NOT_CONFIRMED,
    INVALID_GRANT,
    INVALID_LOGIN_HINT,
    INVALID_REQUEST,
    INVALID_USER_CODE,
    ISSUER_NOT_ENABLED,
    SERVICE_AUTH_REGISTRATION_DISABLED,
    USER_CODE_EXPIRED,
    ApiError,
)
from emulator.core.ids import secret_hash
from emulator.core.kinds import Kind
from emulator.core.payloads import IdpClaimed, IdpIdjagRefused, IdpRegistered
from emulator.core.store import fetch_one, many
from emulator.identity import agent_events, tokens, users
from emulator.identity.agent_events import ClaimCompletedData, ClaimedBy, RegistrationRef
from emulator.identity.claims import Claims
from emulator.identity.idjag import Upstream
from emulator.identity.records import RegistrationRecord
from emulator.identity.states import AttemptState, RegStatus, RegType
from emulator.identity.tokens import Tokens
from emulator.identity.users import Users
from emulator.identity.wire import (
    IDENTITY_TYPES,
    POST_CLAIM_SCOPES,
    PRE_CLAIM_SCOPES,
    USER_CODE,
    Attempt,
    ClaimCompletion,
    Claimed,
    ClaimOffer,
    Grant,
    NeedsInteraction,
    Refreshed,
    RefreshToken,
    Registered,
    Registration,
    Scopes,
    Urls,
    type_refused,
    valid_email,
)


class Registrations:
    def __init__(
        self, core: Core, urls: Urls, upstream: Upstream, tokens: Tokens, claims: Claims, users: Users
    ) -> None:
        self.core = core
        self.urls = urls
        self.upstream = upstream
        self.tokens = tokens
        self.claims = claims
        self.users = users

    @property
    def _s(self) -> Settings:
        return self.core.settings

    async def register(self, body: Registration, ip: str) -> Registered | Refreshed:
        kind = body.type
        if kind == "refresh":
            return await self.tokens.refresh(body)
        if kind == RegType.IDENTITY_ASSERTION:
            if not self.core.switches["identity_assertion_registration"]:
                raise ISSUER_NOT_ENABLED(
                    "identity_assertion (ID-JAG) registration is not enabled here; use anonymous or service_auth",
                )
            return await self.register_idjag(body, ip)
        if kind not in IDENTITY_TYPES:
            raise type_refused(kind)
        if kind == RegType.ANONYMOUS and not self.core.switches["anonymous_registration"]:
            raise ANONYMOUS_REGISTRATION_DISABLED("anonymous registration is disabled here")
        if kind == RegType.SERVICE_AUTH and not self.core.switches["service_auth_registration"]:
            raise SERVICE_AUTH_REGISTRATION_DISABLED("service_auth registration is disabled here")
        login_hint = None
        if kind == RegType.SERVICE_AUTH:
            login_hint = body.login_hint
            if login_hint is None:
                raise INVALID_REQUEST("service_auth needs login_hint: the user's e-mail")
            if not valid_email(login_hint):
                raise INVALID_LOGIN_HINT("login_hint must be an e-mail address")
            login_hint = login_hint.strip()
        now = self.core.clock.now()
        reg_id = self.core.ids.ident("agent_reg_")
        claim_token = self.core.ids.token("clm_", 20)
        claim_exp = now + self._s.claim_ttl
        attempt: Attempt | UnsetType = UNSET
        async with self.core.store.transaction() as conn:
            await conn.execute(
                "INSERT INTO registrations (id, type, login_hint, status, claim_token_hash, claim_expires_at, "
                "client_ip, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (reg_id, kind, login_hint, RegStatus.REGISTERED, secret_hash(claim_token), claim_exp, ip, now),
            )
            events = [await self._created(conn, reg_id)]
            if kind == RegType.SERVICE_AUTH:
                attempt, started = await self.claims.new_attempt(conn, reg_id, login_hint, now)
                events.append(started)
        given = self.tokens.assertion(reg_id, kind, None) if kind == RegType.ANONYMOUS else None
        registered = IdpRegistered(type=kind, login_hint=login_hint, ip=ip, assertion_expires_at=given and given[1])
        self.core.bus.publish(reg_id, registered)
        agent_events.publish(self.core.bus, *events)
        claim = ClaimOffer(
            token=claim_token, expires_at=iso(claim_exp), url=f"{self.urls.auth}/agent/identity/claim", attempt=attempt
        )
        if given is not None:
            assertion, exp = given
            grant = Grant(assertion=assertion, expires_at=iso(exp))
            scopes = Scopes(pre_claim=PRE_CLAIM_SCOPES, post_claim=POST_CLAIM_SCOPES)
            return Registered(id=reg_id, type=kind, identity=grant, scopes=scopes, claim=claim)
        return Registered(id=reg_id, type=kind, scopes=Scopes(post_claim=POST_CLAIM_SCOPES), claim=claim)

    async def register_idjag(self, body: Registration, ip: str) -> Registered:
        """An ID-JAG (idjag.py checks it): its person's agent, claimed at once when the upstream identity is linked to
        an account or names a new one; `interaction_required` when its e-mail is an account not linked to it."""
        if not body.assertion or body.assertion_type is None:
            raise INVALID_REQUEST("identity_assertion needs assertion_type and assertion (the ID-JAG)")
        now = self.core.clock.now()
        try:
            jag = self.upstream.check(body.assertion_type, body.assertion, now, self._s.idjag_max_auth_age)
        except ApiError as e:
            self.core.bus.publish(self.upstream.issuer, IdpIdjagRefused(error=e.code, reason=e.message, ip=ip))
            raise
        reg_id = self.core.ids.ident("agent_reg_")
        claim_token = self.core.ids.token("clm_", 20)
        claim_exp = now + self._s.claim_ttl
        attempt: Attempt | UnsetType = UNSET
        async with self.core.store.transaction() as conn:
            if not await tokens.use_jti(conn, jag.iss, jag.jti, jag.exp, now):
                refusal = INVALID_GRANT(f"the assertion's jti {jag.jti} was already used: an ID-JAG works once")
                self.core.bus.publish(jag.iss, IdpIdjagRefused(error=refusal.code, reason=refusal.message, ip=ip))
                raise refusal
            linked, email = await users.linked_email(conn, jag.iss, jag.sub)
            if not linked and await users.user_id(conn, jag.email) is None:
                user = await self.users.ensure_user(
                    conn, jag.email, now
                )  # a new person, linked to the identity at once
                await users.link_upstream(conn, jag.iss, jag.sub, user, now)
                email = jag.email
            await conn.execute(
                "INSERT INTO registrations (id, type, login_hint, status, claim_token_hash, claim_expires_at, "
                "claimed_email, claimed_at, client_ip, created_at, upstream_iss, upstream_sub) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    reg_id,
                    RegType.IDENTITY_ASSERTION,
                    jag.email,
                    RegStatus.CLAIMED if email else RegStatus.REGISTERED,
                    secret_hash(claim_token),
                    claim_exp,
                    email,
                    now if email else None,
                    ip,
                    now,
                    jag.iss,
                    jag.sub,
                ),
            )
            events = [await self._created(conn, reg_id)]
            if email is None:  # an account with this e-mail, not linked to the upstream identity: the person decides
                attempt, started = await self.claims.new_attempt(conn, reg_id, jag.email, now)
                events.append(started)
        given = self.tokens.assertion(reg_id, RegType.IDENTITY_ASSERTION, email) if email is not None else None
        registered = IdpRegistered(
            type=RegType.IDENTITY_ASSERTION, login_hint=jag.email, ip=ip, assertion_expires_at=given and given[1]
        )
        self.core.bus.publish(reg_id, registered)
        agent_events.publish(self.core.bus, *events)
        if given is None:
            claim = ClaimOffer(
                token=claim_token,
                expires_at=iso(claim_exp),
                url=f"{self.urls.auth}/agent/identity/claim",
                attempt=attempt,
            )
            raise NeedsInteraction(
                Registered(
                    id=reg_id, type=RegType.IDENTITY_ASSERTION, scopes=Scopes(post_claim=POST_CLAIM_SCOPES), claim=claim
                )
            )
        assertion, exp = given
        return Registered(
            id=reg_id,
            type=RegType.IDENTITY_ASSERTION,
            identity=Grant(assertion=assertion, expires_at=iso(exp)),
            scopes=Scopes(post_claim=POST_CLAIM_SCOPES),
        )

    async def _created(self, conn: aiosqlite.Connection, reg_id: str) -> agent_events.Recorded:
        """`agent.registration.created` for a registration just written."""
        reg = await registration(conn, reg_id)
        assert reg is not None
        user = await users.user_id(conn, reg.claimed_email) if reg.claimed_email else None
        data = agent_events.registration_data(reg, user, self.core.clock.now())
        return await agent_events.record(conn, self.core, Kind.AGENT_REGISTRATION_CREATED, reg_id, data)

    async def complete_claim(self, body: ClaimCompletion) -> Claimed:
        code = body.user_code
        if not USER_CODE.match(code):
            raise INVALID_REQUEST("user_code must be the 6 digits shown on the claim page")
        now = self.core.clock.now()
        async with self.core.store.transaction() as conn:
            reg = await self.claims.registration_by_claim_token(conn, body.claim_token)
            attempt = await Claims.latest(conn, reg.id)
            if attempt is None:
                raise CLAIM_NOT_CONFIRMED("no claim was started; POST /agent/identity/claim")
            if attempt.state == AttemptState.DENIED:
                raise CLAIM_DENIED("the person denied this claim")
            if attempt.state == AttemptState.PENDING:
                if attempt.expires_at <= now:
                    raise CLAIM_EXPIRED("the claim link expired; start a new claim")
                raise CLAIM_NOT_CONFIRMED(
                    "the person has not confirmed yet: they sign in at the verification_uri and read you the code",
                )
            # a confirmed attempt (the one state left: a completed one's registration is claimed) has its code and
            # the e-mail it was confirmed as
            assert attempt.code_expires_at is not None and attempt.email is not None
            if attempt.code_expires_at <= now:
                raise USER_CODE_EXPIRED("the user code expired; start a new claim")
            if secret_hash(code) != attempt.user_code_hash:
                raise INVALID_USER_CODE("that is not the code shown on the claim page")
            email = attempt.email
            await Claims.complete(conn, attempt.id)
            await conn.execute(
                "UPDATE registrations SET status = ?, claimed_email = ?, claimed_at = ?, updated_at = ? WHERE id = ?",
                (RegStatus.CLAIMED, email, now, now, reg.id),
            )
            # The pre-claim tokens of an anonymous registration stop working; the new assertion replaces them.
            await tokens.revoke_access(conn, reg.id, now)
            refresh, refresh_exp = await self.tokens.new_refresh_token(conn, reg.id, now)
            user_id = await self.users.ensure_user(conn, email, now)
            # The claim an ID-JAG's interaction_required started links the upstream identity to its own e-mail's
            # account only (its attempts are pinned to it; this is the last guard).
            if (
                reg.upstream_iss is not None
                and reg.upstream_sub is not None
                and email.lower() == (reg.login_hint or "").lower()
            ):
                await users.link_upstream(conn, reg.upstream_iss, reg.upstream_sub, user_id, now)
            completed = await agent_events.record(
                conn,
                self.core,
                Kind.AGENT_REGISTRATION_CLAIM_COMPLETED,
                reg.id,
                ClaimCompletedData(
                    id=agent_events.claim_id(reg.id),
                    agent_registration_id=reg.id,
                    completed_by_attempt_id=attempt.id,
                    claimed_by=ClaimedBy(user_id, reg.trial_org_id),
                    completed_at=iso(now),
                    created_at=iso(reg.created_at),
                    updated_at=iso(now),
                ),
            )
        assertion, exp = self.tokens.assertion(reg.id, reg.type, email)
        self.core.bus.publish(reg.id, IdpClaimed(email=email, assertion_expires_at=exp))
        agent_events.publish(self.core.bus, completed)
        renewal = RefreshToken(refresh, iso(refresh_exp))
        return Claimed(reg.id, "claimed", Grant(assertion=assertion, expires_at=iso(exp), refresh_token=renewal))

    async def expire_unclaimed(self, now: float) -> None:
        """A due job: `agent.registration.expired`, once, for each registration whose claim window closed unclaimed
        (it still works as it did: expiry ends the window to claim it, as the registration's status says)."""
        due = "status = ? AND claim_expires_at <= ? AND expired_at IS NULL AND revoked_at IS NULL"
        args = (RegStatus.REGISTERED, now)
        if await self.core.store.fetchone(f"SELECT 1 FROM registrations WHERE {due} LIMIT 1", args) is None:
            return  # the usual answer, without a write transaction
        async with self.core.store.transaction() as conn:  # read again and written in one transaction
            ids = [str(r[0]) for r in await many(conn, f"SELECT id FROM registrations WHERE {due}", args)]
            events: list[agent_events.Recorded] = []
            for reg_id in ids:
                await conn.execute(
                    "UPDATE registrations SET expired_at = ?, updated_at = ? WHERE id = ?", (now, now, reg_id)
                )
                ref = RegistrationRef(reg_id)
                events.append(await agent_events.record(conn, self.core, Kind.AGENT_REGISTRATION_EXPIRED, reg_id, ref))
        agent_events.publish(self.core.bus, *events)

    async def declare_registration(
        self,
        conn: aiosqlite.Connection,
        reg_id: str,
        *,
        kind: str,
        login_hint: str | None,
        claimed_email: str | None,
        claim_token: str | None,
        refresh_token: str | None,
        trial_org_id: str | None,
        now: float,
        exact: bool,
        upstream_sub: str | None = None,
    ) -> Literal["created", "updated", "unchanged"]:
        """Make the registration be as a declared state says, inside the caller's transaction. Its claim window
        (`claim_ttl`) and a declared refresh token's life start at `now` when made; an existing one keeps them unless
        `exact` (the state declares the clock) or they lapsed. Without a declared claim token it keeps its own. An
        identity_assertion registration's upstream identity (`upstream_sub` at the upstream issuer) is linked to its
        person, as an accepted ID-JAG links it."""
        status = RegStatus.CLAIMED if claimed_email else RegStatus.REGISTERED
        upstream_iss = self.upstream.issuer if upstream_sub else None
        token_hash = secret_hash(claim_token) if claim_token else None
        if token_hash is not None:
            async with conn.execute(
                "SELECT id FROM registrations WHERE claim_token_hash = ? AND id != ?", (token_hash, reg_id)
            ) as cur:
                if await cur.fetchone() is not None:
                    raise BAD_REQUEST("this claim token is already another registration's")
        if claimed_email:
            user = await self.users.ensure_user(conn, claimed_email, now)  # as a completed claim does
            if upstream_iss and upstream_sub:
                await users.link_upstream(conn, upstream_iss, upstream_sub, user, now)
        reg = await registration(conn, reg_id)
        outcome: Literal["created", "updated", "unchanged"] = "unchanged"
        if reg is None:
            await conn.execute(
                "INSERT INTO registrations (id, type, login_hint, status, claim_token_hash, claim_expires_at, "
                "claimed_email, claimed_at, trial_org_id, created_at, upstream_iss, upstream_sub) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    reg_id,
                    kind,
                    login_hint,
                    status,
                    token_hash or secret_hash(self.core.ids.token("clm_", 20)),
                    now + self._s.claim_ttl,
                    claimed_email,
                    now if claimed_email else None,
                    trial_org_id,
                    now,
                    upstream_iss,
                    upstream_sub,
                ),
            )
            outcome = "created"
        else:
            window = reg.claim_expires_at
            if exact or window <= now:
                window = now + self._s.claim_ttl
            claimed_at = (reg.claimed_at or now) if claimed_email else None
            want = (
                kind,
                login_hint,
                status,
                claimed_email,
                claimed_at,
                trial_org_id,
                token_hash or reg.claim_token_hash,
                window,
                upstream_iss,
                upstream_sub,
            )
            have = (
                reg.type,
                reg.login_hint,
                reg.status,
                reg.claimed_email,
                reg.claimed_at,
                reg.trial_org_id,
                reg.claim_token_hash,
                reg.claim_expires_at,
                reg.upstream_iss,
                reg.upstream_sub,
            )
            if want != have:
                await conn.execute(
                    "UPDATE registrations SET type = ?, login_hint = ?, status = ?, claimed_email = ?, claimed_at = ?, "
                    "trial_org_id = ?, claim_token_hash = ?, claim_expires_at = ?, upstream_iss = ?, upstream_sub = ? "
                    "WHERE id = ?",
                    (*want, reg_id),
                )
                outcome = "updated"
        if refresh_token and await self.tokens.declare_refresh_token(conn, reg_id, refresh_token, now, exact):
            outcome = "updated" if outcome == "unchanged" else outcome
        return outcome


# --- a registration's row, read and written inside the caller's transaction (trials, declared states, the agents API)


async def registration(conn: aiosqlite.Connection, registration_id: str) -> RegistrationRecord | None:
    return await fetch_one(conn, RegistrationRecord, "SELECT * FROM registrations WHERE id = ?", (registration_id,))


async def attach_trial(conn: aiosqlite.Connection, registration_id: str, org_id: str) -> None:
    """The registration got its one trial (kept after the trial is deleted)."""
    await conn.execute("UPDATE registrations SET trial_org_id = ? WHERE id = ?", (org_id, registration_id))


async def claim_with_trial(conn: aiosqlite.Connection, registration_id: str, email: str, now: float) -> None:
    """A person claimed the trial the registration made: the registration is the person's too."""
    await conn.execute(
        "UPDATE registrations SET status = ?, claimed_email = ?, claimed_at = ?, updated_at = ? "
        "WHERE id = ? AND status = ?",
        (RegStatus.CLAIMED, email, now, now, registration_id, RegStatus.REGISTERED),
    )


async def revoke(conn: aiosqlite.Connection, reg_id: str, now: float) -> None:
    """The registration is revoked (the agents API's rule; its tokens are spent with it, tokens.py)."""
    await conn.execute("UPDATE registrations SET revoked_at = ?, updated_at = ? WHERE id = ?", (now, now, reg_id))


async def delete(conn: aiosqlite.Connection, reg_id: str) -> bool:
    """The registration goes with what hangs on it (its tokens and claim attempts, by cascade); whether it was."""
    cur = await conn.execute("DELETE FROM registrations WHERE id = ?", (reg_id,))
    return cur.rowcount != 0
