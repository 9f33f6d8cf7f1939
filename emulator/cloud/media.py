"""The media store's control-plane operations: `get_bucket_credentials`, `get_presigned_url`,
`get_presigned_urls` (pixeltable/service/pxtfs_protocol.py of 0.7.21), over emulator.media.store.

A trial's store is full at `media_quota_bytes`: then `get_bucket_credentials` answers `no_space_left: true`
with a `no_space_detail` the client shows as is, and a presigned PUT is refused with `STORE_FULL`.
"""

from __future__ import annotations

from emulator.cloud import requests as rq
from emulator.cloud.answers import Answer
from emulator.core import kinds
from emulator.core.errors import BAD_REQUEST, NOT_FOUND, STORE_FULL
from emulator.core.payloads import MediaStoreFull
from emulator.hosted import databases, orgs
from emulator.hosted.auth import Caller
from emulator.hosted.plans import UsageLine
from emulator.hosted.platform import Platform
from emulator.media.store import CREDENTIAL_TTL, HOME, MAX_KEYS, MAX_URL_TTL, MediaStore, bucket_name


class BucketCredentials(Answer):
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


class PresignedUrl(Answer):
    url: str
    key: str
    expiration: int


class PresignedUrls(Answer):
    urls: dict[str, str]
    expires_in: int


def _check_key(key: str) -> None:
    if not key or len(key.encode()) > 1024 or key.startswith("/"):
        raise BAD_REQUEST(f"{key[:80]!r} is not an object key (1 to 1024 bytes, no leading /)")


def _check_ttl(seconds: int, name: str) -> None:
    if not 1 <= seconds <= MAX_URL_TTL:
        raise BAD_REQUEST(f"{name} must be from 1 to {MAX_URL_TTL} seconds")


async def _home(p: Platform, caller: Caller, org: str, db: str, bucket: str) -> tuple[MediaStore, str, bool, str]:
    """(the store, org id, trial?, physical bucket) of `pxt://org:db/buckets/<bucket>`, after the caller's checks."""
    media = p.media
    org_id, slug = await p.scope(caller, org, "access", db)
    await databases.require(p.core.store, org_id, slug, db)
    owner = await orgs.get(p.core.store, org_id)
    if bucket != HOME:
        raise NOT_FOUND(f"pxt://{slug}:{db}/buckets/{bucket} does not exist (a hosted database has one: home)")
    name = bucket_name(org_id, db)
    await media.ensure_bucket(name)
    return media, org_id, bool(owner and owner.trial), name


async def get_bucket_credentials(p: Platform, caller: Caller, req: rq.BucketCredentialsRequest) -> BucketCredentials:
    if req.prefix is not None and req.prefix.startswith("/"):
        raise BAD_REQUEST("prefix is a key prefix within the bucket, without a leading /")
    media, org_id, trial, name = await _home(p, caller, req.org, req.db, req.bucket_name)
    full = await media.fullness(org_id, trial)
    if full:
        p.core.bus.publish(kinds.database(req.org, req.db), MediaStoreFull(operation="get_bucket_credentials"))
    access, secret = media.keys.of_bucket(name)  # the database's own: it reaches this bucket alone
    return BucketCredentials(
        access_key_id=access,
        secret_access_key=secret,
        session_token="",
        endpoint_url=media.endpoint,
        storage_provider="s3",
        resolved_bucket_name=name,
        ttl_seconds=CREDENTIAL_TTL,
        prefix=req.prefix,
        no_space_left=full is not None,
        no_space_detail=full,
    )


async def get_presigned_url(p: Platform, caller: Caller, req: rq.PresignedUrlRequest) -> PresignedUrl:
    _check_key(req.key)
    _check_ttl(req.expiration, "expiration")
    media, org_id, trial, name = await _home(p, caller, req.org, req.db, req.bucket_name)
    if req.method == "put":
        full = await media.fullness(org_id, trial)
        if full:
            p.core.bus.publish(kinds.database(req.org, req.db), MediaStoreFull(operation="get_presigned_url"))
            # 402 like the trial's other limits; the code makes the client show the text as it is.
            raise STORE_FULL(full)
    url = media.presign(name, req.key, req.method, req.expiration)
    return PresignedUrl(url=url, key=req.key, expiration=req.expiration)


async def get_presigned_urls(p: Platform, caller: Caller, req: rq.PresignedUrlsRequest) -> PresignedUrls:
    if len(req.keys) > MAX_KEYS:
        raise BAD_REQUEST(f"at most {MAX_KEYS} keys a call ({len(req.keys)} sent)")
    for key in req.keys:
        _check_key(key)
    _check_ttl(req.expires_in, "expires_in")
    media, _, _, name = await _home(p, caller, req.org, req.db, req.bucket_name)
    urls = {key: media.presign(name, key, "get", req.expires_in) for key in dict.fromkeys(req.keys)}
    return PresignedUrls(urls=urls, expires_in=req.expires_in)


async def usage_resource(p: Platform, org_id: str, trial: bool) -> UsageLine:
    """The "Media storage" line of `get_usage`."""
    return UsageLine("Media storage", await p.media.usage(org_id), p.media.quota_bytes if trial else None, "bytes")
