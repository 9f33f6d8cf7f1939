"""The blob endpoints of the control plane origin: archive uploads and signed downloads (emulator.hosted.blobs
keeps them). An upload's body must hash to its name (and match `x-amz-checksum-sha256` when sent); a blob
already stored answers 412, which the client counts as success."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from litestar import Request, Response, get, put
from litestar.response import File

from emulator.cloud.context import platform_of
from emulator.core import openapi
from emulator.core.errors import BAD_REQUEST, FORBIDDEN, NOT_FOUND
from emulator.hosted.blobs import MAX_BLOB, Blobs, is_sha


def _blobs(request: Request[Any, Any, Any]) -> Blobs:
    return platform_of(request).blobs


@put(
    "/blobs/{org_id:str}/{sha256:str}",
    status_code=201,
    request_max_body_size=MAX_BLOB,
    opt=openapi.raw_body("application/octet-stream", {"type": "string", "format": "binary"}, "the project archive"),
)
async def upload(request: Request[Any, Any, Any], org_id: str, sha256: str, sig: str = "") -> Response[bytes]:
    blobs = _blobs(request)
    if not is_sha(sha256):
        raise BAD_REQUEST("the blob name must be its sha256 (64 lowercase hex digits)")
    blobs.check(sig, "put", org_id, sha256)
    if await blobs.has(org_id, sha256):
        return Response(b"", status_code=412)  # already stored: the client counts this as success
    body = await request.body()
    actual = hashlib.sha256(body)
    if actual.hexdigest() != sha256:
        raise BAD_REQUEST(f"the body hashes to {actual.hexdigest()}, not {sha256}")
    claimed = request.headers.get("x-amz-checksum-sha256")
    if claimed is not None and claimed != base64.b64encode(actual.digest()).decode():
        raise BAD_REQUEST("x-amz-checksum-sha256 does not match the body")
    await blobs.store(org_id, sha256, body)
    return Response(b"", status_code=201)


@get("/blobs/{sha256:str}")
async def download(request: Request[Any, Any, Any], sha256: str, exp: int = 0, sig: str = "") -> File:
    blobs = _blobs(request)
    blobs.check(sig, "get", sha256, str(exp))
    if exp < blobs.core.clock.now():
        raise FORBIDDEN("this URL has expired; ask get_archive for a new one")
    path = blobs.path(sha256) if is_sha(sha256) else None
    if path is None or not path.is_file():
        raise NOT_FOUND("no such blob")
    return File(path, media_type="application/x-bzip2", filename=f"{sha256}.tar.bz2")


HANDLERS = [upload, download]
