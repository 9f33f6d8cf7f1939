"""The control plane's refusals, in the client's format, without the real client (fast): credentials,
organizations, keys, secrets, database states, generations, plan limits, blobs; and the tunnel's."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import socket
import sqlite3
import ssl
from typing import get_type_hints

import httpx
import msgspec.inspect as mi
import pytest

from emulator.cloud import answers
from emulator.cloud.operations import OPERATIONS
from tests import agent_flow as flow
from tests.conftest import Emulator
from tests.test_tunnel import recv_head


async def trial(emu: Emulator) -> tuple[httpx.AsyncClient, dict]:
    c = emu.client()
    _, _, t = await flow.new_trial(c, emu)
    return c, t


async def op(c: httpx.AsyncClient, emu: Emulator, key: str | None, /, **body: object) -> httpx.Response:
    headers = {"X-api-key": key} if key else {}
    return await c.post(emu.api, json=body, headers=headers)


async def prepare_blob(c: httpx.AsyncClient, emu: Emulator, t: dict, sha: str, size: int) -> dict:
    """prepare_update carrying only a blob reference: what the client sends before uploading an archive."""
    r = await op(
        c,
        emu,
        t["api_key"],
        operation_type="prepare_update",
        org=t["org"],
        db="main",
        database_target=None,
        service_mutations=[],
        blob={"sha256": sha, "size": size},
    )
    return r.json()


async def wait_for_state(c: httpx.AsyncClient, emu: Emulator, t: dict, state: str) -> dict:
    """Poll get_db until the database reaches `state` (bounded: the jobs settle in well under 10 s)."""
    report: dict = {}
    for _ in range(200):
        report = (await op(c, emu, t["api_key"], operation_type="get_db", org=t["org"], db="main")).json()
        if report["report"]["current"]["state"] == state:
            return report
        await asyncio.sleep(0.05)
    raise AssertionError(f"the database never became {state}: {report}")


def assert_plain(r: httpx.Response, status: int, phrase: str, fragment: str) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("text/plain")
    assert r.text.startswith(f"{phrase} : ") and fragment in r.text, r.text


# --- credentials and organizations ----------------------------------------------------------------


async def test_credentials(emu: Emulator) -> None:
    c, t = await trial(emu)
    assert_plain(await op(c, emu, None, operation_type="list_orgs"), 401, "Unauthorized", "X-api-key")
    bad_key = await op(c, emu, "pxtk_" + "0" * 48, operation_type="list_orgs")
    assert_plain(bad_key, 401, "Unauthorized", "not valid")
    assert "www-authenticate" not in bad_key.headers  # an API key's refusal is the pxt client's: the body says it
    # X-api-key is checked before a bearer token: a bad bearer beside a good key does not matter.
    r = await c.post(
        emu.api,
        json={"operation_type": "list_orgs"},
        headers={"X-api-key": t["api_key"], "Authorization": "Bearer nonsense"},
    )
    assert r.status_code == 200 and r.json()["orgs"][0]["org"] == t["org"]
    bad_bearer = await c.post(emu.api, json={"operation_type": "list_orgs"}, headers={"Authorization": "Bearer x.y.z"})
    assert_plain(bad_bearer, 401, "Unauthorized", "not valid")
    assert bad_bearer.headers["www-authenticate"].startswith(
        f'Bearer resource_metadata="{emu.api}/.well-known/oauth-protected-resource", error="invalid_token"'
    )
    await c.aclose()


async def test_another_organizations_resources_are_403(emu: Emulator) -> None:
    a, ta = await trial(emu)
    b, tb = await trial(emu)
    for body in (
        {"operation_type": "get_db", "org": ta["org"], "db": "main"},
        {"operation_type": "set_secret", "org": ta["org"], "key": "K", "value": "v"},
        {"operation_type": "list_all_secrets", "org": ta["org"]},
    ):
        assert_plain(await op(b, emu, tb["api_key"], **body), 403, "Forbidden", f"belongs to {tb['org']}")
    await a.aclose()
    await b.aclose()


async def test_malformed_requests(emu: Emulator) -> None:
    c, t = await trial(emu)
    assert_plain(
        await op(c, emu, t["api_key"], operation_type="transmogrify"), 400, "Bad Request", "unknown operation_type"
    )
    r = await c.post(emu.api, content=b"{", headers={"X-api-key": t["api_key"]})
    assert_plain(r, 400, "Bad Request", "not valid JSON")
    assert_plain(await c.get(emu.api + "/anything"), 404, "Not Found", "one POST to this URL")
    assert_plain(await op(c, emu, t["api_key"], operation_type="create_org", org="mine"), 403, "Forbidden", "pxt login")
    await c.aclose()


# --- keys ---------------------------------------------------------------------------------------


async def test_keys(emu: Emulator) -> None:
    c, t = await trial(emu)
    key = t["api_key"]
    made = (
        await op(c, emu, key, operation_type="create_key", name="reader", grants=[f"access:pxt://{t['org']}:main"])
    ).json()["key"]
    assert made["key_type"] == "runtime" and made["api_key"].startswith("pxtk_")
    listed = (await op(c, emu, key, operation_type="list_keys")).json()["keys"]
    assert {k["name"]: k["api_key"] for k in listed} == {"trial": None, "reader": None}
    assert_plain(await op(c, emu, key, operation_type="create_key", name="reader"), 409, "Conflict", "already has")
    assert_plain(await op(c, emu, key, operation_type="create_key", name="no spaces"), 400, "Bad Request", "key name")
    assert_plain(
        await op(c, emu, key, operation_type="create_key", name="x", grants=["access:pxt://other:main"]),
        403,
        "Forbidden",
        "another organization",
    )
    assert_plain(
        await op(c, emu, key, operation_type="create_key", name="x", grants=[f"manage:pxt://{t['org']}:main"]),
        400,
        "Bad Request",
        "services only",
    )
    updated = (
        await op(
            c, emu, key, operation_type="update_key", name="reader", allow=[], revoke=[f"access:pxt://{t['org']}:main"]
        )
    ).json()["key"]
    assert updated["grants"] == [] and updated["key_type"] == "user"
    assert (await op(c, emu, key, operation_type="delete_key", name="reader")).json() == {"name": "reader"}
    assert_plain(await op(c, emu, key, operation_type="delete_key", name="reader"), 404, "Not Found", "no key named")
    assert_plain(await op(c, emu, made["api_key"], operation_type="list_keys"), 401, "Unauthorized", "not valid")
    await c.aclose()


# --- secrets ------------------------------------------------------------------------------------


async def test_secrets(emu: Emulator) -> None:
    c, t = await trial(emu)
    key, org = t["api_key"], t["org"]
    first = await op(
        c, emu, key, operation_type="set_secret", org=org, db="main", key="OPENAI_API_KEY", value="sk-very-secret-1"
    )
    assert first.json() == {"key": "OPENAI_API_KEY", "revision": 1}
    again = await op(c, emu, key, operation_type="set_secret", org=org, db="main", key="OPENAI_API_KEY", value="x2")
    assert again.json()["revision"] == 2
    await op(c, emu, key, operation_type="set_secret", org=org, key="ORG_WIDE", value="o")
    listed = (await op(c, emu, key, operation_type="list_all_secrets", org=org)).json()
    assert listed == {"org": org, "secrets": [{"key": "ORG_WIDE", "db": None}, {"key": "OPENAI_API_KEY", "db": "main"}]}
    assert_plain(
        await op(c, emu, key, operation_type="set_secret", org=org, key="PIXELTABLE_X", value="v"),
        400,
        "Bad Request",
        "reserved",
    )
    assert_plain(
        await op(c, emu, key, operation_type="set_secret", org=org, key="has space", value="v"),
        400,
        "Bad Request",
        "secret name",
    )
    assert_plain(
        await op(c, emu, key, operation_type="set_secret", org=org, db="nope", key="K", value="v"),
        404,
        "Not Found",
        "database nope does not exist",
    )
    await op(c, emu, key, operation_type="delete_secret", org=org, key="ORG_WIDE")
    assert_plain(
        await op(c, emu, key, operation_type="delete_secret", org=org, key="ORG_WIDE"), 404, "Not Found", "ORG_WIDE"
    )
    dump = "\n".join(sqlite3.connect(emu.state_dir / "emulator.sqlite3").iterdump())
    assert "sk-very-secret-1" not in dump and "x2'" not in dump
    await c.aclose()


# --- databases ----------------------------------------------------------------------------------


async def test_database_reports_and_plan_limits(emu: Emulator) -> None:
    c, t = await trial(emu)
    key, org = t["api_key"], t["org"]
    report = (await op(c, emu, key, operation_type="get_db", org=org, db="main")).json()["report"]
    assert report["current"]["state"] == "AVAILABLE" and report["current"]["resources"]["fingerprint"] is None
    assert {k: report["current"]["resources"][k] for k in ("cpu", "memory_mb", "workers", "disk_gb")} == {
        "cpu": 1.0,
        "memory_mb": 2048,
        "workers": 1,
        "disk_gb": 10,
    }
    assert_plain(
        await op(c, emu, key, operation_type="get_db", org=org, db="other"),
        404,
        "Not Found",
        f"database other does not exist in {org}",
    )
    assert [r["db"] for r in (await op(c, emu, key, operation_type="list_dbs", org=None)).json()["reports"]] == ["main"]
    assert_plain(
        await op(c, emu, key, operation_type="delete_db", org=org, db="main"),
        400,
        "Bad Request",
        "main cannot be deleted",
    )
    r = await op(
        c,
        emu,
        key,
        operation_type="prepare_update",
        org=org,
        db="second",
        database_target={"cpu": 1},
        service_mutations=[],
        blob=None,
    )
    assert_plain(r, 402, "Payment Required", "one database")
    assert r.headers["x-pixeltable-error-code"] == "PLAN_LIMIT"
    r = await op(
        c,
        emu,
        key,
        operation_type="prepare_update",
        org=org,
        db="main",
        database_target={"cpu": 4.0, "memory_mb": 2048},
        service_mutations=[],
        blob=None,
    )
    assert_plain(r, 402, "Payment Required", "cpu 4.0 (at most 1.0)")
    assert_plain(
        await op(c, emu, key, operation_type="get_archive", org=org, db="main"), 404, "Not Found", "no project yet"
    )
    assert_plain(
        await op(c, emu, key, operation_type="get_logs", org=org, db="main", limit=0), 400, "Bad Request", "limit"
    )
    usage = (await op(c, emu, key, operation_type="get_usage")).json()
    assert (
        usage["plan"] == "trial" and {"label": "Services", "used": 0, "limit": 2, "unit": "count"} in usage["resources"]
    )
    assert (await op(c, emu, key, operation_type="list_services", org=org, db="main")).json() == {"instances": []}
    await c.aclose()


async def test_blob_upload_contract(emu: Emulator) -> None:
    c, t = await trial(emu)
    key, org = t["api_key"], t["org"]
    blob = b"not really a tar.bz2, but bytes with a hash " * 100
    sha = hashlib.sha256(blob).hexdigest()
    plan = await prepare_blob(c, emu, t, sha, len(blob))
    assert plan["generations"] == {"database": 0, "services": []} and plan["plan"] is None
    url = plan["upload"]["url"]
    checksum = base64.b64encode(hashlib.sha256(blob).digest()).decode()
    headers = {"Content-Type": "application/octet-stream", "x-amz-checksum-sha256": checksum, "If-None-Match": "*"}
    assert (await c.put(url.replace("sig=", "sig=0"), content=blob, headers=headers)).status_code == 403
    assert (await c.put(url, content=blob + b"x", headers=headers)).status_code == 400
    assert (await c.put(url, content=blob, headers=headers)).status_code == 201
    assert (await c.put(url, content=blob, headers=headers)).status_code == 412  # already stored: success
    again = await prepare_blob(c, emu, t, sha, len(blob))
    assert again["upload"] is None
    # Whether an archive is held is answered within the caller's organization: another is asked for its own upload
    # of the same bytes (it learns nothing of the first's), and that upload is stored for it.
    c2, other = await trial(emu)
    theirs = await prepare_blob(c2, emu, other, sha, len(blob))
    assert theirs["upload"] is not None and theirs["upload"]["url"] != url
    assert (await c2.put(theirs["upload"]["url"], content=blob, headers=headers)).status_code == 201
    assert (await prepare_blob(c2, emu, other, sha, len(blob)))["upload"] is None
    await c2.aclose()
    assert_plain(
        await op(
            c,
            emu,
            key,
            operation_type="prepare_update",
            org=org,
            db="main",
            database_target=None,
            service_mutations=[],
            blob={"sha256": "XYZ", "size": 1},
        ),
        400,
        "Bad Request",
        "64 lowercase hex",
    )
    await c.aclose()


async def test_generations_states_and_receipts(emu: Emulator) -> None:
    c, t = await trial(emu)
    key, org = t["api_key"], t["org"]
    base = {"operation_type": "submit_update", "org": org, "db": "main", "service_mutations": [], "blob": None}
    target = flow.DATABASE_TARGET
    assert_plain(
        await op(c, emu, key, **base, database_target=target, expected_generations={"database": 7, "services": []}),
        409,
        "Conflict",
        "at generation 0, not 7",
    )
    assert_plain(
        await op(
            c,
            emu,
            key,
            **{**base, "blob": {"sha256": "a" * 64, "size": 3}},
            database_target=target,
            expected_generations={"database": 0, "services": []},
        ),
        400,
        "Bad Request",
        "was not uploaded",
    )
    assert_plain(
        await op(c, emu, key, **base, database_target=None, expected_generations={"database": 0, "services": []}),
        400,
        "Bad Request",
        "needs a database_target",
    )
    # Stop first (no server runs yet, so it settles at once); then an update is refused until started.
    stopped = (await op(c, emu, key, operation_type="stop_db", org=org, db="main")).json()["receipt"]
    assert stopped["generation"] == 1 and stopped["kind"] == "database"
    got: list[dict] = []
    for _ in range(200):  # the stop job settles the receipt (bounded)
        got = (
            await op(
                c,
                emu,
                key,
                operation_type="get_receipts",
                org=org,
                receipts=[{"kind": "database", "resource_id": stopped["resource_id"], "generation": 1}],
            )
        ).json()["receipts"]
        if got[0]["outcome"] == "OBSERVED":
            break
        await asyncio.sleep(0.05)
    assert got[0]["phase"] == "STOPPED"
    report = (await op(c, emu, key, operation_type="get_db", org=org, db="main")).json()
    assert report["report"]["current"]["state"] == "STOPPED" and report["worker_status"] == []
    assert_plain(
        await op(c, emu, key, **base, database_target=target, expected_generations={"database": 1, "services": []}),
        400,
        "Bad Request",
        "STOPPED; db update needs it AVAILABLE (run pxt db start)",
    )
    assert_plain(
        await op(c, emu, key, operation_type="stop_db", org=org, db="main"), 400, "Bad Request", "pxt db start"
    )
    assert_plain(
        await op(
            c,
            emu,
            key,
            operation_type="get_receipts",
            org=org,
            receipts=[{"kind": "database", "resource_id": "db_nope", "generation": 1}],
        ),
        404,
        "Not Found",
        "no receipt",
    )
    assert_plain(
        await op(
            c,
            emu,
            key,
            operation_type="retry",
            org=org,
            db="main",
            kind="database",
            service_name=None,
            base_path="",
            generation=1,
        ),
        400,
        "Bad Request",
        "has not failed",
    )
    kinds = [e["kind"] for e in emu.journal("db.") if e["subject"] == f"{org}:main"]
    assert "db.stop_accepted" in kinds
    await c.aclose()


async def test_blobs_are_stored_by_hash_and_downloads_need_a_valid_signature(emu: Emulator) -> None:
    c, t = await trial(emu)
    blobs_dir = emu.state_dir / "blobs"
    data = b"archive bytes"
    sha = hashlib.sha256(data).hexdigest()
    plan = await prepare_blob(c, emu, t, sha, len(data))
    await c.put(plan["upload"]["url"], content=data)
    assert (blobs_dir / sha[:2] / sha).read_bytes() == data
    assert (await c.get(f"{emu.api}/blobs/{sha}?exp=99999999999&sig=forged")).status_code == 403
    await c.aclose()


# --- the tunnel ---------------------------------------------------------------------------------


def _tunnel(emu: Emulator, host: str, credential: str | None) -> str:
    """CONNECT through the emulator's proxy, TLS against its CA, one PXT/1.0 handshake; the status line."""
    port = int(emu.endpoints["tunnel"].rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        raw.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        status = recv_head(raw).split(b"\r\n", 1)[0].decode()
        if not status.startswith("HTTP/1.1 200"):
            return status
        ctx = ssl.create_default_context(cafile=emu.endpoints["ca_bundle"])
        with ctx.wrap_socket(raw, server_hostname=host) as tls:
            org, db = host.split(".", 1)[0].rsplit("-", 1)
            auth = f"Authorization: Bearer {credential}\r\n" if credential else ""
            tls.sendall(f"PXT/1.0 CONNECT {org}/{db}\r\n{auth}\r\n".encode())
            return recv_head(tls).split(b"\r\n", 1)[0].decode()


async def test_tunnel_refusals(emu: Emulator) -> None:
    a, ta = await trial(emu)
    b, tb = await trial(emu)
    domain = emu.endpoints["tunnel"].rsplit(":", 1)[0]
    host = f"{ta['org']}-main.{domain}"
    # the tunnel domain never leaves the emulator: a host in it that is no database's is refused in-process
    assert _tunnel(emu, f"a.b.{domain}", None).startswith("HTTP/1.1 403")
    assert _tunnel(emu, host, None).startswith("PXT/1.0 401")
    assert _tunnel(emu, host, "pxtk_" + "1" * 48).startswith("PXT/1.0 401")
    assert _tunnel(emu, host, tb["api_key"]).startswith("PXT/1.0 403")
    assert _tunnel(emu, f"{ta['org']}-nope.{domain}", ta["api_key"]).startswith("PXT/1.0 404")
    await op(a, emu, ta["api_key"], operation_type="stop_db", org=ta["org"], db="main")
    await wait_for_state(a, emu, ta, "STOPPED")
    stopped = _tunnel(emu, host, ta["api_key"])
    assert stopped.startswith("PXT/1.0 503") and "pxt db start" in stopped
    refusals = [e["data"]["status"] for e in emu.journal("tunnel.refused")]
    assert {401, 403, 404, 503} <= set(refusals)
    await a.aclose()
    await b.aclose()


def test_emulator_views_of_databases(emu: Emulator) -> None:
    with emu.admin() as c:
        listing = c.get("/_emulator/databases").json()
    assert listing["runtime"] == "process"
    assert set(listing["unenforced_limits"]) == {"cpu", "memory_mb", "disk_gb", "workers", "egress"}
    assert all(d["db"] == "main" and d["state"] in ("AVAILABLE", "STOPPED", "STOPPING") for d in listing["databases"])


@pytest.mark.parametrize("body", [b"[]", json.dumps({"operation_type": 3}).encode()])
async def test_not_an_operation(emu: Emulator, body: bytes) -> None:
    c, t = await trial(emu)
    assert_plain(
        await c.post(emu.api, content=body, headers={"X-api-key": t["api_key"]}), 400, "Bad Request", "operation_type"
    )
    await c.aclose()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"operation_type": "list_services", "db": ["main"]}, "$.db"),
        ({"operation_type": "stop_service", "db": ["main"], "service_name": "x"}, "$.db"),
        ({"operation_type": "report_service_instance", "db": "main", "service_name": 7}, "$.service_name"),
        ({"operation_type": "get_logs", "db": "main", "base_path": 1, "service_name": "x"}, "$.base_path"),
        (
            {
                "operation_type": "get_receipts",
                "receipts": [{"kind": ["database"], "resource_id": "x", "generation": 1}],
            },
            "$.receipts[0].kind",
        ),
        ({"operation_type": "prepare_update", "db": "main", "service_mutations": True}, "$.service_mutations"),
        ({"operation_type": "submit_update", "db": "main"}, "expected_generations"),
        ({"operation_type": "create_key", "name": "k", "grants": "all"}, "$.grants"),
    ],
)
async def test_a_wrongly_typed_field_is_a_400_naming_it(emu: Emulator, body: dict, field: str) -> None:
    c, t = await trial(emu)
    r = await op(c, emu, t["api_key"], **body)
    assert_plain(r, 400, "Bad Request", f"{body['operation_type']}: ")
    assert field in r.text
    await c.aclose()


