"""`/_emulator/snapshots`: save, list, load, delete, export and import snapshots of the running emulator (see
emulator.core.snapshots), and `POST /_emulator/reset` back to an empty emulator or to the state it started from."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Request, Response, delete, get, post
from litestar.background_tasks import BackgroundTask
from litestar.response import File

from emulator.admin import ops
from emulator.admin.context import operator_of
from emulator.admin.emulator import decode, json_response
from emulator.admin.wire import ResetRequest, ResetView, SnapshotDeleted, SnapshotList, SnapshotLoaded, SnapshotSave
from emulator.core import openapi
from emulator.core.boundary import IMPORT_TYPES
from emulator.core.snapshots import MAX_IMPORT_BYTES, SnapshotView, check_name


@get(ops.SNAPSHOTS.path)
async def snapshots_list(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(SnapshotList(await operator_of(request).core.snapshots.list()))


@post(ops.SNAPSHOT_SAVE.path, status_code=201, opt=openapi.body(SnapshotSave))
async def snapshot_save(request: Request[Any, Any, Any]) -> Response[bytes]:
    body = decode(await request.body(), SnapshotSave)
    view = await operator_of(request).core.snapshots.save(check_name(body.name))
    return json_response(view, 201)


@post(ops.SNAPSHOT_LOAD.path, status_code=200)
async def snapshot_load(request: Request[Any, Any, Any], name: str) -> Response[bytes]:
    core = operator_of(request).core
    seconds = await core.snapshots.load(name)
    return json_response(SnapshotLoaded(name, seconds, core.clock.state().iso))


@delete(ops.SNAPSHOT_DELETE.path, status_code=200)
async def snapshot_delete(request: Request[Any, Any, Any], name: str) -> Response[bytes]:
    await operator_of(request).core.snapshots.delete(name)
    return json_response(SnapshotDeleted(name))


@get(ops.SNAPSHOT_EXPORT.path)
async def snapshot_export(request: Request[Any, Any, Any], name: str) -> File:
    packed = await operator_of(request).core.snapshots.export(name)
    return File(
        packed,
        media_type="application/gzip",
        filename=f"{name}.tar.gz",
        background=BackgroundTask(asyncio.to_thread, packed.unlink, True),
    )


@post(
    ops.SNAPSHOT_IMPORT.path,
    status_code=201,
    request_max_body_size=MAX_IMPORT_BYTES,
    opt={
        **openapi.custom_body(
            openapi.Body(
                {kind: {"schema": {"type": "string", "format": "binary"}} for kind in IMPORT_TYPES},
                description="an export (.tar.gz)",
            )
        ),
        **openapi.query(name=str),
    },
)
async def snapshot_import(request: Request[Any, Any, Any]) -> Response[bytes]:
    snapshots = operator_of(request).core.snapshots
    name = request.query_params.get("name")
    if name is not None:
        check_name(name)
    archive = await snapshots.receive(request.stream())
    try:
        view: SnapshotView = await snapshots.import_file(archive, name)
    finally:
        await asyncio.to_thread(archive.unlink, True)
    return json_response(view, 201)


@post(ops.RESET.path, status_code=200, opt=openapi.body(ResetRequest))
async def reset(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Everything a run made is gone, without a restart (see Core.reset)."""
    body = decode(await request.body() or b"{}", ResetRequest)
    core = operator_of(request).core
    seconds = await core.reset(body.to)
    return json_response(ResetView(reset=True, to=body.to, seconds=seconds, clock=core.clock.state().iso))


HANDLERS = [reset, snapshots_list, snapshot_save, snapshot_load, snapshot_delete, snapshot_export, snapshot_import]
