"""Every `/_emulator` endpoint, grouped by resource: the emulator itself, identity, organizations, databases and
services. Each calls the same domain the public surfaces use."""

from typing import Any

from litestar import Router
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from emulator.admin import (
    agents,
    behaviour,
    databases,
    declared,
    emulator,
    faults,
    identity,
    orgs,
    snapshots,
    watch,
    webhooks,
)
from emulator.admin.context import STATE_KEY, Operator
from emulator.core.boundary import asgi_headers

HANDLERS = [
    *emulator.HANDLERS,
    *faults.HANDLERS,
    *snapshots.HANDLERS,
    *declared.HANDLERS,
    *behaviour.HANDLERS,
    *identity.HANDLERS,
    *agents.HANDLERS,
    *orgs.HANDLERS,
    *databases.HANDLERS,
    *watch.HANDLERS,
    *webhooks.HANDLERS,
]


def operator_guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """The boundary once more, at the operator router, on the path as routed: whatever spelling reached a handler,
    it answers only with the admin token and within the Host, Origin and body rules (the gate decides first; this
    is the rule's second line, where no spelling can go around it)."""
    operator = connection.app.state[STATE_KEY]
    assert isinstance(operator, Operator)
    scope = connection.scope
    refusal = operator.boundary.check(scope.get("method", "GET"), scope["path"], asgi_headers(scope["headers"]))
    if refusal is not None:
        raise refusal


def router() -> Router:
    """The operator API, guarded, for the origin that mounts it (the site's); its app's state holds the `Operator`
    under `STATE_KEY`."""
    return Router("/", route_handlers=HANDLERS, guards=[operator_guard])
