"""The service side of agent registration: what a service that accepts these agents asks the identity provider
about them (WorkOS's agents API, `/agents/*`, as the `workos` SDK's `client.agents` calls it): validate an agent's
credential, link a claim attempt to one of its own users, read and revoke a registration. No web framework here.

Revocation is this module's rule: a revoked registration's assertions, access tokens, refresh tokens, claim links and
trial key stop working on every origin (each origin's one credential check reads `registrations.revoked_at`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

import aiosqlite
import msgspec

from emulator.core.clock import iso
from emulator.core.context import Core
from emulator.core.errors import (
    ALREADY_CLAIMED,
    BAD_REQUEST,
    CLAIM_EXPIRED,
    CLAIM_REVOKED,
    CONFLICT,
    ENTITY_NOT_FOUND,
    FORBIDDEN,
    ApiError,
)
from emulator.core.ids import secret_hash
from emulator.core.kinds import Kind
from emulator.core.payloads import IdpClaimConfirmed, IdpRevoked
from emulator.core.store import Db, fetch_one, record
from emulator.identity import agent_events, registrations, tokens, users
from emulator.identity.agent_events import RegistrationRef, Status, agent_identity_id, claim_id, status_of
from emulator.identity.claims import hint_refusal, open_attempt, why_closed
from emulator.identity.identity import Identity
from emulator.identity.records import AttemptRecord, OpenAttempt, RegistrationRecord, UserRef
from emulator.identity.states import AttemptState, RegStatus
from emulator.identity.wire import valid_email

OPERATOR = "operator"  # who revoked, when it was not a service key
MAX_EXTERNAL_ID = 255

# --- what it takes (decoded whole, strictly, before any rule runs) ------------------------------------------------


class CredentialCheck(msgspec.Struct, forbid_unknown_fields=True):
    """POST /agents/credentials/validate."""

    type: Literal["api_key", "access_token"]
    credential: str
    audience: str | None = None


class ExternalUser(msgspec.Struct, forbid_unknown_fields=True):
    email: str
    external_id: str


class AttemptLink(msgspec.Struct, forbid_unknown_fields=True):
    """PATCH /agents/claims/attempts: the service approves a claim attempt for one of its users."""

    type: Literal["link_external_user"]
    claim_attempt_token: str
    user: ExternalUser
    organization_id: str | None = None


# --- what it answers (the SDK's models: AgentCredentialValidation, ClaimViewResponse, AgentRegistration) -----------


class CredentialValidation(msgspec.Struct):
    valid: bool
    registration_id: str | None
    expires_at: str | None


INVALID = CredentialValidation(False, None, None)


class TrialKey(msgspec.Struct, frozen=True):
    """What the control plane says of a live API key an agent registration was given (its trial's): the
    registration, and when the trial lapses while unclaimed (None once claimed)."""

    registration_id: str
    expires_at: float | None


# The control plane's own check of a key presented as a credential (hosted/keys.trial_key), handed in by the
# composition root: the identity package sits below the hosted platform and imports none of it.
TrialKeys = Callable[[Db, str], Awaitable[TrialKey | None]]


class OrganizationRef(msgspec.Struct):
    id: str
    name: str


class ClaimView(msgspec.Struct):
    id: str  # the registration's
    status: Status
    user_code: str
    organizations: list[OrganizationRef]


class AgentIdentityView(msgspec.Struct):
    id: str
    userland_user_id: str | None  # the person who claimed it
    created_at: str
    updated_at: str


class ClaimCompletionView(msgspec.Struct):
    id: str
    created_at: str
    updated_at: str
    expires_at: str
    claimed_at: str


class RegistrationClaimView(msgspec.Struct):
    id: str
    claim_completion: ClaimCompletionView | None
    created_at: str
    updated_at: str
    expires_at: str


class AgentRegistrationView(msgspec.Struct, kw_only=True):
    object: Literal["agent_registration"] = "agent_registration"
    id: str
    agent_identity: AgentIdentityView
    organization_id: str | None  # its trial's organization; none before it made one (WorkOS always has one)
    status: Status
    revoked_at: str | None
    kind: str
    claim: RegistrationClaimView | None
    created_at: str
    updated_at: str


def _closed(attempt: OpenAttempt, now: float) -> ApiError | None:
    """Why a claim attempt takes no approval, in the registration protocol's codes."""
    closed = why_closed(attempt, now)
    if closed is None:
        return None
    if attempt.registration_revoked_at is not None:
        return CLAIM_REVOKED(closed.text)
    if attempt.state == AttemptState.COMPLETED or attempt.registration_status == RegStatus.CLAIMED:
        return ALREADY_CLAIMED(closed.text)
    if closed.status == 410:
        return CLAIM_EXPIRED(closed.text)
    return CONFLICT(closed.text)


class AgentsApi:
    def __init__(self, core: Core, identity: Identity, trial_keys: TrialKeys) -> None:
        self.core = core
        self.identity = identity
        self.trial_keys = trial_keys

    # --- credentials (read-only) ------------------------------------------------------------------

    async def validate(self, body: CredentialCheck) -> CredentialValidation:
        """Whether a credential an agent presented to the service works; an invalid one is an answer, not an error."""
        if body.type == "access_token":
            try:
                grant = await self.identity.verify_access(body.credential)  # the site's own check
            except ApiError:
                return INVALID
            # verify_access holds the token to its audience, the site; a service naming another resource refuses it
            if body.audience is not None and body.audience != self.identity.urls.site:
                return INVALID
            return CredentialValidation(True, grant.registration_id, iso(grant.expires_at))
        found = await self.trial_keys(self.core.store, body.credential)  # the control plane's own check
        if found is None:
            return INVALID  # no live key, or not one an agent was given
        expires = found.expires_at
        if expires is not None and expires <= self.core.clock.now():
            return INVALID
        return CredentialValidation(True, found.registration_id, iso(expires) if expires is not None else None)

    # --- the person's approval, played by the service -----------------------------------------------

    async def link_external_user(self, body: AttemptLink) -> ClaimView:
        email, external_id = body.user.email.strip(), body.user.external_id
        if not valid_email(email):
            raise BAD_REQUEST("user.email must be an e-mail address")
        if not 0 < len(external_id) <= MAX_EXTERNAL_ID:
            raise BAD_REQUEST(f"user.external_id must be 1 to {MAX_EXTERNAL_ID} characters")
        now = self.core.clock.now()
        # The attempt, the person and the decision in one transaction: a new attempt or a claim committed in between
        # cannot be approved through a link it replaced.
        async with self.core.store.transaction() as conn:
            attempt = await open_attempt(conn, "a.token_hash = ?", secret_hash(body.claim_attempt_token))
            if attempt is None:
                raise ENTITY_NOT_FOUND("no claim attempt has this token (it is the token= of its verification_uri)")
            refused = _closed(attempt, now)
            if refused is not None:
                raise refused
            # Every refusal before anything is written: a person made here and then refused would be journaled.
            user_id, email = await users.find_external(conn, email, external_id)
            refused = hint_refusal(attempt, email)  # the e-mail of the user the external_id names
            if refused is not None:
                raise refused
            organizations = await self._organizations(conn, user_id) if user_id else []
            if body.organization_id is None and len(organizations) > 1:
                raise BAD_REQUEST(
                    "the user belongs to more than one organization: name one in organization_id ("
                    + ", ".join(o.id for o in organizations)
                    + ")"
                )
            if body.organization_id is not None and body.organization_id not in {o.id for o in organizations}:
                raise FORBIDDEN(f"the user is not a member of the organization {body.organization_id}")
            if user_id is None or (await users.external_id_of(conn, user_id)) is None:
                user_id = await self.identity.users.ensure_user(conn, email, now)
                await users.set_external_id(conn, user_id, external_id)
            code = await self.identity.claims.settle(conn, attempt, email, True, now)
            reg = await registrations.registration(conn, attempt.registration_id)
        assert code is not None and reg is not None
        self.core.bus.publish(reg.id, IdpClaimConfirmed(email=email))
        return ClaimView(reg.id, status_of(reg, now), code, organizations)

    @staticmethod
    async def _organizations(conn: aiosqlite.Connection, user_id: str) -> list[OrganizationRef]:
        async with conn.execute(
            "SELECT o.id, COALESCE(o.display_name, o.slug) AS name FROM org_members m JOIN orgs o ON o.id = m.org_id "
            "WHERE m.user_id = ? ORDER BY o.created_at, o.slug",
            (user_id,),
        ) as cur:
            return [record(r, OrganizationRef) for r in await cur.fetchall()]

    # --- registrations --------------------------------------------------------------------------------

    async def registration(self, reg_id: str) -> AgentRegistrationView:
        return await self._view(self.core.store, reg_id, self.core.clock.now())

    async def revoke(self, reg_id: str, by: str) -> AgentRegistrationView:
        """Revoke a registration: nothing issued from it works any more. Idempotent: a second revocation keeps the
        first `revoked_at` and records nothing."""
        now = self.core.clock.now()
        recorded: agent_events.Recorded | None = None
        async with self.core.store.transaction() as conn:
            reg = await registrations.registration(conn, reg_id)
            if reg is None:
                raise ENTITY_NOT_FOUND(f"no agent registration {reg_id}")
            if reg.revoked_at is None:
                await registrations.revoke(conn, reg_id, now)
                await tokens.revoke_access(conn, reg_id, now)
                await tokens.spend_refresh(conn, reg_id, now)
                recorded = await agent_events.record(
                    conn, self.core, Kind.AGENT_REGISTRATION_REVOKED, reg_id, RegistrationRef(reg_id)
                )
            view = await self._view(conn, reg_id, now)
        if recorded is not None:
            agent_events.publish(self.core.bus, recorded)
            self.core.bus.publish(reg_id, IdpRevoked(by=by))
        return view

    async def delete(self, reg_id: str) -> None:
        """The operator deletes a registration with what hangs on it (its tokens and claim attempts, by cascade); its
        trial stays, and the trial's key stops working (hosted/keys.live_owner)."""
        async with self.core.store.transaction() as conn:
            if not await registrations.delete(conn, reg_id):
                raise ENTITY_NOT_FOUND(f"no agent registration {reg_id}")
            recorded = await agent_events.record(
                conn, self.core, Kind.AGENT_REGISTRATION_DELETED, reg_id, RegistrationRef(reg_id)
            )
        agent_events.publish(self.core.bus, recorded)

    async def _view(self, db: Db, reg_id: str, now: float) -> AgentRegistrationView:
        reg = await fetch_one(db, RegistrationRecord, "SELECT * FROM registrations WHERE id = ?", (reg_id,))
        if reg is None:
            raise ENTITY_NOT_FOUND(f"no agent registration {reg_id}")
        person = await fetch_one(db, UserRef, "SELECT id FROM users WHERE email = ?", (reg.claimed_email,))
        user_id = person.id if person is not None and reg.status == RegStatus.CLAIMED else None
        created = iso(reg.created_at)
        # its last change (a claim, a revocation, an expiry), or its claim for a row from before updated_at
        updated = iso(max(t for t in (reg.created_at, reg.updated_at, reg.claimed_at) if t is not None))
        revoked = reg.revoked_at
        return AgentRegistrationView(
            id=reg_id,
            agent_identity=AgentIdentityView(agent_identity_id(reg_id), user_id, created, updated),
            organization_id=reg.trial_org_id,
            status=status_of(reg, now),
            revoked_at=iso(revoked) if revoked is not None else None,
            kind=reg.type,
            claim=RegistrationClaimView(
                claim_id(reg_id), await self._completion(db, reg), created, updated, iso(reg.claim_expires_at)
            ),
            created_at=created,
            updated_at=updated,
        )

    @staticmethod
    async def _completion(db: Db, reg: RegistrationRecord) -> ClaimCompletionView | None:
        """How the claim was completed: by the attempt the agent completed, else (its trial claimed by a person, a
        declared state) at the instant it was claimed."""
        if reg.status != RegStatus.CLAIMED or reg.claimed_at is None:
            return None
        claimed = iso(reg.claimed_at)
        attempt = await fetch_one(
            db,
            AttemptRecord,
            "SELECT * FROM claim_attempts WHERE registration_id = ? AND state = ? ORDER BY created_at DESC LIMIT 1",
            (reg.id, AttemptState.COMPLETED),
        )
        if attempt is None:
            return ClaimCompletionView(claim_id(reg.id), claimed, claimed, claimed, claimed)
        return ClaimCompletionView(attempt.id, iso(attempt.created_at), claimed, iso(attempt.expires_at), claimed)
