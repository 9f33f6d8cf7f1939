"""`/_emulator` for hosted databases and services: their states, a database's log lines, and stopping or starting
a database as the operator (the same generation, receipt and events as `pxt db stop/start`)."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request
from litestar.di import NamedDependency
from litestar.params import FromPath, QueryParameter

from emulator.admin import ops
from emulator.admin.context import Operator, operator_of
from emulator.admin.operation import operation
from emulator.admin.wire import (
    DatabaseList,
    DatabaseUsageView,
    DatabaseView,
    LogLines,
    LogLineView,
    ServiceAnswer,
    ServiceCall,
    ServiceList,
    ServiceView,
    TableList,
    UsageList,
    UsageView,
    VerbAccepted,
)
from emulator.core.errors import BAD_REQUEST, CONFLICT, NOT_FOUND, UNAVAILABLE
from emulator.hosted import databases, lifecycle, logs, orgs, services
from emulator.runtime.tables import ProbeFailed


async def database_views(operator: Operator) -> dict[str, list[DatabaseView]]:
    """Every database's view, by organization id."""
    reconciler = operator.platform.reconciler
    by_org: dict[str, list[DatabaseView]] = {}
    for d in sorted(await databases.every(operator.core.store), key=lambda d: (d.created_at, d.name)):
        view = DatabaseView.of(d, reconciler.server_ready(d.org_id, d.name), reconciler.usage(d.org_id, d.name))
        by_org.setdefault(d.org_id, []).append(view)
    return by_org


@operation(ops.DATABASES)
async def databases_list(request: Request[Any, Any, Any]) -> DatabaseList:
    """Every hosted database: its state, generation, environment, whether its server runs, and its usage."""
    operator = operator_of(request)
    reconciler = operator.platform.reconciler
    rows = await databases.every(operator.core.store)
    views = [
        DatabaseView.of(d, reconciler.server_ready(d.org_id, d.name), reconciler.usage(d.org_id, d.name)) for d in rows
    ]
    return DatabaseList(reconciler.kind, list(reconciler.unenforced), views)


@operation(ops.DATABASE_LOGS, errors=[NOT_FOUND])
async def database_logs(
    request: Request[Any, Any, Any],
    org: FromPath[str],
    db: FromPath[str],
    since: Annotated[int, QueryParameter(ge=0, le=2**63 - 1)] = 0,
) -> LogLines:
    """A database's log lines (its server's output and the emulator's notes), after line id `since`."""
    operator = operator_of(request)
    found = await orgs.find(operator.core.store, org)
    if found is None:
        raise NOT_FOUND(f"no organization {org!r}")
    lines = await logs.after(operator.core.store, found.id, db, since)
    return LogLines([LogLineView(x.id, x.ts_ms, x.service or None, x.line) for x in lines])


@operation(ops.DATABASE_TABLES, errors=[NOT_FOUND, CONFLICT, UNAVAILABLE])
async def database_tables(
    request: Request[Any, Any, Any],
    org: FromPath[str],
    db: FromPath[str],
    rows: Annotated[int, QueryParameter(ge=0, le=1000)] = 20,
) -> TableList:
    """The database's tables, each with its columns, row count and first `rows` rows, as its own pixeltable reads
    them beside its running server (409 when it does not run: start it first)."""
    platform = operator_of(request).platform
    owner = await platform.org(org)
    if await databases.get(platform.core.store, owner.id, db) is None:
        raise NOT_FOUND(f"no database {db!r} in {owner.slug}")
    try:
        found = await platform.reconciler.tables(owner.id, db, rows)
    except ProbeFailed as e:
        raise UNAVAILABLE(f"the tables of {owner.slug}:{db} could not be read: {e}") from None
    if found is None:
        raise CONFLICT(f"{owner.slug}:{db} does not run: its tables are read beside its server")
    return TableList(owner.slug, db, found)


@operation(ops.SERVICE_CALL, body="call", errors=[NOT_FOUND, CONFLICT])
async def service_call(
    request: Request[Any, Any, Any], org: FromPath[str], db: FromPath[str], call: NamedDependency[ServiceCall]
) -> ServiceAnswer:
    """The operator's request to a running service, straight to it (no credential; not an agent's request, so it
    is not journaled as one): what it answered."""
    platform = operator_of(request).platform
    owner = await platform.org(org)
    held = await services.of_database(platform.core.store, owner.id, db)
    found = next((s for s in held.values() if s.label == call.service), None)
    if found is None:
        raise NOT_FOUND(f"no service {call.service!r} in {owner.slug}:{db}")
    body = None if bytes(call.json) == b"null" else bytes(call.json)
    answer = await platform.reconciler.call_service(found, call.method, call.path, body)
    if answer is None:
        raise CONFLICT(f"the service {call.service} of {owner.slug}:{db} does not run")
    status, content_type, content = answer
    return ServiceAnswer(status, content_type, content.decode(errors="replace"))


async def _verb(request: Request[Any, Any, Any], org: str, db: str, verb: str) -> VerbAccepted:
    platform = operator_of(request).platform
    owner = await platform.org(org)
    receipt = await lifecycle.database_verb(platform.core, platform.reconciler, owner.id, owner.slug, db, verb)
    return VerbAccepted(owner.slug, db, verb, receipt)


# A verb's refusals (hosted/lifecycle.py): no such organization or database, not now (its state), not this one.
_VERB = (BAD_REQUEST, NOT_FOUND, CONFLICT)


@operation(ops.DATABASE_STOP, errors=_VERB)
async def database_stop(request: Request[Any, Any, Any], org: FromPath[str], db: FromPath[str]) -> VerbAccepted:
    """What `pxt db stop` does, as the operator: the same generation, receipt and events."""
    return await _verb(request, org, db, "stop")


@operation(ops.DATABASE_START, errors=_VERB)
async def database_start(request: Request[Any, Any, Any], org: FromPath[str], db: FromPath[str]) -> VerbAccepted:
    return await _verb(request, org, db, "start")


@operation(ops.SERVICES)
async def services_list(request: Request[Any, Any, Any]) -> ServiceList:
    """Every hosted service instance, with its state and, while its gateway runs, its endpoint."""
    operator = operator_of(request)
    reconciler = operator.platform.reconciler
    rows = await services.every(operator.core.store)
    return ServiceList([ServiceView.of(s, reconciler.endpoint(s) or None) for s in rows])


@operation(ops.USAGE)
async def usage_list(request: Request[Any, Any, Any]) -> UsageList:
    """What every hosted database's workloads used (CPU seconds, peak memory), read now; deleted ones included."""
    usage = await operator_of(request).platform.reconciler.usage_now()
    return UsageList([DatabaseUsageView(org=u.slug, db=u.db, usage=UsageView.of(u), running=u.running) for u in usage])


HANDLERS = [
    databases_list,
    database_logs,
    database_tables,
    database_stop,
    database_start,
    services_list,
    service_call,
    usage_list,
]
