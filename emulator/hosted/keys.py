"""API keys: the only SQL of the `api_keys` table, and the grants rule.

A key created without grants acts as its creator (`key_type: user`); a key with grants acts as nobody but
its grants (`runtime`). Grants name resources of the caller's organization:
`access:pxt://org:db`, `access:pxt://org:db/services[/<base_path>/<name>]`, `manage:pxt://org:db/services[/…]`.
Only the hash of a key is stored; its secret is shown once, when it is created.
"""

from __future__ import annotations

import json
import re

import msgspec

from emulator.core.clock import iso
from emulator.core.context import Core
from emulator.core.errors import BAD_REQUEST, CONFLICT, FORBIDDEN, NOT_FOUND
from emulator.core.ids import key_fingerprint, secret_hash
from emulator.core.kinds import Kind
from emulator.core.payloads import CloudKeyCreated, CloudKeyDeleted, CloudKeyUpdated
from emulator.core.store import Db, Outcome, fetch_all, fetch_one, many, one, record, run
from emulator.hosted.records import ApiKey, Org
from emulator.hosted.states import OrgState
from emulator.identity.agents_api import TrialKey

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# A key's secret as the product shapes it: `pxtk_` and an opaque tail (this emulator makes 48 hex digits). The
# tunnel and the gateways recognise a key by that prefix; `pxtk_runtime_` is the hosted workloads' own.
SECRET = re.compile(r"^pxtk_[A-Za-z0-9_]{16,128}$")
RUNTIME_PREFIX = "pxtk_runtime_"
AGENT_REGISTRATION = "agent_reg_"  # a key whose created_by starts so was issued to an agent (its trial's key)
GRANT = re.compile(r"^(access|manage):pxt://([a-z0-9-]+):([a-z0-9_-]+)(/services(/[A-Za-z0-9_./-]+)?)?$")


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise BAD_REQUEST("a key name is 1 to 64 letters, digits, dots, dashes or underscores")
    return name


def check_secret(secret: str) -> str:
    """A fixed secret (a declared state's) must look like the keys the product issues."""
    if not SECRET.match(secret) or secret.startswith(RUNTIME_PREFIX):
        raise BAD_REQUEST(
            "a key's secret is pxtk_ followed by 16 to 128 letters, digits or underscores "
            f"(not {RUNTIME_PREFIX}, which hosted workloads use)",
        )
    return secret


def check_grants(grants: list[str], org: str) -> list[str]:
    for grant in grants:
        m = GRANT.match(grant)
        if m is None:
            raise BAD_REQUEST(
                f"{grant!r} is not a grant: use access:pxt://org:db, access:pxt://org:db/services[/name] "
                "or manage:pxt://org:db/services[/name]",
            )
        if m.group(1) == "manage" and not m.group(4):
            raise BAD_REQUEST(f"{grant!r}: manage applies to services only")
        if m.group(2) != org:
            raise FORBIDDEN(f"{grant!r} names another organization than {org}")
    return list(dict.fromkeys(grants))


