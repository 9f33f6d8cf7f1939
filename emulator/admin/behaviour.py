"""`/_emulator/traces/WHO`, `/_emulator/report` and `/_emulator/record`: how each agent behaved, read from the
journal by emulator.behaviour."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, Response, get
from litestar.params import Parameter

from emulator import __version__
from emulator.admin import ops
from emulator.admin.context import operator_of
from emulator.admin.emulator import json_response
from emulator.behaviour import read_journal, records, scorecard, traces
from emulator.core.clock import iso

Who = Annotated[str, Parameter(max_length=200, description="a registration, an organization or an API key's name")]


@get(ops.TRACE.path)
async def trace_get(request: Request[Any, Any, Any], who: Who) -> Response[bytes]:
    """One agent's trace; `who` may be `ORG/NAME` (a key's name in its organization)."""
    journal = await read_journal(operator_of(request).core)
    return json_response(traces.trace(journal, journal.find(who.lstrip("/"))))


@get(ops.REPORT.path)
async def report_get(
    request: Request[Any, Any, Any],
    agent: Annotated[str | None, Parameter(query="agent", max_length=200, required=False)] = None,
) -> Response[bytes]:
    """Every agent the journal knows (or one), with its counts, latency and findings."""
    journal = await read_journal(operator_of(request).core)
    return json_response(scorecard.report(journal, journal.find(agent) if agent else None))


@get(ops.RECORD.path)
async def record_get(
    request: Request[Any, Any, Any],
    agent: Annotated[str | None, Parameter(query="agent", max_length=200, required=False)] = None,
) -> Response[bytes]:
    """The run as a record (`emulator record save`): the journal, or one agent's part of it, secrets redacted."""
    core = operator_of(request).core
    journal = await read_journal(core)
    return json_response(
        records.record(journal, __version__, iso(core.clock.now()), journal.find(agent) if agent else None)
    )


HANDLERS = [trace_get, report_get, record_get]
