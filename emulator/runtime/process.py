"""The process runtime: each hosted database is the real Pixeltable server of the client's version
(`python -m pixeltable.service.proxy_daemon`, fixed-address mode) running as a local process.

Like a pod, a database's start is: its environment (see environments.py), then the real
`pixeltable.service.prepare_project` fetching the project through `get_archive` into the release
directory, then the daemon with `PXTCLOUD_ORG`/`PXTCLOUD_DB`, the control plane URL and a runtime key, its
own `PIXELTABLE_HOME` (data, embedded Postgres) under the state directory, and the database's secrets as
environment variables read once at start. Jobs on one database run one at a time; a process whose
database was not asked for yet starts on first use (a tunnel connection).

Limits the process runtime cannot enforce (it records them): CPU, memory, disk, workers, egress.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulator.cloud import databases
from emulator.cloud.auth import caller_for_credential, resolve_org
from emulator.cloud.context import Cloud
from emulator.core.errors import ApiError
from emulator.core.tasks import cancel
from emulator.gateway.server import DatabaseGateway, Target
from emulator.runtime.environments import BuildFailed, Environments

log = logging.getLogger("emulator.runtime")
HEALTH_TIMEOUT = 300.0
STOP_TIMEOUT = 20.0
UNENFORCED = ("cpu", "memory_mb", "disk_gb", "workers", "egress")


@dataclass
class Running:
    proc: asyncio.subprocess.Process
    port: int
    digest: str
    ready: bool = False
    reader: asyncio.Task[None] | None = None
    waiters: list[asyncio.Future[None]] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of a hosted process: none of the emulator's own PIXELTABLE_*/EMULATOR_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIXELTABLE_", "EMULATOR_", "PXTCLOUD_"))}
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "VIRTUAL_ENV", "PYTHONPATH"):
        env.pop(name, None)
    return {**env, **extra}


class ProcessRuntime:
    kind = "process"
    unenforced = UNENFORCED

    def __init__(self, cloud: Cloud, root: Path) -> None:
        self.cloud = cloud
        self.root = root
        self.envs = Environments(root / "envs")
        self.running: dict[tuple[str, str], Running] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._starting: dict[tuple[str, str], asyncio.Task[None]] = {}
        # Keys the hosted processes use to call the control plane (get_archive, media); never stored.
        self.runtime_keys: dict[str, tuple[str, str]] = {}
        self.services: dict[tuple[str, str, str, str], Running] = {}  # (org_id, db, base_path, name)
        self.gateways: dict[tuple[str, str], tuple[DatabaseGateway, int]] = {}

    # --- public -----------------------------------------------------------------------------------

    def schedule(self, org_id: str, slug: str, db: str, generation: int, verb: str) -> None:
        task = asyncio.create_task(self._job(org_id, slug, db, generation, verb), name=f"db-{verb}-{slug}-{db}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def status(self, org_id: str, db: str) -> dict[str, Any] | None:
        running = self.running.get((org_id, db))
        return None if running is None else {"ready": running.ready, "port": running.port}

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
        return "127.0.0.1", self.running[key].port

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

    # --- services ---------------------------------------------------------------------------------

    def endpoint(self, org_id: str, db: str, base_path: str, name: str) -> str:
        gateway = self.gateways.get((org_id, db))
        if gateway is None:
            return ""
        prefix = f"/{base_path}/{name}" if base_path else f"/{name}"
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
            await conn.execute(
                "UPDATE receipts SET body = ? WHERE kind = 'service' AND resource_id = ? AND generation = ?",
                (json.dumps(receipt), row["id"], generation),
            )

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
                prefix = f"/{base}/{name}" if base else f"/{name}"
                if path == prefix or path.startswith(prefix + "/"):
                    match = (base, name, prefix)
                    break
            if match is None:
                return 404, f"no running service of {slug}:{db} answers {path}"
            running = self.services[(org_id, db, match[0], match[1])]
            target = Target(running.port, match[2])
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
        host, _ = await self.route(org_id, slug, db)  # the database's server (and its release) first
        database = self.running[(org_id, db)]
        desired = json.loads(row["desired"])
        key = (org_id, db, row["base_path"], row["name"])
        await self._stop_service(key)
        base = self._dir(org_id, db)
        release = base / "release"
        if not (release / "fingerprint.json").is_file():
            raise BuildFailed(f"database {db} has no project to serve; run pxt db update")
        env = child_env(
            {
                "PXTCLOUD_ORG": slug,
                "PXTCLOUD_DB": db,
                "PIXELTABLE_API_URL": self.cloud.urls.api,
                "PIXELTABLE_API_KEY": next(k for k, v in self.runtime_keys.items() if v == (org_id, slug)),
                "PIXELTABLE_HOME": str(base / "home"),
                "XDG_RUNTIME_DIR": str(base / "home"),
                **await databases.secret_environment(self.cloud, org_id, db),
            }
        )
        port = free_port()
        app_file = desired["app_module"].replace(".", "/") + ".py"
        args = [
            "-m",
            "pixeltable.serving.pod_runner",
            "--db",
            f"pxt://{slug}:{db}",
            "--app-file",
            app_file,
            "--name",
            row["name"],
            "--project-dir",
            str(release / "project"),
            "--project-fingerprint",
            str(release / "fingerprint.json"),
            "--host",
            host,
            "--port",
            str(port),
        ]
        if row["base_path"]:
            args += ["--base-path", row["base_path"]]
        label = f"{row['base_path']}/{row['name']}".lstrip("/")
        await self._log(org_id, db, f"starting service {label} on 127.0.0.1:{port}", service=label)
        proc = await asyncio.create_subprocess_exec(
            str(self.envs.python(database.digest)),
            *args,
            env=env,
            cwd=str(base / "home"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        running = Running(proc, port, database.digest)
        running.reader = asyncio.create_task(self._read_service(org_id, db, label, running))
        self.services[key] = running
        await self._gateway(org_id, slug, db)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HEALTH_TIMEOUT
        while loop.time() < deadline:
            if proc.returncode is not None:
                raise BuildFailed(f"service {label} exited with status {proc.returncode} at start (pxt service logs)")
            if await _answers(port):
                running.ready = True
                await self._log(org_id, db, f"service {label} is ready", service=label)
                return
            await asyncio.sleep(0.2)
        raise BuildFailed(f"service {label} did not answer within {HEALTH_TIMEOUT:.0f} s")

    async def _read_service(self, org_id: str, db: str, label: str, running: Running) -> None:
        assert running.proc.stdout is not None
        async for raw in running.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if line:
                await self._log(org_id, db, line, service=label, health='"GET /health' in line)

    async def _stop_service(self, key: tuple[str, str, str, str]) -> None:
        running = self.services.pop(key, None)
        if running is None:
            return
        await _terminate(running.proc)
        await cancel(running.reader)

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
        await self._progress(org_id, slug, db, generation, "database restart")
        await self._launch(org_id, slug, row, digest=digest, fingerprint=fingerprint)
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
        await _terminate(running.proc)
        await cancel(running.reader)
        await stop_postgres(self._dir(org_id, db) / "home" / "pgdata")
        for key, (o, d) in list(self.runtime_keys.items()):
            if (o, d) == (org_id, db):
                del self.runtime_keys[key]

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
        shutil.rmtree(self._dir(org_id, db), ignore_errors=True)
        self.cloud.core.bus.publish(
            "db.state", f"{slug}:{db}", state="DELETED", generation=generation, resource_id=row["id"] if row else None
        )

    # --- processes --------------------------------------------------------------------------------

    def _dir(self, org_id: str, db: str) -> Path:
        return self.root / "databases" / org_id / db

    async def _environment(
        self, org_id: str, db: str, digest: str, fingerprint: Any, archive_sha: str | None, *, force: bool = False
    ) -> bool:
        archive = self.cloud.blobs.path(archive_sha) if archive_sha else None

        async def log_line(line: str) -> None:
            await self._log(org_id, db, line)

        return await self.envs.ensure(
            digest,
            pixeltable_version=(fingerprint or {}).get("pixeltable_version"),
            python_version=(fingerprint or {}).get("python_version"),
            archive=archive,
            log=log_line,
            force=force,
        )

    async def _launch(
        self, org_id: str, slug: str, row: Any, *, digest: str | None = None, fingerprint: Any = None
    ) -> None:
        """(Re)start the database's server: environment, project, daemon; returns once it is healthy."""
        db = row["name"]
        if fingerprint is None and digest is None:
            current = json.loads(row["current"]) if row["current"] else {}
            fingerprint = current.get("fingerprint")
        digest = digest or databases.environment_digest(fingerprint)
        await self._environment(org_id, db, digest, fingerprint, row["archive_sha256"])
        await self._stop(org_id, db)
        base = self._dir(org_id, db)
        home, release = base / "home", base / "release"
        home.mkdir(parents=True, exist_ok=True)
        python = str(self.envs.python(digest))
        key = self.cloud.core.ids.token("pxtk_runtime_", 24)
        self.runtime_keys[key] = (org_id, slug)
        env = child_env(
            {
                "PXTCLOUD_ORG": slug,
                "PXTCLOUD_DB": db,
                "PIXELTABLE_API_URL": self.cloud.urls.api,
                "PIXELTABLE_API_KEY": key,
                "PIXELTABLE_HOME": str(home),
                "XDG_RUNTIME_DIR": str(home),
                **await databases.secret_environment(self.cloud, org_id, db),
            }
        )
        project_args: list[str] = []
        if fingerprint:
            shutil.rmtree(release, ignore_errors=True)
            release.mkdir(parents=True)
            await self._log(org_id, db, "preparing the project (prepare_project → get_archive)")
            prep = await asyncio.create_subprocess_exec(
                python,
                "-m",
                "pixeltable.service.prepare_project",
                "--db",
                f"pxt://{slug}:{db}",
                "--archive-dir",
                str(release),
                env=env,
                cwd=str(home),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            assert prep.stdout is not None
            async for raw in prep.stdout:
                await self._log(org_id, db, raw.decode(errors="replace").rstrip())
            if await prep.wait() != 0 or not (release / "project").is_dir():
                raise BuildFailed("prepare_project could not unpack the project (see pxt db logs)")
            project_args = ["--project-dir", str(release / "project")]
        port = free_port()
        await self._log(org_id, db, f"starting the Pixeltable server on 127.0.0.1:{port}")
        proc = await asyncio.create_subprocess_exec(
            python,
            "-m",
            "pixeltable.service.proxy_daemon",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *project_args,
            env=env,
            cwd=str(home),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        running = Running(proc, port, digest)
        running.reader = asyncio.create_task(self._read(org_id, db, running))
        self.running[(org_id, db)] = running
        await self._await_health(org_id, db, running)

    async def _read(self, org_id: str, db: str, running: Running) -> None:
        assert running.proc.stdout is not None
        async for raw in running.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if line:
                await self._log(org_id, db, line, health='"GET /health' in line)
        code = await running.proc.wait()
        if self.running.get((org_id, db)) is running:
            # It died on its own: say so, and let the next use start it again.
            del self.running[(org_id, db)]
            await self._log(org_id, db, f"the Pixeltable server exited with status {code}")
            self.cloud.core.bus.publish("db.exited", f"{org_id}:{db}", status=code)

    async def _await_health(self, org_id: str, db: str, running: Running) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HEALTH_TIMEOUT
        while loop.time() < deadline:
            if running.proc.returncode is not None:
                raise BuildFailed(f"the Pixeltable server exited with status {running.proc.returncode} at start")
            if await _healthy(running.port):
                running.ready = True
                await self._log(org_id, db, "the Pixeltable server is ready")
                return
            await asyncio.sleep(0.2)
        raise BuildFailed(f"the Pixeltable server did not answer /health within {HEALTH_TIMEOUT:.0f} s")


def postmaster_of(pgdata: Path) -> int | None:
    """The pid of the Postgres serving `pgdata`, if one runs (checked against its command line)."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().splitlines()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, ValueError, IndexError):
        return None
    return pid if str(pgdata) in cmdline else None  # else the pid was reused: not ours


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def stop_postgres(pgdata: Path) -> None:
    """Stop the embedded Postgres a database's server started: it outlives the server by design (it is
    shared by every process of that data directory), but a stopped database must leave nothing running."""
    pid = await asyncio.to_thread(postmaster_of, pgdata)
    if pid is None:
        return
    for sig, wait in ((signal.SIGINT, 30.0), (signal.SIGQUIT, 10.0)):  # fast shutdown, then immediate
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        for _ in range(int(wait * 10)):
            if not _alive(pid):
                return
            await asyncio.sleep(0.1)


async def _status_line(port: int) -> bytes | None:
    """The status line a local HTTP server gives `GET /health`, or None if nothing answers."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2)
    except (OSError, TimeoutError):
        return None
    try:
        writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        await writer.drain()
        return await asyncio.wait_for(reader.readline(), 5)
    except (OSError, TimeoutError):
        return None
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _answers(port: int) -> bool:
    """Whether an HTTP server answers at all (a service app has no /health: its 404 is an answer)."""
    return (await _status_line(port) or b"").startswith(b"HTTP/1.1 ")


async def _healthy(port: int) -> bool:
    return (await _status_line(port) or b"").startswith(b"HTTP/1.1 200")


async def _terminate(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM (uvicorn drains and exits cleanly), then SIGKILL to the whole process group."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
