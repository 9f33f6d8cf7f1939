"""The event bus: every state change and every served agent call is an event.

`publish` never blocks the request that publishes: it numbers the event and queues it for the journal
writer, which appends batches to the capped `events` table and then hands them to live subscribers. A
subscriber thus never sees an event that is not in the journal: after a killed emulator, numbering goes on
from the journal, and no number a follower saw is given again. A subscriber that asks for history first
waits for the writer to catch up, then reads the journal, then follows the live feed, so nothing is missed
or repeated between the two.

The state changes a request publishes are counted in its context (`caused`): the request layer (core.served)
waits with `flush(upto=...)` until they are written before it answers, so an acknowledged write's events are
in the journal, and a `kill -9` right after the answer loses none of them. A request that changed nothing (its
only events are records of the call: `Payload.CALL_RECORD`) never waits; concurrent requests' events go into
the writer's same batch, one transaction for all.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import logging
import sqlite3
from collections.abc import AsyncIterator, Generator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import msgspec

from emulator.core import payloads
from emulator.core.clock import Clock
from emulator.core.payloads import P, Payload, Unread
from emulator.core.store import Store
from emulator.core.tasks import cancel
from emulator.core.watch import Watch

log = logging.getLogger(__name__)
RETRY_EVERY = 1.0  # seconds between attempts to write a batch the store refused
FOLLOW_LIMIT = 2000  # events a live reader may fall behind before it is cut off (the log's is the journal's cap)
RETRY_KEEP = 100_000  # events kept for a journal that cannot be written; beyond, the oldest are dropped
_encode = msgspec.json.Encoder().encode


class Event(msgspec.Struct, frozen=True):
    seq: int
    ts: float
    kind: str
    subject: str | None
    data: Payload | Unread  # its kind's payload (`isinstance` narrows it); Unread only for a row of another shape

    def payload(self, cls: type[P]) -> P:
        """The payload of an event known to be of `cls`'s kind (found by its kind, or kept in an index of them)."""
        if not isinstance(self.data, cls):
            raise TypeError(f"event #{self.seq} ({self.kind}) is not a {cls.__name__}")
        return self.data


