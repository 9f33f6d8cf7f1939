"""`POST /api/v1/trial-orgs` and the trial's claim page.

An anonymous registration's access token buys one trial organization: slug `agent-xxxxxx`, its
database `main`, an API key (shown once, stored hashed), the control plane URL, a claim link, and
48 hours of emulator time before it is deleted unless a person claims it. Refusals are `Message`
bodies with the statuses of the spec; checks run in the order 401, 403, 409, 503, 429.

A "network" is the client's IPv4 /24 (`trial_network_bits`) or IPv6 /64: at most
`trial_network_limit` unclaimed trials live in one network at a time.
"""

from __future__ import annotations

import ipaddress
from html import escape
from typing import Any

import msgspec
from litestar import Request, Response, get, post

from emulator.cloud import orgs
from emulator.core import html
from emulator.core.clock import iso
from emulator.core.errors import ApiError
from emulator.core.ids import secret_hash
from emulator.idp.identity import valid_email
from emulator.site.state import Site, site_of

_encode = msgspec.json.Encoder().encode


class TrialOrg(msgspec.Struct):
    org: str
    org_id: str
    db: str
    api_key: str
    api_url: str
    claim_url: str
    expires_at: str


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


def network_of(ip: str, bits_v4: int) -> str:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return ip
    bits = bits_v4 if addr.version == 4 else 64
    return str(ipaddress.ip_network(f"{addr}/{bits}", strict=False))


@post("/api/v1/trial-orgs", status_code=201, exception_handlers={ApiError: message_error})
async def create_trial(request: Request[Any, Any, Any]) -> Response[bytes]:
    site = site_of(request)
    core, settings = site.core, site.core.settings
    auth = request.headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
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
    reg = await core.store.fetchone("SELECT * FROM registrations WHERE id = ?", (grant.registration_id,))
    if reg is None:
        raise ApiError(401, "invalid_token", "the registration behind this token no longer exists")
    if reg["status"] == "claimed":
        raise ApiError(
            403,
            "forbidden",
            "this registration was claimed: it works in its person's organization (pxt login) and gets no trial",
        )
    if reg["trial_org_id"] is not None:
        raise ApiError(409, "conflict", "this registration already has a trial; register again for another")
    if not core.switches["cloud_reachable"]:
        raise ApiError(503, "unavailable", "the cloud could not be reached; try again later")
    if not core.switches["trials_enabled"]:
        raise ApiError(503, "unavailable", "trials are not available on this host")
    ip = site.client_ip(request)
    network = network_of(ip, settings.trial_network_bits)
    now = core.clock.now()
    claim_token = core.ids.token("tcl_", 20)
    expires = now + settings.trial_lifetime
    async with core.store.transaction() as conn:
        async with conn.execute(
            "SELECT COUNT(*) AS n, SUM(network = ?) AS mine FROM orgs WHERE trial = 1 AND state = 'unclaimed'",
            (network,),
        ) as cur:
            counts = await cur.fetchone()
        if counts["n"] >= settings.trial_capacity:
            raise ApiError(
                429,
                "too_many",
                "no trials are available right now; try again later",
                headers={"Retry-After": "3600"},
            )
        if (counts["mine"] or 0) >= settings.trial_network_limit:
            raise ApiError(
                429,
                "too_many",
                f"your network already holds {settings.trial_network_limit} unclaimed trials; claim one "
                "(open its claim_url) or wait until one expires",
                headers={"Retry-After": "3600"},
            )
        slug = f"agent-{core.ids.short(6)}"
        while await orgs.slug_taken(conn, slug):
            slug = f"agent-{core.ids.short(6)}"
        org_id = await orgs.new_org(
            core,
            conn,
            slug,
            trial=True,
            now=now,
            expires_at=expires,
            registration_id=reg["id"],
            network=network,
            claim_token=claim_token,
        )
        _, api_key = await orgs.create_api_key(core, conn, org_id, "trial", created_by=reg["id"], now=now)
        await conn.execute("UPDATE registrations SET trial_org_id = ? WHERE id = ?", (org_id, reg["id"]))
    core.bus.publish(
        "trial.created", slug, org_id=org_id, registration=reg["id"], network=network, expires_at=iso(expires)
    )
    trial = TrialOrg(
        org=slug,
        org_id=org_id,
        db=orgs.DEFAULT_DB,
        api_key=api_key,
        api_url=site.identity.urls.api,
        claim_url=f"{site.base_url}/claim/{claim_token}",
        expires_at=iso(expires),
    )
    return Response(
        _encode(trial), status_code=201, media_type="application/json", headers={"Cache-Control": "no-store"}
    )


