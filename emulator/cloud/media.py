"""The hosted media store: every database's home bucket (`pxt://ORG:DB/buckets/home`) and the three
control-plane operations the client uses for it: `get_bucket_credentials`, `get_presigned_url`,
`get_presigned_urls`.

The objects live in an S3-compatible endpoint on loopback (`s3_port`, default 8705). It is moto's S3
server, run in a thread of `emulator up`, rather than a hand-written S3: the client drives the bucket
with boto3 (SigV4, path-style addressing, multipart uploads, listings, range reads) and downloads through
presigned URLs, and moto is a maintained, widely used implementation of exactly that API that runs from
PyPI, in process, with no binary to fetch. One physical bucket per database, `pxt-<org_id>-<db>`, made on
first use. moto accepts any key pair, so the per-organization credentials handed out are a courtesy to
the client (which needs some), not a boundary; they are derived from a key in `<state-dir>/keys/`, never
stored and never logged. Presigned URLs do expire: a small WSGI layer refuses them after `X-Amz-Expires`,
which moto alone does not, so the client's re-sign on 403 is exercised.

The trial's 50 GB (`media_quota_bytes`) is the sum of the object sizes in the organization's buckets, read
with an S3 listing. At or over it, `get_bucket_credentials` answers `no_space_left: true` with a
`no_space_detail` the client shows as is, and a presigned PUT is refused with `STORE_FULL` (a
user-action code the client surfaces verbatim). Writes with credentials already handed out are not
cut off by the endpoint: the client itself stops writing once it sees the flag.

moto keeps objects in memory; `Mirror` saves the buckets under `<state-dir>/media/` when the emulator
stops and restores them when it starts. `uploads/` (a request's staged files) expires after a day of
emulator time, as the real bucket's lifecycle rule makes it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import math
import os
import re
import secrets
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qs

import boto3
import botocore.config
import msgspec
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from emulator.cloud.auth import Caller, resolve_org
from emulator.cloud.context import Cloud
from emulator.core.context import Core
from emulator.core.errors import ApiError

log = logging.getLogger("emulator.media")

HOME = "home"
CREDENTIAL_TTL = 3600
MAX_URL_TTL = 7 * 24 * 3600  # SigV4's own limit on a presigned URL
MAX_KEYS = 100  # keys per get_presigned_urls call (the client's MAX_PRESIGNED_URL_KEYS)
UPLOADS_TTL = 86_400  # the real bucket's lifecycle rule expires uploads/; here after a day of emulator time
SWEEP_EVERY = 600  # seconds of emulator time between two sweeps of uploads/
_LABEL = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_T = TypeVar("_T")


# --- wire types (pixeltable/service/pxtfs_protocol.py and utils/cloud_utils.py of 0.7.21) ------------


class BucketCredentialsRequest(msgspec.Struct):
    org: str
    db: str
    bucket_name: str = HOME
    prefix: str | None = None


class BucketCredentials(msgspec.Struct):
    access_key_id: str
    secret_access_key: str
    session_token: str  # empty: botocore then sends no X-Amz-Security-Token at all
    endpoint_url: str
    storage_provider: str
    resolved_bucket_name: str
    ttl_seconds: int
    prefix: str | None
    no_space_left: bool
    no_space_detail: str | None


class PresignedUrlRequest(msgspec.Struct):
    org: str
    db: str
    key: str
    bucket_name: str = HOME
    method: Literal["get", "put"] = "get"
    expiration: int = 3600


class PresignedUrl(msgspec.Struct):
    url: str
    key: str
    expiration: int


class PresignedUrlsRequest(msgspec.Struct):
    org: str
    db: str
    keys: list[str]
    expires_in: int
    bucket_name: str = HOME


class PresignedUrls(msgspec.Struct):
    urls: dict[str, str]
    expires_in: int


# --- the S3 endpoint -------------------------------------------------------------------------------


class _QuietHandler(WSGIRequestHandler):
    """werkzeug's handler without its access log: presigned URLs carry credentials in their query."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass

    def log(self, type: str, message: str, *args: Any) -> None:
        log.debug("s3 endpoint %s: %s", type, message % args if args else message)


