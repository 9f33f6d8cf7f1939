"""`emulator tui`: a live dashboard of one emulator, as a client of its `/_emulator` API.

Two workers do all the I/O, so the screen never waits on the network:
- `_follow` reads the event stream (after fetching every snapshot once per connection) and reconnects,
  with the stream's `since`, whenever the emulator goes away and comes back;
- `_refresher` fetches again only the snapshots that the events named as stale, a burst at a time.
Acts (claim, approve, clock, stop/start, faults, snapshots, reset) run in workers of their own; the event
stream then shows their effect like any other change.

Every view's tab shows at 80 columns (titles shorten, then pack), and the top bar keeps the emulator's URL.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal
from textual.content import Content
from textual.events import Resize
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Input, Static, TabbedContent, TabPane

from emulator.admin.client import EmulatorClient, EmulatorError, Locator, Unreachable
from emulator.admin.wire import ClaimDecided, EventView, OrgList
from emulator.core import runlog
from emulator.core.kinds import Kind
from emulator.core.payloads import ClockMoved, DbLog
from tui.filter import RowFilter
from tui.keys import ACTS, VIEWS, bindings, visible
from tui.model import AGENT_ACTIVITY, ALL, SNAPSHOTS, Model, affected, fmt_span, fmt_stamp
from tui.screens import ConfirmScreen, DetailScreen, HelpScreen, PromptScreen
from tui.views.agents import AgentsView, trace_lines
from tui.views.databases import DatabasesView
from tui.views.faults import FaultsView
from tui.views.keys import KeysView
from tui.views.log import ERROR, Entry, LogView, db_line_style, event_style
from tui.views.registrations import RegistrationsView
from tui.views.services import ServicesView
from tui.views.snapshots import SnapshotsView
from tui.views.switches import SwitchesView
from tui.views.table import TableView
from tui.views.trials import TrialsView
from tui.views.users import UsersView

A = TypeVar("A")  # what an act answers

# How many journal events the log pane starts with when it attaches.
LOG_BACKLOG = 500
DEFAULT_EMAIL = "dev@example.org"

# Which table views show which snapshots.
_VIEW_SNAPSHOTS: dict[str, frozenset[str]] = {
    "registrations": frozenset({"registrations", "claims", "logins"}),
    "trials": frozenset({"orgs"}),
    "databases": frozenset({"orgs"}),
    "services": frozenset({"services"}),
    "users": frozenset({"users"}),
    "keys": frozenset({"keys"}),
    "switches": frozenset({"switches"}),
    "agents": frozenset({"agents"}),
    "faults": frozenset({"faults"}),
    "snapshots": frozenset({"snapshots"}),
}
_TABLES: dict[str, type[TableView]] = {
    "registrations": RegistrationsView,
    "trials": TrialsView,
    "databases": DatabasesView,
    "services": ServicesView,
    "users": UsersView,
    "keys": KeysView,
    "switches": SwitchesView,
    "agents": AgentsView,
    "faults": FaultsView,
    "snapshots": SnapshotsView,
}
# Keys that only mean something in one view (elsewhere they are hidden from the footer and do nothing).
_ONLY_IN = {
    "claim_trial": "trials",
    "approve_claim": "registrations",
    "deny_claim": "registrations",
    "toggle_switch": "switches",
    "wrap": "log",
    "stop_db": "databases",
    "start_db": "databases",
    "db_logs": "databases",
    "follow": "log",
    "remove_fault": "faults",
    "clear_faults": "faults",
    "save_snapshot": "snapshots",
    "load_snapshot": "snapshots",
    "delete_snapshot": "snapshots",
}
# Below this many columns the top bar drops the product's name and the clock's word, so the URL stays.
NARROW_TOP = 110


class FilterBar(Input):
    """The `/` line: filters as you type; enter keeps the filter, esc puts the previous one back."""

    BINDINGS: ClassVar[list[Any]] = [Binding("escape", "cancel", show=False)]

    class Cancelled(Message):
        pass

    def action_cancel(self) -> None:
        self.post_message(self.Cancelled())


class Dashboard(App[None]):
    # Package data of `tui`, found as the emulator's own data is (emulator/shipped.py).
    CSS_PATH = Path(str(resources.files("tui") / "dashboard.tcss"))
    TITLE = "Pixeltable Cloud emulator"
    BINDINGS: ClassVar[list[Any]] = bindings()

    def __init__(
        self,
        locator: Locator,
        *,
        readonly: bool = False,
        label: str | None = None,
        initial: str = "registrations",
    ) -> None:
        super().__init__()
        self.locator = locator
        self.client = EmulatorClient(locator)
        self.readonly = readonly
        self.label = label  # shown instead of the emulator's URL (fixed text for screenshots)
        self.initial = initial
        self.model = Model()
        self.connection = "connecting"
        self.connection_detail = ""
        self.history: list[str] = []
        self._stale: set[str] = set()
        self._wake = asyncio.Event()
        self._snapshot_seq = 0  # events up to this one are already in the snapshots we hold
        self._agents_active = False  # agents made calls since the Agents view was last fetched
        self._filter_before = ""
        self._tab_fit = ""  # how the tab labels fit the width now: "full", "short" or "packed"

    # --- layout ---------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Horizontal(id="topbar"):
            yield Static(id="title")
            yield Static(id="clock")
            yield Static(id="conn")
        with TabbedContent(initial=self.initial, id="views"):
            for v in VIEWS:
                with TabPane(f"{v.key} {v.title}", id=v.name):
                    yield (_TABLES[v.name](id=f"{v.name}-view") if v.name in _TABLES else LogView(id="log-view"))
        bar = FilterBar(placeholder="filter: text or regex; !text keeps what does not match", id="filter")
        bar.cursor_blink = False
        yield bar
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#filter").display = False
        self._fit_tabs(self.size.width)
        self._render_top()
        self._render_all()
        self.log_view.update_titles()
        self.run_worker(self._follow(), name="events", group="io")
        self.run_worker(self._refresher(), name="refresher", group="io")
        self.set_interval(1.0, self._tick)
        self.call_after_refresh(self._focus_view)

    async def on_unmount(self) -> None:
        await self.client.close()

    @property
    def active(self) -> str:
        return self.query_one("#views", TabbedContent).active or self.initial

    @property
    def log_view(self) -> LogView:
        return self.query_one("#log-view", LogView)

    def table_view(self, name: str) -> TableView:
        return self.query_one(f"#{name}-view", TableView)

    def _focus_view(self) -> None:
        if self.active in _TABLES:
            self.table_view(self.active).table.focus()
        else:
            self.log_view.log_widget.focus()

    # --- rendering ------------------------------------------------------------------------------

    def on_resize(self, event: Resize) -> None:
        self._fit_tabs(event.size.width)
        self._render_top()

    def _fit_tabs(self, width: int) -> None:
        """Label the tabs so that every one shows: whole titles when they fit, else short ones, else short ones
        packed (the key in bold against the name, one column between tabs), which fit 80 columns."""
        full = [f"{v.key} {v.title}" for v in VIEWS]
        short = [f"{v.key} {v.short}" for v in VIEWS]
        padded = lambda labels: sum(len(label) + 2 for label in labels)  # noqa: E731 (a tab's padding is 1+1)
        fit = "full" if padded(full) <= width else "short" if padded(short) <= width else "packed"
        if fit == self._tab_fit:
            return
        self._tab_fit = fit
        tabs = self.query_one("#views", TabbedContent)
        tabs.set_class(fit == "packed", "-packed")
        for v, label in zip(VIEWS, full if fit == "full" else short, strict=True):
            tabs.get_tab(v.name).label = Content.assemble((v.key, "bold"), v.short) if fit == "packed" else label

    @property
    def narrow(self) -> bool:
        return self.size.width < NARROW_TOP

    def _render_top(self) -> None:
        if not self.query("#title"):  # the app is closing (a worker's last word comes after its widgets went)
            return
        where = self.label or self.client.known_site or self.locator.describe()
        version = f" {self.model.version}" if self.model.version else ""  # none until the first status
        readonly = ("READ-ONLY", "bold reverse yellow")
        if self.narrow:  # READ-ONLY and the URL first, the version last: what is cut is what matters least
            title = Text.assemble(*((readonly, " ") if self.readonly else ()), (where, "bold"), version)
        else:
            title = Text.assemble((f"Pixeltable Cloud emulator{version}", "bold"), f"  {where}")
            title.append_text(Text.assemble("  ", readonly) if self.readonly else Text())
        title.no_wrap, title.overflow = True, "ellipsis"
        self.query_one("#topbar").set_class(self.narrow, "-narrow")
        self.query_one("#title", Static).update(title)
        self._render_clock()
        style = {"live": "bold green", "connecting": "yellow", "reconnecting": "bold yellow"}[self.connection]
        mark = "●" if self.connection == "live" else "◌"
        detail = f" ({self.connection_detail})" if self.connection_detail and self.connection != "live" else ""
        conn = self.query_one("#conn", Static)
        conn.tooltip = self.connection_detail if detail else None
        detail = "" if self.narrow else detail  # narrow, the URL is kept and the reason is the tooltip alone
        conn.update(Text(f"{mark} {self.connection}{detail}", style=style))

    def _render_clock(self) -> None:
        for clock in self.query("#clock").results(Static):  # none while the app closes
            label = self.model.clock.label()
            clock.update(Text(label if self.narrow else f"clock {label}", style="bold"))

    def _render(self, names: Iterable[str]) -> None:
        names = set(names)
        for view, needs in _VIEW_SNAPSHOTS.items():
            if needs & names:
                self.table_view(view).show(self.model)

    def _render_all(self) -> None:
        self._render(ALL)

    def _tick(self) -> None:
        """Once a second: the Agents view catches up with the calls agents made, and a running clock moves on
        screen, and with it time left and token ages."""
        if self._agents_active:
            self._agents_active = False
            self._stale.add("agents")
            self._wake.set()
        if self.model.clock.frozen:
            return
        self._render_clock()
        self._render({"orgs", "registrations"})

    def _set_connection(self, state: str, detail: str = "") -> None:
        self.connection, self.connection_detail = state, detail
        self._render_top()

    # --- I/O workers ----------------------------------------------------------------------------

    async def _follow(self) -> None:
        delay = 0.1
        while True:
            try:
                status = await self.client.status()
                seq = status.events
                if seq < self.model.last_seq:
                    # Another emulator (a new state dir) now answers here: start over.
                    self.model = Model()
                    self.log_view.clear()
                self.model.version = status.version
                self.model.clock.set(status.clock.now, status.clock.frozen)
                await self._fetch(ALL)
                self._snapshot_seq = seq
                since = self.model.last_seq or max(0, seq - LOG_BACKLOG)
                self._set_connection("live")
                delay = 0.1
                async for event in self.client.events(since):
                    self._on_event(event)
                raise Unreachable("the emulator closed the event stream")
            except (Unreachable, EmulatorError) as e:
                self._set_connection("reconnecting" if self.model.version else "connecting", str(e))
            except Exception as e:  # whatever answered is not an emulator we understand: keep trying
                self._set_connection("reconnecting" if self.model.version else "connecting", repr(e))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _refresher(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(0.02)  # a burst of events (one request publishes several) is one fetch
            self._wake.clear()
            names, self._stale = self._stale, set()
            try:
                await self._fetch(names)
            except Exception:
                pass  # `_follow` reconnects and fetches everything again

    async def _fetch(self, names: Iterable[str]) -> None:
        names = sorted(names)
        bodies = await asyncio.gather(*(SNAPSHOTS[n](self.client) for n in names))
        for body in bodies:
            self.model.apply_snapshot(body)
            if isinstance(body, OrgList) and not self.model.clock.frozen:
                self.model.clock.set(body.now, False)
        self._render(names)
        self._render_top()
        if "logins" in names:
            self.refresh_bindings()  # `i` is in the footer while a sign-in is pending

    def _on_event(self, event: EventView) -> None:
        self.model.last_seq = event.seq
        self.model.note_event(event, live=event.seq > self._snapshot_seq)
        if event.kind in (Kind.CLOCK_MOVED, Kind.EMULATOR_RESET, Kind.SNAPSHOT_LOADED):
            self._render_clock()
            self._render({"orgs", "registrations"})
        elif event.kind == Kind.TRIAL_EXPIRED:
            self._render({"orgs"})
        if event.seq > self._snapshot_seq:
            if event.kind in AGENT_ACTIVITY:
                self._agents_active = True
            stale = affected(event.kind)
            if stale:
                self._stale |= stale
                self._wake.set()
        self.log_view.add([self._entry(event)])

    def _entry(self, event: EventView) -> Entry:
        stamp = fmt_stamp(event.ts)
        if event.kind == Kind.DB_LOG:
            said = DbLog.read(event.data)
            return db_line(stamp, event.subject or "", said.service, said.line)
        if event.kind == Kind.CLOCK_MOVED:
            clock = ClockMoved.read(event.data)
            moved = clock.now - clock.before
            sign = "+" if moved >= 0 else "-"
            data = f"to {clock.iso} ({sign}{fmt_span(abs(moved))})"
            data += " frozen" if clock.frozen else ""
        elif event.kind in runlog.WEBHOOK_TRIES:  # a delivery's try, with its outcome and next try
            data = runlog.webhook_try(event.kind, event.data)
        else:
            data = " ".join(f"{k}={short(v, k)}" for k, v in event.data.items() if v is not None)
        subject = f" [{event.subject}]" if event.subject else ""
        return Entry(f"{stamp} {event.kind}{subject} {data}".rstrip(), None, event_style(event))

    # --- navigation -----------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if isinstance(self.screen, ModalScreen) and action != "command_palette":
            return False
        if self.readonly and action in ACTS:
            return False
        only = _ONLY_IN.get(action)
        if only is not None and self.active != only:
            return False
        if action == "approve_login" and not self.model.logins:
            return False  # out of the footer until a sign-in is pending
        return True

    def action_view(self, name: str) -> None:
        self.query_one("#views", TabbedContent).active = name

    def _step(self, by: int) -> None:
        names = [v.name for v in VIEWS]
        self.action_view(names[(names.index(self.active) + by) % len(names)])

    def action_next_view(self) -> None:
        self._step(1)

    def action_prev_view(self) -> None:
        self._step(-1)

    @on(TabbedContent.TabActivated)
    def _tab_activated(self, event: TabbedContent.TabActivated) -> None:
        pane = event.pane.id or ""
        if not self.history or self.history[-1] != pane:
            self.history.append(pane)
            del self.history[:-50]
        self._hide_filter()
        self._focus_view()
        self.refresh_bindings()
        if pane == "faults":  # a rule's match count, and a rule removed by the CLI, come with no event
            self._stale.add("faults")
            self._wake.set()

    def action_go_back(self) -> None:
        view = self.active
        current = self._filter_of(view)
        if current:
            self._set_filter(view, "")
        elif view == "log" and self.log_view.scope:
            self.log_view.set_scope(None)
            self._go_back()
        else:
            self._go_back()

    def _go_back(self) -> None:
        if len(self.history) > 1:
            self.history.pop()
            target = self.history.pop()
            self.action_view(target)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(visible(self.readonly), self.readonly))

    def action_follow(self) -> None:
        self.log_view.follow()

    def action_wrap(self) -> None:
        self.log_view.set_wrap(not self.log_view.wrap)
        self.notify("long lines wrap" if self.log_view.wrap else "long lines are cut (← → scroll)", timeout=2)

    def action_details(self, view: str | None = None, key: str | None = None) -> None:
        view = view or self.active
        if view not in _TABLES:
            return
        table = self.table_view(view)
        key = key or table.selected_key()
        fields = table.details(self.model, key) if key else None
        if fields is None or key is None:
            return
        if view != "agents":
            self.push_screen(DetailScreen(f"{table.TITLE}: {key}", fields))
            return

        async def with_trace(who: str, fields: list[tuple[str, str | Text]]) -> None:
            try:
                found = await self.client.trace(who)
            except Exception as e:
                self.notify(f"trace of {who}: {e}", severity="error")
                found = None
            steps = trace_lines(found) if found is not None else Text("(not available)", style="dim")
            self.push_screen(DetailScreen(f"Agent {who}", [*fields, ("Trace", steps)]))

        self.run_worker(with_trace(key, fields), group="acts")

    def action_db_logs(self) -> None:
        selected = self.query_one("#databases-view", DatabasesView).selected_db()
        if selected is None:
            self.notify("select a database first", severity="warning")
            return
        org, db = selected
        scope = f"{org}:{db}"
        self.log_view.set_scope(scope)
        self.action_view("log")

        async def backlog() -> None:
            try:
                lines = await self.client.db_logs(org, db)
            except Exception as e:
                self.notify(f"logs of {scope}: {e}", severity="error")
                return
            self.log_view.fill_scope(
                scope, [db_line(fmt_stamp(r.ts_ms / 1000), scope, r.service, r.line) for r in lines]
            )

        self.run_worker(backlog(), group="io")

    @on(DataTable.RowSelected)
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        if self.active == "switches":
            if not self.readonly:
                self.action_toggle_switch()
        else:
            self.action_details()

    # --- filter ---------------------------------------------------------------------------------

    def _filter_of(self, view: str) -> str:
        return (self.log_view.filter if view == "log" else self.table_view(view).filter).text

    def _set_filter(self, view: str, text: str) -> None:
        if view == "log":
            self.log_view.filter = RowFilter(text)
            self.log_view.rerender()
        else:
            table = self.table_view(view)
            table.filter = RowFilter(text)
            table.show(self.model)

    def action_filter(self) -> None:
        bar = self.query_one("#filter", FilterBar)
        self._filter_before = self._filter_of(self.active)
        bar.value = self._filter_before
        bar.display = True
        bar.focus()

    def _hide_filter(self) -> None:
        bar = self.query_one("#filter", FilterBar)
        if bar.display:
            bar.display = False
            self._focus_view()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self._set_filter(self.active, event.value)

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        self._hide_filter()

    @on(FilterBar.Cancelled)
    def _filter_cancelled(self) -> None:
        self._set_filter(self.active, self._filter_before)
        self._hide_filter()

    # --- acts -----------------------------------------------------------------------------------

    def _act(
        self,
        command: str,
        call: Callable[[], Awaitable[A]],
        done: Callable[[A], str],
        stales: frozenset[str] = frozenset(),
    ) -> None:
        """Run an act in a worker; its outcome is a toast and a log line naming the equivalent command. `stales`:
        the snapshots it changes without an event saying so (fetched again once it is done)."""

        async def run() -> None:
            try:
                outcome, ok = done(await call()), True
                if stales:
                    self._stale |= stales
                    self._wake.set()
            except (EmulatorError, Unreachable) as e:
                outcome, ok = str(e), False
            except Exception as e:  # an act must never take the dashboard down
                outcome, ok = repr(e), False
            self.notify(outcome, title=command, severity="information" if ok else "error", timeout=5 if ok else 8)
            stamp = fmt_stamp(self.model.clock.current())
            line = f"{stamp} act: {command} → {'' if ok else 'refused: '}{outcome}"
            self.log_view.add([Entry(line, None, "" if ok else ERROR)])

        self.run_worker(run(), group="acts")

    def _ask(self, title: str, value: str, then: Callable[[str], None], given: str | None = None) -> None:
        """`then` with the answer to a prompt, or at once with `given` (an act called with its value)."""
        if given:
            then(given)
            return

        def answered(answer: str | None) -> None:
            if answer:
                then(answer)

        self.push_screen(PromptScreen(title, value), answered)

    def action_claim_trial(self, org: str | None = None) -> None:
        if org is None:
            key = self.table_view("trials").selected_key()
            unclaimed = [o.org for o in self.model.trials() if o.state == "unclaimed"]
            org = key if key in unclaimed else (unclaimed[0] if len(unclaimed) == 1 else None)
        if org is None:
            self.notify("select an unclaimed trial first", severity="warning")
            return
        chosen = org
        self._ask(
            f"Claim {chosen} as (e-mail):",
            DEFAULT_EMAIL,
            lambda email: self._act(
                f"emulator claim-trial {chosen} --email {email}",
                lambda: self.client.claim_trial(chosen, email),
                lambda a: f"{a.org} is claimed by {a.email}; it no longer expires",
            ),
        )

    def action_approve_claim(self, registration: str | None = None) -> None:
        self._decide_claim(registration, approve=True)

    def action_deny_claim(self, registration: str | None = None) -> None:
        self._decide_claim(registration, approve=False)

    def _decide_claim(self, registration: str | None, *, approve: bool) -> None:
        """The person's act on a pending claim: the selected registration's, or the only one pending."""
        if registration is None:
            key = self.table_view("registrations").selected_key()
            pending = [r for r, c in self.model.claims.items() if c.state == "pending"]
            registration = key if key in self.model.claims else (pending[0] if len(pending) == 1 else None)
        if registration is None:
            self.notify("select a registration with a pending claim first", severity="warning")
            return
        chosen = registration
        claim = self.model.claims.get(chosen)
        hint = (claim.login_hint if claim else None) or DEFAULT_EMAIL
        act, call = ("approve", self.client.approve_claim) if approve else ("deny", self.client.deny_claim)
        deny_flag = "" if approve else " --deny"

        def said(a: ClaimDecided) -> str:
            if approve:
                return f"approved as {a.email}; the agent's user code is {a.user_code}"
            return f"denied as {a.email}; the agent's claim is refused"

        self._ask(
            f"{act.capitalize()} the claim of {chosen} as (e-mail):",
            hint,
            lambda email: self._act(
                f"emulator approve-claim {chosen} --email {email}{deny_flag}", lambda: call(chosen, email), said
            ),
        )

    def action_toggle_switch(self, name: str | None = None) -> None:
        name = name or self.table_view("switches").selected_key()
        if name is None or name not in self.model.switches:
            self.notify("select a switch first", severity="warning")
            return
        chosen, value = name, not self.model.switches[name]
        word = "on" if value else "off"
        self._act(
            f"emulator switch {chosen} {word}",
            lambda: self.client.set_switch(chosen, value),
            lambda a: f"{chosen} is {'on' if a[chosen] else 'off'}",
        )

    def action_approve_login(self, code: str | None = None) -> None:
        codes = [login.user_code for login in self.model.logins]
        if code is None and len(codes) != 1:
            if not codes:
                self.notify("no pxt login sign-in is pending", severity="warning")
                return
            self._ask("Approve which sign-in (code)?", codes[0], self.action_approve_login)
            return
        chosen = code or codes[0]
        self._ask(
            f"Approve sign-in {chosen} as (e-mail):",
            DEFAULT_EMAIL,
            lambda email: self._act(
                f"emulator approve-login {chosen} --email {email}",
                lambda: self.client.approve_login(chosen, email),
                lambda a: f"{a.user_code} approved as {a.email}",
            ),
        )

    def action_advance_clock(self, duration: str | None = None) -> None:
        def advance(value: str) -> None:
            self._act(
                f"emulator clock advance {value}",
                lambda: self.client.advance_clock(value),
                lambda a: f"the clock reads {a.iso}",
            )

        self._ask("Advance the emulator's clock by (90s, 15m, 48h, 2d):", "48h", advance, given=duration)

    def _db_verb(self, verb: str, target: tuple[str, str] | None) -> None:
        target = target or self.query_one("#databases-view", DatabasesView).selected_db()
        if target is None:
            self.notify("select a database first", severity="warning")
            return
        org, db = target
        self._act(
            f"emulator db {verb} {org} {db}",
            lambda: self.client.db_verb(org, db, verb),
            lambda a: f"{verb} accepted (generation {a.receipt.generation})",
        )

    def action_stop_db(self, org: str | None = None, db: str | None = None) -> None:
        target = (org, db) if org and db else self.query_one("#databases-view", DatabasesView).selected_db()
        if target is None:
            self.notify("select a database first", severity="warning")
            return
        question = f"Stop the database {target[0]}:{target[1]}? Its server stops; sessions to it end."
        self._confirm(question, lambda: self._db_verb("stop", target))

    def action_start_db(self, org: str | None = None, db: str | None = None) -> None:
        self._db_verb("start", (org, db) if org and db else None)

    def _confirm(self, question: str, then: Callable[[], None]) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                then()

        self.push_screen(ConfirmScreen(question), answered)

    def action_remove_fault(self, rule: str | None = None) -> None:
        rule = rule or self.table_view("faults").selected_key()
        if rule is None or rule not in {r.id for r in self.model.faults}:
            self.notify("select a fault rule first (a hold goes with X)", severity="warning")
            return
        chosen = rule
        self._act(
            f"emulator fault clear {chosen}",
            lambda: self.client.remove_fault(chosen),
            lambda a: f"removed {a.removed.id}",
            frozenset({"faults"}),
        )

    def action_clear_faults(self) -> None:
        self._confirm(
            "Remove every fault rule and release every held request?",
            lambda: self._act(
                "emulator fault clear",
                self.client.clear_faults,
                lambda a: f"cleared {a.cleared} rule{'s' if a.cleared != 1 else ''} and holds",
                frozenset({"faults"}),
            ),
        )

    def action_save_snapshot(self, name: str | None = None) -> None:
        def save(value: str) -> None:
            self._act(
                f"emulator snapshot save {value}",
                lambda: self.client.save_snapshot(value),
                lambda a: f"saved {a.name} ({a.clock} on its clock)",
            )

        self._ask("Save the emulator as the snapshot (a name; one of that name is replaced):", "", save, given=name)

    def _selected_snapshot(self, name: str | None) -> str | None:
        name = name or self.table_view("snapshots").selected_key()
        if name is None or name not in {s.name for s in self.model.snapshots}:
            self.notify("select a snapshot first", severity="warning")
            return None
        return name

    def action_load_snapshot(self, name: str | None = None) -> None:
        chosen = self._selected_snapshot(name)
        if chosen is None:
            return
        self._confirm(
            f"Load the snapshot {chosen}? Everything the emulator holds now is replaced by what it saved "
            "(save a snapshot first to keep it).",
            lambda: self._act(
                f"emulator snapshot load {chosen}",
                lambda: self.client.load_snapshot(chosen),
                lambda a: f"loaded {a.loaded} in {a.seconds:.2f} s; the clock reads {a.clock}",
            ),
        )

    def action_delete_snapshot(self, name: str | None = None) -> None:
        chosen = self._selected_snapshot(name)
        if chosen is None:
            return
        self._confirm(
            f"Delete the snapshot {chosen}? Its files are gone for good.",
            lambda: self._act(
                f"emulator snapshot delete {chosen}",
                lambda: self.client.delete_snapshot(chosen),
                lambda a: f"deleted {a.deleted}",
            ),
        )

    def action_reset(self, to: str = "empty") -> None:
        what = "an empty state" if to == "empty" else "the state it was started from"
        self._confirm(
            f"Reset the emulator to {what}? Registrations, trials, organizations, keys, sessions, databases, "
            "services, the journal, faults, switches and the clock go back; snapshots stay.",
            lambda: self._act(
                "emulator reset" + ("" if to == "empty" else f" --to {to}"),
                lambda: self.client.reset("start" if to == "start" else "empty"),
                lambda a: f"reset to {a.to} in {a.seconds:.2f} s; the clock reads {a.clock}",
            ),
        )

    # --- command palette ------------------------------------------------------------------------

    def deliver_screenshot(
        self, filename: str | None = None, path: str | None = None, time_format: str | None = None
    ) -> str | None:
        # Textual saves into ~/Downloads and fails where there is none (a server, a container): use the cwd then.
        if path is None:
            downloads = Path.home() / "Downloads"
            path = str(downloads if downloads.is_dir() else Path.cwd())
        return super().deliver_screenshot(filename, path, time_format)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for v in VIEWS:
            yield SystemCommand(f"View: {v.title}", f"key {v.key}", lambda name=v.name: self.action_view(name))
        yield SystemCommand("Keys", "every key of the dashboard (?)", self.action_help)
        if self.readonly:
            return
        for duration in ("1h", "24h", "48h", "48h1s"):
            yield SystemCommand(
                f"Advance clock by {duration}",
                f"emulator clock advance {duration}",
                lambda d=duration: self.action_advance_clock(d),
            )
        yield SystemCommand("Advance clock by…", "emulator clock advance DURATION", self.action_advance_clock)
        yield SystemCommand("Reset the emulator to empty", "emulator reset (asks first)", self.action_reset)
        yield SystemCommand(
            "Reset the emulator to its start",
            "emulator reset --to start (asks first)",
            lambda: self.action_reset("start"),
        )
        yield SystemCommand("Save a snapshot…", "emulator snapshot save NAME", self.action_save_snapshot)
        for snap in self.model.snapshots:
            name = snap.name
            yield SystemCommand(
                f"Load snapshot {name}",
                f"emulator snapshot load {name} (asks first)",
                lambda name=name: self.action_load_snapshot(name),
            )
            yield SystemCommand(
                f"Delete snapshot {name}",
                f"emulator snapshot delete {name} (asks first)",
                lambda name=name: self.action_delete_snapshot(name),
            )
        for rule in self.model.faults:
            yield SystemCommand(
                f"Remove fault {rule.id}",
                f"emulator fault clear {rule.id}",
                lambda rule=rule.id: self.action_remove_fault(rule),
            )
        if self.model.faults or self.model.holds:
            yield SystemCommand(
                "Remove every fault rule", "emulator fault clear (asks first)", self.action_clear_faults
            )
        for reg, claim in self.model.claims.items():
            if claim.state == "pending":
                yield SystemCommand(
                    f"Approve claim of {reg}",
                    f"emulator approve-claim {reg} --email E",
                    lambda reg=reg: self.action_approve_claim(reg),
                )
                yield SystemCommand(
                    f"Deny claim of {reg}",
                    f"emulator approve-claim {reg} --email E --deny",
                    lambda reg=reg: self.action_deny_claim(reg),
                )
        for name, value in self.model.switches.items():
            word = "off" if value else "on"
            yield SystemCommand(
                f"Turn switch {name} {word}",
                f"emulator switch {name} {word}",
                lambda name=name: self.action_toggle_switch(name),
            )
        for login in self.model.logins:
            code = login.user_code
            yield SystemCommand(
                f"Approve sign-in {code}",
                f"emulator approve-login {code} --email E",
                lambda code=code: self.action_approve_login(code),
            )
        for o in self.model.orgs:
            if o.trial and o.state == "unclaimed":
                yield SystemCommand(
                    f"Claim trial {o.org}",
                    f"emulator claim-trial {o.org} --email E",
                    lambda org=o.org: self.action_claim_trial(org),
                )
            for d in o.databases:
                if d.state == "STOPPED":
                    yield SystemCommand(
                        f"Start database {o.org}:{d.db}",
                        f"emulator db start {o.org} {d.db}",
                        lambda org=o.org, db=d.db: self._db_verb("start", (org, db)),
                    )
                else:
                    yield SystemCommand(
                        f"Stop database {o.org}:{d.db}",
                        f"emulator db stop {o.org} {d.db} (asks first)",
                        lambda org=o.org, db=d.db: self.action_stop_db(org, db),
                    )


def short(value: Any, key: str = "") -> str:
    """A field of an event as one short token: an instant (`…_at`) as UTC time, nested values as compact JSON,
    cut at 60 characters."""
    if key.endswith("_at") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = json.dumps(value, separators=(",", ":")) if isinstance(value, (dict, list)) else str(value)
    return text if len(text) <= 60 else text[:59] + "…"


def db_line(stamp: str, scope: str, service: str | None, line: str) -> Entry:
    return Entry(f"{stamp} {scope}{'/' + service if service else ''} │ {line}", scope, db_line_style(line))


def run(locator: Locator, *, readonly: bool = False) -> None:
    Dashboard(locator, readonly=readonly).run()
