"""The identity provider origin `{auth_url}`: agent registration, claims, OAuth token and revocation
endpoints, JWKS and discovery, and the verification page a person uses to claim an agent.

Error formats follow each endpoint's clients: registration endpoints answer `{code, message, error}`
(plus `retry_after` on 429), as WorkOS and the pixeltable client read them; `/oauth2/*` answers RFC 6749
`{error, error_description}` with `Cache-Control: no-store`.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol, TypeVar, get_args
from urllib.parse import unquote

import msgspec
from litestar import MediaType, Request, Response, get, post, route
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.enums import ScopeType
from litestar.exceptions import HTTPException
from litestar.openapi import ResponseSpec
from litestar.params import FromQuery, HeaderParameter, QueryParameter
from litestar.types import ASGIApp, Receive, Scope, Send
from msgspec import UNSET, UnsetType

from emulator.core import contract, html, jsonbody, openapi
from emulator.core.boundary import Boundary, BoundaryGate, Render, by_path
from emulator.core.clientip import client_ip
from emulator.core.context import Core
from emulator.core.contract import error_shape
from emulator.core.errors import (
    ALREADY_CLAIMED,
    ANONYMOUS_REGISTRATION_DISABLED,
    BAD_REQUEST,
    CLAIM_DENIED,
    CLAIM_EXPIRED,
    CLAIM_NOT_CONFIRMED,
    CLAIM_REVOKED,
    FORBIDDEN,
    GONE,
    INTERACTION_REQUIRED,
    INVALID_CLAIM_TOKEN,
    INVALID_CLIENT,
    INVALID_GRANT,
    INVALID_LOGIN_HINT,
    INVALID_REFRESH_TOKEN,
    INVALID_REQUEST,
    INVALID_SCOPE,
    INVALID_TARGET,
    INVALID_USER_CODE,
    ISSUER_NOT_ENABLED,
    LOGIN_REQUIRED,
    NOT_FOUND,
    RATE_LIMIT_EXCEEDED,
    SERVER_ERROR,
    SERVICE_AUTH_REGISTRATION_DISABLED,
    UNSUPPORTED_GRANT_TYPE,
    USER_CODE_EXPIRED,
    ApiError,
    code_for,
)
from emulator.core.faultgate import FaultGate
from emulator.core.httperrors import http_detail, incomplete_body, last_resort
from emulator.core.prerouted import raw_headers, read_body, send_whole, small_body
from emulator.core.ratelimit import RateLimiter
from emulator.core.webapp import App
from emulator.hosted.logins import Logins
from emulator.identity import discovery
from emulator.identity.agents_api import AgentsApi
from emulator.identity.authcodes import AuthRequest, PersonToken, RedirectError
from emulator.identity.claims import Closed, why_closed
from emulator.identity.discovery import AuthorizationServer, OpenIdConfiguration, UpstreamConfiguration
from emulator.identity.identity import Identity
from emulator.identity.idjag import UPSTREAM_PATH, Exchanged, TokenExchange, other_issuer
from emulator.identity.records import OpenAttempt
from emulator.identity.signing import Jwks
from emulator.identity.states import RegType
from emulator.identity.wire import (
    CLAIM_PAGE,
    JWT_BEARER,
    POST_CLAIM_SCOPES,
    PRE_CLAIM_SCOPES,
    AccessToken,
    ClaimCompletion,
    Claimed,
    ClaimOffer,
    ClaimStart,
    ClaimStarted,
    NeedsInteraction,
    Refreshed,
    Registered,
    Registration,
    Scopes,
    valid_email,
)
from emulator.idp import agents, login
from emulator.idp.forms import Decision, OAuthError, oauth_form, oauth_reader, page_form

_encode = msgspec.json.Encoder().encode
_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
_PUBLIC = {"Cache-Control": "public, max-age=300"}  # the discovery documents and key sets
_FAILED = "the identity provider failed; see its log"
T_co = TypeVar("T_co", covariant=True)


@dataclass
class Idp:
    core: Core
    identity: Identity
    limiter: RateLimiter
    logins: Logins
    agents: AgentsApi  # the service side's agents API (`/agents/*`)

    def client_ip(self, request: Request[Any, Any, Any]) -> str:
        return client_ip(request, self.core.settings.trust_forwarded)


def idp_of(request: Request[Any, Any, Any]) -> Idp:
    idp = request.app.state["idp"]
    assert isinstance(idp, Idp)
    return idp


def _json_bytes(status: int, headers: Mapping[str, str], body: bytes) -> Response[bytes]:
    """An error body already encoded (its writer's typed struct)."""
    return Response(body, status_code=status, media_type="application/json", headers=dict(headers) or None)


# --- error renderers ------------------------------------------------------------------------------


class RegistrationError(msgspec.Struct, kw_only=True):
    """A registration endpoint's error, as WorkOS and the pixeltable client read it (`error` repeats `code`). An
    ID-JAG's 401s also say it RFC 6749's way (`error_description`), and `interaction_required` carries the claim the
    person completes (`id`, `type`, `scopes`, `claim`)."""

    code: str
    message: str
    error: str
    retry_after: int | UnsetType = UNSET  # a 429's
    error_description: str | UnsetType = UNSET
    id: str | UnsetType = UNSET
    type: str | UnsetType = UNSET
    scopes: Scopes | UnsetType = UNSET
    claim: ClaimOffer | UnsetType = UNSET

    @classmethod
    def of(cls, exc: ApiError) -> RegistrationError:
        retry = exc.headers.get("Retry-After")
        error = cls(
            code=exc.code, message=exc.message, error=exc.code, retry_after=UNSET if retry is None else int(retry)
        )
        if exc.status == 401 and exc.headers.get("WWW-Authenticate", "").startswith("AgentAuth"):
            error.error_description = exc.message
        if isinstance(exc, NeedsInteraction):
            offer = exc.offer
            error.id, error.type, error.scopes, error.claim = offer.id, offer.type, offer.scopes, offer.claim
        return error


def registration_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[bytes]:
    return _json_bytes(exc.status, exc.headers, _encode(RegistrationError.of(exc)))


def oauth_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[bytes]:
    return _json_bytes(exc.status, {**_NO_STORE, **exc.headers}, _encode(OAuthError(exc.code, exc.message)))


def page_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[str]:
    return html.page("This claim cannot go on", html.error_box(exc.message), exc.status)


def internal_error(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    state_dir = idp_of(request).core.settings.state_dir
    failed = SERVER_ERROR(_FAILED)
    return registration_error(request, last_resort(request.method, request.url.path, exc, state_dir, failed))


def http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
    cut = incomplete_body(exc)
    if cut is not None:
        return registration_error(request, INVALID_REQUEST(cut.message))
    if exc.status_code == 404:
        return registration_error(request, NOT_FOUND(f"nothing is served at {request.url.path}"))
    # a 400 is OAuth's invalid_request; another status keeps the catalogue's code for it (405, 413, ...)
    status = exc.status_code
    code = "invalid_request" if status == 400 else code_for(status)
    return registration_error(request, ApiError(status, code, http_detail(exc)))


# The error bodies as the OpenAPI document shows them, by the handlers that write them.
REGISTRATION = error_shape(
    RegistrationError,
    registration_error,
    http_error,
    internal_error,
    headers={"Retry-After": "on a 429: seconds to wait", "WWW-Authenticate": "on an ID-JAG's 401: AgentAuth"},
    description="a refusal, as WorkOS and the pixeltable client read it",
)
OAUTH = error_shape(OAuthError, oauth_error, login.oauth_error, description="a refusal, RFC 6749's")
PAGE = error_shape(
    str, page_error, login.page_error, media_type=MediaType.HTML, description="a page that says what is wrong"
)


# --- registration ---------------------------------------------------------------------------------


def _object_of(raw: bytes) -> dict[str, object]:
    """The body as a JSON object, its members still unread: each endpoint's type decodes it."""
    try:
        body = jsonbody.decode(raw or b"null")
    except jsonbody.NotJson as e:
        raise INVALID_REQUEST(f"the body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise INVALID_REQUEST("the body must be a JSON object")
    return body


class _FromObject(Protocol[T_co]):
    """A registration endpoint's body type: read from the JSON object, each field refused in its own words."""

    def of(self, raw: dict[str, object], /) -> T_co: ...


def registration_body(type_: _FromObject[T_co]) -> openapi.BodyDependency:
    """`dependencies={name: registration_body(T)}`: the handler's parameter `name: T` is its body (core/contract.py)."""
    return contract.body(type_, lambda raw: type_.of(_object_of(raw)))


@post(
    "/agent/identity",
    status_code=200,
    operation_id="register",
    exception_handlers={ApiError: registration_error},
    dependencies={"registration": registration_body(Registration)},
    responses=contract.errors(
        INVALID_REQUEST,
        INVALID_LOGIN_HINT,
        INVALID_REFRESH_TOKEN,
        INVALID_GRANT,
        ISSUER_NOT_ENABLED,
        LOGIN_REQUIRED,
        INTERACTION_REQUIRED,
        ANONYMOUS_REGISTRATION_DISABLED,
        SERVICE_AUTH_REGISTRATION_DISABLED,
        RATE_LIMIT_EXCEEDED,
    ),
)
async def register(
    request: Request[Any, Any, Any], registration: NamedDependency[Registration]
) -> Registered | Refreshed:
    idp = idp_of(request)
    if registration.type != "refresh":
        quota = idp.limiter.hit(idp.client_ip(request))
        if not quota.allowed:
            raise RATE_LIMIT_EXCEEDED(
                f"too many registrations from this address; try again in {quota.reset} seconds",
                headers={"Retry-After": str(quota.reset)},
            )
    return await idp.identity.register(registration, idp.client_ip(request))


# The claim's refusals: its token's (identity._registration_by_claim_token), then each step's own.
_CLAIM_TOKEN_REFUSALS = (INVALID_REQUEST, INVALID_CLAIM_TOKEN, CLAIM_REVOKED, ALREADY_CLAIMED, CLAIM_EXPIRED)


@post(
    "/agent/identity/claim",
    status_code=200,
    operation_id="start_claim",
    exception_handlers={ApiError: registration_error},
    dependencies={"start": registration_body(ClaimStart)},
    responses=contract.errors(*_CLAIM_TOKEN_REFUSALS, INVALID_LOGIN_HINT),
)
async def start_claim(request: Request[Any, Any, Any], start: NamedDependency[ClaimStart]) -> ClaimStarted:
    return await idp_of(request).identity.start_claim(start)


@post(
    "/agent/identity/claim/complete",
    status_code=200,
    operation_id="complete_claim",
    exception_handlers={ApiError: registration_error},
    dependencies={"completion": registration_body(ClaimCompletion)},
    responses=contract.errors(
        *_CLAIM_TOKEN_REFUSALS, INVALID_USER_CODE, CLAIM_DENIED, CLAIM_NOT_CONFIRMED, USER_CODE_EXPIRED
    ),
)
async def complete_claim(request: Request[Any, Any, Any], completion: NamedDependency[ClaimCompletion]) -> Claimed:
    return await idp_of(request).identity.complete_claim(completion)


# Signposts: paths that only ever refuse, saying where to go instead. Their one answer is that refusal, so the
# document shows it as the operation's status (the handler always raises it).


@route(
    ["/agent/auth", "/agent/register"],
    http_method=["GET", "POST"],
    status_code=404,
    exception_handlers={ApiError: registration_error},
)
async def old_paths(request: Request[Any, Any, Any]) -> None:
    raise NOT_FOUND(
        f"{request.url.path} is an old agent-auth path; register with POST {idp_of(request).identity.urls.auth}"
        "/agent/identity",
    )


# --- OAuth ----------------------------------------------------------------------------------------

JwtBearer = Literal["urn:ietf:params:oauth:grant-type:jwt-bearer"]
assert get_args(JwtBearer) == (JWT_BEARER,)
GrantType = Literal["urn:ietf:params:oauth:grant-type:jwt-bearer", "authorization_code", "refresh_token"]


class TokenForm(msgspec.Struct, kw_only=True):
    """/oauth2/token: the jwt-bearer grant (RFC 7523: the registration's identity assertion, or an ID-JAG of the
    person's identity provider with the client_id it names), the authorization code grant (OAuth 2.1 §4.1.3, with
    PKCE's code_verifier) and a person's refresh token (§4.3)."""

    grant_type: GrantType
    assertion: str = ""  # jwt-bearer
    scope: str | None = None  # narrower than what was granted
    code: str = ""  # authorization_code
    redirect_uri: str = ""
    code_verifier: str = ""
    client_id: str = ""
    refresh_token: str = ""  # refresh_token
    resource: str = ""  # RFC 8707


def _grant_refused(grant: object) -> ApiError:
    hint = ""
    if isinstance(grant, str) and ("device_code" in grant or "claim" in grant):
        hint = "; there is no polling grant: complete the claim at /agent/identity/claim/complete"
    return UNSUPPORTED_GRANT_TYPE(f"grant_type must be {JWT_BEARER}, authorization_code or refresh_token{hint}")


_read_token_form = oauth_reader(TokenForm, {"grant_type": _grant_refused})


def token_form(headers: Mapping[str, str], body: bytes) -> TokenForm:
    """The token endpoint's form (`headers` by lower-case name), refused in RFC 6749's words. The route's body
    dependency and TokenFastPath both read it so."""
    authorization = headers.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        raise INVALID_REQUEST("send the assertion in the form field `assertion`, not a header")
    form = _read_token_form(headers.get("content-type", ""), body)
    if authorization.lower().startswith("basic "):  # client_secret_basic (RFC 6749 §2.3.1): the client_id it names
        named = basic_client_id(authorization[6:])
        if form.client_id and form.client_id != named:
            raise INVALID_REQUEST("the client_id in the form is not the one in the Authorization header")
        form = msgspec.structs.replace(form, client_id=named)
    return form


def basic_client_id(credentials: str) -> str:
    """The client_id of HTTP Basic client authentication (url-encoded, then base64; the secret is not checked:
    this provider keeps no client secrets)."""
    try:
        decoded = base64.b64decode(credentials.strip(), validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        raise INVALID_CLIENT("the Authorization header's Basic credentials are not base64 of id:secret") from None
    client_id, sep, _ = decoded.partition(":")
    if not sep or not client_id:
        raise INVALID_CLIENT("the Authorization header's Basic credentials are not client_id:secret")
    return unquote(client_id)


async def exchange(idp: Idp, grant: TokenForm) -> AccessToken | PersonToken:
    codes = idp.identity.authcodes
    if grant.grant_type == "authorization_code":
        return await codes.redeem(grant.code, grant.code_verifier, grant.redirect_uri, grant.client_id, grant.resource)
    if grant.grant_type == "refresh_token":
        if grant.refresh_token.startswith("art_"):
            raise INVALID_GRANT("an agent's refresh token goes to /agent/identity with type refresh")
        return await codes.refresh(grant.refresh_token, grant.client_id, grant.scope or "", grant.resource)
    if not grant.assertion:
        raise INVALID_REQUEST("assertion is required (the registration's identity.assertion)")
    if grant.assertion.startswith("art_"):
        raise INVALID_GRANT("refresh tokens go to /agent/identity with type refresh")
    if other_issuer(grant.assertion, idp.identity.urls.auth):  # an ID-JAG from the person's identity provider
        return await codes.grant_id_jag(grant.assertion, grant.client_id, grant.resource, grant.scope or "")
    return await idp.identity.exchange(grant.assertion, grant.scope)


@post(
    "/oauth2/token",
    status_code=200,
    operation_id="token",
    exception_handlers={ApiError: oauth_error},
    dependencies={"grant": contract.form(TokenForm, token_form)},
    responses=contract.errors(
        INVALID_REQUEST, INVALID_CLIENT, UNSUPPORTED_GRANT_TYPE, INVALID_GRANT, INVALID_SCOPE, INVALID_TARGET
    ),
)
async def token(
    request: Request[Any, Any, Any], grant: NamedDependency[TokenForm]
) -> Response[AccessToken | PersonToken]:
    # Reached only by what TokenFastPath leaves to the router (a large or chunked body); the same answer.
    return Response(await exchange(idp_of(request), grant), headers=_NO_STORE)


class TokenFastPath:
    """ASGI: `POST /oauth2/token` answered before Litestar's router and response building (a third of an
    exchange's CPU): token exchanges are what agents and load tests send most. Inside the boundary and fault gates
    and the request journal, with the route's own answer (token_form, exchange); a body without a small Content-Length
    goes on to the route."""

    def __init__(self, app: ASGIApp, idp: Idp) -> None:
        self.app = app
        self.idp = idp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP or scope["method"] != "POST" or scope["path"] != "/oauth2/token":
            await self.app(scope, receive, send)
            return
        if not small_body(scope):
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        if body is None:
            return
        headers: dict[str, str] = {}
        for name, value in scope["headers"]:  # ASGI's names are lower-case
            headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        try:  # what the route answers: `token`, and `oauth_error` for a refusal
            status, extra, answer = 200, _NO_STORE, _encode(await exchange(self.idp, token_form(headers, body)))
        except ApiError as exc:
            status, extra = exc.status, {**_NO_STORE, **exc.headers}
            answer = _encode(OAuthError(exc.code, exc.message))
        except Exception as exc:  # as the app's last resort does: the traceback to the log, not the client
            state_dir = self.idp.core.settings.state_dir
            failed = last_resort("POST", "/oauth2/token", exc, state_dir, SERVER_ERROR(_FAILED))
            status, extra = failed.status, failed.headers
            answer = _encode(RegistrationError(code=failed.code, message=failed.message, error=failed.code))
        await send_whole(send, status, raw_headers(extra), b"application/json", answer)


class RevokeForm(msgspec.Struct):
    """RFC 7009: an access or refresh token, an agent's or a `pxt login` session's."""

    token: Annotated[str, msgspec.Meta(min_length=1)]


@post(
    "/oauth2/revoke",
    status_code=200,
    operation_id="revoke",
    exception_handlers={ApiError: oauth_error},
    dependencies={"revocation": oauth_form(RevokeForm, {"token": lambda _: INVALID_REQUEST("token is required")})},
    responses={
        200: ResponseSpec(data_container=None, description="revoked, or not a token it knows: nothing follows"),
        **contract.errors(INVALID_REQUEST),
    },
)
async def revoke(request: Request[Any, Any, Any], revocation: NamedDependency[RevokeForm]) -> Response[bytes]:
    """An empty 200 whether or not the token was known (RFC 7009 §2.2)."""
    idp = idp_of(request)
    # a pxt login session's token, a person's refresh token (the authorization code grant's), or else an agent's
    if not await idp.logins.revoke(revocation.token) and not await idp.identity.authcodes.revoke(revocation.token):
        await idp.identity.revoke(revocation.token)
    return Response(b"", status_code=200, headers=_NO_STORE)


class AuthorizeForm(msgspec.Struct, kw_only=True):
    """The authorization request (OAuth 2.1 §4.1.1, RFC 7636, RFC 8707), as the sign-in page posts it back (hidden
    fields), with who signs in and the person's decision (denying needs no e-mail)."""

    response_type: str = ""
    client_id: str = ""
    redirect_uri: str = ""
    code_challenge: str = ""
    code_challenge_method: str = ""
    state: str = ""
    scope: str = ""
    resource: str = ""
    email: str = ""
    decision: Decision = "approve"


_REQUEST_FIELDS = (
    "response_type",
    "client_id",
    "redirect_uri",
    "code_challenge",
    "code_challenge_method",
    "state",
    "scope",
    "resource",
)


def _redirect(location: str) -> Response[str]:
    """303 to the client's redirect URI (a POST's answer is followed with a GET)."""
    return Response("", status_code=303, headers={"Location": location, **_NO_STORE}, media_type=MediaType.TEXT)


async def _checked(idp: Idp, form: AuthorizeForm) -> AuthRequest:
    return await idp.identity.authcodes.check_request(
        response_type=form.response_type,
        client_id=form.client_id,
        redirect_uri=form.redirect_uri,
        code_challenge=form.code_challenge,
        code_challenge_method=form.code_challenge_method,
        state=form.state,
        scope=form.scope,
        resource=form.resource,
    )


def _authorize_form(form: AuthorizeForm, ask: AuthRequest, error: str = "", status: int = 200) -> Response[str]:
    """The person's sign-in page for a client: who asks, for what, where the answer goes."""
    name = ask.client.client_name or ask.client.client_id
    rows = [
        ("Application", f"{html.escape(name)} (<code>{html.escape(ask.client.client_id)}</code>)"),
        ("Asks for", ", ".join(f"<code>{html.escape(s)}</code>" for s in ask.scope.split())),
        ("For", f"<code>{html.escape(ask.resource)}</code>"),
        ("Returns to", f"<code>{html.escape(ask.redirect_uri)}</code>"),
    ]
    fields = "".join(html.hidden(name, str(getattr(form, name))) for name in _REQUEST_FIELDS)
    body = (
        f"<p>{html.escape(name)} asks to act for you on your Pixeltable Cloud account.</p>"
        + html.facts(rows)
        + (html.error_box(error) if error else "")
        + "<p>Sign in to approve it; deny it if you did not start this (no sign-in needed).</p>"
        + f'<form method="post" action="/oauth2/authorize">{fields}'
        + html.email_input(form.email)
        + html.decision_buttons("Sign in and approve")
        + "</form>"
    )
    return html.page("Sign in to Pixeltable Cloud", body, status)


@get(
    "/oauth2/authorize",
    operation_id="authorize",
    media_type=MediaType.HTML,
    exception_handlers={ApiError: page_error},
    responses=contract.errors(INVALID_REQUEST, INVALID_CLIENT),
    description="The authorization code grant's sign-in page (PKCE S256); a request refused after its redirect URI "
    "is checked goes back to the client there (303).",
)
async def authorize(
    request: Request[Any, Any, Any],
    response_type: FromQuery[str] = "",
    client_id: FromQuery[str] = "",
    redirect_uri: FromQuery[str] = "",
    code_challenge: FromQuery[str] = "",
    code_challenge_method: FromQuery[str] = "",
    # `state` and `scope` are names Litestar reserves (its state, the ASGI scope)
    state_: Annotated[str, QueryParameter(name="state")] = "",
    scope_: Annotated[str, QueryParameter(name="scope")] = "",
    resource: FromQuery[str] = "",
) -> Response[str]:
    form = AuthorizeForm(
        response_type=response_type,
        client_id=client_id,
        redirect_uri=redirect_uri,
        code_challenge=code_challenge,
        code_challenge_method=code_challenge_method,
        state=state_,
        scope=scope_,
        resource=resource,
    )
    try:
        ask = await _checked(idp_of(request), form)
    except RedirectError as e:
        return _redirect(e.redirect)
    return _authorize_form(form, ask)


@post(
    "/oauth2/authorize",
    status_code=303,
    operation_id="decide_authorization",
    media_type=MediaType.HTML,
    exception_handlers={ApiError: page_error},
    dependencies={"form": page_form(AuthorizeForm)},
    responses=contract.errors(BAD_REQUEST, INVALID_REQUEST, INVALID_CLIENT),
)
async def authorize_decide(request: Request[Any, Any, Any], form: NamedDependency[AuthorizeForm]) -> Response[str]:
    """The person's decision: to the client's redirect URI with a code, or with error=access_denied."""
    idp = idp_of(request)
    try:
        ask = await _checked(idp, form)
    except RedirectError as e:
        return _redirect(e.redirect)
    codes = idp.identity.authcodes
    if form.decision == "deny":
        return _redirect(codes.deny(ask))
    email = form.email.strip()
    if not valid_email(email):
        return _authorize_form(form, ask, "Enter the e-mail address you sign in with.", 400)
    return _redirect(await codes.approve(ask, email))


# --- discovery ------------------------------------------------------------------------------------


@get("/.well-known/jwks.json", operation_id="jwks")
async def jwks(request: Request[Any, Any, Any]) -> Response[Jwks]:
    return Response(idp_of(request).identity.signer.jwks(), headers=_PUBLIC)


@get(
    ["/.well-known/oauth-authorization-server", "/.well-known/oauth-authorization-server/"],
    operation_id="authorization_server_metadata",
)
async def as_metadata(request: Request[Any, Any, Any]) -> Response[AuthorizationServer]:
    return Response(discovery.authorization_server(idp_of(request).identity), headers=_PUBLIC)


@get("/.well-known/openid-configuration", operation_id="openid_configuration")
async def oidc(request: Request[Any, Any, Any]) -> Response[OpenIdConfiguration]:
    return Response(discovery.openid_configuration(idp_of(request).identity), headers=_PUBLIC)


# --- the upstream identity provider the emulator also plays (identity/idjag.py) ----------------------------------


@get(f"{UPSTREAM_PATH}/.well-known/jwks.json", operation_id="upstream_jwks")
async def upstream_jwks(request: Request[Any, Any, Any]) -> Response[Jwks]:
    return Response(idp_of(request).identity.upstream.jwks(), headers=_PUBLIC)


@post(
    f"{UPSTREAM_PATH}/oauth2/token",
    status_code=200,
    operation_id="upstream_token_exchange",
    exception_handlers={ApiError: oauth_error},
    dependencies={"ask": oauth_form(TokenExchange)},
    responses=contract.errors(INVALID_REQUEST, UNSUPPORTED_GRANT_TYPE, INVALID_TARGET, INVALID_GRANT),
)
async def upstream_token(request: Request[Any, Any, Any], ask: NamedDependency[TokenExchange]) -> Response[Exchanged]:
    """RFC 8693 token exchange at the upstream: the person's ID token → an ID-JAG for this provider."""
    if not ask.subject_token:
        raise INVALID_REQUEST("subject_token is required (the person's ID token)")
    idp = idp_of(request)
    return Response(idp.identity.upstream.exchange(ask, idp.core.clock.now()), headers=_NO_STORE)


@get(f"{UPSTREAM_PATH}/.well-known/openid-configuration", operation_id="upstream_openid_configuration")
async def upstream_metadata(request: Request[Any, Any, Any]) -> Response[UpstreamConfiguration]:
    upstream = idp_of(request).identity.upstream
    return Response(discovery.upstream_configuration(upstream.issuer), headers=_PUBLIC)


@get(
    "/.well-known/oauth-protected-resource",
    status_code=404,
    operation_id="protected_resource_elsewhere",
    exception_handlers={ApiError: registration_error},
    description="A signpost: the resource metadata is the site's, so it refuses, naming where it is.",
)
async def wrong_host_prm(request: Request[Any, Any, Any]) -> None:
    site = idp_of(request).identity.urls.site
    raise NOT_FOUND(
        f"this is the identity provider; the resource metadata is at {site}/.well-known/oauth-protected-resource",
    )


# --- the person's verification page ---------------------------------------------------------------


def _closed_page(closed: Closed) -> Response[str]:
    return html.gone(
        closed.title,
        closed.text,
        "Nothing was changed. If you still want to link the agent to your account, ask it to start a new claim: "
        "it gets a new link.",
    )


async def _claim_form(
    request: Request[Any, Any, Any], attempt: OpenAttempt, token: str, email: str, error: str = "", status: int = 200
) -> Response[str]:
    """The decision form: which agent asks, for what, until when; `error` says what was wrong with a post."""
    idp = idp_of(request)
    reg = await idp.core.store.fetchone(
        "SELECT id, type, login_hint, client_ip, created_at FROM registrations WHERE id = ?",
        (attempt.registration_id,),
    )
    kind = attempt.registration_type
    kind_text = "anonymous agent" if kind == RegType.ANONYMOUS else f"agent signing in for {attempt.login_hint or ''}"
    added = [s for s in POST_CLAIM_SCOPES if kind != RegType.ANONYMOUS or s not in PRE_CLAIM_SCOPES]
    rows = [
        ("Agent", f"<code>{html.escape(attempt.registration_id)}</code>"),
        ("Kind", f"{html.escape(kind)} ({html.escape(kind_text)})"),
    ]
    if reg is not None:
        origin = f" from {html.escape(reg['client_ip'])}" if reg["client_ip"] else ""
        rows.append(("Registered", f"{html.when(reg['created_at'])}{origin}"))
    rows += [
        ("Asks for", "access to your account: " + ", ".join(f"<code>{html.escape(s)}</code>" for s in added)),
        ("Link valid until", html.when(attempt.expires_at)),
    ]
    hint = attempt.login_hint
    body = (
        "<p>An AI agent asks to be linked to your Pixeltable account.</p>"
        + html.facts(rows)
        + (html.error_box(error) if error else "")
        + "<p>Sign in to approve it: this page then shows a 6-digit code once, to read to the agent. To refuse it, "
        "deny it (no sign-in needed).</p>"
        + (f'<p class="note">This claim is for {html.escape(hint)}.</p>' if hint else "")
        + f'<form method="post" action="/claim">{html.hidden("token", token)}'
        + html.email_input(email)
        + html.decision_buttons("Approve and show the code")
        + "</form>"
    )
    return html.page("Claim an agent", body, status)


class ClaimPageForm(msgspec.Struct, kw_only=True):
    """The claim page's form: its link's token (a hidden field), who signs in, and the person's decision (denying
    needs no e-mail)."""

    token: str = ""
    email: str = ""
    decision: Decision = "approve"


@get(
    CLAIM_PAGE,
    operation_id="claim_page",
    media_type=MediaType.HTML,
    exception_handlers={ApiError: page_error},
    responses=contract.errors(BAD_REQUEST, NOT_FOUND, GONE),
)
async def claim_page(request: Request[Any, Any, Any], token: FromQuery[str] = "") -> Response[str]:
    idp = idp_of(request)
    attempt = await idp.identity.attempt_for(token=token or None)
    closed = why_closed(attempt, idp.core.clock.now(), html.readable)
    if closed is not None:
        return _closed_page(closed)
    return await _claim_form(request, attempt, token, attempt.login_hint or "")


@post(
    "/claim",
    status_code=200,
    operation_id="decide_claim",
    media_type=MediaType.HTML,
    exception_handlers={ApiError: page_error},
    dependencies={"form": page_form(ClaimPageForm)},
    responses=contract.errors(BAD_REQUEST, FORBIDDEN, NOT_FOUND, GONE),
)
async def claim_decide(request: Request[Any, Any, Any], form: NamedDependency[ClaimPageForm]) -> Response[str]:
    email, token = form.email, form.token
    idp = idp_of(request)
    attempt = await idp.identity.attempt_for(token=token or None)
    closed = why_closed(attempt, idp.core.clock.now(), html.readable)
    if closed is not None:
        return _closed_page(closed)
    try:
        code = await idp.identity.decide(attempt, email, form.decision != "deny")
    except ApiError as e:
        if e.status not in (400, 403):  # the link's state changed meanwhile: its own page
            raise
        return await _claim_form(request, attempt, token, email, e.message, e.status)
    if code is None:
        return html.page("Claim denied", "<p>The agent is not linked to your account. You can close this page.</p>")
    decided = await idp.identity.attempt_for(token=token)
    until = decided.code_expires_at or decided.expires_at
    return html.page(
        "Read this code to the agent",
        f"<p>Signed in as {html.escape(email.strip())}. Give the agent this code:</p>"
        f'<code class="usercode">{html.escape(code)}</code>'
        f'<p class="note">It is shown once and works until {html.when(until)}.</p>',
    )


@route(
    "/",
    http_method=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"],
    exception_handlers={ApiError: registration_error},
    include_in_schema=False,
)
async def index(
    request: Request[Any, Any, Any],
    accept: Annotated[str, HeaderParameter(name="accept", include_in_schema=False)] = "",
) -> Response[str]:
    """Nothing is served at `/`: a browser gets a page that says so, other clients the usual JSON 404."""
    if request.method not in ("GET", "HEAD") or "text/html" not in accept:
        raise NOT_FOUND("nothing is served at /")
    return html.page(
        "Pixeltable Cloud sign-in",
        "<p>This is the emulator's identity provider. There is no page to see here: you arrive on its pages "
        "from a link an agent gives you (to claim it) or from <code>pxt login</code>.</p>",
        404,
    )


@get("/favicon.ico", include_in_schema=False)
async def favicon() -> Response[bytes]:
    return html.favicon()


HANDLERS = [
    register,
    start_claim,
    complete_claim,
    old_paths,
    token,
    revoke,
    authorize,
    authorize_decide,
    jwks,
    as_metadata,
    oidc,
    upstream_jwks,
    upstream_metadata,
    upstream_token,
    wrong_host_prm,
    claim_page,
    claim_decide,
    index,
    favicon,
]


def boundary_error(exc: ApiError) -> tuple[bytes, bytes]:
    """A boundary refusal in the identity provider's error format."""
    return b"application/json", _encode({"code": exc.code, "message": exc.message, "error": exc.code})


def oauth_bytes(exc: ApiError) -> tuple[bytes, bytes]:
    """A refusal in OAuth's error format (RFC 6749 §5.2), as the OAuth endpoints' own handlers answer."""
    return b"application/json", _encode(OAuthError(exc.code, exc.message))


def gate_render() -> Render:
    """How the gates before the router (the boundary's, the faults') answer on each path: in OAuth's format where
    the route answers its errors so (read off the routes' own exception handlers), else in the provider's."""
    oauth = (oauth_error, login.oauth_error)
    special = {
        path: oauth_bytes
        for handler in (*HANDLERS, *login.HANDLERS)
        if (handler.exception_handlers or {}).get(ApiError) in oauth
        for path in handler.paths
    }
    return by_path(boundary_error, special)


def build_idp_app(idp: Idp, boundary: Boundary) -> BoundaryGate:
    app = App(
        route_handlers=[*HANDLERS, *login.HANDLERS, agents.router()],
        exception_handlers={HTTPException: http_error, ApiError: registration_error, Exception: internal_error},
        state=State({"idp": idp}),
        request_max_body_size=idp.core.settings.http_max_body_bytes,
        openapi_config=openapi.openapi_config(
            "Pixeltable Cloud emulator: identity provider",
            "Agent registration and claims, OAuth token and revocation, discovery, pxt login.",
            errors=[REGISTRATION, OAUTH, PAGE, agents.WORKOS],
        ),
        logging_config=None,
        debug=False,
    )
    render = gate_render()
    faulted = FaultGate(TokenFastPath(app, idp), "auth", idp.core.faults, render)
    return BoundaryGate(faulted, boundary, render)
