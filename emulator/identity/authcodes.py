"""The authorization code grant (OAuth 2.1 §4.1, PKCE S256 only) for a person signing in through the browser, and
the clients it serves: client ID metadata documents (the MCP authorization spec's; draft-ietf-oauth-client-id-
metadata-document). This module is the one writer of `authorization_codes` and `person_refresh_tokens`.

- A client is identified by the URL of its metadata document (https, or http on a loopback host); the document is
  fetched on each authorization request (no cache: a test that changes it sees the change) and the redirect URI
  must be one it lists (a loopback http redirect URI matches on any port, RFC 8252 §7.3). The one other kind: a
  client_id the `loopback_clients` setting names, a public client whose redirect URI may be any http loopback URI.
  Any other client_id is `invalid_client`: there is no registration of clients.
- A code lives `CODE_TTL` seconds on the emulator's clock, works once, and only with the client, redirect URI,
  PKCE verifier and resource of its request. A second use of a code is refused (the tokens it gave stay: there
  is no record of which access token a code issued).
- The access token is the person's: an ES256 JWT, `typ: at+jwt` as every access token here, `sub` the user's id,
  `aud` the resource asked for (RFC 8707; the site's URL or one under it, or the control plane's URL, where the
  token acts as the person as a `pxt login` session does; the site's when none is asked),
  `client_id` the approving client, `scope` within what a claimed agent gets (POST_CLAIM_SCOPES). The refresh token
  is opaque, rotates at each use, and is bound to the client.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
import ssl
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

import aiosqlite
import msgspec
from msgspec import UNSET, UnsetType

from emulator.core.clock import iso
from emulator.core.context import Core
from emulator.core.errors import INVALID_CLIENT, INVALID_GRANT, INVALID_REQUEST, INVALID_SCOPE, INVALID_TARGET, ApiError
from emulator.core.ids import secret_hash
from emulator.core.payloads import IdpAuthorizationDenied, IdpAuthorized, IdpTokenIssued
from emulator.core.store import one
from emulator.identity import tokens, users
from emulator.identity.idjag import ID_JAG_TYPE, Upstream
from emulator.identity.signing import ACCESS_TOKEN_TYP, PersonClaims, Signer
from emulator.identity.users import Users
from emulator.identity.wire import POST_CLAIM_SCOPES, Urls

CODE_TTL = 60  # seconds a code works (OAuth 2.1 §4.1.2: short-lived; 10 minutes at most)
_DOC_MAX = 64 * 1024  # bytes of a client's metadata document read at most
_FETCH_TIMEOUT = 5.0


class PersonToken(msgspec.Struct, kw_only=True):
    """The token endpoint's answer to the authorization code and refresh grants (RFC 6749 §5.1)."""

    access_token: str
    token_type: str = "Bearer"
    expires_in: int
    scope: str
    refresh_token: str | UnsetType = UNSET  # none for an ID-JAG: the client asks the person's IdP for a fresh one


class ClientMetadata(msgspec.Struct, kw_only=True):
    """What this provider reads of a client ID metadata document (the rest of RFC 7591's fields are ignored)."""

    client_id: str
    redirect_uris: list[str]
    client_name: str | None = None
    client_uri: str | None = None


@dataclass(frozen=True)
class AuthRequest:
    """An authorization request whose client and redirect URI are known good: a refusal from here on goes back to
    the client at its redirect URI."""

    client: ClientMetadata
    redirect_uri: str
    code_challenge: str
    state: str
    scope: str
    resource: str


class RedirectError(Exception):
    """A refusal the client reads at its redirect URI (RFC 6749 §4.1.2.1): the redirect URI was checked."""

    def __init__(self, redirect: str) -> None:
        super().__init__(redirect)
        self.redirect = redirect


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _loopback_http(uri: str) -> bool:
    parts = urlsplit(uri)
    return parts.scheme == "http" and parts.hostname is not None and _is_loopback(parts.hostname) and not parts.fragment


