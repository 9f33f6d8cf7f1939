"""`/_emulator/webhooks`: the endpoints the registration events are delivered to, and the delivery log (each
delivery with every try). The rules and the sender are identity/endpoints.py's, deliveries.py's and sender.py's."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, Response, delete, get, post
from litestar.params import Parameter

from emulator.admin import ops
from emulator.admin.context import operator_of
from emulator.admin.emulator import decode, json_response
from emulator.admin.wire import DeliveryList, WebhookAdd, WebhookList
from emulator.core import openapi
from emulator.identity import deliveries, endpoints


@post(ops.WEBHOOK_ADD.path, status_code=201, opt=openapi.body(WebhookAdd))
async def webhooks_add(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Add an endpoint; the answer shows its signing secret, the only time it is shown."""
    operator = operator_of(request)
    spec = decode(await request.body(), WebhookAdd)
    return json_response(await endpoints.add(operator.core, operator.platform.box, spec), 201)


@get(ops.WEBHOOKS.path)
async def webhooks_list(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(WebhookList(await endpoints.every(operator_of(request).core.store)))


@get(ops.WEBHOOK_DELIVERIES.path, opt=openapi.query(endpoint=str, event=str))
async def webhooks_deliveries(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Every delivery (of one endpoint `?endpoint=we_…`, of one event `?event=event_…`) with each try."""
    q = request.query_params
    found = await deliveries.every(operator_of(request).core.store, q.get("endpoint"), q.get("event"))
    return json_response(DeliveryList(found))


@delete(ops.WEBHOOK_REMOVE.path, status_code=200)
async def webhooks_remove(
    request: Request[Any, Any, Any], endpoint_id: Annotated[str, Parameter(max_length=64)]
) -> Response[bytes]:
    """Remove an endpoint: its pending deliveries go with it."""
    return json_response(await endpoints.remove(operator_of(request).core, endpoint_id))


HANDLERS = [webhooks_add, webhooks_list, webhooks_deliveries, webhooks_remove]
