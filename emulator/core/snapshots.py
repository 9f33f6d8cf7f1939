"""Snapshots: a named, consistent copy of everything a later load needs, kept in `<state-dir>/snapshots/NAME/`.

A snapshot holds the store (through SQLite's backup API, taken while no transaction runs), the clock, the
switches and the seeded id generator's position, and one folder per part that keeps files of its own: the keys and
the CA, the archives (blobs), the media store, and the hosted databases' directories (their servers are stopped
for the copy, so Postgres's files are at rest, and come back after). A part registers how to pause, save and load
itself; this module knows none of them. A load runs the reset's hooks (every workload stopped, every file of the
run removed), puts the store's rows back in one transaction and then each part's files; the journal starts afresh.

On disk a snapshot is a folder with `manifest.json`; an export is that folder as a `.tar.gz`. The manifest's
`format` and `schema` say who can read it: a newer format or store schema is refused, an older schema is migrated.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import msgspec

from emulator import __version__
from emulator.core.clock import Clock, iso
from emulator.core.errors import BAD_REQUEST, CONFLICT, NOT_FOUND, TOO_LARGE, UNAVAILABLE, UNPROCESSABLE, ApiError
from emulator.core.events import EventBus
from emulator.core.faults import Faults
from emulator.core.ids import Ids
from emulator.core.jsonbody import Json
from emulator.core.payloads import EmulatorReset, SnapshotDeleted, SnapshotImported, SnapshotLoaded, SnapshotSaved
from emulator.core.private import private_dir
from emulator.core.store import Store
from emulator.core.switches import Switches
from emulator.core.tasks import cancel, until_stopped

log = logging.getLogger(__name__)


class Host(Protocol):
    """What snapshots need of the emulator's core (`emulator.core.context.Core`, which owns them)."""

    store: Store
    clock: Clock
    bus: EventBus
    ids: Ids
    faults: Faults
    switches: Switches
    stopping: asyncio.Event

    def exclusive(self) -> AbstractAsyncContextManager[None]: ...
    async def clear_run(self) -> None: ...
    async def reload_clock(self, at: float | None = None) -> None: ...
    async def run_after_load(self) -> None: ...


FORMAT = 1
START = ".start"  # the state the emulator was started from (a name no user can give: it starts with a dot)
EXIT = ".exit"  # what `up --export-on-exit` exports
# What is to be deleted (a replaced or deleted snapshot, a save the stop cut short, what a killed emulator left) is
# first renamed to `.trash-*`, however large it is, then deleted in the background (`Snapshots._trash`).
TRASH = ".trash-"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Tables a load leaves as they are: the docs index is derived from the docs this emulator serves, not from use.
_KEEP = ("docs_",)
# ... and the journal, which starts afresh (event numbers never go back: followers would miss what comes next).
_EMPTIED = ("events",)
MAX_IMPORT_BYTES = 50 * 1024**3
T = TypeVar("T")


class Manifest(msgspec.Struct, kw_only=True):
    format: int
    emulator: str
    schema: int
    name: str
    created_at: str  # wall-clock time of the save
    clock: str  # the emulator's clock at the save
    clock_now: float | None = None  # the same, as a timestamp: a load starts the clock again from it
    parts: list[str]
    switches: dict[str, bool] = {}
    ids: list[Any] | None = None  # the seeded id generator's state (None without a seed)
    counts: dict[str, int] = {}


class SnapshotView(msgspec.Struct):
    name: str
    created_at: str
    clock: str
    emulator: str
    size_bytes: int
    counts: dict[str, int]


@dataclass(frozen=True)
class Part:
    """What one component keeps outside the store. `pause` (optional) holds it still while the snapshot is taken."""

    name: str
    save: Callable[[Path], Awaitable[None]]
    load: Callable[[Path], Awaitable[None]]
    pause: Callable[[], AbstractAsyncContextManager[None]] | None = None


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise BAD_REQUEST(
            f"snapshot name {name[:80]!r}: use 1-64 letters, digits, dots, dashes or underscores, starting with a "
            "letter or digit",
        )
    return name


