"""Credentials an agent holds: identity assertions (signed, not stored), access tokens (`access_tokens`), refresh
tokens (`refresh_tokens`, stored as hashes only) and the ID-JAGs already used (`idjag_jtis`). This module is the one
writer of those three tables. Every time is the emulator's clock."""

from __future__ import annotations

import sqlite3

import aiosqlite
import msgspec
from msgspec import UNSET

from emulator.config import Settings
from emulator.core.clock import iso
from emulator.core.context import Core
from emulator.core.errors import (
    BAD_REQUEST,
    INVALID_GRANT,
    INVALID_REFRESH_TOKEN,
    INVALID_REQUEST,
    INVALID_SCOPE,
    INVALID_TOKEN,
)
from emulator.core.ids import secret_hash
from emulator.core.kinds import Kind
from emulator.core.payloads import IdpRefreshed, IdpTokenIssued, IdpTokenRevoked
from emulator.core.store import fetch_one, record
from emulator.identity import agent_events
from emulator.identity.agent_events import AccessTokenIssued, CredentialIssuedData, RegistrationRef
from emulator.identity.idjag import SKEW
from emulator.identity.records import HeldRefreshToken, RefreshTokenRecord, RegistrationRecord, TokenCheck
from emulator.identity.signing import ACCESS_TOKEN_TYP, ASSERTION_TYP, AgentClaims, InvalidToken, PersonClaims, Signer
from emulator.identity.states import RegStatus
from emulator.identity.wire import (
    POST_CLAIM_SCOPES,
    PRE_CLAIM_SCOPES,
    AccessGrant,
    AccessToken,
    Grant,
    Refreshed,
    RefreshToken,
    Registration,
    Urls,
)


