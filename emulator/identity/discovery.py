"""Discovery documents: RFC 9728 resource metadata, RFC 8414 / OpenID Connect server metadata with the
`agent_auth` block, and the RFC 9727 API catalog. One builder each, served by both origins where the
spec says so; the issuer is always `{auth_url}`, byte for byte, with no trailing slash.
"""

from __future__ import annotations

import msgspec
from msgspec import UNSET, UnsetType

from emulator.identity.identity import Identity
from emulator.identity.idjag import ID_JAG_TYPE, TOKEN_EXCHANGE
from emulator.identity.states import RegType
from emulator.identity.wire import JWT_BEARER, POST_CLAIM_SCOPES, Urls

API_CATALOG_PROFILE = "https://www.rfc-editor.org/info/rfc9727"


class ProtectedResource(msgspec.Struct, kw_only=True):
    """RFC 9728: the site (or the control plane) as a protected resource, and who issues its tokens."""

    resource: str
    resource_name: str
    authorization_servers: list[str]
    jwks_uri: str
    scopes_supported: list[str]
    bearer_methods_supported: list[str]
    resource_signing_alg_values_supported: list[str]
    resource_documentation: str


class AssertionTypes(msgspec.Struct):
    assertion_types_supported: list[str]


class AgentAuth(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The agent-registration block of the server metadata (agent-protocols reference §6); `identity_assertion`
    only while ID-JAG registration is on."""

    identity_endpoint: str
    register_uri: str
    claim_endpoint: str
    claim_uri: str
    claim_complete_endpoint: str
    identity_types_supported: list[str]
    identity_assertion: AssertionTypes | UnsetType = UNSET
    events_supported: list[str]


class AuthorizationServer(msgspec.Struct, kw_only=True):
    """RFC 8414 server metadata."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    revocation_endpoint: str
    jwks_uri: str
    grant_types_supported: list[str]
    response_types_supported: list[str]  # the authorization code grant's
    response_modes_supported: list[str]
    code_challenge_methods_supported: list[str]  # PKCE: S256 only (OAuth 2.1; `plain` is refused)
    # A client_id may be the URL of the client's metadata document (draft-ietf-oauth-client-id-metadata-document,
    # the MCP authorization spec's way to identify a client without registration; there is no registration_endpoint)
    client_id_metadata_document_supported: bool
    token_endpoint_auth_methods_supported: list[str]
    revocation_endpoint_auth_methods_supported: list[str]
    scopes_supported: list[str]
    agent_auth: AgentAuth


class OpenIdConfiguration(AuthorizationServer, kw_only=True):
    """OpenID Connect Discovery: the server metadata and what an OpenID provider must also say."""

    subject_types_supported: list[str]
    # No flow here issues an ID token (no `openid` scope is offered); ES256 is the provider's key, and RS256 is
    # listed because OpenID Connect Discovery §3 requires it of every provider (validators such as Authlib refuse
    # the document without it).
    id_token_signing_alg_values_supported: list[str]
    claims_supported: list[str]


def protected_resource(urls: Urls, *, control_plane: bool = False) -> ProtectedResource:
    """The site's document, or the control plane's (served at `{api_url}`: a person's token for it acts as a
    `pxt login` session does)."""
    return ProtectedResource(
        resource=urls.api if control_plane else urls.site,
        resource_name="Pixeltable Cloud control plane" if control_plane else "Pixeltable Cloud",
        authorization_servers=[urls.auth],
        jwks_uri=f"{urls.auth}/.well-known/jwks.json",
        scopes_supported=POST_CLAIM_SCOPES,
        bearer_methods_supported=["header"],
        resource_signing_alg_values_supported=["ES256"],
        resource_documentation=f"{urls.site}/llms.txt",
    )


def authorization_server(identity: Identity) -> AuthorizationServer:
    auth = identity.urls.auth
    types = identity.identity_types()
    return AuthorizationServer(
        issuer=auth,
        authorization_endpoint=f"{auth}/oauth2/authorize",
        token_endpoint=f"{auth}/oauth2/token",
        revocation_endpoint=f"{auth}/oauth2/revoke",
        jwks_uri=f"{auth}/.well-known/jwks.json",
        grant_types_supported=[JWT_BEARER, "authorization_code", "refresh_token"],
        response_types_supported=["code"],
        response_modes_supported=["query"],
        code_challenge_methods_supported=["S256"],
        client_id_metadata_document_supported=True,
        token_endpoint_auth_methods_supported=["none"],
        revocation_endpoint_auth_methods_supported=["none"],
        scopes_supported=POST_CLAIM_SCOPES,
        agent_auth=AgentAuth(
            identity_endpoint=f"{auth}/agent/identity",
            register_uri=f"{auth}/agent/identity",
            claim_endpoint=f"{auth}/agent/identity/claim",
            claim_uri=f"{auth}/agent/identity/claim",
            claim_complete_endpoint=f"{auth}/agent/identity/claim/complete",
            identity_types_supported=types,
            identity_assertion=AssertionTypes([ID_JAG_TYPE]) if RegType.IDENTITY_ASSERTION in types else UNSET,
            events_supported=[],
        ),
    )


def openid_configuration(identity: Identity) -> OpenIdConfiguration:
    """The server metadata (its fields first, in their order) and OpenID Connect's own."""
    return OpenIdConfiguration(
        **msgspec.structs.asdict(authorization_server(identity)),
        subject_types_supported=["public"],
        id_token_signing_alg_values_supported=["ES256", "RS256"],
        claims_supported=["iss", "sub", "aud", "exp", "iat", "email", "email_verified"],
    )


class UpstreamConfiguration(msgspec.Struct, kw_only=True):
    """The upstream issuer's metadata: its keys, and its token endpoint, where an agent exchanges the person's ID
    token for an ID-JAG (RFC 8693)."""

    issuer: str
    jwks_uri: str
    token_endpoint: str
    grant_types_supported: list[str]
    id_token_signing_alg_values_supported: list[str]
    claims_supported: list[str]


def upstream_configuration(issuer: str) -> UpstreamConfiguration:
    return UpstreamConfiguration(
        issuer=issuer,
        jwks_uri=f"{issuer}/.well-known/jwks.json",
        token_endpoint=f"{issuer}/oauth2/token",
        grant_types_supported=[TOKEN_EXCHANGE],
        id_token_signing_alg_values_supported=["ES256"],
        claims_supported=[
            "iss",
            "sub",
            "aud",
            "client_id",
            "jti",
            "iat",
            "exp",
            "auth_time",
            "email",
            "email_verified",
        ],
    )


class Link(msgspec.Struct, omit_defaults=True):
    href: str
    type: str | None = None


class Linkset(msgspec.Struct, omit_defaults=True, kw_only=True):
    """An RFC 9264 link context: an anchor and its links by relation."""

    anchor: str
    item: list[Link] | None = None
    service_desc: list[Link] | None = msgspec.field(default=None, name="service-desc")
    service_meta: list[Link] | None = msgspec.field(default=None, name="service-meta")
    service_doc: list[Link] | None = msgspec.field(default=None, name="service-doc")
    status: list[Link] | None = None


class ApiCatalog(msgspec.Struct):
    linkset: list[Linkset]


def api_catalog(urls: Urls) -> ApiCatalog:
    site = urls.site
    json, text = "application/json", "text/plain"
    return ApiCatalog(
        [
            Linkset(
                anchor=f"{site}/.well-known/api-catalog",
                item=[Link(f"{site}/ask"), Link(f"{site}/mcp"), Link(f"{site}/api/v1/trial-orgs"), Link(urls.api)],
            ),
            Linkset(
                anchor=f"{site}/ask",
                service_doc=[Link(f"{site}/llms.txt", text)],
                status=[Link(f"{site}/health", json)],
            ),
            Linkset(anchor=f"{site}/mcp", service_desc=[Link(f"{site}/.well-known/mcp", json)]),
            Linkset(
                anchor=f"{site}/api/v1/trial-orgs",
                service_meta=[Link(f"{site}/.well-known/oauth-protected-resource", json)],
                service_doc=[Link(f"{site}/docs/trials/create-trial-org", "text/html")],
            ),
        ]
    )


API_CATALOG_LINK = '</.well-known/api-catalog>; rel="api-catalog"'
