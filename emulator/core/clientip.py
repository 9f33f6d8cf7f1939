"""Who is calling: the one client-IP rule of every origin (rate limits, trial networks, registrations).

The socket's peer address, unless `trust_forwarded` is set (only behind a proxy of your own), when the first
address of `X-Forwarded-For` counts instead.
"""

from __future__ import annotations

from typing import Any


def client_ip(request: Any, trust_forwarded: bool) -> str:
    """`request`: anything with `.headers` (a mapping) and `.client` (with `.host`, or None), as ASGI requests have."""
    if trust_forwarded:
        forwarded = request.headers.get("x-forwarded-for")
        if forwarded:
            return str(forwarded).split(",")[0].strip()
    client = request.client
    return str(client.host) if client else "unknown"
