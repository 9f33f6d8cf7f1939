"""The management API's operations: each takes its decoded request, asks the platform (emulator.hosted), and
shapes the answer the client reads. Rules live in the domain; this module only translates.

To add an operation: a request type in requests.py, an answer type in answers.py, a function here (its return
annotation is the answer the OpenAPI document shows), and a line in OPERATIONS.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import UnionType
from typing import Any, Generic, NamedTuple, TypeVar, get_args, get_type_hints

from emulator.cloud import answers as a
from emulator.cloud import media
from emulator.cloud import requests as rq
from emulator.core.clock import iso
from emulator.core.errors import BAD_REQUEST, FORBIDDEN, NOT_FOUND
from emulator.hosted import databases, keys, lifecycle, logs, orgs, plans, receipts, secrets, services, updates
from emulator.hosted.auth import Caller
from emulator.hosted.platform import Platform
from emulator.hosted.records import Database, Receipt, service_label

R = TypeVar("R", bound=rq.Request)
A = TypeVar("A", bound=a.Answer)
Handler = Callable[[Platform, Caller, R], Awaitable[A]]
"""An operation's function: its request decoded as R, its answer an A (an answers.Answer, or a union of them)."""


# --- organizations ------------------------------------------------------------------------------------------


async def list_orgs(p: Platform, caller: Caller, req: rq.Empty) -> a.Orgs:
    if caller.credential == "api_key":
        found = await orgs.listed(p.core.store, org_id=caller.org_id)
    else:
        found = await orgs.listed(p.core.store, user_id=caller.user_id)
    return a.Orgs(
        orgs=[
            a.OrgEntry(
                org_id=org.id,
                org=org.slug,
                default_db=default_db,
                created_at=org.created_at,
                updated_at=org.updated_at,
            )
            for org, default_db in found
        ]
    )


async def create_org(p: Platform, caller: Caller, req: rq.CreateOrg) -> a.CreatedOrg:
    if caller.credential != "session" or caller.user_id is None:
        raise FORBIDDEN("organizations are created by a person: sign in with pxt login, then pxt org create")
    org_id, now = await orgs.create_for(p.core, req.org, req.display_name, caller.user_id, caller.email)
    return a.CreatedOrg(
        org_id=org_id, org=req.org, default_db=plans.DEFAULT_DB, created_at=iso(now), updated_at=iso(now)
    )


# --- keys ---------------------------------------------------------------------------------------------------


async def create_key(p: Platform, caller: Caller, req: rq.CreateKey) -> a.KeyAnswer:
    org_id, slug = await p.org_of(caller, None)
    key, secret = await keys.create(
        p.core, org_id, slug, req.name, req.grants, created_by=caller.email or caller.key_name, by=caller.label
    )
    return a.KeyAnswer(key=a.ApiKeyRecord.of(key, secret))


async def list_keys(p: Platform, caller: Caller, req: rq.Empty) -> a.Keys:
    org_id, _ = await p.org_of(caller, None)
    return a.Keys(keys=[a.ApiKeyRecord.of(k) for k in await keys.of_org(p.core.store, org_id)])


async def update_key(p: Platform, caller: Caller, req: rq.UpdateKey) -> a.KeyAnswer:
    org_id, slug = await p.org_of(caller, None)
    updated = await keys.update(p.core, org_id, slug, req.name, req.allow, req.revoke)
    return a.KeyAnswer(key=a.ApiKeyRecord.of(updated))


async def delete_key(p: Platform, caller: Caller, req: rq.KeyName) -> a.KeyDeleted:
    org_id, slug = await p.org_of(caller, None)
    await keys.delete(p.core, org_id, slug, req.name)
    return a.KeyDeleted(name=req.name)


# --- secrets ------------------------------------------------------------------------------------------------


