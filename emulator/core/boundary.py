"""The local-only boundary every origin applies before routing: no web page can drive the emulator.

- **Host** must name the emulator: a loopback name (`127.0.0.1`, `localhost`, `::1`), the configured `host`, or
  one of `allowed_hosts`. A page on another name that DNS points at 127.0.0.1 (DNS rebinding) is refused.
- **Origin**, when a browser sends one, must be one of the emulator's own origins or one of `allowed_origins`,
  for every request that changes state and for everything under `/_emulator` and `/mcp` (the MCP transport
  requires it). Public documents and `/ask` stay readable from any page (CORS `*`): they carry no credential and
  change nothing.
- **A body must be JSON** on `/_emulator` and on the identity provider's agent endpoints, which a page cannot send
  cross-site without a preflight (a form or `text/plain` POST needs none).
- **The operator API (`/_emulator`) has one spelling.** Every rule is decided on the path as the router will route
  it (`route`: slashes collapsed and trimmed as Litestar does, the site's `/v1` stripped, escapes decoded), and a
  path that routes to the operator API by any other spelling (`//_emulator`, `/v1/_emulator`, `/%5Femulator`, a
  dot segment, another case) is answered 404 before anything else; nothing under it carries CORS. The operator
  router also checks the admin token itself (`emulator/site/app.py`), so no spelling the gates missed reaches a
  handler without it.

Each origin renders the refusal in its own error format.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from emulator.core.errors import FORBIDDEN, NOT_FOUND, UNAUTHORIZED, UNSUPPORTED_MEDIA_TYPE, ApiError
from emulator.core.operatorpath import ADMIN_PREFIX

_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
_WILDCARDS = ("0.0.0.0", "::", "")
# Paths any page may call with any method: the public agent API, which changes no state.
_OPEN_PATHS = ("/ask", "/v1/ask")
# Paths whose every request needs an allowed Origin (besides every unsafe request).
_GUARDED_PREFIXES = (ADMIN_PREFIX, "/mcp", "/v1/mcp", "/.well-known/mcp")
# Paths whose bodies must be JSON.
_JSON_PREFIXES = (ADMIN_PREFIX, "/agent/identity")


_SLASHES = re.compile("/{2,}")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
# Characters a path never needs escaped (RFC 3986's unreserved): an escape of one is a second spelling of the same
# route.
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def route(path: str, strip_v1: bool = False) -> str:
    """The path as the origin's router will route it: slashes trimmed and collapsed (Litestar's `normalize_path`),
    and on the site (`strip_v1`) `/v1/<rest>` as `/<rest>`, except `/v1/api/...`, which carries its own version."""
    if "//" in path or (path.endswith("/") and path != "/"):  # most paths are already as routed: no regex
        routed = "/" + _SLASHES.sub("/", path.strip("/"))
    else:
        routed = path if path.startswith("/") else "/" + path
    if strip_v1 and (routed == "/v1" or routed.startswith("/v1/")):
        rest = routed[3:] or "/"
        if not rest.startswith("/api/"):
            return rest
    return routed


def _without_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4: what a browser or curl makes of `/x/../_emulator` before sending it."""
    out: list[str] = []
    for part in path.split("/"):
        if part == "..":
            if out:
                out.pop()
        elif part != ".":
            out.append(part)
    return "/" + "/".join(p for p in out if p)


def is_operator(routed: str) -> bool:
    """Whether a routed path is the operator API's by any reading: in any case, with or without a version prefix,
    with its dot segments resolved (the router is case-sensitive and resolves none, but the rules must not depend
    on it)."""
    lowered = routed.lower()
    if "/." in lowered:
        lowered = _without_dot_segments(lowered)
    return lowered.startswith(ADMIN_PREFIX) or lowered.startswith("/v1" + ADMIN_PREFIX)


def canonical(raw_path: str, routed: str) -> bool:
    """Whether the request spelled its path exactly as it routes: no doubled or trailing slash, no `/v1`, no dot
    segment, no escape of a character that needs none, the case the routes have."""
    if any(chr(int(m.group(1), 16)) in _UNRESERVED for m in _ESCAPE.finditer(raw_path)):
        return False
    # an escaped slash is a parameter's own (`/_emulator/traces/a%2Fb`), never the resource's name's
    if "%2f" in "/".join(raw_path.split("/", 3)[:3]).lower():
        return False
    decoded = unquote(raw_path)
    if decoded != routed or not (decoded == ADMIN_PREFIX or decoded.startswith(ADMIN_PREFIX + "/")):
        return False
    return not any(part in (".", "..") for part in decoded.split("/"))


