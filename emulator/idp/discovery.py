"""Discovery documents: RFC 9728 resource metadata, RFC 8414 / OpenID Connect server metadata with the
`agent_auth` block, and the RFC 9727 API catalog. One builder each, served by both origins where the
spec says so; the issuer is always `{auth_url}`, byte for byte, with no trailing slash.
"""

from __future__ import annotations

from typing import Any

from emulator.hosted.identity import IDENTITY_TYPES, JWT_BEARER, POST_CLAIM_SCOPES, Urls

API_CATALOG_PROFILE = "https://www.rfc-editor.org/info/rfc9727"


def protected_resource(urls: Urls) -> dict[str, Any]:
    return {
        "resource": urls.site,
        "resource_name": "Pixeltable Cloud",
        "authorization_servers": [urls.auth],
        "jwks_uri": f"{urls.auth}/.well-known/jwks.json",
        "scopes_supported": POST_CLAIM_SCOPES,
        "bearer_methods_supported": ["header"],
        "resource_signing_alg_values_supported": ["ES256"],
        "resource_documentation": f"{urls.site}/llms.txt",
    }


def authorization_server(urls: Urls) -> dict[str, Any]:
    auth = urls.auth
    return {
        "issuer": auth,
        "token_endpoint": f"{auth}/oauth2/token",
        "revocation_endpoint": f"{auth}/oauth2/revoke",
        "jwks_uri": f"{auth}/.well-known/jwks.json",
        "grant_types_supported": [JWT_BEARER],
        # RFC 8414 requires the member, and validators (Authlib) refuse an empty list. No grant here uses an
        # authorization endpoint (none is advertised), and "none" (OAuth 2.0 Multiple Response Type Encoding
        # Practices §4) is the registered value for one that returns no credentials: true of this provider, where
        # "code" would promise a browser flow it does not have.
        "response_types_supported": ["none"],
        "token_endpoint_auth_methods_supported": ["none"],
        "revocation_endpoint_auth_methods_supported": ["none"],
        "scopes_supported": POST_CLAIM_SCOPES,
        "agent_auth": {
            "identity_endpoint": f"{auth}/agent/identity",
            "register_uri": f"{auth}/agent/identity",
            "claim_endpoint": f"{auth}/agent/identity/claim",
            "claim_uri": f"{auth}/agent/identity/claim",
            "claim_complete_endpoint": f"{auth}/agent/identity/claim/complete",
            "identity_types_supported": IDENTITY_TYPES,
            "events_supported": [],
        },
    }


def openid_configuration(urls: Urls) -> dict[str, Any]:
    return {
        **authorization_server(urls),
        "subject_types_supported": ["public"],
        # No flow here issues an ID token; ES256 is the provider's key, and RS256 is listed because OpenID Connect
        # Discovery §3 requires it of every provider (validators such as Authlib refuse the document without it).
        "id_token_signing_alg_values_supported": ["ES256", "RS256"],
        "claims_supported": ["iss", "sub", "aud", "exp", "iat", "email", "email_verified"],
    }


def api_catalog(urls: Urls) -> dict[str, Any]:
    site = urls.site
    return {
        "linkset": [
            {
                "anchor": f"{site}/.well-known/api-catalog",
                "item": [
                    {"href": f"{site}/ask"},
                    {"href": f"{site}/mcp"},
                    {"href": f"{site}/api/v1/trial-orgs"},
                    {"href": urls.api},
                ],
            },
            {
                "anchor": f"{site}/ask",
                "service-doc": [{"href": f"{site}/llms.txt", "type": "text/plain"}],
                "status": [{"href": f"{site}/health", "type": "application/json"}],
            },
            {
                "anchor": f"{site}/mcp",
                "service-desc": [{"href": f"{site}/.well-known/mcp", "type": "application/json"}],
            },
            {
                "anchor": f"{site}/api/v1/trial-orgs",
                "service-meta": [{"href": f"{site}/.well-known/oauth-protected-resource", "type": "application/json"}],
                "service-doc": [{"href": f"{site}/docs/trials/create-trial-org", "type": "text/html"}],
            },
        ]
    }


API_CATALOG_LINK = '</.well-known/api-catalog>; rel="api-catalog"'
