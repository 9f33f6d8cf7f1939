"""Hosted databases: the only SQL of the `databases` table, the report the client reads, and the digests
that say whether a project's environment changed.

A database row holds its desired state (`target`), what it runs (`current`), its generation and its current
receipt; the lifecycle module decides generations, the reconciler moves the state.
"""

from __future__ import annotations

import hashlib
import json

import msgspec
from msgspec import UNSET, UnsetType

from emulator.core.context import Core
from emulator.core.errors import NOT_FOUND
from emulator.core.store import Db, fetch_all, fetch_one, one, run
from emulator.hosted import plans, receipts, states
from emulator.hosted.records import Database, DatabaseResources, ProjectFingerprint, Receipt, sent
from emulator.hosted.states import BuildOutcome, DbState, IllegalTransition

_SELECT = "SELECT d.*, o.slug FROM databases d JOIN orgs o ON o.id = d.org_id"


def canonical(value: object) -> str:
    """The client's `canonical_json` of a JSON value (a struct as the JSON it encodes to)."""
    return json.dumps(msgspec.to_builtins(value), sort_keys=True, separators=(",", ":"))


def _files(fingerprint: ProjectFingerprint) -> dict[str, str]:
    return fingerprint.files if fingerprint.files is not UNSET else {}


def archive_digest(fingerprint: ProjectFingerprint) -> str:
    """`ProjectFingerprint.archive_digest()` of the client: sha256 of the canonical JSON of `files`."""
    return hashlib.sha256(canonical(_files(fingerprint)).encode()).hexdigest()


def environment_digest(fingerprint: ProjectFingerprint | None) -> str:
    """What the environment (the image) depends on: manifests, Python, system packages, pixeltable, uv options."""
    if not fingerprint:
        return "base"
    files = _files(fingerprint)
    manifests = {k: v for k, v in files.items() if k in ("uv.lock", "requirements.txt", "pyproject.toml")}
    manifests |= sent(fingerprint.installed_from_project) or {}
    parts = [
        manifests,
        sent(fingerprint.python_version),
        sent(fingerprint.system_dependencies) or [],
        sent(fingerprint.pixeltable_version),
        sent(fingerprint.uv_options),
    ]
    return hashlib.sha256(canonical(parts).encode()).hexdigest()


# --- reads --------------------------------------------------------------------------------------------------


async def get(db: Db, org_id: str, name: str) -> Database | None:
    return await fetch_one(db, Database, f"{_SELECT} WHERE d.org_id = ? AND d.name = ?", (org_id, name))


async def require(db: Db, org_id: str, slug: str, name: str) -> Database:
    found = await get(db, org_id, name)
    if found is None:
        raise NOT_FOUND(f"database {name} does not exist in {slug}")
    return found


async def of_org(db: Db, org_id: str) -> list[Database]:
    return await fetch_all(db, Database, f"{_SELECT} WHERE d.org_id = ? ORDER BY d.created_at", (org_id,))


async def every(db: Db) -> list[Database]:
    """Every database of the platform, by organization slug and name."""
    return await fetch_all(db, Database, f"{_SELECT} ORDER BY o.slug, d.name")


async def count(db: Db, org_id: str) -> int:
    row = await one(db, "SELECT COUNT(*) AS n FROM databases WHERE org_id = ?", (org_id,))
    return int(row["n"]) if row else 0


# --- writes -------------------------------------------------------------------------------------------------


async def insert(
    core: Core, conn: Db, org_id: str, name: str, *, now: float, trial: bool, provisioning: bool = False
) -> None:
    """A new database: AVAILABLE on the plan's base resources, or (`provisioning`) waiting for its first update."""
    db_id = core.ids.ident("db_")
    current = None if provisioning else _column(plans.base_resources(trial))
    await run(
        conn,
        "INSERT INTO databases (org_id, name, id, state, current, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (org_id, name, db_id, DbState.PROVISIONING if provisioning else DbState.AVAILABLE, current, now, now),
    )


class DbChange(msgspec.Struct, kw_only=True):
    """Columns a write sets on a database row; a field left UNSET is left as it is (None is written as NULL)."""

    state: DbState | UnsetType = UNSET
    generation: int | UnsetType = UNSET
    current: DatabaseResources | UnsetType | None = UNSET
    target: DatabaseResources | UnsetType | None = UNSET
    receipt: Receipt | UnsetType = UNSET
    archive_sha256: str | UnsetType | None = UNSET
    last_build_outcome: BuildOutcome | UnsetType | None = UNSET
    last_build_error: str | UnsetType | None = UNSET
    failure_reason: str | UnsetType | None = UNSET
    env_digest: str | UnsetType | None = UNSET
    started_at: float | UnsetType | None = UNSET
    restarts: int | UnsetType = UNSET
    gateway_port: int | UnsetType | None = UNSET


def _column(value: object) -> object:
    if isinstance(value, Receipt):
        return receipts.encode(value)
    if isinstance(value, DatabaseResources):  # as json.dumps has always written the column (", " and ": ")
        return json.dumps(msgspec.to_builtins(value))
    return value


async def update(db: Db, org_id: str, name: str, now: float, change: DbChange) -> None:
    """Set the columns `change` names. A new state is written only over a state it may follow (`states`), in the
    same statement; over any other, `IllegalTransition`."""
    fields = {k: v for k in change.__struct_fields__ if (v := getattr(change, k)) is not UNSET}
    sets = "".join(f"{k} = ?, " for k in fields)
    where, params = "org_id = ? AND name = ?", [org_id, name]
    if isinstance(change.state, DbState):
        allowed = states.sources(change.state)
        where += f" AND state IN ({', '.join('?' * len(allowed))})"
        params += allowed
    values = [_column(v) for v in fields.values()]
    changed = await run(db, f"UPDATE databases SET {sets}updated_at = ? WHERE {where}", (*values, now, *params))
    if not changed and isinstance(change.state, DbState):
        found = await one(db, "SELECT state FROM databases WHERE org_id = ? AND name = ?", (org_id, name))
        if found is not None:
            raise IllegalTransition(f"database {name}: {found['state']} may not become {change.state}")


async def settle(conn: Db, database: Database, receipt: Receipt, now: float, change: DbChange | None = None) -> None:
    """A generation's receipt as its job progresses (and any columns that change with it): the database's copy
    and the receipts table's, together."""
    await update(
        conn, database.org_id, database.name, now, msgspec.structs.replace(change or DbChange(), receipt=receipt)
    )
    await receipts.rewrite(conn, receipt)


async def accept(
    conn: Db,
    database: Database,
    receipt: Receipt,
    now: float,
    *,
    state: DbState,
    target: DatabaseResources | None = None,
    archive_sha256: str | None = None,
    submission: str | None = None,
) -> None:
    """A new generation: its number, its receipt (here and in the receipts table), the transitional state, and for
    an update the new desired resources and archive."""
    change = DbChange(generation=receipt.generation, state=state, receipt=receipt)
    if target is not None:
        change.target = target
    if archive_sha256 is not None:
        change.archive_sha256 = archive_sha256
    await update(conn, database.org_id, database.name, now, change)
    await receipts.add(conn, database.org_id, receipt, submission)


async def delete(db: Db, org_id: str, name: str) -> None:
    await run(db, "DELETE FROM databases WHERE org_id = ? AND name = ?", (org_id, name))
