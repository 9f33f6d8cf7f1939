"""Environments (the hosted "image"): one virtualenv per environment digest, built with uv, reused when
the digest is unchanged.

An environment holds `pixeltable[serve]` at the client's version plus the project's dependencies from
`requirements.txt` or `pyproject.toml` (a `uv.lock` project is installed from its `pyproject.toml`). uv's
cache makes a rebuild of known packages a matter of links, so builds work offline once cached.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from emulator.core.errors import INTERNAL

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

    async def _build(self, build: Build) -> None:
        raise NotImplementedError

    async def ensure(self, build: Build) -> bool:
        """Make the environment exist; True if it was built now, False if it was reused."""
        async with self._locks.setdefault(build.digest, asyncio.Lock()):
            if not build.force and await asyncio.to_thread(self.ready, build.digest):
                return False
            await self._build(build)
            return True


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


class Environments(Builds):
    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def python(self, digest: str) -> Path:
        """The interpreter of the environment's current build, as a real path: a process started from it
        keeps its build even when a rebuild later switches `current` to a new one."""
        return (self.root / digest / "current").resolve() / "bin" / "python"

    def ready(self, digest: str) -> bool:
        return (self.root / digest / "current" / ".complete").is_file()

    async def _build(self, build: Build) -> None:
        digest, pixeltable, log = build.digest, build.pixeltable, build.log
        home = self.root / digest
        home.mkdir(parents=True, exist_ok=True)
        builds = sorted((p for p in home.glob("b*") if p.name[1:].isdigit()), key=lambda p: int(p.name[1:]))
        target = home / f"b{int(builds[-1].name[1:]) + 1 if builds else 1}"
        uv = uv_executable()
        interpreter = python_for(build.python_version)
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
        link = home / "current.tmp"
        link.unlink(missing_ok=True)
        link.symlink_to(target.name)
        link.replace(home / "current")  # atomic: a reader sees the old build or the new one
        for old in builds[:-1]:  # keep the build before this one: a process may still run from it
            shutil.rmtree(old, ignore_errors=True)
        await log(f"environment {digest[:12]} is ready")

    async def _run(self, args: list[str], log: Log) -> None:
        await run_logged(args, log)


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
