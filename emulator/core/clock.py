"""The emulator's clock: every expiry, rate window and replay window reads it, never the wall clock.

The clock runs at wall speed with an offset, or stands frozen at one instant. Moving it (set, advance,
freeze, resume) is done through `Core.move_clock`, which also persists the state and runs every job
that fell due before returning, so a caller can assert right after.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import msgspec

# The last instant the clock may show (9999-12-31T23:59:59Z): beyond it dates cannot be printed.
MAX_TIME = 253402300799.0

# A job that falls due with time: it receives the emulator's `now` and does whatever expired.
DueJob = Callable[[float], Awaitable[None]]


class ClockState(msgspec.Struct):
    now: float
    frozen: bool
    offset: float

    @property
    def iso(self) -> str:
        return iso(self.now)


def iso(ts: float) -> str:
    """RFC 3339 UTC with a `Z`, second precision: the form every surface prints."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Clock:
    def __init__(self, *, offset: float = 0.0, frozen_at: float | None = None) -> None:
        self._offset = offset
        self._frozen_at = frozen_at
        self._jobs: list[DueJob] = []

    def now(self) -> float:
        return self._frozen_at if self._frozen_at is not None else time.time() + self._offset

    def datetime(self) -> datetime:
        return datetime.fromtimestamp(self.now(), UTC)

    @property
    def frozen(self) -> bool:
        return self._frozen_at is not None

    @property
    def offset(self) -> float:
        return self._offset

    @property
    def frozen_at(self) -> float | None:
        return self._frozen_at

    def state(self) -> ClockState:
        return ClockState(now=self.now(), frozen=self.frozen, offset=self._offset)

    # Moves. Time never runs backwards for due jobs' sake: set() may go back, but what already
    # expired stays expired.
    def set(self, ts: float) -> None:
        if self._frozen_at is not None:
            self._frozen_at = ts
        else:
            self._offset = ts - time.time()

    def restore(self, *, offset: float, frozen_at: float | None) -> None:
        """Put the clock back in a given state (a reset, a snapshot loaded)."""
        self._offset, self._frozen_at = offset, frozen_at

    def advance(self, seconds: float) -> None:
        self.set(self.now() + seconds)

    def freeze(self, at: float | None = None) -> None:
        self._frozen_at = self.now() if at is None else at

    def resume(self) -> None:
        if self._frozen_at is not None:
            self._offset = self._frozen_at - time.time()
            self._frozen_at = None

    # Due jobs.
    def on_due(self, job: DueJob) -> None:
        self._jobs.append(job)

    async def run_due(self) -> None:
        now = self.now()
        for job in self._jobs:
            await job(now)


def parse_duration(text: str) -> float:
    """`90`, `90s`, `15m`, `48h`, `2d`, `1h30m`, `-5m`: seconds as a float."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    raw = text.strip().lower()
    sign = -1 if raw.startswith("-") else 1
    raw = raw.lstrip("+-")
    if not raw:
        raise ValueError("empty duration")
    try:
        return sign * float(raw)
    except ValueError:
        pass
    total, number = 0.0, ""
    for ch in raw:
        if ch.isdigit() or ch == ".":
            number += ch
        elif ch in units and number:
            total += float(number) * units[ch]
            number = ""
        else:
            raise ValueError(f"{text!r} is not a duration like 90s, 15m, 48h or 2d")
    if number:
        raise ValueError(f"{text!r}: the last number has no unit (s, m, h, d, w)")
    return sign * total
