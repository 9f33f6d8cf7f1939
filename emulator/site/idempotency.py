"""`Idempotency-Key` (draft-ietf-httpapi-idempotency-key-header) for POST /ask and POST /mcp.

A key is scoped to (client IP, method, path). The first request claims it ('pending'); a request with
the same key while that one runs gets 409; with a different payload, 422; after it finished, the
stored answer comes back byte for byte, marked `Idempotent-Replayed: true`, for `ttl` seconds of the
emulator's clock counted from completion. Streamed answers, 429s and 5xx are not stored, so the
client can simply try again. Records live in the store, so a replay survives a restart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable

import msgspec

from emulator.core.context import Core
from emulator.core.errors import BAD_REQUEST, CONFLICT, UNPROCESSABLE

MAX_KEY = 256


class Replay(msgspec.Struct):
    status: int
    headers: dict[str, str]
    body: bytes


def read_key(raw: str | None) -> str | None:
    """The key from the header value; the draft's quoted form and the bare form are both accepted."""
    if raw is None:
        return None
    key = raw.strip()
    if len(key) >= 2 and key[0] == key[-1] == '"':
        key = key[1:-1]
    if not 1 <= len(key) <= MAX_KEY:
        raise BAD_REQUEST(
            f"Idempotency-Key must be 1 to {MAX_KEY} characters long (got {len(key)}); "
            "send a fresh UUID for each logical request",
        )
    return key


def fingerprint(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else part.encode())
        h.update(b"\0")
    return h.hexdigest()


class Idempotency:
    def __init__(self, core: Core, ttl: int) -> None:
        self.core = core
        self.ttl = ttl

    async def recover(self) -> None:
        """Claims left by a process that stopped mid-request are released at start."""
        await self.core.store.execute("DELETE FROM idempotency WHERE state = 'pending'")

    async def begin(self, scope: str, key: str, fp: str) -> Replay | None:
        """Claim the key (None), or return the stored answer, or refuse with 409 / 422."""
        now = self.core.clock.now()
        async with self.core.store.transaction() as conn:
            async with conn.execute(
                "SELECT fingerprint, state, status, headers, body, expires_at FROM idempotency "
                "WHERE scope = ? AND key = ?",
                (scope, key),
            ) as cur:
                row = await cur.fetchone()
            if row is not None and row["expires_at"] is not None and row["expires_at"] <= now:
                await conn.execute("DELETE FROM idempotency WHERE scope = ? AND key = ?", (scope, key))
                row = None
            if row is None:
                await conn.execute(
                    "INSERT INTO idempotency (scope, key, fingerprint, state, created_at) "
                    "VALUES (?, ?, ?, 'pending', ?)",
                    (scope, key, fp, now),
                )
                return None
        if row["fingerprint"] != fp:
            raise UNPROCESSABLE(
                "this Idempotency-Key was already used with a different request; "
                "keys must be unique per logical request",
            )
        if row["state"] == "pending":
            raise CONFLICT(
                "a request with this Idempotency-Key is still being processed; retry shortly",
                retryable=True,
                headers={"Retry-After": "1"},
            )
        return Replay(row["status"], msgspec.json.decode(row["headers"]), row["body"])

    async def complete(self, scope: str, key: str, status: int, headers: dict[str, str], body: bytes) -> None:
        if status == 429 or status >= 500:
            await self.abandon(scope, key)
            return
        expires = self.core.clock.now() + self.ttl
        await self.core.store.execute(
            "UPDATE idempotency SET state = 'done', status = ?, headers = ?, body = ?, expires_at = ? "
            "WHERE scope = ? AND key = ?",
            (status, msgspec.json.encode(headers).decode(), body, expires, scope, key),
        )

    async def abandon(self, scope: str, key: str) -> None:
        await self.core.store.execute(
            "DELETE FROM idempotency WHERE scope = ? AND key = ? AND state = 'pending'", (scope, key)
        )

    async def sweep(self, now: float) -> None:
        """Evict records whose replay window has passed."""
        await self.core.store.execute("DELETE FROM idempotency WHERE state = 'done' AND expires_at <= ?", (now,))


class Answer(msgspec.Struct):
    """What a handler produced: a stored-able body, or a stream (never stored)."""

    status: int
    headers: dict[str, str]
    body: bytes = b""
    stream: object | None = None  # an async iterator of bytes when the answer streams


async def guarded(
    idem: Idempotency, scope: str, key: str | None, fp: str, produce: Callable[[], Awaitable[Answer]]
) -> tuple[Answer, bool]:
    """Run `produce` under an Idempotency-Key (if any). Returns the answer and whether it is a replay."""
    if key is None:
        return await produce(), False
    replay = await idem.begin(scope, key, fp)
    if replay is not None:
        return Answer(replay.status, {**replay.headers, "Idempotent-Replayed": "true"}, replay.body), True
    try:
        answer = await produce()
    except BaseException:
        await idem.abandon(scope, key)
        raise
    if answer.stream is not None:
        await idem.abandon(scope, key)
    else:
        await idem.complete(scope, key, answer.status, answer.headers, answer.body)
    return answer, False
