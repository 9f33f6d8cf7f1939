"""Runs inside hosted containers (standard library only: the image's own python3 runs it).

`init`: the pod's first process. Database and service containers join its PID and IPC namespaces, as the
containers of one pod do, so the service's Pixeltable finds the database's Postgres by its pid; as PID 1 it
reaps the orphans (Postgres is started detached) so a dead postmaster never lingers as a zombie.

`forward GATEWAY PORT...`: the emulator hands out URLs on 127.0.0.1 (control plane, media store); inside a
container that is the container itself, so each port is forwarded to the same port on the Docker network's
gateway, where the emulator listens for its containers. The URLs then work unchanged in both runtimes. A GATEWAY
that is a directory (the emulator is itself a container, not on the host behind the gateway) holds a Unix socket
`PORT.sock` per port instead, where the emulator listens.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import sys
import time


def init() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(1)


async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, port: int) -> None:
    """Join an accepted connection to a new one to (host, port), both ways, until either side ends; a `host` that is
    a directory: to its Unix socket `PORT.sock`."""
    try:
        if host.startswith("/"):
            up_reader, up_writer = await asyncio.open_unix_connection(f"{host}/{port}.sock")
        else:
            up_reader, up_writer = await asyncio.open_connection(host, port)
    except OSError:
        writer.close()
        return
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def forward(gateway: str, ports: list[int]) -> None:
    servers = [
        await asyncio.start_server(functools.partial(relay, host=gateway, port=port), "127.0.0.1", port)
        for port in ports
    ]
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    if sys.argv[1:2] == ["init"]:
        init()
    elif sys.argv[1:2] == ["forward"]:
        asyncio.run(forward(sys.argv[2], [int(p) for p in sys.argv[3:]]))
    else:
        sys.exit("usage: pod_helper.py init | forward GATEWAY PORT...")
