"""The emulator's log: a line per request and per operation, in the foreground and in `<state-dir>/emulator.log`.

The event journal holds everything in full (`emulator events`, the dashboard); the log is what a person reads
while it runs, as LocalStack and the Firebase emulators print theirs: one line per answered request and per state
change, with a level, so a failed build or a refused call stands out. Lines come from the journal's live feed, so
the log never says what the journal does not hold, and they carry the event's number to look it up there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import logging.handlers
import os
import sys
import time
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

import msgspec

from emulator.core.clock import iso
from emulator.core.events import Event, EventBus
from emulator.core.payloads import (
    DbExited,
    DbStateChanged,
    DiskFull,
    FaultFired,
    HttpRequest,
    MediaStoreFull,
    ServiceStateChanged,
    TunnelRefused,
    WebhookFailed,
)
from emulator.core.tasks import cancel

LOG_NAME = "emulator.log"
MAX_BYTES = 10_000_000  # then emulator.log.1 (one kept): a long run's log stays bounded
log = logging.getLogger("emulator.run")

QUIET = frozenset({"db.log", "clock.moved", "docs.indexed"})
"""Kinds with no line of their own: a database's own log lines (`emulator db` / `pxt db logs` show them), the
ticker's clock moves, the docs index (its count is in the start banner)."""

FAILED_STATES = frozenset({"FAILED", "ERROR", "CRASHED"})


def configure(level: str, state_dir: Path) -> None:
    """Send the emulator's records to the terminal and to the state dir's log file (not twice when stderr already
    is that file: a detached emulator's output goes there)."""
    root = logging.getLogger("emulator")
    root.setLevel(level.upper())
    formatter = LineFormatter()
    path = state_dir / LOG_NAME
    handlers: list[logging.Handler] = [_Terminal(sys.stderr)]
    if not _is_file(sys.stderr, path):
        handlers.append(_File(path, maxBytes=MAX_BYTES, backupCount=1))
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.propagate = False
    with contextlib.suppress(OSError):
        os.chmod(path, 0o600)  # requests name clients and e-mails: the user's own, as the state dir is


def _head(created: float, level: int) -> str:
    """What starts every line: the wall time in UTC to the millisecond (when it happened here), and the level."""
    whole = int(created)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    return f"{stamp}.{int((created - whole) * 1000):03d}Z {logging.getLevelName(level):<7} "


class _Unwritten:
    """A handler whose write fails (the state dir's disk is full, and the log with it) drops the line and says so
    once, on one line, until a write works again: not logging's own "--- Logging error ---" and a traceback for
    each line lost."""

    _failing = False
    _ok = True

    def handleError(self, record: logging.LogRecord) -> None:
        self._ok = False
        if not self._failing:
            self._failing = True
            with contextlib.suppress(Exception):
                sys.stderr.write(f"emulator: the log could not be written ({sys.exc_info()[1]}); lines are lost\n")

    def written(self) -> None:
        if self._ok and self._failing:
            self._failing = False
        self._ok = True


class _Terminal(_Unwritten, logging.StreamHandler[TextIO]):
    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        self.written()


class _File(_Unwritten, logging.handlers.RotatingFileHandler):
    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        self.written()


class LineFormatter(logging.Formatter):
    """Each line as `_head` starts it. A record of the event log carries a batch of lines (`lines`: each with its
    level), so a busy run writes once per batch, not once per request; its text is made once, for every handler
    (the file handler's size check formats it too)."""

    def format(self, record: logging.LogRecord) -> str:
        made: str | None = getattr(record, "made", None)
        if made is None:
            lines: list[tuple[int, str]] | None = getattr(record, "lines", None)
            if lines is None:
                made = _head(record.created, record.levelno) + super().format(record)
            else:
                heads = {level: _head(record.created, level) for level in {level for level, _ in lines}}
                made = "\n".join(heads[level] + text for level, text in lines)
            vars(record)["made"] = made
        return made


def unconfigure() -> None:
    root = logging.getLogger("emulator")
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    root.propagate = True


