"""`pxt login`: a device-authorization sign-in (RFC 8628 style, the WorkOS user-management shape).

The control plane's `/.well-known/pixeltable-auth` names this origin as `workos_api`. The client
starts with `POST /user_management/authorize/device`, shows the person the user code and the
verification page, and polls `POST /user_management/authenticate` until the person approves (page, or
`emulator approve-login`). The session it gets is an ES256 access token (audience: the control plane;
claims `sub`, `email`, `org_id`, `sid`, `exp` on the emulator's clock) and a rotating refresh token;
a refresh with `organization_id` rescopes the session to another organization of the person.
"""

from __future__ import annotations

from typing import Any

import msgspec

from emulator.core.errors import (
    ACCESS_DENIED,
    AUTHORIZATION_PENDING,
    BAD_REQUEST,
    EXPIRED_TOKEN,
    GONE,
    INVALID_GRANT,
    NOT_FOUND,
)
from emulator.core.ids import secret_hash
from emulator.core.payloads import IdpLoginApproved, IdpLoginDenied, IdpLoginStarted, IdpSession, IdpTokenRevoked
from emulator.hosted import orgs
from emulator.hosted.states import LoginState
from emulator.identity.identity import Identity
from emulator.identity.signing import ACCESS_TOKEN_TYP, InvalidToken, SessionClaims
from emulator.identity.wire import valid_email

CLIENT_ID = "client_pxt_emulator"
DEVICE_CODE_TTL = 600
POLL_INTERVAL = 2
SESSION_TOKEN_TTL = 3600
SESSION_REFRESH_TTL = 30 * 86400
_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"  # no vowels: no words


class DeviceCode(msgspec.Struct):
    """`POST /user_management/authorize/device`'s answer: what pxt shows the person, and how often it polls."""

    device_code: str
    user_code: str
    verification_uri: str
    verification_uri_complete: str
    interval: int
    expires_in: int


class SessionUser(msgspec.Struct):
    id: str
    email: str


class Session(msgspec.Struct):
    """A signed-in session's tokens (`POST /user_management/authenticate`), scoped to an organization or none."""

    access_token: str
    refresh_token: str
    user: SessionUser
    organization_id: str | None


