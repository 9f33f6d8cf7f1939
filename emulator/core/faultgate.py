"""The fault rules (`core/faults.py`) as an ASGI layer in front of each HTTP origin: apart from the rules, so that
what reads the rules and their views (the admin client, the test kit) loads no web framework."""

from __future__ import annotations

import asyncio

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Receive, Scope, Send

from emulator.core.boundary import Render  # an error → (content type, body) in the origin's format
from emulator.core.faults import DROP_EXTENSION, Faults
from emulator.core.prerouted import send_whole


async def drop(scope: Scope) -> None:
    """Close the request's connection without an answer (the server's protocol put the means in the scope)."""
    abort = ((scope["extensions"] if "extensions" in scope else None) or {}).get(DROP_EXTENSION)
    if callable(abort):
        abort()
        await asyncio.sleep(0)  # the server sees the connection lost, and sends nothing more
        await asyncio.sleep(0)


class FaultGate:
    """The rules as an ASGI layer in front of an origin's app: one place for every HTTP origin."""

    def __init__(self, app: ASGIApp, origin: str, faults: Faults, render: Render) -> None:
        self.app = app
        self.origin = origin
        self.faults = faults
        self.render = render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP or not self.faults.armed:
            await self.app(scope, receive, send)
            return
        verdict = await self.faults.request(self.origin, scope["method"], scope["path"])
        if verdict is None:
            await self.app(scope, receive, send)
        elif verdict.drop:
            await drop(scope)
        else:
            error = verdict.error()
            kind, body = self.render(error, scope["path"])
            retry = [] if verdict.retry_after is None else [(b"retry-after", str(verdict.retry_after).encode())]
            await send_whole(send, error.status, retry, kind, body)
