"""The hosted media store: each database's home bucket on the emulator's S3 endpoint (moto), the three
home-bucket operations of the control plane, and the trial's quota.

The first tests speak plain HTTP to the management API and to the presigned URLs (fast). The ordered
`test_real_client_*` steps drive the unmodified `pixeltable` 0.7.21 client: an image inserted through the
tunnel is uploaded to the home bucket, stored there by the hosted database and read back through
`get_presigned_urls`; a hosted service returns an image as a URL that downloads.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.metadata
import io
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit
from xml.etree import ElementTree

import boto3
import botocore.config
import botocore.exceptions
import httpx
import pytest

from tests import agent_flow as flow
from tests.conftest import Emulator
from tests.pxt_client import ensure_client
from tests.test_pxt_cloud import Session, open_session


async def trial(emu: Emulator) -> tuple[httpx.AsyncClient, dict]:
    c = emu.client()
    _, _, t = await flow.new_trial(c, emu)
    return c, t


async def op(c: httpx.AsyncClient, emu: Emulator, key: str, /, **body: object) -> httpx.Response:
    return await c.post(emu.api, json=body, headers={"X-api-key": key})


s3 = flow.s3_client


signed = flow.s3_signed


async def credentials(c: httpx.AsyncClient, emu: Emulator, t: dict, **extra: object) -> httpx.Response:
    body = {"operation_type": "get_bucket_credentials", "org": t["org"], "db": "main", "bucket_name": "home"}
    return await op(c, emu, t["api_key"], **{**body, **extra})


async def presign(
    c: httpx.AsyncClient, emu: Emulator, t: dict, key: str, method: str, expiration: int = 600
) -> httpx.Response:
    return await op(
        c,
        emu,
        t["api_key"],
        operation_type="get_presigned_url",
        org=t["org"],
        db="main",
        bucket_name="home",
        key=key,
        method=method,
        expiration=expiration,
    )


# --- the management API, without the real client ---------------------------------------------------------


async def test_credentials_have_the_clients_shape_and_name_the_databases_bucket(emu: Emulator) -> None:
    c, t = await trial(emu)
    r = await credentials(c, emu, t, prefix="uploads/abc/")
    assert r.status_code == 200, r.text
    creds = r.json()
    assert set(creds) == {
        "access_key_id",
        "secret_access_key",
        "session_token",
        "endpoint_url",
        "storage_provider",
        "resolved_bucket_name",
        "ttl_seconds",
        "prefix",
        "no_space_left",
        "no_space_detail",
    }
    assert creds["endpoint_url"] == emu.endpoints["s3"] and creds["storage_provider"] == "s3"
    assert creds["prefix"] == "uploads/abc/" and creds["ttl_seconds"] > 60 and creds["session_token"] == ""
    assert creds["no_space_left"] is False and creds["no_space_detail"] is None
    bucket = creds["resolved_bucket_name"]
    assert re.fullmatch(r"pxt-org-[0-9a-z]+-main", bucket) and len(bucket) <= 63
    # Stable per organization, and the bucket exists (made on first use): the credentials work with boto3.
    again = (await credentials(c, emu, t)).json()
    assert (again["access_key_id"], again["resolved_bucket_name"]) == (creds["access_key_id"], bucket)
    client = boto3.client(
        "s3",
        endpoint_url=creds["endpoint_url"],
        region_name="auto",
        aws_access_key_id=creds["access_key_id"],
        aws_secret_access_key=creds["secret_access_key"],
        config=botocore.config.Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    client.put_object(Bucket=bucket, Key="uploads/abc/x.bin", Body=b"x" * 700)
    assert client.head_object(Bucket=bucket, Key="uploads/abc/x.bin")["ContentLength"] == 700
    # The secret never reaches the journal.
    assert creds["secret_access_key"] not in json.dumps(emu.journal())
    await c.aclose()


async def test_presigned_put_then_get_round_trip(emu: Emulator) -> None:
    c, t = await trial(emu)
    payload = bytes(range(256)) * 8
    put = await presign(c, emu, t, "media/one.bin", "put")
    assert put.status_code == 200, put.text
    assert put.json()["key"] == "media/one.bin" and put.json()["expiration"] == 600
    assert (await c.put(put.json()["url"], content=payload)).status_code == 200
    get = await presign(c, emu, t, "media/one.bin", "get")
    assert (await c.get(get.json()["url"])).content == payload
    # Several keys in one call; every key answered, duplicates once.
    r = await op(
        c,
        emu,
        t["api_key"],
        operation_type="get_presigned_urls",
        org=t["org"],
        db="main",
        bucket_name="home",
        keys=["media/one.bin", "media/one.bin", "media/absent.bin"],
        expires_in=900,
    )
    assert r.status_code == 200, r.text
    urls = r.json()["urls"]
    assert set(urls) == {"media/one.bin", "media/absent.bin"} and r.json()["expires_in"] == 900
    assert (await c.get(urls["media/one.bin"])).content == payload
    assert (await c.get(urls["media/absent.bin"])).status_code == 404
    # Without a signature the object is not readable.
    bucket = (await credentials(c, emu, t)).json()["resolved_bucket_name"]
    assert (await c.get(f"{emu.endpoints['s3']}/{bucket}/media/one.bin")).status_code == 403
    await c.aclose()


async def test_an_expired_presigned_url_is_refused(emu: Emulator) -> None:
    c, t = await trial(emu)
    url = (await presign(c, emu, t, "k.bin", "put")).json()["url"]
    assert (await c.put(url, content=b"data")).status_code == 200
    stale = re.sub(r"X-Amz-Date=\d{8}T\d{6}Z", "X-Amz-Date=20200101T000000Z", url)
    r = await c.put(stale, content=b"other")
    assert r.status_code == 403 and "Request has expired" in r.text
    await c.aclose()


async def test_presigned_urls_expire_on_the_emulators_clock(start_emulator: Any) -> None:
    """A URL the emulator presigned is dated on its clock: moving the clock past its lifetime expires it, and a
    frozen clock keeps it alive however long the test takes."""
    e = start_emulator("--no-watch", "--freeze-clock", "2026-11-01T00:00:00Z")
    c, t = await trial(e)
    put = await presign(c, e, t, "clock.bin", "put", expiration=60)
    url = put.json()["url"]
    assert "X-Amz-Date=20261101T000000Z" in url  # the emulator's instant, not the wall clock's
    assert (await c.put(url, content=b"data")).status_code == 200
    e.advance("59s")
    assert (await c.put(url, content=b"again")).status_code == 200
    e.advance("2s")
    r = await c.put(url, content=b"late")
    assert r.status_code == 403 and "Request has expired" in r.text
    get = await presign(c, e, t, "clock.bin", "get", expiration=60)
    assert (await c.get(get.json()["url"])).content == b"again"
    await c.aclose()


async def test_a_body_is_bytes_whatever_its_content_type_and_malformed_requests_are_s3_400s(emu: Emulator) -> None:
    c, t = await trial(emu)
    # curl's `-d` labels a body as a form: S3 stores its bytes (and that content type), as for any other
    body = b"acl=private&tagging=x&key=other"
    put = (await presign(c, emu, t, "media/form.txt", "put")).json()["url"]
    r = await c.put(put, content=body, headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 200, r.text
    back = await c.get((await presign(c, emu, t, "media/form.txt", "get")).json()["url"])
    assert back.content == body and back.headers["content-type"] == "application/x-www-form-urlencoded"
    # what moto cannot read (signed by the bucket's key) is a 400 in S3's XML error format, never a 500
    creds = (await credentials(c, emu, t)).json()
    s3_url = f"{emu.endpoints['s3']}/{creds['resolved_bucket_name']}"
    for method, path, content in [
        ("POST", "?delete", b"<not xml"),
        ("PUT", "?tagging", b"<"),
        ("GET", "?list-type=2&max-keys=-5", b""),
        ("PUT", "?lifecycle", b"<LifecycleConfiguration><Rule></Rule></LifecycleConfiguration>"),
    ]:
        headers = signed(creds, method, s3_url + path, content)
        r = await c.request(method, s3_url + path, content=content, headers=headers)
        assert r.status_code == 400 and r.text.startswith("<?xml") and "<Code>" in r.text, (method, path, r.text)
        assert "<Code>SignatureDoesNotMatch" not in r.text and "<Code>AccessDenied" not in r.text, r.text
    assert "Traceback" not in emu.log()
    await c.aclose()


async def test_bad_requests_and_other_buckets_are_clear_4xx(emu: Emulator) -> None:
    c, t = await trial(emu)
    r = await credentials(c, emu, t, bucket_name="photos")
    assert r.status_code == 404 and r.text.startswith("Not Found : ") and "buckets/photos does not exist" in r.text
    r = await credentials(c, emu, t, db="other")
    assert r.status_code == 404 and "database other does not exist" in r.text
    r = await op(c, emu, t["api_key"], operation_type="get_presigned_url", org=t["org"], db="main", key="")
    assert r.status_code == 400 and "not an object key" in r.text
    r = await op(
        c, emu, t["api_key"], operation_type="get_presigned_url", org=t["org"], db="main", key="a", method="post"
    )
    assert r.status_code == 400 and r.text.startswith("Bad Request : get_presigned_url: ")
    keys = [f"k{i}" for i in range(101)]
    r = await op(
        c,
        emu,
        t["api_key"],
        operation_type="get_presigned_urls",
        org=t["org"],
        db="main",
        keys=keys,
        expires_in=900,
    )
    assert r.status_code == 400 and "at most 100 keys" in r.text
    await c.aclose()


async def test_another_organizations_key_is_refused(emu: Emulator) -> None:
    c, t = await trial(emu)
    _, other = await trial(emu)
    body = {"org": t["org"], "db": "main", "bucket_name": "home"}
    for extra in (
        {"operation_type": "get_bucket_credentials"},
        {"operation_type": "get_presigned_url", "key": "a", "method": "get"},
        {"operation_type": "get_presigned_urls", "keys": ["a"], "expires_in": 60},
    ):
        r = await op(c, emu, other["api_key"], **body, **extra)
        assert r.status_code == 403 and r.text.startswith("Forbidden : "), r.text
    r = await c.post(emu.api, json={"operation_type": "get_bucket_credentials", **body})
    assert r.status_code == 401
    await c.aclose()


async def test_a_bucket_answers_its_own_databases_key_and_presigned_urls_only(emu: Emulator) -> None:
    """moto takes any key pair; the endpoint does not: another organization's credentials, a made-up key, a wrong
    secret, no signature and a copy out of another bucket are all refused in S3's terms, and nothing changes."""
    c, t = await trial(emu)
    _, other = await trial(emu)
    mine = (await credentials(c, emu, t)).json()
    theirs = (await credentials(c, emu, other)).json()
    bucket = mine["resolved_bucket_name"]
    assert theirs["access_key_id"] != mine["access_key_id"] and theirs["resolved_bucket_name"] != bucket
    s3(mine).put_object(Bucket=bucket, Key="private.bin", Body=b"mine")

    def refused(call: Any, code: str, **kwargs: Any) -> None:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            call(**kwargs)
        assert e.value.response["Error"]["Code"] == code, e.value.response

    foreign = s3(theirs, retries={"max_attempts": 1})
    made_up = s3({**mine, "access_key_id": "AKIAIOSFODNN7EXAMPLE"}, retries={"max_attempts": 1})
    wrong_secret = s3({**mine, "secret_access_key": "x" * 40}, retries={"max_attempts": 1})
    for client, code in (
        (foreign, "AccessDenied"),
        (made_up, "InvalidAccessKeyId"),
        (wrong_secret, "SignatureDoesNotMatch"),
    ):
        refused(client.get_object, code, Bucket=bucket, Key="private.bin")
        refused(client.put_object, code, Bucket=bucket, Key="private.bin", Body=b"theirs")
        refused(client.delete_object, code, Bucket=bucket, Key="private.bin")
        refused(client.list_objects_v2, code, Bucket=bucket)
    # a copy into their own bucket out of mine: the source is checked too
    refused(
        foreign.copy_object,
        "AccessDenied",
        Bucket=theirs["resolved_bucket_name"],
        Key="stolen.bin",
        CopySource={"Bucket": bucket, "Key": "private.bin"},
    )
    # the list of every bucket is the emulator's own
    refused(s3(mine, retries={"max_attempts": 1}).list_buckets, "AccessDenied")
    # no signature at all: 403 for each method, in S3's XML
    for method in ("GET", "PUT", "DELETE"):
        r = await c.request(method, f"{emu.endpoints['s3']}/{bucket}/private.bin", content=b"x")
        assert r.status_code == 403 and "<Code>AccessDenied</Code>" in r.text, r.text
    # a presigned URL the control plane signed still works, and the object is untouched
    got = await c.get((await presign(c, emu, t, "private.bin", "get")).json()["url"])
    assert got.status_code == 200 and got.content == b"mine"
    assert s3(mine).get_object(Bucket=bucket, Key="private.bin")["Body"].read() == b"mine"
    await c.aclose()


