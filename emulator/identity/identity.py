"""The identity provider as its callers hold it: one object over the modules that each write their tables.

`registrations.py` (registrations: register, the ID-JAG registration, the claim's completion, expiry, declared
states), `claims.py` (claim_attempts: start a claim, the person's decision), `tokens.py` (access_tokens,
refresh_tokens, idjag_jtis: assertions, the jwt-bearer exchange, the site's check, revocation, refresh) and
`users.py` (users, identity_links), `authcodes.py` (authorization_codes, person_refresh_tokens: a person's browser
sign-in for an OAuth client). The wire types are `wire.py`'s, the operator's views `views.py`'s.
"""

from __future__ import annotations

import aiosqlite

from emulator.core.context import Core
from emulator.identity.authcodes import AuthCodes
from emulator.identity.claims import Claims
from emulator.identity.idjag import Upstream
from emulator.identity.records import OpenAttempt
from emulator.identity.registrations import Registrations
from emulator.identity.signing import Signer
from emulator.identity.states import RegType
from emulator.identity.tokens import Tokens
from emulator.identity.users import Users
from emulator.identity.wire import (
    IDENTITY_TYPES,
    AccessGrant,
    AccessToken,
    ClaimCompletion,
    Claimed,
    ClaimStart,
    ClaimStarted,
    Refreshed,
    Registered,
    Registration,
    Urls,
)


class Identity:
    def __init__(self, core: Core, signer: Signer, urls: Urls, upstream: Upstream | None = None) -> None:
        self.core = core
        self.signer = signer
        self.urls = urls
        self.upstream = upstream or Upstream(core.settings.state_dir, urls.auth, core.ids)
        self.users = Users(core)
        self.tokens = Tokens(core, signer, urls)
        self.claims = Claims(core, urls, self.users)
        self.registrations = Registrations(core, urls, self.upstream, self.tokens, self.claims, self.users)
        self.authcodes = AuthCodes(core, signer, urls, self.users, self.upstream)

    def identity_types(self) -> list[str]:
        """The registration types discovery advertises: ID-JAG only while its switch is on."""
        return (
            [*IDENTITY_TYPES, RegType.IDENTITY_ASSERTION]
            if self.core.switches["identity_assertion_registration"]
            else IDENTITY_TYPES
        )

    # --- the agent's side ---------------------------------------------------------------------------

    async def register(self, body: Registration, ip: str) -> Registered | Refreshed:
        return await self.registrations.register(body, ip)

    async def start_claim(self, body: ClaimStart) -> ClaimStarted:
        return await self.claims.start_claim(body)

    async def complete_claim(self, body: ClaimCompletion) -> Claimed:
        return await self.registrations.complete_claim(body)

    async def exchange(self, assertion: str, scope: str | None) -> AccessToken:
        return await self.tokens.exchange(assertion, scope)

    async def verify_access(self, token: str) -> AccessGrant:
        return await self.tokens.verify_access(token)

    async def revoke(self, token: str) -> None:
        await self.tokens.revoke(token)

    async def expire_unclaimed(self, now: float) -> None:
        await self.registrations.expire_unclaimed(now)

    # --- the person's side --------------------------------------------------------------------------

    async def attempt_for(self, *, token: str | None = None, registration: str | None = None) -> OpenAttempt:
        return await self.claims.attempt_for(token=token, registration=registration)

    async def decide(self, attempt: OpenAttempt, email: str, approve: bool) -> str | None:
        return await self.claims.decide(attempt, email, approve)

    async def ensure_user(self, conn: aiosqlite.Connection, email: str, now: float) -> str:
        return await self.users.ensure_user(conn, email, now)