_EXPIRED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>Request has expired</Message></Error>"
)


def _refuse_expired(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """Refuse a presigned request after `X-Amz-Date + X-Amz-Expires`, as S3 does (moto does not check).

    The wall clock, not the emulator's: SigV4 dates come from the signers' (boto3's) wall clocks.
    """

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        query = parse_qs(environ.get("QUERY_STRING", ""))
        if "X-Amz-Date" in query and "X-Amz-Expires" in query:
            try:
                signed = datetime.strptime(query["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
                expired = time.time() > signed.timestamp() + int(query["X-Amz-Expires"][0])
            except ValueError:
                expired = True
            if expired:
                start_response("403 Forbidden", [("Content-Type", "application/xml")])
                return [_EXPIRED]
        return app(environ, start_response)

    return wsgi


def _s3_app() -> Callable[..., Iterable[bytes]]:
    # Imported here: moto is large, and only `emulator up` needs its server.
    from moto.moto_server.werkzeug_app import create_backend_app

    # S3 only: moto's dispatcher would also serve every other AWS service and /moto-api (which resets state).
    return _refuse_expired(create_backend_app("s3"))


def bucket_name(org_id: str, db: str) -> str:
    """`pxt-<org_id>-<db>`, lowercased: a valid S3 name (3-63 characters, [a-z0-9-]).

    A part that is not already such a label, or a name too long, is replaced by a digest of the exact
    value, so two databases never share a bucket. The `pxt-<org>-` prefix always stays: it is how the
    organization's usage is found.
    """
    name = f"{org_prefix(org_id)}{db}"
    if not _LABEL.match(db) or len(name) > 63:
        name = f"{org_prefix(org_id)}{hashlib.sha256(db.encode()).hexdigest()[:16]}"
    return name


def org_prefix(org_id: str) -> str:
    """`pxt-<org_id>-`, the start of every bucket name of the organization."""
    org = org_id.lower().replace("_", "-")
    if not _LABEL.match(org) or len(org) > 40:
        org = hashlib.sha256(org_id.encode()).hexdigest()[:16]
    return f"pxt-{org}-"


class MediaStore:
    """The S3 endpoint (moto, in a thread) and what the control plane asks of it."""

    def __init__(self, core: Core, sock: socket.socket, endpoint: str, quota_bytes: int) -> None:
        self.core = core
        self.endpoint = endpoint
        self.quota_bytes = quota_bytes
        self._sock = sock
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._buckets: set[str] = set()
        self._bucket_lock = asyncio.Lock()
        self._key = _load_or_create_key(core.settings.state_dir / "keys" / "media-credentials.key")
        self._mirror = Mirror(core.settings.state_dir / "media")
        self._swept = -math.inf
        access, secret = self.credentials("emulator")
        # The emulator's own client: creates buckets, lists them for usage, signs URLs (signing is local).
        self._s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=access,
            aws_secret_access_key=secret,
            config=botocore.config.Config(
                signature_version="s3v4",
                s3={"addressing_style": "path"},
                retries={"max_attempts": 2, "mode": "standard"},
                max_pool_connections=16,
            ),
        )

    async def start(self) -> None:
        """Serve on the socket bound by the caller (so port 0 is already resolved), in a daemon thread, and
        put back what the last run saved."""
        self._sock.listen(128)
        host = self._sock.getsockname()[0]
        self._server = make_server(
            host, 0, _s3_app(), threaded=True, request_handler=_QuietHandler, fd=self._sock.fileno()
        )
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-endpoint", daemon=True)
        self._thread.start()
        objects, size = await asyncio.to_thread(self._mirror.restore, self._s3)
        self._buckets.update(self._mirror.buckets())
        if objects:
            self.core.bus.publish("media.restored", None, objects=objects, bytes=size)
        self.core.clock.on_due(self.sweep)

    async def close(self) -> None:
        if self._server is not None:
            try:
                await asyncio.to_thread(self._mirror.save, self._s3)
            except Exception:
                log.exception("the media store could not be saved; objects written in this run are lost")
            await asyncio.to_thread(self._server.shutdown)
            self._server.server_close()
            self._server = None
        self._sock.close()

    async def sweep(self, now: float) -> None:
        """Due job, every ten minutes of emulator time: delete `uploads/` objects older than a day, as the
        real bucket's lifecycle rule does (they are a request's staged files, never cell values), and the
        buckets of databases that no longer exist (deleted, or gone with an expired trial)."""
        if now - self._swept < SWEEP_EVERY:
            return
        self._swept = now
        rows = await self.core.store.fetchall("SELECT org_id, name FROM databases")
        live = {bucket_name(r["org_id"], r["name"]) for r in rows}
        removed, dropped = await asyncio.to_thread(self._sweep, now - UPLOADS_TTL, live)
        if removed:
            self.core.bus.publish("media.uploads_expired", None, objects=removed)
        for name in dropped:
            self._buckets.discard(name)
            self.core.bus.publish("media.bucket_dropped", name)

    def _sweep(self, cutoff: float, live: set[str]) -> tuple[int, list[str]]:
        removed, dropped = 0, []
        for name in (b["Name"] for b in self._s3.list_buckets().get("Buckets", [])):
            orphan = name.startswith("pxt-") and name not in live
            paginator = self._s3.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=name, Prefix="" if orphan else "uploads/"):
                batch = page.get("Contents", [])
                old = [{"Key": o["Key"]} for o in batch if orphan or o["LastModified"].timestamp() < cutoff]
                if old:
                    self._s3.delete_objects(Bucket=name, Delete={"Objects": old, "Quiet": True})
                    removed += 0 if orphan else len(old)
            if orphan:
                self._s3.delete_bucket(Bucket=name)
                dropped.append(name)
        return removed, dropped

    # --- credentials and buckets ----------------------------------------------------------------------

    def credentials(self, org_id: str) -> tuple[str, str]:
        """A stable key pair per organization, derived (never stored): (access key id, secret)."""
        digest = hmac.new(self._key, f"media\0{org_id}".encode(), hashlib.sha256).digest()
        access = "PXTE" + base64.b32encode(digest[:10]).decode()[:16]
        return access, base64.b64encode(digest[10:]).decode()[:40]

    async def ensure_bucket(self, name: str) -> None:
        if name in self._buckets:
            return
        async with self._bucket_lock:
            if name not in self._buckets:
                # us-east-1: creating a bucket one already owns succeeds, so a restart needs no special case.
                await asyncio.to_thread(self._s3.create_bucket, Bucket=name)
                self._buckets.add(name)
                self.core.bus.publish("media.bucket_created", name)

    async def usage(self, org_id: str) -> int:
        """Bytes the organization's buckets hold: the sum of the object sizes an S3 listing reports."""
        return await asyncio.to_thread(self._usage, org_prefix(org_id))

    def _usage(self, prefix: str) -> int:
        total = 0
        for bucket in self._s3.list_buckets().get("Buckets", []):
            if not bucket["Name"].startswith(prefix):
                continue
            for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=bucket["Name"]):
                total += sum(obj["Size"] for obj in page.get("Contents", []))
        return total

    def presign(self, bucket: str, key: str, method: Literal["get", "put"], expires: int) -> str:
        operation = "put_object" if method == "put" else "get_object"
        return self._s3.generate_presigned_url(operation, Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires)

    async def fullness(self, org_id: str, trial: bool) -> str | None:
        """None while there is room; else the text for the user (it ends with what to do)."""
        if not trial:
            return None  # the emulator knows the trial's plan only
        used = await self.usage(org_id)
        if used < self.quota_bytes:
            return None
        return (
            f"The trial's media store is full ({_size(used)} used of {_size(self.quota_bytes)}); only reads and "
            "deletes are allowed. Delete media (drop tables or rows with media) or claim the organization."
        )


