"""Provider secrets: `set_secret`, `delete_secret`, `list_all_secrets`.

They reach a database's (and its services') processes as environment variables read once at start, so a
new value is seen only after `db restart` / `service restart`. Unlike credentials they must be readable
again, so they are encrypted at rest (Fernet, key in `<state-dir>/keys/`), never logged, never listed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet

from emulator.cloud.auth import Caller, resolve_org
from emulator.cloud.context import Cloud
from emulator.core.errors import ApiError

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class SecretBox:
    def __init__(self, fernet: Fernet) -> None:
        self._fernet = fernet

    @classmethod
    def load_or_create(cls, state_dir: Path) -> SecretBox:
        path = state_dir / "keys" / "secrets.fernet"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(Fernet.generate_key())
        return cls(Fernet(path.read_bytes()))

    def seal(self, value: str) -> bytes:
        return self._fernet.encrypt(value.encode())

    def open(self, token: bytes) -> str:
        return self._fernet.decrypt(token).decode()


def _key(body: dict[str, Any]) -> str:
    key = body.get("key")
    if not isinstance(key, str) or not _KEY.match(key):
        raise ApiError(400, "bad_request", "a secret name is a letter or underscore, then letters, digits, underscores")
    if key.upper().startswith("PIXELTABLE_"):
        raise ApiError(400, "bad_request", f"Invalid secret name {key!r}: the PIXELTABLE_ prefix is reserved.")
    return key


async def _db(cloud: Cloud, org_id: str, slug: str, db: Any) -> str:
    if db is None:
        return ""
    if not isinstance(db, str):
        raise ApiError(400, "bad_request", "db must be a string")
    row = await cloud.core.store.fetchone("SELECT 1 FROM databases WHERE org_id = ? AND name = ?", (org_id, db))
    if row is None:
        raise ApiError(404, "not_found", f"database {db} does not exist in {slug}")
    return db


async def set_secret(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    org_id, slug = await resolve_org(cloud.core, caller, body.get("org"))
    db = await _db(cloud, org_id, slug, body.get("db"))
    key = _key(body)
    value = body.get("value")
    if not isinstance(value, str):
        raise ApiError(400, "bad_request", "value must be a string")
    now = cloud.core.clock.now()
    async with cloud.core.store.transaction() as conn:
        async with conn.execute(
            "SELECT revision FROM secrets WHERE org_id = ? AND db = ? AND key = ?", (org_id, db, key)
        ) as cur:
            row = await cur.fetchone()
        revision = (row["revision"] if row else 0) + 1
        await conn.execute(
            "INSERT INTO secrets (org_id, db, key, value, revision, updated_at) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (org_id, db, key) DO UPDATE SET value = excluded.value, revision = excluded.revision, "
            "updated_at = excluded.updated_at",
            (org_id, db, key, cloud.secret_box.seal(value), revision, now),
        )
    cloud.core.bus.publish("cloud.secret_set", slug, key=key, db=db or None, revision=revision)
    return {"key": key, "revision": revision}


async def delete_secret(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    org_id, slug = await resolve_org(cloud.core, caller, body.get("org"))
    db = await _db(cloud, org_id, slug, body.get("db"))
    key = _key(body)
    if not await cloud.core.store.execute(
        "DELETE FROM secrets WHERE org_id = ? AND db = ? AND key = ?", (org_id, db, key)
    ):
        raise ApiError(404, "not_found", f"no secret {key} in {slug}{':' + db if db else ''}")
    cloud.core.bus.publish("cloud.secret_deleted", slug, key=key, db=db or None)
    return {"key": key, "revision": None}


async def list_all_secrets(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    org_id, slug = await resolve_org(cloud.core, caller, body.get("org"))
    db = body.get("db")
    if db is not None:
        await _db(cloud, org_id, slug, db)
        rows = await cloud.core.store.fetchall(
            "SELECT key, db FROM secrets WHERE org_id = ? AND db IN ('', ?) ORDER BY db, key", (org_id, db)
        )
    else:
        rows = await cloud.core.store.fetchall(
            "SELECT key, db FROM secrets WHERE org_id = ? ORDER BY db, key", (org_id,)
        )
    return {"org": slug, "secrets": [{"key": r["key"], "db": r["db"] or None} for r in rows]}


async def environment(cloud: Cloud, org_id: str, db: str) -> dict[str, str]:
    """The secrets a process of this database reads at start: org-wide ones, then the database's own."""
    rows = await cloud.core.store.fetchall(
        "SELECT key, value FROM secrets WHERE org_id = ? AND db IN ('', ?) ORDER BY db = '' DESC", (org_id, db)
    )
    return {r["key"]: cloud.secret_box.open(r["value"]) for r in rows}


OPERATIONS = {"set_secret": set_secret, "delete_secret": delete_secret, "list_all_secrets": list_all_secrets}
