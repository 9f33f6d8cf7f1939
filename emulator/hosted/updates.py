"""The update flow: `prepare_update` plans a submission, `submit_update` accepts it as new generations.

A submission carries a database target (the declared resources and the project's fingerprint, with its archive
uploaded as a blob) and/or service mutations, and the generations the client planned against. Each accepted
part is a new generation with a PENDING receipt, accepted in one transaction with the checks that allowed it;
a resent submission returns its original receipts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import msgspec
from msgspec import UNSET

from emulator.core import kinds
from emulator.core.context import Core
from emulator.core.errors import BAD_REQUEST, CONFLICT, NOT_FOUND
from emulator.core.payloads import DbUpdateAccepted, ServiceAccepted
from emulator.hosted import databases, orgs, plans, receipts, services
from emulator.hosted.blobs import Blobs
from emulator.hosted.reconciler import Reconciler
from emulator.hosted.records import (
    Database,
    DatabaseResources,
    DatabaseTarget,
    Org,
    Receipt,
    ServiceMutation,
    ServiceResources,
    Size,
    service_label,
)
from emulator.hosted.states import ACCEPTS_UPDATE, DbState, Phase, ServiceState


@dataclass(frozen=True)
class Blob:
    sha256: str
    size: int


@dataclass(frozen=True)
class Change:
    """What a submission asks for: a database target and its archive, and/or service mutations."""

    db: str
    target: DatabaseTarget | None
    blob: Blob | None
    mutations: list[ServiceMutation]


@dataclass(frozen=True)
class Expected:
    """The generations a submission was planned against."""

    database: int | None = None
    services: dict[tuple[str, str], int | None] = field(default_factory=dict)  # (base_path, name) → generation


def check_target(target: DatabaseTarget, trial: bool) -> DatabaseTarget:
    for name, value in plans.declared_size(target).items():
        if value is not None and value <= 0:
            raise BAD_REQUEST(f"database_target.{name} must be a positive number")
    plans.check_database_size(target, trial)
    return target


def check_blob(blob: Blob | None) -> Blob | None:
    if blob is None:
        return None
    if len(blob.sha256) != 64 or any(c not in "0123456789abcdef" for c in blob.sha256):
        raise BAD_REQUEST("blob.sha256 must be 64 lowercase hex digits")
    if blob.size < 0:
        raise BAD_REQUEST("blob.size must be a non-negative integer")
    return blob


def mutation_key(m: ServiceMutation) -> tuple[str, str]:
    """(base_path, service_name) of a service mutation."""
    return service_key(m.service_name, m.base_path or "")


def service_key(name: str | None, base: str) -> tuple[str, str]:
    """(base_path, service_name) of a service a request names."""
    if not name:
        raise BAD_REQUEST("each service mutation needs a service_name (and a string base_path)")
    return base.strip("/"), name


def check_new_database(org: Org, db: str) -> None:
    plans.check_new_database(org.trial, db)
    orgs.check_name(db, "database")


def desired(target: DatabaseTarget, row: Database | None, trial: bool) -> DatabaseResources:
    """The resources the database is to run with: the declared ones, the rest as they are now."""
    base = (row.current if row is not None else None) or plans.base_resources(trial)

    def size(sent: Size | None, now: Size) -> Size:
        return sent if sent is not None else now

    return DatabaseResources(
        cpu=size(target.cpu, base.cpu),
        memory_mb=size(target.memory_mb, base.memory_mb),
        workers=size(target.workers, base.workers),
        disk_gb=size(target.disk_gb, base.disk_gb),
        fingerprint=target.fingerprint,
        pxt_md_version=target.pxt_md_version or plans.PXT_MD_VERSION,
        default_bucket=base.default_bucket,
        # `pxt db build-image` sends a fresh nonce: the reconciler rebuilds the environment for it.
        force_build_nonce=target.force_build_nonce,
    )


async def _org(core: Core, org_id: str) -> Org:
    org = await orgs.get(core.store, org_id)
    if org is None:
        raise NOT_FOUND("the organization no longer exists")
    return org


@dataclass(frozen=True)
class Plan:
    """What `prepare_update` finds: the database (None: the change would create it), the current generation of each
    service the change names (base path, name, generation; 0: new), their current specs, and where to upload the
    archive when it is not stored yet."""

    row: Database | None
    services: list[tuple[str, str, int]]
    specs: list[ServiceMutation]
    upload_url: str | None


async def prepare(core: Core, blobs: Blobs, reconciler: Reconciler, org_id: str, slug: str, change: Change) -> Plan:
    """The plan of a change, checked as its submission will be. A plan with a database target gives the database's
    next server a head start (its submission usually follows within a second or two)."""
    db, target, mutations = change.db, change.target, change.mutations
    org = await _org(core, org_id)
    row = await databases.get(core.store, org_id, db)
    if row is None:
        check_new_database(org, db)
    if target is not None:
        check_target(target, org.trial)
    blob = check_blob(change.blob)
    upload = None
    if blob is not None and not await blobs.has(org_id, blob.sha256):
        upload = blobs.upload_url(org_id, blob.sha256)
    existing = await services.of_database(core.store, org_id, db)
    generations: list[tuple[str, str, int]] = []
    specs: list[ServiceMutation] = []
    for m in mutations:
        base, name = mutation_key(m)
        found = existing.get((base, name))
        generations.append((base, name, found.generation if found else 0))
        if found is not None:
            specs.append(found.desired)
    if row is not None and target is not None:
        reconciler.head_start(row, desired(target, row, org.trial))
    return Plan(row, generations, specs, upload)


def digest(change: Change, expected: Expected) -> str:
    """What identifies a submission when it is sent again."""
    services = sorted([base, name, generation] for (base, name), generation in expected.services.items())
    parts = [change.db, change.target, change.blob and [change.blob.sha256, change.blob.size], change.mutations]
    return hashlib.sha256(databases.canonical([*parts, expected.database, services]).encode()).hexdigest()


async def submit(
    core: Core, blobs: Blobs, reconciler: Reconciler, org_id: str, slug: str, change: Change, expected: Expected
) -> list[Receipt]:
    """Accept a submission (its database part first), or return the receipts it got when it was first sent."""
    if change.target is None and not change.mutations:
        raise BAD_REQUEST("a submission needs a database_target or a service mutation")
    submission = digest(change, expected)
    resent = await receipts.of_submission(core.store, org_id, submission)
    if resent:
        return resent
    accepted: list[Receipt] = []
    if change.target is not None:
        accepted.append(await _submit_database(core, blobs, reconciler, org_id, slug, change, expected, submission))
    if change.mutations:
        accepted += await _submit_services(core, reconciler, org_id, slug, change, expected, submission)
    return accepted


async def _submit_database(
    core: Core,
    blobs: Blobs,
    reconciler: Reconciler,
    org_id: str,
    slug: str,
    change: Change,
    expected: Expected,
    submission: str,
) -> Receipt:
    db, target = change.db, change.target or DatabaseTarget()
    org = await _org(core, org_id)
    check_target(target, org.trial)
    blob = check_blob(change.blob)
    if blob is not None and not await blobs.has(org_id, blob.sha256):
        raise BAD_REQUEST("the project archive was not uploaded; PUT it to the URL prepare_update gave")
    now = core.clock.now()
    async with core.store.transaction() as conn:
        row = await databases.get(conn, org_id, db)
        if row is None:
            check_new_database(org, db)
            await databases.insert(core, conn, org_id, db, now=now, trial=org.trial, provisioning=True)
            row = await databases.require(conn, org_id, slug, db)
        if expected.database != row.generation:
            raise CONFLICT(f"database {db} is at generation {row.generation}, not {expected.database}; plan again")
        if row.state not in ACCEPTS_UPDATE:
            raise BAD_REQUEST(
                f"database {db} is {row.state}; db update needs it AVAILABLE"
                + (" (run pxt db start)" if row.state == "STOPPED" else ""),
            )
        receipt = receipts.new(
            "database",
            row.id,
            row.generation + 1,
            db,
            phase=Phase.PENDING,
            waiting_for="environment",
            attempt=core.ids.ident("att_"),
        )
        await databases.accept(
            conn,
            row,
            receipt,
            now,
            state=row.state if row.state == DbState.PROVISIONING else DbState.UPDATING,
            target=desired(target, row, org.trial),
            archive_sha256=blob.sha256 if blob else None,
            submission=submission,
        )
    core.bus.publish(kinds.database(slug, db), DbUpdateAccepted(generation=receipt.generation, state=DbState.UPDATING))
    reconciler.schedule(org_id, slug, db, receipt.generation, "update")
    return receipt


async def _submit_services(
    core: Core,
    reconciler: Reconciler,
    org_id: str,
    slug: str,
    change: Change,
    expected: Expected,
    submission: str,
) -> list[Receipt]:
    db, mutations = change.db, change.mutations
    org = await _org(core, org_id)
    keys = [mutation_key(m) for m in mutations]
    now = core.clock.now()
    accepted: list[Receipt] = []
    async with core.store.transaction() as conn:
        database = await databases.require(conn, org_id, slug, db)
        if database.current is None or not database.current.fingerprint:
            raise BAD_REQUEST(f"database {db} has no project to serve; run pxt db update first")
        if database.state != DbState.AVAILABLE:
            raise BAD_REQUEST(f"database {db} is {database.state}; services need it AVAILABLE")
        existing = await services.of_database(conn, org_id, db)
        new = [k for k in keys if k not in existing]
        plans.check_service_count(kinds.database(slug, db), len(existing) + len(new), org.trial)
        for m, (base, name) in zip(mutations, keys, strict=True):
            if m.lifecycle not in (UNSET, "running"):
                raise BAD_REQUEST("only lifecycle running is accepted in a submission")
            row = existing.get((base, name))
            have = row.generation if row else 0
            want = expected.services.get((base, name), have)
            if want != have:
                raise CONFLICT(f"service {name} is at generation {have}, not {want}")
            size = plans.service_resources(name, m.resources or None, org.trial)
            filled = ServiceResources(
                cpu=size.cpu, memory_mb=size.memory_mb, workers=size.workers, file_cache_gb=size.file_cache_gb
            )
            spec = msgspec.structs.replace(m, base_path=base, resources=filled, lifecycle="running")
            service_id = row.id if row else core.ids.ident("svc_")
            receipt = receipts.new(
                "service",
                service_id,
                have + 1,
                db,
                phase=Phase.PENDING,
                waiting_for="service start",
                attempt=core.ids.ident("att_"),
                service_name=name,
                base_path=base,
            )
            if row is None:
                await services.insert(conn, service_id, org_id, db, spec, receipt, now)
                await receipts.add(conn, org_id, receipt, submission)
            else:
                await services.accept(
                    conn, row, receipt, now, state=ServiceState.UPDATING, desired=spec, submission=submission
                )
            accepted.append(receipt)
    for r in accepted:
        subject = kinds.service(slug, db, service_label(r.base_path, r.service_name or ""))
        core.bus.publish(subject, ServiceAccepted(generation=r.generation))
        reconciler.schedule_service(org_id, slug, db, r.base_path, r.service_name or "", r.generation, "deploy")
    return accepted
