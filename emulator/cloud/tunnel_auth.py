"""Who may open the database tunnel: the same credentials as the control plane, all sent as Bearer.

The credential's shape picks the check (as production's sidecar does): an API key (`pxtk_…`, trial keys
included, and the hosted processes' runtime keys) acts in its organization; anything else must be a
`pxt login` session token. Then the database must exist and not be stopped, and its server is started
on first use.
"""

from __future__ import annotations

from emulator.cloud.auth import caller_for_credential, resolve_org
from emulator.cloud.context import Cloud
from emulator.core.errors import ApiError
from emulator.tunnel import Authorize, Refusal, Route


def make_authorizer(cloud: Cloud) -> Authorize:
    async def authorize(org: str, db: str, credential: str) -> Route | Refusal:
        try:
            caller = await caller_for_credential(
                cloud.core, cloud.signer, cloud.urls.api, credential, cloud.runtime.runtime_keys, bearer=True
            )
            org_id, slug = await resolve_org(cloud.core, caller, org)
            row = await cloud.core.store.fetchone(
                "SELECT state FROM databases WHERE org_id = ? AND name = ?", (org_id, db)
            )
            if row is None:
                return Refusal(404, f"database {db} does not exist in {slug}")
            host, port = await cloud.runtime.route(org_id, slug, db)
        except ApiError as e:
            return Refusal(e.status if 400 <= e.status <= 599 else 503, e.message)
        return Route(host, port, caller.label)

    return authorize
