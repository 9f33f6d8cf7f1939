"""The database tunnel: a local TLS endpoint (and HTTP CONNECT proxy) that the real client reaches as
`<org>-<db>.<domain>`, authenticated with PXT/1.0 and relayed to the database's server; the same proxy
relays every other host under the egress policy.

Names are imported on first use: the settings read `egress` on every command, which must not pay for TLS.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emulator.tunnel.ca import LocalCA
    from emulator.tunnel.egress import EgressError, EgressPolicy, Upstream, resolve_upstream
    from emulator.tunnel.forward import ForwardProxy
    from emulator.tunnel.server import Authorize, OnEvent, Refusal, Route, TunnelServer

_HOMES = {
    "LocalCA": "ca",
    "EgressError": "egress",
    "EgressPolicy": "egress",
    "Upstream": "egress",
    "resolve_upstream": "egress",
    "ForwardProxy": "forward",
    "Authorize": "server",
    "OnEvent": "server",
    "Refusal": "server",
    "Route": "server",
    "TunnelServer": "server",
}

__all__ = [  # noqa: RUF022 (kept in _HOMES' order)
    "LocalCA",
    "EgressError",
    "EgressPolicy",
    "Upstream",
    "resolve_upstream",
    "ForwardProxy",
    "Authorize",
    "OnEvent",
    "Refusal",
    "Route",
    "TunnelServer",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"emulator.tunnel.{home}"), name)
