"""The reference for `load.py`: a bare Litestar app with one route, served the way the emulator is served.

Same stack as `emulator up`: uvicorn with httptools, no access log, no lifespan, a socket bound to
127.0.0.1 port 0 and handed to `server.serve(sockets=[...])`, on a uvloop event loop. Prints
`URL http://127.0.0.1:PORT` on stdout once it is serving; SIGTERM or SIGINT stops it.

    python benchmarks/bare_app.py
"""

from __future__ import annotations

import asyncio
import socket

import uvicorn
import uvloop
from litestar import Litestar, Response, get

HOST = "127.0.0.1"


@get("/health")
async def health() -> Response[bytes]:
    return Response(b'{"status":"ok"}', media_type="application/json")


app = Litestar(route_handlers=[health], openapi_config=None)


async def serve() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, http="httptools", access_log=False, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():  # it failed to start: let its exception (if any) surface
            await task
            return
        await asyncio.sleep(0.005)
    print(f"URL http://{HOST}:{port}", flush=True)
    await task


def main() -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve())


if __name__ == "__main__":
    main()
