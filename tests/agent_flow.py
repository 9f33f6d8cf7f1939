"""The agent side of the identity flow, as plain HTTP calls (what any agent would send)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import botocore.config
import httpx
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.conftest import Emulator

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def must(found: re.Match[str] | None) -> re.Match[str]:
    """A match the test requires: its absence fails the test where it is read."""
    assert found is not None
    return found


# A database's size as `submit_update` carries it (the client's DatabaseResources), for a trial's limits.
DATABASE_TARGET = {
    "cpu": 1.0,
    "memory_mb": 1024,
    "workers": 1,
    "disk_gb": 5,
    "fingerprint": None,
    "pxt_md_version": 56,
    "force_build_nonce": None,
}


def s3_signed(creds: dict[str, Any], method: str, url: str, body: bytes = b"", **headers: str) -> dict[str, str]:
    """`headers` and a SigV4 signature over them with a database's credentials, as boto3 would sign them (for a
    request that boto3 has no call for)."""
    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    key = Credentials(creds["access_key_id"], creds["secret_access_key"])
    S3SigV4Auth(key, "s3", "us-east-1").add_auth(request)
    return dict(request.headers.items())


def s3_client(creds: dict[str, Any], **config: Any) -> Any:
    """A boto3 client with a database's credentials, as `get_bucket_credentials` hands them out."""
    return boto3.client(
        "s3",
        endpoint_url=creds["endpoint_url"],
        region_name="us-east-1",
        aws_access_key_id=creds["access_key_id"],
        aws_secret_access_key=creds["secret_access_key"],
        config=botocore.config.Config(signature_version="s3v4", s3={"addressing_style": "path"}, **config),
    )


async def register(c: httpx.AsyncClient, emu: Emulator, **body: Any) -> dict[str, Any]:
    r = await c.post(emu.auth + "/agent/identity", json={"type": "anonymous", **body})
    assert r.status_code == 200, r.text
    return r.json()


async def exchange(c: httpx.AsyncClient, emu: Emulator, assertion: str, **form: str) -> httpx.Response:
    return await c.post(emu.auth + "/oauth2/token", data={"grant_type": JWT_BEARER, "assertion": assertion, **form})


async def access_token(c: httpx.AsyncClient, emu: Emulator) -> tuple[dict[str, Any], str]:
    """A fresh anonymous registration and an access token for it."""
    reg = await register(c, emu)
    r = await exchange(c, emu, reg["identity"]["assertion"])
    assert r.status_code == 200, r.text
    return reg, r.json()["access_token"]


async def create_trial(c: httpx.AsyncClient, emu: Emulator, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return await c.post(emu.url + "/api/v1/trial-orgs", headers=headers)


async def new_trial(c: httpx.AsyncClient, emu: Emulator) -> tuple[dict[str, Any], str, dict[str, Any]]:
    reg, token = await access_token(c, emu)
    r = await create_trial(c, emu, token)
    assert r.status_code == 201, r.text
    return reg, token, r.json()


async def list_orgs(c: httpx.AsyncClient, emu: Emulator, api_key: str) -> httpx.Response:
    return await c.post(emu.api, json={"operation_type": "list_orgs", "org": None}, headers={"X-api-key": api_key})


def attempt_token(verification_uri: str) -> str:
    return parse_qs(urlsplit(verification_uri).query)["token"][0]


async def approve(c: httpx.AsyncClient, emu: Emulator, email: str, **claim: str) -> str:
    """Play the person: sign in as `email` on the claim and approve it; returns the user code."""
    r = await c.post(emu.url + "/_emulator/claims/approve", json={"email": email, **claim})
    assert r.status_code == 200, r.text
    return r.json()["user_code"]