# --- presigning as S3 does it: boto3 and s3fs at their defaults ------------------------------------------------


def default_client(creds: dict[str, Any], region: str = "us-east-1") -> Any:
    """boto3 as an application builds it: no signature version, no addressing style (in us-east-1 its presigned
    URLs and forms are SigV2, its requests SigV4)."""
    return boto3.client(
        "s3",
        endpoint_url=creds["endpoint_url"],
        region_name=region,
        aws_access_key_id=creds["access_key_id"],
        aws_secret_access_key=creds["secret_access_key"],
    )


def signing_client(creds: dict[str, Any], version: str = "s3v4", **config: Any) -> Any:
    """boto3 told which signature to use: SigV4 (`s3v4`) or SigV2 headers (`s3`)."""
    return boto3.client(
        "s3",
        endpoint_url=creds["endpoint_url"],
        region_name="us-east-1",
        aws_access_key_id=creds["access_key_id"],
        aws_secret_access_key=creds["secret_access_key"],
        config=botocore.config.Config(signature_version=version, **config),
    )


def s3_error(r: httpx.Response) -> tuple[int, str, str]:
    """The status, and the code and message of S3's XML error body."""
    root = ElementTree.fromstring(r.content)
    return r.status_code, root.findtext("Code") or "", root.findtext("Message") or ""


