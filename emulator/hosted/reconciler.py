"""The reconciler: the jobs that make a database's or a service's desired state true, and settle its receipt.

Every accepted generation (lifecycle.py, updates.py) schedules a job here. A job asks the supervisor
(emulator.runtime) to build, start or stop workloads, moves the resource's state, writes the outcome into the
generation's receipt and publishes it. Jobs on one database run one at a time; a database not asked for yet
starts on first use (a tunnel connection). The reconciler is also the supervisor's reporter: it keeps the
workloads' output as log lines, notices a server that died or a disk that filled, and says who may call a
service through the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from typing import Any

from emulator.core import kinds
from emulator.core.address import Address
from emulator.core.context import Core
from emulator.core.errors import CONFLICT, INTERNAL, NOT_FOUND, UNAVAILABLE, ApiError
from emulator.core.payloads import (
    CanaryPlanted,
    DbExited,
    DbReceipt,
    DbResized,
    DbStateChanged,
    DiskFull,
    GatewayRequest,
    ServiceResized,
    ServiceStateChanged,
)
from emulator.core.secretbox import SecretBox
from emulator.core.tasks import cancel
from emulator.hosted import databases, logs, plans, receipts, secrets, services
from emulator.hosted.auth import Authenticator
from emulator.hosted.blobs import Blobs
from emulator.hosted.databases import DbChange
from emulator.hosted.receipts import settled
from emulator.hosted.records import (
    Database,
    DatabaseResources,
    ProjectFingerprint,
    ReceiptError,
    Service,
    ServiceResources,
    sent,
    service_label,
)
from emulator.hosted.states import ACCEPTS_UPDATE, OBSERVED, BuildOutcome, DbState, Phase, ServiceState
from emulator.runtime.environments import BuildFailed
from emulator.runtime.metering import DatabaseUsage
from emulator.runtime.supervisor import (
    Environment,
    GatewayAddress,
    Place,
    ProjectVersions,
    Release,
    ServiceRelease,
    Supervisor,
)
from emulator.runtime.tables import HostedTable
from emulator.runtime.workload import Launcher, Resources, resized

log = logging.getLogger("emulator.runtime")
PAUSE_WAIT = 120.0  # seconds a snapshot waits for database and service jobs under way


def _sizes(resources: DatabaseResources | None) -> Resources:
    """A database's size, as the runtime takes it (none: nothing declared yet)."""
    if resources is None:
        return Resources()
    r = resources
    return Resources(cpu=r.cpu, memory_mb=r.memory_mb, disk_gb=r.disk_gb, workers=r.workers)


