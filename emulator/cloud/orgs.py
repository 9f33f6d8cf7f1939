"""Organizations, their databases and API keys: the rules that every surface creating them shares.

Naming rule (spec, "Hosted database naming"): lowercase letters, digits and hyphens, starting and
ending with a letter or digit, at most 29 characters, unique across the platform.
"""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any

from emulator.core.context import Core
from emulator.core.errors import ApiError
from emulator.core.ids import secret_hash

ORG_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,27}[a-z0-9])?$")
DEFAULT_DB = "main"


def check_org_name(name: str) -> None:
    if not ORG_NAME.match(name):
        raise ApiError(
            400,
            "bad_request",
            f"{name!r} is not a valid organization name: use 1 to 29 lowercase letters, digits and hyphens, "
            "starting and ending with a letter or digit",
        )


async def slug_taken(conn: Any, slug: str) -> bool:
    async with conn.execute("SELECT 1 FROM orgs WHERE slug = ?", (slug,)) as cur:
        return await cur.fetchone() is not None


async def create_org(
    core: Core,
    conn: Any,
    slug: str,
    *,
    trial: bool,
    now: float,
    expires_at: float | None = None,
    registration_id: str | None = None,
    network: str | None = None,
    claim_token: str | None = None,
) -> str:
    """Insert an organization with its first database `main`; returns its id. Inside a transaction."""
    check_org_name(slug)
    org_id = core.ids.ident("org_")
    await conn.execute(
        "INSERT INTO orgs (id, slug, trial, state, registration_id, network, claim_token_hash, expires_at, "
        "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            org_id,
            slug,
            int(trial),
            "unclaimed" if trial else "active",
            registration_id,
            network,
            secret_hash(claim_token) if claim_token else None,
            expires_at,
            now,
            now,
        ),
    )
    await conn.execute(
        "INSERT INTO databases (org_id, name, state, created_at, updated_at) VALUES (?, ?, 'AVAILABLE', ?, ?)",
        (org_id, DEFAULT_DB, now, now),
    )
    return org_id


async def create_api_key(
    core: Core,
    conn: Any,
    org_id: str,
    name: str,
    *,
    created_by: str | None,
    now: float,
    grants: list[str] | None = None,
) -> tuple[str, str]:
    """A new API key: (key id, secret). The secret is returned once; only its hash is stored."""
    secret = core.ids.token("pxtk_", 24)
    key_id = core.ids.ident("key_")
    await conn.execute(
        "INSERT INTO api_keys (id, org_id, name, key_hash, key_type, grants, created_by, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            key_id,
            org_id,
            name,
            secret_hash(secret),
            "runtime" if grants else "user",
            json.dumps(grants or []),
            created_by,
            now,
        ),
    )
    return key_id, secret


async def org_by_key(core: Core, secret: str) -> sqlite3.Row | None:
    """The organization an API key belongs to, with the key's id and name (None if no such key)."""
    return await core.store.fetchone(
        "SELECT o.*, k.id AS key_id, k.name AS key_name FROM api_keys k JOIN orgs o ON o.id = k.org_id "
        "WHERE k.key_hash = ?",
        (secret_hash(secret),),
    )


async def expire_trials(core: Core, now: float) -> None:
    """Due job: an unclaimed trial whose 48 hours are over is deleted with everything in it."""
    rows = await core.store.fetchall(
        "SELECT id, slug, expires_at FROM orgs WHERE trial = 1 AND state = 'unclaimed' AND expires_at <= ?",
        (now,),
    )
    for row in rows:
        async with core.store.transaction() as conn:
            # ON DELETE CASCADE takes its databases, keys and memberships with it.
            await conn.execute("DELETE FROM orgs WHERE id = ? AND state = 'unclaimed'", (row["id"],))
        core.bus.publish("trial.expired", row["slug"], org_id=row["id"], expired_at=row["expires_at"])
