"""Webhook endpoints and the sender that delivers the registration events (agent_events.py) to them, signed as
WorkOS signs them: the one writer of `webhook_endpoints`, of `webhook_deliveries` (after `agent_events.record` wrote
them, reading which endpoints take an event) and of `webhook_attempts`.

An endpoint's signing secret is sealed with the secrets' key (secretbox.py): the sender must read it again to sign,
so it cannot be a hash; it is shown once, when the endpoint is added. A delivery is tried at once, then again on the
emulator's clock after each failure (`BACKOFF`), so a test moves the clock to see a retry instead of waiting.

An endpoint never leads back into the emulator (core/listening.py): its URL is refused when added, and each try
resolves its host again, refuses an address of the emulator's own, and connects to the very addresses it checked.
A try has one deadline, from connecting to the last byte of the answer, and reads at most `MAX_ANSWER` bytes of it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
import socket
import sqlite3
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import msgspec

from emulator.core.clock import iso
from emulator.core.context import Core
from emulator.core.errors import BAD_REQUEST, NOT_FOUND
from emulator.core.listening import Listening, resolve
from emulator.core.payloads import WebhookDelivered, WebhookFailed
from emulator.core.secretbox import SecretBox
from emulator.core.store import Db, Outcome, many, one
from emulator.core.tasks import cancel
from emulator.identity.agent_events import EVENTS, envelope

if TYPE_CHECKING:
    import aiosqlite
    import httpx

log = logging.getLogger(__name__)

# Seconds of emulator time before each retry: the 2nd try a minute after the 1st fails, …, the 7th a day after
# the 6th; when the 7th fails too the delivery is `failed`.
BACKOFF = (60.0, 300.0, 1800.0, 7200.0, 28800.0, 86400.0)
TRY_TIMEOUT = 10.0  # seconds a try may take in all (real time: a receiver is a real server); webhook_try_timeout
MAX_ANSWER = 4096  # bytes of a receiver's answer read: what a 2xx needs; the rest is never read (the socket closes)
RESOLVE_WHEN_ADDED = 2.0  # seconds a name may take to resolve when added; slower, it is checked at each try only
MAX_URL = 2048
_SECRET = re.compile(r"^[\x21-\x7e]{8,256}$")  # printable ASCII without spaces: it goes into an HMAC as UTF-8
SIGNATURE_HEADER = "WorkOS-Signature"


# --- the views (the admin API answers with these; admin/wire.py re-exports them) ---------------------------------


class WebhookAdd(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Body of `POST /_emulator/webhooks`."""

    url: str  # an absolute http(s) URL
    events: list[str] | None = None  # a subset of agent_events.EVENTS; none or [] takes every event
    secret: str | None = None  # given (a receiver configured beforehand, in CI) or made (`whsec_…`)


class WebhookView(msgspec.Struct, kw_only=True):
    id: str
    url: str
    events: list[str]  # the event names it takes (every one when it was added without a list)
    created_at: str


class WebhookCreated(WebhookView, kw_only=True):
    secret: str  # the signing secret, shown only in this answer


class WebhookList(msgspec.Struct):
    webhooks: list[WebhookView]


class WebhookRemoved(msgspec.Struct):
    removed: str
    dropped: int  # its deliveries still pending, dropped with it


class AttemptView(msgspec.Struct, kw_only=True):
    attempt: int
    at: str  # emulator time
    status: int | None  # the receiver's HTTP status; none when none came
    error: str | None  # why it failed (a status, a refused connection, a timeout)
    ms: float


class DeliveryView(msgspec.Struct, kw_only=True):
    id: str
    endpoint_id: str
    url: str
    event_id: str
    event: str
    state: str  # pending, delivered, failed
    attempts: int
    next_at: str | None  # the next try (pending only), emulator time
    created_at: str
    tries: list[AttemptView]


class DeliveryList(msgspec.Struct):
    deliveries: list[DeliveryView]


# --- endpoints ---------------------------------------------------------------------------------------------------