class Logins:
    def __init__(self, identity: Identity) -> None:
        self.identity = identity
        self.core = identity.core

    def _user_code(self) -> str:
        n = int(self.core.ids.digits(12))
        chars = [_CODE_ALPHABET[(n // 20**i) % 20] for i in range(8)]
        return "".join(chars[:4]) + "-" + "".join(chars[4:])

    async def start(self, client_id: str) -> DeviceCode:
        now = self.core.clock.now()
        device_code = self.core.ids.token("dev_", 24)
        user_code = self._user_code()
        await self.core.store.execute(
            "INSERT INTO device_logins (device_code_hash, user_code, client_id, state, expires_at, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (secret_hash(device_code), user_code, client_id, LoginState.PENDING, now + DEVICE_CODE_TTL, now),
        )
        uri = f"{self.identity.urls.auth}/device"
        self.core.bus.publish(user_code, IdpLoginStarted())
        return DeviceCode(device_code, user_code, uri, f"{uri}?user_code={user_code}", POLL_INTERVAL, DEVICE_CODE_TTL)

    async def lookup(self, user_code: str) -> Any:
        """The sign-in shown with `user_code` (any state), or None."""
        return await self.core.store.fetchone(
            "SELECT * FROM device_logins WHERE user_code = ?", (user_code.strip().upper(),)
        )

    async def decide(self, user_code: str, email: str, approve: bool) -> None:
        """The person, signed in as `email`, approves or denies the sign-in shown with `user_code` (denying needs
        no e-mail)."""
        email = email.strip()
        if (approve or email) and not valid_email(email):
            raise BAD_REQUEST("sign in with an e-mail address")
        row = await self.core.store.fetchone("SELECT * FROM device_logins WHERE user_code = ?", (user_code.upper(),))
        if row is None or row["state"] != LoginState.PENDING:
            raise NOT_FOUND(f"no sign-in is waiting for the code {user_code}")
        if row["expires_at"] <= self.core.clock.now():
            raise GONE("this sign-in code has expired; run pxt login again")
        async with self.core.store.transaction() as conn:
            if email:
                await self.identity.ensure_user(conn, email, self.core.clock.now())
            await conn.execute(
                "UPDATE device_logins SET state = ?, email = ? WHERE user_code = ?",
                (LoginState.APPROVED if approve else LoginState.DENIED, email or None, row["user_code"]),
            )
        decided = IdpLoginApproved if approve else IdpLoginDenied
        self.core.bus.publish(row["user_code"], decided(email=email or None))

    async def poll(self, device_code: str, client_id: str) -> Session:
        row = await self.core.store.fetchone(
            "SELECT * FROM device_logins WHERE device_code_hash = ?", (secret_hash(device_code),)
        )
        if row is None or row["client_id"] != client_id:
            raise INVALID_GRANT("unknown device code")
        if row["state"] == LoginState.REDEEMED:
            raise INVALID_GRANT("this device code was already used")
        if row["expires_at"] <= self.core.clock.now():
            raise EXPIRED_TOKEN("the sign-in code expired; run pxt login again")
        if row["state"] == LoginState.DENIED:
            raise ACCESS_DENIED("the person denied the sign-in")
        if row["state"] == LoginState.PENDING:
            raise AUTHORIZATION_PENDING("waiting for the person to approve the sign-in")
        await self.core.store.execute(
            "UPDATE device_logins SET state = ? WHERE device_code_hash = ?",
            (LoginState.REDEEMED, row["device_code_hash"]),
        )
        user = await self.core.store.fetchone("SELECT * FROM users WHERE email = ?", (row["email"],))
        if user is None:  # an approval always creates the person first
            raise INVALID_GRANT("the person who approved this sign-in no longer exists")
        member_of = await orgs.memberships(self.core.store, user["id"])
        org_id = member_of[0] if len(member_of) == 1 else None
        return await self._session(user, org_id, None)

    async def refresh(self, refresh_token: str, client_id: str, organization_id: str | None) -> Session:
        now = self.core.clock.now()
        row = await self.core.store.fetchone(
            "SELECT s.*, u.email FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.refresh_token_hash = ?",
            (secret_hash(refresh_token),),
        )
        if row is None or row["revoked_at"] is not None or row["refresh_expires_at"] <= now:
            raise INVALID_GRANT("the session is not valid; run pxt login again")
        org_id = row["org_id"]
        if organization_id:
            if organization_id not in await orgs.memberships(self.core.store, row["user_id"]):
                raise INVALID_GRANT(f"{row['email']} is not a member of {organization_id}")
            org_id = organization_id
        user = await self.core.store.fetchone("SELECT * FROM users WHERE id = ?", (row["user_id"],))
        return await self._session(user, org_id, row["id"])

    async def revoke(self, token: str) -> bool:
        """RFC 7009 for `pxt login` sessions: a session's access token or refresh token ends the whole session
        (its tokens stop working at once: the control plane checks the session on every call)."""
        now = self.core.clock.now()
        try:
            typ, claims = self.identity.signer.verify(token)
        except InvalidToken:
            sid = None
        else:
            sid = claims.sid if typ == ACCESS_TOKEN_TYP and isinstance(claims, SessionClaims) else None
        if sid is not None:
            where, arg = "id = ?", str(sid)
        else:
            where, arg = "refresh_token_hash = ?", secret_hash(token)
        row = await self.core.store.fetchone(f"SELECT id FROM sessions WHERE {where} AND revoked_at IS NULL", (arg,))
        if row is None:
            return False
        await self.core.store.execute("UPDATE sessions SET revoked_at = ? WHERE id = ?", (now, row["id"]))
        self.core.bus.publish(row["id"], IdpTokenRevoked(token_type="session"))
        return True

    async def _session(self, user: Any, org_id: str | None, sid: str | None) -> Session:
        """Issue an access token and a fresh refresh token (the old one, if any, is spent)."""
        now = self.core.clock.now()
        refresh = self.core.ids.token("rt_", 24)
        async with self.core.store.transaction() as conn:
            if sid is None:
                sid = self.core.ids.ident("session_")
                await conn.execute(
                    "INSERT INTO sessions (id, user_id, org_id, refresh_token_hash, refresh_expires_at, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (sid, user["id"], org_id, secret_hash(refresh), now + SESSION_REFRESH_TTL, now),
                )
            else:
                await conn.execute(
                    "UPDATE sessions SET org_id = ?, refresh_token_hash = ?, refresh_expires_at = ? WHERE id = ?",
                    (org_id, secret_hash(refresh), now + SESSION_REFRESH_TTL, sid),
                )
        token = self.identity.signer.sign(
            ACCESS_TOKEN_TYP,
            SessionClaims(
                iss=self.identity.urls.auth,
                aud=self.identity.urls.api,
                sub=user["id"],
                email=user["email"],
                org_id=org_id,
                sid=sid,
                iat=int(now),
                exp=int(now + SESSION_TOKEN_TTL),
            ),
        )
        self.core.bus.publish(sid, IdpSession(email=user["email"], org_id=org_id))
        return Session(token, refresh, SessionUser(user["id"], user["email"]), org_id)
