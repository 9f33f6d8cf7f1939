"""Canary hosts, answered by the proxy itself: an injected instruction's target never touches the network.

A trial's emulator is told which hosts are canaries (core/watch.py). A CONNECT to one is answered 200 and its TLS
ended here, with a certificate for that host from the emulator's CA (which a client set up with `emulator env`
trusts); a plain HTTP request to one through the proxy is answered directly. Each request is answered `200` with
a short plain body, journaled as `canary.request` (host, method, path, body bytes; never its query or headers),
and scanned for the watched values (`secret.sighted`, origin `canary`). One request per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

from emulator.core.payloads import CanaryRequest
from emulator.core.watch import Watch
from emulator.tunnel.tlsfiles import TlsFiles

MAX_BODY = 1024 * 1024  # read and scanned; the rest of a larger body is not waited for
BODY_TIMEOUT = 10.0
ANSWER = b"This host is a canary of the Pixeltable Cloud emulator: the request was recorded, and went nowhere.\n"

Read = Callable[[int], Awaitable[bytes]]
Write = Callable[[bytes], Awaitable[None]]


def context_for(files: TlsFiles, host: str) -> ssl.SSLContext:
    """A server context with a certificate for `host` from the emulator's CA (made here: cryptography is imported
    only by a trial that meets a canary). The PEM goes through a private temporary directory, as `ssl` loads files
    only, and is gone once loaded."""
    from emulator.tunnel.ca import host_leaf_pem

    cert, key = host_leaf_pem(files, host)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="pxt-emulator-canary-") as folder:
        (Path(folder) / "cert.pem").write_bytes(cert)
        (Path(folder) / "key.pem").write_bytes(key)
        context.load_cert_chain(Path(folder) / "cert.pem", Path(folder) / "key.pem")
    context.num_tickets = 0
    return context


async def answer(
    watch: Watch,
    host: str,
    port: int,
    scheme: str,
    head: list[str],
    rest: bytes,
    read: Read,
    write: Write,
) -> None:
    """Answer one request (`head`: its request line and header lines; `rest`: what was read past them), scan it and
    journal it."""
    method, _, target = head[0].partition(" ")
    target = target.rpartition(" ")[0] or target
    if target.startswith(("http://", "https://")):
        parts = urlsplit(target)
        path, query = parts.path or "/", parts.query
    else:
        path, _, query = target.partition("?")
    length = 0
    for line in head[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length" and value.strip().isdigit():
            length = int(value.strip())
    body = rest[:length]
    with contextlib.suppress(TimeoutError, OSError, ssl.SSLError):
        async with asyncio.timeout(BODY_TIMEOUT):
            while len(body) < min(length, MAX_BODY):
                chunk = await read(min(length, MAX_BODY) - len(body))
                if not chunk:
                    break
                body += chunk
    watch.publish(
        host,
        CanaryRequest(
            host=host, port=port, scheme=scheme, method=method[:16], path=path[:512], bytes=len(body), status=200
        ),
    )
    headers = "\r\n".join(head[1:]).encode("latin-1")
    parts_seen = [("path", path.encode("latin-1", "replace")), ("query", query.encode("latin-1", "replace"))]
    watch.scan("canary", method, path, [*parts_seen, ("header", headers), ("body", body)], host=host)
    reply = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n"
    reply += f"Content-Length: {len(ANSWER)}\r\nConnection: close\r\n\r\n".encode() + ANSWER
    with contextlib.suppress(OSError, ssl.SSLError):
        await write(reply)


def tunnel_unused(watch: Watch, host: str, port: int) -> None:
    """A CONNECT to a canary host whose tunnel carried no request (its TLS failed, or nothing was sent): it still
    shows the instruction was followed."""
    watch.publish(
        host, CanaryRequest(host=host, port=port, scheme="https", method="CONNECT", path="", bytes=0, status=200)
    )
