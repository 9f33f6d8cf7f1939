"""The service side's API keys: what a service (Pixeltable's own backend is one) sends as `Authorization: Bearer
sk_test_…` to the identity provider's agents API. The only SQL of the `service_keys` table.

A key is shown once, when it is made; only its hash is stored, with its last four characters (`hint`) to tell keys
apart. The `service_api_key` setting is accepted as well, for a CI whose service is configured before the emulator
starts; it is never stored. A reset keeps the keys: they are the installation's configuration, not a run's state.
"""

from __future__ import annotations

import hmac
import re

import msgspec

from emulator.core.clock import iso
from emulator.core.context import Core
from emulator.core.errors import BAD_REQUEST, ENTITY_NOT_FOUND
from emulator.core.ids import SERVICE_KEY, secret_hash
from emulator.core.store import Db, Outcome, fetch_all, fetch_one, one, run
from emulator.identity.records import ServiceKeyRecord, ServiceKeyRef

PREFIX = "sk_test_"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}$")
SETTINGS_KEY_ID = "settings"  # who a call with the `service_api_key` setting's key is, in the journal


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise BAD_REQUEST("a service key's name is 1 to 64 letters, digits, spaces, dots, dashes or underscores")
    return name


def check_key(key: str) -> str:
    """A fixed key (a declared state's, the setting's) must look like the keys this provider makes."""
    if not SERVICE_KEY.match(key):
        raise BAD_REQUEST("a service key is sk_test_ followed by 16 to 128 letters, digits or underscores")
    return key


class ServiceKeyView(msgspec.Struct):
    """A service key as the operator sees it: never the key or its hash."""

    id: str
    name: str
    hint: str  # the key's last four characters
    created_at: str
    revoked_at: str | None


class ServiceKeyCreated(msgspec.Struct):
    """A new key: `key` is shown here once and never again."""

    id: str
    name: str
    key: str
    hint: str
    created_at: str


def _view(key: ServiceKeyRecord) -> ServiceKeyView:
    revoked = key.revoked_at
    return ServiceKeyView(key.id, key.name, key.hint, iso(key.created_at), iso(revoked) if revoked else None)


async def _insert(core: Core, conn: Db, name: str, key: str, now: float) -> str:
    key_id = core.ids.ident("skey_")
    while await one(conn, "SELECT 1 FROM service_keys WHERE id = ?", (key_id,)) is not None:
        key_id = core.ids.ident("skey_")  # a seeded generator after a reset (see create)
    await run(
        conn,
        "INSERT INTO service_keys (id, name, key_hash, hint, created_at) VALUES (?, ?, ?, ?, ?)",
        (key_id, name, secret_hash(key), key[-4:], now),
    )
    return key_id


async def create(core: Core, name: str) -> ServiceKeyCreated:
    check_name(name)
    now = core.clock.now()
    async with core.store.transaction() as conn:
        # Keys outlive a reset, which puts a seeded id generator back to its start: its next draw may be a kept
        # key's, so a draw that is taken is drawn again.
        while True:
            key = core.ids.token(PREFIX, 24)
            if await one(conn, "SELECT 1 FROM service_keys WHERE key_hash = ?", (secret_hash(key),)) is None:
                break
        key_id = await _insert(core, conn, name, key, now)
    return ServiceKeyCreated(key_id, name, key, key[-4:], iso(now))


async def listing(db: Db) -> list[ServiceKeyView]:
    return [
        _view(r) for r in await fetch_all(db, ServiceKeyRecord, "SELECT * FROM service_keys ORDER BY created_at, id")
    ]


async def revoke(core: Core, key_id: str) -> ServiceKeyView:
    """Revoke a key; a revoked one keeps its first `revoked_at`."""
    async with core.store.transaction() as conn:
        await run(
            conn,
            "UPDATE service_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
            (core.clock.now(), key_id),
        )
        row = await fetch_one(conn, ServiceKeyRecord, "SELECT * FROM service_keys WHERE id = ?", (key_id,))
    if row is None:
        raise ENTITY_NOT_FOUND(f"no service key {key_id}")
    return _view(row)


async def authenticate(core: Core, key: str) -> str | None:
    """The id of the live key `key` is (or the setting's), else None."""
    setting = core.settings.service_api_key
    if setting and hmac.compare_digest(secret_hash(key), secret_hash(setting)):
        return SETTINGS_KEY_ID
    row = await fetch_one(
        core.store,
        ServiceKeyRef,
        "SELECT id FROM service_keys WHERE key_hash = ? AND revoked_at IS NULL",
        (secret_hash(key),),
    )
    return row.id if row is not None else None


async def declare(core: Core, conn: Db, name: str, key: str, now: float) -> Outcome:
    """Make the live key named `name` be `key` (a declared state), inside the caller's transaction."""
    check_name(name)
    check_key(key)
    holder = await fetch_one(
        conn, ServiceKeyRef, "SELECT id, name FROM service_keys WHERE key_hash = ?", (secret_hash(key),)
    )
    existing = await fetch_one(
        conn,
        ServiceKeyRef,
        "SELECT id FROM service_keys WHERE name = ? AND revoked_at IS NULL ORDER BY created_at LIMIT 1",
        (name,),
    )
    if holder is not None and (existing is None or holder.id != existing.id):
        raise BAD_REQUEST(f"this key is already the service key {holder.name} ({holder.id})")
    if existing is None:
        await _insert(core, conn, name, key, now)
        return "created"
    if holder is not None:
        return "unchanged"
    await run(
        conn,
        "UPDATE service_keys SET key_hash = ?, hint = ? WHERE id = ?",
        (secret_hash(key), key[-4:], existing.id),
    )
    return "updated"