async def claim_trial(site: Site, *, org_id: str, email: str) -> str:
    """The person signed in as `email` becomes the trial's admin; it stops expiring. Returns the slug."""
    if not valid_email(email):
        raise ApiError(400, "bad_request", "sign in with an e-mail address")
    email = email.strip()
    core = site.core
    now = core.clock.now()
    async with core.store.transaction() as conn:
        async with conn.execute("SELECT * FROM orgs WHERE id = ?", (org_id,)) as cur:
            org = await cur.fetchone()
        if org is None or (org["state"] == "unclaimed" and org["expires_at"] <= now):
            raise ApiError(
                404, "not_found", "this trial no longer exists (unclaimed trials are deleted after 48 hours)"
            )
        if org["state"] != "unclaimed":
            raise ApiError(409, "bad_request", f"the organization {org['slug']} is already claimed")
        user_id = await site.identity.ensure_user(conn, email, now)
        await conn.execute(
            "UPDATE orgs SET state = 'claimed', expires_at = NULL, claimed_at = ?, updated_at = ?, "
            "claim_token_hash = NULL WHERE id = ?",
            (now, now, org_id),
        )
        await conn.execute(
            "INSERT OR IGNORE INTO org_members (org_id, user_id, role) VALUES (?, ?, 'admin')",
            (org_id, user_id),
        )
        # The person now owns what the agent made: its registration is claimed too, so it gets no more trials.
        if org["registration_id"]:
            await conn.execute(
                "UPDATE registrations SET status = 'claimed', claimed_email = ?, claimed_at = ? "
                "WHERE id = ? AND status = 'registered'",
                (email, now, org["registration_id"]),
            )
    core.bus.publish("trial.claimed", org["slug"], org_id=org_id, email=email, registration=org["registration_id"])
    return str(org["slug"])


async def _org_by_claim_token(site: Site, token: str) -> Any:
    org = await site.core.store.fetchone("SELECT * FROM orgs WHERE claim_token_hash = ?", (secret_hash(token),))
    if org is None:
        raise ApiError(404, "not_found", "this claim link is not valid: the trial was claimed or has expired")
    return org


def _page_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[str]:
    return html.page("This trial cannot be claimed", f'<p class="error">{escape(exc.message)}</p>', exc.status)


@get("/claim/{token:str}", exception_handlers={ApiError: _page_error})
async def claim_page(request: Request[Any, Any, Any], token: str) -> Response[str]:
    org = await _org_by_claim_token(site_of(request), token)
    body = (
        f"<p>An agent created the Pixeltable Cloud trial <strong>{escape(org['slug'])}</strong>. "
        f"Unless someone claims it, it is deleted at {iso(org['expires_at'])}.</p>"
        "<p>Sign in or sign up to become its admin:</p>"
        f'<form method="post" action="/claim/{escape(token)}"><p>{html.email_input()}</p>'
        "<p><button>Claim this organization</button></p></form>"
    )
    return html.page(f"Claim {org['slug']}", body)


@post("/claim/{token:str}", status_code=200, exception_handlers={ApiError: _page_error})
async def claim_submit(request: Request[Any, Any, Any], token: str) -> Response[str]:
    site = site_of(request)
    org = await _org_by_claim_token(site, token)
    email = html.form_fields(await request.body()).get("email", "")
    slug = await claim_trial(site, org_id=org["id"], email=email)
    return html.page(
        f"You own {slug}",
        f"<p>Signed in as {escape(email.strip())}. You are the admin of <strong>{escape(slug)}</strong>; it no "
        "longer expires. Run <code>pxt login</code> to work in it.</p>",
    )


HANDLERS = [create_trial, claim_page, claim_submit]
