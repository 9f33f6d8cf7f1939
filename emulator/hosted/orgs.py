"""Organizations and their members: the only SQL of the `orgs` and `org_members` tables.

Naming rule (spec, "Hosted database naming"): lowercase letters, digits and hyphens, starting and ending
with a letter or digit, at most 29 characters, unique across the platform. A new organization comes
with its first database, `main`.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from emulator.core.context import Core
from emulator.core.errors import BAD_REQUEST, CONFLICT
from emulator.core.ids import secret_hash
from emulator.core.payloads import CloudOrgCreated
from emulator.core.store import Db, Outcome, fetch_all, fetch_one, many, one, record, run
from emulator.hosted import databases, plans
from emulator.hosted.records import Org
from emulator.hosted.states import MemberRole, OrgState

ORG_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,27}[a-z0-9])?$")


def check_name(name: str, what: str = "organization") -> None:
    if not ORG_NAME.match(name):
        raise BAD_REQUEST(
            f"{name!r} is not a valid {what} name: use 1 to 29 lowercase letters, digits and hyphens, "
            "starting and ending with a letter or digit",
        )


async def slug_taken(db: Db, slug: str) -> bool:
    return await one(db, "SELECT 1 FROM orgs WHERE slug = ?", (slug,)) is not None


async def insert(
    core: Core,
    conn: Db,
    slug: str,
    *,
    trial: bool,
    now: float,
    display_name: str | None = None,
    expires_at: float | None = None,
    registration_id: str | None = None,
    network: str | None = None,
    claim_token: str | None = None,
) -> str:
    """Insert an organization with its first database `main`; returns its id. Inside a transaction."""
    check_name(slug)
    org_id = core.ids.ident("org_")
    await run(
        conn,
        "INSERT INTO orgs (id, slug, display_name, trial, state, registration_id, network, claim_token_hash, "
        "expires_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            org_id,
            slug,
            display_name,
            int(trial),
            OrgState.UNCLAIMED if trial else OrgState.ACTIVE,
            registration_id,
            network,
            secret_hash(claim_token) if claim_token else None,
            expires_at,
            now,
            now,
        ),
    )
    await databases.insert(core, conn, org_id, plans.DEFAULT_DB, now=now, trial=trial)
    return org_id


async def create_for(
    core: Core, slug: str, display_name: str | None, user_id: str, email: str | None
) -> tuple[str, float]:
    """A person's new organization, with the person as its admin: (its id, when)."""
    check_name(slug)
    now = core.clock.now()
    async with core.store.transaction() as conn:
        if await slug_taken(conn, slug):
            raise CONFLICT(f"the organization name {slug} is taken")
        org_id = await insert(core, conn, slug, trial=False, now=now, display_name=display_name or slug)
        await add_member(conn, org_id, user_id, MemberRole.ADMIN)
    core.bus.publish(slug, CloudOrgCreated(org_id=org_id, by=email))
    return org_id, now


async def declare(
    core: Core,
    conn: Db,
    slug: str,
    *,
    trial: bool,
    claimed: bool,
    display_name: str | None,
    expires_at: float | None,
    claim_token: str | None,
    registration_id: str | None,
    now: float,
    exact: bool,
) -> tuple[str, Outcome]:
    """Make the organization `slug` be as a declared state says (its id, and what was done), inside the caller's
    transaction. An unclaimed trial expires at `expires_at`; an existing one keeps its expiry unless `exact` (the
    state declares the clock) or it had lapsed. Whether an organization is a trial is not changed: its databases
    were made on its plan."""
    check_name(slug)
    state = OrgState.ACTIVE if not trial else OrgState.CLAIMED if claimed else OrgState.UNCLAIMED
    token_hash = secret_hash(claim_token) if claim_token and state == OrgState.UNCLAIMED else None
    if token_hash is not None:
        other = await one(conn, "SELECT slug FROM orgs WHERE claim_token_hash = ? AND slug != ?", (token_hash, slug))
        if other is not None:
            raise BAD_REQUEST(f"this claim token is already the claim link of {other['slug']}")
    org = await fetch_one(conn, Org, "SELECT * FROM orgs WHERE slug = ?", (slug,))
    if org is None:
        org_id = await insert(
            core,
            conn,
            slug,
            trial=trial,
            now=now,
            display_name=display_name,
            expires_at=expires_at if state == OrgState.UNCLAIMED else None,
            registration_id=registration_id,
            claim_token=claim_token if token_hash else None,
        )
        if state == OrgState.CLAIMED:
            await claim(conn, org_id, now)
        return org_id, "created"
    if org.trial != trial:
        raise BAD_REQUEST(
            f"the organization {slug} exists and is {'a trial' if org.trial else 'not a trial'}; a declared state "
            "does not change that (reset the emulator first)",
        )
    expiry = expires_at if state == OrgState.UNCLAIMED else None
    if state == org.state == OrgState.UNCLAIMED and not exact and (org.expires_at or 0) > now:
        expiry = org.expires_at  # its time left counts from the apply that made it
    claimed_at = (org.claimed_at or now) if state == OrgState.CLAIMED else None
    row = await one(conn, "SELECT claim_token_hash FROM orgs WHERE id = ?", (org.id,))
    want = (display_name, state, expiry, claimed_at, token_hash, registration_id)
    have = (
        org.display_name,
        org.state,
        org.expires_at,
        org.claimed_at,
        row and row["claim_token_hash"],
        org.registration_id,
    )
    if want == have:
        return org.id, "unchanged"
    await run(
        conn,
        "UPDATE orgs SET display_name = ?, state = ?, expires_at = ?, claimed_at = ?, claim_token_hash = ?, "
        "registration_id = ?, updated_at = ? WHERE id = ?",
        (*want, now, org.id),
    )
    return org.id, "updated"


