"""Hosted services (their instances, generations and receipts).

This version has no service runtime yet: `list_services` answers with no instances, a plan gives every
mutation generation 0, and a submission that would start a service is refused with a clear message.
"""

from __future__ import annotations

from typing import Any

from emulator.cloud.auth import Caller, resolve_org
from emulator.cloud.context import Cloud
from emulator.core.errors import ApiError


async def prepare(cloud: Cloud, org_id: str, slug: str, db: str, mutations: list[Any]) -> dict[str, Any]:
    generations = []
    for m in mutations:
        if not isinstance(m, dict) or not isinstance(m.get("service_name"), str):
            raise ApiError(400, "bad_request", "each service mutation needs a service_name")
        generations.append({"service_name": m["service_name"], "base_path": m.get("base_path") or "", "generation": 0})
    return {"generations": generations, "existing": []}


async def submit(
    cloud: Cloud,
    caller: Caller,
    org_id: str,
    slug: str,
    db: str,
    mutations: list[Any],
    expected: dict[str, Any],
    digest: str,
) -> list[dict[str, Any]]:
    raise ApiError(
        400, "bad_request", "hosted services are not emulated by this version yet (databases and the tunnel are)"
    )


async def retry(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    raise ApiError(404, "not_found", "no such service")


async def list_services(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    await resolve_org(cloud.core, caller, body.get("org"))
    return {"instances": []}


async def report_service_instance(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    """A service pod says which project it loaded (before serving); acknowledged."""
    await resolve_org(cloud.core, caller, body.get("org"))
    return {}


OPERATIONS = {"list_services": list_services, "report_service_instance": report_service_instance}
