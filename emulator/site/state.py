"""What the site origin's handlers share: the core, the docs index, the limiter, the replay store."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import msgspec
from litestar import Request
from litestar.params import HeaderParameter
from msgspec import UNSET, UnsetType

from emulator.config import ConfigError
from emulator.core.boundary import Boundary
from emulator.core.clientip import client_ip
from emulator.core.context import Core
from emulator.core.ratelimit import RateLimiter
from emulator.identity.identity import Identity
from emulator.site.idempotency import Idempotency
from emulator.site.search import DocsIndex

# The Accept header as a handler takes it (empty when not sent); the document leaves it out, as OpenAPI ignores a
# parameter named Accept.
Accept = Annotated[str, HeaderParameter(name="accept", include_in_schema=False)]


class Integration(msgspec.Struct, frozen=True, omit_defaults=True):
    """An AI provider or tool Pixeltable integrates with (fixtures/integrations.json, or the `integrations` file a
    user names), as list_integrations answers it: a field the file leaves out stays out."""

    name: str
    id: str | UnsetType = UNSET
    category: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    module: str | UnsetType = UNSET
    secrets: list[str] | UnsetType = UNSET


def load_integrations(path: Path) -> list[Integration]:
    if not path.is_file():
        return []
    try:
        return msgspec.json.decode(path.read_bytes(), type=list[Integration])
    except msgspec.ValidationError as e:
        raise ConfigError(f"integrations {path}: {e}") from None


@dataclass
class Site:
    core: Core
    docs: DocsIndex
    base_url: str
    ask_limiter: RateLimiter
    idempotency: Idempotency
    identity: Identity
    boundary: Boundary  # the local-only boundary, which the site's gate applies
    integrations: list[Integration] = field(default_factory=list)

    def client_ip(self, request: Request[Any, Any, Any]) -> str:
        return client_ip(request, self.core.settings.trust_forwarded)


def site_of(request: Request[Any, Any, Any]) -> Site:
    site = request.app.state["site"]
    assert isinstance(site, Site)
    return site
