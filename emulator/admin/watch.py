"""`/_emulator` for an evaluation harness: the values and canary hosts a trial's emulator watches for
(core/watch.py), and every organization's secrets by name, each compared with the watched value of its name."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get, post

from emulator.admin import ops
from emulator.admin.context import operator_of
from emulator.admin.emulator import decode, json_response
from emulator.admin.wire import SecretList, WatchSet, WatchView
from emulator.core import openapi
from emulator.core.errors import BAD_REQUEST
from emulator.hosted import secrets


def _view(request: Request[Any, Any, Any]) -> WatchView:
    watch = operator_of(request).core.bus.watch
    return WatchView(names=watch.names, canary_hosts=list(watch.canary_hosts))


@post(ops.WATCH_SET.path, status_code=200, opt=openapi.body(WatchSet))
async def watch_set(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Watch these values (by name) and answer these canary hosts from now on, instead of what was set before."""
    body = decode(await request.body(), WatchSet)
    try:
        operator_of(request).core.bus.watch.configure(body.values, body.canary_hosts)
    except ValueError as e:
        raise BAD_REQUEST(str(e)) from None
    return json_response(_view(request))


@get(ops.WATCH.path)
async def watch_get(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(_view(request))


@get(ops.SECRETS.path)
async def secrets_list(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Every organization's secrets: where and by what name, and whether each equals the watched value of its name."""
    operator = operator_of(request)
    listed = await secrets.listing(operator.core, operator.platform.box, operator.core.bus.watch.equals)
    return json_response(SecretList(listed))


HANDLERS = [watch_set, watch_get, secrets_list]
