"""`/_emulator/faults`: add, list and clear fault rules (and the older holds). The rules live in core.faults; a
kill of a hosted workload is done here, at once, through the reconciler."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request
from litestar.di import NamedDependency
from litestar.params import PathParameter

from emulator.admin import ops
from emulator.admin.context import operator_of
from emulator.admin.operation import operation
from emulator.admin.wire import FaultRelease, FaultRemoved, FaultsCleared, FaultsReleased
from emulator.core.errors import BAD_REQUEST, NOT_FOUND
from emulator.core.faults import KILLS, FaultList, FaultRuleView, FaultSpec


@operation(ops.FAULTS)
async def faults_get(request: Request[Any, Any, Any]) -> FaultList:
    return operator_of(request).core.faults.snapshot()


@operation(ops.FAULT_ADD, body="sent", status_code=201, errors=[BAD_REQUEST, NOT_FOUND])
async def faults_add(request: Request[Any, Any, Any], sent: NamedDependency[FaultSpec]) -> FaultRuleView | FaultList:
    """A rule (its view), or a hold of requests to a path (the fault list with it)."""
    operator = operator_of(request)
    faults = operator.core.faults
    spec = faults.check(sent)
    if spec.hold is not None:
        faults.hold(spec.hold, spec.count or 1)
        return faults.snapshot()
    if spec.hosted in KILLS:
        parts = (spec.target or "").split(":")
        wanted = 3 if spec.hosted == "kill_service" else 2
        if len(parts) != wanted or not all(parts):
            shape = "ORG:DB:SERVICE" if wanted == 3 else "ORG:DB"
            raise BAD_REQUEST(f"fault: {spec.hosted} names its target as {shape}")
        org = await operator.platform.org(parts[0])
        await operator.platform.reconciler.kill(org.id, org.slug, parts[1], parts[2] if wanted == 3 else None)
        return faults.add(spec, fired=True).view()
    return faults.add(spec).view()


@operation(ops.FAULTS_CLEAR)
async def faults_clear(request: Request[Any, Any, Any]) -> FaultsCleared:
    return FaultsCleared(operator_of(request).core.faults.clear(announce=True))


@operation(ops.FAULT_REMOVE, errors=[NOT_FOUND])
async def faults_remove(
    request: Request[Any, Any, Any], rule_id: Annotated[str, PathParameter(max_length=40)]
) -> FaultRemoved:
    return FaultRemoved(operator_of(request).core.faults.remove(rule_id).view())


@operation(ops.FAULTS_RELEASE, body="release")
async def faults_release(request: Request[Any, Any, Any], release: NamedDependency[FaultRelease]) -> FaultsReleased:
    faults = operator_of(request).core.faults
    released = faults.release(release.path)
    left = faults.snapshot()
    return FaultsReleased(released, left.rules, left.holds, left.waiting)


HANDLERS = [faults_get, faults_add, faults_clear, faults_remove, faults_release]
