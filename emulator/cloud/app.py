"""The control plane origin `{api_url}`: the management API (one POST URL, `operation_type` in the body),
blob uploads and archive downloads, `/.well-known/pixeltable-auth` for `pxt login`, and
`/.well-known/oauth-protected-resource` (RFC 9728) for an OAuth client acting as a person.

Errors are what the pixeltable client parses: a plain-text body `"<HTTP reason phrase> : <details>"`,
plus `X-Pixeltable-Error-Code` (`PLAN_LIMIT`, `PAYMENT_REQUIRED`, `STORE_FULL`) where a plan refuses
something; any other refusal (an injected 503, say) is told by its status and that status's phrase, as the
client reads it. Every successful answer is a JSON object (the client always parses one).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Annotated, Any, NamedTuple

import msgspec
from litestar import Request, Response, get, post
from litestar.datastructures import State
from litestar.di import NamedDependency, Provide
from litestar.exceptions import HTTPException
from litestar.params import HeaderParameter

from emulator.cloud import blobs
from emulator.cloud.answers import Answer, PixeltableAuth
from emulator.cloud.compat import refuse_old_client
from emulator.cloud.context import platform_of
from emulator.cloud.operations import OPERATIONS, SCOPED, Operation
from emulator.core import jsonbody, openapi
from emulator.core.boundary import Boundary, BoundaryGate, by_path
from emulator.core.contract import error_shape, errors
from emulator.core.errors import (
    BAD_REQUEST,
    CLIENT_TOO_OLD,
    CONFLICT,
    FORBIDDEN,
    INTERNAL,
    NOT_FOUND,
    PLAN_LIMIT,
    STORE_FULL,
    TOO_LARGE,
    UNAUTHORIZED,
    ApiError,
    code_for,
)
from emulator.core.faultgate import FaultGate, drop
from emulator.core.httperrors import http_detail, incomplete_body, last_resort
from emulator.core.payloads import CloudCall
from emulator.core.webapp import App
from emulator.hosted.auth import RESOURCE_METADATA, Caller, require_unrestricted
from emulator.hosted.platform import Platform
from emulator.identity import discovery
from emulator.identity.discovery import ProtectedResource
from emulator.identity.wire import Urls

PLAN_CODES = ("PLAN_LIMIT", "PAYMENT_REQUIRED", "STORE_FULL")
_CACHE = "public, max-age=300"


def plain_error(request: Request[Any, Any, Any], exc: ApiError) -> Response[str]:
    phrase = HTTPStatus(exc.status).phrase
    headers = dict(exc.headers)
    if exc.code in PLAN_CODES:
        headers["X-Pixeltable-Error-Code"] = exc.code
    return Response(f"{phrase} : {exc.message}", status_code=exc.status, media_type="text/plain", headers=headers)


def http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[str]:
    cut = incomplete_body(exc)
    if cut is not None:
        return plain_error(request, cut)
    status = exc.status_code if exc.status_code < 500 else 500
    detail = "the management API is one POST to this URL" if status in (404, 405) else http_detail(exc)
    return plain_error(request, ApiError(status, code_for(status), detail))


def internal_error(request: Request[Any, Any, Any], exc: Exception) -> Response[str]:
    state_dir = platform_of(request).core.settings.state_dir
    return plain_error(request, last_resort(request.method, request.url.path, exc, state_dir, _FAILED))


_FAILED = INTERNAL("the control plane failed; see the emulator's log")


# The control plane's refusals as the OpenAPI document shows them.
PLAIN = error_shape(
    str,
    plain_error,
    http_error,
    internal_error,
    media_type="text/plain",
    headers={
        "X-Pixeltable-Error-Code": "where a plan refuses: " + ", ".join(PLAN_CODES),
        "WWW-Authenticate": "on a 401 without X-api-key: Bearer, with the resource metadata's URL",
    },
    description='a refusal: "<HTTP reason phrase> : <details>"',
)


def operations_answer() -> openapi.Body:
    """The management API's answer as the document shows it: any of the operations' answer types (their handlers'
    return annotations). `anyOf`, not `oneOf`: the operation (in the request) decides the type, and an answer may
    also read as another type whose fields it has (unknown fields are allowed). A client tries them in turn and
    keeps the first that reads, and an answer type's fields are all required (answers.py sends every one): so
    those with more fields come first, where a reader of fewer would also take them."""
    kinds = list(dict.fromkeys(kind for op in OPERATIONS.values() for kind in op.answers))
    schemas, components = openapi.schema_of(*kinds)
    required = {kind: components[kind.__name__].get("required") for kind in kinds}
    fields = {kind: len(listed) if isinstance(listed, list) else 0 for kind, listed in required.items()}
    order = sorted(range(len(kinds)), key=lambda i: -fields[kinds[i]])
    return openapi.Body({openapi.JSON: {"schema": {"anyOf": [schemas[i] for i in order]}}}, components)


def operations_body() -> openapi.Body:
    """The management API's body as the document shows it: one object per operation, told apart by its
    `operation_type` (the request types of emulator.cloud.requests, which the handler decodes strictly)."""
    kinds = list(dict.fromkeys(op.request for op in OPERATIONS.values()))
    _, components = openapi.schema_of(*kinds)
    variants = []
    for op, (kind, _) in OPERATIONS.items():
        shape = components[kind.__name__]
        given = shape["properties"]
        properties = {**(given if isinstance(given, dict) else {}), "operation_type": {"type": "string", "enum": [op]}}
        components[f"op_{op}"] = {**shape, "title": op, "properties": properties}
        variants.append({"$ref": f"#/components/schemas/op_{op}"})
    for kind in kinds:  # each operation has its own copy, with its operation_type
        del components[kind.__name__]
    return openapi.Body({openapi.JSON: {"schema": {"oneOf": variants}}}, components)


class Call(NamedTuple):
    """A management request as read before its operation's rules run: who sends it, the operation it names, and the
    JSON object sent, decoded strictly as that operation's request type once the fault gate and the credential's
    scope let it through (so those refusals come first, as they did)."""

    caller: Caller
    name: str
    operation: Operation[Any, Any]
    fields: jsonbody.JsonObject


async def _caller(
    request: Request[Any, Any, Any],
    api_key: Annotated[str | None, HeaderParameter(name="x-api-key", include_in_schema=False)] = None,
    authorization: Annotated[str | None, HeaderParameter(name="authorization", include_in_schema=False)] = None,
) -> Caller:
    """The credential: `X-api-key`, else `Authorization: Bearer` (the document's security schemes say so)."""
    sent = {
        name: value for name, value in (("x-api-key", api_key), ("authorization", authorization)) if value is not None
    }
    return await platform_of(request).auth.from_headers(sent)


async def _call(request: Request[Any, Any, Any], caller: NamedDependency[Caller]) -> Call:
    """The body's envelope, read after the caller (a request without a credential is a 401 whatever it sends)."""
    try:
        body = jsonbody.decode(await request.body())
    except jsonbody.NotJson as e:
        raise BAD_REQUEST(f"the body is not valid JSON: {e}") from None
    if not isinstance(body, dict) or not isinstance(body.get("operation_type"), str):
        raise BAD_REQUEST("the body must be a JSON object with an operation_type")
    refuse_old_client(body)  # before the lookup and the strict decoding, whose refusals would not say why
    op = str(body["operation_type"])
    found = OPERATIONS.get(op)
    if found is None:
        raise BAD_REQUEST(f"unknown operation_type {op!r}")
    return Call(caller, op, found, body)


@post(
    "/",
    status_code=200,
    exception_handlers={ApiError: plain_error},
    dependencies={"caller": Provide(_caller), "call": openapi.BodyDependency(_call, operations_body())},
    opt=openapi.custom_answer(operations_answer()),
    security=[{"api_key": []}, {"bearer": []}],
    responses=errors(
        BAD_REQUEST, CLIENT_TOO_OLD, UNAUTHORIZED, PLAN_LIMIT, STORE_FULL, FORBIDDEN, NOT_FOUND, CONFLICT, TOO_LARGE
    ),
)
async def management(request: Request[Any, Any, Any], call: NamedDependency[Call]) -> Answer:
    platform = platform_of(request)
    caller, op = call.caller, call.name
    verdict = await platform.core.faults.request("api", "POST", request.url.path, operation_type=op)
    if verdict is not None:
        if verdict.drop:
            await drop(request.scope)  # type: ignore[arg-type]
        raise verdict.error()
    if op not in SCOPED:
        require_unrestricted(caller, op)
    try:
        req = msgspec.convert(call.fields, call.operation.request)
    except msgspec.ValidationError as e:
        raise BAD_REQUEST(f"{op}: {e}") from None
    result = await call.operation.run(platform, caller, req)
    platform.core.bus.publish(
        caller.org,
        CloudCall(operation=op, credential=caller.credential, key=caller.key_name, email=caller.email),
    )
    return result


@get("/.well-known/pixeltable-auth", operation_id="pixeltable_auth")
async def pixeltable_auth(request: Request[Any, Any, Any]) -> PixeltableAuth:
    """Where `pxt login` signs in: the identity provider's device-authorization stub."""
    return PixeltableAuth(client_id="client_pxt_emulator", workos_api=platform_of(request).auth_url)


@get([RESOURCE_METADATA, RESOURCE_METADATA + "/"], operation_id="protected_resource")
async def protected_resource(request: Request[Any, Any, Any]) -> Response[ProtectedResource]:
    """RFC 9728: the control plane as a protected resource; a person's access token for it (aud: this URL) acts as
    a `pxt login` session does."""
    p = platform_of(request)
    urls = Urls(site=p.site_url, auth=p.auth_url, api=p.api_url)
    return Response(discovery.protected_resource(urls, control_plane=True), headers={"Cache-Control": _CACHE})


def boundary_error(exc: ApiError) -> tuple[bytes, bytes]:
    """A boundary refusal in the control plane's error format."""
    return b"text/plain; charset=utf-8", f"{HTTPStatus(exc.status).phrase} : {exc.message}".encode()


def build_cloud_app(platform: Platform, boundary: Boundary) -> BoundaryGate:
    app = App(
        route_handlers=[management, pixeltable_auth, protected_resource, *blobs.HANDLERS],
        exception_handlers={HTTPException: http_error, ApiError: plain_error, Exception: internal_error},
        state=State({"platform": platform}),
        request_max_body_size=platform.core.settings.http_max_body_bytes,  # blob uploads: MAX_BLOB, their own
        openapi_config=openapi.openapi_config(
            "Pixeltable Cloud emulator: control plane",
            "The management API (one POST to `/`, the operation in `operation_type`), blob uploads and downloads.",
            errors=[PLAIN],
        ),
        logging_config=None,
        debug=False,
    )
    render = by_path(boundary_error, {})
    return BoundaryGate(FaultGate(app, "api", platform.core.faults, render), boundary, render)
