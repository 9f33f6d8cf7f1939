"""Hosted databases: reports, generations and receipts, the update flow, lifecycle verbs, archives, logs.

Every accepted desired state (a submitted target, start, stop, restart, delete) is a new generation of
the database with a receipt. The receipt settles when the runtime has made it true: the environment
built (or reused: an unchanged environment is not rebuilt), the project unpacked, the real Pixeltable
server (`proxy_daemon`) restarted and healthy. `get_receipts` answers for any generation, in request
order; a resent submission returns its original receipts.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from emulator.cloud import media, orgs, receipts, secrets, services
from emulator.cloud.auth import Caller, resolve_org
from emulator.cloud.context import Cloud
from emulator.core.errors import ApiError

log = logging.getLogger("emulator.cloud")

DB_STATES = ("PROVISIONING", "STARTING", "UPDATING", "AVAILABLE", "STOPPING", "STOPPED", "FAILED")
_SIZE = ("cpu", "memory_mb", "workers", "disk_gb")


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def archive_digest(fingerprint: dict[str, Any]) -> str:
    """`ProjectFingerprint.archive_digest()` of the client: sha256 of the canonical JSON of `files`."""
    return hashlib.sha256(canonical(fingerprint.get("files", {})).encode()).hexdigest()


def environment_digest(fingerprint: dict[str, Any] | None) -> str:
    """What the environment (the image) depends on: manifests, Python, system packages, pixeltable, uv options."""
    if not fingerprint:
        return "base"
    files = fingerprint.get("files", {})
    manifests = {k: v for k, v in files.items() if k in ("uv.lock", "requirements.txt", "pyproject.toml")}
    manifests |= fingerprint.get("installed_from_project") or {}
    parts = [
        manifests,
        fingerprint.get("python_version"),
        fingerprint.get("system_dependencies") or [],
        fingerprint.get("pixeltable_version"),
        fingerprint.get("uv_options"),
    ]
    return hashlib.sha256(canonical(parts).encode()).hexdigest()


def _db_name(body: dict[str, Any]) -> str:
    db = body.get("db")
    if not isinstance(db, str) or not db:
        raise ApiError(400, "bad_request", "db (the database name) is required")
    return db


async def _row(cloud: Cloud, org_id: str, slug: str, db: str, *, missing_ok: bool = False) -> Any:
    row = await cloud.core.store.fetchone("SELECT * FROM databases WHERE org_id = ? AND name = ?", (org_id, db))
    if row is None and not missing_ok:
        raise ApiError(404, "not_found", f"database {db} does not exist in {slug}")
    return row


def _loads(text: str | None) -> Any:
    return json.loads(text) if text else None


def report(row: Any) -> dict[str, Any]:
    """A `DatabaseReport`: desired resources, the running status, and the current generation's receipt."""
    if row is None:
        return {"db": None, "target_resources": None, "current": None, "receipt": None}
    current = _loads(row["current"])
    return {
        "db": row["name"],
        "target_resources": _loads(row["target"]),
        "current": None
        if current is None
        else {
            "resources": current,
            "state": row["state"],
            "last_build_outcome": row["last_build_outcome"],
            "last_build_error": row["last_build_error"],
            "failure_reason": row["failure_reason"],
            "md_version": current.get("pxt_md_version"),
        },
        "receipt": _loads(row["receipt"]),
    }


def _worker_status(cloud: Cloud, row: Any) -> list[dict[str, Any]]:
    running = cloud.runtime.status(row["org_id"], row["name"]) if cloud.runtime else None
    if running is None:
        return []
    return [
        {
            "pod_id": f"{row['name']}-0",
            "status": "Running" if running["ready"] else "Starting",
            "ready": 1 if running["ready"] else 0,
            "total": 1,
            "restarts": row["restarts"],
            "age_s": int(cloud.core.clock.now() - (row["started_at"] or cloud.core.clock.now())),
        }
    ]


# --- reads --------------------------------------------------------------------------------------


