"""Trial organizations: creation, claim and expiry (spec, "Trial organizations").

An anonymous registration's access token buys one trial organization: slug `agent-xxxxxx`, its database
`main`, an API key (shown once, stored hashed), a claim link, and `trial_lifetime` (48 hours) of emulator
time before it is deleted unless a person claims it. Every check runs inside the transaction that creates the
trial, in the spec's order (403 claimed, 409 already has one, 503 switched off, 429 capacity), so concurrent
requests with one token get one trial. A "network" is the client's IPv4 /24 (`trial_network_bits`) or IPv6
/64: at most `trial_network_limit` unclaimed trials live in one network at a time.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from emulator.core.clock import iso
from emulator.core.context import Core
from emulator.core.errors import (
    BAD_REQUEST,
    CONFLICT,
    FORBIDDEN,
    INVALID_TOKEN,
    NOT_FOUND,
    RATE_LIMITED,
    UNAVAILABLE,
)
from emulator.core.ids import key_fingerprint
from emulator.core.kinds import Kind
from emulator.core.payloads import TrialClaimed, TrialCreated, TrialExpired
from emulator.hosted import keys, orgs
from emulator.hosted.records import Org
from emulator.hosted.states import MemberRole, OrgState
from emulator.identity import agent_events, registrations
from emulator.identity.agent_events import ApiKeyIssued, CredentialIssuedData
from emulator.identity.identity import Identity
from emulator.identity.states import RegStatus
from emulator.identity.wire import valid_email


@dataclass(frozen=True)
class NewTrial:
    org: str
    org_id: str
    api_key: str
    claim_token: str
    expires_at: float


def network_of(ip: str, bits_v4: int) -> str:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return ip
    bits = bits_v4 if addr.version == 4 else 64
    return str(ipaddress.ip_network(f"{addr}/{bits}", strict=False))


async def create(core: Core, registration_id: str, ip: str) -> NewTrial:
    settings = core.settings
    network = network_of(ip, settings.trial_network_bits)
    now = core.clock.now()
    claim_token = core.ids.token("tcl_", 20)
    expires = now + settings.trial_lifetime
    async with core.store.transaction() as conn:
        reg = await registrations.registration(conn, registration_id)
        if reg is None:
            raise INVALID_TOKEN("the registration behind this token no longer exists")
        if reg.status == RegStatus.CLAIMED:
            raise FORBIDDEN(
                "this registration was claimed: it works in its person's organization (pxt login) and gets no trial",
            )
        if reg.trial_org_id is not None:
            raise CONFLICT("this registration already has a trial; register again for another")
        if not core.switches["cloud_reachable"]:
            raise UNAVAILABLE("the cloud could not be reached; try again later")
        if not core.switches["trials_enabled"]:
            raise UNAVAILABLE("trials are not available on this host")
        total, mine = await orgs.unclaimed_counts(conn, network)
        if total >= settings.trial_capacity:
            raise RATE_LIMITED("no trials are available right now; try again later", headers={"Retry-After": "3600"})
        if mine >= settings.trial_network_limit:
            raise RATE_LIMITED(
                f"your network already holds {settings.trial_network_limit} unclaimed trials; claim one "
                "(open its claim_url) or wait until one expires",
                headers={"Retry-After": "3600"},
            )
        slug = f"agent-{core.ids.short(6)}"
        while await orgs.slug_taken(conn, slug):
            slug = f"agent-{core.ids.short(6)}"
        org_id = await orgs.insert(
            core,
            conn,
            slug,
            trial=True,
            now=now,
            expires_at=expires,
            registration_id=registration_id,
            network=network,
            claim_token=claim_token,
        )
        key_id, api_key = await keys.insert(core, conn, org_id, "trial", created_by=registration_id, now=now)
        await registrations.attach_trial(conn, registration_id, org_id)
        issued = await agent_events.record(
            conn,
            core,
            Kind.AGENT_REGISTRATION_CREDENTIAL_ISSUED,
            registration_id,
            CredentialIssuedData(
                id=key_id,
                agent_registration_id=registration_id,
                detail=ApiKeyIssued(key_id),
                created_at=iso(now),
                updated_at=iso(now),
            ),
        )
    core.bus.publish(
        slug,
        TrialCreated(
            org_id=org_id,
            registration=registration_id,
            network=network,
            expires_at=iso(expires),
            key=key_fingerprint(api_key),  # its trial key, as `http.request` events name it
        ),
    )
    agent_events.publish(core.bus, issued)
    return NewTrial(slug, org_id, api_key, claim_token, expires)


async def claim(core: Core, identity: Identity, org_id: str, email: str) -> str:
    """The person signed in as `email` becomes the trial's admin; it stops expiring. Returns the slug."""
    if not valid_email(email):
        raise BAD_REQUEST("sign in with an e-mail address")
    email = email.strip()
    now = core.clock.now()
    async with core.store.transaction() as conn:
        org = await orgs.get(conn, org_id)
        if org is None or (org.state == OrgState.UNCLAIMED and (org.expires_at or 0) <= now):
            raise NOT_FOUND("this trial no longer exists (unclaimed trials are deleted after 48 hours)")
        if org.state != OrgState.UNCLAIMED:
            raise CONFLICT(f"the organization {org.slug} is already claimed")
        user_id = await identity.ensure_user(conn, email, now)
        await orgs.claim(conn, org_id, now)
        await orgs.add_member(conn, org_id, user_id, MemberRole.ADMIN)
        # The person now owns what the agent made: its registration is claimed too, so it gets no more trials.
        if org.registration_id:
            await registrations.claim_with_trial(conn, org.registration_id, email, now)
    core.bus.publish(org.slug, TrialClaimed(org_id=org_id, email=email, registration=org.registration_id))
    return org.slug


async def by_claim_token(core: Core, token: str) -> Org:
    org = await orgs.by_claim_token(core.store, token)
    if org is None:
        raise NOT_FOUND("this claim link is not valid: the trial was claimed or has expired")
    return org


async def expire(core: Core, now: float, end: Callable[[str, str], Awaitable[None]]) -> None:
    """Due job: an unclaimed trial whose time is over is deleted with everything in it: `end(org_id, slug)` (the
    reconciler's one teardown path) stops and removes what its databases run and hold, then its rows go."""
    for org in await orgs.lapsed_trials(core.store, now):
        await end(org.id, org.slug)
        async with core.store.transaction() as conn:
            await orgs.delete_unclaimed(conn, org.id)
        core.bus.publish(org.slug, TrialExpired(org_id=org.id, expired_at=org.expires_at))
