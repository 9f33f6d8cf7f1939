"""`/_emulator` for organizations: every organization (trials among them) with its keys, admins and databases,
the trials alone, and claiming a trial as a person."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get, post

from emulator.admin import ops
from emulator.admin.context import Operator, operator_of
from emulator.admin.databases import database_views
from emulator.admin.emulator import decode, json_response
from emulator.admin.wire import KeyList, OrgList, OrgView, TrialClaim, TrialClaimed, TrialList
from emulator.core import openapi
from emulator.core.errors import NOT_FOUND
from emulator.hosted import keys, orgs, trials


async def org_views(operator: Operator, *, trials_only: bool = False) -> list[OrgView]:
    now = operator.core.clock.now()
    by_org = await database_views(operator)
    return [
        OrgView.of(s.org, s.api_keys, s.admins, by_org.get(s.org.id, []), now)
        for s in await orgs.summaries(operator.core.store, trials_only=trials_only)
    ]


@get(ops.ORGS.path)
async def orgs_list(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Every organization (trial or not) with its API key names, admins and databases."""
    operator = operator_of(request)
    return json_response(OrgList(operator.core.clock.now(), await org_views(operator)))


@get(ops.TRIALS.path)
async def trials_list(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(TrialList(await org_views(operator_of(request), trials_only=True)))


@post(ops.TRIAL_CLAIM.path, status_code=200, opt=openapi.body(TrialClaim))
async def trials_claim(request: Request[Any, Any, Any]) -> Response[bytes]:
    operator = operator_of(request)
    body = decode(await request.body(), TrialClaim)
    org = await orgs.find(operator.core.store, body.org)
    if org is None:
        raise NOT_FOUND(f"no organization {body.org!r} (an unclaimed trial is deleted after 48 h)")
    slug = await trials.claim(operator.core, operator.identity, org.id, body.email)
    return json_response(TrialClaimed(slug, body.email.strip(), "claimed"))


@get(ops.KEYS.path)
async def keys_list(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Every API key by organization and name (never its secret): type, grants, created, last used, revoked."""
    core = operator_of(request).core
    await core.bus.flush()  # last used and revoked are read from the journal
    return json_response(KeyList(await keys.listing(core.store)))


HANDLERS = [keys_list, orgs_list, trials_list, trials_claim]