class Caused:
    """The last event published in one request's context (0: none): what its answer waits to see journaled."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last = 0


# The request being served in this context, if any. A task the request starts inherits it: what that task
# publishes before the answer is sent is waited for too (after it, the holder is no longer read).
_CAUSED: ContextVar[Caused | None] = ContextVar("caused", default=None)


@contextmanager
def caused() -> Generator[Caused, None, None]:
    """Count what this context publishes (a request's task and the tasks it starts), for its answer to wait on."""
    holder = Caused()
    token = _CAUSED.set(holder)
    try:
        yield holder
    finally:
        _CAUSED.reset(token)


class Subscription:
    """A live reader's queue of the journal's batches, as written (those of its kinds). It holds at most `limit`
    events: a reader further behind is cut off, and reconnects with its last seq to catch up from the journal."""

    def __init__(self, bus: EventBus, prefixes: tuple[str, ...], limit: int) -> None:
        self._bus = bus
        self.prefixes = prefixes
        self.limit = limit
        self.queue: asyncio.Queue[list[Event] | None] = asyncio.Queue()
        self.queued = 0  # events in the queue
        self.lagged = False

    def offer(self, batch: list[Event]) -> None:
        wanted = [e for e in batch if e.kind.startswith(self.prefixes)] if self.prefixes else batch
        if not wanted:
            return
        if self.queued + len(wanted) > self.limit:
            self.lagged = True
            self._bus.unsubscribe(self)
            self.close()
            return
        self.queued += len(wanted)
        self.queue.put_nowait(wanted)

    def taken(self, batch: list[Event]) -> None:
        self.queued -= len(batch)

    def close(self) -> None:
        """Tell the reader the feed has ended."""
        self.queue.put_nowait(None)


class EventBus:
    def __init__(self, store: Store, clock: Clock, cap: int) -> None:
        self._store = store
        self._clock = clock
        self._cap = cap
        self._seq = 0
        self._pending: list[Event] = []
        self._wake = asyncio.Event()
        self._written = 0
        # Flushes waiting for the journal to reach a seq, soonest first: each written batch releases those it covers
        # and wakes nobody else (many concurrent answers wait, each for its own events).
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._tie = itertools.count()
        self._subs: set[Subscription] = set()
        self._task: asyncio.Task[None] | None = None
        self._failing: str | None = None  # why the last write failed, while the journal cannot be written
        self.watch = Watch(self.publish)  # what an evaluation harness watches for (nothing by default)

    async def start(self) -> None:
        row = await self._store.fetchone("SELECT COALESCE(MAX(seq), 0) AS seq FROM events")
        self._seq = self._written = row["seq"] if row else 0
        self._task = asyncio.create_task(self._writer(), name="event-journal")

    async def stop(self) -> None:
        await self.flush()
        await cancel(self._task)
        self._release(None)  # nothing is written any more: nobody waits for it
        self.end_streams()

    def end_streams(self) -> None:
        """End every live subscription (at shutdown, so open event streams close)."""
        for sub in list(self._subs):
            sub.close()
        self._subs.clear()

    @property
    def cap(self) -> int:
        """How many events the journal keeps: a reader further behind than that has missed some."""
        return self._cap

    @property
    def last_seq(self) -> int:
        return self._seq

    def publish(self, subject: str | None, payload: Payload, /) -> Event:
        """Journal `payload` (its kind is its type's) about `subject`: the one form of its resource (core.kinds)."""
        data: Payload | Unread = payload
        if self.watch.values:  # a watched value never reaches the journal (nor the log made from it) in clear
            subject, data = self.watch.redact(subject, payload)
        self._seq += 1
        event = Event(self._seq, self._clock.now(), payload.KIND, subject, data)
        self._pending.append(event)
        self._wake.set()
        if not payload.CALL_RECORD:
            holder = _CAUSED.get()
            if holder is not None:
                holder.last = event.seq
        return event

    async def flush(self, upto: int | None = None) -> None:
        """Wait until every event published so far (or up to `upto`) is in the journal, or the journal cannot be
        written (a full disk: what it holds is all there is to read until it has room again; nothing may hang on
        it, neither a reader nor an answer)."""
        target = self._seq if upto is None else upto
        if self._written >= target or self._failing is not None:
            return
        done = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (target, next(self._tie), done))
        await done

    def _release(self, upto: int | None) -> None:
        """Wake the flushes waiting for events up to `upto` (None: all of them, the journal cannot be written)."""
        while self._waiting and (upto is None or self._waiting[0][0] <= upto):
            done = heapq.heappop(self._waiting)[2]
            if not done.done():  # a flush cancelled meanwhile (a client gone) leaves its future behind
                done.set_result(None)

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            if not batch:
                continue
            rows = [(e.seq, e.ts, e.kind, e.subject, _encode(e.data).decode()) for e in batch]
            first, last = batch[0].seq, batch[-1].seq
            prune = last - self._cap if last // 500 != (first - 1) // 500 else None
            try:
                await self._store.write(functools.partial(_append, rows=rows, prune_to=prune))
            except Exception as e:
                # Kept, and written once the store takes it (a full disk frees up): a subscriber is offered only
                # what the journal holds, so the dashboard never shows an event that traces and reports miss.
                self._pending = batch[-RETRY_KEEP:] + self._pending
                if self._failing is None:
                    log.error(
                        "event journal: %d events not written yet, retrying every %.0f s: %s",
                        len(batch),
                        RETRY_EVERY,
                        e,
                    )
                self._failing = str(e)
                self._release(None)
                await asyncio.sleep(RETRY_EVERY)
                self._wake.set()
                continue
            if self._failing is not None:
                log.warning("event journal: written again after %s", self._failing)
                self._failing = None
            for sub in list(self._subs):
                sub.offer(batch)
            self._written = batch[-1].seq
            self._release(self._written)

    def subscribe(self, prefixes: tuple[str, ...] = (), limit: int = FOLLOW_LIMIT) -> Subscription:
        sub = Subscription(self, prefixes, limit)
        self._subs.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subs.discard(sub)

    async def history(self, since: int, prefixes: tuple[str, ...] = (), limit: int = 1000) -> list[Event]:
        await self.flush()
        where, params = "seq > ?", [since]
        if prefixes:
            where += " AND (" + " OR ".join("kind LIKE ? ESCAPE '\\'" for _ in prefixes) + ")"
            params += [p.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for p in prefixes]
        rows = await self._store.fetchall(
            f"SELECT seq, ts, kind, subject, data FROM events WHERE {where} ORDER BY seq LIMIT ?",
            (*params, limit),
        )
        return [Event(r["seq"], r["ts"], r["kind"], r["subject"], payloads.decode(r["kind"], r["data"])) for r in rows]

    async def follow(self, since: int | None, prefixes: tuple[str, ...] = ()) -> AsyncIterator[Event]:
        """History after `since` (None = only new events), then live events, in order, no repeats."""
        async for batch in self.follow_batches(since, prefixes):
            for event in batch:
                yield event

    async def follow_batches(
        self, since: int | None, prefixes: tuple[str, ...] = (), limit: int = FOLLOW_LIMIT
    ) -> AsyncIterator[list[Event]]:
        """`follow`, a batch at a time: each is what was there to read at once (a page of history, or the live events
        queued meanwhile), for a reader whose cost is per write rather than per event (the log). `limit`: the most
        events it may fall behind before it is cut off (and reads them from the journal)."""
        sub = self.subscribe(prefixes, limit)
        try:
            last = since if since is not None else self._seq
            if since is not None:
                while True:
                    backlog = await self.history(last, prefixes)
                    if backlog:
                        last = backlog[-1].seq
                        yield backlog
                    if len(backlog) < 1000:
                        break
            while True:
                queued = [await sub.queue.get()]
                while not sub.queue.empty():
                    queued.append(sub.queue.get_nowait())
                batch: list[Event] = []
                for written in queued:
                    if written is None:  # the feed ended: a shutdown, or this reader fell too far behind
                        if batch:
                            yield batch
                        return
                    sub.taken(written)
                    fresh = [event for event in written if event.seq > last]
                    if fresh:
                        last = fresh[-1].seq
                        batch += fresh
                if batch:
                    yield batch
        finally:
            self.unsubscribe(sub)


def _append(db: sqlite3.Connection, *, rows: list[tuple[Any, ...]], prune_to: int | None) -> None:
    """A batch of events into the journal, and (every 500) the oldest beyond its cap out, in one transaction."""
    db.executemany("INSERT INTO events (seq, ts, kind, subject, data) VALUES (?, ?, ?, ?, ?)", rows)
    if prune_to is not None:
        db.execute("DELETE FROM events WHERE seq <= ?", (prune_to,))