async def set_member(conn: Db, org_id: str, user_id: str, role: str) -> bool:
    """The person is a member of the organization with this role (a declared state); whether anything changed."""
    changed = await run(
        conn,
        "INSERT INTO org_members (org_id, user_id, role) VALUES (?, ?, ?) "
        "ON CONFLICT (org_id, user_id) DO UPDATE SET role = excluded.role WHERE role != excluded.role",
        (org_id, user_id, role),
    )
    return changed > 0


async def get(db: Db, org_id: str) -> Org | None:
    return await fetch_one(db, Org, "SELECT * FROM orgs WHERE id = ?", (org_id,))


async def find(db: Db, ref: str) -> Org | None:
    """An organization by slug or id."""
    return await fetch_one(db, Org, "SELECT * FROM orgs WHERE slug = ? OR id = ?", (ref, ref))


async def by_claim_token(db: Db, token: str) -> Org | None:
    return await fetch_one(db, Org, "SELECT * FROM orgs WHERE claim_token_hash = ?", (secret_hash(token),))


async def add_member(conn: Db, org_id: str, user_id: str, role: MemberRole = MemberRole.ADMIN) -> None:
    await run(
        conn, "INSERT OR IGNORE INTO org_members (org_id, user_id, role) VALUES (?, ?, ?)", (org_id, user_id, role)
    )


async def member_org(db: Db, user_id: str, ref: str) -> Org | None:
    """The organization (by id or slug) if the person is a member of it."""
    return await fetch_one(
        db,
        Org,
        "SELECT o.* FROM orgs o JOIN org_members m ON m.org_id = o.id WHERE m.user_id = ? AND (o.id = ? OR o.slug = ?)",
        (user_id, ref, ref),
    )


async def memberships(db: Db, user_id: str) -> list[str]:
    """The ids of the organizations a person belongs to."""
    return [r["org_id"] for r in await many(db, "SELECT org_id FROM org_members WHERE user_id = ?", (user_id,))]


async def listed(db: Db, *, org_id: str | None = None, user_id: str | None = None) -> list[tuple[Org, str | None]]:
    """(organization, its default database if it still has one) for one organization or a person's, oldest first."""
    if org_id is not None:
        where, args = "o.id = ?", (org_id,)
    else:
        where, args = "o.id IN (SELECT org_id FROM org_members WHERE user_id = ?)", (user_id,)
    rows = await many(
        db,
        "SELECT o.*, (SELECT name FROM databases d WHERE d.org_id = o.id AND d.name = ?) AS default_db "
        f"FROM orgs o WHERE {where} ORDER BY o.created_at",
        (plans.DEFAULT_DB, *args),
    )
    return [(record(r, Org), r["default_db"]) for r in rows]


async def claim(conn: Db, org_id: str, now: float) -> None:
    """The trial is a person's now: it stops expiring and its claim link stops working."""
    await run(
        conn,
        "UPDATE orgs SET state = ?, expires_at = NULL, claimed_at = ?, updated_at = ?, "
        "claim_token_hash = NULL WHERE id = ?",
        (OrgState.CLAIMED, now, now, org_id),
    )


async def unclaimed_counts(conn: Db, network: str) -> tuple[int, int]:
    """(unclaimed trials on the platform, unclaimed trials of this network)."""
    row = await one(
        conn,
        "SELECT COUNT(*) AS n, SUM(network = ?) AS mine FROM orgs WHERE trial = 1 AND state = ?",
        (network, OrgState.UNCLAIMED),
    )
    return (row["n"], row["mine"] or 0) if row else (0, 0)


async def lapsed_trials(db: Db, now: float) -> list[Org]:
    return await fetch_all(
        db, Org, "SELECT * FROM orgs WHERE trial = 1 AND state = ? AND expires_at <= ?", (OrgState.UNCLAIMED, now)
    )


async def delete_unclaimed(conn: Db, org_id: str) -> bool:
    """Delete a still-unclaimed trial; ON DELETE CASCADE takes its databases, keys and memberships with it."""
    return await run(conn, "DELETE FROM orgs WHERE id = ? AND state = ?", (org_id, OrgState.UNCLAIMED)) > 0


class OrgSummary(msgspec.Struct, kw_only=True):
    """An organization with its key names and admins, for the operator's views."""

    org: Org
    api_keys: list[str]
    admins: list[str]


async def summaries(db: Db, *, trials_only: bool = False) -> list[OrgSummary]:
    rows = await many(
        db,
        "SELECT o.*, "
        "(SELECT json_group_array(name) FROM (SELECT name FROM api_keys k WHERE k.org_id = o.id "
        "ORDER BY k.created_at)) AS key_names, "
        "(SELECT json_group_array(email) FROM (SELECT u.email FROM org_members m JOIN users u ON u.id = m.user_id "
        "WHERE m.org_id = o.id AND m.role = ? ORDER BY u.email)) AS admin_emails "
        f"FROM orgs o {'WHERE o.trial = 1 ' if trials_only else ''}ORDER BY o.created_at, o.slug",
        (MemberRole.ADMIN,),
    )

    def names(raw: Any) -> list[str]:
        return [n for n in msgspec.json.decode(raw or "[]") if n is not None]

    return [
        OrgSummary(org=record(r, Org), api_keys=names(r["key_names"]), admins=names(r["admin_emails"])) for r in rows
    ]
