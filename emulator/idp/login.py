"""`pxt login` on the identity provider's origin: the device-authorization endpoints and the person's page, over
the sign-in rules in `emulator.hosted.logins`."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from litestar import MediaType, Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromQuery

from emulator.core import contract, html
from emulator.core.errors import (
    ACCESS_DENIED,
    AUTHORIZATION_PENDING,
    BAD_REQUEST,
    EXPIRED_TOKEN,
    GONE,
    INVALID_CLIENT,
    INVALID_GRANT,
    NOT_FOUND,
    UNSUPPORTED_GRANT_TYPE,
    ApiError,
)
from emulator.hosted.logins import CLIENT_ID, DeviceCode, Logins, Session
from emulator.hosted.states import LoginState
from emulator.idp.forms import Decision, OAuthError, page_form

DEVICE_CODE = "urn:ietf:params:oauth:grant-type:device_code"
_encode = msgspec.json.Encoder().encode


class DeviceAuthorization(msgspec.Struct):
    client_id: str  # this service's one client, CLIENT_ID


class Authentication(msgspec.Struct, kw_only=True):
    """Poll with the device code, or refresh a session (optionally into another organization)."""

    grant_type: Literal["urn:ietf:params:oauth:grant-type:device_code", "refresh_token"]
    client_id: str = ""  # a poll's must be its device code's; a refresh does not read it
    device_code: str | None = None
    refresh_token: str | None = None
    organization_id: str | None = None


class DeviceForm(msgspec.Struct, kw_only=True):
    """The sign-in page's form: the code `pxt login` shows, who signs in, and the decision (denying needs no
    e-mail)."""

    user_code: str = ""
    email: str = ""
    decision: Decision = "approve"


def _logins(request: Request[Any, Any, Any]) -> Logins:
    return request.app.state["idp"].logins


def oauth_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[bytes]:
    return Response(
        _encode(OAuthError(exc.code, exc.message)),
        status_code=exc.status,
        media_type=MediaType.JSON,
        headers={"Cache-Control": "no-store"},
    )


def _unknown_client(_: object) -> ApiError:
    return INVALID_CLIENT(f"unknown client_id; this sign-in service serves {CLIENT_ID}")


@post(
    "/user_management/authorize/device",
    status_code=200,
    operation_id="start_device_authorization",
    exception_handlers={ApiError: oauth_error},
    dependencies={"ask": page_form(DeviceAuthorization, {"client_id": _unknown_client})},
    responses=contract.errors(INVALID_CLIENT),
)
async def authorize_device(request: Request[Any, Any, Any], ask: NamedDependency[DeviceAuthorization]) -> DeviceCode:
    if ask.client_id != CLIENT_ID:
        raise _unknown_client(ask.client_id)
    return await _logins(request).start(ask.client_id)


def _grant_refused(_: object) -> ApiError:
    return UNSUPPORTED_GRANT_TYPE("grant_type must be device_code or refresh_token")


@post(
    "/user_management/authenticate",
    status_code=200,
    operation_id="authenticate",
    exception_handlers={ApiError: oauth_error},
    dependencies={"grant": page_form(Authentication, {"grant_type": _grant_refused})},
    responses=contract.errors(
        UNSUPPORTED_GRANT_TYPE, INVALID_GRANT, AUTHORIZATION_PENDING, ACCESS_DENIED, EXPIRED_TOKEN
    ),
)
async def authenticate(request: Request[Any, Any, Any], grant: NamedDependency[Authentication]) -> Response[Session]:
    logins = _logins(request)
    if grant.grant_type == DEVICE_CODE:
        answer = await logins.poll(grant.device_code or "", grant.client_id)
    else:
        answer = await logins.refresh(grant.refresh_token or "", grant.client_id, grant.organization_id or None)
    return Response(answer, headers={"Cache-Control": "no-store"})


def page_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[str]:
    return html.page("This sign-in cannot go on", html.error_box(exc.message), exc.status)


def _closed(row: Any, now: float) -> Response[str] | None:
    """The page of a code that no longer takes a decision (used or expired), or None while it does."""
    if row["state"] != LoginState.PENDING:
        title, text = "This sign-in code was already used", f"The code {row['user_code']} works once."
    elif row["expires_at"] <= now:
        title, text = "This sign-in code expired", f"It was valid until {html.readable(row['expires_at'])}."
    else:
        return None
    return html.gone(title, text, "Run <code>pxt login</code> again for a new code.")


def _device_form(row: Any, user_code: str, email: str = "", error: str = "", status: int = 200) -> Response[str]:
    """The sign-in form; with the sign-in's details once its code is known."""
    details = ""
    if row is not None:
        details = html.facts(
            [
                ("Code", f"<code>{html.escape(row['user_code'])}</code>"),
                ("Asked by", f"<code>{html.escape(row['client_id'])}</code> (<code>pxt login</code>)"),
                ("Started", html.when(row["created_at"])),
                ("Code valid until", html.when(row["expires_at"])),
            ]
        )
    body = (
        "<p>Confirm that this code matches the one <code>pxt login</code> shows, then sign in.</p>"
        + details
        + (html.error_box(error) if error else "")
        + '<form method="post" action="/device">'
        + '<label>Code <input name="user_code" required autocomplete="off" spellcheck="false" '
        + f'value="{html.escape(user_code)}"></label>'
        + html.email_input(email)
        + html.decision_buttons("Sign in")
        + "</form>"
    )
    return html.page("Sign in to Pixeltable Cloud", body, status)


@get("/device", operation_id="device_page", media_type=MediaType.HTML, exception_handlers={ApiError: page_error})
async def device_page(request: Request[Any, Any, Any], user_code: FromQuery[str] = "") -> Response[str]:
    logins = _logins(request)
    row = await logins.lookup(user_code) if user_code else None
    if row is not None:
        closed = _closed(row, logins.core.clock.now())
        return closed if closed is not None else _device_form(row, user_code)
    error = f"No sign-in is waiting for the code {user_code}: check it, or run pxt login again." if user_code else ""
    return _device_form(None, user_code, error=error, status=404 if user_code else 200)


@post(
    "/device",
    status_code=200,
    operation_id="decide_device",
    media_type=MediaType.HTML,
    exception_handlers={ApiError: page_error},
    dependencies={"form": page_form(DeviceForm)},
    responses=contract.errors(BAD_REQUEST, NOT_FOUND, GONE),
)
async def device_decide(request: Request[Any, Any, Any], form: NamedDependency[DeviceForm]) -> Response[str]:
    approve = form.decision != "deny"
    logins = _logins(request)
    user_code, email = form.user_code, form.email
    row = await logins.lookup(user_code)
    if row is not None and (closed := _closed(row, logins.core.clock.now())) is not None:
        return closed
    try:
        await logins.decide(row["user_code"] if row is not None else user_code, email, approve)
    except ApiError as e:
        if e.status not in (400, 404):  # expired meanwhile: its own page
            raise
        return _device_form(row, user_code, email, e.message, e.status)
    if not approve:
        return html.page("Sign-in denied", "<p><code>pxt login</code> will stop. You can close this page.</p>")
    return html.page("You are signed in", f"<p>Signed in as {html.escape(email.strip())}. Return to your terminal.</p>")


HANDLERS = [authorize_device, authenticate, device_page, device_decide]
