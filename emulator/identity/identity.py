"""The identity provider's rules: agent registration, the claim ceremony, assertions, access tokens.

The shapes follow WorkOS AuthKit agent registration (current, nested form): `/agent/identity`
answers `{id, type, identity{assertion, expires_at}, scopes{pre_claim, post_claim}, claim{token,
expires_at, url, attempt?}}`; the person reads a 6-digit user code off the verification page and the
agent submits it to `/agent/identity/claim/complete`. Secrets (claim tokens, attempt tokens, user
codes, refresh tokens) are stored as hashes only. Every time is the emulator's clock.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

import aiosqlite
import msgspec
from msgspec import UNSET, UnsetType

from emulator.config import Settings
from emulator.core.clock import iso
from emulator.core.context import Core
from emulator.core.errors import (
    ALREADY_CLAIMED,
    ANONYMOUS_REGISTRATION_DISABLED,
    BAD_REQUEST,
    CLAIM_DENIED,
    CLAIM_EXPIRED,
    CLAIM_NOT_CONFIRMED,
    CLAIM_REVOKED,
    CONFLICT,
    FORBIDDEN,
    GONE,
    INVALID_CLAIM_TOKEN,
    INVALID_GRANT,
    INVALID_LOGIN_HINT,
    INVALID_REFRESH_TOKEN,
    INVALID_REQUEST,
    INVALID_SCOPE,
    INVALID_TOKEN,
    INVALID_USER_CODE,
    ISSUER_NOT_ENABLED,
    NOT_FOUND,
    SERVICE_AUTH_REGISTRATION_DISABLED,
    USER_CODE_EXPIRED,
    ApiError,
)
from emulator.core.ids import secret_hash
from emulator.core.kinds import Kind
from emulator.core.payloads import (
    IdpClaimConfirmed,
    IdpClaimDenied,
    IdpClaimed,
    IdpClaimStarted,
    IdpIdjagRefused,
    IdpRefreshed,
    IdpRegistered,
    IdpTokenIssued,
    IdpTokenRevoked,
    IdpUserCreated,
)
from emulator.core.store import Store
from emulator.identity import agent_events
from emulator.identity.agent_events import (
    AccessTokenIssued,
    ClaimAttemptData,
    ClaimCompletedData,
    ClaimedBy,
    CredentialIssuedData,
    RegistrationRef,
)
from emulator.identity.idjag import SKEW, Upstream
from emulator.identity.signing import ACCESS_TOKEN_TYP, ASSERTION_TYP, AgentClaims, InvalidToken, Signer

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
# Anonymous registrations get two read-only scopes: one public, one free tier.
PRE_CLAIM_SCOPES = ["public:read", "free_tier:read"]
POST_CLAIM_SCOPES = ["public:read", "free_tier:read", "account:read", "account:write"]
IDENTITY_TYPES = ["anonymous", "service_auth"]

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_USER_CODE = re.compile(r"^\d{6}$")


CLAIM_PAGE = "/claim"  # the person's page of an agent's claim; its link carries the attempt token


@dataclass(frozen=True)
class Urls:
    site: str  # {base_url}: the protected resource
    auth: str  # {auth_url}: the issuer
    api: str  # the control plane


@dataclass(frozen=True)
class AccessGrant:
    """A verified access token."""

    jti: str
    registration_id: str
    registration_type: str
    scopes: list[str]
    expires_at: float


# --- what the provider takes: decoded whole before any rule runs; a field of the wrong type is refused as the rule
# for that field would refuse it (the same error a wrong value gets) ---------------------------------------------

T = TypeVar("T", bound=msgspec.Struct)
Refusals = dict[str, Callable[[object], ApiError]]


# Strings the document lists the values of: any string decodes, and the rules refuse the others by name (some with
# errors of their own, such as identity_assertion's issuer_not_enabled).
RegistrationType = Annotated[
    str, msgspec.Meta(extra_json_schema={"enum": ["anonymous", "service_auth", "refresh", "identity_assertion"]})
]
ClaimMethod = Annotated[str, msgspec.Meta(extra_json_schema={"enum": ["service_auth"]})]


def decode(raw: dict[str, object], kind: type[T], refusals: Refusals) -> T:
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError as e:
        found = re.search(r"`\$\.(\w+)|missing required field `(\w+)`", str(e))
        field = (found.group(1) or found.group(2)) if found else ""
        refuse = refusals.get(field)
        raise (refuse(raw.get(field)) if refuse else INVALID_REQUEST(str(e))) from None


def _type_refused(value: object) -> ApiError:
    return INVALID_REQUEST(
        "type must be one of anonymous, service_auth, refresh" + (f" (got {value!r})" if value is not None else "")
    )


def _hint_refused(_: object) -> ApiError:
    return INVALID_LOGIN_HINT("login_hint must be an e-mail address")


def _claim_token_refused(_: object) -> ApiError:
    return INVALID_REQUEST("claim_token is required")


class Registration(msgspec.Struct, kw_only=True):
    """POST /agent/identity: `anonymous`, `service_auth` (with `login_hint`), `refresh` (with `refresh_token`) or
    `identity_assertion` (with `assertion_type` and `assertion`, an ID-JAG)."""

    type: RegistrationType
    login_hint: str | None = None
    refresh_token: str | None = None
    assertion_type: str | None = None
    assertion: str | None = None

    @classmethod
    def of(cls, raw: dict[str, object]) -> Registration:
        if "requested_credential_type" in raw:  # a field of an old protocol: refused by name
            raise INVALID_REQUEST(
                "requested_credential_type is from an old protocol: register with {type: anonymous} or "
                "{type: service_auth, login_hint}, then exchange the assertion at /oauth2/token",
            )
        refresh = INVALID_REQUEST("type refresh needs refresh_token")
        assertion = INVALID_REQUEST("identity_assertion needs assertion_type and assertion (strings)")
        refusals: Refusals = {
            "type": _type_refused,
            "login_hint": _hint_refused,
            "refresh_token": lambda _: refresh,
            "assertion_type": lambda _: assertion,
            "assertion": lambda _: assertion,
        }
        return decode(raw, cls, refusals)


class ClaimStart(msgspec.Struct, kw_only=True):
    """POST /agent/identity/claim: a new claim attempt (for an anonymous registration too)."""

    type: ClaimMethod
    claim_token: str
    login_hint: str | None = None

    @classmethod
    def of(cls, raw: dict[str, object]) -> ClaimStart:
        method = INVALID_REQUEST('the claim method is type: "service_auth" (for anonymous registrations too)')
        refusals: Refusals = {
            "type": lambda _: method,
            "login_hint": _hint_refused,
            "claim_token": _claim_token_refused,
        }
        return decode(raw, cls, refusals)


class ClaimCompletion(msgspec.Struct, kw_only=True):
    """POST /agent/identity/claim/complete: the 6-digit code the person read off the claim page."""

    user_code: str  # checked first, as the code is what the person handed over
    claim_token: str

    @classmethod
    def of(cls, raw: dict[str, object]) -> ClaimCompletion:
        if "otp" in raw and "user_code" not in raw:  # an older name of the code
            raise INVALID_REQUEST("send the code as user_code")
        code = INVALID_REQUEST("user_code must be the 6 digits shown on the claim page")
        return decode(raw, cls, {"user_code": lambda _: code, "claim_token": _claim_token_refused})


# --- what the provider answers (the WorkOS AuthKit agent-registration shapes; a field left UNSET is not sent) ---


class Attempt(msgspec.Struct):
    """A claim attempt: the person's page, and until when its link works."""

    verification_uri: str
    expires_at: str


