"""The control plane origin `{api_url}`: the management API, one POST URL with `operation_type`.

Errors are what the pixeltable client parses: a plain-text body `"<HTTP reason phrase> : <details>"`
(plus `X-Pixeltable-Error-Code` where a plan limit refuses something). `X-api-key` is checked before
any bearer token. This version answers the operations listed in `OPERATIONS`; the rest of the
hosted workflow (databases, services, keys, secrets) comes with the hosted-cloud work.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import msgspec
from litestar import Litestar, Request, Response, post
from litestar.datastructures import State
from litestar.exceptions import HTTPException

from emulator.cloud import orgs
from emulator.core import jsonbody
from emulator.core.context import Core
from emulator.core.errors import ApiError
from emulator.site.errors import log_internal

_encode = msgspec.json.Encoder().encode


@dataclass
class Cloud:
    core: Core


@dataclass(frozen=True)
class Caller:
    org_id: str
    org: str
    credential: str  # "api_key"
    key_name: str


class OrgRecord(msgspec.Struct):
    org_id: str
    org: str
    default_db: str | None
    created_at: float
    updated_at: float


def plain_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[str]:
    phrase = HTTPStatus(exc.status).phrase
    headers = dict(exc.headers)
    if exc.code in ("PLAN_LIMIT", "PAYMENT_REQUIRED", "STORE_FULL"):
        headers["X-Pixeltable-Error-Code"] = exc.code
    return Response(
        f"{phrase} : {exc.message}",
        status_code=exc.status,
        media_type="text/plain; charset=utf-8",
        headers=headers,
    )


def http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[str]:
    status = exc.status_code if exc.status_code < 500 else 500
    detail = "the management API is one POST to this URL" if status in (404, 405) else str(exc.detail)
    return plain_error(request, ApiError(status, "bad_request", detail))


def internal_error(request: Request[Any, Any, Any], exc: Exception) -> Response[str]:
    log_internal(request, exc)
    return plain_error(request, ApiError(500, "internal", "the control plane failed; see the emulator's log"))


async def authenticate(cloud: Cloud, request: Request[Any, Any, Any]) -> Caller:
    """X-api-key first; a request carrying both is authenticated as the API key."""
    key = request.headers.get("x-api-key")
    if key is not None:
        row = await orgs.org_by_key(cloud.core, key.strip())
        if row is None:
            raise ApiError(
                401,
                "unauthorized",
                "the API key is not valid (a trial's key stops working when the trial expires)",
            )
        return Caller(row["id"], row["slug"], "api_key", row["key_name"])
    if request.headers.get("authorization", "").lower().startswith("bearer "):
        raise ApiError(401, "unauthorized", "sign-in sessions (pxt login) are not accepted by this emulator version")
    raise ApiError(401, "unauthorized", "an API key (X-api-key) or a bearer token is required")


async def _list_orgs(cloud: Cloud, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    rows = await cloud.core.store.fetchall(
        "SELECT o.id, o.slug, o.created_at, o.updated_at, "
        "(SELECT name FROM databases d WHERE d.org_id = o.id AND d.name = 'main') AS default_db "
        "FROM orgs o WHERE o.id = ?",
        (caller.org_id,),
    )
    return {"orgs": [OrgRecord(r["id"], r["slug"], r["default_db"], r["created_at"], r["updated_at"]) for r in rows]}


OPERATIONS = {"list_orgs": _list_orgs}


@post("/", status_code=200, exception_handlers={ApiError: plain_error})
async def management(request: Request[Any, Any, Any]) -> Response[bytes]:
    cloud: Cloud = request.app.state["cloud"]
    caller = await authenticate(cloud, request)
    try:
        body = jsonbody.decode(await request.body())
    except jsonbody.NotJson as e:
        raise ApiError(400, "bad_request", f"the body is not valid JSON: {e}") from None
    if not isinstance(body, dict) or not isinstance(body.get("operation_type"), str):
        raise ApiError(400, "bad_request", "the body must be a JSON object with an operation_type")
    op = body["operation_type"]
    org = body.get("org")
    if org is not None and org != caller.org:
        raise ApiError(403, "forbidden", f"this API key belongs to {caller.org}, not {org}")
    handler = OPERATIONS.get(op)
    if handler is None:
        raise ApiError(
            400,
            "bad_request",
            f"operation {op} is not emulated yet (this version serves: {', '.join(OPERATIONS)})",
        )
    result = await handler(cloud, caller, body)
    cloud.core.bus.publish("cloud.call", caller.org, operation=op, credential=caller.credential, key=caller.key_name)
    return Response(_encode(result), media_type="application/json")


def build_cloud_app(cloud: Cloud) -> Litestar:
    return Litestar(
        route_handlers=[management],
        exception_handlers={HTTPException: http_error, ApiError: plain_error, Exception: internal_error},
        state=State({"cloud": cloud}),
        openapi_config=None,
        logging_config=None,
        debug=False,
    )