class Reconciler:
    def __init__(
        self,
        core: Core,
        box: SecretBox,
        blobs: Blobs,
        auth: Authenticator,
        api_url: str,
        root: Path,
        launcher: Launcher,
        host_ok: Callable[[str | None], bool] | None = None,
    ) -> None:
        self.core = core
        self.box = box
        self.blobs = blobs
        self.auth = auth
        self.api_url = api_url
        self.supervisor = Supervisor(
            root,
            launcher,
            self,
            host_ok,
            spares=core.settings.keeps_spares,
            head_start_ttl=core.settings.head_start_ttl,
            gateway_fault=lambda method, path: core.faults.request("gateway", method, path),
            gateway_canary=core.planted.for_service if core.planted.services else None,
            gateway_address=GatewayAddress(
                core.settings.host, core.settings.public or core.settings.host, core.settings.gateway_range
            ),
        )
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._tasks: dict[asyncio.Task[None], tuple[str, str]] = {}  # each job under way, and its database
        self._running = asyncio.Event()  # cleared while a snapshot copies the databases' files
        self._running.set()
        self._starting: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._ended: list[Callable[[str, str], Awaitable[None]]] = []  # told of each database that ends
        self._moved = asyncio.Event()  # set (and replaced) whenever a job settles a receipt

    @property
    def kind(self) -> str:
        return self.supervisor.kind

    @property
    def unenforced(self) -> tuple[str, ...]:
        return self.supervisor.unenforced

    async def open(self) -> None:
        await self.supervisor.open()

    async def close(self) -> None:
        for task in list(self._tasks):
            await cancel(task)
        await self.supervisor.close()

    async def reset(self) -> None:
        """No job, no workload, no database directory, no runtime key left (the emulator is reset)."""
        for task in list(self._tasks):
            await cancel(task)
        await self.supervisor.reset()
        self._locks.clear()
        self._starting.clear()
        self.auth.runtime_keys.clear()

    @contextlib.asynccontextmanager
    async def paused(self) -> AsyncGenerator[None]:
        """No workload runs while a snapshot copies the databases' files: jobs under way finish first, nothing
        starts meanwhile (a tunnel connection waits), and the services that ran start again after."""
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=PAUSE_WAIT)
            if pending:
                raise CONFLICT(
                    f"{len(pending)} database or service job(s) still running; try again once they settle",
                )
        self._running.clear()
        ran = set(self.supervisor.services)
        try:
            await self.supervisor.quiesce()
            yield
        finally:
            self._running.set()
            for s in await services.every(self.core.store, state=ServiceState.AVAILABLE):
                if (s.org_id, s.db, s.base_path, s.name) in ran:
                    self.schedule_service(s.org_id, s.slug, s.db, s.base_path, s.name, s.generation, "deploy")

    async def resume(self) -> None:
        """Bring back the services that were running when the emulator stopped (their databases start first)."""
        for s in await services.every(self.core.store, state=ServiceState.AVAILABLE):
            self.schedule_service(s.org_id, s.slug, s.db, s.base_path, s.name, s.generation, "deploy")

    def server_ready(self, org_id: str, db: str) -> bool | None:
        return self.supervisor.server_ready(org_id, db)

    def endpoint(self, service: Service) -> str:
        return self.supervisor.endpoint(service.org_id, service.db, service.label)

    async def tables(self, org_id: str, db: str, rows: int) -> list[HostedTable] | None:
        """What the database holds (its tables, columns, row counts and first rows); None when it does not serve."""
        return await self.supervisor.tables(org_id, db, rows)

    async def call_service(
        self, service: Service, method: str, path: str, body: bytes | None
    ) -> tuple[int, str, bytes] | None:
        """The operator's request to a running service (not through its gateway); None when it does not serve."""
        return await self.supervisor.call_service(
            service.org_id, service.db, service.base_path, service.name, method, path, body
        )

    def usage(self, org_id: str, db: str) -> DatabaseUsage | None:
        return self.supervisor.usage(org_id, db)

    async def usage_now(self) -> list[DatabaseUsage]:
        return await self.supervisor.usage_now()

    @property
    def busy(self) -> bool:
        """A database or service job is under way."""
        return bool(self._tasks)

    async def receipt_moved(self, *, within: float) -> None:
        """Wait until a job under way settles a receipt or ends, at most `within` seconds (real time: jobs run
        real workloads); at once when no job is under way."""
        if not self._tasks or within <= 0:
            return
        moved = asyncio.ensure_future(self._moved.wait())
        try:
            await asyncio.wait({moved, *self._tasks}, timeout=within, return_when=asyncio.FIRST_COMPLETED)
        finally:
            moved.cancel()

    def _receipt_settled(self) -> None:
        self._moved.set()
        self._moved = asyncio.Event()

    def _spawn(self, job: Any, name: str, key: tuple[str, str]) -> asyncio.Task[None]:
        """A job of the database `key` (org id, name), its services' included."""
        task = asyncio.create_task(job, name=name)
        self._tasks[task] = key
        task.add_done_callback(lambda done: self._tasks.pop(done, None))
        return task

    async def _jobs_done(self, key: tuple[str, str]) -> None:
        """Wait for the database's jobs under way (but the caller's own) to finish, at most PAUSE_WAIT seconds."""
        others = {t for t, of in self._tasks.items() if of == key and t is not asyncio.current_task()}
        if others:
            await asyncio.wait(others, timeout=PAUSE_WAIT)

    def _lock(self, org_id: str, key: str) -> asyncio.Lock:
        return self._locks.setdefault((org_id, key), asyncio.Lock())

    # --- the supervisor's reporter ----------------------------------------------------------------------------

    async def line(self, place: Place, line: str, *, service: str = "", health: bool = False) -> None:
        await logs.append(self.core, place.org_id, place.slug, place.db, line, service=service, health=health)

    async def exited(self, place: Place, code: int) -> None:
        await self.line(place, f"the Pixeltable server exited with status {code}")
        self.core.bus.publish(kinds.database(place.slug, place.db), DbExited(status=code))

    async def disk_full(self, place: Place, service: str, limit_gb: Any) -> None:
        size = f"{float(limit_gb):g}" if limit_gb is not None else "?"
        what = f"service {service}" if service else f"database {place.db}"
        message = plans.disk_full_message(what, size, bool(service))
        await self.line(place, message, service=service)
        subject = kinds.database(place.slug, place.db)
        self.core.bus.publish(subject, DiskFull(service=service or None, limit_gb=limit_gb))
        if not service:
            await self._set(place.org_id, place.db, DbChange(failure_reason=message))

    def request(self, place: Place, served: GatewayRequest | CanaryPlanted) -> None:
        if isinstance(served, CanaryPlanted):
            self.core.bus.publish(kinds.service(place.slug, place.db, served.service), served)
            return
        self.core.bus.publish(kinds.database(place.slug, place.db), served)

    async def admits(self, place: Place, credential: str, service: str) -> tuple[int, str] | None:
        refusal = await self.auth.admits(credential, place.slug, place.db, service)
        return None if refusal is None else (refusal.status, refusal.message)

    # --- databases --------------------------------------------------------------------------------------------

    def schedule(self, org_id: str, slug: str, db: str, generation: int, verb: str) -> None:
        self._spawn(self._job(org_id, slug, db, generation, verb), f"db-{verb}-{slug}-{db}", (org_id, db))

    def head_start(self, row: Database, target: DatabaseResources) -> None:
        """A plan for `row` with this target was made: start its server and prepare_project ahead, while the client
        uploads and submits (Supervisor.head_start). Not while a job of the database runs or a snapshot pauses
        the workloads, nor for a database an update would be refused for."""
        if row.state not in ACCEPTS_UPDATE or self._lock(row.org_id, row.name).locked() or not self._running.is_set():
            return
        job = self._head_start(Place(row.org_id, row.slug, row.name), row, target)
        self._spawn(job, f"db-head-start-{row.slug}-{row.name}", (row.org_id, row.name))

    async def _head_start(self, place: Place, row: Database, target: DatabaseResources) -> None:
        async with self._lock(place.org_id, place.db):
            digest = databases.environment_digest(target.fingerprint)
            release = self._release(row, digest, target.fingerprint, target)
            try:
                if await self.supervisor.head_start(place, release, await self._environment(place)):
                    log.info("%s:%s: the next server and prepare_project start ahead of the update", *place.key)
            except Exception as e:  # a head start is an optimisation: the update starts cold without one
                log.warning("no head start for %s:%s: %s", place.slug, place.db, e)

    async def route(self, org_id: str, slug: str, db: str) -> Address:
        """Where the database's server listens, starting it first if it is not running (first use).

        The start runs as its own task: a caller that gives up (the tunnel's authorizer has a time limit, the
        client retries) does not cancel it, and the next caller joins it.
        """
        key = (org_id, db)
        await self._running.wait()
        if self.supervisor.address(org_id, db) is None:
            task = self._starting.get(key)
            if task is None or task.done():
                task = self._spawn(self._start_on_demand(org_id, slug, db), f"db-first-use-{slug}-{db}", key)
                self._starting[key] = task
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                if not task.cancelled():
                    raise  # the caller itself was cancelled
                raise UNAVAILABLE(f"database {slug}:{db} stopped while starting") from None
        address = self.supervisor.address(org_id, db)
        if address is None:
            raise UNAVAILABLE(f"database {slug}:{db} is not running")
        return address

    async def kill(self, org_id: str, slug: str, db: str, service: str | None) -> None:
        """Kill a running database server or service as an OOM kill would (a fault a test injects)."""
        if not await self.supervisor.kill(Place(org_id, slug, db), service):
            what = f"service {service} of {slug}:{db}" if service else f"database {slug}:{db}"
            raise CONFLICT(f"fault: {what} is not running, so there is nothing to kill")

    async def _start_on_demand(self, org_id: str, slug: str, db: str) -> None:
        async with self._lock(org_id, db):
            row = await databases.get(self.core.store, org_id, db)
            if row is None:
                raise NOT_FOUND(f"database {db} does not exist in {slug}")
            if row.state in (DbState.STOPPED, DbState.STOPPING):
                raise UNAVAILABLE(f"database {slug}:{db} is {row.state}; start it with pxt db start")
            if self.supervisor.address(org_id, db) is None:
                try:
                    await self._launch(row)
                except BuildFailed as e:
                    # The caller (the tunnel, the gateway's first use) refuses with the reason, as a client reads it.
                    await self.supervisor.stop_database(Place(org_id, slug, db))
                    raise UNAVAILABLE(f"database {slug}:{db} could not start: {e}") from None
                await self._set(org_id, db, DbChange(started_at=self.core.clock.now()))

    async def _job(self, org_id: str, slug: str, db: str, generation: int, verb: str) -> None:
        await self._running.wait()
        async with self._lock(org_id, db):
            place = Place(org_id, slug, db)
            try:
                job = {
                    "update": self._update,
                    "start": self._start,
                    "restart": self._restart,
                    "stop": self._stop,
                    "delete": self._delete,
                }[verb]
                await job(place, generation)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the job's failure is the receipt's, never the emulator's
                if not isinstance(e, BuildFailed | ApiError):
                    log.exception("%s of %s:%s failed", verb, slug, db)
                message = e.message if isinstance(e, ApiError) else str(e)
                await self.line(place, f"{verb} failed: {message}")
                state = DbState.AVAILABLE if self.supervisor.server_ready(org_id, db) is not None else DbState.FAILED
                change = DbChange(state=state, failure_reason=message)
                if verb == "update":
                    change.last_build_outcome, change.last_build_error = BuildOutcome.FAILED, message
                await self._set(org_id, db, change)
                failure = receipts.failure(message)
                await self._settle(place, generation, phase=Phase.FAILED, waiting_for=None, error=failure)
                self.core.bus.publish(kinds.database(slug, db), DbStateChanged(state=state, error=message))

    async def _update(self, place: Place, generation: int) -> None:
        row = await self._row(place)
        target = row.target
        if target is None:  # accepting an update sets it, in the same transaction as the generation
            raise INTERNAL(f"database {place.db} has no update to run")
        fingerprint = target.fingerprint
        digest = databases.environment_digest(fingerprint)
        warnings: list[str] = []
        failed = self.core.faults.next_update("db_update_fails", place.slug, place.db)
        if failed is not None:
            raise INTERNAL(failed)  # the job's failure: FAILED, with the reason, as any other
        forced = bool(target.force_build_nonce)
        if forced:
            await self.line(place, f"rebuilding environment {digest[:12]}, as pxt db build-image asks")
        build_failed = self.core.faults.next_update("build_fails", place.slug, place.db)
        if build_failed is not None:
            await self.line(place, f"building environment {digest[:12]}: {build_failed}")
            raise BuildFailed(build_failed)
        built = await self.supervisor.build(place, self._release(row, digest, fingerprint, target), force=forced)
        if not built:
            warnings.append(f"environment {digest[:12]} unchanged: not rebuilt")
            await self.line(place, warnings[-1])
        changes = resized(_sizes(row.current), _sizes(target))
        if changes:
            # One resize, then the one restart below with the new sizes.
            await self.line(place, f"resizing database {place.db}: {', '.join(changes)}")
            self.core.bus.publish(
                kinds.database(place.slug, place.db), DbResized(changes=changes, generation=generation)
            )
        await self._settle(place, generation, phase=Phase.PENDING, waiting_for="database restart")
        await self._launch(row, digest=digest, fingerprint=fingerprint, resources=target)
        await self._set(
            place.org_id,
            place.db,
            DbChange(
                current=target,
                state=DbState.AVAILABLE,
                last_build_outcome=BuildOutcome.SUCCEEDED,
                last_build_error=None,
                failure_reason=None,
                env_digest=digest,
                started_at=self.core.clock.now(),
            ),
        )
        await self._settle(place, generation, phase=Phase.READY, outcome=OBSERVED, waiting_for=None, warnings=warnings)
        self.core.bus.publish(
            kinds.database(place.slug, place.db),
            DbStateChanged(state=DbState.AVAILABLE, generation=generation, environment=digest[:12], rebuilt=built),
        )

    async def _start(self, place: Place, generation: int) -> None:
        await self._launch(await self._row(place))
        started = DbChange(state=DbState.AVAILABLE, failure_reason=None, started_at=self.core.clock.now())
        await self._set(place.org_id, place.db, started)
        await self._settle(place, generation, phase=Phase.READY, outcome=OBSERVED, waiting_for=None)
        self.core.bus.publish(
            kinds.database(place.slug, place.db), DbStateChanged(state=DbState.AVAILABLE, generation=generation)
        )

    async def _restart(self, place: Place, generation: int) -> None:
        row = await self._row(place)
        await self._launch(row)
        restarted = DbChange(
            state=DbState.AVAILABLE, restarts=row.restarts + 1, failure_reason=None, started_at=self.core.clock.now()
        )
        await self._set(place.org_id, place.db, restarted)
        await self._settle(place, generation, phase=Phase.READY, outcome=OBSERVED, waiting_for=None)
        self.core.bus.publish(
            kinds.database(place.slug, place.db),
            DbStateChanged(state=DbState.AVAILABLE, generation=generation, restarted=True),
        )

    async def _stop(self, place: Place, generation: int) -> None:
        await self.supervisor.stop_database(place)
        await self._set(place.org_id, place.db, DbChange(state=DbState.STOPPED))
        await self.line(place, "database stopped (its data is kept)")
        await self._settle(place, generation, phase=Phase.STOPPED, outcome=OBSERVED, waiting_for=None)
        self.core.bus.publish(
            kinds.database(place.slug, place.db), DbStateChanged(state=DbState.STOPPED, generation=generation)
        )

    async def _delete(self, place: Place, generation: int) -> None:
        await self._end_database(place, generation)

    # --- the end of a database --------------------------------------------------------------------------------

    def on_database_ended(self, hook: Callable[[str, str], Awaitable[None]]) -> None:
        """`hook(org_id, db)` runs after each database's end (its bucket goes: the media store is not the domain's)."""
        self._ended.append(hook)

    async def end_org(self, org_id: str, slug: str) -> None:
        """An organization ends (its trial expired): each of its databases by the one path, then its workloads' key."""
        for row in await databases.of_org(self.core.store, org_id):
            await self._jobs_done((org_id, row.name))  # a build or start under way finishes first, then is undone
            async with self._lock(org_id, row.name):
                await self._end_database(Place(org_id, slug, row.name), None)
        self.auth.runtime_keys.forget(org_id)

    async def _end_database(self, place: Place, generation: int | None) -> None:
        """The one way a database ends (`delete_db`, its organization's end), under its lock: every workload it has
        stops (services, spares, gateway, server), its directory, disks and bucket go, its rows go, and the events
        say so in that order: each service DELETED, the database DELETED, its bucket dropped."""
        row = await databases.get(self.core.store, place.org_id, place.db)
        ended = list((await services.of_database(self.core.store, place.org_id, place.db)).values())
        await self.supervisor.remove_database(place)
        if generation is not None:
            await self._settle(place, generation, phase=Phase.DELETED, outcome=OBSERVED, waiting_for=None)
        async with self.core.store.transaction() as conn:
            await databases.delete(conn, place.org_id, place.db)  # its services' rows go with it (ON DELETE CASCADE)
            await logs.delete(conn, place.org_id, place.db)
        for s in ended:
            subject = kinds.service(place.slug, place.db, s.label)
            self.core.bus.publish(subject, ServiceStateChanged(state=ServiceState.DELETED, generation=s.generation))
        self.core.bus.publish(
            kinds.database(place.slug, place.db),
            DbStateChanged(
                state=DbState.DELETED,
                generation=generation if generation is not None else (row.generation if row else None),
                resource_id=row.id if row else None,
            ),
        )
        for hook in self._ended:
            await hook(place.org_id, place.db)

    def _release(
        self,
        row: Database,
        digest: str,
        fingerprint: ProjectFingerprint | None,
        resources: DatabaseResources | None = None,
    ) -> Release:
        archive = self.blobs.path(row.archive_sha256) if row.archive_sha256 else None
        project = None
        if fingerprint:
            project = ProjectVersions(
                pixeltable_version=sent(fingerprint.pixeltable_version),
                python_version=sent(fingerprint.python_version),
            )
        return Release(digest, project, archive, _sizes(resources or row.current))

    async def _launch(
        self,
        row: Database,
        *,
        digest: str | None = None,
        fingerprint: ProjectFingerprint | None = None,
        resources: DatabaseResources | None = None,
    ) -> None:
        """(Re)start the database's server on its current release (or the given one)."""
        if fingerprint is None and digest is None and row.current is not None:
            fingerprint = row.current.fingerprint
        digest = digest or databases.environment_digest(fingerprint)
        place = Place(row.org_id, row.slug, row.name)
        env = await self._environment(place)
        await self.supervisor.start_database(place, self._release(row, digest, fingerprint, resources), env)

    async def _environment(self, place: Place) -> Environment:
        key = self.auth.runtime_keys.for_org(self.core, place.org_id, place.slug)
        return Environment(
            {
                "PXTCLOUD_ORG": place.slug,
                "PXTCLOUD_DB": place.db,
                "PIXELTABLE_API_URL": self.api_url,
                "PIXELTABLE_API_KEY": key,
            },
            await secrets.environment(self.core, self.box, place.org_id, place.db),
        )

    async def _row(self, place: Place) -> Database:
        row = await databases.get(self.core.store, place.org_id, place.db)
        if row is None:
            raise NOT_FOUND(f"database {place.db} does not exist in {place.slug}")
        return row

    async def _set(self, org_id: str, db: str, change: DbChange) -> None:
        await databases.update(self.core.store, org_id, db, self.core.clock.now(), change)

    async def _settle(
        self,
        place: Place,
        generation: int,
        *,
        phase: Phase,
        waiting_for: str | None,
        outcome: str | None = None,
        error: ReceiptError | None = None,
        warnings: list[str] | None = None,
    ) -> None:
        """Write the outcome of a generation into its receipt (and the database's, if still current)."""
        async with self.core.store.transaction() as conn:
            row = await databases.get(conn, place.org_id, place.db)
            if row is None or row.receipt is None or row.receipt.generation != generation:
                return  # gone, or a newer generation superseded this one
            receipt = settled(row.receipt, phase, waiting_for, outcome, error, warnings)
            await databases.settle(conn, row, receipt, self.core.clock.now())
        self.core.bus.publish(
            kinds.database(place.slug, place.db),
            DbReceipt(generation=generation, phase=receipt.phase, outcome=receipt.outcome),
        )
        self._receipt_settled()

    # --- services ---------------------------------------------------------------------------------------------

    def schedule_service(
        self, org_id: str, slug: str, db: str, base: str, name: str, generation: int, verb: str
    ) -> None:
        job = self._service_job(Place(org_id, slug, db), base, name, generation, verb)
        self._spawn(job, f"service-{verb}-{slug}-{db}-{name}", (org_id, db))

    async def _service_job(self, place: Place, base: str, name: str, generation: int, verb: str) -> None:
        label = service_label(base, name)
        subject = kinds.service(place.slug, place.db, label)
        await self._running.wait()
        async with self._lock(place.org_id, f"{place.db}/{base}/{name}"):
            row = await services.get(self.core.store, place.org_id, place.db, base, name)
            if row is None:
                return
            try:
                if verb in ("deploy", "restart"):
                    await self._start_service(place, row)
                    state, phase = ServiceState.AVAILABLE, Phase.READY
                else:
                    await self.supervisor.stop_service((place.org_id, place.db, base, name))
                    state, phase = (
                        (ServiceState.STOPPED, Phase.STOPPED)
                        if verb == "stop"
                        else (ServiceState.DELETED, Phase.DELETED)
                    )
                    if verb == "delete":
                        await self.supervisor.remove_service(place, base, name, label)
                await self._settle_service(
                    row,
                    generation,
                    None if verb == "delete" else state,
                    phase=phase,
                    outcome=OBSERVED,
                    waiting_for=None,
                )
                if verb == "delete":
                    await services.delete(self.core.store, row.id)
                self.core.bus.publish(subject, ServiceStateChanged(state=state, generation=generation))
            except Exception as e:
                message = e.message if isinstance(e, ApiError) else str(e)
                if not isinstance(e, BuildFailed | ApiError):
                    log.exception("%s of service %s failed", verb, name)
                await self.line(place, f"service {name}: {verb} failed: {message}", service=label)
                failure = receipts.failure(message)
                await self._settle_service(
                    row, generation, ServiceState.FAILED, phase=Phase.FAILED, waiting_for=None, error=failure
                )
                self.core.bus.publish(subject, ServiceStateChanged(state=ServiceState.FAILED, error=message))

    async def _start_service(self, place: Place, row: Service) -> None:
        await self.route(place.org_id, place.slug, place.db)  # the database's server (and its release) first
        label = row.label
        size = row.desired.resources or ServiceResources()  # as plans.ServiceSize filled it
        resources = Resources(
            cpu=size.cpu, memory_mb=size.memory_mb, workers=size.workers, file_cache_gb=size.file_cache_gb
        )
        release = ServiceRelease(row.base_path, row.name, row.desired.app_module, resources, label)
        changes = self.supervisor.service_resize(place.org_id, place.db, release)
        if changes:
            await self.line(place, f"resizing service {label}: {', '.join(changes)}", service=label)
            self.core.bus.publish(kinds.service(place.slug, place.db, label), ServiceResized(changes=changes))
        database = await self._row(place)
        env = await self._environment(place)
        port = await self.supervisor.start_service(
            place, release, env, gateway_port=database.gateway_port, resize=bool(changes)
        )
        if port != database.gateway_port:
            await self._set(place.org_id, place.db, DbChange(gateway_port=port))

    async def _settle_service(
        self,
        row: Service,
        generation: int,
        state: ServiceState | None,
        *,
        phase: Phase,
        waiting_for: str | None,
        outcome: str | None = None,
        error: ReceiptError | None = None,
    ) -> None:
        async with self.core.store.transaction() as conn:
            current = await services.get(conn, row.org_id, row.db, row.base_path, row.name)
            if current is None or current.receipt is None or current.receipt.generation != generation:
                return
            receipt = settled(current.receipt, phase, waiting_for, outcome, error)
            await services.settle(conn, current, receipt, self.core.clock.now(), state)
        self._receipt_settled()
