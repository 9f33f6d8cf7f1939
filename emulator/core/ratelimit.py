"""Per-client rate limit with the IETF RateLimit header fields (list-of-items syntax, draft -08+).

A fixed window per client IP opens at the client's first request and lasts `window` seconds of the
emulator's clock, so a test moves the clock instead of waiting for the window to pass.
"""

from __future__ import annotations

import math

import msgspec

from emulator.core.clock import Clock


class Quota(msgspec.Struct):
    allowed: bool
    limit: int
    remaining: int
    reset: int  # whole seconds until the window closes, at least 1

    def headers(self, policy: str, window: int) -> dict[str, str]:
        return {
            "RateLimit-Policy": f'"{policy}";q={self.limit};w={window}',
            "RateLimit": f'"{policy}";r={self.remaining};t={self.reset}',
            # The spec asks for Retry-After on every answer: when the window resets.
            "Retry-After": str(self.reset),
        }


class RateLimiter:
    def __init__(self, clock: Clock, limit: int, window: int, policy: str) -> None:
        self.clock = clock
        self.limit = limit
        self.window = window
        self.policy = policy
        self._windows: dict[str, list[float]] = {}  # client -> [window start, count]

    def _current(self, client: str, now: float) -> list[float]:
        w = self._windows.get(client)
        if w is None or now >= w[0] + self.window or now < w[0]:
            w = self._windows[client] = [now, 0]
        return w

    def _quota(self, w: list[float], now: float, allowed: bool) -> Quota:
        reset = max(1, math.ceil(w[0] + self.window - now))
        return Quota(allowed, self.limit, max(0, self.limit - int(w[1])), reset)

    def hit(self, client: str) -> Quota:
        """Count one request; `allowed` is False once the window's quota is spent."""
        now = self.clock.now()
        w = self._current(client, now)
        if w[1] >= self.limit:
            return self._quota(w, now, False)
        w[1] += 1
        return self._quota(w, now, True)

    def peek(self, client: str) -> Quota:
        """The client's quota without counting a request (for answers that are not new work)."""
        now = self.clock.now()
        return self._quota(self._current(client, now), now, True)

    def headers(self, quota: Quota) -> dict[str, str]:
        return quota.headers(self.policy, self.window)

    async def reset(self) -> None:
        self._windows.clear()

    async def sweep(self, now: float) -> None:
        """Forget closed windows, so the table holds only clients seen in the last window."""
        for client in [c for c, w in self._windows.items() if now >= w[0] + self.window or now < w[0]]:
            del self._windows[client]
