"""Discovery documents on the site origin `{base_url}` (no credentials needed)."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, get, route

from emulator.identity import discovery
from emulator.site.state import site_of

_encode = msgspec.json.Encoder().encode
_CACHE = {"Cache-Control": "public, max-age=300"}


def _json(value: Any, media_type: str = "application/json", **headers: str) -> Response[bytes]:
    return Response(_encode(value), media_type=media_type, headers={**_CACHE, **headers})


@get(["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/"])
async def protected_resource(request: Request[Any, Any, Any]) -> Response[bytes]:
    return _json(discovery.protected_resource(site_of(request).identity.urls))


@get("/.well-known/oauth-authorization-server")
async def authorization_server(request: Request[Any, Any, Any]) -> Response[bytes]:
    # The same document as the issuer's: its issuer stays {auth_url}.
    return _json(discovery.authorization_server(site_of(request).identity))


@get("/.well-known/openid-configuration")
async def openid_configuration(request: Request[Any, Any, Any]) -> Response[bytes]:
    return _json(discovery.openid_configuration(site_of(request).identity))


@route("/.well-known/api-catalog", http_method=["GET", "HEAD"], status_code=200)
async def api_catalog(request: Request[Any, Any, Any]) -> Response[bytes]:
    media = f'application/linkset+json; profile="{discovery.API_CATALOG_PROFILE}"'
    if request.method == "HEAD":
        return Response(b"", media_type=media, headers={**_CACHE, "Link": discovery.API_CATALOG_LINK})
    return _json(discovery.api_catalog(site_of(request).identity.urls), media, Link=discovery.API_CATALOG_LINK)


HANDLERS = [protected_resource, authorization_server, openid_configuration, api_catalog]