class Tokens:
    def __init__(self, core: Core, signer: Signer, urls: Urls) -> None:
        self.core = core
        self.signer = signer
        self.urls = urls

    @property
    def _s(self) -> Settings:
        return self.core.settings

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

        def write(db: sqlite3.Connection) -> tuple[RegistrationRecord, list[str], agent_events.Recorded]:
            # The registration's state and the token's record in one transaction: a claim or a deletion
            # committed in between cannot leave a token of the state before it.
            row = db.execute("SELECT * FROM registrations WHERE id = ?", (claims.sub,)).fetchone()
            if row is None:
                raise INVALID_GRANT("the registration no longer exists; register again")
            reg = record(row, RegistrationRecord)
            if reg.revoked_at is not None:
                raise INVALID_GRANT("the registration was revoked; register again")
            if reg.status == RegStatus.CLAIMED and claims.email is UNSET:
                raise INVALID_GRANT("this registration was claimed; use the assertion the claim returned")
            granted = POST_CLAIM_SCOPES if reg.status == RegStatus.CLAIMED else PRE_CLAIM_SCOPES
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
                (jti, reg.id, " ".join(scopes), now, exp),
            )
            issued = CredentialIssuedData(
                id=jti,
                agent_registration_id=reg.id,
                detail=AccessTokenIssued(jti, iso(exp)),
                created_at=iso(now),
                updated_at=iso(now),
            )
            event = agent_events.record_sync(db, self.core, Kind.AGENT_REGISTRATION_CREDENTIAL_ISSUED, reg.id, issued)
            return reg, scopes, event

        reg, scopes, event = await self.core.store.write(write)
        token = self.signer.sign(
            ACCESS_TOKEN_TYP,
            AgentClaims(
                iss=self.urls.auth,
                aud=self.urls.site,
                sub=reg.id,
                client_id=reg.id,
                scope=" ".join(scopes),
                jti=jti,
                iat=int(now),
                exp=int(exp),
                registration_type=reg.type,
            ),
        )
        self.core.bus.publish(reg.id, IdpTokenIssued(scope=" ".join(scopes), expires_at=iso(exp)))
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
        if typ == ACCESS_TOKEN_TYP and isinstance(claims, PersonClaims):
            raise INVALID_TOKEN(
                "this is a person's access token (the authorization code grant); this endpoint takes an agent's: "
                "register at /agent/identity and exchange its assertion at /oauth2/token",
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
        row = await fetch_one(
            self.core.store,
            TokenCheck,
            "SELECT t.revoked_at, r.type, r.revoked_at AS registration_revoked_at FROM access_tokens t "
            "JOIN registrations r ON r.id = t.registration_id WHERE t.jti = ?",
            (claims.jti,),
        )
        if row is not None and row.registration_revoked_at is not None:
            raise INVALID_TOKEN("the registration was revoked; register again")
        if row is None or row.revoked_at is not None:
            raise INVALID_TOKEN("the access token was revoked; exchange the assertion again")
        scope = claims.scope if isinstance(claims.scope, str) else ""
        return AccessGrant(claims.jti, claims.sub, row.type, scope.split(), float(claims.exp))

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

    async def refresh(self, body: Registration) -> Refreshed:
        value = body.refresh_token
        if not value:
            raise INVALID_REQUEST("type refresh needs refresh_token")
        now = self.core.clock.now()
        async with self.core.store.transaction() as conn:
            row = await fetch_one(
                conn,
                HeldRefreshToken,
                "SELECT t.*, r.status, r.revoked_at FROM refresh_tokens t JOIN registrations r "
                "ON r.id = t.registration_id WHERE t.hash = ?",
                (secret_hash(value),),
            )
            if row is not None and row.revoked_at is not None:
                raise INVALID_REFRESH_TOKEN("the registration was revoked; register again")
            if row is None or row.spent_at is not None or row.expires_at <= now:
                raise INVALID_REFRESH_TOKEN(
                    "the refresh token is unknown, expired or already used (refresh tokens rotate: "
                    "use the one the last refresh returned)",
                )
            await conn.execute("UPDATE refresh_tokens SET spent_at = ? WHERE hash = ?", (now, row.hash))
            new_value, new_exp = await self.new_refresh_token(conn, row.registration_id, now)
            reg = await fetch_one(
                conn, RegistrationRecord, "SELECT * FROM registrations WHERE id = ?", (row.registration_id,)
            )
            if reg is None:  # deleted with its tokens (ON DELETE CASCADE): not reachable with a live token
                raise INVALID_REFRESH_TOKEN("the registration no longer exists")
            refreshed = await agent_events.record(
                conn, self.core, Kind.AGENT_REGISTRATION_REFRESHED, reg.id, RegistrationRef(reg.id)
            )
        claimed_email = reg.claimed_email if reg.status == RegStatus.CLAIMED else None
        assertion, exp = self.assertion(reg.id, reg.type, claimed_email)
        self.core.bus.publish(reg.id, IdpRefreshed(assertion_expires_at=exp))
        agent_events.publish(self.core.bus, refreshed)
        renewal = RefreshToken(new_value, iso(new_exp))
        return Refreshed(reg.id, "refresh", Grant(assertion=assertion, expires_at=iso(exp), refresh_token=renewal))

    async def new_refresh_token(self, conn: aiosqlite.Connection, reg_id: str, now: float) -> tuple[str, float]:
        value = self.core.ids.token("art_", 24)
        exp = now + self._s.refresh_token_ttl
        await conn.execute(
            "INSERT INTO refresh_tokens (hash, registration_id, expires_at) VALUES (?, ?, ?)",
            (secret_hash(value), reg_id, exp),
        )
        return value, exp

    async def declare_refresh_token(
        self, conn: aiosqlite.Connection, reg_id: str, value: str, now: float, exact: bool
    ) -> bool:
        """A fixed refresh token, unspent (a declared state); whether anything changed."""
        row = await fetch_one(
            conn, RefreshTokenRecord, "SELECT * FROM refresh_tokens WHERE hash = ?", (secret_hash(value),)
        )
        if row is not None and row.registration_id != reg_id:
            raise BAD_REQUEST("this refresh token is already another registration's")
        exp = now + self._s.refresh_token_ttl
        if row is not None and not exact and row.expires_at > now:
            exp = row.expires_at
        if row is not None and row.spent_at is None and row.expires_at == exp:
            return False
        await conn.execute(
            "INSERT INTO refresh_tokens (hash, registration_id, expires_at) VALUES (?, ?, ?) "
            "ON CONFLICT (hash) DO UPDATE SET expires_at = excluded.expires_at, spent_at = NULL",
            (secret_hash(value), reg_id, exp),
        )
        return True


async def revoke_access(conn: aiosqlite.Connection, reg_id: str, now: float) -> None:
    """Every live access token of the registration stops working (a claim replaces them; a revocation ends them)."""
    await conn.execute(
        "UPDATE access_tokens SET revoked_at = ? WHERE registration_id = ? AND revoked_at IS NULL",
        (now, reg_id),
    )


async def spend_refresh(conn: aiosqlite.Connection, reg_id: str, now: float) -> None:
    """Every unspent refresh token of the registration is spent (a revocation)."""
    await conn.execute(
        "UPDATE refresh_tokens SET spent_at = ? WHERE registration_id = ? AND spent_at IS NULL",
        (now, reg_id),
    )


async def use_jti(conn: aiosqlite.Connection, iss: str, jti: str, expires_at: float, now: float) -> bool:
    """An ID-JAG works once: whether its (iss, jti) is new (and now kept until it expires). Lapsed ones go first."""
    await conn.execute("DELETE FROM idjag_jtis WHERE expires_at < ?", (now - SKEW,))
    seen = await conn.execute(
        "INSERT INTO idjag_jtis (iss, jti, expires_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        (iss, jti, expires_at),
    )
    return bool(seen.rowcount)