async def _secret_scope(p: Platform, caller: Caller, org: str | None, db: str | None) -> tuple[str, str, str]:
    org_id, slug = await p.org_of(caller, org)
    if db is not None:
        await databases.require(p.core.store, org_id, slug, db)
    return org_id, slug, db or ""


async def set_secret(p: Platform, caller: Caller, req: rq.SetSecret) -> a.SecretRevision:
    org_id, slug, db = await _secret_scope(p, caller, req.org, req.db)
    key = secrets.check_key(req.key)
    return a.SecretRevision(key=key, revision=await secrets.set_value(p.core, p.box, org_id, slug, db, key, req.value))


async def delete_secret(p: Platform, caller: Caller, req: rq.DeleteSecret) -> a.SecretRevision:
    org_id, slug, db = await _secret_scope(p, caller, req.org, req.db)
    await secrets.delete(p.core, org_id, slug, db, secrets.check_key(req.key))
    return a.SecretRevision(key=req.key, revision=None)


async def list_all_secrets(p: Platform, caller: Caller, req: rq.ListSecrets) -> a.Secrets:
    org_id, slug, _ = await _secret_scope(p, caller, req.org, req.db)
    listed = await secrets.names(p.core, org_id, req.db)
    return a.Secrets(org=slug, secrets=[a.SecretEntry(key=key, db=db or None) for key, db in listed])


# --- databases ----------------------------------------------------------------------------------------------


def _db(req: rq.DbScoped) -> str:
    if not req.db:
        raise BAD_REQUEST("db (the database name) is required")
    return req.db


async def get_db(p: Platform, caller: Caller, req: rq.DbScoped) -> a.DbAnswer:
    org_id, slug = await p.scope(caller, req.org, "access", _db(req))
    row = await databases.require(p.core.store, org_id, slug, _db(req))
    return a.DbAnswer(report=a.DatabaseReport.of(row), worker_status=_workers(p, row))


def _workers(p: Platform, row: Database) -> list[a.WorkerStatus]:
    """The `worker_status` of `get_db`: the database's server, as a pod would be listed."""
    ready = p.reconciler.server_ready(row.org_id, row.name)
    if ready is None:
        return []
    now = p.core.clock.now()
    return [
        a.WorkerStatus(
            pod_id=f"{row.name}-0",
            status="Running" if ready else "Starting",
            ready=1 if ready else 0,
            total=1,
            restarts=row.restarts,
            age_s=int(now - (row.started_at or now)),
        )
    ]


async def list_dbs(p: Platform, caller: Caller, req: rq.OrgScoped) -> a.Reports:
    org_id, _ = await p.org_of(caller, req.org)
    return a.Reports(reports=[a.DatabaseReport.of(r) for r in await databases.of_org(p.core.store, org_id)])


