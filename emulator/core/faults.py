"""Fault injection: hold the next N requests to a path until released.

A held request has passed its admission (rate limit, idempotency claim) and waits before doing its
work, which is how a test or a person sees what clients get while a request is still running (the
409 of a concurrent Idempotency-Key, a slow answer) without any timing luck.
"""

from __future__ import annotations

import asyncio
import contextlib

from emulator.core.events import EventBus
from emulator.core.kinds import Kind

# A hold that nobody releases must not pin a request forever.
MAX_HOLD_SECONDS = 120.0


class Faults:
    def __init__(self, bus: EventBus) -> None:
        self._bus = bus
        self._holds: dict[str, int] = {}
        self._waiting: list[tuple[str, asyncio.Event]] = []

    def hold(self, path: str, count: int = 1) -> None:
        self._holds[path] = self._holds.get(path, 0) + count
        self._bus.publish(Kind.FAULT_ARMED, path, action="hold", count=self._holds[path])

    def release(self, path: str | None = None) -> int:
        """Let held requests (of `path`, or all) go on; also disarms holds not yet used."""
        released = [(p, e) for p, e in self._waiting if path is None or p == path]
        for _, event in released:
            event.set()
        self._waiting = [(p, e) for p, e in self._waiting if (p, e) not in released]
        for p in [p for p in self._holds if path is None or p == path]:
            del self._holds[p]
        return len(released)

    def snapshot(self) -> dict[str, object]:
        return {"holds": dict(self._holds), "waiting": [p for p, _ in self._waiting]}

    async def checkpoint(self, path: str) -> None:
        if not self._holds.get(path):
            return
        self._holds[path] -= 1
        if not self._holds[path]:
            del self._holds[path]
        event = asyncio.Event()
        self._waiting.append((path, event))
        self._bus.publish(Kind.FAULT_HELD, path)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), MAX_HOLD_SECONDS)
        self._waiting = [(p, e) for p, e in self._waiting if e is not event]