class Mirror:
    """The buckets on disk, between runs: moto keeps objects in memory only.

    `save` (at shutdown) writes what changed since the last save, by ETag, and drops what was deleted;
    `restore` (at start) puts it all back. Objects written since the start are lost if the emulator is
    killed rather than stopped. Layout: `<bucket>.json` (key → etag, size, content type) and
    `<bucket>/<sha256 of the key>` for the bytes (keys may be 1024 bytes long, or unfit as file names).
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def buckets(self) -> list[str]:
        return [p.stem for p in self.root.glob("*.json")]

    def _path(self, bucket: str, key: str) -> Path:
        digest = hashlib.sha256(key.encode()).hexdigest()
        return self.root / bucket / digest[:2] / digest

    def _manifest(self, bucket: str) -> dict[str, dict[str, Any]]:
        try:
            return json.loads((self.root / f"{bucket}.json").read_text())
        except (OSError, ValueError):
            return {}

    def _write_manifest(self, bucket: str, entries: dict[str, dict[str, Any]]) -> None:
        path = self.root / f"{bucket}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entries))
        tmp.replace(path)

    def save(self, s3: Any) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        present = set()
        for bucket in (b["Name"] for b in s3.list_buckets().get("Buckets", [])):
            present.add(bucket)
            old, new = self._manifest(bucket), {}
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                for obj in page.get("Contents", []):
                    key, path = obj["Key"], self._path(bucket, obj["Key"])
                    if old.get(key, {}).get("etag") == obj["ETag"] and path.is_file():
                        new[key] = old[key]
                        continue
                    answer = s3.get_object(Bucket=bucket, Key=key)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    with open(path.with_suffix(".part"), "wb") as f:
                        shutil.copyfileobj(answer["Body"], f)
                    path.with_suffix(".part").replace(path)
                    new[key] = {"etag": obj["ETag"], "size": obj["Size"], "content_type": answer.get("ContentType")}
            for key in old.keys() - new.keys():
                self._path(bucket, key).unlink(missing_ok=True)
            self._write_manifest(bucket, new)
        for bucket in set(self.buckets()) - present:
            shutil.rmtree(self.root / bucket, ignore_errors=True)
            (self.root / f"{bucket}.json").unlink(missing_ok=True)

    def restore(self, s3: Any) -> tuple[int, int]:
        objects = size = 0
        for bucket in self.buckets():
            s3.create_bucket(Bucket=bucket)
            entries = self._manifest(bucket)
            for key, entry in list(entries.items()):
                path = self._path(bucket, key)
                if not path.is_file():
                    del entries[key]
                    continue
                extra = {"ContentType": entry["content_type"]} if entry.get("content_type") else {}
                with open(path, "rb") as f:
                    # A multipart object's ETag changes on a single PUT: keep the new one, or the next save
                    # would copy the object again.
                    entry["etag"] = s3.put_object(Bucket=bucket, Key=key, Body=f, **extra)["ETag"]
                objects, size = objects + 1, size + entry["size"]
            self._write_manifest(bucket, entries)
        return objects, size


def _size(n: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _load_or_create_key(path: Path) -> bytes:
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
    return path.read_bytes()


# --- operations ------------------------------------------------------------------------------------


def _parse(body: dict[str, Any], kind: type[_T]) -> _T:
    try:
        return msgspec.convert(body, kind)
    except msgspec.ValidationError as e:
        raise ApiError(400, "bad_request", f"{body.get('operation_type')}: {e}") from None


def _check_key(key: str) -> None:
    if not key or len(key.encode()) > 1024 or key.startswith("/"):
        raise ApiError(400, "bad_request", f"{key[:80]!r} is not an object key (1 to 1024 bytes, no leading /)")


def _check_ttl(seconds: int, name: str) -> None:
    if not 1 <= seconds <= MAX_URL_TTL:
        raise ApiError(400, "bad_request", f"{name} must be from 1 to {MAX_URL_TTL} seconds")


async def _home(cloud: Cloud, caller: Caller, org: str, db: str, bucket: str) -> tuple[str, bool, str]:
    """(org id, trial?, physical bucket) of `pxt://org:db/buckets/<bucket>`, after the caller's checks."""
    media = cloud.media
    if media is None:
        raise ApiError(503, "unavailable", "the media store is not running", retryable=True)
    org_id, slug = await resolve_org(cloud.core, caller, org)
    row = await cloud.core.store.fetchone(
        "SELECT o.trial FROM databases d JOIN orgs o ON o.id = d.org_id WHERE d.org_id = ? AND d.name = ?",
        (org_id, db),
    )
    if row is None:
        raise ApiError(404, "not_found", f"database {db} does not exist in {slug}")
    if bucket != HOME:
        raise ApiError(
            404, "not_found", f"pxt://{slug}:{db}/buckets/{bucket} does not exist (a hosted database has one: home)"
        )
    name = bucket_name(org_id, db)
    await media.ensure_bucket(name)
    return org_id, bool(row["trial"]), name