async def _held(p: Platform, org_id: str, refs: list[tuple[str, str, int]], hold: float) -> list[Receipt]:
    """The receipts `refs` names, read again until all are settled, `hold` seconds have passed, or no job is under
    way that could settle them."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + hold
    while True:
        answers = []
        for kind, resource_id, generation in refs:
            found = await receipts.get(p.core.store, org_id, kind, resource_id, generation)
            if found is None:
                raise NOT_FOUND(f"no receipt {kind}/{resource_id}#{generation}")
            answers.append(found)
        left = deadline - loop.time()
        settled = all(r.outcome is not None or r.error is not None for r in answers)
        if settled or left <= 0 or not p.reconciler.busy:  # not busy: no job will settle them
            return answers
        await p.reconciler.receipt_moved(within=left)


async def _settling(p: Platform, org_id: str, accepted: list[Receipt]) -> list[Receipt]:
    """A change's receipts as its answer gives them: the job's outcome when it settles within `submit_hold`
    seconds (a settled receipt is not polled at all: the client would first wait 5 s), else as accepted."""
    hold = p.core.settings.submit_hold
    if hold <= 0 or not accepted:
        return accepted
    return await _held(p, org_id, [(r.kind, r.resource_id, r.generation) for r in accepted], hold)


async def get_receipts(p: Platform, caller: Caller, req: rq.GetReceipts) -> a.Receipts:
    """The receipts asked for. While one is unsettled and a job is under way, the answer waits for it (up to
    `receipt_hold` seconds): the client polls every 5 s, and so learns of the outcome when it happens rather than
    at its next poll, or not at all when `submit_update` already settled it."""
    org_id, _ = await p.org_of(caller, req.org)
    refs = [(ref.kind, ref.resource_id, ref.generation) for ref in req.receipts]
    return a.Receipts(receipts=await _held(p, org_id, refs, p.core.settings.receipt_hold))


async def get_archive(p: Platform, caller: Caller, req: rq.DbScoped) -> a.Archive:
    org_id, slug = await p.scope(caller, req.org, "access", _db(req))
    row = await databases.require(p.core.store, org_id, slug, _db(req))
    # The release being deployed (the desired state), which is what a starting pod must run.
    release = row.target or row.current
    fingerprint = release.fingerprint if release is not None else None
    if not row.archive_sha256 or not fingerprint:
        raise NOT_FOUND(f"database {row.name} has no project yet (run pxt db update)")
    return a.Archive(
        presigned_url=p.blobs.signed_url(row.archive_sha256),
        digest=databases.archive_digest(fingerprint),
        fingerprint=fingerprint,
    )


async def get_logs(p: Platform, caller: Caller, req: rq.GetLogs) -> a.Logs:
    org_id, slug = await p.scope(caller, req.org, "access", _db(req))
    row = await databases.require(p.core.store, org_id, slug, _db(req))
    since = 3600 if req.since_seconds is None else req.since_seconds
    limit = 200 if req.limit is None else req.limit
    if not 1 <= since <= logs.MAX_SINCE or not 1 <= limit <= 10_000:
        raise BAD_REQUEST(f"since_seconds must be from 1 to {logs.MAX_SINCE} and limit from 1 to 10000")
    service = req.service_name or ""
    if service:
        service = f"{(req.base_path or '').strip('/')}/{service}".lstrip("/")
    lines = await logs.recent(
        p.core.store,
        org_id,
        row.name,
        service,
        since_ms=int((p.core.clock.now() - since) * 1000),
        limit=limit,
        health=bool(req.include_health),
    )
    return a.Logs(records=[a.LogRecord(ts_ms=line.ts_ms, line=line.line) for line in lines])


async def get_usage(p: Platform, caller: Caller, req: rq.Empty) -> a.Usage:
    org_id, _ = await p.org_of(caller, None)
    org = await orgs.get(p.core.store, org_id)
    if org is None:
        raise NOT_FOUND("the organization no longer exists")
    now = p.core.clock.datetime()
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    counts = plans.usage_resources(
        org.trial, await databases.count(p.core.store, org_id), await services.count(p.core.store, org_id)
    )
    lines = [*counts, await media.usage_resource(p, org_id, org.trial)]
    return a.Usage(
        plan=plans.plan_name(org.trial),
        period_start=start.isoformat(),
        period_end=end.isoformat(),
        resources=[a.UsageResource(label=u.label, used=u.used, limit=u.limit, unit=u.unit) for u in lines],
    )


def _change(req: rq.PrepareUpdate) -> updates.Change:
    blob = None if req.blob is None else updates.Blob(req.blob.sha256, req.blob.size)
    return updates.Change(_db(req), req.database_target, blob, req.service_mutations or [])


async def prepare_update(p: Platform, caller: Caller, req: rq.PrepareUpdate) -> a.PlanAnswer:
    org_id, slug = await p.org_of(caller, req.org)
    change = _change(req)
    plan = await updates.prepare(p.core, p.blobs, p.reconciler, org_id, slug, change)
    return a.PlanAnswer(
        generations=a.Generations(
            database=plan.row.generation if plan.row else 0,
            services=[
                a.ServiceGenerationAnswer(service_name=n, base_path=b, generation=g) for b, n, g in plan.services
            ],
        ),
        report=a.DatabaseReport.of(plan.row) if plan.row else a.DatabaseReport.new(change.db),
        services=plan.specs,
        upload=a.Upload(url=plan.upload_url) if plan.upload_url else None,
    )


async def submit_update(p: Platform, caller: Caller, req: rq.SubmitUpdate) -> a.Receipts:
    org_id, slug = await p.org_of(caller, req.org)
    expected = updates.Expected(
        req.expected_generations.database,
        {(g.base_path or "", g.service_name or ""): g.generation for g in req.expected_generations.services or []},
    )
    accepted = await updates.submit(p.core, p.blobs, p.reconciler, org_id, slug, _change(req), expected)
    return a.Receipts(receipts=await _settling(p, org_id, accepted))


def _db_verb(verb: str) -> Handler[rq.DbScoped, a.ReceiptAnswer]:
    """`start_db`, `stop_db`, `restart_db`, `delete_db`: one lifecycle rule, four verbs."""

    async def handle(p: Platform, caller: Caller, req: rq.DbScoped) -> a.ReceiptAnswer:
        org_id, slug = await p.org_of(caller, req.org)
        receipt = await lifecycle.database_verb(p.core, p.reconciler, org_id, slug, _db(req), verb)
        return a.ReceiptAnswer(receipt=(await _settling(p, org_id, [receipt]))[0])

    return handle


async def retry(p: Platform, caller: Caller, req: rq.Retry) -> a.ReceiptAnswer:
    org_id, slug = await p.org_of(caller, req.org)
    if req.kind == "service":
        base, name = _service_key(req.service_name, req.base_path)
        db = req.db or plans.DEFAULT_DB
        receipt = await lifecycle.retry_service(p.core, p.reconciler, org_id, slug, db, base, name, req.generation)
    else:
        receipt = await lifecycle.retry_database(p.core, p.reconciler, org_id, slug, _db(req), req.generation)
    return a.ReceiptAnswer(receipt=(await _settling(p, org_id, [receipt]))[0])


# --- services -----------------------------------------------------------------------------------------------


def _service_key(name: str | None, base: str | None) -> tuple[str, str]:
    return updates.service_key(name, base or "")


async def list_services(p: Platform, caller: Caller, req: rq.ListServices) -> a.Instances:
    db = req.db or plans.DEFAULT_DB
    org_id, _ = await p.scope(caller, req.org, "access", db, service="")  # "": any of its services
    found = await services.of_database(p.core.store, org_id, db)
    return a.Instances(instances=[a.ServiceInstanceRecord.of(s, p.reconciler.endpoint(s)) for s in found.values()])


def _service_verb(verb: str) -> Handler[rq.ServiceRef, a.ServiceAnswer | a.ServiceDeleted]:
    """`stop_service`, `restart_service`, `delete_service`: the same lifecycle rule as a database's."""

    async def handle(p: Platform, caller: Caller, req: rq.ServiceRef) -> a.ServiceAnswer | a.ServiceDeleted:
        base, name = _service_key(req.service_name, req.base_path)
        db = req.db or plans.DEFAULT_DB
        org_id, slug = await p.scope(caller, req.org, "manage", db, service_label(base, name))
        service, receipt = await lifecycle.service_verb(p.core, p.reconciler, org_id, slug, db, base, name, verb)
        [receipt] = await _settling(p, org_id, [receipt])
        if service is None:
            return a.ServiceDeleted(service_name=name, receipt=receipt)
        service = await services.get(p.core.store, org_id, db, base, name) or service  # as the job left it
        return a.ServiceAnswer(
            instance=a.ServiceInstanceRecord.of(service, p.reconciler.endpoint(service)), receipt=receipt
        )

    return handle


