"""Who is calling the control plane, and which organization a request is about.

`X-api-key` is checked before `Authorization: Bearer`; a request carrying both is authenticated as the
API key. A bearer token is a `pxt login` session access token (an ES256 JWT of this issuer whose
audience is the control plane). An API key acts in its own organization only; a session acts in the
organizations its person belongs to, by default the one its token is scoped to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulator.cloud import orgs
from emulator.core.context import Core
from emulator.core.errors import ApiError
from emulator.idp.keys import ACCESS_TOKEN_TYP, InvalidToken, Signer


@dataclass(frozen=True)
class Caller:
    credential: str  # "api_key" | "session"
    user_id: str | None  # the person (session, or the key's creator when known)
    email: str | None
    org_id: str | None  # the organization the credential is scoped to (None: a session with no org yet)
    org: str | None
    key_name: str | None = None
    trial: bool = False

    @property
    def label(self) -> str:
        return f"key {self.key_name}" if self.credential == "api_key" else f"session of {self.email}"


async def authenticate(
    core: Core, signer: Signer, api_url: str, headers: Any, runtime_keys: dict[str, tuple[str, str]]
) -> Caller:
    """The caller of a management request: `X-api-key` first, then `Authorization: Bearer`."""
    key = headers.get("x-api-key")
    if key is not None:
        return await caller_for_credential(core, signer, api_url, key.strip(), runtime_keys, bearer=False)
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return await caller_for_credential(core, signer, api_url, token.strip(), runtime_keys, bearer=True)
    raise ApiError(401, "unauthorized", "an API key (X-api-key) or a bearer token is required")


async def caller_for_credential(
    core: Core,
    signer: Signer,
    api_url: str,
    credential: str,
    runtime_keys: dict[str, tuple[str, str]],
    *,
    bearer: bool,
) -> Caller:
    """Any credential by its shape: a hosted process's runtime key, an API key (`pxtk_…`), or a session token.

    The tunnel sends every credential as a bearer token, so a key is recognised there by its shape too.
    """
    runtime = runtime_keys.get(credential)
    if runtime is not None:
        return Caller("api_key", None, None, runtime[0], runtime[1], "runtime", False)
    if not bearer or credential.startswith("pxtk_"):
        return await caller_for_key(core, credential)
    return await caller_for_session(core, signer, api_url, credential)


async def caller_for_key(core: Core, key: str) -> Caller:
    row = await orgs.org_by_key(core, key)
    if row is None:
        raise ApiError(
            401, "unauthorized", "the API key is not valid (a trial's key stops working when the trial expires)"
        )
    return Caller("api_key", None, None, row["id"], row["slug"], row["key_name"], bool(row["trial"]))


async def caller_for_session(core: Core, signer: Signer, api_url: str, token: str) -> Caller:
    try:
        typ, claims = signer.verify(token)
    except InvalidToken:
        raise ApiError(401, "unauthorized", "the bearer token is not valid") from None
    if typ != ACCESS_TOKEN_TYP or claims.get("aud") != api_url:
        raise ApiError(401, "unauthorized", "the bearer token was not issued for this control plane")
    if float(claims.get("exp", 0)) <= core.clock.now():
        raise ApiError(401, "unauthorized", "the session token has expired")
    session = await core.store.fetchone(
        "SELECT s.revoked_at, u.id AS user_id, u.email FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.id = ?",
        (claims.get("sid"),),
    )
    if session is None or session["revoked_at"] is not None:
        raise ApiError(401, "unauthorized", "the session was signed out")
    org_id = claims.get("org_id") or None
    slug = None
    if org_id:
        row = await member_org(core, session["user_id"], org_id)
        if row is None:
            raise ApiError(403, "forbidden", "this session's person is not a member of its organization")
        slug = row["slug"]
    return Caller("session", session["user_id"], session["email"], org_id, slug)


async def member_org(core: Core, user_id: str, org: str) -> Any:
    """The organization (by id or slug) if the person is a member of it."""
    return await core.store.fetchone(
        "SELECT o.* FROM orgs o JOIN org_members m ON m.org_id = o.id WHERE m.user_id = ? AND (o.id = ? OR o.slug = ?)",
        (user_id, org, org),
    )


async def resolve_org(core: Core, caller: Caller, org: Any) -> tuple[str, str]:
    """(org id, slug) a request acts on: its `org` field if set, else the credential's organization."""
    if org is not None and not isinstance(org, str):
        raise ApiError(400, "bad_request", "org must be a string")
    if caller.credential == "api_key":
        if org is not None and org != caller.org:
            raise ApiError(403, "forbidden", f"this API key belongs to {caller.org}, not {org}")
        assert caller.org_id is not None and caller.org is not None
        return caller.org_id, caller.org
    if org is None:
        if caller.org_id is None or caller.org is None:
            raise ApiError(400, "bad_request", "no organization is selected; create one with pxt org create")
        return caller.org_id, caller.org
    assert caller.user_id is not None
    row = await member_org(core, caller.user_id, org)
    if row is None:
        raise ApiError(403, "forbidden", f"{caller.email} is not a member of {org}")
    return row["id"], row["slug"]
