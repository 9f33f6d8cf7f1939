"""Log lines of hosted databases and services: the only SQL of the `log_lines` table.

A line is what a workload printed, or a note of the emulator's about it (a build, a restart, a full disk);
each is kept for `get_logs` and the admin API and published live as a `db.log` event.
"""

from __future__ import annotations

from emulator.core import kinds
from emulator.core.context import Core
from emulator.core.payloads import DbLog
from emulator.core.store import Db, fetch_all, run
from emulator.hosted.records import LogLine

MAX_SINCE = 10 * 365 * 86_400  # how far back `get_logs` may look: ten years (lines are never that old)


async def append(
    core: Core, org_id: str, slug: str, db: str, line: str, *, service: str = "", health: bool = False
) -> None:
    """A line of a database's (or, `service`: a service's) log, kept and published."""
    ts_ms = int(core.clock.now() * 1000)
    await core.store.execute(
        "INSERT INTO log_lines (org_id, db, service, ts_ms, line, health) VALUES (?, ?, ?, ?, ?, ?)",
        (org_id, db, service, ts_ms, line, int(health)),
    )
    core.bus.publish(kinds.database(slug, db), DbLog(db=db, service=service or None, line=line))


async def recent(
    db: Db, org_id: str, database: str, service: str, *, since_ms: int, limit: int, health: bool
) -> list[LogLine]:
    """The last `limit` lines of one log since `since_ms`, oldest first (`health`: with health-check lines)."""
    where = "" if health else " AND health = 0"
    return await fetch_all(
        db,
        LogLine,
        "SELECT * FROM (SELECT id, ts_ms, service, line FROM log_lines WHERE org_id = ? AND db = ? AND service = ? "
        f"AND ts_ms >= ?{where} ORDER BY id DESC LIMIT ?) ORDER BY id",
        (org_id, database, service, since_ms, limit),
    )


async def after(db: Db, org_id: str, database: str, since_id: int, limit: int = 5000) -> list[LogLine]:
    """Every line of a database and its services after line `since_id`, oldest first."""
    return await fetch_all(
        db,
        LogLine,
        "SELECT id, ts_ms, service, line FROM log_lines WHERE org_id = ? AND db = ? AND id > ? ORDER BY id LIMIT ?",
        (org_id, database, since_id, limit),
    )


async def delete(db: Db, org_id: str, database: str) -> None:
    await run(db, "DELETE FROM log_lines WHERE org_id = ? AND db = ?", (org_id, database))
