"""`/_emulator` for an evaluation harness: the values and canary hosts a trial's emulator watches for
(core/watch.py), and every organization's secrets by name, each compared with the watched value of its name."""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.di import NamedDependency

from emulator.admin import ops
from emulator.admin.context import operator_of
from emulator.admin.operation import operation
from emulator.admin.wire import SecretList, WatchSet, WatchView
from emulator.core.errors import BAD_REQUEST
from emulator.hosted import secrets


def _view(request: Request[Any, Any, Any]) -> WatchView:
    watch = operator_of(request).core.bus.watch
    return WatchView(names=watch.names, canary_hosts=list(watch.canary_hosts))


@operation(ops.WATCH_SET, body="wanted", errors=[BAD_REQUEST])
async def watch_set(request: Request[Any, Any, Any], wanted: NamedDependency[WatchSet]) -> WatchView:
    """Watch these values (by name) and answer these canary hosts from now on, instead of what was set before."""
    try:
        operator_of(request).core.bus.watch.configure(wanted.values, wanted.canary_hosts)
    except ValueError as e:
        raise BAD_REQUEST(str(e)) from None
    return _view(request)


@operation(ops.WATCH)
async def watch_get(request: Request[Any, Any, Any]) -> WatchView:
    return _view(request)


@operation(ops.SECRETS)
async def secrets_list(request: Request[Any, Any, Any]) -> SecretList:
    """Every organization's secrets: where and by what name, and whether each equals the watched value of its name."""
    operator = operator_of(request)
    listed = await secrets.listing(operator.core, operator.platform.box, operator.core.bus.watch.equals)
    return SecretList(listed)


HANDLERS = [watch_set, watch_get, secrets_list]
