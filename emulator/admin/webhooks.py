"""`/_emulator/webhooks`: the endpoints the registration events are delivered to, and the delivery log (each
delivery with every try). The rules and the sender are identity/endpoints.py's, deliveries.py's and sender.py's."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request
from litestar.di import NamedDependency
from litestar.params import PathParameter, QueryParameter

from emulator.admin import ops
from emulator.admin.context import operator_of
from emulator.admin.operation import operation
from emulator.admin.wire import DeliveryList, WebhookAdd, WebhookCreated, WebhookList, WebhookRemoved
from emulator.core.errors import BAD_REQUEST, NOT_FOUND
from emulator.identity import deliveries, endpoints


@operation(ops.WEBHOOK_ADD, body="spec", status_code=201, errors=[BAD_REQUEST])
async def webhooks_add(request: Request[Any, Any, Any], spec: NamedDependency[WebhookAdd]) -> WebhookCreated:
    """Add an endpoint; the answer shows its signing secret, the only time it is shown."""
    operator = operator_of(request)
    return await endpoints.add(operator.core, operator.platform.box, spec)


@operation(ops.WEBHOOKS)
async def webhooks_list(request: Request[Any, Any, Any]) -> WebhookList:
    return WebhookList(await endpoints.every(operator_of(request).core.store))


@operation(ops.WEBHOOK_DELIVERIES)
async def webhooks_deliveries(
    request: Request[Any, Any, Any],
    endpoint: Annotated[str | None, QueryParameter(name="endpoint", description="we_…")] = None,
    event: Annotated[str | None, QueryParameter(name="event", description="event_…")] = None,
) -> DeliveryList:
    """Every delivery (of one endpoint `?endpoint=we_…`, of one event `?event=event_…`) with each try."""
    return DeliveryList(await deliveries.every(operator_of(request).core.store, endpoint, event))


@operation(ops.WEBHOOK_REMOVE, errors=[NOT_FOUND])
async def webhooks_remove(
    request: Request[Any, Any, Any], endpoint_id: Annotated[str, PathParameter(max_length=64)]
) -> WebhookRemoved:
    """Remove an endpoint: its pending deliveries go with it."""
    return await endpoints.remove(operator_of(request).core, endpoint_id)


HANDLERS = [webhooks_add, webhooks_list, webhooks_deliveries, webhooks_remove]
