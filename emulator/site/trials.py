"""`POST /api/v1/trial-orgs` and the trial's claim page, over the platform's trials (emulator.hosted.trials).

Refusals are `Message` bodies with the statuses of the spec; checks run in the order 401, 403, 409, 503, 429.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, HeaderParameter

from emulator.core import html, openapi
from emulator.core.clock import iso
from emulator.core.contract import body, error_shape, errors
from emulator.core.errors import (
    BAD_REQUEST,
    CONFLICT,
    FORBIDDEN,
    INVALID_TOKEN,
    NOT_FOUND,
    RATE_LIMITED,
    UNAUTHORIZED,
    UNAVAILABLE,
    ApiError,
)
from emulator.hosted import plans, trials
from emulator.hosted.records import Org
from emulator.hosted.states import OrgState
from emulator.identity.states import RegType
from emulator.site.state import site_of

_encode = msgspec.json.Encoder().encode


class TrialOrg(msgspec.Struct):
    org: str
    org_id: str
    db: str
    api_key: str
    api_url: str
    claim_url: str
    expires_at: str


class ClaimForm(msgspec.Struct):
    """The form a person posts on a trial's claim page (a missing e-mail reads as empty: the page asks again)."""

    email: str = ""


def _read_claim_form(raw: bytes) -> ClaimForm:
    return ClaimForm(html.form_fields(raw).get("email", ""))


class Message(msgspec.Struct):
    message: str


def message_bytes(exc: ApiError) -> tuple[bytes, bytes]:
    """A refusal in the trial endpoint's format (`{"message"}`), as its gates answer it too."""
    return b"application/json", _encode(Message(exc.message))


def message_error(request: Request[Any, Any, Any], exc: ApiError) -> Response[bytes]:
    headers = dict(exc.headers)
    if exc.status == 401:
        site = site_of(request)
        detail = f', error="invalid_token", error_description="{exc.message}"' if exc.code == "invalid_token" else ""
        headers["WWW-Authenticate"] = (
            f'Bearer resource_metadata="{site.base_url}/.well-known/oauth-protected-resource"{detail}'
        )
    return Response(message_bytes(exc)[1], status_code=exc.status, media_type="application/json", headers=headers)


# The trial endpoint's refusals as the OpenAPI document shows them.
REFUSAL = error_shape(
    Message,
    message_error,
    headers={"WWW-Authenticate": "on a 401: Bearer, with the resource metadata's URL"},
    description="a refusal, as the trial spec words it",
)


@post(
    "/api/v1/trial-orgs",
    status_code=201,
    exception_handlers={ApiError: message_error},
    security=[{"bearer": []}],
    responses=errors(UNAUTHORIZED, INVALID_TOKEN, FORBIDDEN, CONFLICT, UNAVAILABLE, RATE_LIMITED),
)
async def create_trial(
    request: Request[Any, Any, Any],
    # the bearer scheme of `security` says it in the document; a missing one is this endpoint's own 401
    authorization: Annotated[str, HeaderParameter(name="authorization", include_in_schema=False)] = "",
) -> Response[TrialOrg]:
    site = site_of(request)
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise UNAUTHORIZED(
            "a bearer token is required: register at the issuer named in /.well-known/oauth-protected-resource "
            "(type anonymous), exchange the assertion at /oauth2/token, and send Authorization: Bearer <token>",
        )
    grant = await site.identity.verify_access(token.strip())
    if grant.registration_type != RegType.ANONYMOUS:
        raise INVALID_TOKEN("trials are for anonymous registrations; this token is not one")
    made = await trials.create(site.core, grant.registration_id, site.client_ip(request))
    trial = TrialOrg(
        org=made.org,
        org_id=made.org_id,
        db=plans.DEFAULT_DB,
        api_key=made.api_key,
        api_url=site.identity.urls.api,
        claim_url=f"{site.base_url}/claim/{made.claim_token}",
        expires_at=iso(made.expires_at),
    )
    return Response(trial, status_code=201, headers={"Cache-Control": "no-store"})


def _page_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[str]:
    return html.page("This trial cannot be claimed", html.error_box(exc.message), exc.status)


# The claim page's refusals: an HTML page saying why.
PAGE_REFUSAL = error_shape(str, _page_error, media_type=html.HTML_TYPE, description="a page saying why")
# The claim page and what its form's post answers: HTML for a person.
_PAGE = openapi.custom_answer(openapi.Body({html.HTML_TYPE: openapi.MediaType(schema={"type": "string"})}))


def _claim_form(org: Org, token: str, email: str = "", error: str = "", status: int = 200) -> Response[str]:
    rows = [("Organization", f"<strong>{html.escape(org.slug)}</strong>")]
    if org.registration_id:
        rows.append(("Created by", f"agent <code>{html.escape(org.registration_id)}</code>"))
    rows += [
        ("Created", html.when(org.created_at)),
        ("Deleted at", html.when(org.expires_at or 0) + " unless someone claims it"),
    ]
    body = (
        "<p>An agent created this Pixeltable Cloud trial. Sign in or sign up to become its admin; "
        "a claimed trial no longer expires.</p>"
        + html.facts(rows)
        + (html.error_box(error) if error else "")
        + f'<form method="post" action="/claim/{html.escape(token)}">'
        + html.email_input(email)
        + '<div class="actions"><button>Claim this organization</button></div></form>'
    )
    return html.page(f"Claim {org.slug}", body, status)


@get(
    "/claim/{token:str}",
    media_type=html.HTML_TYPE,
    exception_handlers={ApiError: _page_error},
    responses=errors(NOT_FOUND),
    opt=_PAGE,
)
async def claim_page(request: Request[Any, Any, Any], token: FromPath[str]) -> Response[str]:
    core = site_of(request).core
    org = await trials.by_claim_token(core, token)
    if org.state == OrgState.UNCLAIMED and (org.expires_at or 0) <= core.clock.now():  # its deletion is due
        raise NOT_FOUND(f"this trial expired at {html.readable(org.expires_at or 0)}")
    return _claim_form(org, token)


@post(
    "/claim/{token:str}",
    status_code=200,
    media_type=html.HTML_TYPE,
    exception_handlers={ApiError: _page_error},
    dependencies={"form": body(ClaimForm, _read_claim_form, openapi.FORM)},
    responses=errors(BAD_REQUEST, NOT_FOUND, CONFLICT),
    opt=_PAGE,
)
async def claim_submit(
    request: Request[Any, Any, Any], token: FromPath[str], form: NamedDependency[ClaimForm]
) -> Response[str]:
    site = site_of(request)
    org = await trials.by_claim_token(site.core, token)
    email = form.email
    try:
        slug = await trials.claim(site.core, site.identity, org.id, email)
    except ApiError as e:
        if e.status != 400:  # claimed or deleted meanwhile: its own page
            raise
        return _claim_form(org, token, email, e.message, e.status)
    return html.page(
        f"You own {slug}",
        f"<p>Signed in as {html.escape(email.strip())}. You are the admin of <strong>{html.escape(slug)}</strong>; "
        "it no longer expires. Run <code>pxt login</code> to work in it.</p>",
    )


HANDLERS = [create_trial, claim_page, claim_submit]