def _is_file(stream: Any, path: Path) -> bool:
    try:
        a, b = os.fstat(stream.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def line(event: Event) -> tuple[int, str] | None:
    """An event as a log line and its level, or None for a kind that has no line."""
    if event.kind in QUIET:
        return None
    d = event.data
    if isinstance(d, HttpRequest):
        status = d.status
        code = f" {d.error_code}" if d.error_code else ""
        op = f" {d.op}" if d.op else ""
        level = logging.ERROR if status == 0 or status >= 500 else logging.INFO
        dropped = "dropped" if status == 0 else str(status)
        text = f"{d.origin:<4} {d.method} {d.path}{op} -> {dropped}{code} ({d.ms} ms)"
        return level, f"{text} from {event.subject}"
    level = logging.INFO
    failed = isinstance(d, DbStateChanged | ServiceStateChanged) and d.state in FAILED_STATES
    if failed or isinstance(d, DiskFull | MediaStoreFull):
        level = logging.ERROR
    elif isinstance(d, FaultFired | TunnelRefused | DbExited | WebhookFailed):  # a receiver's failure: one line
        level = logging.WARNING
    fields: Mapping[str, object] = msgspec.to_builtins(d)  # the payload as its JSON says it
    return level, describe(event.kind, event.subject, {k: v for k, v in fields.items() if not isinstance(v, dict)})


HIDDEN = frozenset({"rt", "after"})
"""Event fields for the emulator's own bookkeeping (a monotonic instant, the journal's position), not a reader's."""
INSTANTS = frozenset({"before", "now"})
"""Event fields that hold an instant of the emulator's clock (besides every `…_at`)."""


WEBHOOK_TRIES = frozenset({"webhook.delivered", "webhook.failed"})


def webhook_try(kind: str, data: Mapping[str, object]) -> str:
    """A webhook delivery's try as a person reads it: which event went where, the try's number and outcome, and
    when the next try is (`… try 1: 500 HTTP 500 (3.1 ms); next try at …` / `… try 3: 200 (2.0 ms)`)."""
    status, error, next_at = data.get("status"), data.get("error"), data.get("next_at")
    said = [str(status)] if status is not None else []
    said += [str(error)] if error and error != f"HTTP {status}" else []  # a status alone says "HTTP 500"
    outcome = " ".join(said)
    text = f"{data.get('event')} {data.get('event_id')} -> {data.get('url')} try {data.get('attempt')}: "
    text += f"{outcome or 'no answer'} ({data.get('ms')} ms)"
    if kind == "webhook.failed":  # retried, or given up (its JSON leaves out a next_at of none)
        text += f"; next try at {next_at}" if next_at else "; given up"
    return text


def describe(kind: str, subject: str | None, data: Mapping[str, object]) -> str:
    """An event on one line, as the log and `emulator events` print it: kind, subject, fields, instants in ISO 8601
    (as the dashboard shows them)."""
    if kind in WEBHOOK_TRIES:
        return f"{kind} [{subject}] {webhook_try(kind, data)}"
    fields: list[str] = []
    for key, value in data.items():
        if value is None or key in HIDDEN:
            continue
        instant = key.endswith("_at") or key in INSTANTS
        if instant and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = iso(value)
        fields.append(f"{key}={value}")
    where = f" [{subject}]" if subject else ""
    return f"{kind}{where} {' '.join(fields)}".rstrip()


class EventLog:
    """Follows the journal's live feed and writes a line per event (at the levels `line` gives)."""

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if log.isEnabledFor(logging.WARNING):
            self._task = asyncio.create_task(self._run(self._bus.last_seq), name="event-log")

    async def stop(self) -> None:
        await cancel(self._task)

    async def _run(self, last: int) -> None:
        while True:
            # Behind by up to the journal's cap: a reader cut off sooner would reread what is still there, later
            # would find its oldest events gone (a busy run writes the journal in batches of thousands).
            async for batch in self._bus.follow_batches(last, limit=self._bus.cap):
                last = batch[-1].seq
                lines: list[tuple[int, str]] = []
                for event in batch:
                    found = line(event)
                    if found is not None and log.isEnabledFor(found[0]):
                        lines.append((found[0], f"#{event.seq} {found[1]}"))
                if lines:
                    text = "\n".join(text for _, text in lines)  # what a handler with another formatter shows
                    log.log(max(level for level, _ in lines), "%s", text, extra={"lines": lines})
            await asyncio.sleep(0.1)  # the feed ended (this reader fell behind): catch up from the journal


def tail(path: Path, lines: int, follow: bool) -> Iterator[str]:
    """The last `lines` lines of a log, then (`follow`) what is added to it, across a rotation too."""
    with open(path, errors="replace") as f:
        yield from deque(f, maxlen=max(0, lines))
        if not follow:
            return
        inode = os.fstat(f.fileno()).st_ino
        while True:
            chunk = f.readline()
            if chunk:
                yield chunk
                continue
            try:
                if os.stat(path).st_ino != inode:  # rotated: read the new file from its start
                    f.close()
                    f = open(path, errors="replace")
                    inode = os.fstat(f.fileno()).st_ino
                    continue
            except FileNotFoundError:
                pass
            time.sleep(0.2)
