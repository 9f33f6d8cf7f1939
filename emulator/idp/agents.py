"""The identity provider's agents API (`/agents/*`), which a service calls about the agents that reach it, with its
service key (`Authorization: Bearer sk_test_…`); thin over `emulator.identity.agents_api`.

Errors are WorkOS's: a JSON object with `message` and `code` (`error` repeats the code), which the `workos` SDK
turns into AuthenticationError (401), BadRequestError (400), AuthorizationError (403), NotFoundError (404),
ConflictError (409).
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from litestar import Request, Response, get, patch, post

from emulator.core import jsonbody, openapi
from emulator.core.contract import error_shape
from emulator.core.errors import BAD_REQUEST, UNAUTHORIZED, ApiError
from emulator.identity import service_keys
from emulator.identity.agents_api import AgentsApi, AttemptLink, CredentialCheck

_encode = msgspec.json.Encoder().encode
T = TypeVar("T")


def _json(value: Any, status: int = 200) -> Response[bytes]:
    return Response(_encode(value), status_code=status, media_type="application/json")


class WorkosError(msgspec.Struct):
    """WorkOS's error body (`error` repeats `code`)."""

    message: str
    code: str
    error: str


def workos_error(_: Request[Any, Any, Any], exc: ApiError) -> Response[bytes]:
    return Response(
        _encode(WorkosError(exc.message, exc.code, exc.code)),
        status_code=exc.status,
        media_type="application/json",
        headers=exc.headers or None,
    )


WORKOS = error_shape(WorkosError, workos_error, description="a refusal, WorkOS's")


async def _api(request: Request[Any, Any, Any]) -> tuple[AgentsApi, str]:
    """The domain, and the id of the service key the call carries (401 without a live one)."""
    idp = request.app.state["idp"]
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise UNAUTHORIZED("a service key is required: Authorization: Bearer sk_test_… (emulator service-key create)")
    key_id = await service_keys.authenticate(idp.core, key.strip())
    if key_id is None:
        raise UNAUTHORIZED("the service key is not valid (unknown or revoked)")
    return idp.agents, key_id


def _refused(problem: str) -> ApiError:
    return BAD_REQUEST(f"the body is not a valid request: {problem}")


async def _body(request: Request[Any, Any, Any], kind: type[T]) -> T:
    return jsonbody.decoder(kind, _refused)(await request.body())


@post(
    "/agents/credentials/validate",
    status_code=200,
    exception_handlers={ApiError: workos_error},
    opt=openapi.body(CredentialCheck),
)
async def validate(request: Request[Any, Any, Any]) -> Response[bytes]:
    api, _ = await _api(request)
    return _json(await api.validate(await _body(request, CredentialCheck)))


@patch("/agents/claims/attempts", exception_handlers={ApiError: workos_error}, opt=openapi.body(AttemptLink))
async def link_attempt(request: Request[Any, Any, Any]) -> Response[bytes]:
    api, _ = await _api(request)
    return _json(await api.link_external_user(await _body(request, AttemptLink)))


@get("/agents/registrations/{registration_id:str}", exception_handlers={ApiError: workos_error})
async def registration(request: Request[Any, Any, Any], registration_id: str) -> Response[bytes]:
    api, _ = await _api(request)
    return _json(await api.registration(registration_id))


@post(
    "/agents/registrations/{registration_id:str}/revoke", status_code=200, exception_handlers={ApiError: workos_error}
)
async def revoke(request: Request[Any, Any, Any], registration_id: str) -> Response[bytes]:
    api, key_id = await _api(request)
    return _json(await api.revoke(registration_id, key_id))


HANDLERS = [validate, link_attempt, registration, revoke]
