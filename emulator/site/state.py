"""What the site origin's handlers share: the core, the docs index, the limiter, the replay store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from litestar import Request

from emulator.core.boundary import Boundary
from emulator.core.clientip import client_ip
from emulator.core.context import Core
from emulator.hosted.identity import Identity
from emulator.hosted.logins import Logins
from emulator.hosted.platform import Platform
from emulator.site.idempotency import Idempotency
from emulator.site.ratelimit import RateLimiter
from emulator.site.search import DocsIndex
from emulator.tunnel.forward import ForwardProxy


@dataclass
class Site:
    core: Core
    docs: DocsIndex
    base_url: str
    ask_limiter: RateLimiter
    idempotency: Idempotency
    identity: Identity
    logins: Logins  # the `pxt login` sign-ins
    platform: Platform  # the hosted platform (trials, and the admin API's views and acts)
    proxy: ForwardProxy  # the exported proxy's forward half, for status
    boundary: Boundary  # the local-only boundary, which the site's gate applies
    integrations: list[dict[str, Any]] = field(default_factory=list)
    started_at: float = 0.0
    endpoints: dict[str, str] = field(default_factory=dict)

    def client_ip(self, request: Request[Any, Any, Any]) -> str:
        return client_ip(request, self.core.settings.trust_forwarded)


def site_of(request: Request[Any, Any, Any]) -> Site:
    site = request.app.state["site"]
    assert isinstance(site, Site)
    return site