class ClaimOffer(msgspec.Struct, kw_only=True):
    token: str
    expires_at: str
    url: str
    attempt: Attempt | UnsetType = UNSET  # a service_auth registration's first attempt


class Scopes(msgspec.Struct, kw_only=True):
    pre_claim: list[str] | UnsetType = UNSET  # an anonymous registration's, before a claim
    post_claim: list[str]


class RefreshToken(msgspec.Struct):
    value: str
    expires_at: str


class Grant(msgspec.Struct, kw_only=True):
    """An identity assertion to exchange at /oauth2/token, and (after a claim or refresh) the next refresh token."""

    assertion: str
    expires_at: str
    refresh_token: RefreshToken | UnsetType = UNSET


class Registered(msgspec.Struct, kw_only=True):
    id: str
    type: str
    identity: Grant | UnsetType = UNSET  # anonymous and an accepted ID-JAG: usable at once
    scopes: Scopes
    claim: ClaimOffer | UnsetType = UNSET  # none for an ID-JAG's: it is its person's already


class NeedsInteraction(ApiError):
    """An ID-JAG whose verified e-mail is an account not yet linked to its upstream identity: 401
    `interaction_required`, with the claim (and its attempt) the person completes to link them."""

    def __init__(self, offer: Registered) -> None:
        super().__init__(
            401,
            "interaction_required",
            "an account with this e-mail exists but is not linked to this identity: the person approves the claim at "
            "claim.attempt.verification_uri, then the agent completes it at /agent/identity/claim/complete",
            headers={"WWW-Authenticate": 'AgentAuth error="interaction_required"'},
        )
        self.offer = offer


class Refreshed(msgspec.Struct):
    id: str
    type: Literal["refresh"]
    identity: Grant


class ClaimStarted(msgspec.Struct):
    id: str
    type: Literal["service_auth"]
    attempt: Attempt


class Claimed(msgspec.Struct):
    id: str
    status: Literal["claimed"]
    identity: Grant


class AccessToken(msgspec.Struct):
    """The jwt-bearer grant's answer (RFC 6749 §5.1)."""

    access_token: str
    token_type: Literal["Bearer"]
    expires_in: int
    scope: str