NOT_THIS_SPELLING = NOT_FOUND(
    "nothing is served at this spelling of the path: the operator API answers at /_emulator/... only (one "
    "slash, no /v1, nothing escaped that needs no escape)"
)


def _hostname(value: str) -> str:
    """The name part of a Host header (`[::1]:8700` → `::1`, `Example.COM.:80` → `example.com`)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        value = value.rsplit(":", 1)[0]
    return value.rstrip(".")


def _origin(url: str) -> str:
    parts = urlsplit(url.strip().lower())
    return f"{parts.scheme}://{parts.netloc}"


def _loopback_aliases(origin: str) -> set[str]:
    """An origin on 127.0.0.1 (or another loopback name) is also reached as localhost and [::1] on its port."""
    parts = urlsplit(origin)
    host = (parts.hostname or "").lower()
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback or parts.port is None:
        return {origin}
    return {origin} | {f"{parts.scheme}://{name}:{parts.port}" for name in ("127.0.0.1", "localhost", "[::1]")}


@dataclass(frozen=True)
class Boundary:
    hosts: frozenset[str]  # empty: any Host (the emulator listens on every address and names none)
    origins: frozenset[str]
    admin_token: str = ""  # the admin_token setting: every /_emulator call must carry it (empty: none needed)

    @classmethod
    def of(
        cls,
        host: str,
        own_origins: Iterable[str],
        allowed_hosts: Iterable[str],
        allowed_origins: Iterable[str],
        admin_token: str = "",
    ) -> Boundary:
        extra = {_hostname(h) for h in allowed_hosts if h.strip()}
        if host in _WILDCARDS and not extra:
            hosts: frozenset[str] = frozenset()
        else:
            hosts = frozenset({*_LOOPBACK_NAMES, _hostname(host), *extra} - {""})
        origins: set[str] = set()
        for o in own_origins:
            origins |= _loopback_aliases(_origin(o))
        origins |= {_origin(o) for o in allowed_origins if o.strip()}
        return cls(hosts, frozenset(origins), admin_token)

    def carries_token(self, headers: Mapping[str, str]) -> bool:
        """Whether the request carries the admin token (or none is needed). The scheme is case-insensitive
        (RFC 9110 §11.1)."""
        if not self.admin_token:
            return True
        sent = headers.get("x-emulator-token")
        if sent is None:
            scheme, _, value = headers.get("authorization", "").strip().partition(" ")
            sent = value.strip() if scheme.lower() == "bearer" else ""
        return hmac.compare_digest(sent.encode(), self.admin_token.encode())

    def admit(
        self, method: str, path: str, raw_path: bytes | None, headers: Mapping[str, str], strip_v1: bool = False
    ) -> tuple[str, bool, ApiError | None]:
        """The gates' one decision: the path as it will be routed, whether it is the operator API's, and the
        refusal (None: go on). A second spelling of an operator path is a 404, whatever else the request carries."""
        routed = route(path, strip_v1)
        operator = is_operator(routed)
        if operator:
            spelled = (raw_path.decode("latin-1") if raw_path is not None else path).split("?", 1)[0]
            if not canonical(spelled, routed):
                host = headers.get("host")
                if not self.host_ok(host):
                    return routed, operator, self.check(method, routed, headers)
                return routed, operator, NOT_THIS_SPELLING
        return routed, operator, self.check(method, routed, headers)

    def host_ok(self, host: str | None) -> bool:
        return not self.hosts or host is None or _hostname(host) in self.hosts

    def check(self, method: str, path: str, headers: Mapping[str, str]) -> ApiError | None:
        """None if the request may go on, else the refusal (403; 415 for a body that is not JSON)."""
        host = headers.get("host")
        if not self.host_ok(host):
            assert host is not None
            return FORBIDDEN(
                f"the Host {host[:100]!r} is not this emulator's; it answers to {', '.join(sorted(self.hosts))} "
                "(add a name with the allowed_hosts setting)",
            )
        if path.startswith(ADMIN_PREFIX) and not self.carries_token(headers):
            return UNAUTHORIZED(
                "this emulator's /_emulator needs its admin token: send it as Authorization: Bearer or "
                "X-Emulator-Token (the CLI, `emulator env` and the testkit take it from EMULATOR_ADMIN_TOKEN)",
                headers={"WWW-Authenticate": 'Bearer realm="emulator"'},
            )
        origin = headers.get("origin")
        open_path = path in _OPEN_PATHS
        guarded = (method not in _SAFE and not open_path) or path.startswith(_GUARDED_PREFIXES)
        if origin is not None and guarded and _origin(origin) not in self.origins:
            return FORBIDDEN(
                f"requests from the web page at {origin[:100]!r} are refused: only the emulator's own pages may "
                "send them (add an origin with the allowed_origins setting)",
            )
        if method not in _SAFE and path.startswith(_JSON_PREFIXES) and _has_body(headers):
            kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            wanted = _OTHER_BODIES.get(path, ("application/json",))
            if kind not in wanted:
                as_ = " or ".join(wanted)
                return UNSUPPORTED_MEDIA_TYPE(f"send the body as {as_}, not {kind or 'untyped'}")
        return None


# The few bodies that are not JSON. Like JSON, none is a type a page can send cross-site without the browser
# asking first (a CORS preflight, which nothing here answers); text/plain or a form would be.
IMPORT_TYPES = ("application/gzip", "application/octet-stream")
_OTHER_BODIES = {
    ADMIN_PREFIX + "/snapshots/import": IMPORT_TYPES,
    ADMIN_PREFIX + "/apply": ("application/toml", "application/json"),
}


def _has_body(headers: Mapping[str, str]) -> bool:
    length = headers.get("content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return "transfer-encoding" in headers


_READ = frozenset(
    {
        b"host",
        b"origin",
        b"content-type",
        b"content-length",
        b"transfer-encoding",
        b"authorization",
        b"x-emulator-token",
    }
)


def asgi_headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """The headers the boundary reads, from an ASGI scope's (lowercase names, the first of a repeated header): on
    every request of every origin, so nothing else is decoded."""
    headers: dict[str, str] = {}
    for name, value in raw:
        if name in _READ:
            headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
    return headers


Format = Callable[[ApiError], tuple[bytes, bytes]]  # a refusal → (content type, body) in one error format
Render = Callable[[ApiError, str], tuple[bytes, bytes]]  # a refusal and the path it refuses → (content type, body)


def by_path(default: Format, special: Mapping[str, Format]) -> Render:
    """An origin's rendering of a refusal made before its router (the boundary's, a fault's): in the origin's own
    format, except on the paths whose routes answer errors in another (OAuth's endpoints, the trial endpoint), which
    get that route's format, so a client reads a gate's refusal as it reads the route's own."""

    def render(exc: ApiError, path: str) -> tuple[bytes, bytes]:
        return special.get(path, default)(exc)

    return render


_CORS_READABLE = ("/.well-known/",)  # what any page may read from the identity provider: metadata, JWKS


class BoundaryGate:
    """The boundary as an ASGI layer in front of an origin's app (the site applies it in its own gate)."""

    def __init__(self, app: ASGIApp, boundary: Boundary, render: Render) -> None:
        self.app = app
        self.boundary = boundary
        self.render = render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:  # the enum (a str), not "http": the type checker then reads what follows
            await self.app(scope, receive, send)
            return
        routed, operator, refusal = self.boundary.admit(
            scope["method"],
            scope["path"],
            scope["raw_path"] if "raw_path" in scope else None,
            asgi_headers(scope["headers"]),
        )
        if refusal is not None:
            kind, body = self.render(refusal, routed or scope["path"])
            head = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
            head += [(k.lower().encode(), v.encode()) for k, v in refusal.headers.items()]
            await send({"type": "http.response.start", "status": refusal.status, "headers": head})
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        if not operator and scope["method"] in ("GET", "HEAD") and routed.startswith(_CORS_READABLE):

            async def send_cors(message: Message) -> None:
                if message["type"] == "http.response.start":
                    message["headers"] = [*message.get("headers", ()), (b"access-control-allow-origin", b"*")]
                await send(message)

            await self.app(scope, receive, send_cors)
            return
        await self.app(scope, receive, send)
