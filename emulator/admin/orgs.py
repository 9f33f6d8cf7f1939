"""`/_emulator` for organizations: every organization (trials among them) with its keys, admins and databases,
the trials alone, and claiming a trial as a person."""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.di import NamedDependency

from emulator.admin import ops
from emulator.admin.context import Operator, operator_of
from emulator.admin.databases import database_views
from emulator.admin.operation import operation
from emulator.admin.wire import KeyList, OrgList, OrgView, TrialClaim, TrialClaimed, TrialList
from emulator.core.errors import BAD_REQUEST, CONFLICT, NOT_FOUND
from emulator.hosted import keys, orgs, trials


async def org_views(operator: Operator, *, trials_only: bool = False) -> list[OrgView]:
    now = operator.core.clock.now()
    by_org = await database_views(operator)
    return [
        OrgView.of(s.org, s.api_keys, s.admins, by_org.get(s.org.id, []), now)
        for s in await orgs.summaries(operator.core.store, trials_only=trials_only)
    ]


@operation(ops.ORGS)
async def orgs_list(request: Request[Any, Any, Any]) -> OrgList:
    """Every organization (trial or not) with its API key names, admins and databases."""
    operator = operator_of(request)
    return OrgList(operator.core.clock.now(), await org_views(operator))


@operation(ops.TRIALS)
async def trials_list(request: Request[Any, Any, Any]) -> TrialList:
    return TrialList(await org_views(operator_of(request), trials_only=True))


@operation(ops.TRIAL_CLAIM, body="claim", errors=[BAD_REQUEST, NOT_FOUND, CONFLICT])
async def trials_claim(request: Request[Any, Any, Any], claim: NamedDependency[TrialClaim]) -> TrialClaimed:
    operator = operator_of(request)
    org = await orgs.find(operator.core.store, claim.org)
    if org is None:
        raise NOT_FOUND(f"no organization {claim.org!r} (an unclaimed trial is deleted after 48 h)")
    slug = await trials.claim(operator.core, operator.identity, org.id, claim.email)
    return TrialClaimed(slug, claim.email.strip(), "claimed")


@operation(ops.KEYS)
async def keys_list(request: Request[Any, Any, Any]) -> KeyList:
    """Every API key by organization and name (never its secret): type, grants, created, last used, revoked."""
    core = operator_of(request).core
    await core.bus.flush()  # last used and revoked are read from the journal
    return KeyList(await keys.listing(core.store))


HANDLERS = [keys_list, orgs_list, trials_list, trials_claim]
