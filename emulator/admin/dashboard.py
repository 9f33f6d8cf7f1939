"""`/_emulator/*` snapshots and operator acts that the dashboard (`emulator tui`) and the CLI use.

Each snapshot is one small collection (organizations with their databases, services, pending claims), so a
client that learns from the event stream what changed fetches only that collection, never the whole state.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, get, post

from emulator.cloud import databases
from emulator.cloud.auth import Caller
from emulator.core.clock import iso
from emulator.core.errors import ApiError
from emulator.site.state import Site, site_of

_encode = msgspec.json.Encoder().encode


def _json(value: Any) -> Response[bytes]:
    return Response(_encode(value), media_type="application/json")


def _names(raw: str | None) -> list[str]:
    return [n for n in msgspec.json.decode(raw or "[]") if n is not None]


@get("/_emulator/orgs")
async def orgs_list(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Every organization (trial or not) with its API key names, admins and databases."""
    site = site_of(request)
    store = site.core.store
    now = site.core.clock.now()
    rows = await store.fetchall(
        "SELECT o.*, "
        "(SELECT json_group_array(name) FROM (SELECT name FROM api_keys k WHERE k.org_id = o.id "
        "ORDER BY k.created_at)) AS keys, "
        "(SELECT json_group_array(email) FROM (SELECT u.email FROM org_members m JOIN users u ON u.id = m.user_id "
        "WHERE m.org_id = o.id AND m.role = 'admin' ORDER BY u.email)) AS admins "
        "FROM orgs o ORDER BY o.created_at, o.slug"
    )
    dbs = await store.fetchall("SELECT * FROM databases ORDER BY created_at, name")
    runtime = site.cloud.runtime if site.cloud else None
    by_org: dict[str, list[dict[str, Any]]] = {}
    for d in dbs:
        by_org.setdefault(d["org_id"], []).append(
            {
                "db": d["name"],
                "state": d["state"],
                "generation": d["generation"],
                "environment": (d["env_digest"] or "")[:12] or None,
                "failure_reason": d["failure_reason"],
                "server": runtime.status(d["org_id"], d["name"]) if runtime else None,
                "gateway_port": d["gateway_port"],
                "updated_at": iso(d["updated_at"]),
            }
        )
    return _json(
        {
            "now": now,
            "orgs": [
                {
                    "org": r["slug"],
                    "org_id": r["id"],
                    "trial": bool(r["trial"]),
                    "state": r["state"],
                    "registration": r["registration_id"],
                    "created_at": iso(r["created_at"]),
                    "expires_at": iso(r["expires_at"]) if r["expires_at"] else None,
                    "expires_ts": r["expires_at"],
                    "seconds_left": max(0, int(r["expires_at"] - now)) if r["expires_at"] else None,
                    "api_keys": _names(r["keys"]),
                    "admins": _names(r["admins"]),
                    "databases": by_org.get(r["id"], []),
                }
                for r in rows
            ],
        }
    )


@get("/_emulator/services")
async def services_list(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Every hosted service instance, with its state and, while its gateway runs, its endpoint."""
    site = site_of(request)
    runtime = site.cloud.runtime if site.cloud else None
    rows = await site.core.store.fetchall(
        "SELECT s.*, o.slug FROM services s JOIN orgs o ON o.id = s.org_id ORDER BY o.slug, s.db, s.base_path, s.name"
    )
    return _json(
        {
            "services": [
                {
                    "org": r["slug"],
                    "db": r["db"],
                    "service": r["name"],
                    "base_path": r["base_path"],
                    "state": r["state"],
                    "generation": r["generation"],
                    "endpoint": (runtime.endpoint(r["org_id"], r["db"], r["base_path"], r["name"]) or None)
                    if runtime
                    else None,
                    "error": r["error"],
                    "updated_at": iso(r["updated_at"]),
                }
                for r in rows
            ]
        }
    )


@get("/_emulator/claims")
async def claims_pending(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Claim attempts a person can still act on: `pending` (not yet approved) or `confirmed` (code shown)."""
    core = site_of(request).core
    rows = await core.store.fetchall(
        "SELECT a.registration_id, a.login_hint, a.state, a.email, a.expires_at FROM claim_attempts a "
        "JOIN registrations r ON r.id = a.registration_id WHERE r.status = 'registered' "
        "AND a.state IN ('pending', 'confirmed') AND a.expires_at > ? ORDER BY a.created_at",
        (core.clock.now(),),
    )
    return _json(
        {
            "claims": [
                {
                    "registration": r["registration_id"],
                    "login_hint": r["login_hint"],
                    "state": r["state"],
                    "email": r["email"],
                    "expires_at": iso(r["expires_at"]),
                }
                for r in rows
            ]
        }
    )


async def _operator(site: Site, org: str) -> tuple[Caller, str]:
    """A caller acting for the platform operator inside one organization (the management API's verbs need one)."""
    row = await site.core.store.fetchone("SELECT id, slug, trial FROM orgs WHERE slug = ? OR id = ?", (org, org))
    if row is None:
        raise ApiError(404, "not_found", f"no organization {org!r}")
    # An API-key-shaped caller is scoped to exactly this organization, which is what resolve_org checks.
    return Caller("api_key", None, None, row["id"], row["slug"], "emulator operator", bool(row["trial"])), row["slug"]


async def _db_verb(request: Request[Any, Any, Any], org: str, db: str, verb: str) -> Response[bytes]:
    site = site_of(request)
    if site.cloud is None:
        raise ApiError(503, "unavailable", "the control plane is not running")
    caller, slug = await _operator(site, org)
    operation = {"stop": databases.stop_db, "start": databases.start_db}[verb]
    answer = await operation(site.cloud, caller, {"org": slug, "db": db})
    return _json({"org": slug, "db": db, "verb": verb, **answer})


@post("/_emulator/databases/{org:str}/{db:str}/stop", status_code=200)
async def database_stop(request: Request[Any, Any, Any], org: str, db: str) -> Response[bytes]:
    """What `pxt db stop` does, as the operator: the same generation, receipt and events."""
    return await _db_verb(request, org, db, "stop")


@post("/_emulator/databases/{org:str}/{db:str}/start", status_code=200)
async def database_start(request: Request[Any, Any, Any], org: str, db: str) -> Response[bytes]:
    return await _db_verb(request, org, db, "start")


HANDLERS = [orgs_list, services_list, claims_pending, database_stop, database_start]
