"""Provider secrets: the only SQL of the `secrets` table.

They reach a database's (and its services') processes as environment variables read once at start, so a
new value is seen only after `db restart` / `service restart`. Unlike credentials they must be readable
again, so they are encrypted at rest (secretbox.py), never logged, never listed.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import msgspec

from emulator.core.context import Core
from emulator.core.errors import BAD_REQUEST, NOT_FOUND
from emulator.core.payloads import CloudSecretDeleted, CloudSecretSet
from emulator.core.secretbox import SecretBox
from emulator.core.store import Db, Outcome, many, one, run

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# A value reaches a process as one environment variable, and Linux refuses one over 128 KiB (and an environment
# of a few MiB) at exec: refuse it here, where the person can still act on it, not at the next start.
MAX_VALUE = 64 * 1024
MAX_TOTAL = 1024 * 1024  # all of an organization's secrets, org-wide and per database


def check_key(key: str) -> str:
    if not _KEY.match(key):
        raise BAD_REQUEST("a secret name is a letter or underscore, then letters, digits, underscores")
    if key.upper().startswith("PIXELTABLE_"):
        raise BAD_REQUEST(f"Invalid secret name {key!r}: the PIXELTABLE_ prefix is reserved.")
    return key


def check_value(key: str, value: str) -> int:
    """The value's size in bytes, refused beyond MAX_VALUE."""
    size = len(value.encode())
    if size > MAX_VALUE:
        raise BAD_REQUEST(
            f"the value of {key} is {size // 1024} KiB; a secret is at most {MAX_VALUE // 1024} KiB "
            "(it reaches the processes as an environment variable)",
        )
    return size


async def _check_total(conn: Db, box: SecretBox, org_id: str, slug: str, db: str, key: str, size: int) -> None:
    """The organization's secrets with this one at `size` must stay within MAX_TOTAL (inside the write)."""
    others = await many(
        conn, "SELECT value FROM secrets WHERE org_id = ? AND NOT (db = ? AND key = ?)", (org_id, db, key)
    )
    total = size + sum(len(box.open(r["value"]).encode()) for r in others)
    if total > MAX_TOTAL:
        raise BAD_REQUEST(
            f"{slug}'s secrets would hold {total // 1024} KiB; an organization's secrets hold at most "
            f"{MAX_TOTAL // 1024} KiB together (they reach the processes as environment variables)",
        )


async def _write(conn: Db, box: SecretBox, org_id: str, db: str, key: str, value: str, now: float) -> int:
    """Insert or replace the secret with the next revision; returns it."""
    row = await one(conn, "SELECT revision FROM secrets WHERE org_id = ? AND db = ? AND key = ?", (org_id, db, key))
    revision = (row["revision"] if row else 0) + 1
    await run(
        conn,
        "INSERT INTO secrets (org_id, db, key, value, revision, updated_at) VALUES (?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (org_id, db, key) DO UPDATE SET value = excluded.value, revision = excluded.revision, "
        "updated_at = excluded.updated_at",
        (org_id, db, key, box.seal(value), revision, now),
    )
    return revision


async def set_value(core: Core, box: SecretBox, org_id: str, slug: str, db: str, key: str, value: str) -> int:
    """Set a secret of the organization (`db` "") or of one database; returns its new revision."""
    size = check_value(key, value)
    now = core.clock.now()
    async with core.store.transaction() as conn:
        await _check_total(conn, box, org_id, slug, db, key, size)
        revision = await _write(conn, box, org_id, db, key, value, now)
    core.bus.publish(slug, CloudSecretSet(key=key, db=db or None, revision=revision))
    return revision


async def declare(
    conn: Db, box: SecretBox, org_id: str, slug: str, db: str, key: str, value: str, now: float
) -> Outcome:
    """Make the secret hold `value` (a declared state), inside the caller's transaction; the same value already there
    is left alone, revision included, so applying a state twice changes nothing."""
    check_key(key)
    size = check_value(key, value)
    row = await one(conn, "SELECT value FROM secrets WHERE org_id = ? AND db = ? AND key = ?", (org_id, db, key))
    if row is not None and box.open(row["value"]) == value:
        return "unchanged"
    await _check_total(conn, box, org_id, slug, db, key, size)
    await _write(conn, box, org_id, db, key, value, now)
    return "created" if row is None else "updated"


async def delete(core: Core, org_id: str, slug: str, db: str, key: str) -> None:
    if not await run(core.store, "DELETE FROM secrets WHERE org_id = ? AND db = ? AND key = ?", (org_id, db, key)):
        raise NOT_FOUND(f"no secret {key} in {slug}{':' + db if db else ''}")
    core.bus.publish(slug, CloudSecretDeleted(key=key, db=db or None))


async def names(core: Core, org_id: str, db: str | None) -> list[tuple[str, str]]:
    """(key, db) of the organization's secrets: all of them, or the org-wide ones and one database's."""
    if db is not None:
        rows = await many(
            core.store, "SELECT key, db FROM secrets WHERE org_id = ? AND db IN ('', ?) ORDER BY db, key", (org_id, db)
        )
    else:
        rows = await many(core.store, "SELECT key, db FROM secrets WHERE org_id = ? ORDER BY db, key", (org_id,))
    return [(r["key"], r["db"]) for r in rows]


class SecretView(msgspec.Struct):
    """A secret as the operator sees it: where it is set and its name, never its value; `watched`: whether the value
    equals the watched value of the same name (core/watch.py), None when no value of that name is watched."""

    org: str
    db: str | None  # None: org-wide
    key: str
    revision: int
    watched: bool | None


async def listing(core: Core, box: SecretBox, same: Callable[[str, str], bool | None]) -> list[SecretView]:
    """Every organization's secrets; each value is opened only to be compared here, by `same(key, value)`."""
    rows = await many(
        core.store,
        "SELECT o.slug, s.db, s.key, s.value, s.revision FROM secrets s JOIN orgs o ON o.id = s.org_id "
        "ORDER BY o.slug, s.db, s.key",
        (),
    )
    return [
        SecretView(r["slug"], r["db"] or None, r["key"], r["revision"], same(r["key"], box.open(r["value"])))
        for r in rows
    ]


async def environment(core: Core, box: SecretBox, org_id: str, db: str) -> dict[str, str]:
    """The secrets a process of this database reads at start: org-wide ones, then the database's own."""
    rows = await many(
        core.store,
        "SELECT key, value FROM secrets WHERE org_id = ? AND db IN ('', ?) ORDER BY db = '' DESC",
        (org_id, db),
    )
    return {r["key"]: box.open(r["value"]) for r in rows}
