"""Hosted services: their instances, generations and receipts, and the trial's limits on them.

A service instance is (database, base_path, name). Each accepted desired spec is a new generation with a
receipt, like a database's; the runtime settles it by starting the real `pixeltable.serving.pod_runner`
behind the database's gateway. An instance is listed as soon as its submission is accepted. A trial holds
at most two services, each on one worker with at most 1 CPU and 2048 MB (402 `PLAN_LIMIT` beyond).
"""

from __future__ import annotations

import json
from typing import Any

from emulator.cloud import orgs, receipts
from emulator.cloud.auth import Caller, resolve_org
from emulator.cloud.context import Cloud
from emulator.core.errors import ApiError

TRIAL_SERVICES = 2
TRIAL_SERVICE_LIMITS = {"cpu": 1.0, "memory_mb": 2048, "workers": 1}
DEFAULT_SERVICE_RESOURCES = {"cpu": 1.0, "memory_mb": 1024, "workers": 1, "file_cache_gb": 10.0}


def _key(m: dict[str, Any]) -> tuple[str, str]:
    name, base = m.get("service_name"), m.get("base_path") or ""
    if not isinstance(name, str) or not name or not isinstance(base, str):
        raise ApiError(400, "bad_request", "each service mutation needs a service_name (and a string base_path)")
    return base.strip("/"), name


async def _rows(cloud: Cloud, org_id: str, db: str) -> dict[tuple[str, str], Any]:
    rows = await cloud.core.store.fetchall(
        "SELECT * FROM services WHERE org_id = ? AND db = ? ORDER BY created_at", (org_id, db)
    )
    return {(r["base_path"], r["name"]): r for r in rows}


async def prepare(cloud: Cloud, org_id: str, slug: str, db: str, mutations: list[Any]) -> dict[str, Any]:
    existing = await _rows(cloud, org_id, db)
    generations, desired = [], []
    for m in mutations:
        if not isinstance(m, dict):
            raise ApiError(400, "bad_request", "each service mutation must be an object")
        key = _key(m)
        row = existing.get(key)
        generations.append({"service_name": key[1], "base_path": key[0], "generation": row["generation"] if row else 0})
        if row is not None:
            desired.append(json.loads(row["desired"]))
    return {"generations": generations, "existing": desired}


def _resources(m: dict[str, Any], trial: bool) -> dict[str, Any]:
    declared = m.get("resources") or {}
    resources = {k: declared.get(k) if declared.get(k) is not None else v for k, v in DEFAULT_SERVICE_RESOURCES.items()}
    if trial:
        over = [f"{k} {resources[k]} (at most {v})" for k, v in TRIAL_SERVICE_LIMITS.items() if resources[k] > v]
        if over:
            raise ApiError(
                402,
                "PLAN_LIMIT",
                f"A trial service runs on 1 worker with at most 1 CPU and 2048 MB; {m['service_name']} asks for "
                f"{', '.join(over)}. Lower them in pixeltable.toml, or claim the organization and upgrade.",
            )
    return resources


def _receipt(
    row_id: str, db: str, base: str, name: str, generation: int, phase: str, waiting: str | None, attempt: str
) -> dict[str, Any]:
    return {
        "kind": "service",
        "resource_id": row_id,
        "generation": generation,
        "db": db,
        "service_name": name,
        "base_path": base,
        "attempt_id": attempt,
        "outcome": None,
        "error": None,
        "phase": phase,
        "waiting_for": waiting,
        "warnings": [],
    }


async def submit(
    cloud: Cloud,
    caller: Caller,
    org_id: str,
    slug: str,
    db: str,
    mutations: list[Any],
    expected: dict[str, Any],
    digest: str,
) -> list[dict[str, Any]]:
    core = cloud.core
    org = await core.store.fetchone("SELECT * FROM orgs WHERE id = ?", (org_id,))
    database = await core.store.fetchone("SELECT * FROM databases WHERE org_id = ? AND name = ?", (org_id, db))
    if database is None:
        raise ApiError(404, "not_found", f"database {db} does not exist in {slug}")
    current = json.loads(database["current"]) if database["current"] else {}
    if not current.get("fingerprint"):
        raise ApiError(400, "bad_request", f"database {db} has no project to serve; run pxt db update first")
    if database["state"] != "AVAILABLE":
        raise ApiError(400, "bad_request", f"database {db} is {database['state']}; services need it AVAILABLE")
    wanted = {
        (g.get("base_path") or "", g.get("service_name")): g.get("generation")
        for g in expected.get("services") or []
        if isinstance(g, dict)
    }
    existing = await _rows(cloud, org_id, db)
    new = [m for m in mutations if _key(m) not in existing]
    if org["trial"] and len(existing) + len(new) > TRIAL_SERVICES:
        raise ApiError(
            402,
            "PLAN_LIMIT",
            f"A trial has at most {TRIAL_SERVICES} services; {slug}:{db} would have {len(existing) + len(new)}. "
            "Delete one with pxt service prune, or claim the organization and upgrade.",
        )
    now = core.clock.now()
    accepted = []
    async with core.store.transaction() as conn:
        for m in mutations:
            base, name = _key(m)
            if m.get("lifecycle", "running") != "running":
                raise ApiError(400, "bad_request", "only lifecycle running is accepted in a submission")
            row = existing.get((base, name))
            have = row["generation"] if row else 0
            if wanted.get((base, name), have) != have:
                raise ApiError(409, "conflict", f"service {name} is at generation {have}, not {wanted[(base, name)]}")
            desired = {**m, "base_path": base, "resources": _resources(m, bool(org["trial"])), "lifecycle": "running"}
            generation = have + 1
            row_id = row["id"] if row else core.ids.ident("svc_")
            receipt = _receipt(row_id, db, base, name, generation, "PENDING", "service start", core.ids.ident("att_"))
            if row is None:
                await conn.execute(
                    "INSERT INTO services (id, org_id, db, base_path, name, generation, desired, state, receipt, "
                    "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'DEPLOYING', ?, ?, ?)",
                    (row_id, org_id, db, base, name, generation, json.dumps(desired), json.dumps(receipt), now, now),
                )
            else:
                await conn.execute(
                    "UPDATE services SET generation = ?, desired = ?, state = 'UPDATING', error = NULL, receipt = ?, "
                    "updated_at = ? WHERE id = ?",
                    (generation, json.dumps(desired), json.dumps(receipt), now, row_id),
                )
            await receipts.add(conn, "service", row_id, org_id, receipt, digest)
            accepted.append(receipt)
    for r in accepted:
        core.bus.publish("service.accepted", f"{slug}:{db}/{r['service_name']}", generation=r["generation"])
        cloud.runtime.schedule_service(org_id, slug, db, r["base_path"], r["service_name"], r["generation"], "deploy")
    return accepted


