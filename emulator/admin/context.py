"""What the operator API's handlers share, apart from the site's: the `/_emulator` routes are mounted on the site's
origin, but they reach the domain through this, not through the site's own state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from litestar import Request

from emulator.core.boundary import Boundary
from emulator.core.context import Core
from emulator.hosted.logins import Logins
from emulator.hosted.platform import Platform
from emulator.identity.agents_api import AgentsApi
from emulator.identity.identity import Identity
from emulator.tunnel.forward import ForwardProxy

STATE_KEY = "operator"  # where the site app's state holds it


@dataclass
class Operator:
    core: Core
    platform: Platform  # the hosted platform's views and acts
    identity: Identity
    agents: AgentsApi  # the service side's agents API (revoking and deleting a registration)
    logins: Logins  # the `pxt login` sign-ins the operator decides
    proxy: ForwardProxy  # the exported proxy's forward half, for status
    boundary: Boundary  # the admin token and the Host, Origin and body rules the operator guard applies
    started_at: float = 0.0
    endpoints: dict[str, str] = field(default_factory=dict)


def operator_of(request: Request[Any, Any, Any]) -> Operator:
    found = request.app.state[STATE_KEY]
    assert isinstance(found, Operator)
    return found