async def report_service_instance(p: Platform, caller: Caller, req: rq.ReportServiceInstance) -> a.Nothing:
    """A service pod says which project it loaded (before serving); kept as the instance's fingerprint."""
    base, name = _service_key(req.service_name, req.base_path)
    org_id, _ = await p.scope(caller, req.org, "manage", req.db or plans.DEFAULT_DB, service_label(base, name))
    await services.set_fingerprint(p.core.store, org_id, req.db or plans.DEFAULT_DB, base, name, req.fingerprint)
    return a.Nothing()


# What a key created with grants may call at all (each checks its grants against the database or service it
# names); every other operation needs an unrestricted credential.
SCOPED = frozenset(
    {
        "list_orgs",
        "get_receipts",
        "get_db",
        "get_archive",
        "get_logs",
        "list_services",
        "stop_service",
        "restart_service",
        "delete_service",
        "report_service_instance",
        "get_bucket_credentials",
        "get_presigned_url",
        "get_presigned_urls",
    }
)


class Operation(NamedTuple, Generic[R, A]):
    """One management operation: the request type it decodes strictly, and its function, which takes that type and
    answers an A. Made with `operation`, so the type checker holds the two together."""

    request: type[R]
    run: Handler[R, A]

    @property
    def answers(self) -> tuple[type[a.Answer], ...]:
        """The answer types its function declares (its return annotation: one type, or a union)."""
        declared = get_type_hints(self.run)["return"]
        return get_args(declared) if isinstance(declared, UnionType) else (declared,)