async def get_db(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    org_id, slug = await resolve_org(cloud.core, caller, body.get("org"))
    row = await _row(cloud, org_id, slug, _db_name(body))
    return {"report": report(row), "worker_status": _worker_status(cloud, row)}


async def list_dbs(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    org_id, _ = await resolve_org(cloud.core, caller, body.get("org"))
    rows = await cloud.core.store.fetchall("SELECT * FROM databases WHERE org_id = ? ORDER BY created_at", (org_id,))
    return {"reports": [report(r) for r in rows]}


async def get_receipts(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    org_id, _ = await resolve_org(cloud.core, caller, body.get("org"))
    refs = body.get("receipts")
    if not isinstance(refs, list):
        raise ApiError(400, "bad_request", "receipts must be a list of {kind, resource_id, generation}")
    answers = []
    for ref in refs:
        if not isinstance(ref, dict):
            raise ApiError(400, "bad_request", "each receipt reference is {kind, resource_id, generation}")
        row = await cloud.core.store.fetchone(
            "SELECT body FROM receipts WHERE kind = ? AND resource_id = ? AND generation = ? AND org_id = ?",
            (ref.get("kind"), ref.get("resource_id"), ref.get("generation"), org_id),
        )
        if row is None:
            raise ApiError(
                404, "not_found", f"no receipt {ref.get('kind')}/{ref.get('resource_id')}#{ref.get('generation')}"
            )
        answers.append(json.loads(row["body"]))
    return {"receipts": answers}


async def get_archive(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    org_id, slug = await resolve_org(cloud.core, caller, body.get("org"))
    row = await _row(cloud, org_id, slug, _db_name(body))
    # The release being deployed (the desired state), which is what a starting pod must run.
    release = _loads(row["target"]) or _loads(row["current"]) or {}
    if not row["archive_sha256"] or not release.get("fingerprint"):
        raise ApiError(404, "not_found", f"database {row['name']} has no project yet (run pxt db update)")
    fingerprint = release["fingerprint"]
    return {
        "presigned_url": cloud.blobs.signed_url(row["archive_sha256"]),
        "digest": archive_digest(fingerprint),
        "fingerprint": fingerprint,
    }


async def get_logs(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    org_id, slug = await resolve_org(cloud.core, caller, body.get("org"))
    row = await _row(cloud, org_id, slug, _db_name(body))
    since = 3600 if body.get("since_seconds") is None else body["since_seconds"]
    limit = 200 if body.get("limit") is None else body["limit"]
    if not isinstance(since, int) or since < 1 or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise ApiError(400, "bad_request", "since_seconds must be at least 1 and limit from 1 to 10000")
    service = body.get("service_name") or ""
    if service:
        base = body.get("base_path") or ""
        service = f"{base.strip('/')}/{service}".lstrip("/")
    health = "" if body.get("include_health") else " AND health = 0"
    cutoff = int((cloud.core.clock.now() - since) * 1000)
    rows = await cloud.core.store.fetchall(
        "SELECT ts_ms, line FROM (SELECT id, ts_ms, line FROM log_lines WHERE org_id = ? AND db = ? AND service = ? "
        f"AND ts_ms >= ?{health} ORDER BY id DESC LIMIT ?) ORDER BY id",
        (org_id, row["name"], service, cutoff, limit),
    )
    return {"records": [{"ts_ms": r["ts_ms"], "line": r["line"]} for r in rows]}


async def get_usage(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    org_id, _ = await resolve_org(cloud.core, caller, None)
    org = await cloud.core.store.fetchone("SELECT * FROM orgs WHERE id = ?", (org_id,))
    dbs = await cloud.core.store.fetchone("SELECT COUNT(*) AS n FROM databases WHERE org_id = ?", (org_id,))
    now = cloud.core.clock.datetime()
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    trial = bool(org["trial"])
    return {
        "plan": "trial" if trial else "free",
        "period_start": start.isoformat(),
        "period_end": end.isoformat(),
        "counts_from": None,
        "used_usd": 0.0,
        "included_usd": 0.0,
        "stops_at_limit": True,
        "limit_reached_at": None,
        "meters": [],
        "resources": [
            {"label": "Databases", "used": dbs["n"], "limit": 1 if trial else None, "unit": "count"},
            {"label": "Services", "used": 0, "limit": 2 if trial else None, "unit": "count"},
            await media.usage_resource(cloud, org_id, trial),
        ],
    }


# --- the update flow ----------------------------------------------------------------------------


def _receipt(row: Any, generation: int, *, phase: str, waiting_for: str | None, attempt: str) -> dict[str, Any]:
    return {
        "kind": "database",
        "resource_id": row["id"],
        "generation": generation,
        "db": row["name"],
        "service_name": None,
        "base_path": "",
        "attempt_id": attempt,
        "outcome": None,
        "error": None,
        "phase": phase,
        "waiting_for": waiting_for,
        "warnings": [],
    }


def _check_target(target: Any, trial: bool) -> dict[str, Any]:
    if not isinstance(target, dict):
        raise ApiError(400, "bad_request", "database_target must be an object")
    for name in _SIZE:
        value = target.get(name)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0):
            raise ApiError(400, "bad_request", f"database_target.{name} must be a positive number")
    if trial:
        over = [
            f"{n} {target[n]} (at most {orgs.TRIAL_LIMITS[n]})"
            for n in _SIZE
            if target.get(n) is not None and target[n] > orgs.TRIAL_LIMITS[n]
        ]
        if over:
            raise ApiError(
                402,
                "PLAN_LIMIT",
                f"A trial database is limited to 1 CPU, 2048 MB, 1 worker and 10 GB disk; the project asks for "
                f"{', '.join(over)}. Lower them in pixeltable.toml, or claim the organization and upgrade.",
            )
    fingerprint = target.get("fingerprint")
    if fingerprint is not None and not isinstance(fingerprint, dict):
        raise ApiError(400, "bad_request", "database_target.fingerprint must be an object")
    return target


def _desired(target: dict[str, Any], row: Any, trial: bool) -> dict[str, Any]:
    """The resources the database is to run with: the declared ones, the rest as they are now."""
    now = _loads(row["current"]) if row is not None else None
    base = now or orgs.base_resources(trial)
    desired = {n: target.get(n) if target.get(n) is not None else base.get(n) for n in _SIZE}
    desired["fingerprint"] = target.get("fingerprint")
    desired["pxt_md_version"] = target.get("pxt_md_version") or orgs.PXT_MD_VERSION
    desired["default_bucket"] = base.get("default_bucket")
    # `pxt db build-image` sends a fresh nonce: the runtime rebuilds the environment for it.
    desired["force_build_nonce"] = target.get("force_build_nonce")
    return desired


async def _org_row(cloud: Cloud, org_id: str) -> Any:
    return await cloud.core.store.fetchone("SELECT * FROM orgs WHERE id = ?", (org_id,))


def _check_blob(body: dict[str, Any]) -> dict[str, Any] | None:
    blob = body.get("blob")
    if blob is None:
        return None
    sha = blob.get("sha256") if isinstance(blob, dict) else None
    if not isinstance(sha, str) or len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise ApiError(400, "bad_request", "blob.sha256 must be 64 lowercase hex digits")
    if not isinstance(blob.get("size"), int) or blob["size"] < 0:
        raise ApiError(400, "bad_request", "blob.size must be a non-negative integer")
    return blob


async def prepare_update(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    org_id, slug = await resolve_org(cloud.core, caller, body.get("org"))
    db = _db_name(body)
    org = await _org_row(cloud, org_id)
    row = await _row(cloud, org_id, slug, db, missing_ok=True)
    if row is None:
        _may_create(org, db)
    if body.get("database_target") is not None:
        _check_target(body["database_target"], bool(org["trial"]))
    blob = _check_blob(body)
    upload = None
    if blob is not None and not await cloud.blobs.has(blob["sha256"]):
        upload = {"url": cloud.blobs.upload_url(org_id, blob["sha256"]), "headers": {}}
    planned = await services.prepare(cloud, org_id, slug, db, body.get("service_mutations") or [])
    return {
        "generations": {"database": row["generation"] if row else 0, "services": planned["generations"]},
        "report": report(row) if row else {"db": db, "target_resources": None, "current": None, "receipt": None},
        "plan": None,
        "services": planned["existing"],
        "upload": upload,
    }


def _may_create(org: Any, db: str) -> None:
    if org["trial"]:
        raise ApiError(
            402,
            "PLAN_LIMIT",
            f"A trial organization has one database, main; {db} cannot be created. Claim the organization to add more.",
        )
    if not orgs.ORG_NAME.match(db):
        raise ApiError(400, "bad_request", f"{db!r} is not a valid database name")


async def submit_update(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    org_id, slug = await resolve_org(cloud.core, caller, body.get("org"))
    db = _db_name(body)
    expected = body.get("expected_generations")
    if not isinstance(expected, dict):
        raise ApiError(400, "bad_request", "expected_generations is required")
    target = body.get("database_target")
    mutations = body.get("service_mutations") or []
    if target is None and not mutations:
        raise ApiError(400, "bad_request", "a submission needs a database_target or a service mutation")
    submission = hashlib.sha256(canonical({k: v for k, v in body.items() if k != "operation_type"}).encode())
    digest = submission.hexdigest()
    # Resending an accepted submission returns its original receipts.
    resent = await cloud.core.store.fetchall(
        "SELECT body FROM receipts WHERE org_id = ? AND submission = ? ORDER BY rowid", (org_id, digest)
    )
    if resent:
        return {"receipts": [json.loads(r["body"]) for r in resent]}
    accepted = []
    if target is not None:
        accepted.append(await _submit_database(cloud, org_id, slug, db, body, target, expected, digest))
    if mutations:
        accepted += await services.submit(cloud, caller, org_id, slug, db, mutations, expected, digest)
    return {"receipts": accepted}


async def _submit_database(
    cloud: Cloud,
    org_id: str,
    slug: str,
    db: str,
    body: dict[str, Any],
    target: dict[str, Any],
    expected: dict[str, Any],
    digest: str,
) -> dict[str, Any]:
    core = cloud.core
    org = await _org_row(cloud, org_id)
    _check_target(target, bool(org["trial"]))
    blob = _check_blob(body)
    if blob is not None and not await cloud.blobs.has(blob["sha256"]):
        raise ApiError(
            400, "bad_request", "the project archive was not uploaded; PUT it to the URL prepare_update gave"
        )
    want = expected.get("database")
    now = core.clock.now()
    async with core.store.transaction() as conn:
        async with conn.execute("SELECT * FROM databases WHERE org_id = ? AND name = ?", (org_id, db)) as cur:
            row = await cur.fetchone()
        if row is None:
            _may_create(org, db)
            await orgs.new_database(core, conn, org_id, db, now=now, trial=bool(org["trial"]))
            await conn.execute(
                "UPDATE databases SET state = 'PROVISIONING', current = NULL WHERE org_id = ? AND name = ?",
                (org_id, db),
            )
            async with conn.execute("SELECT * FROM databases WHERE org_id = ? AND name = ?", (org_id, db)) as cur:
                row = await cur.fetchone()
        if want != row["generation"]:
            raise ApiError(
                409, "conflict", f"database {db} is at generation {row['generation']}, not {want}; plan again"
            )
        if row["state"] not in ("AVAILABLE", "PROVISIONING"):
            raise ApiError(
                400,
                "bad_request",
                f"database {db} is {row['state']}; db update needs it AVAILABLE"
                + (" (run pxt db start)" if row["state"] == "STOPPED" else ""),
            )
        generation = row["generation"] + 1
        desired = _desired(target, row, bool(org["trial"]))
        receipt = _receipt(row, generation, phase="PENDING", waiting_for="environment", attempt=core.ids.ident("att_"))
        await conn.execute(
            "UPDATE databases SET generation = ?, target = ?, receipt = ?, state = CASE WHEN state = 'PROVISIONING' "
            "THEN state ELSE 'UPDATING' END, archive_sha256 = COALESCE(?, archive_sha256), updated_at = ? "
            "WHERE org_id = ? AND name = ?",
            (generation, json.dumps(desired), json.dumps(receipt), blob["sha256"] if blob else None, now, org_id, db),
        )
        await receipts.add(conn, "database", row["id"], org_id, receipt, digest)
    core.bus.publish("db.update_accepted", f"{slug}:{db}", generation=generation, state="UPDATING")
    cloud.runtime.schedule(org_id, slug, db, generation, "update")
    return receipt


# --- lifecycle verbs ----------------------------------------------------------------------------


async def _verb(cloud: Cloud, caller: Caller, body: dict[str, Any], verb: str) -> dict[str, Any]:
    core = cloud.core
    org_id, slug = await resolve_org(core, caller, body.get("org"))
    db = _db_name(body)
    if verb == "delete" and db == orgs.DEFAULT_DB:
        raise ApiError(400, "bad_request", "the database main cannot be deleted")
    now = core.clock.now()
    async with core.store.transaction() as conn:
        async with conn.execute("SELECT * FROM databases WHERE org_id = ? AND name = ?", (org_id, db)) as cur:
            row = await cur.fetchone()
        if row is None:
            raise ApiError(404, "not_found", f"database {db} does not exist in {slug}")
        if row["state"] in ("UPDATING", "PROVISIONING", "STARTING", "STOPPING") and verb != "delete":
            raise ApiError(409, "conflict", f"database {db} is {row['state']}; wait for it to settle")
        if verb == "start" and row["state"] != "STOPPED":
            raise ApiError(400, "bad_request", f"database {db} is {row['state']}, not STOPPED")
        if verb in ("stop", "restart") and row["state"] == "STOPPED":
            raise ApiError(400, "bad_request", f"database {db} is STOPPED; start it with pxt db start")
        generation = row["generation"] + 1
        transitional = {"start": "STARTING", "stop": "STOPPING", "restart": "STARTING", "delete": "STOPPING"}[verb]
        receipt = _receipt(
            row,
            generation,
            phase="DELETING" if verb == "delete" else "PENDING",
            waiting_for={"stop": "stop", "delete": "deletion"}.get(verb, "start"),
            attempt=core.ids.ident("att_"),
        )
        await conn.execute(
            "UPDATE databases SET generation = ?, receipt = ?, state = ?, updated_at = ? WHERE org_id = ? AND name = ?",
            (generation, json.dumps(receipt), transitional, now, org_id, db),
        )
        await receipts.add(conn, "database", row["id"], org_id, receipt)
    core.bus.publish(f"db.{verb}_accepted", f"{slug}:{db}", generation=generation, state=transitional)
    cloud.runtime.schedule(org_id, slug, db, generation, verb)
    return {"receipt": receipt}


async def start_db(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    return await _verb(cloud, caller, body, "start")


async def stop_db(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    return await _verb(cloud, caller, body, "stop")


async def restart_db(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    return await _verb(cloud, caller, body, "restart")


async def delete_db(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    return await _verb(cloud, caller, body, "delete")


async def retry(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    core = cloud.core
    if body.get("kind") == "service":
        return await services.retry(cloud, caller, body)
    org_id, slug = await resolve_org(core, caller, body.get("org"))
    db = _db_name(body)
    row = await _row(cloud, org_id, slug, db)
    receipt = _loads(row["receipt"])
    if receipt is None or receipt["generation"] != body.get("generation"):
        raise ApiError(409, "conflict", f"generation {body.get('generation')} is not the current one of {db}")
    if receipt.get("phase") != "FAILED":
        raise ApiError(400, "bad_request", f"generation {receipt['generation']} of {db} has not failed")
    receipt = {
        **receipt,
        "phase": "PENDING",
        "error": None,
        "waiting_for": "environment",
        "attempt_id": core.ids.ident("att_"),
    }
    await store_receipt(cloud, org_id, row, receipt, state="UPDATING")
    cloud.runtime.schedule(org_id, slug, db, receipt["generation"], "update")
    return {"receipt": receipt}


async def store_receipt(cloud: Cloud, org_id: str, row: Any, receipt: dict[str, Any], **fields: Any) -> None:
    sets = ", ".join(f"{k} = ?" for k in fields)
    async with cloud.core.store.transaction() as conn:
        await conn.execute(
            f"UPDATE databases SET receipt = ?{', ' + sets if sets else ''}, updated_at = ? "
            "WHERE org_id = ? AND name = ?",
            (json.dumps(receipt), *fields.values(), cloud.core.clock.now(), org_id, row["name"]),
        )
        await receipts.rewrite(conn, "database", row["id"], receipt)


async def append_log(cloud: Cloud, org_id: str, db: str, line: str, *, service: str = "", health: bool = False) -> None:
    """A log line of a database (or a service) process, kept for get_logs and published live."""
    ts_ms = int(cloud.core.clock.now() * 1000)
    await cloud.core.store.execute(
        "INSERT INTO log_lines (org_id, db, service, ts_ms, line, health) VALUES (?, ?, ?, ?, ?, ?)",
        (org_id, db, service, ts_ms, line, int(health)),
    )
    cloud.core.bus.publish("db.log", f"{org_id}:{db}", db=db, service=service or None, line=line)


async def secret_environment(cloud: Cloud, org_id: str, db: str) -> dict[str, str]:
    return await secrets.environment(cloud, org_id, db)


OPERATIONS = {
    "get_db": get_db,
    "list_dbs": list_dbs,
    "get_receipts": get_receipts,
    "get_archive": get_archive,
    "get_logs": get_logs,
    "get_usage": get_usage,
    "prepare_update": prepare_update,
    "submit_update": submit_update,
    "start_db": start_db,
    "stop_db": stop_db,
    "restart_db": restart_db,
    "delete_db": delete_db,
    "retry": retry,
}
