"""Organizations, their databases and API keys: the rules that every surface creating them shares.

Naming rule (spec, "Hosted database naming"): lowercase letters, digits and hyphens, starting and
ending with a letter or digit, at most 29 characters, unique across the platform.
"""

from __future__ import annotations

import json
import re
import sqlite3
from typing import TYPE_CHECKING, Any

from emulator.core.clock import iso
from emulator.core.context import Core
from emulator.core.errors import ApiError
from emulator.core.ids import secret_hash

if TYPE_CHECKING:
    from emulator.cloud.auth import Caller
    from emulator.cloud.context import Cloud

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


async def new_org(
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
    await new_database(core, conn, org_id, DEFAULT_DB, now=now, trial=trial)
    return org_id


# What a database runs on before its first project: the base image, at the plan's default size.
PXT_MD_VERSION = 56
TRIAL_LIMITS = {"cpu": 1.0, "memory_mb": 2048, "workers": 1, "disk_gb": 10}
DEFAULT_RESOURCES = {"cpu": 2.0, "memory_mb": 4096, "workers": 1, "disk_gb": 20}


def base_resources(trial: bool) -> dict[str, Any]:
    size = TRIAL_LIMITS if trial else DEFAULT_RESOURCES
    return {**size, "fingerprint": None, "pxt_md_version": PXT_MD_VERSION, "default_bucket": None}


async def new_database(core: Core, conn: Any, org_id: str, name: str, *, now: float, trial: bool) -> str:
    db_id = core.ids.ident("db_")
    await conn.execute(
        "INSERT INTO databases (org_id, name, id, state, current, created_at, updated_at) "
        "VALUES (?, ?, ?, 'AVAILABLE', ?, ?, ?)",
        (org_id, name, db_id, json.dumps(base_resources(trial)), now, now),
    )
    return db_id


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


# --- operations ---------------------------------------------------------------------------------


async def list_orgs(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    core = cloud.core
    if caller.credential == "api_key":
        where, args = "o.id = ?", (caller.org_id,)
    else:
        where, args = "o.id IN (SELECT org_id FROM org_members WHERE user_id = ?)", (caller.user_id,)
    rows = await core.store.fetchall(
        "SELECT o.id, o.slug, o.created_at, o.updated_at, "
        f"(SELECT name FROM databases d WHERE d.org_id = o.id AND d.name = '{DEFAULT_DB}') AS default_db "
        f"FROM orgs o WHERE {where} ORDER BY o.created_at",
        args,
    )
    return {
        "orgs": [
            {
                "org_id": r["id"],
                "org": r["slug"],
                "default_db": r["default_db"],
                "created_at": r["created_at"],
                "updated_at": r["updated_at"],
            }
            for r in rows
        ]
    }


async def create_org(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    core = cloud.core
    if caller.credential != "session":
        raise ApiError(
            403, "forbidden", "organizations are created by a person: sign in with pxt login, then pxt org create"
        )
    slug = body.get("org")
    if not isinstance(slug, str):
        raise ApiError(400, "bad_request", "org (the organization name) is required")
    check_org_name(slug)
    now = core.clock.now()
    async with core.store.transaction() as conn:
        if await slug_taken(conn, slug):
            raise ApiError(409, "conflict", f"the organization name {slug} is taken")
        org_id = await new_org(core, conn, slug, trial=False, now=now)
        display = body.get("display_name")
        await conn.execute(
            "UPDATE orgs SET display_name = ? WHERE id = ?", (display if isinstance(display, str) else slug, org_id)
        )
        await conn.execute(
            "INSERT INTO org_members (org_id, user_id, role) VALUES (?, ?, 'admin')", (org_id, caller.user_id)
        )
    core.bus.publish("cloud.org_created", slug, org_id=org_id, by=caller.email)
    return {"org_id": org_id, "org": slug, "default_db": DEFAULT_DB, "created_at": iso(now), "updated_at": iso(now)}


OPERATIONS = {"list_orgs": list_orgs, "create_org": create_org}
