"""API keys: `create_key`, `list_keys`, `update_key`, `delete_key`. The credential decides the organization.

A key created without grants acts as its creator (`key_type: user`); a key with grants acts as nobody but
its grants (`runtime`). Grants name resources of the caller's organization:
`access:pxt://org:db`, `access:pxt://org:db/services[/<base_path>/<name>]`, `manage:pxt://org:db/services[/…]`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from emulator.cloud import orgs
from emulator.cloud.auth import Caller, resolve_org
from emulator.cloud.context import Cloud
from emulator.core.clock import iso
from emulator.core.errors import ApiError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_GRANT = re.compile(r"^(access|manage):pxt://([a-z0-9-]+):([a-z0-9_-]+)(/services(/[A-Za-z0-9_./-]+)?)?$")


def _check_grants(grants: Any, org: str) -> list[str]:
    if not isinstance(grants, list) or not all(isinstance(g, str) for g in grants):
        raise ApiError(400, "bad_request", "grants must be a list of strings")
    for grant in grants:
        m = _GRANT.match(grant)
        if m is None:
            raise ApiError(
                400,
                "bad_request",
                f"{grant!r} is not a grant: use access:pxt://org:db, access:pxt://org:db/services[/name] "
                "or manage:pxt://org:db/services[/name]",
            )
        if m.group(1) == "manage" and not m.group(4):
            raise ApiError(400, "bad_request", f"{grant!r}: manage applies to services only")
        if m.group(2) != org:
            raise ApiError(403, "forbidden", f"{grant!r} names another organization than {org}")
    return list(dict.fromkeys(grants))


def _record(row: Any, secret: str | None = None) -> dict[str, Any]:
    return {
        "name": row["name"],
        "key_type": row["key_type"],
        "grants": json.loads(row["grants"]),
        "created_at": iso(row["created_at"]),
        "created_by": row["created_by"] or "",
        "api_key": secret,
    }


def _name(body: dict[str, Any]) -> str:
    name = body.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ApiError(400, "bad_request", "a key name is 1 to 64 letters, digits, dots, dashes or underscores")
    return name


async def create_key(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    org_id, slug = await resolve_org(cloud.core, caller, None)
    name = _name(body)
    grants = _check_grants(body.get("grants", []), slug)
    now = cloud.core.clock.now()
    async with cloud.core.store.transaction() as conn:
        async with conn.execute("SELECT 1 FROM api_keys WHERE org_id = ? AND name = ?", (org_id, name)) as cur:
            if await cur.fetchone():
                raise ApiError(409, "conflict", f"{slug} already has a key named {name}")
        key_id, secret = await orgs.create_api_key(
            cloud.core, conn, org_id, name, created_by=caller.email or caller.key_name, now=now, grants=grants
        )
        async with conn.execute("SELECT * FROM api_keys WHERE id = ?", (key_id,)) as cur:
            row = await cur.fetchone()
    cloud.core.bus.publish("cloud.key_created", slug, name=name, grants=grants, by=caller.label)
    return {"key": _record(row, secret)}


async def list_keys(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    org_id, _ = await resolve_org(cloud.core, caller, None)
    rows = await cloud.core.store.fetchall("SELECT * FROM api_keys WHERE org_id = ? ORDER BY created_at", (org_id,))
    return {"keys": [_record(r) for r in rows]}


async def update_key(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    org_id, slug = await resolve_org(cloud.core, caller, None)
    name = _name(body)
    allow = _check_grants(body.get("allow", []), slug)
    revoke = _check_grants(body.get("revoke", []), slug)
    async with cloud.core.store.transaction() as conn:
        async with conn.execute("SELECT * FROM api_keys WHERE org_id = ? AND name = ?", (org_id, name)) as cur:
            row = await cur.fetchone()
        if row is None:
            raise ApiError(404, "not_found", f"{slug} has no key named {name}")
        grants = [g for g in json.loads(row["grants"]) + allow if g not in revoke]
        grants = list(dict.fromkeys(grants))
        await conn.execute(
            "UPDATE api_keys SET grants = ?, key_type = ? WHERE id = ?",
            (json.dumps(grants), "runtime" if grants else "user", row["id"]),
        )
        async with conn.execute("SELECT * FROM api_keys WHERE id = ?", (row["id"],)) as cur:
            row = await cur.fetchone()
    cloud.core.bus.publish("cloud.key_updated", slug, name=name, grants=grants)
    return {"key": _record(row)}


async def delete_key(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    org_id, slug = await resolve_org(cloud.core, caller, None)
    name = _name(body)
    deleted = await cloud.core.store.execute("DELETE FROM api_keys WHERE org_id = ? AND name = ?", (org_id, name))
    if not deleted:
        raise ApiError(404, "not_found", f"{slug} has no key named {name}")
    cloud.core.bus.publish("cloud.key_deleted", slug, name=name)
    return {"name": name}


OPERATIONS = {"create_key": create_key, "list_keys": list_keys, "update_key": update_key, "delete_key": delete_key}
