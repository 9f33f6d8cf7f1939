"""The log pane: the event journal and every database's log lines, filterable, following the tail.

It follows new lines while scrolled to the bottom; scrolling up pauses that (the subtitle says so) and
`end` resumes. The buffer is capped, as k9s caps its log buffer, so a long run never grows without bound.
Long lines wrap (`w` cuts them instead, with sideways scrolling), and errors stand out: an event whose data
holds a 4xx/5xx status or an error, a kind that is a failure, a refused act, a database's ERROR/FATAL line.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any, NamedTuple

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.events import Resize, Show
from textual.widgets import RichLog

from emulator.admin.wire import EventView
from emulator.core.kinds import Kind
from emulator.core.payloads import failed
from tui.filter import RowFilter

LOG_CAP = 5000
ERROR = "bold red"
WARNING = "yellow"
HINT = "dim italic"

# Kinds that are a failure whatever their data says.
FAILURES = frozenset(
    {
        Kind.DB_EXITED,
        Kind.DISK_FULL,
        Kind.MEDIA_STORE_FULL,
        Kind.TUNNEL_REFUSED,
        Kind.FAULT_FIRED,
        Kind.IDP_CLAIM_DENIED,
        Kind.IDP_LOGIN_DENIED,
    }
)
# Kinds worth noticing that are not failures.
NOTICES = frozenset({Kind.TRIAL_EXPIRED, Kind.FAULT_ARMED, Kind.FAULT_HELD, Kind.SWITCH_CHANGED})
_DB_ERROR = re.compile(r"\b(ERROR|FATAL|PANIC|Traceback|Exception)\b")
_DB_WARNING = re.compile(r"\bWARNING\b")


class Entry(NamedTuple):
    text: str
    tag: str | None = None  # "org:db" for a database's own log line, None for other journal events
    style: str = ""


def event_style(event: EventView) -> str:
    """How an event's line reads: red for an error (a 4xx/5xx status, an error or a failed state in its data,
    a failure kind), yellow for what is worth noticing, plain otherwise."""
    kind, data = event.kind, event.data
    status = data.get("status")
    if isinstance(status, int) and not isinstance(status, bool) and status >= 400:
        # A pending poll (pxt login's) is a wait, not an error.
        return ERROR if failed(status, data.get("error_code")) else ""
    if kind in FAILURES or data.get("error") or data.get("state") == "FAILED" or data.get("failure_reason"):
        return ERROR
    return WARNING if kind in NOTICES else ""


def db_line_style(line: str) -> str:
    if _DB_ERROR.search(line):
        return ERROR
    return WARNING if _DB_WARNING.search(line) else ""


class FollowLog(RichLog):
    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if isinstance(self.parent, LogView):
            self.parent.update_titles()


class LogView(Vertical):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.filter = RowFilter()
        self.entries: deque[Entry] = deque(maxlen=LOG_CAP)
        # When scoped to one database: its lines (backlog from the emulator, then live ones).
        self.scope: str | None = None
        self.scoped: deque[Entry] = deque(maxlen=LOG_CAP)
        self.filled = False  # the scoped database's backlog has arrived
        self.wrap = True
        self.shown: deque[str] = deque(maxlen=LOG_CAP)
        self._width = 0
        # Lines came while the pane was hidden: they are written when it shows, at its width then (written
        # hidden, a RichLog measures no width and wraps at its minimum, 78 columns).
        self._unwritten = False

    def compose(self) -> ComposeResult:
        yield FollowLog(max_lines=LOG_CAP, wrap=True, markup=False, highlight=False, auto_scroll=False)

    @property
    def log_widget(self) -> FollowLog:
        return self.query_one(FollowLog)

    def _visible(self) -> list[Entry]:
        entries = list(self.scoped) if self.scope else list(self.entries)
        if not self.filter:
            return entries
        return [e for e in entries if self.filter.keeps(e.text)]

    @property
    def hidden(self) -> bool:
        log = self.log_widget
        return not log.is_mounted or log.scrollable_content_region.width <= 0

    def _write(self, entries: list[Entry], *, scroll_end: bool) -> None:
        if not entries:
            return
        self.shown.extend(e.text for e in entries)
        if self.hidden:
            self._unwritten = True
            return
        text = Text("\n").join(Text(e.text, style=e.style) for e in entries)
        self.log_widget.write(text, width=self._width_for(entries), shrink=self.wrap, scroll_end=scroll_end)

    def _width_for(self, entries: list[Entry]) -> int | None:
        """Wrapped, a line fits the pane; cut, it keeps its whole width and the pane scrolls sideways. (Said
        exactly: measured, a line would be capped at the console's width, not the pane's.)"""
        log = self.log_widget
        if not log.is_mounted or log.scrollable_content_region.width <= 0:
            return None  # written once the pane has a size
        if self.wrap:
            return log.scrollable_content_region.width
        return max(log.scrollable_content_region.width, *(cell_len(e.text) for e in entries))

    def add(self, entries: list[Entry]) -> None:
        following = self.following
        self.entries.extend(entries)
        new = [e for e in entries if e.tag == self.scope] if self.scope else entries
        if self.scope:
            if new and not self.scoped:
                self.scoped.extend(new)
                self.rerender()  # the hint goes
                return
            self.scoped.extend(new)
        shown = [e for e in new if self.filter.keeps(e.text)]
        self._write(shown, scroll_end=following)
        self.update_titles()

    def rerender(self, *, follow: bool = True) -> None:
        """Write every visible line again (after a change of filter, scope, wrap or width); `follow` False keeps
        the place a person scrolled to."""
        log = self.log_widget
        self.shown.clear()
        visible = self._visible()
        self._unwritten = self.hidden  # written, and the hint with them, when the pane shows
        if self._unwritten:
            self.shown.extend(e.text for e in visible)
            return
        place = log.scroll_y
        log.clear()
        self._write(visible, scroll_end=follow)
        if self.scope and self.filled and not self.scoped:
            log.write(
                Text(
                    f"no log lines from {self.scope} yet: its server starts on the first connection "
                    "(a pxt call, the tunnel, or S on the database), and its lines show here as they come",
                    style=HINT,
                ),
                width=self._width_for([Entry("")]) if self.wrap else None,
                shrink=True,
            )
        if follow:
            log.scroll_end(animate=False, immediate=True, x_axis=False)
        else:
            log.scroll_to(y=place, animate=False, immediate=True)
        self.update_titles()

    def on_show(self, event: Show) -> None:
        if self._unwritten:
            self.rerender(follow=self.following)

    def on_resize(self, event: Resize) -> None:
        # Wrapped lines are cut to the width they were written at: write them again at the new width.
        if self.wrap and event.size.width != self._width:
            self._width = event.size.width
            self.call_after_refresh(self.rerender)

    def set_wrap(self, wrap: bool) -> None:
        self.wrap = wrap
        self.log_widget.wrap = wrap
        self.rerender()

    def set_scope(self, scope: str | None) -> None:
        """Show one database's lines only (its backlog arrives through `fill_scope`), or everything again."""
        self.scope = scope
        self.scoped.clear()
        self.filled = False
        self.rerender()

    def fill_scope(self, scope: str, backlog: list[Entry]) -> None:
        """The database's earlier lines, fetched after the scope was set: they go before what arrived since."""
        if self.scope != scope:
            return
        arrived = list(self.scoped)
        # A line that arrived live while the backlog was fetched may be in both; compare without the stamp.
        known = {e.text.split(" ", 2)[-1] for e in backlog[-len(arrived) :]} if arrived else set()
        self.scoped.clear()
        self.scoped.extend(backlog)
        self.scoped.extend(e for e in arrived if e.text.split(" ", 2)[-1] not in known)
        self.filled = True
        self.rerender()

    def clear(self) -> None:
        self.entries.clear()
        self.scoped.clear()
        self.rerender()

    def follow(self) -> None:
        self.log_widget.scroll_end(animate=False, immediate=True, x_axis=False)
        self.update_titles()

    @property
    def following(self) -> bool:
        return self.log_widget.is_vertical_scroll_end

    def entries_text(self) -> list[str]:
        """Every line held, whatever the scope and filter."""
        return [e.text for e in self.entries]

    def lines(self) -> list[str]:
        """The lines the pane shows now, each whole however it wraps (for tests and screenshots)."""
        return list(self.shown)

    def hint(self) -> str:
        """What the pane says when a database has no lines yet (empty otherwise)."""
        log = self.log_widget
        if self.scope and self.filled and not self.scoped and log.lines:
            return " ".join(" ".join(strip.text for strip in log.lines).split())
        return ""

    def update_titles(self) -> None:
        self.border_title = f"Log: {self.scope} (esc: back)" if self.scope else "Log: journal and database lines"
        parts = ["following" if self.following else "paused, scrolled up (end: follow)"]
        if not self.wrap:
            parts.append("lines cut (w: wrap)")
        if self.filter:
            parts.append(f"filter {self.filter.describe()}")
        self.border_subtitle = " · ".join(parts)
