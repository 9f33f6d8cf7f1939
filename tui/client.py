"""The dashboard's only way to the emulator: its `/_emulator` HTTP API, through one async httpx client.

The emulator is found the way every `emulator` command finds it: an explicit URL, or `endpoints.json` in
its state dir. The file is read again before every reconnect, so a restarted emulator that picked new
ports is found again.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import msgspec

from emulator.admin.routes import EventView  # the stream's wire type, decoded as the emulator encodes it


class EmulatorError(Exception):
    """The emulator answered with an error (its message is what a person should read)."""


class Unreachable(Exception):
    """The emulator is not running, or not where endpoints.json says."""


@dataclass(frozen=True)
class Locator:
    """Where the emulator is: a fixed site URL, or the state dir whose endpoints.json names it."""

    url: str | None = None
    state_dir: Path | None = None

    def site(self) -> str:
        if self.url:
            return self.url.rstrip("/")
        path = (self.state_dir or Path(".")) / "endpoints.json"
        try:
            return str(json.loads(path.read_text())["site"]).rstrip("/")
        except (OSError, ValueError, KeyError) as e:
            raise Unreachable(f"not running ({path} is missing)") from e

    def describe(self) -> str:
        return self.url or str(self.state_dir)


class EmulatorClient:
    def __init__(self, locator: Locator, timeout: float = 10.0) -> None:
        self.locator = locator
        self._http = httpx.AsyncClient(timeout=timeout)
        self._site: str | None = None

    @property
    def site(self) -> str:
        if self._site is None:
            self._site = self.locator.site()
        return self._site

    @property
    def known_site(self) -> str | None:
        """The URL in use, if one was found (without reading endpoints.json)."""
        return self._site

    def relocate(self) -> None:
        """Forget the URL so the next call reads endpoints.json again (after a restart)."""
        self._site = None

    async def close(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            r = await self._http.request(method, self.site + path, json=body)
        except httpx.TransportError as e:
            self.relocate()
            raise Unreachable(f"cannot reach {self._site or self.locator.describe()} ({type(e).__name__})") from e
        if r.status_code >= 400:
            try:
                message = r.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = r.text.strip() or f"HTTP {r.status_code}"
            raise EmulatorError(message)
        return r.json()

    async def get(self, path: str) -> Any:
        return await self._request("GET", path)

    async def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return await self._request("POST", path, body or {})

    # --- snapshots ----------------------------------------------------------------------------

    async def status(self) -> dict[str, Any]:
        return await self.get("/_emulator/status")

    async def db_logs(self, org: str, db: str, since: int = 0) -> list[dict[str, Any]]:
        return (await self.get(f"/_emulator/databases/{quote(org)}/{quote(db)}/logs?since={since}"))["lines"]

    # --- acts (each is also an `emulator` command) --------------------------------------------

    async def advance_clock(self, duration: str) -> dict[str, Any]:
        return await self.post("/_emulator/clock", {"advance": duration})

    async def claim_trial(self, org: str, email: str) -> dict[str, Any]:
        return await self.post("/_emulator/trials/claim", {"org": org, "email": email})

    async def approve_claim(self, registration: str, email: str) -> dict[str, Any]:
        return await self.post("/_emulator/claims/approve", {"registration": registration, "email": email})

    async def approve_login(self, user_code: str, email: str) -> dict[str, Any]:
        return await self.post("/_emulator/logins/approve", {"user_code": user_code, "email": email})

    async def db_verb(self, org: str, db: str, verb: str) -> dict[str, Any]:
        return await self.post(f"/_emulator/databases/{quote(org)}/{quote(db)}/{verb}")

    # --- the live feed ------------------------------------------------------------------------

    async def events(self, since: int) -> AsyncIterator[EventView]:
        """The SSE stream from event `since` on: the journal's backlog first, then live events.

        Ends when the emulator closes the stream (it does so when it stops); raises Unreachable when
        the connection cannot be made or breaks.
        """
        timeout = httpx.Timeout(10.0, read=None)  # the stream is quiet while nothing happens
        try:
            async with self._http.stream(
                "GET", f"{self.site}/_emulator/events", params={"since": since}, timeout=timeout
            ) as r:
                if r.status_code != 200:
                    raise Unreachable(f"the event stream answered HTTP {r.status_code}")
                data: list[str] = []
                async for line in r.aiter_lines():
                    if line.startswith("data:"):
                        data.append(line[5:].lstrip())
                    elif not line and data:
                        yield msgspec.json.decode("\n".join(data), type=EventView)
                        data = []
        except (httpx.TransportError, httpx.StreamError) as e:
            self.relocate()
            raise Unreachable(f"the event stream broke ({type(e).__name__})") from e
