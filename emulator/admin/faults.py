"""`/_emulator/faults`: add, list and clear fault rules (and the older holds). The rules live in core.faults; a
kill of a hosted workload is done here, at once, through the reconciler."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.params import Parameter

from emulator.admin import ops
from emulator.admin.context import operator_of
from emulator.admin.emulator import decode, json_response
from emulator.admin.wire import FaultRelease, FaultsCleared
from emulator.core import openapi
from emulator.core.errors import BAD_REQUEST
from emulator.core.faults import KILLS, FaultSpec


@get(ops.FAULTS.path)
async def faults_get(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(operator_of(request).core.faults.snapshot())


@post(ops.FAULT_ADD.path, status_code=201, opt=openapi.body(FaultSpec))
async def faults_add(request: Request[Any, Any, Any]) -> Response[bytes]:
    operator = operator_of(request)
    faults = operator.core.faults
    spec = faults.check(decode(await request.body(), FaultSpec))
    if spec.hold is not None:
        faults.hold(spec.hold, spec.count or 1)
        return json_response(faults.snapshot(), 201)
    if spec.hosted in KILLS:
        parts = (spec.target or "").split(":")
        wanted = 3 if spec.hosted == "kill_service" else 2
        if len(parts) != wanted or not all(parts):
            shape = "ORG:DB:SERVICE" if wanted == 3 else "ORG:DB"
            raise BAD_REQUEST(f"fault: {spec.hosted} names its target as {shape}")
        org = await operator.platform.org(parts[0])
        await operator.platform.reconciler.kill(org.id, org.slug, parts[1], parts[2] if wanted == 3 else None)
        return json_response(faults.add(spec, fired=True).view(), 201)
    return json_response(faults.add(spec).view(), 201)


@delete(ops.FAULTS_CLEAR.path, status_code=200)
async def faults_clear(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(FaultsCleared(operator_of(request).core.faults.clear(announce=True)))


@delete(ops.FAULT_REMOVE.path, status_code=200)
async def faults_remove(
    request: Request[Any, Any, Any], rule_id: Annotated[str, Parameter(max_length=40)]
) -> Response[bytes]:
    return json_response({"removed": operator_of(request).core.faults.remove(rule_id).view()})


@post(ops.FAULTS_RELEASE.path, status_code=200, opt=openapi.body(FaultRelease))
async def faults_release(request: Request[Any, Any, Any]) -> Response[bytes]:
    faults = operator_of(request).core.faults
    release = decode(await request.body(), FaultRelease)
    released = faults.release(release.path)
    return json_response({"released": released, **msgspec.structs.asdict(faults.snapshot())})


HANDLERS = [faults_get, faults_add, faults_clear, faults_remove, faults_release]
