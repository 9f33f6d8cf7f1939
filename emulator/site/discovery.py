"""Discovery documents on the site origin `{base_url}` (no credentials needed): the structs of
emulator/identity/discovery.py, returned as they are, so the OpenAPI document shows each one's schema."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get, route

from emulator.core import openapi
from emulator.identity import discovery
from emulator.identity.discovery import ApiCatalog, AuthorizationServer, OpenIdConfiguration, ProtectedResource
from emulator.site.state import site_of

_CACHE = {"Cache-Control": "public, max-age=300"}
_LINKSET = f'application/linkset+json; profile="{discovery.API_CATALOG_PROFILE}"'
_CATALOG_HEADERS = {**_CACHE, "Link": discovery.API_CATALOG_LINK}
# The catalog is JSON in its own media type: the document says so (the 2xx of a returned struct is JSON's).
(_CATALOG,) = openapi.body(ApiCatalog, _LINKSET).values()


@get(["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/"])
async def protected_resource(request: Request[Any, Any, Any]) -> Response[ProtectedResource]:
    return Response(discovery.protected_resource(site_of(request).identity.urls), headers=_CACHE)


@get("/.well-known/oauth-authorization-server")
async def authorization_server(request: Request[Any, Any, Any]) -> Response[AuthorizationServer]:
    # The same document as the issuer's: its issuer stays {auth_url}.
    return Response(discovery.authorization_server(site_of(request).identity), headers=_CACHE)


@get("/.well-known/openid-configuration")
async def openid_configuration(request: Request[Any, Any, Any]) -> Response[OpenIdConfiguration]:
    return Response(discovery.openid_configuration(site_of(request).identity), headers=_CACHE)


@get("/.well-known/api-catalog", media_type=_LINKSET, opt=openapi.custom_answer(_CATALOG))
async def api_catalog(request: Request[Any, Any, Any]) -> Response[ApiCatalog]:
    return Response(discovery.api_catalog(site_of(request).identity.urls), headers=_CATALOG_HEADERS)


# HEAD: the catalog's headers and no body (a `route`, as `head` would answer `Content-Length` of "null" encoded).
@route(
    "/.well-known/api-catalog",
    http_method="HEAD",
    media_type=_LINKSET,
    status_code=200,
    opt=openapi.custom_answer(openapi.Body({})),
)
async def api_catalog_head() -> Response[bytes]:
    return Response(b"", headers=_CATALOG_HEADERS)


HANDLERS = [protected_resource, authorization_server, openid_configuration, api_catalog, api_catalog_head]
