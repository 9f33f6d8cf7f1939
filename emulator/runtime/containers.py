"""The Docker launcher: each hosted database and each service runs in a container of its own, with its
limits enforced by the engine.

A database is a pod: a small `pod` container (pod_helper.py `init`) holds the PID and IPC namespaces that
the database's container and its services' containers join, the way the containers of one pod share
them, because the service's Pixeltable finds the database's Postgres by pid. Every container gets:
- the environment's image (images.py), the database's directory at /data (on a loop-mounted disk of the
  database's `disk_gb`, disks.py), and a service its own file-cache disk of `file_cache_gb`;
- `cpu` as a CPU quota and `memory_mb` as a hard memory limit without swap;
- the emulator's network, whose egress is TCP 80/443/5432 only (egress.py), and a relay of the control
  plane and media ports to 127.0.0.1 inside, so the URLs the emulator hands out work unchanged (bridge.py).
Each service is one container with one worker process, the trial's size of a service.

An emulator that is itself a container of the engine (sibling.py) mounts only what is under its state dir (which is
at the same path on the host), reaches its containers' way home through Unix sockets there, and installs the egress
rule through its host helper.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import shutil
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypedDict

from emulator.core.address import Address
from emulator.core.processes import alive
from emulator.core.tasks import cancel
from emulator.runtime import disks, egress
from emulator.runtime.bridge import Relays
from emulator.runtime.buildcache import BuildCache
from emulator.runtime.engine import Engine
from emulator.runtime.environments import BuildFailed
from emulator.runtime.images import BUILDER_LABEL, Images, tag_of
from emulator.runtime.sibling import HostHelper, Sibling
from emulator.runtime.sockets import LISTEN_PRIVATE, SocketDir
from emulator.runtime.workload import Log, Metered, Resources, Size, Spec, Usage, release_spare

log = logging.getLogger("emulator.runtime.containers")
PORT = 8000
DATA = "/data"
HELPER_SOURCE = Path(__file__).resolve().parent / "pod_helper.py"  # copied into the state dir, mounted from there
HELPER = "/opt/emulator/pod_helper.py"
SOCKET_DIR = "/run/pxt-emulator"  # a server's private socket dir, as its container sees it
WAY_HOME = "/run/pxt-emulator-home"  # the way home's Unix sockets in a container (an emulator in a container)
SOCKET_PATH_MAX = 107  # bytes of a Unix socket's path
STOP_TIMEOUT = 15
DISK_POLL = 2.0
DISK_FULL_BELOW = 1_000_000  # bytes free
DEFAULT_SHARES, SPARE_SHARES = 1024, 2  # a spare imports at the lowest CPU weight, and gets the default when used
# Start the relay of the emulator's ports, then become the workload (so it gets the container's signals).
_ENTRY = "gw=$0; ports=$1; shift; python3 " + HELPER + ' forward "$gw" $ports & exec "$@"'


class Limits(TypedDict, total=False):
    """What `containers.run` is given of a workload's size (docker-py's keyword arguments)."""

    nano_cpus: int
    mem_limit: str
    memswap_limit: str
    cpu_shares: int


def docker_client() -> Any | None:
    """A client of the local Docker engine, or None when the package is missing or no engine answers."""
    try:
        import docker
    except ImportError:
        return None
    try:
        client = docker.from_env(version="auto", timeout=120)
        client.ping()
    except Exception:
        return None
    return client


class LazyClient:
    """docker-py's client, made at the first call through it (`client.containers.run(...)` and the like), in the
    thread that calls: an emulator that never runs a workload in a container never imports docker-py (engine.py
    asks the engine what the start needs), and the event loop, which only names the methods it hands to
    `asyncio.to_thread`, never waits for it."""

    def __init__(self) -> None:
        self._client: Any = None
        self._lock = threading.Lock()

    def made(self) -> Any:
        with self._lock:
            if self._client is None:
                client = docker_client()
                if client is None:
                    import docker.errors

                    raise docker.errors.DockerException("no Docker engine answers")
                self._client = client
            return self._client

    def __getattr__(self, name: str) -> _Deferred:
        return _Deferred(self, (name,))


class _Deferred:
    """An attribute path of the client (`containers.run`), followed when it is called."""

    def __init__(self, lazy: LazyClient, path: tuple[str, ...]) -> None:
        self._lazy = lazy
        self._path = path

    def __getattr__(self, name: str) -> _Deferred:
        return _Deferred(self._lazy, (*self._path, name))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        target = self._lazy.made()
        for name in self._path:
            target = getattr(target, name)
        return target(*args, **kwargs)


def _name(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]+", "-", text).strip("-.")[:120]


class ContainerWorkload:
    def __init__(
        self,
        container: Any,
        digest: str,
        resources: Resources,
        role: str,
        socket: Path | None = None,
        spare: bool = False,
    ) -> None:
        self.container = container
        self.spare = spare  # until released: a spare database server has not started Postgres, and must not stop it
        self.socket = socket  # where this machine reaches its server (None for a container without one)
        self.digest = digest
        self.resources = resources
        self.role = role
        self.ready = False
        self._code: int | None = None
        loop = asyncio.get_running_loop()
        self._exited = loop.create_future()

        def wait() -> None:  # a thread of its own: the default executor is too small for long waits
            try:
                code = int(container.wait().get("StatusCode", -1))
            except Exception:
                code = -1
            loop.call_soon_threadsafe(self._exit, code)

        threading.Thread(target=wait, daemon=True, name=f"wait-{container.name}").start()

    def _exit(self, code: int) -> None:
        self._code = code
        if not self._exited.done():
            self._exited.set_result(code)

    @property
    def address(self) -> Address:
        # A server's private socket; a prepare_project container serves nothing (its address is never asked).
        return Address(socket=str(self.socket) if self.socket is not None else "")

    def returncode(self) -> int | None:
        return self._code

    def usage(self) -> Usage | None:
        """The container's cgroup: its CPU time (every process it ran, ended ones included) and memory in use, as
        `docker stats` counts it (without the inactive page cache). None once it has stopped: its cgroup is gone."""
        import docker.errors

        if self._code is not None:
            return None
        try:
            try:
                stats = self.container.stats(stream=False, one_shot=True)  # one reading, no wait for a second one
            except docker.errors.InvalidVersion:  # an engine before API 1.41: a reading takes a second
                stats = self.container.stats(stream=False)
        except docker.errors.NotFound:
            return None  # removed; another error (the engine busy) raises: the meter keeps the last reading
        return container_usage(stats)

    async def lines(self) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[str | None] = asyncio.Queue()

        def pump() -> None:
            pending = b""
            try:
                for chunk in self.container.logs(stream=True, follow=True):
                    pending += chunk
                    *done, pending = pending.split(b"\n")
                    for raw in done:
                        loop.call_soon_threadsafe(queue.put_nowait, raw.decode(errors="replace").rstrip())
            except Exception:
                pass
            finally:
                if pending:
                    loop.call_soon_threadsafe(queue.put_nowait, pending.decode(errors="replace").rstrip())
                loop.call_soon_threadsafe(queue.put_nowait, None)

        threading.Thread(target=pump, daemon=True, name=f"logs-{self.container.name}").start()
        while (line := await queue.get()) is not None:
            yield line

    async def wait(self) -> int:
        code = int(await asyncio.shield(self._exited))
        if self.socket is not None:  # a server that died leaves its socket behind: nothing listens on it now
            shutil.rmtree(self.socket.parent, ignore_errors=True)
        return code

    async def stop(self) -> None:
        await asyncio.to_thread(self._stop)
        await self.wait()

    async def kill(self) -> None:
        import docker.errors

        with contextlib.suppress(docker.errors.APIError):
            await asyncio.to_thread(self.container.kill, "SIGKILL")

    async def release(self, env: dict[str, str], unset: list[str]) -> None:
        import docker.errors

        assert self.socket is not None
        with contextlib.suppress(docker.errors.APIError):
            await asyncio.to_thread(self.container.update, cpu_shares=DEFAULT_SHARES)
        await asyncio.to_thread(release_spare, self.socket.parent, env, unset)
        self.spare = False

    def _stop(self) -> None:
        import docker.errors

        try:
            if self.role == "database" and self._code is None and not self.spare:
                # Postgres first, with a fast shutdown: killed with the container it would need recovery.
                self.container.exec_run(
                    [
                        "sh",
                        "-c",
                        f"p=$(head -1 {DATA}/home/pgdata/postmaster.pid 2>/dev/null) && kill -INT $p && "
                        "for i in $(seq 300); do kill -0 $p 2>/dev/null || exit 0; sleep 0.1; done",
                    ]
                )
            self.container.stop(timeout=STOP_TIMEOUT)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as e:
            log.warning("stopping %s: %s", self.container.name, e)
        try:
            self.container.remove(force=True)
        except docker.errors.DockerException:
            pass
        if self.socket is not None:
            shutil.rmtree(self.socket.parent, ignore_errors=True)


class DockerLauncher:
    kind = "docker"

    def __init__(
        self,
        engine: Engine,
        root: Path,
        *,
        base_image: str,
        network: str,
        instance: Path,
        forward: list[int],
        cache: BuildCache | None = None,
        sibling: Sibling | None = None,
    ) -> None:
        self.engine = engine  # what the start and the stop ask (engine.py)
        self.sibling = sibling  # the emulator's own container, when it is one of the engine's (sibling.py)
        self.client: Any = LazyClient()  # the workloads' calls (docker-py)
        self.root = root
        self.builds = Images(self.client, root / "images", base_image, cache)
        self.base_image = base_image
        self.network_name = network
        # Containers carry the state directory's tag, so an emulator finds (and cleans up) only its own.
        self.instance = hashlib.sha256(str(instance.resolve()).encode()).hexdigest()[:10]
        self.forward = forward
        self.gateway = ""
        self.relays = Relays()
        self.pods: dict[Path, Any] = {}
        # Whether this run made a container of its own (each carries the instance's label): a run that made none
        # has nothing to sweep at its close, and does not wait on an engine that may be busy or gone.
        self.labelled = False
        self.mounts: set[Path] = set()
        self.missing: dict[str, str] = {}  # limit → why it is not enforced here
        self.disk_owner: dict[Path, tuple[Path, str]] = {}  # mountpoint → (database dir, service label)
        self._on_full: Callable[[Path, str], Awaitable[None]] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._serial = 0
        # Every directory a container mounts is under the state dir, which an emulator in a container shares with
        # the host at the same path; on the host the private sockets stay in the short temp dir.
        self.helper_dir = root / "helper"
        self.way_home = root / "way-home"
        self.sockets = SocketDir(root / "sockets", parent=root / "s" if sibling is not None else None)

    @property
    def unenforced(self) -> tuple[str, ...]:
        return tuple(self.missing)

    def _new_container_labels(self, **extra: str) -> dict[str, str]:
        """The labels of a container about to be made; asking for them records that this run made one, which its
        close then sweeps for (the one place a container of the instance gets its label)."""
        self.labelled = True
        return {"pxt-emulator": self.instance, **extra}

    async def open(self) -> None:
        await asyncio.to_thread(self._remove_leftovers)
        self.sockets.open()
        await asyncio.to_thread(self._copy_helper)
        network, self.gateway = await asyncio.to_thread(egress.ensure_network, self.engine, self.network_name)
        if self.sibling is not None:
            self._check_socket_paths()
        try:
            async with self._on_host() as run:
                await egress.install(egress.bridge_of(network), run)
        except egress.EgressError as e:
            self.missing["egress"] = str(e)
            log.warning("egress is not limited: %s", e)
        # In a container, a loop disk mounted on the host would not be seen here (the state dir's mount does not
        # propagate the host's new mounts), nor one mounted here by the engine.
        why = disks.supported() if self.sibling is None else "loop-mounted disks are not made from inside a container"
        if why:
            self.missing["disk_gb"] = why
        if self.sibling is None:
            await self.relays.open(self.gateway, self.forward)
        else:
            self.way_home.mkdir(mode=0o700, exist_ok=True)
            await self.relays.open_unix(self.way_home, self.forward)
            self.gateway = WAY_HOME

    @contextlib.asynccontextmanager
    async def _on_host(self) -> AsyncIterator[egress.Run | None]:
        """Where the egress rule's iptables run: here (None), or, from a container, in a host helper that lives only
        as long as the install (and, should the emulator die meanwhile, goes with its leftovers)."""
        import docker.errors

        if self.sibling is None:
            yield None
            return
        host = HostHelper(
            self.client, self.sibling, _name(f"pxt-{self.instance}-host"), self._new_container_labels(role="host")
        )
        try:
            try:
                await asyncio.to_thread(host.open)
            except docker.errors.DockerException as e:
                raise egress.EgressError(f"the helper on the host could not start: {e}") from None

            async def run(argv: list[str]) -> tuple[int, str]:
                return await asyncio.to_thread(host.run, argv)

            yield run
        finally:
            await asyncio.to_thread(host.close)

    def _copy_helper(self) -> None:
        self.helper_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(HELPER_SOURCE, self.helper_dir / HELPER_SOURCE.name)

    def _check_socket_paths(self) -> None:
        longest = max(len(str(self.way_home / "65535.sock")), len(str(self.sockets.root / ("0" * 12) / "server.sock")))
        if longest > SOCKET_PATH_MAX:
            raise BuildFailed(
                f"the state dir {self.root.parent} is too long a path for the Unix sockets under it "
                f"({longest} bytes, at most {SOCKET_PATH_MAX}): choose a shorter one"
            )

    def _remove_leftovers(self) -> None:
        """Containers of this state directory left by an emulator that did not stop cleanly."""
        for container in self.engine.containers("pxt-emulator"):
            labels = container.get("Labels") or {}
            owner, builder = labels.get("pxt-emulator"), labels.get(BUILDER_LABEL, "")
            # And an image's build container whose emulator died mid-build (any state dir's: it has no other owner).
            if owner == self.instance or (owner == "build" and builder.isdigit() and not alive(int(builder))):
                self.engine.remove_container(container["Id"])

    def view(self, base: Path) -> str:
        return DATA

    def runtime_dir(self, base: Path) -> tuple[Path, str]:
        # On the database's disk, which every container of the database mounts (else each falls back to its own
        # /tmp). Postgres's socket stays in the short /data/home/pgdata, so nothing opens this dir up.
        return base / "home" / "run", f"{DATA}/home/run"

    def listen(self) -> tuple[str, int]:
        return "0.0.0.0", PORT

    def _disk_image(self, mountpoint: Path) -> Path:
        return self.root / "disks" / (mountpoint.relative_to(self.root).as_posix().replace("/", "_") + ".img")

    async def _disk(
        self, mountpoint: Path, size_gb: Size, log: Log, owner: tuple[Path, str], *, disposable: bool = False
    ) -> None:
        if "disk_gb" in self.missing or not size_gb:
            await asyncio.to_thread(mountpoint.mkdir, parents=True, exist_ok=True)
            return
        image = self._disk_image(mountpoint)
        if disposable and await asyncio.to_thread(_larger, image, float(size_gb)):
            # A file cache is disposable: a smaller one starts empty (a disk with data never shrinks).
            await asyncio.to_thread(disks.remove, image, mountpoint)
        existed = await asyncio.to_thread(image.exists)
        try:
            changed = await asyncio.to_thread(disks.ensure, image, mountpoint, float(size_gb))
        except disks.DiskError as e:
            raise BuildFailed(f"the {size_gb} GB disk could not be made: {e}") from None
        self.mounts.add(mountpoint)
        self.disk_owner[mountpoint] = owner
        if changed:
            await log(f"disk of {float(size_gb):g} GB {'grown' if existed else 'made'} for {mountpoint.name}")

    async def prepare_dir(self, base: Path, resources: Resources, log: Log) -> None:
        await self._disk(base, resources.disk_gb, log, (base, ""))

    async def remove_dir(self, base: Path) -> None:
        pod = self.pods.pop(base, None)
        if pod is not None:
            await asyncio.to_thread(_remove, pod)
        caches = self._caches(base)
        for mountpoint in [m for m in self.mounts if m == base or caches in m.parents]:
            await asyncio.to_thread(disks.remove, self._disk_image(mountpoint), mountpoint)
            self.mounts.discard(mountpoint)
            self.disk_owner.pop(mountpoint, None)
        # Disks not mounted in this run (made by an earlier one) go too, or a new database of the same name
        # would find the old one's data on its disk.
        stale = [self._disk_image(base), *self._disk_image(caches).parent.glob(self._disk_image(caches).stem + "_*")]
        for image in stale:
            await asyncio.to_thread(image.unlink, True)
        await asyncio.to_thread(shutil.rmtree, base, True)
        await asyncio.to_thread(shutil.rmtree, caches, True)

    async def remove_service(self, base: Path, label: str) -> None:
        cache = self._caches(base) / label
        if cache in self.mounts:
            await asyncio.to_thread(disks.remove, self._disk_image(cache), cache)
            self.mounts.discard(cache)
            self.disk_owner.pop(cache, None)
        await asyncio.to_thread(shutil.rmtree, cache, True)

    def _caches(self, base: Path) -> Path:
        """Where a database's services' file-cache disks are mounted (beside its own disk, not on it)."""
        return base.parent / f"{base.name}.services"

    async def _pod(self, spec: Spec) -> Any:
        async with self._lock:
            pod = self.pods.get(spec.base)
            if pod is not None:
                await asyncio.to_thread(pod.reload)
                if pod.status == "running":
                    return pod
                await asyncio.to_thread(_remove, pod)
            database = spec.label.removesuffix("-prepare")
            pod = await asyncio.to_thread(
                self.client.containers.run,
                self.base_image,
                ["python3", HELPER, "init"],
                name=_name(f"pxt-{self.instance}-{database}-pod"),
                detach=True,
                network_mode="none",
                ipc_mode="shareable",
                shm_size="256m",
                volumes={str(self.helper_dir): {"bind": str(Path(HELPER).parent), "mode": "ro"}},
                labels=self._new_container_labels(role="pod"),
            )
            self.pods[spec.base] = pod
            return pod

    async def start(self, spec: Spec, log: Log) -> ContainerWorkload:
        import docker.errors

        pod = await self._pod(spec)
        volumes = {
            str(spec.base): {"bind": DATA, "mode": "rw"},
            str(self.helper_dir): {"bind": str(Path(HELPER).parent), "mode": "ro"},
        }
        if self.sibling is not None:
            volumes[str(self.way_home)] = {"bind": WAY_HOME, "mode": "ro"}
        if spec.role == "service":
            cache = self._caches(spec.base) / spec.label
            owner = (spec.base, spec.service)
            await self._disk(cache, spec.resources.file_cache_gb, log, owner, disposable=True)
            volumes[str(cache)] = {"bind": f"{DATA}/home/file_cache", "mode": "rw"}
        run = ["python3", "-c", spec.script] if spec.script else ["python3", "-m", spec.module]
        socket = None
        # (a spare of prepare_project waits for go.json in such a directory)
        if spec.role not in ("prepare", "inspect") or spec.spare:
            # The server listens on a socket in a directory of its own, which only this container mounts: not on
            # the network, where any local program (or another organization's container) could reach it.
            own = self.sockets.new()
            volumes[str(own)] = {"bind": SOCKET_DIR, "mode": "rw"}
            socket = own / "server.sock"
            run = ["python3", "-c", LISTEN_PRIVATE, f"{SOCKET_DIR}/server.sock", spec.module]
        limits: Limits = {}
        if spec.role not in ("prepare", "inspect"):
            cpu, memory = spec.resources.cpu, spec.resources.memory_mb
            if cpu:
                limits["nano_cpus"] = int(float(cpu) * 1e9)
            if memory:
                limits["mem_limit"] = limits["memswap_limit"] = f"{int(memory)}m"
        if spec.spare and not spec.eager:
            limits["cpu_shares"] = SPARE_SHARES
        name = _name(f"pxt-{self.instance}-{spec.label}")
        if spec.role in ("service", "inspect") or spec.spare:
            # Two generations of a service run side by side while the new one starts, a spare beside what it will
            # replace: a number tells them apart.
            self._serial += 1
            name = _name(f"pxt-{self.instance}-{spec.label}-{self._serial}")
        await asyncio.to_thread(_remove_named, self.client, name)
        try:
            container = await asyncio.to_thread(
                self.client.containers.run,
                tag_of(spec.digest),
                [
                    "sh",
                    "-c",
                    _ENTRY,
                    self.gateway,
                    " ".join(str(p) for p in self.forward),
                    *run,
                    *spec.args,
                ],
                name=name,
                detach=True,
                environment=spec.env,
                working_dir=f"{DATA}/home",
                volumes=volumes,
                network=self.network_name,
                pid_mode=f"container:{pod.id}",
                ipc_mode=f"container:{pod.id}",
                labels=self._new_container_labels(
                    role=spec.role, base=str(spec.base), **({"service": spec.service} if spec.service else {})
                ),
                **limits,
            )
        except docker.errors.DockerException as e:
            if socket is not None:
                shutil.rmtree(socket.parent, ignore_errors=True)
            raise BuildFailed(f"the {spec.role} container could not start: {e}") from None
        return ContainerWorkload(container, spec.digest, spec.resources, spec.role, socket, spec.spare)

    async def stopped(self, base: Path) -> None:
        """Postgres stopped with the database's container; the pod goes too once nothing of it runs."""

        def members() -> list[Any]:
            found = self.client.containers.list(filters={"label": [f"pxt-emulator={self.instance}", f"base={base}"]})
            return [c for c in found if c.labels.get("role") != "pod"]

        pod = self.pods.get(base)
        if pod is not None and not await asyncio.to_thread(members):
            del self.pods[base]
            await asyncio.to_thread(_remove, pod)

    async def readable(self, base: Path) -> None:
        image = self._disk_image(base)

        def mount() -> bool:
            if not image.is_file() or os.path.ismount(base):
                return False
            # A disk is mounted at the database's first start in a run; a snapshot before it needs it now.
            disks.ensure(image, base, image.stat().st_size / disks.GB)
            return True

        if await asyncio.to_thread(mount):
            self.mounts.add(base)
            self.disk_owner[base] = (base, "")

    def outside(self, base: Path) -> dict[str, Metered]:
        return {}  # Postgres runs in the database's container, and is metered with it

    def watch_disks(self, full: Callable[[Path, str], Awaitable[None]]) -> None:
        """Call `full(database dir, service label or "")` once when one of the disks fills up."""
        self._on_full = full
        if self._watcher is None:
            self._watcher = asyncio.create_task(self._watch(), name="disk-watch")

    async def _watch(self) -> None:
        reported: set[Path] = set()
        while True:
            await asyncio.sleep(DISK_POLL)  # real time: this samples the filesystem, not the emulator's clock
            for mountpoint, owner in list(self.disk_owner.items()):
                try:
                    free = await asyncio.to_thread(disks.free_bytes, mountpoint)
                except OSError:
                    continue
                if free < DISK_FULL_BELOW and mountpoint not in reported:
                    reported.add(mountpoint)
                    if self._on_full is not None:
                        await self._on_full(*owner)
                elif free >= DISK_FULL_BELOW:
                    reported.discard(mountpoint)

    async def close(self) -> None:
        await cancel(self._watcher)
        await self.relays.close()
        if self.labelled:
            await asyncio.to_thread(self._remove_leftovers)
        self.pods.clear()
        for mountpoint in list(self.mounts):
            await asyncio.to_thread(disks.release, mountpoint)
        self.mounts.clear()
        self.sockets.close()


