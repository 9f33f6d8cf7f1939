"""The database tunnel: a local TLS endpoint (and HTTP CONNECT proxy) that the real client reaches as
`<org>-<db>.<domain>`, authenticated with PXT/1.0 and relayed to the database's server."""

from emulator.tunnel.ca import LocalCA
from emulator.tunnel.server import Authorize, OnEvent, Refusal, Route, TunnelServer

__all__ = ["Authorize", "LocalCA", "OnEvent", "Refusal", "Route", "TunnelServer"]
