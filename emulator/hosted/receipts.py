"""Receipts: the only SQL of the `receipts` table, one row per accepted generation of a database or a
service, which `get_receipts` answers from. A resource's row keeps a copy of its current receipt (its own
module writes that copy); a resent submission finds its original receipts by the submission's digest."""

from __future__ import annotations

from typing import Literal

import msgspec

from emulator.core.store import Db, many, one, run
from emulator.hosted.records import Receipt, ReceiptError
from emulator.hosted.states import Phase

Kind = Literal["database", "service"]


def new(
    kind: Kind,
    resource_id: str,
    generation: int,
    db: str,
    *,
    phase: Phase,
    waiting_for: str | None,
    attempt: str,
    service_name: str | None = None,
    base_path: str = "",
) -> Receipt:
    return Receipt(
        kind=kind,
        resource_id=resource_id,
        generation=generation,
        db=db,
        service_name=service_name,
        base_path=base_path,
        attempt_id=attempt,
        phase=phase,
        waiting_for=waiting_for,
    )


def settled(
    receipt: Receipt,
    phase: Phase,
    waiting_for: str | None,
    outcome: str | None = None,
    error: ReceiptError | None = None,
    warnings: list[str] | None = None,
) -> Receipt:
    """A receipt moved on by its job: its phase, what it waits for, and (when given) its outcome, error, warnings."""
    changed = msgspec.structs.replace(receipt, phase=phase, waiting_for=waiting_for)
    if outcome is not None:
        changed.outcome = outcome
    if error is not None:
        changed.error = error
    if warnings is not None:
        changed.warnings = warnings
    return changed


def failure(message: str) -> ReceiptError:
    """A receipt's `error` for a job that failed (the client shows the message; a retry is the person's call)."""
    return ReceiptError(message)


def encode(receipt: Receipt | None) -> str | None:
    return None if receipt is None else msgspec.json.encode(receipt).decode()


async def add(conn: Db, org_id: str, receipt: Receipt, submission: str | None = None) -> None:
    """The receipt of a newly accepted generation (`submission`: the digest a resent submission finds)."""
    await run(
        conn,
        "INSERT INTO receipts (kind, resource_id, generation, org_id, body, submission) VALUES (?, ?, ?, ?, ?, ?)",
        (receipt.kind, receipt.resource_id, receipt.generation, org_id, encode(receipt), submission),
    )


async def rewrite(conn: Db, receipt: Receipt) -> None:
    """A generation's receipt as its job progresses."""
    await run(
        conn,
        "UPDATE receipts SET body = ? WHERE kind = ? AND resource_id = ? AND generation = ?",
        (encode(receipt), receipt.kind, receipt.resource_id, receipt.generation),
    )


async def get(db: Db, org_id: str, kind: str, resource_id: str, generation: int) -> Receipt | None:
    row = await one(
        db,
        "SELECT body FROM receipts WHERE kind = ? AND resource_id = ? AND generation = ? AND org_id = ?",
        (kind, resource_id, generation, org_id),
    )
    return None if row is None else msgspec.json.decode(row["body"], type=Receipt)


async def of_submission(db: Db, org_id: str, digest: str) -> list[Receipt]:
    rows = await many(
        db, "SELECT body FROM receipts WHERE org_id = ? AND submission = ? ORDER BY rowid", (org_id, digest)
    )
    return [msgspec.json.decode(r["body"], type=Receipt) for r in rows]