class MemoryStats(TypedDict, total=False):
    usage: int
    max_usage: int  # cgroup v1's (not read)
    stats: dict[str, int]  # cgroup v1's total_inactive_file, v2's inactive_file, …


class _CpuUsage(TypedDict, total=False):
    total_usage: int  # ns


class _CpuStats(TypedDict, total=False):
    cpu_usage: _CpuUsage


class Stats(TypedDict, total=False):
    """What `container_usage` reads of the engine's stats (docker-py's `Container.stats`)."""

    memory_stats: MemoryStats
    cpu_stats: _CpuStats


def container_usage(stats: Stats) -> Usage | None:
    """A reading of the engine's stats (cgroup v1 or v2); None for a container that no longer runs (no memory
    figures)."""
    memory = stats.get("memory_stats") or {}
    if "usage" not in memory:
        return None
    detail = memory.get("stats") or {}
    inactive = detail.get("total_inactive_file", detail.get("inactive_file", 0))
    cpu_ns = ((stats.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage", 0)
    return Usage(int(cpu_ns) / 1e9, max(0, int(memory["usage"]) - int(inactive)))


def _larger(image: Path, size_gb: float) -> bool:
    return image.exists() and image.stat().st_size > int(size_gb * disks.GB)


def _remove(container: Any) -> None:
    import docker.errors

    try:
        container.remove(force=True)
    except docker.errors.DockerException:
        pass


def _remove_named(client: Any, name: str) -> None:
    import docker.errors

    try:
        client.containers.get(name).remove(force=True)
    except docker.errors.DockerException:
        pass