async def test_get_logs_bounds_since_seconds(emu: Emulator) -> None:
    c, t = await trial(emu)
    r = await op(c, emu, t["api_key"], operation_type="get_logs", db="main", since_seconds=2**64)
    assert_plain(r, 400, "Bad Request", "since_seconds must be from 1 to")
    ok = await op(c, emu, t["api_key"], operation_type="get_logs", db="main", since_seconds=86_400)
    assert ok.status_code == 200 and "records" in ok.json()
    await c.aclose()


# --- the operations' types ----------------------------------------------------------------------------------


def _open_members(info: mi.Type, at: str, seen: set[type]) -> list[str]:
    """Where an answer type leaves a value untyped (`Any`), other than inside an object kept as the client sent it
    (`AsSent`, a dict of str to Any): those paths."""
    if isinstance(info, mi.AnyType):
        return [at]
    if isinstance(info, mi.DictType) and isinstance(info.value_type, mi.AnyType):
        return []  # AsSent: the client's own JSON object, answered back as sent
    if isinstance(info, mi.StructType):
        if info.cls in seen:
            return []
        seen.add(info.cls)
        return [p for f in info.fields for p in _open_members(f.type, f"{at}.{f.name}", seen)]
    inner = [t for name in ("types", "item_type", "key_type", "value_type") for t in _as_list(getattr(info, name, ()))]
    return [p for t in inner for p in _open_members(t, at, seen)]


def _as_list(value: object) -> list[mi.Type]:
    if isinstance(value, mi.Type):
        return [value]
    return [t for t in value if isinstance(t, mi.Type)] if isinstance(value, tuple) else []


def test_every_operation_takes_its_request_type_and_answers_a_declared_type() -> None:
    """Each function in OPERATIONS takes the request type its line names and declares its answer (the OpenAPI
    document's answer is read off it): answers.Answer types, with no member left as Any."""
    for name, op in OPERATIONS.items():
        hints = get_type_hints(op.run)
        assert issubclass(op.request, hints["req"]), name
        assert op.answers, name
        for kind in op.answers:
            assert isinstance(kind, type) and issubclass(kind, answers.Answer) and kind is not answers.Answer, name
            assert _open_members(mi.type_info(kind), kind.__name__, set()) == [], name
