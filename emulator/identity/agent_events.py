"""The registration events a service receives, as WorkOS sends them: `{object: "event", id, event, data,
created_at}`, with the `data` shapes of the `workos` SDK's models (10.x, `common/models/agent_registration_*`).

An event is journaled once the transaction of the change it reports committed (`publish`); when a webhook endpoint
takes it, it is also written in that transaction (`record`) with one pending delivery for each such endpoint (an
outbox: a delivery cannot be lost between the change and its sending; deliveries.py writes them). The webhook sender
(sender.py) takes it from there.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Literal

import aiosqlite
import msgspec

from emulator.core.clock import iso
from emulator.core.context import Core
from emulator.core.events import EventBus
from emulator.core.kinds import Kind
from emulator.core.payloads import (
    AgentRegistrationClaimAttemptCreated,
    AgentRegistrationClaimCompleted,
    AgentRegistrationCreated,
    AgentRegistrationCredentialIssued,
    AgentRegistrationDeleted,
    AgentRegistrationExpired,
    AgentRegistrationRefreshed,
    AgentRegistrationRevoked,
)
from emulator.core.store import fetch_all
from emulator.core.store import record as as_record
from emulator.identity import deliveries as deliveries_
from emulator.identity.deliveries import NewDelivery
from emulator.identity.records import EndpointRef, EventRecord, RegistrationRecord
from emulator.identity.states import DeliveryState, EventStatus, RegStatus, RegType

_JOURNALED = {
    Kind.AGENT_REGISTRATION_CREATED: AgentRegistrationCreated,
    Kind.AGENT_REGISTRATION_CLAIM_ATTEMPT_CREATED: AgentRegistrationClaimAttemptCreated,
    Kind.AGENT_REGISTRATION_CLAIM_COMPLETED: AgentRegistrationClaimCompleted,
    Kind.AGENT_REGISTRATION_CREDENTIAL_ISSUED: AgentRegistrationCredentialIssued,
    Kind.AGENT_REGISTRATION_REFRESHED: AgentRegistrationRefreshed,
    Kind.AGENT_REGISTRATION_REVOKED: AgentRegistrationRevoked,
    Kind.AGENT_REGISTRATION_EXPIRED: AgentRegistrationExpired,
    Kind.AGENT_REGISTRATION_DELETED: AgentRegistrationDeleted,
}
EVENTS = tuple(k.value for k in _JOURNALED)  # the event names a webhook endpoint may take

Status = EventStatus  # the name the agents API and the operator's views import
_encode = msgspec.json.Encoder().encode


# --- ids the SDK shows beside the registration's, derived from it (one registration has one of each) ----------


def _suffix(registration_id: str) -> str:
    return registration_id.removeprefix("agent_reg_")


def agent_identity_id(registration_id: str) -> str:
    return "agent_identity_" + _suffix(registration_id)


def claim_id(registration_id: str) -> str:
    return "agent_claim_" + _suffix(registration_id)


def method_of(kind: str) -> str:
    """WorkOS's `method` of a registration kind: an identity assertion registers by `id_jag`."""
    return "id_jag" if kind == RegType.IDENTITY_ASSERTION else kind


def status_of(reg: RegistrationRecord, now: float) -> Status:
    """A registration's status as the service side reads it: `revoked`; `verified` once claimed (an ID-JAG's is
    claimed when made); `expired` when its claim window closed unclaimed; else `unverified`."""
    if reg.revoked_at is not None:
        return EventStatus.REVOKED
    if reg.status == RegStatus.CLAIMED:
        return EventStatus.VERIFIED
    if reg.claim_expires_at <= now:
        return EventStatus.EXPIRED
    return EventStatus.UNVERIFIED


# --- the `data` of each event -----------------------------------------------------------------------------------


class AgentIdentityData(msgspec.Struct):
    id: str
    userland_user_id: str | None
    object: Literal["agent_identity"] = "agent_identity"


class RegistrationData(msgspec.Struct, kw_only=True):
    object: Literal["agent_registration"] = "agent_registration"
    id: str
    agent_identity: AgentIdentityData
    organization_id: str | None  # its trial's organization; none before it made one (WorkOS always has one)
    status: Status
    kind: str
    method: str
    created_at: str
    updated_at: str


class ClaimAttemptData(msgspec.Struct, kw_only=True):
    object: Literal["agent_registration_claim_attempt"] = "agent_registration_claim_attempt"
    id: str
    agent_registration_id: str
    agent_registration_claim_id: str
    login_hint: str | None  # none: an anonymous registration's claim names no one
    expires_at: str
    created_at: str
    updated_at: str


class ClaimedBy(msgspec.Struct):
    user_id: str
    organization_id: str | None


class ClaimCompletedData(msgspec.Struct, kw_only=True):
    object: Literal["agent_registration_claim"] = "agent_registration_claim"
    id: str
    agent_registration_id: str
    completed_by_attempt_id: str
    claimed_by: ClaimedBy
    completed_at: str
    created_at: str
    updated_at: str


class AccessTokenIssued(msgspec.Struct, tag_field="kind", tag="access_token"):
    jti: str
    expires_at: str | None


class ApiKeyIssued(msgspec.Struct, tag_field="kind", tag="api_key"):
    api_key_id: str


