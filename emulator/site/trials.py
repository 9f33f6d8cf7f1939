"""`POST /api/v1/trial-orgs` and the trial's claim page, over the platform's trials (emulator.hosted.trials).

Refusals are `Message` bodies with the statuses of the spec; checks run in the order 401, 403, 409, 503, 429.
"""

from __future__ import annotations

from html import escape
from typing import Any

import msgspec
from litestar import Request, Response, get, post

from emulator.core import html, openapi
from emulator.core.clock import iso
from emulator.core.errors import ApiError
from emulator.hosted import plans, trials
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
    """The form a person posts on a trial's claim page."""

    email: str


class Message(msgspec.Struct):
    message: str


def message_error(request: Request[Any, Any, Any], exc: ApiError) -> Response[bytes]:
    headers = dict(exc.headers)
    if exc.status == 401:
        site = site_of(request)
        detail = f', error="invalid_token", error_description="{exc.message}"' if exc.code == "invalid_token" else ""
        headers["WWW-Authenticate"] = (
            f'Bearer resource_metadata="{site.base_url}/.well-known/oauth-protected-resource"{detail}'
        )
    return Response(
        _encode(Message(exc.message)), status_code=exc.status, media_type="application/json", headers=headers
    )


@post(
    "/api/v1/trial-orgs",
    status_code=201,
    exception_handlers={ApiError: message_error},
    security=[{"bearer": []}],
)
async def create_trial(request: Request[Any, Any, Any]) -> Response[bytes]:
    site = site_of(request)
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(
            401,
            "unauthorized",
            "a bearer token is required: register at the issuer named in /.well-known/oauth-protected-resource "
            "(type anonymous), exchange the assertion at /oauth2/token, and send Authorization: Bearer <token>",
        )
    grant = await site.identity.verify_access(token.strip())
    if grant.registration_type != "anonymous":
        raise ApiError(401, "invalid_token", "trials are for anonymous registrations; this token is not one")
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
    return Response(
        _encode(trial), status_code=201, media_type="application/json", headers={"Cache-Control": "no-store"}
    )


def _page_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[str]:
    return html.page("This trial cannot be claimed", f'<p class="error">{escape(exc.message)}</p>', exc.status)


@get("/claim/{token:str}", exception_handlers={ApiError: _page_error})
async def claim_page(request: Request[Any, Any, Any], token: str) -> Response[str]:
    org = await trials.by_claim_token(site_of(request).core, token)
    body = (
        f"<p>An agent created the Pixeltable Cloud trial <strong>{escape(org.slug)}</strong>. "
        f"Unless someone claims it, it is deleted at {iso(org.expires_at or 0)}.</p>"
        "<p>Sign in or sign up to become its admin:</p>"
        f'<form method="post" action="/claim/{escape(token)}"><p>{html.email_input()}</p>'
        "<p><button>Claim this organization</button></p></form>"
    )
    return html.page(f"Claim {org.slug}", body)


@post(
    "/claim/{token:str}",
    status_code=200,
    exception_handlers={ApiError: _page_error},
    opt=openapi.body(ClaimForm, openapi.FORM),
)
async def claim_submit(request: Request[Any, Any, Any], token: str) -> Response[str]:
    site = site_of(request)
    org = await trials.by_claim_token(site.core, token)
    email = html.form_fields(await request.body()).get("email", "")
    slug = await trials.claim(site.core, site.identity, org.id, email)
    return html.page(
        f"You own {slug}",
        f"<p>Signed in as {escape(email.strip())}. You are the admin of <strong>{escape(slug)}</strong>; it no "
        "longer expires. Run <code>pxt login</code> to work in it.</p>",
    )


HANDLERS = [create_trial, claim_page, claim_submit]
