"""`pxt login`: a device-authorization sign-in (RFC 8628 style, the WorkOS user-management shape).

The control plane's `/.well-known/pixeltable-auth` names this origin as `workos_api`. The client
starts with `POST /user_management/authorize/device`, shows the person the user code and the
verification page, and polls `POST /user_management/authenticate` until the person approves (page, or
`emulator approve-login`). The session it gets is an ES256 access token (audience: the control plane;
claims `sub`, `email`, `org_id`, `sid`, `exp` on the emulator's clock) and a rotating refresh token;
a refresh with `organization_id` rescopes the session to another organization of the person.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from litestar import Request, Response, get, post

from emulator.core import html, openapi
from emulator.core.errors import ApiError
from emulator.core.ids import secret_hash
from emulator.core.kinds import Kind
from emulator.hosted import orgs
from emulator.idp.identity import Identity, valid_email
from emulator.idp.keys import ACCESS_TOKEN_TYP, InvalidToken

CLIENT_ID = "client_pxt_emulator"
DEVICE_CODE_TTL = 600
POLL_INTERVAL = 2
SESSION_TOKEN_TTL = 3600
SESSION_REFRESH_TTL = 30 * 86400
_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"  # no vowels: no words


class Logins:
    def __init__(self, identity: Identity) -> None:
        self.identity = identity
        self.core = identity.core

    def _user_code(self) -> str:
        n = int(self.core.ids.digits(12))
        chars = [_CODE_ALPHABET[(n // 20**i) % 20] for i in range(8)]
        return "".join(chars[:4]) + "-" + "".join(chars[4:])

    async def start(self, client_id: str) -> dict[str, Any]:
        now = self.core.clock.now()
        device_code = self.core.ids.token("dev_", 24)
        user_code = self._user_code()
        await self.core.store.execute(
            "INSERT INTO device_logins (device_code_hash, user_code, client_id, state, expires_at, created_at) "
            "VALUES (?, ?, ?, 'pending', ?, ?)",
            (secret_hash(device_code), user_code, client_id, now + DEVICE_CODE_TTL, now),
        )
        uri = f"{self.identity.urls.auth}/device"
        self.core.bus.publish(Kind.IDP_LOGIN_STARTED, user_code)
        return {
            "device_code": device_code,
            "user_code": user_code,
            "verification_uri": uri,
            "verification_uri_complete": f"{uri}?user_code={user_code}",
            "interval": POLL_INTERVAL,
            "expires_in": DEVICE_CODE_TTL,
        }

    async def lookup(self, user_code: str) -> Any:
        """The sign-in shown with `user_code` (any state), or None."""
        return await self.core.store.fetchone(
            "SELECT * FROM device_logins WHERE user_code = ?", (user_code.strip().upper(),)
        )

    async def decide(self, user_code: str, email: str, approve: bool) -> None:
        """The person, signed in as `email`, approves or denies the sign-in shown with `user_code` (denying needs
        no e-mail)."""
        email = email.strip()
        if (approve or email) and not valid_email(email):
            raise ApiError(400, "bad_request", "sign in with an e-mail address")
        row = await self.core.store.fetchone("SELECT * FROM device_logins WHERE user_code = ?", (user_code.upper(),))
        if row is None or row["state"] != "pending":
            raise ApiError(404, "not_found", f"no sign-in is waiting for the code {user_code}")
        if row["expires_at"] <= self.core.clock.now():
            raise ApiError(410, "not_found", "this sign-in code has expired; run pxt login again")
        async with self.core.store.transaction() as conn:
            if email:
                await self.identity.ensure_user(conn, email, self.core.clock.now())
            await conn.execute(
                "UPDATE device_logins SET state = ?, email = ? WHERE user_code = ?",
                ("approved" if approve else "denied", email or None, row["user_code"]),
            )
        self.core.bus.publish(
            Kind.IDP_LOGIN_APPROVED if approve else Kind.IDP_LOGIN_DENIED, row["user_code"], email=email or None
        )

    async def poll(self, device_code: str, client_id: str) -> dict[str, Any]:
        row = await self.core.store.fetchone(
            "SELECT * FROM device_logins WHERE device_code_hash = ?", (secret_hash(device_code),)
        )
        if row is None or row["client_id"] != client_id:
            raise ApiError(400, "invalid_grant", "unknown device code")
        if row["state"] == "redeemed":
            raise ApiError(400, "invalid_grant", "this device code was already used")
        if row["expires_at"] <= self.core.clock.now():
            raise ApiError(400, "expired_token", "the sign-in code expired; run pxt login again")
        if row["state"] == "denied":
            raise ApiError(400, "access_denied", "the person denied the sign-in")
        if row["state"] == "pending":
            raise ApiError(400, "authorization_pending", "waiting for the person to approve the sign-in")
        await self.core.store.execute(
            "UPDATE device_logins SET state = 'redeemed' WHERE device_code_hash = ?", (row["device_code_hash"],)
        )
        user = await self.core.store.fetchone("SELECT * FROM users WHERE email = ?", (row["email"],))
        if user is None:  # an approval always creates the person first
            raise ApiError(400, "invalid_grant", "the person who approved this sign-in no longer exists")
        member_of = await orgs.memberships(self.core.store, user["id"])
        org_id = member_of[0] if len(member_of) == 1 else None
        return await self._session(user, org_id, None)

    async def refresh(self, refresh_token: str, client_id: str, organization_id: str | None) -> dict[str, Any]:
        now = self.core.clock.now()
        row = await self.core.store.fetchone(
            "SELECT s.*, u.email FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.refresh_token_hash = ?",
            (secret_hash(refresh_token),),
        )
        if row is None or row["revoked_at"] is not None or row["refresh_expires_at"] <= now:
            raise ApiError(400, "invalid_grant", "the session is not valid; run pxt login again")
        org_id = row["org_id"]
        if organization_id:
            if organization_id not in await orgs.memberships(self.core.store, row["user_id"]):
                raise ApiError(400, "invalid_grant", f"{row['email']} is not a member of {organization_id}")
            org_id = organization_id
        user = await self.core.store.fetchone("SELECT * FROM users WHERE id = ?", (row["user_id"],))
        return await self._session(user, org_id, row["id"])

    async def revoke(self, token: str) -> bool:
        """RFC 7009 for `pxt login` sessions: a session's access token or refresh token ends the whole session
        (its tokens stop working at once: the control plane checks the session on every call)."""
        now = self.core.clock.now()
        try:
            typ, claims = self.identity.signer.verify(token)
        except InvalidToken:
            sid = None
        else:
            sid = claims.get("sid") if typ == ACCESS_TOKEN_TYP else None
        if sid is not None:
            where, arg = "id = ?", str(sid)
        else:
            where, arg = "refresh_token_hash = ?", secret_hash(token)
        row = await self.core.store.fetchone(f"SELECT id FROM sessions WHERE {where} AND revoked_at IS NULL", (arg,))
        if row is None:
            return False
        await self.core.store.execute("UPDATE sessions SET revoked_at = ? WHERE id = ?", (now, row["id"]))
        self.core.bus.publish(Kind.IDP_TOKEN_REVOKED, row["id"], token_type="session")
        return True

    async def _session(self, user: Any, org_id: str | None, sid: str | None) -> dict[str, Any]:
        """Issue an access token and a fresh refresh token (the old one, if any, is spent)."""
        now = self.core.clock.now()
        refresh = self.core.ids.token("rt_", 24)
        async with self.core.store.transaction() as conn:
            if sid is None:
                sid = self.core.ids.ident("session_")
                await conn.execute(
                    "INSERT INTO sessions (id, user_id, org_id, refresh_token_hash, refresh_expires_at, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (sid, user["id"], org_id, secret_hash(refresh), now + SESSION_REFRESH_TTL, now),
                )
            else:
                await conn.execute(
                    "UPDATE sessions SET org_id = ?, refresh_token_hash = ?, refresh_expires_at = ? WHERE id = ?",
                    (org_id, secret_hash(refresh), now + SESSION_REFRESH_TTL, sid),
                )
        token = self.identity.signer.sign(
            ACCESS_TOKEN_TYP,
            {
                "iss": self.identity.urls.auth,
                "aud": self.identity.urls.api,
                "sub": user["id"],
                "email": user["email"],
                "org_id": org_id,
                "sid": sid,
                "iat": int(now),
                "exp": int(now + SESSION_TOKEN_TTL),
            },
        )
        self.core.bus.publish(Kind.IDP_SESSION, sid, email=user["email"], org_id=org_id)
        return {
            "access_token": token,
            "refresh_token": refresh,
            "user": {"id": user["id"], "email": user["email"]},
            "organization_id": org_id,
        }


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


def _oauth_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[dict[str, str]]:
    return Response(
        {"error": exc.code, "error_description": exc.message},
        status_code=exc.status,
        headers={"Cache-Control": "no-store"},
    )


@post(
    "/user_management/authorize/device",
    status_code=200,
    exception_handlers={ApiError: _oauth_error},
    opt=openapi.body(DeviceAuthorization, openapi.FORM),
)
async def authorize_device(request: Request[Any, Any, Any]) -> dict[str, Any]:
    form = html.form_fields(await request.body())
    if form.get("client_id") != CLIENT_ID:
        raise ApiError(400, "invalid_client", f"unknown client_id; this sign-in service serves {CLIENT_ID}")
    return await _logins(request).start(form["client_id"])


@post(
    "/user_management/authenticate",
    status_code=200,
    exception_handlers={ApiError: _oauth_error},
    opt=openapi.body(Authentication, openapi.FORM),
)
async def authenticate(request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
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
        raise ApiError(400, "unsupported_grant_type", "grant_type must be device_code or refresh_token")
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
