"""The people who sign in (`users`) and the upstream identities linked to them (`identity_links`): this module is the
one writer of both. A person is made the first time an e-mail decides a claim, completes one, signs in or is
declared; a service's external id is set once (the agents API's `link_external_user`)."""

from __future__ import annotations

import aiosqlite

from emulator.core.context import Core
from emulator.core.errors import CONFLICT
from emulator.core.payloads import IdpUserCreated
from emulator.core.store import fetch_one
from emulator.identity.records import UserRef


class Users:
    def __init__(self, core: Core) -> None:
        self.core = core

    async def ensure_user(self, conn: aiosqlite.Connection, email: str, now: float) -> str:
        found = await user_id(conn, email)
        if found is not None:
            return found
        made = self.core.ids.ident("user_")
        await conn.execute("INSERT INTO users (id, email, created_at) VALUES (?, ?, ?)", (made, email, now))
        self.core.bus.publish(made, IdpUserCreated(email=email))
        return made


async def user_id(conn: aiosqlite.Connection, email: str) -> str | None:
    row = await fetch_one(conn, UserRef, "SELECT id FROM users WHERE email = ?", (email,))
    return row.id if row else None


async def link_upstream(conn: aiosqlite.Connection, iss: str, sub: str, user: str, now: float) -> None:
    """The upstream identity (iss, sub) is this person's: its next ID-JAGs register their agents at once."""
    await conn.execute(
        "INSERT INTO identity_links (iss, sub, user_id, created_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (iss, sub) DO UPDATE SET user_id = excluded.user_id",
        (iss, sub, user, now),
    )


async def linked_email(conn: aiosqlite.Connection, iss: str, sub: str) -> tuple[bool, str | None]:
    """Whether the upstream identity (iss, sub) is linked to a person, and that person's e-mail."""
    linked = await fetch_one(
        conn,
        UserRef,
        "SELECT u.id, u.email FROM identity_links l JOIN users u ON u.id = l.user_id WHERE l.iss = ? AND l.sub = ?",
        (iss, sub),
    )
    return (True, linked.email) if linked else (False, None)


async def linked_user(conn: aiosqlite.Connection, iss: str, sub: str) -> str | None:
    """The person the upstream identity (iss, sub) is linked to, if any."""
    sql = "SELECT user_id AS id FROM identity_links WHERE iss = ? AND sub = ?"
    found = await fetch_one(conn, UserRef, sql, (iss, sub))
    return found.id if found else None


# --- a service's users (the agents API): found by their external id, else by e-mail ------------------------------


async def find_external(conn: aiosqlite.Connection, email: str, external_id: str) -> tuple[str | None, str]:
    """The service's user, written nothing: by external_id, else by e-mail (to be given that external_id), else
    none yet (to be made). Returns (user id or None, the user's e-mail)."""
    found = await fetch_one(conn, UserRef, "SELECT id, email FROM users WHERE external_id = ?", (external_id,))
    if found is not None:
        return found.id, str(found.email)
    by_email = await fetch_one(conn, UserRef, "SELECT id, external_id FROM users WHERE email = ?", (email,))
    if by_email is None:
        return None, email
    if by_email.external_id is not None:
        raise CONFLICT(f"the user {email} is linked to another external_id")
    return by_email.id, email


async def external_id_of(conn: aiosqlite.Connection, user: str) -> str | None:
    found = await fetch_one(conn, UserRef, "SELECT id, external_id FROM users WHERE id = ?", (user,))
    return None if found is None else found.external_id


async def set_external_id(conn: aiosqlite.Connection, user: str, external_id: str) -> None:
    await conn.execute("UPDATE users SET external_id = ? WHERE id = ?", (external_id, user))
