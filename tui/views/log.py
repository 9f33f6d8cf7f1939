"""The log pane: the event journal and every database's log lines, filterable, following the tail.

It follows new lines while scrolled to the bottom; scrolling up pauses that (the subtitle says so) and
`end` resumes. The buffer is capped, as k9s caps its log buffer, so a long run never grows without bound.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Log

from tui.filter import RowFilter

LOG_CAP = 5000

# (text, tag): tag is "org:db" for a database's own log line, None for other journal events.
Entry = tuple[str, str | None]


class FollowLog(Log):
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
        self.scoped: deque[str] = deque(maxlen=LOG_CAP)

    def compose(self) -> ComposeResult:
        yield FollowLog(max_lines=LOG_CAP, auto_scroll=True)

    @property
    def log_widget(self) -> FollowLog:
        return self.query_one(FollowLog)

    def _visible(self) -> list[str]:
        lines = list(self.scoped) if self.scope else [text for text, _ in self.entries]
        return self.filter.apply(lines)

    def add(self, entries: list[Entry]) -> None:
        self.entries.extend(entries)
        new = [text for text, tag in entries if tag == self.scope] if self.scope else [t for t, _ in entries]
        if self.scope:
            self.scoped.extend(new)
        shown = self.filter.apply(new)
        if shown:
            self.log_widget.write_lines(shown)
        self.update_titles()

    def rerender(self) -> None:
        log = self.log_widget
        log.clear()
        log.write_lines(self._visible(), scroll_end=True)
        log.scroll_end(animate=False, immediate=True)
        self.update_titles()

    def set_scope(self, scope: str | None) -> None:
        """Show one database's lines only (its backlog arrives through `fill_scope`), or everything again."""
        self.scope = scope
        self.scoped.clear()
        self.rerender()

    def fill_scope(self, scope: str, backlog: list[str]) -> None:
        """The database's earlier lines, fetched after the scope was set: they go before what arrived since."""
        if self.scope != scope:
            return
        arrived = list(self.scoped)
        # A line that arrived live while the backlog was fetched may be in both; compare without the stamp.
        known = {line.split(" ", 2)[-1] for line in backlog[-len(arrived) :]} if arrived else set()
        self.scoped.clear()
        self.scoped.extend(backlog)
        self.scoped.extend(line for line in arrived if line.split(" ", 2)[-1] not in known)
        self.rerender()

    def clear(self) -> None:
        self.entries.clear()
        self.scoped.clear()
        self.rerender()

    def follow(self) -> None:
        self.log_widget.scroll_end(animate=False, immediate=True)
        self.update_titles()

    @property
    def following(self) -> bool:
        return self.log_widget.is_vertical_scroll_end

    def entries_text(self) -> list[str]:
        """Every line held, whatever the scope and filter."""
        return [text for text, _ in self.entries]

    def lines(self) -> list[str]:
        """What the pane shows now (for tests and screenshots)."""
        return list(self.log_widget.lines)

    def update_titles(self) -> None:
        self.border_title = f"Log: {self.scope} (esc: back)" if self.scope else "Log: journal and database lines"
        parts = ["following" if self.following else "paused, scrolled up (end: follow)"]
        if self.filter:
            parts.append(f"filter {self.filter.describe()}")
        self.border_subtitle = " · ".join(parts)
