"""Run records: a run's journal saved to a file with secrets redacted, and the diff of two runs that ignores what
changes from run to run (ids, addresses, ports, instants, durations), so a change in an agent's behaviour is
what shows.

Ids are replaced by their kind and the order they first appear in (`agent_reg_#1`, `agent-#2`, `at_#3`), so
two runs that do the same things in the same order read the same.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

import msgspec

from emulator.behaviour.agents import Agent, Journal
from emulator.core.clock import iso
from emulator.core.events import Event
from emulator.core.kinds import Kind

FORMAT = "pxt-emulator-record/1"

# Secrets that may reach the journal in free text (a hosted log line, an error message).
_SECRETS = (
    (re.compile(r"pxtk_[A-Za-z0-9_]{8,}"), "pxtk_<redacted>"),
    (re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"), "<jwt redacted>"),
    (re.compile(r"(?i)\b(password|passwd|secret|token|api_key)=[^\s&\"']+"), r"\1=<redacted>"),
)
# What differs between two runs of the same agent doing the same things.
_IDS = re.compile(
    r"\b(?P<ulid>(?P<prefix>[a-z]+(?:_[a-z]+)*_)[0-9A-HJKMNP-TV-Z]{20,})\b"
    r"|\b(?P<slug>agent-)[0-9a-f]{6}\b"
    r"|\b(?P<uuid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\b"
    r"|\b(?P<hex>[0-9a-f]{12,})\b"
    r"|\b(?P<ip>127\.\d+\.\d+\.\d+)(?::(?P<port>\d+))?\b"
)
_INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?")
# Per-run measurements, not behaviour.
_UNSTABLE = frozenset({"ms", "rt", "after", "seconds", "now", "before", "bytes_up", "bytes_down", "pid", "took"})
# Not what an agent did: the emulator starting and indexing its docs.
_SKIPPED = frozenset({Kind.EMULATOR_STARTED.value, Kind.DOCS_INDEXED.value})


class RecordedEvent(msgspec.Struct, kw_only=True):
    seq: int
    at: str
    kind: str
    subject: str | None
    data: dict[str, Any]  # the payload as JSON; `Any` as the document shows it: msgspec documents no `object`


class Record(msgspec.Struct, kw_only=True):
    format: str
    emulator: str
    saved_at: str  # the emulator's clock
    agent: str | None  # whose run; None: every agent's
    events: list[RecordedEvent]


def redact(value: Any) -> Any:
    if isinstance(value, str):
        for pattern, replacement in _SECRETS:
            value = pattern.sub(replacement, value)
        return value
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def record(journal: Journal, version: str, saved_at: str, agent: Agent | None) -> Record:
    events: list[Event] = journal.events_of(agent) if agent is not None else journal.events
    return Record(
        format=FORMAT,
        emulator=version,
        saved_at=saved_at,
        agent=agent.id if agent is not None else None,
        events=[
            RecordedEvent(
                seq=e.seq,
                at=iso(e.ts),
                kind=e.kind,
                subject=redact(e.subject),
                data=redact(msgspec.to_builtins(e.data)),
            )
            for e in events
            if e.kind not in _SKIPPED
        ],
    )


class _Names:
    """Each id's stand-in, numbered by first appearance within one run."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def __call__(self, m: re.Match[str]) -> str:
        if m.group("ip"):
            port = ":<port>" if m.group("port") else ""
            return self._name(m.group("ip"), "ip#") + port
        if m.group("ulid"):
            return self._name(m.group("ulid"), m.group("prefix") + "#")
        if m.group("slug"):
            return self._name(m.group(0), "agent-#")
        return self._name(m.group(0), "uuid#" if m.group("uuid") else "hex#")

    def _name(self, value: str, prefix: str) -> str:
        if value not in self.seen:
            self.seen[value] = f"{prefix}{len(self.seen) + 1}"
        return self.seen[value]


def lines(r: Record, logs: bool = False) -> list[str]:
    """The run as one line per event, with what varies between runs taken out."""
    names = _Names()
    out = []
    for e in r.events:
        if e.kind == Kind.DB_LOG and not logs:
            continue
        data = " ".join(f"{k}={_stable(k, v)}" for k, v in sorted(e.data.items()) if k not in _UNSTABLE)
        text = f"{e.kind} {e.subject or '-'} {data}".rstrip()
        out.append(_IDS.sub(names, _INSTANT.sub("<time>", text)))
    return out


def _stable(key: str, value: Any) -> str:
    if isinstance(value, int | float) and key.endswith(("_at", "_exp")):
        return "<time>"  # an instant as epoch seconds
    if isinstance(value, dict | list):
        return msgspec.json.encode(value).decode()
    return str(value)


def diff(a: Record, b: Record, a_name: str = "A", b_name: str = "B", logs: bool = False) -> list[str]:
    """Where two runs diverge: a unified diff of their lines (empty when they did the same)."""
    return list(difflib.unified_diff(lines(a, logs), lines(b, logs), a_name, b_name, lineterm="", n=3))