def tampered(url: str, name: str) -> str:
    """The URL with the first character of its `name` parameter's value changed."""
    value = parse_qs(urlsplit(url).query)[name][0]
    swapped = ("B" if value[0] != "B" else "C") + value[1:]
    return url.replace(f"{name}={quote(value, safe='')}", f"{name}={quote(swapped, safe='')}")


def presigned(client: Any, method: str, bucket: str, key: str, **params: Any) -> str:
    return client.generate_presigned_url(method, Params={"Bucket": bucket, "Key": key, **params}, ExpiresIn=3600)


async def test_boto3_default_and_sigv4_presigned_urls_get_and_put(emu: Emulator) -> None:
    """boto3's default presigned URL (query-string SigV2) and a SigV4 one both read and write the bucket over plain
    HTTP, with a signed subresource (`response-content-type`); a changed subresource or signature, a lengthened
    lifetime, another organization's key and a made-up key are refused as S3 refuses them, and nothing is written."""
    c, t = await trial(emu)
    _, other = await trial(emu)
    creds, theirs = (await credentials(c, emu, t)).json(), (await credentials(c, emu, other)).json()
    bucket = creds["resolved_bucket_name"]
    key = "media/a b+c/é.bin"
    for client, marker in ((default_client(creds), "AWSAccessKeyId="), (signing_client(creds), "X-Amz-Algorithm=")):
        put = presigned(client, "put_object", bucket, key)
        assert marker in put, put
        body = marker.encode() * 50
        r = await c.put(put, content=body)
        assert r.status_code == 200, r.text
        get = presigned(client, "get_object", bucket, key, ResponseContentType="text/x-test")
        r = await c.get(get)
        assert r.status_code == 200 and r.content == body, r.text
        # the subresource is signed (SigV2 signs it in the resource, SigV4 in the query): changing it is refused
        other_type = get.replace("text%2Fx-test", "text%2Fhtml")
        assert other_type != get and s3_error(await c.get(other_type))[:2] == (403, "SignatureDoesNotMatch")
        signature = "Signature" if marker.startswith("AWS") else "X-Amz-Signature"
        assert s3_error(await c.get(tampered(get, signature)))[:2] == (403, "SignatureDoesNotMatch")
        r = await c.put(tampered(put, signature), content=b"tampered")
        assert s3_error(r)[:2] == (403, "SignatureDoesNotMatch")
        # the signature covers the lifetime: a URL made to last longer is not the URL that was signed
        longer = re.sub(r"(Expires=)(\d+)", lambda m: m[1] + str(int(m[2]) + 86_400), get)
        assert longer != get and s3_error(await c.get(longer))[:2] == (403, "SignatureDoesNotMatch")
        # another organization's credentials presign a URL for this bucket: refused, as their signed requests are
        foreign = default_client(theirs) if marker.startswith("AWS") else signing_client(theirs)
        status, code, message = s3_error(await c.put(presigned(foreign, "put_object", bucket, key), content=b"x"))
        assert (status, code) == (403, "AccessDenied") and f"does not reach bucket {bucket}" in message
        assert s3_error(await c.get(presigned(foreign, "get_object", bucket, key)))[:2] == (403, "AccessDenied")
        made_up = {**creds, "access_key_id": "AKIAIOSFODNN7EXAMPLE"}
        client_of = default_client if marker.startswith("AWS") else signing_client
        r = await c.get(presigned(client_of(made_up), "get_object", bucket, key))
        assert s3_error(r)[:2] == (403, "InvalidAccessKeyId")
        assert s3(creds).get_object(Bucket=bucket, Key=key)["Body"].read() == body  # nothing else was written
    # SigV2 signs the content type and the x-amz-* headers a URL was made for: a PUT must send those
    typed = presigned(default_client(creds), "put_object", bucket, "typed.png", ContentType="image/png")
    r = await c.put(typed, content=b"png", headers={"Content-Type": "image/gif"})
    assert s3_error(r)[:2] == (403, "SignatureDoesNotMatch")
    assert (await c.put(typed, content=b"png", headers={"Content-Type": "image/png"})).status_code == 200
    assert s3(creds).head_object(Bucket=bucket, Key="typed.png")["ContentType"] == "image/png"
    await c.aclose()


