"""The emulator's side of the containers' way home: listeners on the Docker network's gateway address
that relay to the emulator's loopback origins (control plane, media store).

The origins stay bound to loopback; only these relays face the containers, and only for the ports the
hosted workloads call. In the containers, pod_helper.py's `forward` makes `127.0.0.1:<port>` reach them. An emulator
that is itself a container is not behind the gateway: it listens on a Unix socket per port in a directory the
containers mount instead (`open_unix`), so they reach no more of it than they do on the host, and no network rule
(egress.py) has to let them through.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from pathlib import Path

from emulator.runtime.pod_helper import relay


class Relays:
    def __init__(self) -> None:
        self.servers: list[asyncio.Server] = []
        self.paths: list[Path] = []  # the Unix sockets' files, which a closed server leaves behind

    async def open(self, gateway: str, ports: list[int]) -> None:
        for port in ports:
            handle = functools.partial(relay, host="127.0.0.1", port=port)
            self.servers.append(await asyncio.start_server(handle, gateway, port))

    async def open_unix(self, folder: Path, ports: list[int]) -> None:
        """`folder/PORT.sock` for each port (pod_helper.py's `forward` with the folder as its gateway)."""
        for port in ports:
            path = folder / f"{port}.sock"
            path.unlink(missing_ok=True)  # left by an emulator that was killed
            handle = functools.partial(relay, host="127.0.0.1", port=port)
            self.servers.append(await asyncio.start_unix_server(handle, path))
            self.paths.append(path)

    async def close(self) -> None:
        for server in self.servers:
            server.close()
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self.servers.clear()
        for path in self.paths:
            path.unlink(missing_ok=True)
        self.paths.clear()