class Stopped(Exception):
    """Work in a thread gave way to its `cancel` event (the emulator stopping)."""


def copy_tree(source: Path, target: Path, cancel: threading.Event | None = None) -> None:
    """Copy a directory with owners, modes and times (a database's files must stay its server's), sparse files
    sparse; `cp -a` does all of it, and reflinks where the filesystem can. `cancel` set meanwhile kills the copy
    (`cp` is a process of its own) and raises `Stopped`: what was copied is the caller's to delete."""
    target.mkdir(parents=True, exist_ok=True)
    if not shutil.which("cp"):
        shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True, copy_function=_checked_copy(cancel))
        return
    if cancel is not None and cancel.is_set():
        raise Stopped
    with tempfile.TemporaryFile() as err, subprocess.Popen(_cp(source, target), stdout=err, stderr=err) as proc:
        while True:
            try:
                proc.wait(None if cancel is None else 0.05)
                break
            except subprocess.TimeoutExpired:
                if cancel is not None and cancel.is_set():
                    proc.kill()
                    proc.wait()
                    raise Stopped from None
        if proc.returncode:
            err.seek(0)
            raise OSError(f"copying {source} failed: {err.read(300).decode(errors='replace').strip()}")


def _checked_copy(cancel: threading.Event | None) -> Callable[[str, str], object]:
    def copy(src: str, dst: str) -> object:
        if cancel is not None and cancel.is_set():
            raise Stopped
        return shutil.copy2(src, dst)

    return copy


def _cp(source: Path, target: Path) -> list[str]:
    """`cp -a` of a folder's contents into another (reflinks where the filesystem can)."""
    args = ["cp", "-a", "--reflink=auto"] if os.uname().sysname == "Linux" else ["cp", "-a"]
    return [*args, f"{source}/.", str(target)]


async def in_thread(work: Callable[[threading.Event], T]) -> T:
    """`work(cancel)` in a thread that the awaiting task's cancellation (the emulator stopping) ends rather than
    leaves running (`until_stopped`); `work` checks `cancel` often (`copy_tree`, `remove_tree`)."""
    cancel = threading.Event()
    return await until_stopped(asyncio.to_thread(work, cancel), cancel)


async def copy_tree_async(source: Path, target: Path) -> None:
    """`copy_tree` that stops when its task is cancelled (the emulator stopping during a snapshot's save)."""
    await in_thread(lambda cancel: copy_tree(source, target, cancel))


