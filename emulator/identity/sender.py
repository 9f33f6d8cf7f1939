"""The webhook sender: delivers the registration events (agent_events.py) to the endpoints that take them
(endpoints.py), signed as WorkOS signs them. A delivery is tried at once, then again on the emulator's clock after
each failure (`BACKOFF`), so a test moves the clock to see a retry instead of waiting; each try is recorded by
deliveries.py.

A try resolves the endpoint's host again, refuses an address of the emulator's own (core/listening.py), and connects
to the very addresses it checked. It has one deadline, from connecting to the last byte of the answer, and reads at
most `MAX_ANSWER` bytes of it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import socket
import time
from typing import TYPE_CHECKING

import msgspec

from emulator.core.clock import iso
from emulator.core.context import Core
from emulator.core.listening import resolve
from emulator.core.payloads import WebhookDelivered, WebhookFailed
from emulator.core.secretbox import SecretBox
from emulator.core.store import fetch_one
from emulator.core.tasks import cancel
from emulator.identity import deliveries
from emulator.identity.agent_events import envelope
from emulator.identity.records import DeliveryTry
from emulator.identity.states import DeliveryState

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

# Seconds of emulator time before each retry: the 2nd try a minute after the 1st fails, …, the 7th a day after
# the 6th; when the 7th fails too the delivery is `failed`.
BACKOFF = (60.0, 300.0, 1800.0, 7200.0, 28800.0, 86400.0)
TRY_TIMEOUT = 10.0  # seconds a try may take in all (real time: a receiver is a real server); webhook_try_timeout
MAX_ANSWER = 4096  # bytes of a receiver's answer read: what a 2xx needs; the rest is never read (the socket closes)
SIGNATURE_HEADER = "WorkOS-Signature"


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
        rows = await deliveries.due(self._core, now)
        if self._stopped:  # stopped while it read: no worker may start after stop()
            return
        for endpoint_id in dict.fromkeys(r.endpoint_id for r in rows):
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
                rows = await deliveries.due(self._core, self._core.clock.now(), endpoint_id)
                if not rows:
                    if endpoint_id in self._again:  # found due meanwhile: look once more
                        self._again.discard(endpoint_id)
                        continue
                    return
                self._again.discard(endpoint_id)
                if self._stopped:
                    return
                attempt = await self._prepare(rows[0].id)
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
        row = await fetch_one(
            self._core.store,
            DeliveryTry,
            "SELECT d.id AS delivery_id, d.endpoint_id, d.event_id, d.attempts, w.url, w.secret_box, "
            "e.id, e.event, e.data, e.created_at FROM webhook_deliveries d "
            "JOIN webhook_endpoints w ON w.id = d.endpoint_id JOIN agent_events e ON e.id = d.event_id "
            "WHERE d.id = ? AND d.state = ?",
            (delivery_id, DeliveryState.PENDING),
        )
        if row is None:
            return None
        try:
            secret: str | None = self._box.open(row.secret_box)
        except Exception:
            secret = None
        return _Try(
            delivery_id=row.delivery_id,
            endpoint_id=row.endpoint_id,
            event_id=row.event_id,
            event=row.event,
            attempt=row.attempts + 1,
            url=row.url,
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
        state = (
            DeliveryState.DELIVERED
            if delivered
            else (DeliveryState.PENDING if next_at is not None else DeliveryState.FAILED)
        )
        if not await deliveries.record_try(
            core, t.delivery_id, t.event_id, t.attempt, (status, error, ms), state, next_at, now
        ):
            return
        if delivered:
            tried = WebhookDelivered(
                url=t.url, event_id=t.event_id, event=t.event, attempt=t.attempt, status=status, ms=ms
            )
            core.bus.publish(t.endpoint_id, tried)
        else:
            failed = WebhookFailed(
                url=t.url,
                event_id=t.event_id,
                event=t.event,
                attempt=t.attempt,
                status=status,
                error=error,
                ms=ms,
                next_at=iso(next_at) if next_at is not None else None,
            )
            core.bus.publish(t.endpoint_id, failed)


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