async def insert(
    core: Core,
    conn: Db,
    org_id: str,
    name: str,
    *,
    created_by: str | None,
    now: float,
    grants: list[str] | None = None,
    secret: str | None = None,
) -> tuple[str, str]:
    """A new API key: (key id, secret). The secret is returned once; only its hash is stored. A declared state
    gives its own `secret` (checked with `check_secret`); otherwise one is made."""
    secret = secret or core.ids.token("pxtk_", 24)
    key_id = core.ids.ident("key_")
    await run(
        conn,
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


async def owner(db: Db, secret: str) -> tuple[Org, ApiKey] | None:
    """The organization an API key belongs to, and the key (None if no such key)."""
    row = await one(
        db,
        "SELECT o.*, k.id AS key_id, k.name AS key_name, k.key_type, k.grants, k.created_by AS key_created_by, "
        "k.created_at AS key_created_at FROM api_keys k JOIN orgs o ON o.id = k.org_id WHERE k.key_hash = ?",
        (secret_hash(secret),),
    )
    if row is None:
        return None
    key = ApiKey(
        id=row["key_id"],
        org_id=row["id"],
        name=row["key_name"],
        key_type=row["key_type"],
        grants=json.loads(row["grants"]),
        created_by=row["key_created_by"],
        created_at=row["key_created_at"],
    )
    return record(row, Org), key


async def live_owner(db: Db, secret: str) -> tuple[Org, ApiKey] | None:
    """`owner`, for a key presented as a credential: a key issued to an agent registration (a trial's) stops working
    when that registration is revoked or deleted, as everything issued from it does."""
    found = await owner(db, secret)
    if found is None or not (found[1].created_by or "").startswith(AGENT_REGISTRATION):
        return found
    reg = await one(db, "SELECT revoked_at FROM registrations WHERE id = ?", (found[1].created_by,))
    return found if reg is not None and reg["revoked_at"] is None else None


async def trial_key(db: Db, secret: str) -> TrialKey | None:
    """A live key issued to an agent registration, as the identity provider's agents API asks of it (the key's
    registration and, while its trial is unclaimed, when the trial lapses); None for any other key or none."""
    found = await live_owner(db, secret)
    if found is None:
        return None
    org, key = found
    if org.registration_id is None or key.created_by != org.registration_id:
        return None  # a key, but not one an agent was given
    return TrialKey(org.registration_id, org.expires_at if org.state == OrgState.UNCLAIMED else None)


async def named(db: Db, org_id: str, name: str) -> ApiKey | None:
    return await fetch_one(db, ApiKey, "SELECT * FROM api_keys WHERE org_id = ? AND name = ?", (org_id, name))


async def declare(
    core: Core, conn: Db, org_id: str, slug: str, name: str, secret: str, grants: list[str], now: float
) -> Outcome:
    """Make the key `name` of the organization have this fixed secret and these grants (a declared state); inside
    the caller's transaction. A secret that is another key's is refused: key hashes are unique."""
    check_name(name)
    check_secret(secret)
    grants = check_grants(grants, slug)
    existing = await named(conn, org_id, name)
    holder = await owner(conn, secret)
    if holder is not None and (existing is None or holder[1].id != existing.id):
        raise BAD_REQUEST(f"this secret is already the key {holder[1].name} of {holder[0].slug}")
    if existing is None:
        await insert(core, conn, org_id, name, created_by=None, now=now, grants=grants, secret=secret)
        return "created"
    if holder is not None and existing.grants == grants:
        return "unchanged"
    await run(
        conn,
        "UPDATE api_keys SET key_hash = ?, grants = ?, key_type = ? WHERE id = ?",
        (secret_hash(secret), json.dumps(grants), "runtime" if grants else "user", existing.id),
    )
    return "updated"


async def of_org(db: Db, org_id: str) -> list[ApiKey]:
    return await fetch_all(db, ApiKey, "SELECT * FROM api_keys WHERE org_id = ? ORDER BY created_at", (org_id,))


async def create(
    core: Core, org_id: str, slug: str, name: str, grants: list[str], created_by: str | None, by: str
) -> tuple[ApiKey, str]:
    check_name(name)
    grants = check_grants(grants, slug)
    now = core.clock.now()
    async with core.store.transaction() as conn:
        if await fetch_one(conn, ApiKey, "SELECT * FROM api_keys WHERE org_id = ? AND name = ?", (org_id, name)):
            raise CONFLICT(f"{slug} already has a key named {name}")
        key_id, secret = await insert(core, conn, org_id, name, created_by=created_by, now=now, grants=grants)
        key = await fetch_one(conn, ApiKey, "SELECT * FROM api_keys WHERE id = ?", (key_id,))
    assert key is not None
    # The fingerprint names the key in `http.request` events (core.served): traces find its calls by it.
    core.bus.publish(slug, CloudKeyCreated(name=name, grants=grants, by=by, key=key_fingerprint(secret)))
    return key, secret


async def update(core: Core, org_id: str, slug: str, name: str, allow: list[str], revoke: list[str]) -> ApiKey:
    check_name(name)
    allow, revoke = check_grants(allow, slug), check_grants(revoke, slug)
    async with core.store.transaction() as conn:
        key = await fetch_one(conn, ApiKey, "SELECT * FROM api_keys WHERE org_id = ? AND name = ?", (org_id, name))
        if key is None:
            raise NOT_FOUND(f"{slug} has no key named {name}")
        grants = list(dict.fromkeys(g for g in key.grants + allow if g not in revoke))
        await run(
            conn,
            "UPDATE api_keys SET grants = ?, key_type = ? WHERE id = ?",
            (json.dumps(grants), "runtime" if grants else "user", key.id),
        )
        key = await fetch_one(conn, ApiKey, "SELECT * FROM api_keys WHERE id = ?", (key.id,))
    assert key is not None
    core.bus.publish(slug, CloudKeyUpdated(name=name, grants=grants))
    return key


async def delete(core: Core, org_id: str, slug: str, name: str) -> None:
    check_name(name)
    if not await run(core.store, "DELETE FROM api_keys WHERE org_id = ? AND name = ?", (org_id, name)):
        raise NOT_FOUND(f"{slug} has no key named {name}")
    core.bus.publish(slug, CloudKeyDeleted(name=name))


class KeyView(msgspec.Struct):
    """An API key by name; a revoked (deleted) one keeps its name, organization and when it was revoked."""

    org: str
    name: str
    key_type: str | None  # "user" | "runtime"; None for a revoked key
    grants: list[str]
    created_at: str | None
    created_by: str | None
    last_used_at: str | None  # its newest control-plane call in the journal
    revoked_at: str | None


async def listing(db: Db) -> list[KeyView]:
    """Every key as the operator sees it, never its secret or hash: organization, name, type, grants, created (and
    by whom), last used (its newest control-plane call in the journal), and the keys deleted since (`revoked_at`),
    unless a key of that name was made again after."""
    rows = await many(
        db,
        "SELECT k.*, o.slug FROM api_keys k JOIN orgs o ON o.id = k.org_id ORDER BY o.created_at, o.slug, k.created_at",
    )
    used = {
        (r["subject"], r["name"]): r["ts"]
        for r in await many(
            db,
            "SELECT subject, json_extract(data, '$.key') AS name, MAX(ts) AS ts FROM events "
            "WHERE kind = ? AND json_extract(data, '$.key') IS NOT NULL GROUP BY 1, 2",
            (Kind.CLOUD_CALL.value,),
        )
    }
    deleted = await many(
        db,
        "SELECT subject, json_extract(data, '$.name') AS name, MAX(ts) AS ts FROM events WHERE kind = ? "
        "GROUP BY 1, 2 ORDER BY 3",
        (Kind.CLOUD_KEY_DELETED.value,),
    )

    def last_used(org: str, name: str, after: float) -> str | None:
        ts = used.get((org, name))
        return iso(ts) if ts is not None and ts >= after else None

    keys = [
        KeyView(
            org=r["slug"],
            name=r["name"],
            key_type=r["key_type"],
            grants=json.loads(r["grants"]),
            created_at=iso(r["created_at"]),
            created_by=r["created_by"],
            last_used_at=last_used(r["slug"], r["name"], r["created_at"]),
            revoked_at=None,
        )
        for r in rows
    ]
    live = {(r["slug"], r["name"]): r["created_at"] for r in rows}
    for d in deleted:
        made_again = live.get((d["subject"], d["name"]))
        if made_again is not None and made_again >= d["ts"]:
            continue
        keys.append(
            KeyView(
                org=d["subject"],
                name=d["name"],
                key_type=None,
                grants=[],
                created_at=None,
                created_by=None,
                last_used_at=last_used(d["subject"], d["name"], 0.0),
                revoked_at=iso(d["ts"]),
            )
        )
    return keys
