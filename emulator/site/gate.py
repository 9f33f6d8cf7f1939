"""The site's front gate, a thin ASGI layer in front of the Litestar app.

It does what applies to every public path, before routing and at the cost of a few dict lookups:
- `/v1/<path>` is the same resource as `/<path>` (except `/api/...`, which carries its own version);
- the `API-Version` request header must name a served version (absent means 1);
- every response says `API-Version`, plus `Deprecation`/`Sunset` once the version is deprecated;
- the local-only boundary (emulator.core.boundary): Host, Origin and JSON bodies;
- CORS: any origin may call the public API and read its rate-limit and version headers; preflights
  are answered here, so they never count against a rate limit.
"""

from __future__ import annotations

from email.utils import format_datetime

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from emulator.config import SUPPORTED_API_VERSIONS, Settings
from emulator.core.boundary import Boundary, asgi_headers, route
from emulator.core.errors import BAD_REQUEST
from emulator.site.errors import error_bytes

_EXPOSE = b"RateLimit, RateLimit-Policy, Retry-After, API-Version, Deprecation, Sunset, Idempotent-Replayed"
_ALLOW_HEADERS = (
    b"Content-Type, Accept, Prefer, Idempotency-Key, API-Version, Authorization, X-api-key, "
    b"Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID"
)


class SiteGate:
    def __init__(self, app: ASGIApp, settings: Settings, boundary: Boundary) -> None:
        self.app = app
        self.boundary = boundary
        served = ", ".join(SUPPORTED_API_VERSIONS)
        self._served = {v.encode() for v in SUPPORTED_API_VERSIONS}
        self._served_text = served
        self._extra: list[tuple[bytes, bytes]] = [
            (b"api-version", b"1"),
            (b"access-control-allow-origin", b"*"),
            (b"access-control-expose-headers", _EXPOSE),
        ]
        dep = settings.deprecations.get("1")
        if dep is not None:
            self._extra.append((b"deprecation", f"@{int(dep.deprecated_at.timestamp())}".encode()))
            if dep.sunset_at is not None:
                self._extra.append((b"sunset", format_datetime(dep.sunset_at, usegmt=True).encode()))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        routed, operator, refusal = self.boundary.admit(
            scope["method"], scope["path"], scope.get("raw_path"), asgi_headers(scope["headers"]), strip_v1=True
        )
        if operator:  # the operator API: no CORS on any answer, its refusals included; reached by one spelling only
            if refusal is not None:
                await _send(send, refusal.status, error_bytes(refusal), list(_encoded(refusal.headers)))
                return
            await self.app(scope, receive, send)
            return
        if refusal is not None:
            await _send(send, refusal.status, error_bytes(refusal), [*self._extra, *_encoded(refusal.headers)])
            return
        if routed != route(scope["path"]):  # /v1/<path> is <path>
            scope = scope.copy()
            scope["path"], scope["raw_path"] = routed, routed.encode()
        requested = None
        for name, value in scope["headers"]:
            if name == b"api-version":
                requested = value.strip()
                break
        extra = self._extra
        if requested is not None and requested not in self._served:
            shown = requested.decode("latin-1")[:40]
            exc = BAD_REQUEST(
                f"API-Version {shown!r} is not served; the versions served are: {self._served_text} "
                "(send API-Version: 1, or no header for version 1)",
            )
            await _send(send, 400, error_bytes(exc), extra)
            return
        if scope["method"] == "OPTIONS" and any(n == b"access-control-request-method" for n, _ in scope["headers"]):
            await _send(
                send,
                204,
                b"",
                [
                    *extra,
                    (b"access-control-allow-methods", b"GET, POST, HEAD, OPTIONS"),
                    (b"access-control-allow-headers", _ALLOW_HEADERS),
                    (b"access-control-max-age", b"600"),
                ],
            )
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _encoded(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


async def _send(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    head = [*headers]
    if body:
        head += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body, "more_body": False})
