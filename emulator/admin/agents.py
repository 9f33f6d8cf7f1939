"""`/_emulator` for the service side of agent registration: the service keys a service calls the agents API with,
and the operator's revocation and deletion of a registration."""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.di import NamedDependency
from litestar.params import FromPath

from emulator.admin import ops
from emulator.admin.context import operator_of
from emulator.admin.operation import operation
from emulator.admin.wire import (
    AgentRegistrationView,
    RegistrationDeleted,
    ServiceKeyCreate,
    ServiceKeyCreated,
    ServiceKeyList,
    ServiceKeyView,
)
from emulator.core.errors import BAD_REQUEST, ENTITY_NOT_FOUND
from emulator.identity import service_keys
from emulator.identity.agents_api import OPERATOR, AgentsApi


def _api(request: Request[Any, Any, Any]) -> AgentsApi:
    return operator_of(request).agents


@operation(ops.SERVICE_KEY_CREATE, body="create", status_code=201, errors=[BAD_REQUEST])
async def service_key_create(
    request: Request[Any, Any, Any], create: NamedDependency[ServiceKeyCreate]
) -> ServiceKeyCreated:
    """A new service key; the answer shows the key, once."""
    return await service_keys.create(operator_of(request).core, create.name)


@operation(ops.SERVICE_KEYS)
async def service_key_list(request: Request[Any, Any, Any]) -> ServiceKeyList:
    return ServiceKeyList(await service_keys.listing(operator_of(request).core.store))


@operation(ops.SERVICE_KEY_REVOKE, errors=[BAD_REQUEST, ENTITY_NOT_FOUND])
async def service_key_revoke(request: Request[Any, Any, Any], key_id: FromPath[str]) -> ServiceKeyView:
    return await service_keys.revoke(operator_of(request).core, key_id)


@operation(ops.REGISTRATION_REVOKE, errors=[ENTITY_NOT_FOUND])
async def registration_revoke(request: Request[Any, Any, Any], registration_id: FromPath[str]) -> AgentRegistrationView:
    return await _api(request).revoke(registration_id, OPERATOR)


@operation(ops.REGISTRATION_DELETE, errors=[ENTITY_NOT_FOUND])
async def registration_delete(request: Request[Any, Any, Any], registration_id: FromPath[str]) -> RegistrationDeleted:
    await _api(request).delete(registration_id)
    return RegistrationDeleted(registration_id, True)


HANDLERS = [service_key_create, service_key_list, service_key_revoke, registration_revoke, registration_delete]
