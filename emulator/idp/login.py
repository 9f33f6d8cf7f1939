"""`pxt login` on the identity provider's origin: the device-authorization endpoints and the person's page, over
the sign-in rules in `emulator.hosted.logins`."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from litestar import Request, Response, get, post

from emulator.core import html, openapi
from emulator.core.errors import INVALID_CLIENT, UNSUPPORTED_GRANT_TYPE, ApiError
from emulator.hosted.logins import CLIENT_ID, DeviceCode, Logins, Session


class DeviceAuthorization(msgspec.Struct):
    client_id: str


class Authentication(msgspec.Struct):
    """Poll with the device code, or refresh a session (optionally into another organization)."""

    grant_type: Literal["urn:ietf:params:oauth:grant-type:device_code", "refresh_token"]
    client_id: str
    device_code: str | None = None
    refresh_token: str | None = None
    organization_id: str | None = None


class DeviceForm(msgspec.Struct):
    user_code: str
    email: str
    decision: Literal["approve", "deny"] = "approve"


def _logins(request: Request[Any, Any, Any]) -> Logins:
    return request.app.state["idp"].logins


def oauth_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[dict[str, str]]:
    return Response(
        {"error": exc.code, "error_description": exc.message},
        status_code=exc.status,
        headers={"Cache-Control": "no-store"},
    )


@post(
    "/user_management/authorize/device",
    status_code=200,
    exception_handlers={ApiError: oauth_error},
    opt=openapi.body(DeviceAuthorization, openapi.FORM),
)
async def authorize_device(request: Request[Any, Any, Any]) -> DeviceCode:
    form = html.form_fields(await request.body())
    if form.get("client_id") != CLIENT_ID:
        raise INVALID_CLIENT(f"unknown client_id; this sign-in service serves {CLIENT_ID}")
    return await _logins(request).start(form["client_id"])


@post(
    "/user_management/authenticate",
    status_code=200,
    exception_handlers={ApiError: oauth_error},
    opt=openapi.body(Authentication, openapi.FORM),
)
async def authenticate(request: Request[Any, Any, Any]) -> Response[Session]:
    form = html.form_fields(await request.body())
    grant = form.get("grant_type", "")
    logins = _logins(request)
    if grant == "urn:ietf:params:oauth:grant-type:device_code":
        answer = await logins.poll(form.get("device_code", ""), form.get("client_id", ""))
    elif grant == "refresh_token":
        answer = await logins.refresh(
            form.get("refresh_token", ""), form.get("client_id", ""), form.get("organization_id") or None
        )
    else:
        raise UNSUPPORTED_GRANT_TYPE("grant_type must be device_code or refresh_token")
    return Response(answer, headers={"Cache-Control": "no-store"})


def _page_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[str]:
    return html.page("This sign-in cannot go on", html.error_box(exc.message), exc.status)


def _closed(row: Any, now: float) -> Response[str] | None:
    """The page of a code that no longer takes a decision (used or expired), or None while it does."""
    if row["state"] != "pending":
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


@get("/device", exception_handlers={ApiError: _page_error})
async def device_page(request: Request[Any, Any, Any], user_code: str = "") -> Response[str]:
    logins = _logins(request)
    row = await logins.lookup(user_code) if user_code else None
    if row is not None:
        closed = _closed(row, logins.core.clock.now())
        return closed if closed is not None else _device_form(row, user_code)
    error = f"No sign-in is waiting for the code {user_code}: check it, or run pxt login again." if user_code else ""
    return _device_form(None, user_code, error=error, status=404 if user_code else 200)


@post(
    "/device", status_code=200, exception_handlers={ApiError: _page_error}, opt=openapi.body(DeviceForm, openapi.FORM)
)
async def device_decide(request: Request[Any, Any, Any]) -> Response[str]:
    form = html.form_fields(await request.body())
    approve = html.approved(form)
    logins = _logins(request)
    user_code, email = form.get("user_code", ""), form.get("email", "")
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