async def test_sigv2_signed_requests_work_with_botos_s3_signer(emu: Emulator) -> None:
    """A client configured for SigV2 headers (`signature_version="s3"`) reads, writes and lists its bucket; with
    another organization's key it is refused."""
    c, t = await trial(emu)
    _, other = await trial(emu)
    creds, theirs = (await credentials(c, emu, t)).json(), (await credentials(c, emu, other)).json()
    bucket = creds["resolved_bucket_name"]
    v2 = signing_client(creds, "s3")
    v2.put_object(Bucket=bucket, Key="v2/x y.txt", Body=b"v2", ContentType="text/plain", Metadata={"who": "v2"})
    got = v2.get_object(Bucket=bucket, Key="v2/x y.txt")
    assert got["Body"].read() == b"v2" and got["Metadata"] == {"who": "v2"}
    assert [o["Key"] for o in v2.list_objects_v2(Bucket=bucket, Prefix="v2/")["Contents"]] == ["v2/x y.txt"]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        signing_client(theirs, "s3", retries={"max_attempts": 1}).get_object(Bucket=bucket, Key="v2/x y.txt")
    assert e.value.response["Error"]["Code"] == "AccessDenied"
    await c.aclose()


async def test_s3fs_url_downloads_and_uploads_with_default_settings(emu: Emulator) -> None:
    """s3fs (fsspec) with the credentials and endpoint only: it writes through signed requests, and `fs.url()`
    (boto3's default presigning underneath) gives URLs that download and upload."""
    import s3fs

    c, t = await trial(emu)
    creds = (await credentials(c, emu, t)).json()
    bucket = creds["resolved_bucket_name"]
    fs = s3fs.S3FileSystem(
        key=creds["access_key_id"],
        secret=creds["secret_access_key"],
        endpoint_url=creds["endpoint_url"],
        skip_instance_cache=True,
    )
    await asyncio.to_thread(fs.pipe, f"{bucket}/fs/one.txt", b"from s3fs")
    url = str(await asyncio.to_thread(fs.url, f"{bucket}/fs/one.txt", expires=600))
    assert "AWSAccessKeyId=" in url, url
    r = await c.get(url)
    assert r.status_code == 200 and r.content == b"from s3fs", r.text
    put = str(await asyncio.to_thread(fs.url, f"{bucket}/fs/two.txt", expires=600, client_method="put_object"))
    assert (await c.put(put, content=b"via a URL")).status_code == 200
    assert await asyncio.to_thread(fs.cat, f"{bucket}/fs/two.txt") == b"via a URL"
    assert s3_error(await c.get(tampered(url, "Signature")))[:2] == (403, "SignatureDoesNotMatch")
    await c.aclose()