def is_metadata_url(client_id: str) -> bool:
    """Whether a client_id names a metadata document: https with a path (the draft's rule), or http on a loopback
    host (the emulator's allowance, for tests that serve one without TLS)."""
    parts = urlsplit(client_id)
    if not parts.hostname or parts.path in ("", "/") or parts.fragment or parts.username or parts.password:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and _is_loopback(parts.hostname))


def _redirect_matches(asked: str, listed: str) -> bool:
    """Exact match, or (RFC 8252 §7.3) a loopback http redirect URI on another port."""
    if asked == listed:
        return True
    a, b = urlsplit(asked), urlsplit(listed)
    return (
        a.scheme == b.scheme == "http"
        and a.hostname == b.hostname
        and a.hostname is not None
        and _is_loopback(a.hostname)
        and (a.path, a.query) == (b.path, b.query)
    )


def with_query(uri: str, params: dict[str, str]) -> str:
    joined = urlencode({k: v for k, v in params.items() if v})
    return uri + ("&" if urlsplit(uri).query else "?") + joined


def challenge_of(verifier: str) -> str:
    """PKCE S256 (RFC 7636 §4.2)."""
    digest = hashlib.sha256(verifier.encode("ascii", "replace")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _ssl_context() -> ssl.SSLContext:
    """The CAs a metadata document's server is checked against: `SSL_CERT_FILE` when set (a test's own CA), else
    certifi's (httpx's default)."""
    cafile = os.environ.get("SSL_CERT_FILE")
    if cafile:
        return ssl.create_default_context(cafile=cafile)
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


async def fetch_client(client_id: str) -> ClientMetadata:
    """The client's metadata document, fetched now; refused as invalid_client in words that say what is wrong."""
    if not is_metadata_url(client_id):
        raise INVALID_CLIENT(
            f"unknown client_id {client_id[:200]!r}: this provider registers no clients; a client_id is the https "
            "URL of the client's metadata document (http only on a loopback host)"
        )
    import httpx

    try:
        async with httpx.AsyncClient(
            verify=_ssl_context(), trust_env=False, follow_redirects=False, timeout=_FETCH_TIMEOUT
        ) as http:
            async with http.stream("GET", client_id, headers={"Accept": "application/json"}) as r:
                if r.status_code != 200:
                    raise INVALID_CLIENT(f"the client's metadata document answered {r.status_code} at {client_id}")
                raw = b""
                async for chunk in r.aiter_bytes():
                    raw += chunk
                    if len(raw) > _DOC_MAX:
                        raise INVALID_CLIENT(f"the client's metadata document is over {_DOC_MAX} bytes")
    except httpx.HTTPError as e:
        raise INVALID_CLIENT(f"the client's metadata document could not be fetched from {client_id}: {e}") from None
    try:
        doc = msgspec.json.decode(raw, type=ClientMetadata)
    except msgspec.DecodeError as e:
        raise INVALID_CLIENT(f"the client's metadata document is not one: {e}") from None
    if doc.client_id != client_id:
        raise INVALID_CLIENT(f"the metadata document's client_id is {doc.client_id[:200]!r}, not its own URL")
    return doc


class AuthCodes:
    def __init__(self, core: Core, signer: Signer, urls: Urls, users: Users, upstream: Upstream) -> None:
        self.core = core
        self.signer = signer
        self.urls = urls
        self.users = users
        self.upstream = upstream

    def resource_of(self, resource: str) -> str:
        """RFC 8707: the site, or a URL under it; or the control plane (its URL, a trailing slash dropped: the one
        audience the control plane accepts); none asked means the site."""
        site, api = self.urls.site, self.urls.api
        if not resource:
            return site
        if resource.rstrip("/") == api:
            return api
        if resource != site and not resource.startswith(site + "/"):
            raise INVALID_TARGET(
                f"this provider issues tokens for {site} (or a URL under it) and the control plane {api}, "
                f"not {resource[:200]!r}"
            )
        if urlsplit(resource).fragment:
            raise INVALID_TARGET("a resource has no fragment (RFC 8707 §2)")
        return resource

    async def check_request(
        self,
        *,
        response_type: str,
        client_id: str,
        redirect_uri: str,
        code_challenge: str,
        code_challenge_method: str,
        state: str,
        scope: str,
        resource: str,
    ) -> AuthRequest:
        """An authorization request: its client and redirect URI first (refused to the person, as ApiError), then
        the rest (refused to the client at its redirect URI, as RedirectError)."""
        if not client_id:
            raise INVALID_REQUEST("client_id is required")
        if client_id in self.core.settings.loopback_client_ids:  # pre-registered (the loopback_clients setting)
            if not _loopback_http(redirect_uri):
                raise INVALID_REQUEST(f"redirect_uri must be an http loopback URI for the client {client_id!r}")
            client = ClientMetadata(client_id=client_id, redirect_uris=[redirect_uri])
        else:
            client = await fetch_client(client_id)
        if not redirect_uri:
            if len(client.redirect_uris) != 1:
                raise INVALID_REQUEST("redirect_uri is required: the client lists more than one")
            redirect_uri = client.redirect_uris[0]
        if not any(_redirect_matches(redirect_uri, listed) for listed in client.redirect_uris):
            raise INVALID_REQUEST(
                f"redirect_uri {redirect_uri[:200]!r} is not one the client's metadata document lists"
            )

        def refuse(error: str, description: str) -> RedirectError:
            return RedirectError(
                with_query(redirect_uri, {"error": error, "error_description": description, "state": state})
            )

        if response_type != "code":
            raise refuse("unsupported_response_type", "response_type must be code")
        if not code_challenge:
            raise refuse("invalid_request", "code_challenge is required (PKCE, S256)")
        if code_challenge_method != "S256":
            raise refuse("invalid_request", "code_challenge_method must be S256 (plain is not accepted)")
        if not 43 <= len(code_challenge) <= 128:
            raise refuse("invalid_request", "code_challenge must be 43 to 128 characters (RFC 7636)")
        asked = scope.split()
        extra = sorted(set(asked) - set(POST_CLAIM_SCOPES))
        if extra:
            raise refuse("invalid_scope", f"not offered: {' '.join(extra)}; offered: {' '.join(POST_CLAIM_SCOPES)}")
        try:
            target = self.resource_of(resource)
        except ApiError as e:
            raise refuse(e.code, e.message) from None
        granted = " ".join(asked) if asked else " ".join(POST_CLAIM_SCOPES)
        return AuthRequest(client, redirect_uri, code_challenge, state, granted, target)

    async def approve(self, ask: AuthRequest, email: str) -> str:
        """The person approved: a code for the client; the redirect URI that carries it."""
        code = self.core.ids.token("ac_", 24)
        now = self.core.clock.now()
        async with self.core.store.transaction() as conn:
            user = await self.users.ensure_user(conn, email, now)
            await conn.execute(
                "INSERT INTO authorization_codes (code_hash, client_id, redirect_uri, code_challenge, resource, scope, "
                "user_id, expires_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    secret_hash(code),
                    ask.client.client_id,
                    ask.redirect_uri,
                    ask.code_challenge,
                    ask.resource,
                    ask.scope,
                    user,
                    now + CODE_TTL,
                    now,
                ),
            )
        self.core.bus.publish(
            user,
            IdpAuthorized(email=email, client_id=ask.client.client_id, scope=ask.scope, resource=ask.resource),
        )
        return with_query(ask.redirect_uri, {"code": code, "state": ask.state})

    def deny(self, ask: AuthRequest) -> str:
        self.core.bus.publish(ask.client.client_id, IdpAuthorizationDenied(client_id=ask.client.client_id))
        return with_query(
            ask.redirect_uri,
            {"error": "access_denied", "error_description": "the person denied the request", "state": ask.state},
        )

    async def redeem(
        self, code: str, code_verifier: str, redirect_uri: str, client_id: str, resource: str
    ) -> PersonToken:
        """grant_type=authorization_code: the code, once, with what its request was bound to."""
        if not code:
            raise INVALID_REQUEST("code is required")
        if not code_verifier:
            raise INVALID_REQUEST("code_verifier is required (PKCE)")
        if not client_id:
            raise INVALID_REQUEST("client_id is required")
        now = self.core.clock.now()
        async with self.core.store.transaction() as conn:
            row = await one(conn, "SELECT * FROM authorization_codes WHERE code_hash = ?", (secret_hash(code),))
            if row is None:
                raise INVALID_GRANT("the code is not one this provider issued")
            if row["used_at"] is not None:
                raise INVALID_GRANT("the code was already used: a code works once")
            if row["expires_at"] <= now:
                raise INVALID_GRANT(f"the code expired: it works {CODE_TTL} s after the person approves")
            if row["client_id"] != client_id:
                raise INVALID_GRANT("the code was issued to another client_id")
            if row["redirect_uri"] != redirect_uri:
                raise INVALID_GRANT("redirect_uri must be the one the authorization request sent")
            if not hmac.compare_digest(challenge_of(code_verifier), row["code_challenge"]):
                raise INVALID_GRANT("the code_verifier does not match the code_challenge (S256)")
            if resource and self.resource_of(resource) != row["resource"]:
                raise INVALID_TARGET(f"the code was issued for the resource {row['resource']}, not {resource[:200]!r}")
            await conn.execute(
                "UPDATE authorization_codes SET used_at = ? WHERE code_hash = ?", (now, row["code_hash"])
            )
            user, token = await self._issue(conn, row["user_id"], client_id, row["resource"], row["scope"], now)
        return self._issued(user, token)

    async def refresh(self, refresh_token: str, client_id: str, scope: str, resource: str) -> PersonToken:
        """grant_type=refresh_token: a person's refresh token, rotated; bound to its client."""
        if not refresh_token:
            raise INVALID_REQUEST("refresh_token is required")
        now = self.core.clock.now()
        async with self.core.store.transaction() as conn:
            row = await one(conn, "SELECT * FROM person_refresh_tokens WHERE hash = ?", (secret_hash(refresh_token),))
            if row is None or row["spent_at"] is not None or row["expires_at"] <= now:
                raise INVALID_GRANT(
                    "the refresh token is unknown, expired or already used (refresh tokens rotate: use the one the "
                    "last answer returned); agents refresh at /agent/identity with type refresh"
                )
            if client_id and row["client_id"] != client_id:
                raise INVALID_GRANT("the refresh token was issued to another client_id")
            if resource and self.resource_of(resource) != row["resource"]:
                raise INVALID_TARGET(f"the refresh token is for the resource {row['resource']}")
            granted = row["scope"].split()
            asked = scope.split() or granted
            extra = sorted(set(asked) - set(granted))
            if extra:
                raise INVALID_SCOPE(f"not granted: {' '.join(extra)}; granted: {row['scope']}")
            await conn.execute("UPDATE person_refresh_tokens SET spent_at = ? WHERE hash = ?", (now, row["hash"]))
            user, token = await self._issue(
                conn, row["user_id"], row["client_id"], row["resource"], " ".join(asked), now
            )
        return self._issued(user, token)

    async def grant_id_jag(self, assertion: str, client_id: str, resource: str, scope: str) -> PersonToken:
        """The jwt-bearer grant with an ID-JAG (MCP's enterprise-managed authorization; the ID-JAG draft §4.3): the
        registration's checks (idjag.py), then the ID-JAG must name this client and a resource this server serves;
        the person is the one linked to the upstream identity. Every failed check is invalid_grant (RFC 7523 §3.1),
        but a resource not served (invalid_target) and a request naming no client (invalid_client)."""
        if not client_id:
            raise INVALID_CLIENT("client_id is required with an ID-JAG: it must be the ID-JAG's client_id claim")
        now = self.core.clock.now()
        try:
            jag = self.upstream.check(ID_JAG_TYPE, assertion, now, self.core.settings.idjag_max_auth_age)
        except ApiError as e:  # issuer_not_enabled, login_required: the registration's words; the grant's error code
            raise INVALID_GRANT(e.message) from None
        if jag.client_id != client_id:
            raise INVALID_GRANT(f"the ID-JAG was issued to the client {jag.client_id!r}, not {client_id[:200]!r}")
        if jag.resource is None:
            raise INVALID_GRANT(f"the ID-JAG names no resource; ask the identity provider for one for {self.urls.site}")
        target = self.resource_of(jag.resource)
        if resource and self.resource_of(resource) != target:
            raise INVALID_TARGET(f"the ID-JAG is for the resource {target}, not {resource[:200]!r}")
        asked = scope.split()
        extra = sorted(set(asked) - set(POST_CLAIM_SCOPES))
        if extra:
            raise INVALID_SCOPE(f"not offered: {' '.join(extra)}; offered: {' '.join(POST_CLAIM_SCOPES)}")
        granted = " ".join(asked) if asked else " ".join(POST_CLAIM_SCOPES)
        async with self.core.store.transaction() as conn:  # a refusal in here rolls the jti back: not a replay
            if not await tokens.use_jti(conn, jag.iss, jag.jti, jag.exp, now):
                raise INVALID_GRANT(f"the ID-JAG's jti {jag.jti} was already used: an ID-JAG works once")
            user = await users.linked_user(conn, jag.iss, jag.sub)
            if user is None and await users.user_id(conn, jag.email) is None:  # a new person, linked (as registering)
                user = await self.users.ensure_user(conn, jag.email, now)
                await users.link_upstream(conn, jag.iss, jag.sub, user, now)
            if user is None:
                raise INVALID_GRANT(
                    f"the account {jag.email} is not linked to this upstream identity; the person links it by "
                    "claiming an agent registered with an ID-JAG (POST /agent/identity, type identity_assertion)"
                )
            user, token = await self._issue(conn, user, client_id, target, granted, now, refresh=False)
        return self._issued(user, token)

    async def _issue(
        self,
        conn: aiosqlite.Connection,
        user: str,
        client_id: str,
        resource: str,
        scope: str,
        now: float,
        *,
        refresh: bool = True,
    ) -> tuple[str, PersonToken]:
        """The tokens, written in the caller's transaction; (the user, the answer), its event published after."""
        person = await one(conn, "SELECT email FROM users WHERE id = ?", (user,))
        if person is None:  # deleted with its codes (ON DELETE CASCADE): not reachable with a live code
            raise INVALID_GRANT("the person no longer exists")
        ttl = self.core.settings.access_token_ttl
        exp = now + ttl
        renewal: str | UnsetType = UNSET
        if refresh:
            renewal = self.core.ids.token("prt_", 24)
            await conn.execute(
                "INSERT INTO person_refresh_tokens (hash, client_id, user_id, resource, scope, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (secret_hash(renewal), client_id, user, resource, scope, now + self.core.settings.refresh_token_ttl),
            )
        claims = PersonClaims(
            iss=self.urls.auth,
            aud=resource,
            sub=user,
            client_id=client_id,
            scope=scope,
            jti=self.core.ids.ident("at_"),
            iat=int(now),
            exp=int(exp),
            email=str(person["email"]),
        )
        return user, PersonToken(
            access_token=self.signer.sign(ACCESS_TOKEN_TYP, claims), expires_in=ttl, scope=scope, refresh_token=renewal
        )

    def _issued(self, user: str, token: PersonToken) -> PersonToken:
        exp = self.core.clock.now() + token.expires_in
        self.core.bus.publish(user, IdpTokenIssued(scope=token.scope, expires_at=iso(exp)))
        return token

    async def revoke(self, token: str) -> bool:
        """RFC 7009 for a person's refresh token: whether it was one (spent now)."""
        now = self.core.clock.now()
        return bool(
            await self.core.store.execute(
                "UPDATE person_refresh_tokens SET spent_at = ? WHERE hash = ? AND spent_at IS NULL",
                (now, secret_hash(token)),
            )
        )
