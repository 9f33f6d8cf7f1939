"""The receipts table: one row per accepted generation of a database or a service, which `get_receipts`
answers from. A resource's row keeps a copy of its current receipt; these write the table's side of it."""

from __future__ import annotations

import json
from typing import Any, Literal

import aiosqlite

Kind = Literal["database", "service"]


async def add(
    conn: aiosqlite.Connection,
    kind: Kind,
    resource_id: str,
    org_id: str,
    receipt: dict[str, Any],
    submission: str | None = None,
) -> None:
    """The receipt of a newly accepted generation (`submission`: the digest a replayed submission finds)."""
    await conn.execute(
        "INSERT INTO receipts (kind, resource_id, generation, org_id, body, submission) VALUES (?, ?, ?, ?, ?, ?)",
        (kind, resource_id, receipt["generation"], org_id, json.dumps(receipt), submission),
    )


async def rewrite(conn: aiosqlite.Connection, kind: Kind, resource_id: str, receipt: dict[str, Any]) -> None:
    """A generation's receipt as its job progresses."""
    await conn.execute(
        "UPDATE receipts SET body = ? WHERE kind = ? AND resource_id = ? AND generation = ?",
        (json.dumps(receipt), kind, resource_id, receipt["generation"]),
    )
