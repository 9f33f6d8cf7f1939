"""What the answers given before an origin's router share (`GET /health`, `POST /ask`, `POST /oauth2/token`).

Those are the calls agents, probes and load tests send most; answered as ASGI, they skip Litestar's routing,
body reading and response building, and still pass the origin's gates and its request journal. Each takes only
a request it can read whole here (a small `Content-Length`); anything else goes on to the route, which gives the
same answer through the same rule.
"""

from __future__ import annotations

from litestar.types import HTTPScope, Receive, Send

SMALL_BODY = 16 * 1024  # larger bodies go through the router and its body limits


def small_body(scope: HTTPScope) -> bool:
    """A request body this side may read whole: a `Content-Length` of at most SMALL_BODY, not chunked."""
    length = b""
    for name, value in scope["headers"]:
        if name == b"content-length" or name == b"transfer-encoding":
            length = value if not length and name == b"content-length" else b"-"
    return length.isdigit() and int(length) <= SMALL_BODY


async def read_body(receive: Receive) -> bytes | None:
    """The whole request body, or None when the client went away first (nothing is to be answered)."""
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


def raw_headers(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


async def send_whole(send: Send, status: int, headers: list[tuple[bytes, bytes]], ctype: bytes, body: bytes) -> None:
    """A response with its body in one message, after the given headers, its `Content-Type` and length."""
    headers = [*headers, (b"content-type", ctype), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