def remove_tree(folder: Path, cancel: threading.Event | None = None) -> bool:
    """Delete a folder entry by entry, giving way to `cancel` (checked every few hundred entries); whether it is
    gone."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        folder.unlink(missing_ok=True)
        return True
    count = 0
    for here, dirs, files in os.walk(folder, topdown=False):  # a link to a folder is in `dirs`, not walked into
        for name, is_dir in [*((f, False) for f in files), *((d, True) for d in dirs)]:
            count += 1
            if count % 256 == 0 and cancel is not None and cancel.is_set():
                return False
            path = os.path.join(here, name)
            with contextlib.suppress(FileNotFoundError):
                if is_dir and not os.path.islink(path):
                    os.rmdir(path)
                else:
                    os.unlink(path)
    with contextlib.suppress(OSError):
        os.rmdir(folder)
    return not folder.exists()


def _put(source: Path, final: Path) -> Path | None:
    """`source` becomes `final`; a snapshot already there is replaced only now that the new one is complete, and
    returned renamed aside (for the caller to delete)."""
    old = final.with_name(f"{TRASH}{secrets.token_hex(6)}")
    if final.exists():
        final.rename(old)
        source.rename(final)
        return old
    source.rename(final)
    return None


def _size(folder: Path) -> int:
    return sum(p.lstat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


class Snapshots:
    def __init__(self, core: Host, root: Path) -> None:
        self.core = core
        self.root = root
        self._parts: list[Part] = []
        self._emptying: asyncio.Task[None] | None = None
        self._serving = False  # the trash is emptied only once the emulator serves
        self._more = False  # something was put in the trash since the emptying last looked

    def add_part(self, part: Part) -> None:
        self._parts.append(part)

    def sweep(self) -> None:
        """At start, before anything is saved: what a stopped (or killed) emulator left half done, and its own start
        and exit snapshots, into the trash (a rename each: deleting a save of 365 MB cut short held a start up for
        101 s). `serving` empties it."""
        for leftover in self.root.glob(".*") if self.root.is_dir() else ():
            if not leftover.name.startswith(TRASH):
                self._discard(leftover)

    def serving(self) -> None:
        """The emulator serves: the trash is emptied from now on, in the background (`close` stops it; what it had
        no time for is emptied after the next start)."""
        self._serving = True
        if any(self.root.glob(f"{TRASH}*")):
            self._empty()

    async def close(self) -> None:
        """The stop: the trash's deletion ends (between two files); nothing starts it again."""
        self._serving = False
        await cancel(self._emptying)

    def _discard(self, path: Path) -> None:
        """Delete `path` (a leftover, or what a save, an import or a delete no longer needs) in the background."""
        with contextlib.suppress(FileNotFoundError):
            path.rename(self.root / f"{TRASH}{secrets.token_hex(6)}")
            self._empty()

    def _empty(self) -> None:
        self._more = True
        if self._serving and (self._emptying is None or self._emptying.done()):
            self._emptying = asyncio.create_task(self._empty_trash(), name="snapshots-trash")

    async def _empty_trash(self) -> None:
        while self._more:
            self._more = False
            began = time.perf_counter()
            try:
                removed = await in_thread(self._remove_trash)
            except OSError as e:  # a file it may not delete: the next start tries again
                log.warning("could not delete what snapshots left in %s: %s", self.root, e)
                return
            if removed:
                log.info("deleted %d leftovers of snapshots in %.1f s", removed, time.perf_counter() - began)

    def _remove_trash(self, cancel: threading.Event) -> int:
        removed = 0
        for path in sorted(self.root.glob(f"{TRASH}*")):
            if not remove_tree(path, cancel):
                break  # stopping (or a file it may not delete): the next start tries again
            removed += 1
        return removed

    def _folder(self, name: str) -> Path:
        return self.root / name

    def _existing(self, name: str) -> Path:
        folder = self._folder(name)
        if not (folder / "manifest.json").is_file():
            known = ", ".join(sorted(v.name for v in self._views())) or "none saved yet"
            raise NOT_FOUND(f"no snapshot named {name!r} (snapshots: {known})")
        return folder

    # --- listing ------------------------------------------------------------------------------------------------

    def _views(self) -> list[SnapshotView]:
        views: list[SnapshotView] = []
        for folder in sorted(self.root.iterdir()) if self.root.is_dir() else []:
            if folder.name.startswith(".") or not folder.is_dir():
                continue
            try:
                m = read_manifest(folder)
            except ApiError:
                continue
            views.append(SnapshotView(folder.name, m.created_at, m.clock, m.emulator, _size(folder), m.counts))
        return views

    async def list(self) -> list[SnapshotView]:
        return await asyncio.to_thread(self._views)

    async def view(self, name: str) -> SnapshotView:
        folder = self._existing(check_name(name))
        m = read_manifest(folder)
        return SnapshotView(name, m.created_at, m.clock, m.emulator, await asyncio.to_thread(_size, folder), m.counts)

    # --- save -------------------------------------------------------------------------------------------------

    async def save(self, name: str, *, internal: bool = False) -> SnapshotView:
        """Save the running emulator as `name` (replacing a snapshot of that name once the new one is complete).

        The emulator stopping meanwhile (SIGTERM, `emulator down`) stops the save: what it had copied is deleted,
        the snapshot of that name is left as it was, and the caller gets a 503 that says so, within the stop's
        bound (a copy of 150,000 files took 22 s, where a stop allows 3)."""
        if internal:  # the start's and `--export-on-exit`'s own (the latter while the emulator stops, on purpose)
            return await self._save(name, internal)
        check_name(name)
        saving = asyncio.ensure_future(self._save(name, internal))
        stopping = asyncio.ensure_future(self.core.stopping.wait())
        try:
            await asyncio.wait({saving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if not saving.done():
            saving.cancel()
            await asyncio.gather(saving, return_exceptions=True)
            raise UNAVAILABLE(f"the emulator is stopping: snapshot {name} was not saved (nothing of it was kept)")
        return saving.result()

    async def _save(self, name: str, internal: bool) -> SnapshotView:
        core = self.core
        private_dir(self.root)
        async with core.exclusive():
            began = time.perf_counter()
            tmp = Path(tempfile.mkdtemp(prefix=".saving-", dir=self.root))
            try:
                await core.bus.flush()
                async with contextlib.AsyncExitStack() as stack:
                    for part in self._parts:
                        if part.pause is not None:
                            await stack.enter_async_context(part.pause())
                    await core.store.backup_to(tmp / "store.sqlite3")
                    for part in self._parts:
                        (tmp / part.name).mkdir()
                        await part.save(tmp / part.name)
                manifest = Manifest(
                    format=FORMAT,
                    emulator=__version__,
                    schema=await core.store.schema_version(),
                    name=name,
                    created_at=iso(time.time()),
                    clock=core.clock.state().iso,
                    clock_now=core.clock.now(),
                    parts=[p.name for p in self._parts],
                    switches=core.switches.snapshot(),
                    ids=core.ids.state(),
                    counts=await _counts(core.store),
                )
                (tmp / "manifest.json").write_bytes(msgspec.json.format(msgspec.json.encode(manifest)))
                old = _put(tmp, self._folder(name))  # renames, with no await between them and the except
            except BaseException:
                # A stop cut it short: deleting 100,000 copied files here would hold the stop up for seconds.
                self._discard(tmp)
                raise
            if old is not None:
                self._discard(old)
            seconds = round(time.perf_counter() - began, 3)
        view = (
            await self.view(name)
            if not internal
            else SnapshotView(name, manifest.created_at, manifest.clock, __version__, 0, manifest.counts)
        )
        if not internal:
            n = manifest.counts
            saved = SnapshotSaved(
                seconds=seconds,
                bytes=view.size_bytes,
                organizations=n.get("organizations"),
                registrations=n.get("registrations"),
                users=n.get("users"),
                databases=n.get("databases"),
            )
            core.bus.publish(name, saved)
        return view

    # --- load -------------------------------------------------------------------------------------------------

    async def load(self, name: str, *, internal: bool = False, resume: bool = True, as_reset: bool = False) -> float:
        """Make the running emulator what snapshot `name` holds; returns the seconds it took. `as_reset`: this is
        `reset --to start` from a declared start, so watchers see an `emulator.reset` rather than a snapshot."""
        folder = self._existing(name if internal else check_name(name))
        manifest = read_manifest(folder)
        core = self.core
        current = await core.store.schema_version()
        if manifest.schema > current:
            raise CONFLICT(
                f"snapshot {name!r} was saved by emulator {manifest.emulator}, whose store is newer (schema "
                f"{manifest.schema}) than this emulator's (schema {current}, emulator {__version__}); "
                "upgrade to load it",
            )
        missing = [p.name for p in self._parts if not (folder / p.name).is_dir()]
        if missing:
            raise UNPROCESSABLE(f"snapshot {name!r} is incomplete: it lacks {', '.join(missing)}")
        began = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=".loading-", dir=self.root) as work:  # a kill leaves it: swept
            store_file = Path(work) / "store.sqlite3"
            await asyncio.to_thread(shutil.copyfile, folder / "store.sqlite3", store_file)
            if manifest.schema < current:
                await (await Store.open(store_file)).close()  # its migrations bring it to this emulator's schema
            async with core.exclusive():
                fingerprint = await core.store.get_meta("docs_fingerprint")
                await core.clear_run()
                await core.store.restore_from(store_file, keep=_KEEP, skip=_EMPTIED)
                if fingerprint is not None:
                    await core.store.set_meta("docs_fingerprint", fingerprint)
                for part in self._parts:
                    await part.load(folder / part.name)
                await core.reload_clock(manifest.clock_now)
                core.switches.restore(manifest.switches)
                core.ids.restore(manifest.ids)
                core.faults.clear()
                seconds = round(time.perf_counter() - began, 3)
                state = core.clock.state()
                if as_reset:
                    core.bus.publish(
                        None,
                        EmulatorReset(to="start", seconds=seconds, now=state.now, frozen=state.frozen, iso=state.iso),
                    )
                else:
                    core.bus.publish(
                        None if internal else name,
                        SnapshotLoaded(seconds=seconds, now=state.now, frozen=state.frozen, iso=state.iso),
                    )
        if resume:
            await core.run_after_load()
        return seconds

    # --- delete, export, import -------------------------------------------------------------------------------

    async def delete(self, name: str) -> None:
        folder = self._existing(check_name(name))
        self._discard(folder)  # its files are deleted in the background: a stop never waits for them
        self.core.bus.publish(name, SnapshotDeleted())

    async def export(self, name: str, *, internal: bool = False) -> Path:
        """The snapshot as a .tar.gz in a temporary file (the caller streams it, then deletes it)."""
        folder = self._existing(name if internal else check_name(name))
        fd, path = tempfile.mkstemp(prefix=".export-", suffix=".tar.gz", dir=self.root)
        os.close(fd)

        def pack(cancel: threading.Event) -> None:
            def each(member: tarfile.TarInfo) -> tarfile.TarInfo:
                if cancel.is_set():
                    raise Stopped
                return member

            with tarfile.open(path, "w:gz", compresslevel=1) as tar:
                tar.add(folder, arcname="snapshot", filter=each)

        try:
            await in_thread(pack)
        except BaseException:
            os.unlink(path)
            raise
        return Path(path)

    async def receive(self, chunks: AsyncIterator[bytes]) -> Path:
        """Write an uploaded export to a temporary file, refusing one larger than MAX_IMPORT_BYTES."""
        private_dir(self.root)
        fd, path = tempfile.mkstemp(prefix=".import-", suffix=".tar.gz", dir=self.root)
        size = 0
        try:
            with os.fdopen(fd, "wb") as f:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > MAX_IMPORT_BYTES:
                        raise TOO_LARGE(f"a snapshot export is at most {MAX_IMPORT_BYTES} bytes")
                    f.write(chunk)
        except BaseException:
            os.unlink(path)
            raise
        return Path(path)

    async def import_file(self, archive: Path, name: str | None = None) -> SnapshotView:
        """Unpack an export as snapshot `name` (default: the name it was saved under). Nothing changes when the
        file is not a complete snapshot this emulator can read."""
        private_dir(self.root)
        work = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=self.root))
        try:
            manifest = await asyncio.to_thread(_unpack, archive, work)
            # An export of an internal snapshot (`up --export-on-exit`'s `.exit`) imports under its name without the
            # dot, which a user may give: `up --import last-run.tar.gz` works on what the last run left.
            target = check_name(name or manifest.name.lstrip("."))
            current = await self.core.store.schema_version()
            if manifest.schema > current:
                raise CONFLICT(
                    f"this export was made by emulator {manifest.emulator}, whose store is newer (schema "
                    f"{manifest.schema}) than this emulator's (schema {current}, emulator {__version__}); "
                    "upgrade to import it",
                )
            missing = [p.name for p in self._parts if not (work / "snapshot" / p.name).is_dir()]
            if missing or not (work / "snapshot" / "store.sqlite3").is_file():
                lacks = ", ".join(missing) or "the store"
                raise UNPROCESSABLE(f"the export is not a complete snapshot: it lacks {lacks}")
            await asyncio.to_thread(_check_store, work / "snapshot" / "store.sqlite3")
            old = _put(work / "snapshot", self._folder(target))
            if old is not None:
                self._discard(old)
        finally:
            self._discard(work)
        self.core.bus.publish(target, SnapshotImported(emulator=manifest.emulator))
        return await self.view(target)

    async def export_to(self, name: str, target: Path) -> None:
        """Write the export of `name` to the file `target` (replacing it once complete)."""
        packed = await self.export(name, internal=True)
        try:
            await asyncio.to_thread(shutil.move, packed, target)
        finally:
            await asyncio.to_thread(packed.unlink, True)

    async def is_empty(self) -> bool:
        """Whether the store holds nothing a run makes (no organization, registration or database)."""
        return not any((await _counts(self.core.store)).values())