def check_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError as e:
        raise BAD_REQUEST(f"webhook url: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or len(url) > MAX_URL:
        raise BAD_REQUEST(f"webhook url: an absolute http:// or https:// URL of at most {MAX_URL} characters")
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise BAD_REQUEST("webhook url: no spaces or control characters")
    return url


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


async def check_destination(listening: Listening, url: str) -> None:
    """A (checked) URL that leads into this emulator is refused: by its spelling, or by what its host resolves to
    now. A name that does not resolve (yet) passes: each try resolves it again and refuses it then."""
    host, port = _host_port(url)
    why = listening.refusal(host, port)  # by its spelling: no lookup
    if why is None and listening.what(port) is not None:
        addresses: list[str] = []
        try:
            async with asyncio.timeout(RESOLVE_WHEN_ADDED):
                addresses = await resolve(host, port)
        except (TimeoutError, OSError, UnicodeError):
            pass
        why = listening.refusal(host, port, addresses)
    if why is not None:
        raise BAD_REQUEST(f"webhook url: {why}")


def check_events(events: list[str] | None) -> list[str]:
    """The names as stored: [] for every event."""
    if not events:
        return []
    unknown = [e for e in events if e not in EVENTS]
    if unknown:
        raise BAD_REQUEST(
            f"webhook events: unknown {', '.join(map(repr, unknown))}; the events are {', '.join(EVENTS)}"
        )
    if len(set(events)) != len(events):
        raise BAD_REQUEST("webhook events: an event is named twice")
    return [e for e in EVENTS if e in events] if set(events) != set(EVENTS) else []


def check_secret(secret: str) -> str:
    if not _SECRET.match(secret):
        raise BAD_REQUEST("webhook secret: 8 to 256 printable ASCII characters, no spaces")
    return secret


def _view(row: sqlite3.Row) -> WebhookView:
    events = json.loads(row["events"])
    return WebhookView(id=row["id"], url=row["url"], events=events or list(EVENTS), created_at=iso(row["created_at"]))


async def add(core: Core, box: SecretBox, spec: WebhookAdd) -> WebhookCreated:
    """A new endpoint; its secret is in this answer only."""
    url, events = check_url(spec.url), check_events(spec.events)
    await check_destination(core.listening, url)
    secret = check_secret(spec.secret) if spec.secret is not None else core.ids.token("whsec_", 24)
    now = core.clock.now()
    sealed = box.seal(secret)
    async with core.store.transaction() as conn:
        endpoint_id = await _fresh_id(core, conn)
        await _insert(conn, endpoint_id, url, events, sealed, now)
    view = _view_of(endpoint_id, url, events, now)
    return WebhookCreated(id=view.id, url=view.url, events=view.events, created_at=view.created_at, secret=secret)


def _view_of(endpoint_id: str, url: str, events: list[str], now: float) -> WebhookView:
    return WebhookView(id=endpoint_id, url=url, events=events or list(EVENTS), created_at=iso(now))


async def _fresh_id(core: Core, conn: aiosqlite.Connection) -> str:
    """An endpoint id no endpoint has. Endpoints outlive a reset, which puts a seeded id generator back to its start:
    its next draw may be a kept endpoint's, so a taken one is drawn again."""
    endpoint_id = core.ids.ident("we_")
    while await one(conn, "SELECT 1 FROM webhook_endpoints WHERE id = ?", (endpoint_id,)) is not None:
        endpoint_id = core.ids.ident("we_")
    return endpoint_id


async def _insert(
    conn: aiosqlite.Connection, endpoint_id: str, url: str, events: list[str], sealed: bytes, now: float
) -> None:
    await conn.execute(
        "INSERT INTO webhook_endpoints (id, url, events, secret_box, created_at) VALUES (?, ?, ?, ?, ?)",
        (endpoint_id, url, json.dumps(events), sealed, now),
    )


async def every(db: Db) -> list[WebhookView]:
    rows = await many(db, "SELECT * FROM webhook_endpoints WHERE disabled_at IS NULL ORDER BY created_at, id")
    return [_view(r) for r in rows]


async def remove(core: Core, endpoint_id: str) -> WebhookRemoved:
    """The endpoint goes, and with it its deliveries (the journal keeps their tries)."""
    async with core.store.transaction() as conn:
        row = await one(
            conn,
            "SELECT (SELECT COUNT(*) FROM webhook_deliveries WHERE endpoint_id = ? AND state = 'pending') AS pending "
            "FROM webhook_endpoints WHERE id = ?",
            (endpoint_id, endpoint_id),
        )
        if row is None:
            raise NOT_FOUND(f"no webhook endpoint {endpoint_id}")
        await conn.execute("DELETE FROM webhook_endpoints WHERE id = ?", (endpoint_id,))  # deliveries cascade
    return WebhookRemoved(removed=endpoint_id, dropped=row["pending"])


async def declare(
    core: Core, box: SecretBox, conn: aiosqlite.Connection, url: str, events: list[str], secret: str, now: float
) -> Outcome:
    """A declared state's endpoint, matched by its URL: made, or brought to the declared events and secret."""
    found = await one(
        conn, "SELECT id, events, secret_box FROM webhook_endpoints WHERE url = ? ORDER BY created_at", (url,)
    )
    if found is None:
        await _insert(conn, await _fresh_id(core, conn), url, events, box.seal(secret), now)
        return "created"
    if json.loads(found["events"]) == events and _opens_to(box, found["secret_box"], secret):
        return "unchanged"
    await conn.execute(
        "UPDATE webhook_endpoints SET events = ?, secret_box = ?, disabled_at = NULL WHERE id = ?",
        (json.dumps(events), box.seal(secret), found["id"]),
    )
    return "updated"


def _opens_to(box: SecretBox, sealed: bytes, secret: str) -> bool:
    try:
        return hmac.compare_digest(box.open(sealed), secret)
    except Exception:  # sealed with another key (a store from elsewhere): not the declared secret
        return False


# --- the delivery log --------------------------------------------------------------------------------------------


async def deliveries(db: Db, endpoint_id: str | None = None, event_id: str | None = None) -> list[DeliveryView]:
    """Every delivery (of one endpoint, of one event) with each of its tries, oldest event first."""
    where, params = [], []
    if endpoint_id is not None:
        where.append("d.endpoint_id = ?")
        params.append(endpoint_id)
    if event_id is not None:
        where.append("d.event_id = ?")
        params.append(event_id)
    rows = await many(
        db,
        "SELECT d.*, w.url, e.event FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id "
        "JOIN agent_events e ON e.id = d.event_id"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY e.seq, d.created_at, d.id",
        params,
    )
    tries: dict[str, list[AttemptView]] = {}
    if rows:
        # The same filter, joined (an IN list of every delivery's id would pass SQLite's limit on parameters)
        found = await many(
            db,
            "SELECT a.* FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY a.delivery_id, a.attempt",
            params,
        )
        for a in found:
            tries.setdefault(a["delivery_id"], []).append(
                AttemptView(attempt=a["attempt"], at=iso(a["at"]), status=a["status"], error=a["error"], ms=a["ms"])
            )
    return [
        DeliveryView(
            id=r["id"],
            endpoint_id=r["endpoint_id"],
            url=r["url"],
            event_id=r["event_id"],
            event=r["event"],
            state=r["state"],
            attempts=r["attempts"],
            next_at=iso(r["next_at"]) if r["state"] == "pending" and r["next_at"] is not None else None,
            created_at=iso(r["created_at"]),
            tries=tries.get(r["id"], []),
        )
        for r in rows
    ]


# --- the sender --------------------------------------------------------------------------------------------------


def signature(secret: str, body: bytes, at_ms: int) -> str:
    """The `WorkOS-Signature` header: `t=<ms>, v1=<hex HMAC-SHA256 of "<ms>.<body>">`, as the workos SDK checks it."""
    digest = hmac.new(secret.encode(), f"{at_ms}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={at_ms}, v1={digest}"


class _Answer:
    """What a try got so far: its status once the status line came, its error once it failed (kept when the
    deadline cuts the try short)."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.error: str | None = None


def _client() -> httpx.AsyncClient:
    """An endpoint's worker's own client. Imported at the first try: an emulator no one registers a webhook with
    never imports httpx. The try's deadline (asyncio.timeout around it) bounds it; the client's own timeouts are off."""
    import httpx

    return httpx.AsyncClient(timeout=None, follow_redirects=False, trust_env=False)


class _Try(msgspec.Struct, frozen=True):
    delivery_id: str
    endpoint_id: str
    event_id: str
    event: str
    attempt: int
    url: str
    body: bytes
    secret: str | None  # None: the sealed secret could not be opened


_DUE = (
    "SELECT d.id, d.endpoint_id FROM webhook_deliveries d JOIN agent_events e ON e.id = d.event_id "
    "WHERE d.state = 'pending' AND d.next_at <= ? {} ORDER BY e.seq, d.id"
)


class Sender:
    """Delivers what is due: woken by each registration event journaled and by every run of the due jobs (the
    clock moved, or the ~1 s ticker). One worker per endpoint with something due, each with its own HTTP client
    (no connection pool shared), so an endpoint gets its deliveries in order and one at a time, and a slow or
    huge receiver holds up no other: each try ends by its deadline. `stop` is the one teardown of the listener
    and the workers (each closes its own client)."""

    def __init__(self, core: Core, box: SecretBox, timeout: float = TRY_TIMEOUT) -> None:
        self._core = core
        self._box = box
        self._timeout = timeout
        self._listener: asyncio.Task[None] | None = None
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()  # endpoints found due while their worker was on its way out
        self._stopped = False

    def start(self) -> None:
        self._core.clock.on_due(self.due)
        self._listener = asyncio.create_task(self._listen(), name="webhook-listener")

    async def stop(self) -> None:
        self._stopped = True
        await cancel(self._listener)
        for task in list(self._workers.values()):
            await cancel(task)
        self._workers.clear()

    async def due(self, now: float) -> None:
        """The due job: start a worker for each endpoint with a delivery due (awaited by a clock move, which so
        returns once what fell due is on its way)."""
        if self._stopped:
            return
        rows = await self._core.store.fetchall(_DUE.format(""), (now,))
        if self._stopped:  # stopped while it read: no worker may start after stop()
            return
        for endpoint_id in dict.fromkeys(r["endpoint_id"] for r in rows):
            if endpoint_id in self._workers:
                self._again.add(endpoint_id)
            else:
                self._workers[endpoint_id] = asyncio.create_task(self._work(endpoint_id), name=f"webhook {endpoint_id}")

    async def _listen(self) -> None:
        """Follows the journal's registration events: each batch written may have made deliveries."""
        await self._due_safely()  # what was pending when the emulator stopped last
        while not self._core.stopping.is_set():
            async for _ in self._core.bus.follow_batches(None, ("agent.registration.",)):
                await self._due_safely()
            await asyncio.sleep(0.1)  # the feed ended (fell behind, or a stop): catch up
            await self._due_safely()

    async def _due_safely(self) -> None:
        try:
            await self.due(self._core.clock.now())
        except Exception:
            log.exception("webhooks: finding the due deliveries failed")

    async def _work(self, endpoint_id: str) -> None:
        http: httpx.AsyncClient | None = None
        try:
            while True:
                rows = await self._core.store.fetchall(
                    _DUE.format("AND d.endpoint_id = ?") + " LIMIT 1", (self._core.clock.now(), endpoint_id)
                )
                if not rows:
                    if endpoint_id in self._again:  # found due meanwhile: look once more
                        self._again.discard(endpoint_id)
                        continue
                    return
                self._again.discard(endpoint_id)
                if self._stopped:
                    return
                attempt = await self._prepare(rows[0]["id"])
                if attempt is None:
                    continue  # gone meanwhile (the endpoint removed, a reset, a snapshot loaded)
                if http is None:
                    http = _client()
                status, error, ms = await self._send(http, attempt)
                await self._record(attempt, status, error, ms)
        except Exception:
            log.exception("webhooks: delivering to %s failed", endpoint_id)  # the emulator's fault, not a receiver's
        finally:
            self._workers.pop(endpoint_id, None)
            if http is not None:
                await http.aclose()

    async def _prepare(self, delivery_id: str) -> _Try | None:
        row = await self._core.store.fetchone(
            "SELECT d.id AS delivery_id, d.endpoint_id, d.event_id, d.attempts, w.url, w.secret_box, "
            "e.id, e.event, e.data, e.created_at FROM webhook_deliveries d "
            "JOIN webhook_endpoints w ON w.id = d.endpoint_id JOIN agent_events e ON e.id = d.event_id "
            "WHERE d.id = ? AND d.state = 'pending'",
            (delivery_id,),
        )
        if row is None:
            return None
        try:
            secret: str | None = self._box.open(row["secret_box"])
        except Exception:
            secret = None
        return _Try(
            delivery_id=row["delivery_id"],
            endpoint_id=row["endpoint_id"],
            event_id=row["event_id"],
            event=row["event"],
            attempt=row["attempts"] + 1,
            url=row["url"],
            body=envelope(row),  # the row's id, event, data and created_at are the event's
            secret=secret,
        )

    async def _send(self, http: httpx.AsyncClient, t: _Try) -> tuple[int | None, str | None, float]:
        """One POST: (status, error, ms), all of it within the deadline. Every way a receiver can fail is an
        outcome here, never an exception."""
        if t.secret is None:
            return None, "the endpoint's signing secret cannot be opened with this emulator's key", 0.0
        import httpx

        # The signature's timestamp is the real time of the try, not the emulator's clock: a receiver's verifier
        # (the workos SDK's) compares it with its own wall clock (180 s tolerance), and tests move the emulator's.
        at_ms = int(time.time() * 1000)
        headers = {"Content-Type": "application/json", SIGNATURE_HEADER: signature(t.secret, t.body, at_ms)}
        began = time.perf_counter()
        answer = _Answer()
        try:
            async with asyncio.timeout(self._timeout):
                await self._post(http, t, headers, answer)
        except TimeoutError:
            answer.error = f"no complete answer within {self._timeout:g} s"
        except httpx.ConnectError as e:
            answer.error = f"cannot connect: {_reason(e)}"
        except httpx.HTTPError as e:
            answer.error = f"{type(e).__name__}: {_reason(e)}"
        except Exception as e:  # anything else the transport raises (a bad TLS setup): still a failed try
            answer.error = f"{type(e).__name__}: {_reason(e)}"
        return answer.status, answer.error, round((time.perf_counter() - began) * 1000, 1)

    async def _post(self, http: httpx.AsyncClient, t: _Try, headers: dict[str, str], answer: _Answer) -> None:
        """Resolves the endpoint's host, refuses it if it is this emulator, and posts to the addresses it checked
        (none resolved again behind the check's back), the next one only when one cannot be connected to. Reads
        the status and at most MAX_ANSWER bytes of the body; leaving the stream early closes the connection."""
        import httpx

        url = httpx.URL(t.url)
        host, port = url.raw_host.decode("ascii"), url.port or (443 if url.scheme == "https" else 80)
        try:
            addresses = await resolve(host, port)
        except (OSError, UnicodeError) as e:
            answer.error = f"cannot resolve {host}: {e.strerror if isinstance(e, socket.gaierror) else e}"
            return
        why = self._core.listening.refusal(host, port, addresses)
        if why is not None:
            answer.error = f"not sent: {why}"
            return
        headers["Host"] = url.netloc.decode("ascii")
        # TLS names (SNI) and checks the certificate against the host, not the address connected to
        extensions = {"sni_hostname": host} if url.scheme == "https" else {}
        for i, address in enumerate(addresses):
            try:
                async with http.stream(
                    "POST", url.copy_with(host=address), content=t.body, headers=headers, extensions=extensions
                ) as r:
                    answer.status = r.status_code
                    read = 0
                    async for chunk in r.aiter_raw():
                        read += len(chunk)
                        if read >= MAX_ANSWER:
                            break
            except httpx.ConnectError:
                if i == len(addresses) - 1:
                    raise
                continue
            if not 200 <= r.status_code < 300:
                answer.error = f"HTTP {r.status_code}"
            return

    async def _record(self, t: _Try, status: int | None, error: str | None, ms: float) -> None:
        core = self._core
        now = core.clock.now()
        delivered = error is None
        next_at: float | None = None
        if not delivered and t.attempt <= len(BACKOFF):
            next_at = now + BACKOFF[t.attempt - 1]
        state = "delivered" if delivered else ("pending" if next_at is not None else "failed")
        async with core.store.transaction() as conn:
            # Still the delivery this try was for: a reset or a load may have replaced the rows (a seeded emulator
            # makes the same ids again).
            current = await one(
                conn,
                "SELECT attempts FROM webhook_deliveries WHERE id = ? AND event_id = ? AND state = 'pending'",
                (t.delivery_id, t.event_id),
            )
            if current is None or current["attempts"] != t.attempt - 1:
                return
            await conn.execute(
                "INSERT INTO webhook_attempts (delivery_id, attempt, at, status, error, ms) VALUES (?, ?, ?, ?, ?, ?)",
                (t.delivery_id, t.attempt, now, status, error, ms),
            )
            await conn.execute(
                "UPDATE webhook_deliveries SET state = ?, attempts = ?, next_at = ? WHERE id = ?",
                (state, t.attempt, next_at, t.delivery_id),
            )
        common = {"url": t.url, "event_id": t.event_id, "event": t.event, "attempt": t.attempt, "status": status}
        if delivered:
            core.bus.publish(t.endpoint_id, WebhookDelivered(**common, ms=ms))
        else:
            core.bus.publish(
                t.endpoint_id,
                WebhookFailed(**common, error=error, ms=ms, next_at=iso(next_at) if next_at is not None else None),
            )


def _reason(e: BaseException) -> str:
    """A transport error's own words, on one line: the OS's when it wrapped one (`Connection refused`; httpx says
    only `All connection attempts failed`)."""
    cause: BaseException | None = e
    seen: set[int] = set()
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
        cause = cause.__cause__ or cause.__context__
    text = str(e) or type(e).__name__
    return " ".join(text.split())[:300]
