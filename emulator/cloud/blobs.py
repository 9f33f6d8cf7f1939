"""The blob endpoints of the control plane origin: archive uploads and signed downloads (emulator.hosted.blobs
keeps them). An upload's body must hash to its name (and match `x-amz-checksum-sha256` when sent); a blob
already stored answers 412, which the client counts as success. Both carry the archive as
`application/octet-stream`, the type the client uploads it with (and so the one a store gives it back with)."""

from __future__ import annotations

import base64
import hashlib
from typing import Annotated, Any

from litestar import Request, Response, get, put
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, HeaderParameter
from litestar.response import File

from emulator.cloud.context import platform_of
from emulator.core import openapi
from emulator.core.contract import errors
from emulator.core.errors import BAD_REQUEST, FORBIDDEN, NOT_FOUND, TOO_LARGE
from emulator.hosted.blobs import MAX_BLOB, Blobs, is_sha

OCTETS = "application/octet-stream"
_ARCHIVE = {OCTETS: openapi.MediaType(schema={"type": "string", "format": "binary"})}


def _blobs(request: Request[Any, Any, Any]) -> Blobs:
    return platform_of(request).blobs


async def _archive(request: Request[Any, Any, Any]) -> bytes:
    """The uploaded archive, as sent (bounded by the route's MAX_BLOB: a larger one is a 413)."""
    return await request.body()


@put(
    "/blobs/{org_id:str}/{sha256:str}",
    status_code=201,
    operation_id="upload_blob",
    request_max_body_size=MAX_BLOB,
    dependencies={
        "archive": openapi.BodyDependency(_archive, openapi.Body(_ARCHIVE, description="the project archive"))
    },
    opt=openapi.no_body({201: "stored", 412: "already stored (the client counts this as success)"}),
    responses=errors(BAD_REQUEST, FORBIDDEN, TOO_LARGE),
)
async def upload(
    request: Request[Any, Any, Any],
    org_id: FromPath[str],
    sha256: FromPath[str],
    archive: NamedDependency[bytes],
    checksum: Annotated[str | None, HeaderParameter(name="x-amz-checksum-sha256", required=False)] = None,
    sig: FromQuery[str] = "",
) -> Response[bytes]:
    blobs = _blobs(request)
    if not is_sha(sha256):
        raise BAD_REQUEST("the blob name must be its sha256 (64 lowercase hex digits)")
    blobs.check(sig, "put", org_id, sha256)
    if await blobs.has(org_id, sha256):
        return Response(b"", status_code=412)  # already stored: the client counts this as success
    actual = hashlib.sha256(archive)
    if actual.hexdigest() != sha256:
        raise BAD_REQUEST(f"the body hashes to {actual.hexdigest()}, not {sha256}")
    if checksum is not None and checksum != base64.b64encode(actual.digest()).decode():
        raise BAD_REQUEST("x-amz-checksum-sha256 does not match the body")
    await blobs.store(org_id, sha256, archive)
    return Response(b"", status_code=201)


@get(
    "/blobs/{sha256:str}",
    operation_id="download_blob",
    opt=openapi.custom_answer(openapi.Body(_ARCHIVE)),
    responses=errors(BAD_REQUEST, FORBIDDEN, NOT_FOUND),
)
async def download(
    request: Request[Any, Any, Any], sha256: FromPath[str], exp: FromQuery[int] = 0, sig: FromQuery[str] = ""
) -> File:
    blobs = _blobs(request)
    blobs.check(sig, "get", sha256, str(exp))
    if exp < blobs.core.clock.now():
        raise FORBIDDEN("this URL has expired; ask get_archive for a new one")
    path = blobs.path(sha256) if is_sha(sha256) else None
    if path is None or not path.is_file():
        raise NOT_FOUND("no such blob")
    return File(path, media_type=OCTETS, filename=f"{sha256}.tar.bz2")


HANDLERS = [upload, download]