async def get_bucket_credentials(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    req = _parse(body, BucketCredentialsRequest)
    if req.prefix is not None and req.prefix.startswith("/"):
        raise ApiError(400, "bad_request", "prefix is a key prefix within the bucket, without a leading /")
    org_id, trial, name = await _home(cloud, caller, req.org, req.db, req.bucket_name)
    assert cloud.media is not None
    full = await cloud.media.fullness(org_id, trial)
    if full:
        cloud.core.bus.publish("media.store_full", f"{req.org}:{req.db}", operation="get_bucket_credentials")
    access, secret = cloud.media.credentials(org_id)
    return msgspec.to_builtins(
        BucketCredentials(
            access_key_id=access,
            secret_access_key=secret,
            session_token="",
            endpoint_url=cloud.media.endpoint,
            storage_provider="s3",
            resolved_bucket_name=name,
            ttl_seconds=CREDENTIAL_TTL,
            prefix=req.prefix,
            no_space_left=full is not None,
            no_space_detail=full,
        )
    )


async def get_presigned_url(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    req = _parse(body, PresignedUrlRequest)
    _check_key(req.key)
    _check_ttl(req.expiration, "expiration")
    org_id, trial, name = await _home(cloud, caller, req.org, req.db, req.bucket_name)
    assert cloud.media is not None
    if req.method == "put":
        full = await cloud.media.fullness(org_id, trial)
        if full:
            cloud.core.bus.publish("media.store_full", f"{req.org}:{req.db}", operation="get_presigned_url")
            # 402 like the trial's other limits; the code makes the client show the text as it is.
            raise ApiError(402, "STORE_FULL", full)
    url = cloud.media.presign(name, req.key, req.method, req.expiration)
    return msgspec.to_builtins(PresignedUrl(url=url, key=req.key, expiration=req.expiration))


async def get_presigned_urls(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    req = _parse(body, PresignedUrlsRequest)
    if len(req.keys) > MAX_KEYS:
        raise ApiError(400, "bad_request", f"at most {MAX_KEYS} keys a call ({len(req.keys)} sent)")
    for key in req.keys:
        _check_key(key)
    _check_ttl(req.expires_in, "expires_in")
    _, _, name = await _home(cloud, caller, req.org, req.db, req.bucket_name)
    assert cloud.media is not None
    urls = {key: cloud.media.presign(name, key, "get", req.expires_in) for key in dict.fromkeys(req.keys)}
    return msgspec.to_builtins(PresignedUrls(urls=urls, expires_in=req.expires_in))


async def usage_resource(cloud: Cloud, org_id: str, trial: bool) -> dict[str, Any]:
    """The "Media storage" line of `get_usage`."""
    used = await cloud.media.usage(org_id) if cloud.media is not None else 0
    limit = cloud.media.quota_bytes if cloud.media is not None and trial else None
    return {"label": "Media storage", "used": used, "limit": limit, "unit": "bytes"}


OPERATIONS = {
    "get_bucket_credentials": get_bucket_credentials,
    "get_presigned_url": get_presigned_url,
    "get_presigned_urls": get_presigned_urls,
}
