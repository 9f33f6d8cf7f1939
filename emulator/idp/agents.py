"""The identity provider's agents API (`/agents/*`), which a service calls about the agents that reach it, with its
service key (`Authorization: Bearer sk_test_…`); thin over `emulator.identity.agents_api`.

Errors are WorkOS's: a JSON object with `message` and `code` (`error` repeats the code), which the `workos` SDK
turns into AuthenticationError (401), BadRequestError (400), AuthorizationError (403), NotFoundError (404),
ConflictError (409).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from litestar import Request, Response, Router, get, patch, post
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency, Provide
from litestar.handlers.base import BaseRouteHandler
from litestar.params import FromPath
from litestar.types import Scope

from emulator.core import contract, jsonbody, openapi
from emulator.core.contract import error_shape
from emulator.core.errors import BAD_REQUEST, CONFLICT, ENTITY_NOT_FOUND, FORBIDDEN, UNAUTHORIZED, ApiError
from emulator.identity import service_keys
from emulator.identity.agents_api import (
    AgentRegistrationView,
    AgentsApi,
    AttemptLink,
    ClaimView,
    CredentialCheck,
    CredentialValidation,
)

_encode = msgspec.json.Encoder().encode
_CALLER = "idp.agents.caller"  # where the guard leaves the caller, in the request's scope state


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


@dataclass(frozen=True)
class Caller:
    """The domain, and the id of the live service key the call carries."""

    api: AgentsApi
    key_id: str


async def service_key(connection: ASGIConnection[Any, Any, Any, Any], __: BaseRouteHandler) -> None:
    """401 without a live service key (`Authorization: Bearer sk_test_…`), before the body is read: a caller without
    one learns nothing of what its body would get."""
    idp = connection.app.state["idp"]
    scheme, _, key = connection.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise UNAUTHORIZED("a service key is required: Authorization: Bearer sk_test_… (emulator service-key create)")
    key_id = await service_keys.authenticate(idp.core, key.strip())
    if key_id is None:
        raise UNAUTHORIZED("the service key is not valid (unknown or revoked)")
    connection.scope.setdefault("state", {})[_CALLER] = Caller(idp.agents, key_id)


def _caller(scope: Scope) -> Caller:
    caller = scope["state"][_CALLER]
    assert isinstance(caller, Caller)
    return caller


def _refused(problem: str) -> ApiError:
    return BAD_REQUEST(f"the body is not a valid request: {problem}")


def _body(kind: type[msgspec.Struct]) -> openapi.BodyDependency:
    return contract.body(kind, jsonbody.decoder(kind, _refused))


@post(
    "/agents/credentials/validate",
    status_code=200,
    operation_id="validate_credential",
    dependencies={"check": _body(CredentialCheck)},
    responses=contract.errors(UNAUTHORIZED, BAD_REQUEST),
)
async def validate(caller: NamedDependency[Caller], check: NamedDependency[CredentialCheck]) -> CredentialValidation:
    return await caller.api.validate(check)


@patch(
    "/agents/claims/attempts",
    operation_id="link_claim_attempt",
    dependencies={"link": _body(AttemptLink)},
    responses=contract.errors(UNAUTHORIZED, BAD_REQUEST, FORBIDDEN, ENTITY_NOT_FOUND, CONFLICT),
)
async def link_attempt(caller: NamedDependency[Caller], link: NamedDependency[AttemptLink]) -> ClaimView:
    return await caller.api.link_external_user(link)


@get(
    "/agents/registrations/{registration_id:str}",
    operation_id="get_registration",
    responses=contract.errors(UNAUTHORIZED, ENTITY_NOT_FOUND),
)
async def registration(caller: NamedDependency[Caller], registration_id: FromPath[str]) -> AgentRegistrationView:
    return await caller.api.registration(registration_id)


@post(
    "/agents/registrations/{registration_id:str}/revoke",
    status_code=200,
    operation_id="revoke_registration",
    responses=contract.errors(UNAUTHORIZED, ENTITY_NOT_FOUND),
)
async def revoke(caller: NamedDependency[Caller], registration_id: FromPath[str]) -> AgentRegistrationView:
    return await caller.api.revoke(registration_id, caller.key_id)


HANDLERS = [validate, link_attempt, registration, revoke]


def router() -> Router:
    """The agents API: every call with a live service key, refusals in WorkOS's format."""
    return Router(
        "/",
        route_handlers=HANDLERS,
        guards=[service_key],
        dependencies={"caller": Provide(_caller, sync_to_thread=False)},
        exception_handlers={ApiError: workos_error},
        security=[{"bearer": []}],
    )
