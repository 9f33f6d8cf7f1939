"""The hosted platform, put together once by the composition root (emulator.server) and handed to every surface
that acts on it: the control plane, the site's trials, the admin API, the tunnel and the gateways.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.core.address import Address
from emulator.core.context import Core
from emulator.core.errors import NOT_FOUND
from emulator.core.secretbox import SecretBox
from emulator.hosted import databases, orgs
from emulator.hosted.auth import Authenticator, Caller, require
from emulator.hosted.blobs import Blobs
from emulator.hosted.reconciler import Reconciler
from emulator.hosted.records import Org
from emulator.media.store import MediaStore


@dataclass
class Platform:
    core: Core
    auth: Authenticator
    box: SecretBox
    blobs: Blobs
    reconciler: Reconciler
    media: MediaStore  # the home buckets' S3 endpoint
    api_url: str
    auth_url: str
    site_url: str

    async def reset(self) -> None:
        """The hosted side of a reset: workloads stopped, database directories, archives and media deleted (the
        rows go with the store's)."""
        await self.reconciler.reset()
        await self.blobs.reset()
        await self.media.reset()

    async def org_of(self, caller: Caller, org: str | None) -> tuple[str, str]:
        return await self.auth.resolve_org(caller, org)

    async def scope(
        self, caller: Caller, org: str | None, verb: str, db: str, service: str | None = None
    ) -> tuple[str, str]:
        """(org id, slug) for an act a grant-scoped key may be allowed: on a database, or on one of its services."""
        org_id, slug = await self.auth.resolve_org(caller, org)
        require(caller, verb, slug, db, service)
        return org_id, slug

    async def org(self, ref: str) -> Org:
        """An organization by slug or id, for the operator's acts (which call the same rules a client's do)."""
        org = await orgs.find(self.core.store, ref)
        if org is None:
            raise NOT_FOUND(f"no organization {ref!r}")
        return org

    async def tunnel_route(self, org: str, db: str, credential: str) -> tuple[Address, str]:
        """Who may open the database tunnel, and where it leads: (address, who). The same credentials as the
        control plane; the database must exist and not be stopped, and its server starts on first use."""
        caller = await self.auth.credential(credential, bearer=True)
        org_id, slug = await self.auth.resolve_org(caller, org)
        require(caller, "access", slug, db)
        await databases.require(self.core.store, org_id, slug, db)
        return await self.reconciler.route(org_id, slug, db), caller.label
