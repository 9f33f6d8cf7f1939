"""Webhook deliveries: one per event and endpoint that takes it, written in the transaction of the change the event
reports (`enqueue`, called by agent_events.record: an outbox), and each of its tries (`record_try`, the sender's).
This module is the one writer of `webhook_deliveries` and `webhook_attempts`, and reads the delivery log back."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import aiosqlite
import msgspec

from emulator.core.clock import iso
from emulator.core.context import Core
from emulator.core.store import Db, fetch_all, fetch_one, many, record
from emulator.identity.records import DeliveryAttempts, DeliveryRecord, DueDelivery, TryRecord
from emulator.identity.states import DeliveryState

# A delivery's row: (id, endpoint_id, event_id, next_at, created_at), made pending with no try yet.
NewDelivery = tuple[str, str, str, float, float]

_ENQUEUE = (
    "INSERT INTO webhook_deliveries (id, endpoint_id, event_id, state, attempts, next_at, created_at) "
    "VALUES (?, ?, ?, ?, 0, ?, ?)"
)
_DUE = (
    "SELECT d.id, d.endpoint_id FROM webhook_deliveries d JOIN agent_events e ON e.id = d.event_id "
    "WHERE d.state = ? AND d.next_at <= ? {} ORDER BY e.seq, d.id"
)


class AttemptView(msgspec.Struct, kw_only=True):
    attempt: int
    at: str  # emulator time
    status: int | None  # the receiver's HTTP status; none when none came
    error: str | None  # why it failed (a status, a refused connection, a timeout)
    ms: float


class DeliveryView(msgspec.Struct, kw_only=True):
    id: str
    endpoint_id: str
    url: str
    event_id: str
    event: str
    state: DeliveryState
    attempts: int
    next_at: str | None  # the next try (pending only), emulator time
    created_at: str
    tries: list[AttemptView]


class DeliveryList(msgspec.Struct):
    deliveries: list[DeliveryView]


def _pending(rows: Sequence[NewDelivery]) -> list[tuple[str, str, str, DeliveryState, float, float]]:
    return [(i, endpoint, event, DeliveryState.PENDING, next_at, at) for i, endpoint, event, next_at, at in rows]


async def enqueue(conn: aiosqlite.Connection, rows: Sequence[NewDelivery]) -> None:
    """Pending deliveries of an event just written, inside the caller's transaction."""
    await conn.executemany(_ENQUEUE, _pending(rows))


def enqueue_sync(db: sqlite3.Connection, rows: Sequence[NewDelivery]) -> None:
    """`enqueue` inside a transaction run whole on the store's thread (`Store.write`)."""
    db.executemany(_ENQUEUE, _pending(rows))


async def due(core: Core, now: float, endpoint_id: str | None = None) -> list[DueDelivery]:
    """The pending deliveries due by `now` (of one endpoint: its next one only), oldest event first."""
    if endpoint_id is None:
        return await fetch_all(core.store, DueDelivery, _DUE.format(""), (DeliveryState.PENDING, now))
    return await fetch_all(
        core.store,
        DueDelivery,
        _DUE.format("AND d.endpoint_id = ?") + " LIMIT 1",
        (DeliveryState.PENDING, now, endpoint_id),
    )


async def record_try(
    core: Core,
    delivery_id: str,
    event_id: str,
    attempt: int,
    outcome: tuple[int | None, str | None, float],
    state: DeliveryState,
    next_at: float | None,
    now: float,
) -> bool:
    """A try's outcome (status, error, ms) at `now` and the delivery's new state; False (nothing written) when the
    delivery is no longer the one the try was for."""
    status, error, ms = outcome
    async with core.store.transaction() as conn:
        # Still the delivery this try was for: a reset or a load may have replaced the rows (a seeded emulator
        # makes the same ids again).
        current = await fetch_one(
            conn,
            DeliveryAttempts,
            "SELECT attempts FROM webhook_deliveries WHERE id = ? AND event_id = ? AND state = ?",
            (delivery_id, event_id, DeliveryState.PENDING),
        )
        if current is None or current.attempts != attempt - 1:
            return False
        await conn.execute(
            "INSERT INTO webhook_attempts (delivery_id, attempt, at, status, error, ms) VALUES (?, ?, ?, ?, ?, ?)",
            (delivery_id, attempt, now, status, error, ms),
        )
        await conn.execute(
            "UPDATE webhook_deliveries SET state = ?, attempts = ?, next_at = ? WHERE id = ?",
            (state, attempt, next_at, delivery_id),
        )
    return True


# --- the delivery log --------------------------------------------------------------------------------------------


async def every(db: Db, endpoint_id: str | None = None, event_id: str | None = None) -> list[DeliveryView]:
    """Every delivery (of one endpoint, of one event) with each of its tries, oldest event first."""
    where: list[str] = []
    params: list[str] = []
    if endpoint_id is not None:
        where.append("d.endpoint_id = ?")
        params.append(endpoint_id)
    if event_id is not None:
        where.append("d.event_id = ?")
        params.append(event_id)
    # One statement, so one snapshot: a try and its delivery's state are written in one transaction, and read apart
    # a delivery could show a try while its state still said pending. A delivery without a try comes once, its
    # try's columns null.
    rows = await many(
        db,
        "SELECT d.*, w.url, e.event, a.delivery_id AS try_of, a.attempt AS try_attempt, a.at AS try_at, "
        "a.status AS try_status, a.error AS try_error, a.ms AS try_ms "
        "FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id "
        "JOIN agent_events e ON e.id = d.event_id LEFT JOIN webhook_attempts a ON a.delivery_id = d.id"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY e.seq, d.created_at, d.id, a.attempt",
        tuple(params),
    )
    deliveries: dict[str, DeliveryRecord] = {}
    tries: dict[str, list[AttemptView]] = {}
    for row in rows:
        delivery = deliveries.setdefault(row["id"], record(row, DeliveryRecord))
        if row["try_of"] is not None:
            a = TryRecord(
                delivery_id=row["try_of"],
                attempt=row["try_attempt"],
                at=row["try_at"],
                status=row["try_status"],
                error=row["try_error"],
                ms=row["try_ms"],
            )
            tries.setdefault(delivery.id, []).append(
                AttemptView(attempt=a.attempt, at=iso(a.at), status=a.status, error=a.error, ms=a.ms)
            )
    return [
        DeliveryView(
            id=r.id,
            endpoint_id=r.endpoint_id,
            url=r.url,
            event_id=r.event_id,
            event=r.event,
            state=r.state,
            attempts=r.attempts,
            next_at=iso(r.next_at) if r.state == DeliveryState.PENDING and r.next_at is not None else None,
            created_at=iso(r.created_at),
            tries=tries.get(r.id, []),
        )
        for r in deliveries.values()
    ]