def operation(request: type[R], run: Handler[R, A]) -> Operation[Any, Any]:
    """A line of OPERATIONS. The type checker solves R and A from the two arguments here (the table's own type,
    Operation[Any, Any], would let any pair through): `run` must take `request` and answer an answers.Answer."""
    return Operation(request, run)


OPERATIONS: dict[str, Operation[Any, Any]] = {
    "list_orgs": operation(rq.Empty, list_orgs),
    "create_org": operation(rq.CreateOrg, create_org),
    "create_key": operation(rq.CreateKey, create_key),
    "list_keys": operation(rq.Empty, list_keys),
    "update_key": operation(rq.UpdateKey, update_key),
    "delete_key": operation(rq.KeyName, delete_key),
    "set_secret": operation(rq.SetSecret, set_secret),
    "delete_secret": operation(rq.DeleteSecret, delete_secret),
    "list_all_secrets": operation(rq.ListSecrets, list_all_secrets),
    "get_db": operation(rq.DbScoped, get_db),
    "list_dbs": operation(rq.OrgScoped, list_dbs),
    "get_receipts": operation(rq.GetReceipts, get_receipts),
    "get_archive": operation(rq.DbScoped, get_archive),
    "get_logs": operation(rq.GetLogs, get_logs),
    "get_usage": operation(rq.Empty, get_usage),
    "prepare_update": operation(rq.PrepareUpdate, prepare_update),
    "submit_update": operation(rq.SubmitUpdate, submit_update),
    "start_db": operation(rq.DbScoped, _db_verb("start")),
    "stop_db": operation(rq.DbScoped, _db_verb("stop")),
    "restart_db": operation(rq.DbScoped, _db_verb("restart")),
    "delete_db": operation(rq.DbScoped, _db_verb("delete")),
    "retry": operation(rq.Retry, retry),
    "list_services": operation(rq.ListServices, list_services),
    "stop_service": operation(rq.ServiceRef, _service_verb("stop")),
    "restart_service": operation(rq.ServiceRef, _service_verb("restart")),
    "delete_service": operation(rq.ServiceRef, _service_verb("delete")),
    "report_service_instance": operation(rq.ReportServiceInstance, report_service_instance),
    "get_bucket_credentials": operation(rq.BucketCredentialsRequest, media.get_bucket_credentials),
    "get_presigned_url": operation(rq.PresignedUrlRequest, media.get_presigned_url),
    "get_presigned_urls": operation(rq.PresignedUrlsRequest, media.get_presigned_urls),
}