async def test_presigned_post_uploads_a_form_and_keeps_to_its_policy(emu: Emulator) -> None:
    """`generate_presigned_post`, SigV2 (boto3's default) and SigV4: the form uploads with httpx (`${filename}`
    filled in, the content type the form gave), the object is mirrored to disk, and a form that breaks its
    policy, a changed signature, another organization's form and an unsigned form are refused in S3's terms."""
    c, t = await trial(emu)
    _, other = await trial(emu)
    creds, theirs = (await credentials(c, emu, t)).json(), (await credentials(c, emu, other)).json()
    bucket = creds["resolved_bucket_name"]
    for client, signature in ((default_client(creds), "signature"), (signing_client(creds), "x-amz-signature")):
        post = client.generate_presigned_post(
            bucket,
            "forms/${filename}",
            Fields={"Content-Type": "text/plain"},
            Conditions=[{"Content-Type": "text/plain"}, ["content-length-range", 1, 1000]],
            ExpiresIn=600,
        )
        assert signature in post["fields"] and post["url"].endswith(bucket), post
        name = f"{signature}.txt"
        r = await c.post(post["url"], data=post["fields"], files={"file": (name, b"posted " + name.encode())})
        assert r.status_code == 204, r.text
        got = s3(creds).get_object(Bucket=bucket, Key=f"forms/{name}")
        assert got["Body"].read() == b"posted " + name.encode() and got["ContentType"] == "text/plain"
        manifest = json.loads((emu.state_dir / "media" / f"{bucket}.json").read_text())
        assert f"forms/{name}" in manifest  # written through like any other upload

        async def refused(
            fields: dict[str, str], content: bytes = b"data", url: str = post["url"]
        ) -> tuple[int, str, str]:
            r = await c.post(url, data=fields, files={"file": ("f.txt", content)})
            return s3_error(r)

        fields = post["fields"]
        assert await refused({**fields, "key": "elsewhere/f.txt"}) == (
            403,
            "AccessDenied",
            'Invalid according to Policy: Policy Condition failed: ["starts-with", "$key", "forms/"]',
        )
        assert (await refused({**fields, "Content-Type": "text/html"}))[:2] == (403, "AccessDenied")
        extra = await refused({**fields, "x-amz-meta-smuggled": "1"})
        assert extra == (403, "AccessDenied", "Invalid according to Policy: Extra input fields: x-amz-meta-smuggled")
        assert (await refused(fields, b"x" * 1001))[:2] == (400, "EntityTooLarge")
        assert (await refused({**fields, signature: "0" + fields[signature][1:]}))[:2] == (403, "SignatureDoesNotMatch")
        policy = json.loads(base64.b64decode(fields["policy"]))
        policy["conditions"][1] = ["content-length-range", 1, 10**9]  # a looser policy is not the one signed
        looser = base64.b64encode(json.dumps(policy).encode()).decode()
        assert (await refused({**fields, "policy": looser}))[:2] == (403, "SignatureDoesNotMatch")
        unsigned = {k: v for k, v in fields.items() if k in ("key", "Content-Type")}
        assert (await refused(unsigned))[:2] == (403, "AccessDenied")
        # another organization's credentials sign a form for this bucket
        foreign = (default_client if signature == "signature" else signing_client)(theirs)
        theirs_post = foreign.generate_presigned_post(bucket, "forms/stolen.txt", ExpiresIn=600)
        status, code, message = await refused(theirs_post["fields"])
        assert (status, code) == (403, "AccessDenied") and f"does not reach bucket {bucket}" in message
    keys = [o["Key"] for o in s3(creds).list_objects_v2(Bucket=bucket, Prefix="forms/")["Contents"]]
    assert sorted(keys) == ["forms/signature.txt", "forms/x-amz-signature.txt"]  # nothing refused was written
    # a form that is not a form: S3's 400, never a 500
    r = await c.post(
        post["url"], content=b"--x\r\nnonsense", headers={"Content-Type": "multipart/form-data; boundary=x"}
    )
    assert r.status_code == 400 and s3_error(r)[1] == "InvalidArgument", r.text
    await c.aclose()


async def test_client_presigned_urls_and_forms_expire_on_the_emulators_clock(start_emulator: Any) -> None:
    """URLs and forms a client presigns at its wall clock expire when the emulator's clock passes their end, as S3's
    clock would: moving the clock two hours expires an hour's URL (SigV2 and SigV4) and an hour's form."""
    e: Emulator = start_emulator("--no-watch")  # the clock follows the wall clock, as the signer's does
    c, t = await trial(e)
    creds = (await credentials(c, e, t)).json()
    bucket = creds["resolved_bucket_name"]
    s3(creds).put_object(Bucket=bucket, Key="clock.bin", Body=b"tick")
    clients = (default_client(creds), signing_client(creds))
    urls = [presigned(client, "get_object", bucket, "clock.bin") for client in clients]
    forms = [client.generate_presigned_post(bucket, "clock-form.bin", ExpiresIn=3600) for client in clients]
    for url in urls:
        assert (await c.get(url)).content == b"tick"
    for post in forms:
        r = await c.post(post["url"], data=post["fields"], files={"file": ("f", b"form")})
        assert r.status_code == 204, r.text
    e.advance("2h")
    for url in urls:
        r = await c.get(url)
        assert s3_error(r) == (403, "AccessDenied", "Request has expired"), r.text
        assert "<ServerTime>" in r.text and "<Expires>" in r.text
    for post in forms:
        r = await c.post(post["url"], data=post["fields"], files={"file": ("f", b"late")})
        assert s3_error(r) == (403, "AccessDenied", "Invalid according to Policy: Policy expired."), r.text
    assert s3(creds).get_object(Bucket=bucket, Key="clock-form.bin")["Body"].read() == b"form"
    await c.aclose()


async def test_usage_reports_media_storage(emu: Emulator) -> None:
    c, t = await trial(emu)
    url = (await presign(c, emu, t, "sized.bin", "put")).json()["url"]
    assert (await c.put(url, content=b"z" * 1234)).status_code == 200
    usage = (await op(c, emu, t["api_key"], operation_type="get_usage")).json()
    media = next(r for r in usage["resources"] if r["label"] == "Media storage")
    assert media == {"label": "Media storage", "used": 1234, "limit": 50_000_000_000, "unit": "bytes"}
    await c.aclose()


