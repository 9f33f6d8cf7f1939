"""The SQLite store: one file in the state directory, WAL mode, numbered migrations.

All writes go through one aiosqlite connection and `transaction()` (or `write()`, a transaction run whole on
the connection's thread), one transaction per state change,
so a crash never leaves half an operation. Reads outside a transaction (`fetchone`, `fetchall`) go to a
second connection and see only committed rows. Hot read paths that must not pay the thread hop (the docs
search) open their own read-only connection with `reader()`; WAL lets them read while writes go on.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from emulator.core.tasks import until_stopped

_T = TypeVar("_T")
BACKUP_PAGES = 4096  # a backup's step (16 MiB of 4 KiB pages): a stop ends it between two


class BackupStopped(Exception):
    pass


_MIGRATION = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


def migrations() -> list[tuple[int, str, str]]:
    """(number, name, sql) of every migration shipped with the package, in order."""
    folder = resources.files("emulator.core.store") / "migrations"
    found: list[tuple[int, str, str]] = []
    for entry in folder.iterdir():
        m = _MIGRATION.match(entry.name)
        if m:
            found.append((int(m.group(1)), entry.name, entry.read_text()))
    return sorted(found)


class Store:
    """One writer connection, whose transactions are serialized, and one reader connection: a read outside a
    transaction sees only what is committed, never the rows of a transaction still in progress (which may yet
    roll back). A read that must see its own transaction's writes runs on that transaction's connection."""

    def __init__(self, path: Path, conn: aiosqlite.Connection, reader: aiosqlite.Connection) -> None:
        self.path = path
        self._conn = conn
        self._read = reader
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: Path) -> Store:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = await _connect(path, "journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON")
        store = cls(path, conn, await _connect(path, "query_only=ON"))
        await store._migrate()
        return store

    async def _migrate(self) -> None:
        async with self._conn.execute("PRAGMA user_version") as cur:
            row = await cur.fetchone()
        current = row[0] if row else 0
        pending = [m for m in migrations() if m[0] > current]
        if not pending:
            return
        # Foreign keys off while migrations run (SQLite's way to rebuild a table others refer to: dropping it with
        # them on would delete the rows that refer to it), checked before each one commits.
        await self._conn.execute("PRAGMA foreign_keys = OFF")
        try:
            for number, name, sql in pending:
                try:
                    await self._conn.executescript(f"BEGIN IMMEDIATE;\n{sql}\nPRAGMA user_version = {number};\n")
                    async with self._conn.execute("PRAGMA foreign_key_check") as cur:
                        broken = list(await cur.fetchall())
                    if broken:
                        raise sqlite3.IntegrityError(f"{len(broken)} rows refer to rows that are gone")
                    await self._conn.execute("COMMIT")
                except sqlite3.Error as e:
                    if self._conn.in_transaction:
                        await self._conn.execute("ROLLBACK")
                    raise RuntimeError(f"migration {name} failed: {e}") from e
        finally:
            await self._conn.execute("PRAGMA foreign_keys = ON")

    async def close(self) -> None:
        await self._read.close()
        await self._conn.close()

    @asynccontextmanager
    async def transaction(self) -> AsyncGenerator[aiosqlite.Connection, None]:
        """One write transaction; everything inside commits together or not at all."""
        async with self._lock:
            await self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                await self._conn.execute("ROLLBACK")
                raise
            else:
                await self._conn.execute("COMMIT")

    async def write(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """`work(connection)` as one write transaction, run whole on the writer's thread: one round trip instead of
        one per statement (BEGIN, each statement, COMMIT). The writer is one connection whose transactions take
        turns, so short ones are what keeps many concurrent writers (token exchanges, the journal) fast."""

        def run(db: sqlite3.Connection) -> _T:
            db.execute("BEGIN IMMEDIATE")
            try:
                result = work(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result

        async with self._lock:
            return await _on_its_thread(self._conn, run)

    async def execute(self, sql: str, params: Iterable[Any] = ()) -> int:
        """A single-statement write in its own transaction; returns the rows changed."""
        args = tuple(params)
        return await self.write(lambda db: db.execute(sql, args).rowcount)

    async def fetchone(self, sql: str, params: Iterable[Any] = ()) -> sqlite3.Row | None:
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None

    async def fetchall(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        # One call on the reader's thread, run to its end: two reads interleaved on one connection would share the
        # first one's snapshot, and the second could miss a row committed in between.
        return list(await self._read.execute_fetchall(sql, tuple(params)))

    async def wipe(self, keep: tuple[str, ...]) -> None:
        """Delete every row of every table but those whose names start with one of `keep` (the FTS shadows of a
        kept table included), in one transaction. Foreign keys are checked at the commit, when all are empty."""
        rows = await self.fetchall("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        tables = [r["name"] for r in rows if not r["name"].startswith(keep)]
        async with self.transaction() as conn:
            await conn.execute("PRAGMA defer_foreign_keys = ON")
            for table in tables:
                await conn.execute(f'DELETE FROM "{table}"')

    async def backup_to(self, path: Path) -> None:
        """A consistent copy of the committed store in a new file, through SQLite's backup API (a file copy of a
        live WAL database may catch it mid-checkpoint). Taken under the write lock: no transaction runs meanwhile."""
        stop = threading.Event()

        def progress(_status: int, _remaining: int, _total: int) -> None:
            if stop.is_set():  # the emulator stopping: the backup ends at this step (sqlite3 ends it on a raise)
                raise BackupStopped

        async with self._lock:
            target = await aiosqlite.connect(path, isolation_level=None)
            try:
                copying = self._conn.backup(target, pages=BACKUP_PAGES, progress=progress, sleep=0)
                await until_stopped(copying, stop)
                await target.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
            finally:
                await target.close()

    async def schema_version(self) -> int:
        row = await self.fetchone("PRAGMA user_version")
        return int(row[0]) if row else 0

    async def restore_from(self, path: Path, keep: tuple[str, ...], skip: tuple[str, ...] = ()) -> None:
        """Make every table but those named in `keep` (a prefix) hold exactly the rows it has in the store file at
        `path` (same schema), in one transaction; tables named in `skip` are emptied instead. Either all of it
        happens or none."""
        rows = await self.fetchall("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        tables = [r["name"] for r in rows if not r["name"].startswith(keep)]
        async with self._lock:
            # ATTACH cannot run inside a transaction; nothing else writes while the lock is held.
            await self._conn.execute("ATTACH DATABASE ? AS snap", (str(path),))
            try:
                await self._conn.execute("BEGIN IMMEDIATE")
                try:
                    await self._conn.execute("PRAGMA defer_foreign_keys = ON")
                    for table in tables:
                        await self._conn.execute(f'DELETE FROM main."{table}"')
                        if table in skip:
                            continue
                        async with self._conn.execute(f'PRAGMA main.table_info("{table}")') as cur:
                            cols = ", ".join(f'"{c[1]}"' for c in await cur.fetchall())
                        await self._conn.execute(
                            f'INSERT INTO main."{table}" ({cols}) SELECT {cols} FROM snap."{table}"'
                        )
                except BaseException:
                    await self._conn.execute("ROLLBACK")
                    raise
                else:
                    await self._conn.execute("COMMIT")
            finally:
                await self._conn.execute("DETACH DATABASE snap")

    async def get_meta(self, key: str) -> str | None:
        row = await self.fetchone("SELECT value FROM meta WHERE key = ?", (key,))
        return row["value"] if row else None

    async def set_meta(self, key: str, value: str) -> None:
        await self.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def reader(self) -> sqlite3.Connection:
        """A read-only connection for use on the event loop thread (microsecond queries only)."""
        conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        return conn


def _on_its_thread(conn: aiosqlite.Connection, work: Callable[[sqlite3.Connection], _T]) -> Awaitable[_T]:
    """`work(connection)` queued on aiosqlite's own thread, given its sqlite3 connection, as its own methods are.
    aiosqlite has no public name for this (its `_execute`, untyped, and `_conn`): the one place the store reaches in,
    typed here, by name (attribute access would be a private member's use)."""
    execute: Callable[[Callable[[sqlite3.Connection], _T], sqlite3.Connection], Awaitable[_T]]
    execute = getattr(conn, "_execute")  # noqa: B009 (see above)
    raw: sqlite3.Connection = getattr(conn, "_conn")  # noqa: B009
    return execute(work, raw)


async def _connect(path: Path, *pragmas: str) -> aiosqlite.Connection:
    conn = await aiosqlite.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    for pragma in (*pragmas, "busy_timeout=5000"):
        await conn.execute(f"PRAGMA {pragma}")
    return conn


Db = Store | aiosqlite.Connection
"""Where a query runs: the store (a read, or a write in a transaction of its own) or the connection of a
transaction in progress (reads and writes that must commit together)."""


async def one(db: Db, sql: str, params: Iterable[Any] = ()) -> sqlite3.Row | None:
    if isinstance(db, Store):
        return await db.fetchone(sql, params)
    async with db.execute(sql, tuple(params)) as cur:
        return await cur.fetchone()


async def many(db: Db, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
    if isinstance(db, Store):
        return await db.fetchall(sql, params)
    async with db.execute(sql, tuple(params)) as cur:
        return list(await cur.fetchall())


async def run(db: Db, sql: str, params: Iterable[Any] = ()) -> int:
    """A write; returns the rows changed."""
    if isinstance(db, Store):
        return await db.execute(sql, params)
    cur = await db.execute(sql, tuple(params))
    return cur.rowcount
