"""The shared core every origin uses: settings, store, clock, event bus and ids, opened once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable

import msgspec

from emulator.config import Settings
from emulator.core import canaries
from emulator.core.clock import Clock, ClockState
from emulator.core.events import EventBus
from emulator.core.faults import Faults
from emulator.core.ids import Ids
from emulator.core.listening import Listening
from emulator.core.payloads import ClockMoved, EmulatorReset
from emulator.core.snapshots import Snapshots
from emulator.core.store import Store
from emulator.core.switches import Switches
from emulator.core.tasks import cancel

log = logging.getLogger(__name__)


class _SavedClock(msgspec.Struct):
    offset: float = 0.0
    frozen_at: float | None = None


# What a reset keeps: the clock's state (rewritten), the docs index (derived from the docs, not from use).
# Kept by a reset: what configures the installation, not what a run made (the docs index, the service side's API
# keys and its webhook endpoints: a suite that resets between tests keeps its receiver).
_KEPT_TABLES = ("meta", "docs_", "service_keys", "webhook_endpoints")


class Core:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        clock: Clock,
        bus: EventBus,
        fault_operations: frozenset[str] = frozenset(),
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.bus = bus
        self.ids = Ids(settings.seed)
        self.faults = Faults(bus, fault_operations)  # the control plane's operation types a rule may name
        self.switches = Switches(settings, bus)
        self.planted = canaries.load(settings.canaries)  # an attacked trial's canaries (none: answers as always)
        self._ticker: asyncio.Task[None] | None = None
        self.stopping = asyncio.Event()  # set when the emulator is told to stop: long work (a snapshot) gives way
        self._due_lock = asyncio.Lock()
        self._on_reset: list[Callable[[], Awaitable[None]]] = []
        self._after_load: list[Callable[[], Awaitable[None]]] = []
        self._reset_lock = asyncio.Lock()
        self.snapshots = Snapshots(self, settings.state_dir / "snapshots")
        # What `reset --to start` goes back to: a snapshot taken at start, or nothing (an empty emulator).
        self.start_snapshot: str | None = None
        # Where this emulator listens (what it must never call, as a webhook): set by the server once it bound.
        self.listening = Listening()

    @classmethod
    async def open(cls, settings: Settings, fault_operations: frozenset[str] = frozenset()) -> Core:
        store = await Store.open(settings.db_path)
        saved = await store.get_meta("clock")
        state = msgspec.json.decode(saved, type=_SavedClock) if saved else _SavedClock()
        if settings.freeze_clock is not None:
            state = _SavedClock(frozen_at=settings.freeze_clock.timestamp())
        clock = Clock(offset=state.offset, frozen_at=state.frozen_at)
        bus = EventBus(store, clock, settings.journal_cap)
        await bus.start()
        core = cls(settings, store, clock, bus, fault_operations)
        await core._save_clock()
        return core

    async def _save_clock(self) -> None:
        saved = _SavedClock(offset=self.clock.offset, frozen_at=self.clock.frozen_at)
        await self.store.set_meta("clock", msgspec.json.encode(saved).decode())

    async def run_due(self) -> None:
        """Run every job that fell due; one pass at a time."""
        async with self._due_lock:
            await self.clock.run_due()

    async def move_clock(
        self, *, advance: float | None = None, set_to: float | None = None, freeze: bool | None = None
    ) -> ClockState:
        """Move the clock, persist it, journal it, and run what fell due before returning."""
        before = self.clock.now()
        if freeze is True:
            self.clock.freeze()
        if set_to is not None:
            self.clock.set(set_to)
        if advance is not None:
            self.clock.advance(advance)
        if freeze is False:
            self.clock.resume()
        await self._save_clock()
        state = self.clock.state()
        self.bus.publish(None, ClockMoved(before=before, now=state.now, frozen=state.frozen, iso=state.iso))
        await self.run_due()
        return state

    def on_reset(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Have `hook` run at every reset, before the store is emptied, in the order registered: the hosted
        platform's (its workloads stopped and removed) first, then what other parts keep in memory."""
        self._on_reset.append(hook)

    def after_load(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Have `hook` run after a snapshot is loaded (services that were running in it start again)."""
        self._after_load.append(hook)

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncGenerator[None, None]:
        """Nothing else resets, saves or loads, and no due job (a sweep, an expiry) runs meanwhile."""
        async with self._reset_lock, self._due_lock:
            yield

    async def clear_run(self) -> None:
        """The reset's hooks: every workload stopped, every file a run made removed, what parts keep in memory
        emptied (held by `exclusive`)."""
        for hook in self._on_reset:
            try:
                await hook()
            except Exception:
                # The rest of the reset must still happen: a run's rows must not outlive it.
                log.exception("reset: %s failed", getattr(hook, "__qualname__", hook))
        await self.bus.flush()  # the events the hooks published are written before the journal is emptied

    async def reload_clock(self, at: float | None = None) -> None:
        """The clock the store saved (a snapshot's); a running one starts again from `at`, the instant of the save,
        so a snapshot loaded later has lost no time (its trials have as long left as when it was saved)."""
        saved = await self.store.get_meta("clock")
        state = msgspec.json.decode(saved, type=_SavedClock) if saved else _SavedClock()
        self.clock.restore(offset=state.offset, frozen_at=state.frozen_at)
        if at is not None and state.frozen_at is None:
            self.clock.set(at)
        await self._save_clock()

    async def run_after_load(self) -> None:
        for hook in self._after_load:
            try:
                await hook()
            except Exception:
                log.exception("after a load: %s failed", getattr(hook, "__qualname__", hook))

    async def reset(self, to: str = "empty") -> float:
        """Back to an empty emulator without a restart: every registration, trial, organization, key, secret,
        session, database and service (their workloads gone), media, the journal, the rate-limit and idempotency
        windows, fault holds and switches, and the clock as it was at start. What makes this installation itself
        stays: signing keys, the CA, the secrets' key, built environments, the docs index, service keys and webhook
        endpoints. With `to="start"`, back to the state the emulator was started from (the snapshot taken at start,
        when it was not empty).
        Returns how long it took, in seconds."""
        if to == "start" and self.start_snapshot is not None:
            return await self.snapshots.load(self.start_snapshot, internal=True, as_reset=True)
        async with self.exclusive():
            began = time.perf_counter()
            await self.clear_run()
            await self.store.wipe(keep=_KEPT_TABLES)
            self.ids.reseed()
            self.faults.clear()  # after the wipe: a held request that goes on now writes to the new state
            self.switches.reset()
            frozen = self.settings.freeze_clock.timestamp() if self.settings.freeze_clock is not None else None
            self.clock.restore(offset=0.0, frozen_at=frozen)
            await self._save_clock()
            seconds = round(time.perf_counter() - began, 3)
            state = self.clock.state()
            self.bus.publish(
                None, EmulatorReset(to=to, seconds=seconds, now=state.now, frozen=state.frozen, iso=state.iso)
            )
            return seconds

    def start_ticker(self, every: float = 1.0) -> None:
        """While the clock runs by itself, due jobs run about once a second."""

        async def tick() -> None:
            while True:
                await asyncio.sleep(every)
                try:
                    await self.run_due()
                except Exception:
                    log.exception("a due job failed")

        self._ticker = asyncio.create_task(tick(), name="due-jobs")

    async def close(self) -> None:
        await self.snapshots.close()
        await cancel(self._ticker)
        await self.bus.stop()
        await self.store.close()