def read_manifest(folder: Path) -> Manifest:
    try:
        raw: Json = json.loads((folder / "manifest.json").read_bytes())
    except (OSError, ValueError):
        raise UNPROCESSABLE(f"{folder.name}: not an emulator snapshot (no readable manifest.json)") from None
    made = raw.get("format") if isinstance(raw, dict) else None
    if not isinstance(raw, dict) or not isinstance(made, int):
        raise UNPROCESSABLE(f"{folder.name}: not an emulator snapshot (its manifest has no format)")
    if made > FORMAT:
        raise CONFLICT(
            f"the snapshot is of format {made}, made by emulator {raw.get('emulator', '?')}; this emulator "
            f"({__version__}) reads format {FORMAT}: upgrade it",
        )
    try:
        return msgspec.convert(raw, Manifest)
    except msgspec.ValidationError as e:
        raise UNPROCESSABLE(f"{folder.name}: the snapshot's manifest is not valid ({e})") from None


def _unpack(archive: Path, work: Path) -> Manifest:
    """Extract an export into `work`/snapshot: only regular files, folders and links that stay inside, owners kept
    (a database's files must stay its server's)."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            for m in members:
                top = m.name.split("/", 1)[0]
                if top != "snapshot" or not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
                    raise UNPROCESSABLE(f"the export holds {m.name[:120]!r}, which no emulator snapshot has")

            def keep_owner(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
                safe = tarfile.data_filter(member, dest)  # no absolute paths, nothing outside, no devices
                return safe.replace(uid=member.uid, gid=member.gid, uname=member.uname, gname=member.gname)

            tar.extractall(work, members=members, filter=keep_owner, numeric_owner=True)
    except (tarfile.TarError, EOFError, OSError, ValueError) as e:
        raise UNPROCESSABLE(f"the file is not an emulator snapshot export (a .tar.gz): {e}") from None
    return read_manifest(work / "snapshot")


def _check_store(path: Path) -> None:
    import sqlite3

    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            ok = conn.execute("PRAGMA quick_check").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise UNPROCESSABLE(f"the export's store is not a readable SQLite database: {e}") from None
    if not ok or ok[0] != "ok":
        raise UNPROCESSABLE(f"the export's store is damaged: {ok[0] if ok else 'unknown'}")


async def _counts(store: Store) -> dict[str, int]:
    counts: dict[str, int] = {}
    tables = (
        ("organizations", "orgs"),
        ("registrations", "registrations"),
        ("users", "users"),
        ("databases", "databases"),
    )
    for label, table in tables:
        try:
            row = await store.fetchone(f'SELECT COUNT(*) AS n FROM "{table}"')
        except Exception:
            continue
        counts[label] = int(row["n"]) if row else 0
    return counts
