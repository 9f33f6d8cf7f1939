"""`/_emulator/traces/WHO`, `/_emulator/report` and `/_emulator/record`: how each agent behaved, read from the
journal by emulator.behaviour."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request
from litestar.params import PathParameter, QueryParameter

from emulator import __version__
from emulator.admin import ops
from emulator.admin.context import operator_of
from emulator.admin.operation import operation
from emulator.behaviour import read_journal, records, scorecard, traces
from emulator.behaviour.records import Record
from emulator.behaviour.scorecard import Report
from emulator.behaviour.traces import Trace
from emulator.core.clock import iso
from emulator.core.errors import CONFLICT, NOT_FOUND

Who = Annotated[str, PathParameter(max_length=200, description="a registration, an organization or an API key's name")]


@operation(ops.TRACE, errors=[NOT_FOUND, CONFLICT])
async def trace_get(request: Request[Any, Any, Any], who: Who) -> Trace:
    """One agent's trace; `who` may be `ORG/NAME` (a key's name in its organization)."""
    journal = await read_journal(operator_of(request).core)
    return traces.trace(journal, journal.find(who.lstrip("/")))


@operation(ops.REPORT, errors=[NOT_FOUND, CONFLICT])
async def report_get(
    request: Request[Any, Any, Any],
    agent: Annotated[str | None, QueryParameter(name="agent", max_length=200, required=False)] = None,
) -> Report:
    """Every agent the journal knows (or one), with its counts, latency and findings."""
    journal = await read_journal(operator_of(request).core)
    return scorecard.report(journal, journal.find(agent) if agent else None)


@operation(ops.RECORD, errors=[NOT_FOUND, CONFLICT])
async def record_get(
    request: Request[Any, Any, Any],
    agent: Annotated[str | None, QueryParameter(name="agent", max_length=200, required=False)] = None,
) -> Record:
    """The run as a record (`emulator record save`): the journal, or one agent's part of it, secrets redacted."""
    core = operator_of(request).core
    journal = await read_journal(core)
    return records.record(journal, __version__, iso(core.clock.now()), journal.find(agent) if agent else None)


HANDLERS = [trace_get, report_get, record_get]
