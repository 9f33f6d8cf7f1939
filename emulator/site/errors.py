"""The site's error envelope: `{"error": {code, message, status, retryable}}`.

The spec lists four codes (`bad_request`, `rate_limited`, `not_found`, `invalid_json`), for the refusals it shows:
a 400 always shows one of them (another 400 of the catalogue, core/errors.py, shows `bad_request`). A refusal the
spec does not show (401, 403, 413, 415, 503, 507, ...) keeps the catalogue's code for its status, so a client that
branches on the code reads what happened (the fidelity notes, docs/explanation/fidelity.md, say so).
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import HTTPException

from emulator.core.contract import error_shape
from emulator.core.errors import (
    BAD_REQUEST,
    METHOD_NOT_ALLOWED,
    NOT_FOUND,
    ApiError,
    code_for,
)
from emulator.core.errors import INTERNAL as _INTERNAL
from emulator.core.httperrors import http_detail, incomplete_body, last_resort

CODES = ("bad_request", "rate_limited", "not_found", "invalid_json")


class ErrorDetail(msgspec.Struct):
    code: str
    message: str
    status: int
    retryable: bool


class ErrorBody(msgspec.Struct, omit_defaults=True):
    error: ErrorDetail
    # Seconds to wait, for a person or client reading the body of a 429 rather than its headers.
    retry_after: int | None = None


_encode = msgspec.json.Encoder().encode


def error_bytes(exc: ApiError) -> bytes:
    code = exc.code if exc.code in CODES or exc.status != 400 else "bad_request"
    retry_after = exc.headers.get("Retry-After")
    return _encode(
        ErrorBody(
            ErrorDetail(code, exc.message, exc.status, exc.retryable),
            int(retry_after) if retry_after and retry_after.isdigit() else None,
        )
    )


def boundary_error(exc: ApiError) -> tuple[bytes, bytes]:
    """A refusal before the router (a gate's, or the connection's deadline) in the site's envelope."""
    return b"application/json", error_bytes(exc)


def error_response(exc: ApiError) -> Response[bytes]:
    return Response(error_bytes(exc), status_code=exc.status, media_type="application/json", headers=exc.headers)


def bad_request(message: str) -> ApiError:
    return BAD_REQUEST(message)


def on_api_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[bytes]:
    return error_response(exc)


def on_http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
    """Litestar's own refusals (no route, wrong method, bad form) in the site's envelope."""
    cut = incomplete_body(exc)
    if cut is not None:
        return error_response(cut)
    status = exc.status_code
    if status == 404:
        msg = f"nothing is served at {request.url.path}; the agent endpoints are /ask, /mcp and /health"
        return error_response(NOT_FOUND(msg))
    if status == 405:
        allowed = (exc.headers or {}).get("allow", "")
        msg = f"{request.method} is not allowed on {request.url.path}" + (f"; use {allowed}" if allowed else "")
        return error_response(METHOD_NOT_ALLOWED(msg, headers={"Allow": allowed} if allowed else None))
    if status >= 500:
        return on_internal_error(request, exc)
    return error_response(ApiError(status, code_for(status), http_detail(exc)))


def on_internal_error(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    state_dir = request.app.state["site"].core.settings.state_dir
    return error_response(last_resort(request.method, request.url.path, exc, state_dir, INTERNAL))


INTERNAL = _INTERNAL("the emulator failed to answer; see its log", retryable=True)


EXCEPTION_HANDLERS: dict[Any, Any] = {
    ApiError: on_api_error,
    HTTPException: on_http_error,
    Exception: on_internal_error,
}


# The envelope as the OpenAPI document shows it: what these handlers write, on the site and the operator API.
ENVELOPE = error_shape(
    ErrorBody,
    on_api_error,
    on_http_error,
    on_internal_error,
    headers={"Retry-After": "on a 429 or 503: seconds to wait"},
    description="a refusal, in the site's envelope",
)
