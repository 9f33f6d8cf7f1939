"""What a hosted database holds, as its own pixeltable reads it: `table_probe.py`, run in the database's environment
with its home beside its running server (a short-lived "inspect" workload), and what it prints, decoded."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import msgspec

PROBE_FILE = Path(__file__).parent / "table_probe.py"  # read when a probe runs: the wire types import this module
MARK = "PXT-TABLES "
PROBE_TIMEOUT = 120.0  # seconds: an import of pixeltable and a few catalog reads, on a loaded machine
MAX_LINES = 2000  # what a probe may print before its answer (pixeltable's notes), kept for the error


class HostedTable(msgspec.Struct, kw_only=True):
    path: str  # its path in the database, e.g. "docs" (the client's `pxt://org:db/docs`)
    columns: dict[str, str]  # name → pixeltable type as it prints it ("String", "Int | None", ...)
    rows: int
    first: list[dict[str, str | int | float | bool | None]]  # its first rows (values JSON cannot hold, as text)


class ProbeFailed(Exception):
    """The probe ended without its answer: what it printed last says why."""


def decode(lines: Iterable[str]) -> list[HostedTable]:
    kept = list(lines)
    for line in reversed(kept):
        if line.startswith(MARK):
            return msgspec.json.decode(line[len(MARK) :], type=list[HostedTable])
    raise ProbeFailed("; ".join(kept[-5:]) or "it printed nothing")