async def test_a_full_store_answers_no_space_left_and_refuses_uploads(start_emulator) -> None:
    e: Emulator = start_emulator("--no-watch", env={"EMULATOR_MEDIA_QUOTA_BYTES": "1000"})
    c, t = await trial(e)
    url = (await presign(c, e, t, "first.bin", "put")).json()["url"]
    assert (await c.put(url, content=b"a" * 999)).status_code == 200
    assert (await credentials(c, e, t)).json()["no_space_left"] is False  # 999 < 1000
    more = await presign(c, e, t, "second.bin", "put")
    assert (await c.put(more.json()["url"], content=b"b" * 10)).status_code == 200

    creds = (await credentials(c, e, t)).json()
    assert creds["no_space_left"] is True
    assert "media store is full (1.0 kB used of 1.0 kB)" in creds["no_space_detail"]
    refused = await presign(c, e, t, "third.bin", "put")
    assert refused.status_code == 402 and refused.headers["x-pixeltable-error-code"] == "STORE_FULL"
    assert refused.text == f"Payment Required : {creds['no_space_detail']}"
    # Reads still work.
    assert (await presign(c, e, t, "first.bin", "get")).status_code == 200
    usage = (await op(c, e, t["api_key"], operation_type="get_usage")).json()
    assert {"label": "Media storage", "used": 1009, "limit": 1000, "unit": "bytes"} in usage["resources"]
    assert [ev["data"]["operation"] for ev in e.journal("media.store_full")] == [
        "get_bucket_credentials",
        "get_presigned_url",
    ]
    await c.aclose()


async def test_objects_survive_a_restart(start_emulator, tmp_path: Path) -> None:
    state = tmp_path / "kept"
    e: Emulator = start_emulator("--no-watch", state_dir=state)
    c, t = await trial(e)
    url = (await presign(c, e, t, "photos/a.png", "put")).json()["url"]
    assert (await c.put(url, content=b"png" * 300, headers={"Content-Type": "image/png"})).status_code == 200
    gone = (await presign(c, e, t, "photos/gone.bin", "put")).json()["url"]
    assert (await c.put(gone, content=b"x" * 10)).status_code == 200
    creds = (await credentials(c, e, t)).json()
    s3(creds).delete_object(Bucket=creds["resolved_bucket_name"], Key="photos/gone.bin")
    await c.aclose()
    assert e.stop() == 0

    e = start_emulator("--no-watch", state_dir=state)
    async with e.client() as c:
        back = await c.get((await presign(c, e, t, "photos/a.png", "get")).json()["url"])
        assert back.content == b"png" * 300 and back.headers["content-type"] == "image/png"
        assert (await c.get((await presign(c, e, t, "photos/gone.bin", "get")).json()["url"])).status_code == 404
    assert e.journal("media.restored")[-1]["data"] == {"objects": 1, "bytes": 900}


async def test_an_acknowledged_write_survives_a_killed_emulator(start_emulator, tmp_path: Path) -> None:
    """Every write the endpoint answered is on disk before the answer: `kill -9` loses none of them."""
    state = tmp_path / "killed"
    e: Emulator = start_emulator("--no-watch", state_dir=state)
    c, t = await trial(e)
    creds = (await credentials(c, e, t)).json()
    bucket = creds["resolved_bucket_name"]
    url = (await presign(c, e, t, "photos/kept.png", "put")).json()["url"]
    assert (await c.put(url, content=b"png" * 300, headers={"Content-Type": "image/png"})).status_code == 200
    client = s3(creds)
    client.put_object(Bucket=bucket, Key="photos/gone.bin", Body=b"x" * 10)
    client.delete_object(Bucket=bucket, Key="photos/gone.bin")
    # A 12 MiB file through boto3's transfer manager: a multipart upload with a CRC32 per part (boto3's default
    # since 1.36, asked for here so that older ones send it too). Its parts are not objects, its completion is; it
    # reads back with boto3's default checksum validation (the composite checksum is declared as such), and it is
    # mirrored to disk.
    big = b"".join(bytes([n]) * 4 * 2**20 for n in (1, 2, 3))
    client.upload_fileobj(io.BytesIO(big), bucket, "big.bin", ExtraArgs={"ChecksumAlgorithm": "CRC32"})
    assert client.get_object(Bucket=bucket, Key="big.bin")["Body"].read() == big
    for read in (client.get_object, client.head_object):
        headers = read(Bucket=bucket, Key="big.bin", ChecksumMode="ENABLED")["ResponseMetadata"]["HTTPHeaders"]
        assert headers["x-amz-checksum-type"] == "COMPOSITE", headers
        assert re.fullmatch(r"[A-Za-z0-9+/]{6}==-2", headers["x-amz-checksum-crc32"]), headers
    # a key that is not ASCII; then an aborted upload to it and a new tag, neither of which deletes it
    accented = "photos/café ünï.png"
    client.put_object(Bucket=bucket, Key=accented, Body=b"caf")
    aborted = client.create_multipart_upload(Bucket=bucket, Key=accented)
    client.abort_multipart_upload(Bucket=bucket, Key=accented, UploadId=aborted["UploadId"])
    client.put_object_tagging(Bucket=bucket, Key=accented, Tagging={"TagSet": [{"Key": "a", "Value": "b"}]})
    await c.aclose()
    assert e.proc is not None
    e.proc.kill()  # no chance to save anything at shutdown
    e.proc.wait(10)

    e = start_emulator("--no-watch", state_dir=state)
    async with e.client() as c:
        back = await c.get((await presign(c, e, t, "photos/kept.png", "get")).json()["url"])
        assert back.content == b"png" * 300 and back.headers["content-type"] == "image/png"
        assert (await c.get((await presign(c, e, t, "photos/gone.bin", "get")).json()["url"])).status_code == 404
    client = s3({**creds, "endpoint_url": e.endpoints["s3"]})  # the same key pair after a restart
    assert client.get_object(Bucket=bucket, Key="big.bin")["Body"].read() == big
    assert client.get_object(Bucket=bucket, Key=accented)["Body"].read() == b"caf"
    assert e.journal("media.restored")[-1]["data"]["objects"] == 3
    assert "not mirrored" not in e.log()