def valid_email(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 254 and bool(_EMAIL.match(value.strip()))


class Identity:
    def __init__(self, core: Core, signer: Signer, urls: Urls, upstream: Upstream | None = None) -> None:
        self.core = core
        self.signer = signer
        self.urls = urls
        self.upstream = upstream or Upstream(core.settings.state_dir, urls.auth, core.ids)

    def identity_types(self) -> list[str]:
        """The registration types discovery advertises: ID-JAG only while its switch is on."""
        return (
            [*IDENTITY_TYPES, "identity_assertion"]
            if self.core.switches["identity_assertion_registration"]
            else IDENTITY_TYPES
        )

    @property
    def _s(self) -> Settings:
        return self.core.settings

    # --- tokens -----------------------------------------------------------------------------------

    def assertion(self, reg_id: str, reg_type: str, claimed_email: str | None) -> tuple[str, float]:
        """A registration's identity assertion; a claimed one's names the person's e-mail."""
        now = self.core.clock.now()
        exp = now + self._s.assertion_ttl
        claims = AgentClaims(
            iss=self.urls.auth,
            aud=self.urls.auth,
            sub=reg_id,
            client_id=reg_id,
            jti=self.core.ids.ident("asr_"),
            iat=int(now),
            exp=int(exp),
            registration_type=reg_type,
        )
        if claimed_email is not None:
            claims = msgspec.structs.replace(claims, email=claimed_email, email_verified=True)
        return self.signer.sign(ASSERTION_TYP, claims), exp

    async def exchange(self, assertion: str, scope: str | None) -> AccessToken:
        """The jwt-bearer grant (RFC 7523): a valid assertion → an access token of ~5 minutes."""
        try:
            typ, claims = self.signer.verify(assertion)
        except InvalidToken as e:
            raise INVALID_GRANT(f"the assertion is not valid: {e}") from None
        if typ == ACCESS_TOKEN_TYP:
            raise INVALID_GRANT("this is an access token; send the identity assertion")
        if (
            typ != ASSERTION_TYP
            or not isinstance(claims, AgentClaims)
            or claims.iss != self.urls.auth
            or claims.aud != self.urls.auth
        ):
            raise INVALID_GRANT("the assertion was not issued by this identity provider")
        now = self.core.clock.now()
        if claims.exp <= now:
            raise INVALID_GRANT("the assertion has expired; refresh the registration or register again")
        jti = self.core.ids.ident("at_")
        exp = now + self._s.access_token_ttl

        def record(db: sqlite3.Connection) -> tuple[sqlite3.Row, list[str], agent_events.Recorded]:
            # The registration's state and the token's record in one transaction: a claim or a deletion
            # committed in between cannot leave a token of the state before it.
            reg = db.execute("SELECT * FROM registrations WHERE id = ?", (claims.sub,)).fetchone()
            if reg is None:
                raise INVALID_GRANT("the registration no longer exists; register again")
            if reg["revoked_at"] is not None:
                raise INVALID_GRANT("the registration was revoked; register again")
            if reg["status"] == "claimed" and claims.email is UNSET:
                raise INVALID_GRANT("this registration was claimed; use the assertion the claim returned")
            granted = POST_CLAIM_SCOPES if reg["status"] == "claimed" else PRE_CLAIM_SCOPES
            scopes = granted
            if scope:
                scopes = scope.split()
                extra = sorted(set(scopes) - set(granted))
                if extra:
                    raise INVALID_SCOPE(
                        f"not granted to this registration: {' '.join(extra)}; granted: {' '.join(granted)}",
                    )
            db.execute(
                "INSERT INTO access_tokens (jti, registration_id, scope, issued_at, expires_at) VALUES (?, ?, ?, ?, ?)",
                (jti, reg["id"], " ".join(scopes), now, exp),
            )
            issued = CredentialIssuedData(
                id=jti,
                agent_registration_id=reg["id"],
                detail=AccessTokenIssued(jti, iso(exp)),
                created_at=iso(now),
                updated_at=iso(now),
            )
            event = agent_events.record_sync(
                db, self.core, Kind.AGENT_REGISTRATION_CREDENTIAL_ISSUED, reg["id"], issued
            )
            return reg, scopes, event

        reg, scopes, event = await self.core.store.write(record)
        token = self.signer.sign(
            ACCESS_TOKEN_TYP,
            AgentClaims(
                iss=self.urls.auth,
                aud=self.urls.site,
                sub=reg["id"],
                client_id=reg["id"],
                scope=" ".join(scopes),
                jti=jti,
                iat=int(now),
                exp=int(exp),
                registration_type=reg["type"],
            ),
        )
        self.core.bus.publish(reg["id"], IdpTokenIssued(scope=" ".join(scopes), expires_at=iso(exp)))
        agent_events.publish(self.core.bus, event)
        return AccessToken(token, "Bearer", self._s.access_token_ttl, " ".join(scopes))

    async def verify_access(self, token: str) -> AccessGrant:
        """A bearer token presented to the site; refusals are 401s that say what to do."""
        try:
            typ, claims = self.signer.verify(token)
        except InvalidToken:
            raise INVALID_TOKEN("the access token is not valid") from None
        if typ == ASSERTION_TYP:
            raise INVALID_TOKEN(
                f"this is an identity assertion; exchange it at {self.urls.auth}/oauth2/token first",
            )
        if (
            typ != ACCESS_TOKEN_TYP
            or not isinstance(claims, AgentClaims)
            or claims.aud != self.urls.site
            or claims.iss != self.urls.auth
        ):
            raise INVALID_TOKEN("the access token was not issued for this site")
        if claims.exp <= self.core.clock.now():
            raise INVALID_TOKEN("the access token has expired; exchange the assertion again")
        row = await self.core.store.fetchone(
            "SELECT t.revoked_at, r.type, r.revoked_at AS registration_revoked_at FROM access_tokens t "
            "JOIN registrations r ON r.id = t.registration_id WHERE t.jti = ?",
            (claims.jti,),
        )
        if row is not None and row["registration_revoked_at"] is not None:
            raise INVALID_TOKEN("the registration was revoked; register again")
        if row is None or row["revoked_at"] is not None:
            raise INVALID_TOKEN("the access token was revoked; exchange the assertion again")
        scope = claims.scope if isinstance(claims.scope, str) else ""
        return AccessGrant(claims.jti, claims.sub, row["type"], scope.split(), float(claims.exp))

    async def revoke(self, token: str) -> None:
        """RFC 7009: revoke an access token or a refresh token; unknown tokens are quietly ignored."""
        now = self.core.clock.now()
        try:
            typ, claims = self.signer.verify(token)
        except InvalidToken:
            changed = await self.core.store.execute(
                "UPDATE refresh_tokens SET spent_at = ? WHERE hash = ? AND spent_at IS NULL",
                (now, secret_hash(token)),
            )
            if changed:
                self.core.bus.publish(None, IdpTokenRevoked(token_type="refresh_token"))
            return
        if typ == ACCESS_TOKEN_TYP and isinstance(claims, AgentClaims):  # a session's is the control plane's
            changed = await self.core.store.execute(
                "UPDATE access_tokens SET revoked_at = ? WHERE jti = ? AND revoked_at IS NULL",
                (now, claims.jti),
            )
            if changed:
                self.core.bus.publish(claims.sub, IdpTokenRevoked(token_type="access_token"))

    # --- registration -----------------------------------------------------------------------------

    async def register(self, body: Registration, ip: str) -> Registered | Refreshed:
        kind = body.type
        if kind == "refresh":
            return await self._refresh(body)
        if kind == "identity_assertion":
            if not self.core.switches["identity_assertion_registration"]:
                raise ISSUER_NOT_ENABLED(
                    "identity_assertion (ID-JAG) registration is not enabled here; use anonymous or service_auth",
                )
            return await self._register_idjag(body, ip)
        if kind not in IDENTITY_TYPES:
            raise _type_refused(kind)
        if kind == "anonymous" and not self.core.switches["anonymous_registration"]:
            raise ANONYMOUS_REGISTRATION_DISABLED("anonymous registration is disabled here")
        if kind == "service_auth" and not self.core.switches["service_auth_registration"]:
            raise SERVICE_AUTH_REGISTRATION_DISABLED("service_auth registration is disabled here")
        login_hint = None
        if kind == "service_auth":
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
                "client_ip, created_at) VALUES (?, ?, ?, 'registered', ?, ?, ?, ?)",
                (reg_id, kind, login_hint, secret_hash(claim_token), claim_exp, ip, now),
            )
            events = [await self._created(conn, reg_id)]
            if kind == "service_auth":
                attempt, started = await self._new_attempt(conn, reg_id, login_hint, now)
                events.append(started)
        given = self.assertion(reg_id, kind, None) if kind == "anonymous" else None
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

    async def _register_idjag(self, body: Registration, ip: str) -> Registered:
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
            await conn.execute("DELETE FROM idjag_jtis WHERE expires_at < ?", (now - SKEW,))
            seen = await conn.execute(
                "INSERT INTO idjag_jtis (iss, jti, expires_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (jag.iss, jag.jti, jag.exp),
            )
            if not seen.rowcount:
                refusal = INVALID_GRANT(f"the assertion's jti {jag.jti} was already used: an ID-JAG works once")
                self.core.bus.publish(jag.iss, IdpIdjagRefused(error=refusal.code, reason=refusal.message, ip=ip))
                raise refusal
            async with conn.execute(
                "SELECT u.id, u.email FROM identity_links l JOIN users u ON u.id = l.user_id "
                "WHERE l.iss = ? AND l.sub = ?",
                (jag.iss, jag.sub),
            ) as cur:
                linked = await cur.fetchone()
            email: str | None = linked["email"] if linked else None
            if linked is None and await self.user_id(conn, jag.email) is None:
                user = await self.ensure_user(conn, jag.email, now)  # a new person: linked to the identity at once
                await self.link_upstream(conn, jag.iss, jag.sub, user, now)
                email = jag.email
            await conn.execute(
                "INSERT INTO registrations (id, type, login_hint, status, claim_token_hash, claim_expires_at, "
                "claimed_email, claimed_at, client_ip, created_at, upstream_iss, upstream_sub) "
                "VALUES (?, 'identity_assertion', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    reg_id,
                    jag.email,
                    "claimed" if email else "registered",
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
                attempt, started = await self._new_attempt(conn, reg_id, jag.email, now)
                events.append(started)
        given = self.assertion(reg_id, "identity_assertion", email) if email is not None else None
        registered = IdpRegistered(
            type="identity_assertion", login_hint=jag.email, ip=ip, assertion_expires_at=given and given[1]
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
                    id=reg_id, type="identity_assertion", scopes=Scopes(post_claim=POST_CLAIM_SCOPES), claim=claim
                )
            )
        assertion, exp = given
        return Registered(
            id=reg_id,
            type="identity_assertion",
            identity=Grant(assertion=assertion, expires_at=iso(exp)),
            scopes=Scopes(post_claim=POST_CLAIM_SCOPES),
        )

    async def _created(self, conn: aiosqlite.Connection, reg_id: str) -> agent_events.Recorded:
        """`agent.registration.created` for a registration just written."""
        reg = await self.registration(conn, reg_id)
        assert reg is not None
        user = await self.user_id(conn, reg["claimed_email"]) if reg["claimed_email"] else None
        data = agent_events.registration_data(reg, user, self.core.clock.now())
        return await agent_events.record(conn, self.core, Kind.AGENT_REGISTRATION_CREATED, reg_id, data)

    async def _new_attempt(
        self, conn: aiosqlite.Connection, reg_id: str, login_hint: str | None, now: float
    ) -> tuple[Attempt, agent_events.Recorded]:
        """Mint a claim attempt; it supersedes the previous one (its link and code stop working)."""
        await conn.execute(
            "UPDATE claim_attempts SET state = 'superseded' WHERE registration_id = ? "
            "AND state IN ('pending', 'confirmed', 'denied')",
            (reg_id,),
        )
        token = self.core.ids.token("att_", 20)
        exp = now + self._s.attempt_ttl
        attempt_id = self.core.ids.ident("cla_")
        await conn.execute(
            "INSERT INTO claim_attempts (id, registration_id, token_hash, login_hint, state, expires_at, created_at) "
            "VALUES (?, ?, ?, ?, 'pending', ?, ?)",
            (attempt_id, reg_id, secret_hash(token), login_hint, exp, now),
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

    async def _refresh(self, body: Registration) -> Refreshed:
        value = body.refresh_token
        if not value:
            raise INVALID_REQUEST("type refresh needs refresh_token")
        now = self.core.clock.now()
        async with self.core.store.transaction() as conn:
            async with conn.execute(
                "SELECT t.*, r.status, r.revoked_at FROM refresh_tokens t JOIN registrations r "
                "ON r.id = t.registration_id WHERE t.hash = ?",
                (secret_hash(value),),
            ) as cur:
                row = await cur.fetchone()
            if row is not None and row["revoked_at"] is not None:
                raise INVALID_REFRESH_TOKEN("the registration was revoked; register again")
            if row is None or row["spent_at"] is not None or row["expires_at"] <= now:
                raise INVALID_REFRESH_TOKEN(
                    "the refresh token is unknown, expired or already used (refresh tokens rotate: "
                    "use the one the last refresh returned)",
                )
            await conn.execute("UPDATE refresh_tokens SET spent_at = ? WHERE hash = ?", (now, row["hash"]))
            new_value, new_exp = await self._new_refresh_token(conn, row["registration_id"], now)
            async with conn.execute("SELECT * FROM registrations WHERE id = ?", (row["registration_id"],)) as c:
                reg = await c.fetchone()
            if reg is None:  # deleted with its tokens (ON DELETE CASCADE): not reachable with a live token
                raise INVALID_REFRESH_TOKEN("the registration no longer exists")
            refreshed = await agent_events.record(
                conn, self.core, Kind.AGENT_REGISTRATION_REFRESHED, reg["id"], RegistrationRef(reg["id"])
            )
        claimed_email = reg["claimed_email"] if reg["status"] == "claimed" else None
        assertion, exp = self.assertion(reg["id"], reg["type"], claimed_email)
        self.core.bus.publish(reg["id"], IdpRefreshed(assertion_expires_at=exp))
        agent_events.publish(self.core.bus, refreshed)
        renewal = RefreshToken(new_value, iso(new_exp))
        return Refreshed(reg["id"], "refresh", Grant(assertion=assertion, expires_at=iso(exp), refresh_token=renewal))

    async def _new_refresh_token(self, conn: aiosqlite.Connection, reg_id: str, now: float) -> tuple[str, float]:
        value = self.core.ids.token("art_", 24)
        exp = now + self._s.refresh_token_ttl
        await conn.execute(
            "INSERT INTO refresh_tokens (hash, registration_id, expires_at) VALUES (?, ?, ?)",
            (secret_hash(value), reg_id, exp),
        )
        return value, exp

    # --- claim ceremony ---------------------------------------------------------------------------

    async def _registration_by_claim_token(self, conn: aiosqlite.Connection, token: str | None) -> sqlite3.Row:
        if not token:
            raise _claim_token_refused(token)
        async with conn.execute("SELECT * FROM registrations WHERE claim_token_hash = ?", (secret_hash(token),)) as cur:
            reg = await cur.fetchone()
        if reg is None:
            raise INVALID_CLAIM_TOKEN("the claim token is not one this provider issued")
        if reg["revoked_at"] is not None:
            raise CLAIM_REVOKED("this registration was revoked; register again")
        if reg["status"] == "claimed":
            raise ALREADY_CLAIMED("this registration is already claimed")
        if reg["claim_expires_at"] <= self.core.clock.now():
            raise CLAIM_EXPIRED("the claim window of this registration has closed")
        return reg

    async def start_claim(self, body: ClaimStart) -> ClaimStarted:
        if body.type != "service_auth":
            raise INVALID_REQUEST(
                'the claim method is type: "service_auth" (for anonymous registrations too)',
            )
        login_hint = body.login_hint
        if login_hint is not None and not valid_email(login_hint):
            raise INVALID_LOGIN_HINT("login_hint must be an e-mail address")
        now = self.core.clock.now()
        async with self.core.store.transaction() as conn:
            reg = await self._registration_by_claim_token(conn, body.claim_token)
            hint = (login_hint or reg["login_hint"] or "").strip() or None
            if reg["upstream_iss"] is not None and (hint or "").lower() != reg["login_hint"].lower():
                # its claim links the ID-JAG's upstream identity: only the account of the ID-JAG's e-mail may take it
                raise INVALID_LOGIN_HINT(f"this registration's claim is for {reg['login_hint']}, the ID-JAG's e-mail")
            attempt, started = await self._new_attempt(conn, reg["id"], hint, now)
        self.core.bus.publish(reg["id"], IdpClaimStarted(login_hint=hint))
        agent_events.publish(self.core.bus, started)
        return ClaimStarted(reg["id"], "service_auth", attempt)

    async def complete_claim(self, body: ClaimCompletion) -> Claimed:
        code = body.user_code
        if not _USER_CODE.match(code):
            raise INVALID_REQUEST("user_code must be the 6 digits shown on the claim page")
        now = self.core.clock.now()
        async with self.core.store.transaction() as conn:
            reg = await self._registration_by_claim_token(conn, body.claim_token)
            async with conn.execute(
                "SELECT * FROM claim_attempts WHERE registration_id = ? AND state != 'superseded' "
                "ORDER BY created_at DESC LIMIT 1",
                (reg["id"],),
            ) as cur:
                attempt = await cur.fetchone()
            if attempt is None:
                raise CLAIM_NOT_CONFIRMED("no claim was started; POST /agent/identity/claim")
            if attempt["state"] == "denied":
                raise CLAIM_DENIED("the person denied this claim")
            if attempt["state"] == "pending":
                if attempt["expires_at"] <= now:
                    raise CLAIM_EXPIRED("the claim link expired; start a new claim")
                raise CLAIM_NOT_CONFIRMED(
                    "the person has not confirmed yet: they sign in at the verification_uri and read you the code",
                )
            if attempt["code_expires_at"] <= now:
                raise USER_CODE_EXPIRED("the user code expired; start a new claim")
            if secret_hash(code) != attempt["user_code_hash"]:
                raise INVALID_USER_CODE("that is not the code shown on the claim page")
            email = attempt["email"]
            await conn.execute("UPDATE claim_attempts SET state = 'completed' WHERE id = ?", (attempt["id"],))
            await conn.execute(
                "UPDATE registrations SET status = 'claimed', claimed_email = ?, claimed_at = ?, updated_at = ? "
                "WHERE id = ?",
                (email, now, now, reg["id"]),
            )
            # The pre-claim tokens of an anonymous registration stop working; the new assertion replaces them.
            await conn.execute(
                "UPDATE access_tokens SET revoked_at = ? WHERE registration_id = ? AND revoked_at IS NULL",
                (now, reg["id"]),
            )
            refresh, refresh_exp = await self._new_refresh_token(conn, reg["id"], now)
            user_id = await self.ensure_user(conn, email, now)
            # The claim an ID-JAG's interaction_required started links the upstream identity to its own e-mail's
            # account only (its attempts are pinned to it; this is the last guard).
            if reg["upstream_iss"] is not None and email.lower() == (reg["login_hint"] or "").lower():
                await self.link_upstream(conn, reg["upstream_iss"], reg["upstream_sub"], user_id, now)
            completed = await agent_events.record(
                conn,
                self.core,
                Kind.AGENT_REGISTRATION_CLAIM_COMPLETED,
                reg["id"],
                ClaimCompletedData(
                    id=agent_events.claim_id(reg["id"]),
                    agent_registration_id=reg["id"],
                    completed_by_attempt_id=attempt["id"],
                    claimed_by=ClaimedBy(user_id, reg["trial_org_id"]),
                    completed_at=iso(now),
                    created_at=iso(reg["created_at"]),
                    updated_at=iso(now),
                ),
            )
        assertion, exp = self.assertion(reg["id"], reg["type"], email)
        self.core.bus.publish(reg["id"], IdpClaimed(email=email, assertion_expires_at=exp))
        agent_events.publish(self.core.bus, completed)
        renewal = RefreshToken(refresh, iso(refresh_exp))
        return Claimed(reg["id"], "claimed", Grant(assertion=assertion, expires_at=iso(exp), refresh_token=renewal))

    async def expire_unclaimed(self, now: float) -> None:
        """A due job: `agent.registration.expired`, once, for each registration whose claim window closed unclaimed
        (it still works as it did: expiry ends the window to claim it, as the registration's status says)."""
        due = "status = 'registered' AND claim_expires_at <= ? AND expired_at IS NULL AND revoked_at IS NULL"
        if await self.core.store.fetchone(f"SELECT 1 FROM registrations WHERE {due} LIMIT 1", (now,)) is None:
            return  # the usual answer, without a write transaction
        async with self.core.store.transaction() as conn:  # read again and written in one transaction
            async with conn.execute(f"SELECT id FROM registrations WHERE {due}", (now,)) as cur:
                ids = [str(r["id"]) for r in await cur.fetchall()]
            events = []
            for reg_id in ids:
                await conn.execute(
                    "UPDATE registrations SET expired_at = ?, updated_at = ? WHERE id = ?", (now, now, reg_id)
                )
                ref = RegistrationRef(reg_id)
                events.append(await agent_events.record(conn, self.core, Kind.AGENT_REGISTRATION_EXPIRED, reg_id, ref))
        agent_events.publish(self.core.bus, *events)

    # --- what trials do to a registration (this module is the one writer of registrations) ------

    @staticmethod
    async def registration(conn: aiosqlite.Connection, registration_id: str) -> sqlite3.Row | None:
        async with conn.execute("SELECT * FROM registrations WHERE id = ?", (registration_id,)) as cur:
            return await cur.fetchone()

    @staticmethod
    async def attach_trial(conn: aiosqlite.Connection, registration_id: str, org_id: str) -> None:
        """The registration got its one trial (kept after the trial is deleted)."""
        await conn.execute("UPDATE registrations SET trial_org_id = ? WHERE id = ?", (org_id, registration_id))

    @staticmethod
    async def claim_with_trial(conn: aiosqlite.Connection, registration_id: str, email: str, now: float) -> None:
        """A person claimed the trial the registration made: the registration is the person's too."""
        await conn.execute(
            "UPDATE registrations SET status = 'claimed', claimed_email = ?, claimed_at = ?, updated_at = ? "
            "WHERE id = ? AND status = 'registered'",
            (email, now, now, registration_id),
        )

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
        status = "claimed" if claimed_email else "registered"
        upstream_iss = self.upstream.issuer if upstream_sub else None
        token_hash = secret_hash(claim_token) if claim_token else None
        if token_hash is not None:
            async with conn.execute(
                "SELECT id FROM registrations WHERE claim_token_hash = ? AND id != ?", (token_hash, reg_id)
            ) as cur:
                if await cur.fetchone() is not None:
                    raise BAD_REQUEST("this claim token is already another registration's")
        if claimed_email:
            user = await self.ensure_user(conn, claimed_email, now)  # as a completed claim does
            if upstream_iss and upstream_sub:
                await self.link_upstream(conn, upstream_iss, upstream_sub, user, now)
        reg = await self.registration(conn, reg_id)
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
            window = reg["claim_expires_at"]
            if exact or window <= now:
                window = now + self._s.claim_ttl
            claimed_at = (reg["claimed_at"] or now) if claimed_email else None
            want = (
                kind,
                login_hint,
                status,
                claimed_email,
                claimed_at,
                trial_org_id,
                token_hash or reg["claim_token_hash"],
                window,
                upstream_iss,
                upstream_sub,
            )
            have = tuple(
                reg[c]
                for c in (
                    "type",
                    "login_hint",
                    "status",
                    "claimed_email",
                    "claimed_at",
                    "trial_org_id",
                    "claim_token_hash",
                    "claim_expires_at",
                    "upstream_iss",
                    "upstream_sub",
                )
            )
            if want != have:
                await conn.execute(
                    "UPDATE registrations SET type = ?, login_hint = ?, status = ?, claimed_email = ?, claimed_at = ?, "
                    "trial_org_id = ?, claim_token_hash = ?, claim_expires_at = ?, upstream_iss = ?, upstream_sub = ? "
                    "WHERE id = ?",
                    (*want, reg_id),
                )
                outcome = "updated"
        if refresh_token and await self._declare_refresh_token(conn, reg_id, refresh_token, now, exact):
            outcome = "updated" if outcome == "unchanged" else outcome
        return outcome

    async def _declare_refresh_token(
        self, conn: aiosqlite.Connection, reg_id: str, value: str, now: float, exact: bool
    ) -> bool:
        """A fixed refresh token, unspent (a declared state); whether anything changed."""
        async with conn.execute("SELECT * FROM refresh_tokens WHERE hash = ?", (secret_hash(value),)) as cur:
            row = await cur.fetchone()
        if row is not None and row["registration_id"] != reg_id:
            raise BAD_REQUEST("this refresh token is already another registration's")
        exp = now + self._s.refresh_token_ttl
        if row is not None and not exact and row["expires_at"] > now:
            exp = row["expires_at"]
        if row is not None and row["spent_at"] is None and row["expires_at"] == exp:
            return False
        await conn.execute(
            "INSERT INTO refresh_tokens (hash, registration_id, expires_at) VALUES (?, ?, ?) "
            "ON CONFLICT (hash) DO UPDATE SET expires_at = excluded.expires_at, spent_at = NULL",
            (secret_hash(value), reg_id, exp),
        )
        return True

    @staticmethod
    async def link_upstream(conn: aiosqlite.Connection, iss: str, sub: str, user_id: str, now: float) -> None:
        """The upstream identity (iss, sub) is this person's: its next ID-JAGs register their agents at once."""
        await conn.execute(
            "INSERT INTO identity_links (iss, sub, user_id, created_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (iss, sub) DO UPDATE SET user_id = excluded.user_id",
            (iss, sub, user_id, now),
        )

    @staticmethod
    async def user_id(conn: aiosqlite.Connection, email: str) -> str | None:
        async with conn.execute("SELECT id FROM users WHERE email = ?", (email,)) as cur:
            row = await cur.fetchone()
        return str(row["id"]) if row else None

    async def ensure_user(self, conn: aiosqlite.Connection, email: str, now: float) -> str:
        async with conn.execute("SELECT id FROM users WHERE email = ?", (email,)) as cur:
            row = await cur.fetchone()
        if row:
            return str(row["id"])
        user_id = self.core.ids.ident("user_")
        await conn.execute("INSERT INTO users (id, email, created_at) VALUES (?, ?, ?)", (user_id, email, now))
        self.core.bus.publish(user_id, IdpUserCreated(email=email))
        return user_id

    # --- the person's side ------------------------------------------------------------------------

    async def attempt_for(self, *, token: str | None = None, registration: str | None = None) -> sqlite3.Row:
        """The current attempt, by the token of its verification URI or by registration id."""
        if token:
            where, arg = "a.token_hash = ?", secret_hash(token)
        elif registration:
            where, arg = "a.registration_id = ? AND a.state != 'superseded'", registration
        else:
            raise BAD_REQUEST("name the claim: its verification_uri or its registration id")
        row = await self.core.store.fetchone(
            f"SELECT {ATTEMPT_COLUMNS} FROM claim_attempts a "
            f"JOIN registrations r ON r.id = a.registration_id WHERE {where} ORDER BY a.created_at DESC LIMIT 1",
            (arg,),
        )
        if row is None:
            raise NOT_FOUND("no pending claim matches")
        return row

    async def decide(self, attempt: sqlite3.Row, email: str, approve: bool) -> str | None:
        """The person signed in as `email` approves (→ the user code, shown once) or denies the claim. Denying
        needs no e-mail: a person asked about an agent they do not know must not have to sign in to refuse it."""
        email = email.strip()
        if (approve or email) and not valid_email(email):
            raise BAD_REQUEST("sign in with an e-mail address")
        now = self.core.clock.now()
        async with self.core.store.transaction() as conn:
            # The attempt as it is now, in this transaction: a newer claim or a revocation committed since the page
            # read it closes it.
            async with conn.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM claim_attempts a JOIN registrations r ON r.id = a.registration_id "
                "WHERE a.id = ?",
                (attempt["id"],),
            ) as cur:
                current = await cur.fetchone()
            if current is None:  # its registration was deleted meanwhile
                raise GONE("this claim is no more: its agent was deleted")
            code = await self.settle(conn, current, email, approve, now)
        decided = IdpClaimConfirmed if approve else IdpClaimDenied
        self.core.bus.publish(attempt["registration_id"], decided(email=email or None))
        return code

    async def settle(
        self, conn: aiosqlite.Connection, attempt: sqlite3.Row, email: str, approve: bool, now: float
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
            await self.ensure_user(conn, email, now)
        await conn.execute(
            "UPDATE claim_attempts SET state = ?, email = ?, user_code_hash = ?, code_expires_at = ? WHERE id = ?",
            (
                "confirmed" if approve else "denied",
                email or None,
                secret_hash(code) if code else None,
                now + self._s.attempt_ttl if code else None,
                attempt["id"],
            ),
        )
        return code


@dataclass(frozen=True)
class Closed:
    """Why a claim link takes no decision any more: the status of a refused decision, a title and a text."""

    status: int
    title: str
    text: str


def hint_refusal(attempt: sqlite3.Row, email: str) -> ApiError | None:
    """A claim for a named person (its login_hint) is decided only as that person (e-mail, in any case)."""
    hint = attempt["login_hint"]
    if hint and email and hint.lower() != email.strip().lower():
        return FORBIDDEN(f"this claim is for {hint}; sign in with that account")
    return None


# An attempt's row as why_closed reads it (its registration's type, status and revocation with it).
ATTEMPT_COLUMNS = (
    "a.*, r.type AS registration_type, r.status AS registration_status, r.revoked_at AS registration_revoked_at"
)


def why_closed(attempt: sqlite3.Row, now: float, readable: Callable[[float], str] = iso) -> Closed | None:
    """Whether a claim link still takes a decision. It works once: approved or denied, it is used."""
    if attempt["registration_revoked_at"] is not None:
        return Closed(410, "This agent was revoked", "The service revoked this agent; it must register again.")
    if attempt["state"] == "superseded":
        return Closed(
            410, "This claim link was replaced", "The agent started a newer claim: use the newest link it gives you."
        )
    if attempt["state"] == "completed" or attempt["registration_status"] == "claimed":
        return Closed(409, "This claim link was already used", "The agent is already linked to an account.")
    if attempt["state"] in ("confirmed", "denied"):
        done = "approved" if attempt["state"] == "confirmed" else "denied"
        who = f" as {attempt['email']}" if attempt["email"] else ""
        again = (
            " Its user code was shown once; the agent starts a new claim for a new one." if done == "approved" else ""
        )
        return Closed(409, "This claim link was already used", f"It was {done}{who}; it works once.{again}")
    if attempt["expires_at"] <= now:
        return Closed(410, "This claim link expired", f"It was valid until {readable(attempt['expires_at'])}.")
    return None


# --- read-only views for the operator (`/_emulator`): no hash and no secret ever leaves here -------------


def claim_state(state: str, expires_at: float, code_expires_at: float | None, now: float) -> str:
    """A claim attempt's state as a person reads it: a pending link, or a code shown but not yet used, whose
    time has passed is `lapsed` (the agent must start a new claim); otherwise the stored state."""
    if state == "pending" and expires_at <= now:
        return "lapsed"
    if state == "confirmed" and (code_expires_at or expires_at) <= now:
        return "lapsed"
    return state


@dataclass(frozen=True)
class LatestClaim:
    """A registration's newest claim attempt: its state (`pending`, `confirmed`, `denied`, `completed`, `lapsed`),
    the e-mail it was decided as, and when its link lapses."""

    state: str
    email: str | None
    expires_at: float


async def latest_claims(db: Store, now: float) -> dict[str, LatestClaim]:
    """Each registration's newest claim attempt (a superseded one never is)."""
    rows = await db.fetchall(
        "SELECT a.registration_id, a.state, a.email, a.expires_at, a.code_expires_at FROM claim_attempts a "
        "WHERE a.state != 'superseded' ORDER BY a.created_at"
    )
    return {
        r["registration_id"]: LatestClaim(
            claim_state(r["state"], r["expires_at"], r["code_expires_at"], now), r["email"], r["expires_at"]
        )
        for r in rows
    }


def session_state(revoked_at: float | None, expires_at: float, now: float) -> str:
    """A `pxt login` session: `revoked` (logged out), `expired` (its refresh token's time passed) or `active`."""
    if revoked_at is not None:
        return "revoked"
    return "expired" if expires_at <= now else "active"


@dataclass(frozen=True)
class SessionRecord:
    """A `pxt login` session (its refresh token's expiry is the session's); never a token or its hash."""

    id: str
    org: str | None  # its organization's slug (its id once the organization is gone)
    created_at: float
    expires_at: float
    revoked_at: float | None
    state: str  # "active" | "expired" | "revoked"


@dataclass(frozen=True)
class UserOverview:
    id: str
    email: str
    created_at: float
    orgs: list[tuple[str, str]] = field(default_factory=list)  # (organization slug, role)
    sessions: list[SessionRecord] = field(default_factory=list)


async def users_overview(db: Store, now: float) -> list[UserOverview]:
    """Every person who signed in: their organizations and roles, and their `pxt login` sessions."""
    users = await db.fetchall("SELECT id, email, created_at FROM users ORDER BY created_at, email")
    members = await db.fetchall(
        "SELECT m.user_id, o.slug, m.role FROM org_members m JOIN orgs o ON o.id = m.org_id ORDER BY o.slug"
    )
    sessions = await db.fetchall(
        "SELECT s.id, s.user_id, (SELECT slug FROM orgs o WHERE o.id = s.org_id) AS org, s.org_id, "
        "s.refresh_expires_at, s.created_at, s.revoked_at FROM sessions s ORDER BY s.created_at"
    )
    out = {u["id"]: UserOverview(u["id"], u["email"], u["created_at"]) for u in users}
    for m in members:
        if m["user_id"] in out:
            out[m["user_id"]].orgs.append((m["slug"], m["role"]))
    for s in sessions:
        if s["user_id"] in out:
            out[s["user_id"]].sessions.append(
                SessionRecord(
                    s["id"],
                    s["org"] or s["org_id"],
                    s["created_at"],
                    s["refresh_expires_at"],
                    s["revoked_at"],
                    session_state(s["revoked_at"], s["refresh_expires_at"], now),
                )
            )
    return list(out.values())
