"""`/_emulator/snapshots`: save, list, load, delete, export and import snapshots of the running emulator (see
emulator.core.snapshots), and `POST /_emulator/reset` back to an empty emulator or to the state it started from."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any

from litestar import Request
from litestar.background_tasks import BackgroundTask
from litestar.di import NamedDependency
from litestar.params import FromPath, QueryParameter
from litestar.response import File

from emulator.admin import ops
from emulator.admin.context import operator_of
from emulator.admin.operation import operation
from emulator.admin.wire import ResetRequest, ResetView, SnapshotDeleted, SnapshotList, SnapshotLoaded, SnapshotSave
from emulator.core import openapi
from emulator.core.boundary import IMPORT_TYPES
from emulator.core.errors import BAD_REQUEST, CONFLICT, NOT_FOUND, UNAVAILABLE, UNPROCESSABLE
from emulator.core.snapshots import MAX_IMPORT_BYTES, SnapshotView, check_name

_ARCHIVE: openapi.MediaType = {"schema": {"type": "string", "format": "binary"}}
# What a snapshot's name may be refused with, and a save, load or import besides (core/snapshots.py).
_NAMED = (BAD_REQUEST, NOT_FOUND)
_BUSY = (CONFLICT, UNAVAILABLE)


@operation(ops.SNAPSHOTS)
async def snapshots_list(request: Request[Any, Any, Any]) -> SnapshotList:
    return SnapshotList(await operator_of(request).core.snapshots.list())


@operation(ops.SNAPSHOT_SAVE, body="save", status_code=201, errors=[*_NAMED, *_BUSY])
async def snapshot_save(request: Request[Any, Any, Any], save: NamedDependency[SnapshotSave]) -> SnapshotView:
    return await operator_of(request).core.snapshots.save(check_name(save.name))


@operation(ops.SNAPSHOT_LOAD, errors=[*_NAMED, *_BUSY, UNPROCESSABLE])
async def snapshot_load(request: Request[Any, Any, Any], name: FromPath[str]) -> SnapshotLoaded:
    core = operator_of(request).core
    seconds = await core.snapshots.load(name)
    return SnapshotLoaded(name, seconds, core.clock.state().iso)


@operation(ops.SNAPSHOT_DELETE, errors=_NAMED)
async def snapshot_delete(request: Request[Any, Any, Any], name: FromPath[str]) -> SnapshotDeleted:
    await operator_of(request).core.snapshots.delete(name)
    return SnapshotDeleted(name)


@operation(
    ops.SNAPSHOT_EXPORT,
    errors=[*_NAMED, *_BUSY],
    opt=openapi.custom_answer(openapi.Body({ops.SNAPSHOT_EXPORT.answer_media: _ARCHIVE}, description="NAME.tar.gz")),
)
async def snapshot_export(request: Request[Any, Any, Any], name: FromPath[str]) -> File:
    packed = await operator_of(request).core.snapshots.export(name)
    return File(
        packed,
        media_type=ops.SNAPSHOT_EXPORT.answer_media,
        filename=f"{name}.tar.gz",
        background=BackgroundTask(asyncio.to_thread, packed.unlink, True),
    )


async def _archive(request: Request[Any, Any, Any]) -> AsyncIterator[bytes]:
    """The import's body as it arrives (an archive may be large: it is written to disk as it comes)."""
    return request.stream()


_IMPORTED = openapi.BodyDependency(
    _archive, openapi.Body(dict.fromkeys(IMPORT_TYPES, _ARCHIVE), description="an export (.tar.gz)")
)
SnapshotName = Annotated[str | None, QueryParameter(name="name", description="the name to keep it as")]


@operation(
    ops.SNAPSHOT_IMPORT,
    status_code=201,
    request_max_body_size=MAX_IMPORT_BYTES,
    dependencies={"archive": _IMPORTED},
    errors=[*_NAMED, *_BUSY, UNPROCESSABLE],
)
async def snapshot_import(
    request: Request[Any, Any, Any], archive: NamedDependency[AsyncIterator[bytes]], name: SnapshotName = None
) -> SnapshotView:
    snapshots = operator_of(request).core.snapshots
    if name is not None:
        check_name(name)
    received = await snapshots.receive(archive)
    try:
        return await snapshots.import_file(received, name)
    finally:
        await asyncio.to_thread(received.unlink, True)


@operation(ops.RESET, body="reset_to", errors=[*_BUSY])
async def reset(request: Request[Any, Any, Any], reset_to: NamedDependency[ResetRequest]) -> ResetView:
    """Everything a run made is gone, without a restart (see Core.reset)."""
    core = operator_of(request).core
    seconds = await core.reset(reset_to.to)
    return ResetView(reset=True, to=reset_to.to, seconds=seconds, clock=core.clock.state().iso)


HANDLERS = [reset, snapshots_list, snapshot_save, snapshot_load, snapshot_delete, snapshot_export, snapshot_import]
