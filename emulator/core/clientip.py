"""Who is calling: the one client-IP rule of every origin (rate limits, trial networks, registrations).

The socket's peer address, unless `trust_forwarded` is set (only behind a proxy of your own), when the first
address of `X-Forwarded-For` counts instead.
"""

from __future__ import annotations

from typing import Any

from litestar.types import Scope


def client_ip(request: Any, trust_forwarded: bool) -> str:
    """`request`: a Litestar request (anything with the ASGI `scope`)."""
    return scope_client_ip(request.scope, trust_forwarded)


def scope_client_ip(scope: Scope, trust_forwarded: bool) -> str:
    """The rule, read from an ASGI scope (also for what is answered before a router)."""
    if trust_forwarded:
        for name, value in scope["headers"] if "headers" in scope else ():
            if name == b"x-forwarded-for":
                forwarded = value.decode("latin-1")
                if forwarded:
                    return forwarded.split(",")[0].strip()
                break
    client = scope["client"] if "client" in scope else None
    return str(client[0]) if client else "unknown"