async def test_a_write_that_cannot_be_mirrored_is_not_acknowledged(start_emulator) -> None:
    """A change the mirror cannot write to disk is a 500 the client retries, never a 2xx for a write that a killed
    emulator would lose. The mirror's folder for the bucket is a file here (root writes through a read-only mode)."""
    e: Emulator = start_emulator("--no-watch")
    c, t = await trial(e)
    creds = (await credentials(c, e, t)).json()
    bucket = creds["resolved_bucket_name"]
    once = s3(creds, retries={"max_attempts": 1})
    blocker = e.state_dir / "media" / bucket
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_bytes(b"")
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        once.put_object(Bucket=bucket, Key="photos/a.png", Body=b"png" * 100)
    error = refused.value.response
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 500 and error["Error"]["Code"] == "InternalError"
    assert "not written to the media store's disk" in error["Error"]["Message"]
    # a presigned PUT (the client's path) gets the same answer, in S3's XML
    url = (await presign(c, e, t, "photos/b.png", "put")).json()["url"]
    r = await c.put(url, content=b"b" * 10)
    assert r.status_code == 500 and "<Code>InternalError</Code>" in r.text
    # once the disk can take it, the client's retry is acknowledged, and durable
    blocker.unlink()
    once.put_object(Bucket=bucket, Key="photos/a.png", Body=b"png" * 100)
    manifest = json.loads((e.state_dir / "media" / f"{bucket}.json").read_text())
    assert "photos/a.png" in manifest
    assert "not mirrored to disk" in e.log() and "Traceback" not in e.log()
    await c.aclose()


BROKEN_MOTO = textwrap.dedent(
    """
    # What a moto release that no longer takes the emulator's requests does (moto 5.2 with the 5.1 request class).
    import moto.s3.models

    def refuse(self, *args, **kwargs):
        raise TypeError("Cannot normalize request of type S3Request")

    moto.s3.models.S3Backend.create_bucket = refuse
    """
)


def test_up_stops_with_the_library_named_when_the_media_store_cannot_answer(tmp_path: Path) -> None:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(BROKEN_MOTO)
    env = {**os.environ, "PYTHONPATH": str(shim), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    ports = ["--site-port", "0", "--auth-port", "0", "--api-port", "0", "--tunnel-port", "0", "--s3-port", "0"]
    state = tmp_path / "state"
    for detach in ([], ["-d"]):
        cmd = [sys.executable, "-m", "emulator", "up", *detach, *ports, "--state-dir", str(state), "--no-watch"]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 1, out.stdout + out.stderr
        said = out.stderr.strip().splitlines()[-1]
        moto_version = importlib.metadata.version("moto")
        assert said.startswith("emulator: the media store (moto's S3) does not answer: creating a bucket: "), said
        assert f"moto {moto_version} raised TypeError: Cannot normalize request of type S3Request" in said
        assert re.search(r"pip install 'moto\[s3\][<>=,.0-9]+'$", said) and "Traceback" not in out.stderr
        assert not (state / "endpoints.json").exists()  # it never said it was up
    assert not list((tmp_path / "cache").glob("pxt-emulator/media-checked/*"))  # a failed check is not remembered
    # the same environment without the breakage: the check passes, and is remembered for the next start
    env.pop("PYTHONPATH")
    cmd = [sys.executable, "-m", "emulator", "up", "-d", *ports, "--state-dir", str(state), "--no-watch"]
    assert subprocess.run(cmd, env=env, capture_output=True, timeout=120).returncode == 0
    assert len(list((tmp_path / "cache").glob("pxt-emulator/media-checked/*"))) == 1
    stop = [sys.executable, "-m", "emulator", "down", "--state-dir", str(state)]
    assert subprocess.run(stop, capture_output=True, timeout=60).returncode == 0


async def test_uploads_expire_after_a_day_and_a_bucket_goes_with_its_database(start_emulator) -> None:
    e: Emulator = start_emulator("--no-watch")
    c, t = await trial(e)
    for key in ("uploads/req1/tar0.tar", "media/kept.png"):
        url = (await presign(c, e, t, key, "put")).json()["url"]
        assert (await c.put(url, content=b"y" * 600)).status_code == 200
    creds = (await credentials(c, e, t)).json()
    bucket, client = creds["resolved_bucket_name"], s3(creds)
    e.advance("23h")
    assert len(client.list_objects_v2(Bucket=bucket)["Contents"]) == 2
    e.advance("2h")  # the sweep runs before the clock move returns
    assert [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]] == ["media/kept.png"]
    assert e.journal("media.uploads_expired")[-1]["data"] == {"objects": 1}
    # The unclaimed trial expires after 48 hours, its database with it; its bucket follows within ten minutes.
    e.advance("24h")
    e.advance("11m")
    with pytest.raises(botocore.exceptions.ClientError) as gone:
        client.head_bucket(Bucket=bucket)
    assert gone.value.response["Error"]["Code"] == "404"
    assert [ev["subject"] for ev in e.journal("media.bucket_dropped")] == [bucket]
    await c.aclose()


