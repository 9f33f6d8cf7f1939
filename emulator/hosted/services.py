"""Hosted services: the only SQL of the `services` table, and the instance record the client reads.

A service instance is (database, base_path, name). Each accepted desired spec is a new generation with a
receipt, like a database's; the reconciler settles it by starting the real `pixeltable.serving.pod_runner`
behind the database's gateway. An instance is listed as soon as its submission is accepted.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from emulator.core.store import Db, fetch_all, fetch_one, one, run
from emulator.hosted import receipts, states
from emulator.hosted.records import ProjectFingerprint, Receipt, Service, ServiceMutation
from emulator.hosted.states import IllegalTransition, ServiceState

_SELECT = "SELECT s.*, o.slug FROM services s JOIN orgs o ON o.id = s.org_id"


async def of_database(db: Db, org_id: str, name: str) -> dict[tuple[str, str], Service]:
    """The database's services by (base_path, name), oldest first."""
    rows = await fetch_all(
        db, Service, f"{_SELECT} WHERE s.org_id = ? AND s.db = ? ORDER BY s.created_at", (org_id, name)
    )
    return {(r.base_path, r.name): r for r in rows}


async def get(db: Db, org_id: str, database: str, base: str, name: str) -> Service | None:
    return await fetch_one(
        db,
        Service,
        f"{_SELECT} WHERE s.org_id = ? AND s.db = ? AND s.base_path = ? AND s.name = ?",
        (org_id, database, base, name),
    )


async def every(db: Db, state: ServiceState | None = None) -> list[Service]:
    where = "WHERE s.state = ? " if state else ""
    return await fetch_all(
        db, Service, f"{_SELECT} {where}ORDER BY o.slug, s.db, s.base_path, s.name", (state,) if state else ()
    )


async def count(db: Db, org_id: str) -> int:
    row = await one(db, "SELECT COUNT(*) AS n FROM services WHERE org_id = ?", (org_id,))
    return int(row["n"]) if row else 0


# --- writes -------------------------------------------------------------------------------------------------


async def insert(
    conn: Db, service_id: str, org_id: str, database: str, desired: ServiceMutation, receipt: Receipt, now: float
) -> None:
    await run(
        conn,
        "INSERT INTO services (id, org_id, db, base_path, name, generation, desired, state, receipt, "
        "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            service_id,
            org_id,
            database,
            receipt.base_path,
            receipt.service_name,
            receipt.generation,
            _json(desired),
            ServiceState.DEPLOYING,
            receipts.encode(receipt),
            now,
            now,
        ),
    )


async def accept(
    conn: Db,
    service: Service,
    receipt: Receipt,
    now: float,
    *,
    state: ServiceState,
    desired: ServiceMutation | None = None,
    submission: str | None = None,
) -> None:
    """A new generation of an existing service: its receipt (here and in the receipts table) and state, and for a
    deployment its new desired spec (which clears the last error)."""
    if desired is not None:
        await _write(
            conn,
            service,
            state,
            "generation = ?, desired = ?, error = NULL, receipt = ?",
            (receipt.generation, _json(desired), receipts.encode(receipt), now),
        )
    else:
        await _write(
            conn, service, state, "generation = ?, receipt = ?", (receipt.generation, receipts.encode(receipt), now)
        )
    await receipts.add(conn, service.org_id, receipt, submission)


async def _write(conn: Db, service: Service, state: ServiceState | None, sets: str, values: tuple[Any, ...]) -> None:
    """`sets` (and `updated_at`, the last of `values`) and, unless None, a new state: written only over a state it
    may follow (`states`), in the same statement; over any other, `IllegalTransition`."""
    where, params = "id = ?", [service.id]
    if state is not None:
        sets = f"{sets}, state = ?"
        values = (*values[:-1], state, values[-1])
        allowed = states.sources(state)
        where += f" AND state IN ({', '.join('?' * len(allowed))})"
        params += allowed
    changed = await run(conn, f"UPDATE services SET {sets}, updated_at = ? WHERE {where}", (*values, *params))
    if not changed and state is not None:
        found = await one(conn, "SELECT state FROM services WHERE id = ?", (service.id,))
        if found is not None:
            raise IllegalTransition(f"service {service.name}: {found['state']} may not become {state}")


async def settle(conn: Db, service: Service, receipt: Receipt, now: float, state: ServiceState | None) -> None:
    """A generation's receipt as its job progresses, the state it reached (None: unchanged) and its error."""
    error = receipt.error.message if receipt.error else None
    await _write(conn, service, state, "receipt = ?, error = ?", (receipts.encode(receipt), error, now))
    await receipts.rewrite(conn, receipt)


async def set_fingerprint(
    db: Db, org_id: str, database: str, base: str, name: str, fingerprint: ProjectFingerprint | None
) -> None:
    await run(
        db,
        "UPDATE services SET fingerprint = ? WHERE org_id = ? AND db = ? AND base_path = ? AND name = ?",
        (_json(fingerprint), org_id, database, base, name),
    )


def _json(value: ServiceMutation | ProjectFingerprint | None) -> str:
    """A JSON column, as json.dumps has always written it (", " and ": ")."""
    return json.dumps(msgspec.to_builtins(value))


async def delete(db: Db, service_id: str) -> None:
    await run(db, "DELETE FROM services WHERE id = ?", (service_id,))