class CredentialIssuedData(msgspec.Struct, kw_only=True):
    object: Literal["agent_registration_credential"] = "agent_registration_credential"
    id: str
    agent_registration_id: str
    detail: AccessTokenIssued | ApiKeyIssued
    created_at: str
    updated_at: str


class RegistrationRef(msgspec.Struct):
    """The data of `refreshed`, `revoked`, `expired` and `deleted`."""

    agent_registration_id: str


EventData = RegistrationData | ClaimAttemptData | ClaimCompletedData | CredentialIssuedData | RegistrationRef


class Envelope(msgspec.Struct, kw_only=True):
    """What a webhook endpoint receives (and the SDK's `verify_event` reads)."""

    object: Literal["event"] = "event"
    id: str
    event: str
    data: msgspec.Raw
    created_at: str


def registration_data(reg: RegistrationRecord, user_id: str | None, now: float) -> RegistrationData:
    """A registration as the events and the service side's API show it."""
    created = iso(reg.created_at)
    return RegistrationData(
        id=reg.id,
        agent_identity=AgentIdentityData(agent_identity_id(reg.id), user_id),
        organization_id=reg.trial_org_id,
        status=status_of(reg, now),
        kind=reg.type,
        method=method_of(reg.type),
        created_at=created,
        updated_at=iso(reg.updated_at) if reg.updated_at is not None else created,
    )


# --- writing and journaling -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recorded:
    """An event written in a transaction, to journal once it committed."""

    kind: Kind
    id: str
    registration_id: str


_ENDPOINTS = "SELECT id, events FROM webhook_endpoints WHERE disabled_at IS NULL"
_EVENT = "INSERT INTO agent_events (id, event, registration_id, data, created_at) VALUES (?, ?, ?, ?, ?)"


def _rows(
    core: Core, kind: Kind, registration_id: str, data: EventData, endpoints: list[EndpointRef]
) -> tuple[Recorded, tuple[str, str, str, str, float], list[NewDelivery]]:
    """The event's row and its deliveries' (one per endpoint that takes its kind)."""
    if kind not in _JOURNALED:
        raise ValueError(f"{kind} is not a registration event")
    now = core.clock.now()
    event_id = core.ids.ident("event_")
    takers = [e.id for e in endpoints if e.events == [] or kind.value in e.events]
    deliveries = [(core.ids.ident("whd_"), endpoint_id, event_id, now, now) for endpoint_id in takers]
    data_json = _encode(data).decode() if deliveries else ""  # the row is written only with deliveries
    return (
        Recorded(kind, event_id, registration_id),
        (event_id, kind.value, registration_id, data_json, now),
        deliveries,
    )


# Kept as the journal is: the newest `journal_cap` events (an agent that exchanges tokens in a loop makes one each
# time), pruned every PRUNE_EVERY, never one a delivery still waits to send (its tries go with it).
PRUNE_EVERY = 500
_PRUNE = (
    "DELETE FROM agent_events WHERE seq <= ? AND id NOT IN (SELECT event_id FROM webhook_deliveries WHERE state = ?)"
)


def _prune_below(seq: int | None, cap: int) -> int | None:
    """The seq at and below which events go, when this event's is a pruning turn."""
    return seq - cap if seq is not None and seq % PRUNE_EVERY == 0 and seq > cap else None


async def record(conn: aiosqlite.Connection, core: Core, kind: Kind, registration_id: str, data: EventData) -> Recorded:
    """Write the event and its pending deliveries inside the caller's transaction. An event no endpoint takes is
    journaled only: the row is the outbox's, and a token exchange (the hottest write) then pays no insert."""
    endpoints = await fetch_all(conn, EndpointRef, _ENDPOINTS)
    recorded, event, deliveries = _rows(core, kind, registration_id, data, endpoints)
    if not deliveries:
        return recorded
    written = await conn.execute(_EVENT, event)
    await deliveries_.enqueue(conn, deliveries)
    below = _prune_below(written.lastrowid, core.settings.journal_cap)
    if below is not None:
        await conn.execute(_PRUNE, (below, DeliveryState.PENDING))
    return recorded


def record_sync(db: sqlite3.Connection, core: Core, kind: Kind, registration_id: str, data: EventData) -> Recorded:
    """`record` inside a transaction run whole on the store's thread (`Store.write`)."""
    endpoints = [as_record(r, EndpointRef) for r in db.execute(_ENDPOINTS).fetchall()]
    recorded, event, deliveries = _rows(core, kind, registration_id, data, endpoints)
    if not deliveries:
        return recorded
    written = db.execute(_EVENT, event)
    deliveries_.enqueue_sync(db, deliveries)
    below = _prune_below(written.lastrowid, core.settings.journal_cap)
    if below is not None:
        db.execute(_PRUNE, (below, DeliveryState.PENDING))
    return recorded


def publish(bus: EventBus, *recorded: Recorded) -> None:
    """Journal events whose transaction committed (the webhook sender follows these)."""
    for r in recorded:
        bus.publish(r.registration_id, _JOURNALED[r.kind](event_id=r.id))


def envelope(event: EventRecord) -> bytes:
    """An `agent_events` row as the JSON body a webhook endpoint receives."""
    return _encode(
        Envelope(
            id=event.id, event=event.event, data=msgspec.Raw(event.data.encode()), created_at=iso(event.created_at)
        )
    )
