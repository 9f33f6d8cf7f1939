"""Where the emulator reaches a hosted workload's HTTP server: a TCP host and port, or a Unix socket.

A hosted server (a local process or a container) listens on a Unix socket in a directory only this user can
enter: a TCP port would let any local program, and any web page the developer visits, reach a database's server
or a service directly, past the tunnel's and the gateway's credentials. TCP remains for what has no socket.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


@dataclass(frozen=True)
class Address:
    host: str = ""
    port: int = 0
    socket: str = ""  # a Unix socket's path; when set, host and port are unused

    async def connect(self, *, limit: int = 2**16) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.socket:
            return await asyncio.open_unix_connection(self.socket, limit=limit)
        return await asyncio.open_connection(self.host, self.port, limit=limit)

    @property
    def http_host(self) -> str:
        """The Host header a request to it carries."""
        return "localhost" if self.socket else self.host

    def __str__(self) -> str:
        if self.socket:
            return f"a private socket ({self.socket})"
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