# --- the real client: an image column through the tunnel, and a service returning media -------------------

APP = textwrap.dedent(
    """
    import PIL.Image

    import pixeltable as pxt
    from pixeltable.serving import FastAPIRouter

    TableModel = pxt.model_base()


    @pxt.udf
    def swatch(color: str) -> PIL.Image.Image:
        return PIL.Image.new('RGB', (64, 48), color)


    class Photos(TableModel, name='photos'):
        name: pxt.String
        img: pxt.Image


    class Swatches(TableModel, name='swatches'):
        color: pxt.String
        tile = swatch(color)


    media = FastAPIRouter(name='media')
    media.add_insert_route(Swatches, path='/swatch', inputs=[Swatches.color], outputs=[Swatches.tile])
    """
)


@pytest.fixture(scope="module")
def hosted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    yield from open_session(tmp_path_factory.mktemp("media"), ensure_client())


def home_bucket(s: Session) -> dict[str, Any]:
    """The credentials of the session's database's home bucket (and its name, `resolved_bucket_name`)."""
    r = httpx.post(
        s.e.api,
        json={"operation_type": "get_bucket_credentials", "org": s.org, "db": "main", "bucket_name": "home"},
        headers={"X-api-key": s.trial_key},
    )
    return r.json()


def objects(s: Session) -> dict[str, bytes]:
    creds = home_bucket(s)
    client, bucket = s3(creds), creds["resolved_bucket_name"]
    listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def test_real_client_1_a_hosted_database_with_an_image_table(hosted: Session) -> None:
    out = hosted.run("new")
    hosted.org = flow.must(re.search(r"organization (agent-[0-9a-f]{6})", out)).group(1)
    hosted.run("init")
    (hosted.project / "app.py").write_text(APP)
    out = hosted.run("db", "update", hosted.db, "-f", "--add-config-entry")
    assert "applied  AVAILABLE" in out
    out = hosted.run("schema", "update", "app.py", hosted.db)
    assert f"created   {hosted.db}/photos" in out and f"created   {hosted.db}/swatches" in out


def test_real_client_2_an_image_goes_through_the_tunnel_into_the_home_bucket_and_back(hosted: Session) -> None:
    noise = hosted.project.parent / "noise.png"  # outside the project, whose files the database serves
    printed = hosted.python(
        textwrap.dedent(f"""
        import numpy as np, PIL.Image
        import pixeltable as pxt
        pixels = np.random.default_rng(7).integers(0, 255, (48, 64, 3), dtype=np.uint8)
        PIL.Image.fromarray(pixels).save('{noise}')
        t = pxt.get_table('{hosted.db}/photos')
        t.insert([{{'name': 'noise', 'img': '{noise}'}}])
        row = t.select(t.img, url=t.img.fileurl).collect()[0]
        print('SAME', bool((np.asarray(row['img']) == pixels).all()), row['img'].size)
        print('URL', row['url'])
    """)
    )
    assert "SAME True (64, 48)" in printed, printed
    url = flow.must(re.search(r"^URL (\S+)$", printed, re.M)).group(1)
    assert url.startswith(f"pxt://{hosted.org}:main/buckets/home/"), url
    original = noise.read_bytes()
    assert len(original) >= 512  # uploaded, not inlined in the request
    stored = objects(hosted)
    key = url.removeprefix(f"pxt://{hosted.org}:main/buckets/home/")
    # The daemon stored the file in the home bucket, byte for byte; the client's upload (a tar of the request's
    # files) sits under uploads/.
    assert stored[key] == original, sorted(stored)
    assert any(k.startswith("uploads/") and original in v for k, v in stored.items()), sorted(stored)
    # The read came back through URLs the control plane signed.
    calls = [ev["data"]["operation"] for ev in hosted.e.journal("cloud.call")]
    assert "get_bucket_credentials" in calls and "get_presigned_urls" in calls


def test_real_client_3_a_service_returns_an_image_as_a_url_that_downloads(hosted: Session) -> None:
    out = hosted.run("service", "update", "app.py", hosted.db, "-f")
    endpoint = re.search(r"\+ media\s+applied\s+(http://127\.0\.0\.1:\d+/media)", out)
    assert endpoint, out
    answer = httpx.post(
        endpoint.group(1) + "/swatch", json={"color": "red"}, headers={"X-api-key": hosted.trial_key}, timeout=120
    )
    assert answer.status_code == 200, answer.text
    url = answer.json()["tile"]
    assert url.startswith(hosted.e.endpoints["s3"] + "/"), url
    # Any HTTP client can fetch it (here Python's own, in the client's environment), with no credential.
    printed = hosted.python(
        "import io, urllib.request, PIL.Image\n"
        f"im = PIL.Image.open(io.BytesIO(urllib.request.urlopen({url!r}).read()))\n"
        "print('IMG', im.size, im.convert('RGB').getpixel((10, 10)))"
    )
    red, green, blue = map(int, flow.must(re.search(r"IMG \(64, 48\) \((\d+), (\d+), (\d+)\)", printed)).groups())
    assert red > 240 and green < 16 and blue < 16, printed  # red, give or take JPEG's rounding
    calls = [ev["data"]["operation"] for ev in hosted.e.journal("cloud.call")]
    assert "get_presigned_url" in calls
