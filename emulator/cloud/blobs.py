"""Project archives uploaded by `pxt db update`, stored by sha256, handed out by signed URL.

`prepare_update` offers `PUT {api_url}/blobs/<org_id>/<sha256>?sig=…` for a blob it does not hold;
the body must hash to the name (and match `x-amz-checksum-sha256` when sent); a blob already stored
answers 412, which the client counts as success. `get_archive` hands out
`GET {api_url}/blobs/<sha256>?exp=…&sig=…`, valid for an hour of emulator time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from pathlib import Path
from typing import Any

from litestar import Request, Response, get, put
from litestar.response import File

from emulator.core.context import Core
from emulator.core.errors import ApiError

MAX_BLOB = 2 * 1024**3
URL_TTL = 3600


class Blobs:
    def __init__(self, core: Core, root: Path, api_url: str) -> None:
        self.core = core
        self.root = root
        self.api_url = api_url
        root.mkdir(parents=True, exist_ok=True)
        key_path = core.settings.state_dir / "keys" / "blob-signing.key"
        if not key_path.is_file():
            key_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(32))
        self._key = key_path.read_bytes()

    def path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    async def has(self, sha256: str) -> bool:
        return await self.core.store.fetchone("SELECT 1 FROM blobs WHERE sha256 = ?", (sha256,)) is not None

    def _sign(self, *parts: str) -> str:
        return hmac.new(self._key, "\0".join(parts).encode(), hashlib.sha256).hexdigest()

    def upload_url(self, org_id: str, sha256: str) -> str:
        return f"{self.api_url}/blobs/{org_id}/{sha256}?sig={self._sign('put', org_id, sha256)}"

    def signed_url(self, sha256: str) -> str:
        exp = int(self.core.clock.now()) + URL_TTL
        return f"{self.api_url}/blobs/{sha256}?exp={exp}&sig={self._sign('get', sha256, str(exp))}"

    def check(self, sig: str, *parts: str) -> None:
        if not hmac.compare_digest(sig, self._sign(*parts)):
            raise ApiError(403, "forbidden", "the signature of this URL is not valid")


def _blobs(request: Request[Any, Any, Any]) -> Blobs:
    return request.app.state["cloud"].blobs


def _is_sha(value: str) -> bool:
    return len(value) == 64 and all(c in "0123456789abcdef" for c in value)


@put("/blobs/{org_id:str}/{sha256:str}", status_code=201, request_max_body_size=MAX_BLOB)
async def upload(request: Request[Any, Any, Any], org_id: str, sha256: str, sig: str = "") -> Response[bytes]:
    blobs = _blobs(request)
    if not _is_sha(sha256):
        raise ApiError(400, "bad_request", "the blob name must be its sha256 (64 lowercase hex digits)")
    blobs.check(sig, "put", org_id, sha256)
    if await blobs.has(sha256):
        return Response(b"", status_code=412)  # already stored: the client counts this as success
    body = await request.body()
    actual = hashlib.sha256(body)
    if actual.hexdigest() != sha256:
        raise ApiError(400, "bad_request", f"the body hashes to {actual.hexdigest()}, not {sha256}")
    claimed = request.headers.get("x-amz-checksum-sha256")
    if claimed is not None and claimed != base64.b64encode(actual.digest()).decode():
        raise ApiError(400, "bad_request", "x-amz-checksum-sha256 does not match the body")
    path = blobs.path(sha256)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_bytes(body)
    tmp.replace(path)
    await blobs.core.store.execute(
        "INSERT OR IGNORE INTO blobs (sha256, org_id, size, created_at) VALUES (?, ?, ?, ?)",
        (sha256, org_id, len(body), blobs.core.clock.now()),
    )
    blobs.core.bus.publish("cloud.blob_stored", sha256[:12], size=len(body), org_id=org_id)
    return Response(b"", status_code=201)


@get("/blobs/{sha256:str}")
async def download(request: Request[Any, Any, Any], sha256: str, exp: int = 0, sig: str = "") -> File:
    blobs = _blobs(request)
    blobs.check(sig, "get", sha256, str(exp))
    if exp < blobs.core.clock.now():
        raise ApiError(403, "forbidden", "this URL has expired; ask get_archive for a new one")
    path = blobs.path(sha256) if _is_sha(sha256) else None
    if path is None or not path.is_file():
        raise ApiError(404, "not_found", "no such blob")
    return File(path, media_type="application/x-bzip2", filename=f"{sha256}.tar.bz2")


HANDLERS = [upload, download]
