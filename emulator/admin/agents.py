"""`/_emulator` for the service side of agent registration: the service keys a service calls the agents API with,
and the operator's revocation and deletion of a registration."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, delete, get, post

from emulator.admin import ops
from emulator.admin.context import operator_of
from emulator.admin.emulator import decode, json_response
from emulator.admin.wire import RegistrationDeleted, ServiceKeyCreate, ServiceKeyList
from emulator.core import openapi
from emulator.identity import service_keys
from emulator.identity.agents_api import OPERATOR, AgentsApi


def _api(request: Request[Any, Any, Any]) -> AgentsApi:
    return operator_of(request).agents


@post(ops.SERVICE_KEY_CREATE.path, status_code=201, opt=openapi.body(ServiceKeyCreate))
async def service_key_create(request: Request[Any, Any, Any]) -> Response[bytes]:
    """A new service key; the answer shows the key, once."""
    body = decode(await request.body(), ServiceKeyCreate)
    return json_response(await service_keys.create(operator_of(request).core, body.name), 201)


@get(ops.SERVICE_KEYS.path)
async def service_key_list(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(ServiceKeyList(await service_keys.listing(operator_of(request).core.store)))


@delete(ops.SERVICE_KEY_REVOKE.path, status_code=200)
async def service_key_revoke(request: Request[Any, Any, Any], key_id: str) -> Response[bytes]:
    return json_response(await service_keys.revoke(operator_of(request).core, key_id))


@post(ops.REGISTRATION_REVOKE.path, status_code=200)
async def registration_revoke(request: Request[Any, Any, Any], registration_id: str) -> Response[bytes]:
    return json_response(await _api(request).revoke(registration_id, OPERATOR))


@delete(ops.REGISTRATION_DELETE.path, status_code=200)
async def registration_delete(request: Request[Any, Any, Any], registration_id: str) -> Response[bytes]:
    await _api(request).delete(registration_id)
    return json_response(RegistrationDeleted(registration_id, True))


HANDLERS = [service_key_create, service_key_list, service_key_revoke, registration_revoke, registration_delete]
