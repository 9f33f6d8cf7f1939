"""The emulator's side of the containers' way home: listeners on the Docker network's gateway address
that relay to the emulator's loopback origins (control plane, media store).

The origins stay bound to loopback; only these relays face the containers, and only for the ports the
hosted workloads call. In the containers, pod_helper.py's `forward` makes `127.0.0.1:<port>` reach them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools

from emulator.runtime.pod_helper import relay


class Relays:
    def __init__(self) -> None:
        self.servers: list[asyncio.Server] = []

    async def open(self, gateway: str, ports: list[int]) -> None:
        for port in ports:
            handle = functools.partial(relay, host="127.0.0.1", port=port)
            self.servers.append(await asyncio.start_server(handle, gateway, port))

    async def close(self) -> None:
        for server in self.servers:
            server.close()
            with contextlib.suppress(Exception):
                await server.wait_closed()
        self.servers.clear()
