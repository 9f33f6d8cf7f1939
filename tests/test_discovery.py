"""Discovery documents: RFC 9728, RFC 8414 with agent_auth, OpenID configuration, JWKS, RFC 9727."""

from __future__ import annotations

import httpx
import pytest
from authlib.oauth2.rfc8414 import AuthorizationServerMetadata
from authlib.oidc.discovery import OpenIDProviderMetadata

from tests.conftest import Emulator


async def test_protected_resource_metadata_names_the_issuer(client: httpx.AsyncClient, emu: Emulator) -> None:
    r = await client.get("/.well-known/oauth-protected-resource")
    assert r.status_code == 200
    prm = r.json()
    assert prm["resource"] == emu.url  # the base URL, no trailing slash
    assert prm["authorization_servers"] == [emu.auth]
    assert prm["bearer_methods_supported"] == ["header"]
    assert "Authorization" not in r.request.headers


async def test_the_control_plane_is_a_protected_resource(client: httpx.AsyncClient, emu: Emulator) -> None:
    """The control plane's own RFC 9728 document (one builder with the site's): its URL, the same issuer; and its
    401 without an API key points there, as an OAuth client's first call reads it."""
    prm = (await client.get(emu.api + "/.well-known/oauth-protected-resource")).json()
    site = (await client.get("/.well-known/oauth-protected-resource")).json()
    assert prm["resource"] == emu.api and prm["authorization_servers"] == [emu.auth]
    assert prm["jwks_uri"] == site["jwks_uri"] and prm["resource"] != site["resource"]
    r = await client.post(emu.api, json={"operation_type": "list_orgs"})
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{emu.api}/.well-known/oauth-protected-resource"'
    )


@pytest.mark.parametrize("where", ["auth", "site"])
async def test_authorization_server_metadata(client: httpx.AsyncClient, emu: Emulator, where: str) -> None:
    base = emu.auth if where == "auth" else emu.url
    meta = (await client.get(base + "/.well-known/oauth-authorization-server")).json()
    assert meta["issuer"] == emu.auth  # byte for byte, on both origins
    assert meta["token_endpoint"] == emu.auth + "/oauth2/token"
    assert meta["grant_types_supported"] == [
        "urn:ietf:params:oauth:grant-type:jwt-bearer",
        "authorization_code",
        "refresh_token",
    ]
    assert meta["authorization_endpoint"] == emu.auth + "/oauth2/authorize"
    assert meta["response_types_supported"] == ["code"] and meta["code_challenge_methods_supported"] == ["S256"]
    assert meta["client_id_metadata_document_supported"] is True
    assert "registration_endpoint" not in meta  # that name means RFC 7591 dynamic client registration
    agent = meta["agent_auth"]
    assert agent["register_uri"] == agent["identity_endpoint"] == emu.auth + "/agent/identity"
    assert agent["claim_uri"] == agent["claim_endpoint"] == emu.auth + "/agent/identity/claim"
    assert agent["identity_types_supported"] == ["anonymous", "service_auth"]


@pytest.mark.parametrize("where", ["auth", "site"])
async def test_openid_configuration(client: httpx.AsyncClient, emu: Emulator, where: str) -> None:
    base = emu.auth if where == "auth" else emu.url
    oidc = (await client.get(base + "/.well-known/openid-configuration")).json()
    for field in (  # every field OpenID Connect Discovery §3 REQUIRES
        "issuer",
        "authorization_endpoint",
        "jwks_uri",
        "response_types_supported",
        "subject_types_supported",
        "id_token_signing_alg_values_supported",
        "token_endpoint",
    ):
        assert field in oidc
    assert oidc["issuer"] == emu.auth and oidc["jwks_uri"] == emu.auth + "/.well-known/jwks.json"
    assert oidc["authorization_endpoint"] == emu.auth + "/oauth2/authorize"
    # the endpoint advertised is served: without a client it says so on a page (nowhere safe to redirect to)
    r = await client.get(oidc["authorization_endpoint"])
    assert r.status_code == 400 and "client_id is required" in r.text


@pytest.mark.parametrize("where", ["auth", "site"])
async def test_authlib_validates_both_server_documents(client: httpx.AsyncClient, emu: Emulator, where: str) -> None:
    # Authlib's own validators, as a client library reads the documents (loopback http counts as secure transport).
    base = emu.auth if where == "auth" else emu.url
    meta = (await client.get(base + "/.well-known/oauth-authorization-server")).json()
    AuthorizationServerMetadata(meta).validate()
    oidc = (await client.get(base + "/.well-known/openid-configuration")).json()
    OpenIDProviderMetadata(oidc).validate()
    # what is advertised is what is served: the authorization code grant (tests/test_authorization_code.py), and
    # the signing key's algorithm next to the RS256 that OpenID Connect Discovery requires
    assert meta["response_types_supported"] == oidc["response_types_supported"] == ["code"]
    assert meta["authorization_endpoint"] == oidc["authorization_endpoint"] == emu.auth + "/oauth2/authorize"
    assert oidc["id_token_signing_alg_values_supported"] == ["ES256", "RS256"]


async def test_jwks_publishes_one_es256_public_key(client: httpx.AsyncClient, emu: Emulator) -> None:
    keys = (await client.get(emu.auth + "/.well-known/jwks.json")).json()["keys"]
    assert len(keys) == 1
    key = keys[0]
    assert (key["kty"], key["crv"], key["alg"], key["use"]) == ("EC", "P-256", "ES256", "sig")
    assert key["kid"] and "d" not in key  # never the private part


async def test_api_catalog_is_a_linkset_and_head_has_the_link(client: httpx.AsyncClient, emu: Emulator) -> None:
    r = await client.get("/.well-known/api-catalog")
    assert r.headers["content-type"] == 'application/linkset+json; profile="https://www.rfc-editor.org/info/rfc9727"'
    linkset = r.json()["linkset"]
    assert linkset[0]["anchor"] == emu.url + "/.well-known/api-catalog"
    items = [i["href"] for i in linkset[0]["item"]]
    assert emu.url + "/ask" in items and emu.url + "/api/v1/trial-orgs" in items
    for context in linkset:
        for rel, targets in context.items():
            if rel != "anchor":
                assert isinstance(targets, list) and all("href" in t for t in targets)
    head = await client.head("/.well-known/api-catalog")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["link"] == '</.well-known/api-catalog>; rel="api-catalog"'


async def test_resource_metadata_asked_of_the_issuer_points_to_the_site(
    client: httpx.AsyncClient, emu: Emulator
) -> None:
    r = await client.get(emu.auth + "/.well-known/oauth-protected-resource")
    assert r.status_code == 404 and emu.url + "/.well-known/oauth-protected-resource" in r.json()["message"]


async def test_the_site_has_no_agent_identity_endpoint(client: httpx.AsyncClient) -> None:
    assert (await client.post("/agent/identity", json={"type": "anonymous"})).status_code == 404


async def test_old_agent_auth_paths_point_to_the_current_one(client: httpx.AsyncClient, emu: Emulator) -> None:
    r = await client.post(emu.auth + "/agent/register", json={})
    assert r.status_code == 404 and "/agent/identity" in r.json()["message"]