def record(cloud: Cloud, row: Any) -> dict[str, Any]:
    """A `ServiceInstanceRecord`."""
    desired = json.loads(row["desired"])
    return {
        "service_name": row["name"],
        "base_path": row["base_path"],
        "endpoint": cloud.runtime.endpoint(row["org_id"], row["db"], row["base_path"], row["name"]),
        "app_module": desired.get("app_module", ""),
        "spec": desired.get("spec"),
        "otel": bool(desired.get("otel")),
        "state": row["state"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "error": row["error"],
        "fingerprint": json.loads(row["fingerprint"]) if row["fingerprint"] else None,
        "update_pending": False,
        "resources": desired.get("resources") or {},
        "description": desired.get("description"),
        "receipt": json.loads(row["receipt"]) if row["receipt"] else None,
    }


async def list_services(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    org_id, _ = await resolve_org(cloud.core, caller, body.get("org"))
    db = body.get("db") or orgs.DEFAULT_DB
    return {"instances": [record(cloud, r) for r in (await _rows(cloud, org_id, db)).values()]}


async def _one(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> tuple[str, str, str, Any]:
    org_id, slug = await resolve_org(cloud.core, caller, body.get("org"))
    db = body.get("db") or orgs.DEFAULT_DB
    key = _key(body)
    row = (await _rows(cloud, org_id, db)).get(key)
    if row is None:
        raise ApiError(404, "not_found", f"no service {key[1]} in {slug}:{db}")
    return org_id, slug, db, row


async def _verb(cloud: Cloud, caller: Caller, body: dict[str, Any], verb: str) -> dict[str, Any]:
    org_id, slug, db, row = await _one(cloud, caller, body)
    core = cloud.core
    generation = row["generation"] + 1
    state = {"stop": "STOPPING", "restart": "STARTING", "delete": "STOPPING"}[verb]
    receipt = _receipt(
        row["id"],
        db,
        row["base_path"],
        row["name"],
        generation,
        "DELETING" if verb == "delete" else "PENDING",
        verb,
        core.ids.ident("att_"),
    )
    async with core.store.transaction() as conn:
        await conn.execute(
            "UPDATE services SET generation = ?, state = ?, receipt = ?, updated_at = ? WHERE id = ?",
            (generation, state, json.dumps(receipt), core.clock.now(), row["id"]),
        )
        await receipts.add(conn, "service", row["id"], org_id, receipt)
    core.bus.publish(f"service.{verb}_accepted", f"{slug}:{db}/{row['name']}", generation=generation)
    cloud.runtime.schedule_service(org_id, slug, db, row["base_path"], row["name"], generation, verb)
    if verb == "delete":
        return {"service_name": row["name"], "receipt": receipt}
    fresh = await cloud.core.store.fetchone("SELECT * FROM services WHERE id = ?", (row["id"],))
    return {"instance": record(cloud, fresh), "receipt": receipt}


async def stop_service(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    return await _verb(cloud, caller, body, "stop")


async def restart_service(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    return await _verb(cloud, caller, body, "restart")


async def delete_service(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    return await _verb(cloud, caller, body, "delete")


async def retry(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    org_id, slug, db, row = await _one(cloud, caller, body)
    receipt = json.loads(row["receipt"]) if row["receipt"] else None
    if receipt is None or receipt.get("phase") != "FAILED" or receipt["generation"] != body.get("generation"):
        raise ApiError(400, "bad_request", f"generation {body.get('generation')} of {row['name']} has not failed")
    cloud.runtime.schedule_service(org_id, slug, db, row["base_path"], row["name"], receipt["generation"], "deploy")
    return {"receipt": receipt}


async def report_service_instance(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    """A service pod says which project it loaded (before serving); kept as the instance's fingerprint."""
    org_id, _ = await resolve_org(cloud.core, caller, body.get("org"))
    db = body.get("db") or orgs.DEFAULT_DB
    base, name = _key(body)
    await cloud.core.store.execute(
        "UPDATE services SET fingerprint = ? WHERE org_id = ? AND db = ? AND base_path = ? AND name = ?",
        (json.dumps(body.get("fingerprint")), org_id, db, base, name),
    )
    return {}


OPERATIONS = {
    "list_services": list_services,
    "stop_service": stop_service,
    "restart_service": restart_service,
    "delete_service": delete_service,
    "report_service_instance": report_service_instance,
}
