"""What each hosted database's workloads used: CPU seconds and peak resident memory, per database (org id, db).

Every workload the supervisor starts (server, prepare_project, services, spares) is metered with its database, and
so is what the launcher runs for the database outside them (the process runtime's Postgres). One task reads them
all, once a second and only while something metered runs: an idle emulator reads nothing. A reading is also taken
just before the supervisor stops a workload, so a stop loses nothing; a workload that ends on its own (prepare_project)
loses at most its last second.

A database's CPU seconds are its ended workloads' last readings plus its running ones'. Its peak memory is the most
its metered workloads held together at one reading: a burst between two readings is not seen, and Docker counts a
container's page cache in use where the process runtime counts resident pages (shared ones once per process).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import msgspec

from emulator.core.tasks import cancel
from emulator.runtime.workload import Metered, Usage

log = logging.getLogger("emulator.runtime")
INTERVAL = 1.0  # seconds between two readings while something runs

Key = tuple[str, str]  # (org_id, db)


class DatabaseUsage(msgspec.Struct, frozen=True):
    """A database's totals since this emulator started (a reset clears them)."""

    org_id: str
    slug: str
    db: str
    cpu_seconds: float
    peak_memory_bytes: int
    running: int  # its metered workloads (and Postgres) running now


@dataclass
class _Database:
    slug: str
    ended_cpu: float = 0.0  # the last readings of what has ended
    peak: int = 0
    live: dict[Hashable, tuple[Metered, Usage]] = field(default_factory=dict)  # each one's last reading


class Meter:
    def __init__(self, outside: Callable[[Key], dict[str, Metered]], interval: float = INTERVAL) -> None:
        self.outside = outside  # blocking: the launcher's extras of a database (its Postgres), by instance name
        self.interval = interval
        self._dbs: dict[Key, _Database] = {}
        self._task: asyncio.Task[None] | None = None

    def add(self, key: Key, slug: str, workload: Metered) -> None:
        """Meter a workload just started, with its database's; the readings start if none run."""
        db = self._dbs.setdefault(key, _Database(slug))
        db.slug = slug or db.slug
        db.live[id(workload)] = (workload, Usage(0.0, 0))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="meter")

    @property
    def reading(self) -> bool:
        """Whether the readings run (only while something metered runs)."""
        return self._task is not None and not self._task.done()

    async def _run(self) -> None:
        while any(db.live for db in self._dbs.values()):
            try:
                await self.read()
            except Exception:  # a reading is a report: it must never end the readings
                log.exception("metering the hosted workloads")
            await asyncio.sleep(self.interval)  # real time: this samples processes, not the emulator's clock
        self._task = None

    async def read(self, key: Key | None = None) -> None:
        """A reading now of the database's running workloads (every database's with no key), with its extras."""
        keys = [k for k, db in self._dbs.items() if db.live and key in (None, k)]
        wanted = {k: list(self._dbs[k].live.items()) for k in keys}

        def readings() -> dict[Key, list[tuple[Hashable, Metered, Usage | None]]]:
            out: dict[Key, list[tuple[Hashable, Metered, Usage | None]]] = {}
            for k, entries in wanted.items():
                todo: dict[Hashable, Metered] = {name: metered for name, (metered, _) in entries}
                for name, metered in self.outside(k).items():
                    todo.setdefault(name, metered)
                out[k] = []
                for name, metered in todo.items():
                    try:
                        out[k].append((name, metered, metered.usage()))
                    except Exception as e:  # not read this time (the engine did not answer): its last reading stays
                        log.debug("no reading of a workload of %s: %s", k, e)
            return out

        for k, read in (await asyncio.to_thread(readings)).items():
            db = self._dbs.get(k)
            if db is None:
                continue  # cleared meanwhile (a reset)
            for name, metered, usage in read:
                last = db.live.get(name)
                if usage is None:
                    if last is not None:  # it has ended: its last reading is what it used
                        db.ended_cpu += last[1].cpu_seconds
                        del db.live[name]
                elif last is not None or isinstance(name, str):  # a new extra joins; an ended workload stays out
                    before = last[1].cpu_seconds if last is not None else 0.0
                    # A reading never goes back: a child reaped between two readings moves to its parent's cutime.
                    db.live[name] = (metered, Usage(max(before, usage.cpu_seconds), usage.memory_bytes))
            db.peak = max(db.peak, sum(u.memory_bytes for _, u in db.live.values()))

    async def final(self, workload: Metered) -> None:
        """A reading of the workload's database now, before the workload stops (a stop then loses nothing)."""
        key = next((k for k, db in self._dbs.items() if id(workload) in db.live), None)
        if key is not None:
            await self.read(key)

    def usage(self, key: Key) -> DatabaseUsage | None:
        """The database's totals, None if nothing of it was ever metered."""
        db = self._dbs.get(key)
        if db is None:
            return None
        cpu = db.ended_cpu + sum(u.cpu_seconds for _, u in db.live.values())
        return DatabaseUsage(key[0], db.slug, key[1], round(cpu, 3), db.peak, len(db.live))

    def every(self) -> list[DatabaseUsage]:
        """Every database metered since the start (or the last reset), deleted ones included."""
        return [u for k in self._dbs if (u := self.usage(k)) is not None]

    def clear(self) -> None:
        self._dbs.clear()

    async def close(self) -> None:
        await cancel(self._task)
        self._task = None
