"""Webhook endpoints (`webhook_endpoints`, this module its one writer): added, listed, removed, declared. An
endpoint's signing secret is sealed with the secrets' key (secretbox.py): the sender must read it again to sign, so it
cannot be a hash; it is shown once, when the endpoint is added.

An endpoint never leads back into the emulator (core/listening.py): its URL is refused when added, and each try
(sender.py) resolves its host again, refuses an address of the emulator's own, and connects to the very addresses it
checked.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import msgspec

from emulator.core.clock import iso
from emulator.core.context import Core
from emulator.core.errors import BAD_REQUEST, NOT_FOUND
from emulator.core.listening import Listening, resolve
from emulator.core.secretbox import SecretBox
from emulator.core.store import Db, Outcome, fetch_all, fetch_one, one
from emulator.identity.agent_events import EVENTS
from emulator.identity.records import EndpointRecord, PendingCount
from emulator.identity.states import DeliveryState

if TYPE_CHECKING:
    import aiosqlite

RESOLVE_WHEN_ADDED = 2.0  # seconds a name may take to resolve when added; slower, it is checked at each try only
MAX_URL = 2048
_SECRET = re.compile(r"^[\x21-\x7e]{8,256}$")  # printable ASCII without spaces: it goes into an HMAC as UTF-8


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


def _view(endpoint: EndpointRecord) -> WebhookView:
    return WebhookView(
        id=endpoint.id, url=endpoint.url, events=endpoint.events or list(EVENTS), created_at=iso(endpoint.created_at)
    )


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
    rows = await fetch_all(
        db, EndpointRecord, "SELECT * FROM webhook_endpoints WHERE disabled_at IS NULL ORDER BY created_at, id"
    )
    return [_view(r) for r in rows]


async def remove(core: Core, endpoint_id: str) -> WebhookRemoved:
    """The endpoint goes, and with it its deliveries (the journal keeps their tries)."""
    async with core.store.transaction() as conn:
        row = await fetch_one(
            conn,
            PendingCount,
            "SELECT (SELECT COUNT(*) FROM webhook_deliveries WHERE endpoint_id = ? AND state = ?) AS pending "
            "FROM webhook_endpoints WHERE id = ?",
            (endpoint_id, DeliveryState.PENDING, endpoint_id),
        )
        if row is None:
            raise NOT_FOUND(f"no webhook endpoint {endpoint_id}")
        await conn.execute("DELETE FROM webhook_endpoints WHERE id = ?", (endpoint_id,))  # deliveries cascade
    return WebhookRemoved(removed=endpoint_id, dropped=row.pending)


async def declare(
    core: Core, box: SecretBox, conn: aiosqlite.Connection, url: str, events: list[str], secret: str, now: float
) -> Outcome:
    """A declared state's endpoint, matched by its URL: made, or brought to the declared events and secret."""
    found = await fetch_one(
        conn, EndpointRecord, "SELECT * FROM webhook_endpoints WHERE url = ? ORDER BY created_at", (url,)
    )
    if found is None:
        await _insert(conn, await _fresh_id(core, conn), url, events, box.seal(secret), now)
        return "created"
    if found.events == events and _opens_to(box, found.secret_box, secret):
        return "unchanged"
    await conn.execute(
        "UPDATE webhook_endpoints SET events = ?, secret_box = ?, disabled_at = NULL WHERE id = ?",
        (json.dumps(events), box.seal(secret), found.id),
    )
    return "updated"


def _opens_to(box: SecretBox, sealed: bytes, secret: str) -> bool:
    try:
        return hmac.compare_digest(box.open(sealed), secret)
    except Exception:  # sealed with another key (a store from elsewhere): not the declared secret
        return False
