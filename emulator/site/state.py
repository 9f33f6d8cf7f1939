"""What the site origin's handlers share: the core, the docs index, the limiter, the replay store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from litestar import Request

from emulator.core.context import Core
from emulator.idp.identity import Identity
from emulator.site.idempotency import Idempotency
from emulator.site.ratelimit import RateLimiter
from emulator.site.search import DocsIndex


@dataclass
class Site:
    core: Core
    docs: DocsIndex
    base_url: str
    ask_limiter: RateLimiter
    idempotency: Idempotency
    identity: Identity
    logins: Any = None  # the `pxt login` sign-ins (emulator.idp.login.Logins)
    cloud: Any = None  # the control plane's shared state (emulator.cloud.context.Cloud)
    integrations: list[dict[str, Any]] = field(default_factory=list)
    started_at: float = 0.0
    endpoints: dict[str, str] = field(default_factory=dict)
    proxy: Any = None  # the exported proxy's forward half (emulator.tunnel.ForwardProxy), for status

    def client_ip(self, request: Request[Any, Any, Any]) -> str:
        if self.core.settings.trust_forwarded:
            forwarded = request.headers.get("x-forwarded-for")
            if forwarded:
                return forwarded.split(",")[0].strip()
        client = request.client
        return client.host if client else "unknown"


def site_of(request: Request[Any, Any, Any]) -> Site:
    return request.app.state["site"]
