"""`emulator tui`: the dashboard, driven by Textual's pilot against a real emulator.

Changes are made the way an agent and a person make them (the public endpoints, `/_emulator`), and the
views must show them; time is moved with the emulator's clock, never by sleeping. SVG snapshots pin the
main views: the clock is frozen, IDs come from `--seed`, and the client address is fixed, so they are stable.
Set TUI_SNAPSHOT_UPDATE=1 to rewrite them after an intended change (then look at them).
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from rich.console import Console
from textual.geometry import Spacing
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import DataTable, Input, Label, TabbedContent
from textual.widgets._toast import Toast

from emulator.admin.client import Locator
from emulator.admin.wire import EventView, ServiceView
from emulator.core.kinds import Kind
from emulator.hosted.logins import CLIENT_ID
from tests import agent_flow as flow
from tests.conftest import FROZEN_AT, Emulator
from tests.reference_pages import page, table_rows
from tests.test_proxy import Origin, echo_through
from tui.app import Dashboard, short
from tui.filter import RowFilter
from tui.keys import KEYS, VIEWS
from tui.model import Model, affected, fmt_left, fmt_span
from tui.screens import ConfirmScreen, DetailScreen, HelpScreen, PromptScreen
from tui.views.services import ServicesView
from tui.views.table import short_id

SNAPSHOTS = Path(__file__).parent / "snapshots" / "test_tui"
SIZE = (150, 36)


# --- helpers ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tui_emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """An emulator of this module's own: its trials expire when a test here moves the clock 48 h."""
    e = Emulator(tmp_path_factory.mktemp("tui"), ["--no-watch", "--freeze-clock", FROZEN_AT, "--seed", "6"]).start()
    yield e
    e.stop()


@asynccontextmanager
async def dashboard(
    emu: Emulator, size: tuple[int, int] = SIZE, notifications: bool = False, **kw: Any
) -> AsyncIterator[tuple[Dashboard, Pilot[None]]]:
    """The dashboard attached to `emu` through its state dir, as `emulator tui` attaches, once it is live (with
    toasts when `notifications`: the pilot shows none otherwise)."""
    kw.setdefault("label", "emulator")  # None: the emulator's URL, as a person sees it
    app = Dashboard(Locator(state_dir=emu.state_dir), **kw)
    app.animation_level = "none"  # the tab underline's slide only slows the pilot down
    async with app.run_test(size=size, notifications=notifications) as pilot:
        await until(pilot, lambda: app.connection == "live", what="the dashboard to go live")
        yield app, pilot


async def until(pilot: Pilot[None], cond: Callable[[], Any], what: str = "the view", within: float = 5.0) -> None:
    """Let the app run until `cond` holds: views update from the event stream, within a second or so."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if cond():
            await pilot.pause()
            return
        await pilot.pause(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def rows(app: Dashboard, view: str) -> list[list[str]]:
    table: DataTable[Any] = app.table_view(view).table
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def row_of(app: Dashboard, view: str, first: str) -> list[str] | None:
    return next((r for r in rows(app, view) if r[0] == first), None)


async def select(pilot: Pilot[None], app: Dashboard, view: str, key: str) -> None:
    table = app.table_view(view).table
    table.move_cursor(row=table.get_row_index(key))
    await pilot.pause()


async def answer(pilot: Pilot[None], app: Dashboard, text: str | None = None) -> None:
    """Answer the act's prompt (keep its suggested value when `text` is None)."""
    await until(pilot, lambda: isinstance(app.screen, PromptScreen), "the prompt")
    if text is not None:
        app.screen.query_one("#answer", Input).value = text
    await pilot.press("enter")


def admin(emu: Emulator, path: str) -> Any:
    with emu.admin() as c:
        r = c.get(path)
        r.raise_for_status()
        return r.json()


def trial_of(emu: Emulator, org: str) -> dict[str, Any] | None:
    return next((t for t in admin(emu, "/_emulator/trials")["trials"] if t["org"] == org), None)


def clock_now(emu: Emulator) -> float:
    return float(admin(emu, "/_emulator/clock")["now"])


def footer_keys(app: Dashboard) -> set[str]:
    """The keys the footer shows now."""
    return {key for key, b in app.screen.active_bindings.items() if b.binding.show and b.enabled}


def screen_lines(app: Dashboard) -> list[str]:
    """The screen as text, row by row, as a person sees it (modal screens over the ones below them)."""
    console = Console(width=app.size.width, height=app.size.height, record=True, file=io.StringIO())
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))  # pyright: ignore[reportPrivateUsage]
    return console.export_text().splitlines()


def shown_in(app: Dashboard, widget: Widget) -> str:
    """The text on screen inside `widget`'s region, its rows joined, runs of spaces as one."""
    r = widget.region
    rows = screen_lines(app)[r.y : r.bottom]
    return " ".join(" ".join(row[r.x : r.right] for row in rows).split())


def normalized(svg: str) -> str:
    # Rich gives each export a unique id; it says nothing about what is shown.
    return re.sub(r"\bterminal-\d+-", "terminal-", svg)


async def steady_screenshot(app: Dashboard, pilot: Pilot[None], within: float = 10.0) -> str:
    """The screen once it stops changing (two exports a moment apart agree): on a loaded machine an event or a
    refresh may still be on its way when the view's content is already right, and move a scrollbar by a cell."""
    shot = normalized(app.export_screenshot(title="emulator tui"))
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        await pilot.pause(0.2)
        again = normalized(app.export_screenshot(title="emulator tui"))
        if again == shot:
            return shot
        shot = again
    return shot


async def assert_snapshot(app: Dashboard, pilot: Pilot[None], name: str) -> None:
    actual = await steady_screenshot(app, pilot)
    path = SNAPSHOTS / f"{name}.svg"
    if os.environ.get("TUI_SNAPSHOT_UPDATE"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
        return
    assert path.exists(), f"no snapshot {path}; create it with TUI_SNAPSHOT_UPDATE=1 and look at it"
    if normalized(path.read_text()) != actual:
        out = Path(tempfile.gettempdir()) / "tui-snapshots" / f"{name}.svg"
        out.parent.mkdir(exist_ok=True)
        out.write_text(actual)
        raise AssertionError(f"the {name} view changed: compare {out} with {path}")


# --- pure parts -------------------------------------------------------------------------------


def test_the_filter_matches_text_or_regex_and_a_leading_bang_inverts_it() -> None:
    lines = ["agent-aaa unclaimed", "agent-bbb claimed", "org acme"]
    assert RowFilter("AGENT").apply(lines) == lines[:2]
    assert RowFilter("!agent").apply(lines) == ["org acme"]
    assert RowFilter("^agent-b").apply(lines) == ["agent-bbb claimed"]
    assert RowFilter("agent-(").apply(lines) == []  # not a valid regex: matched literally
    assert RowFilter("! ").apply(lines) == lines and not RowFilter("!")


def test_each_event_names_only_the_snapshots_it_changes() -> None:
    assert affected("db.log") == frozenset()
    assert affected("site.ask") == frozenset()
    assert affected("db.state") == {"orgs", "services"}
    assert affected("idp.claim_confirmed") == {"claims", "registrations"}
    assert affected("idp.token_issued") == {"registrations"}
    assert affected("trial.expired") >= {"orgs", "registrations"}
    every = {"registrations", "claims", "logins", "orgs", "services", "users", "keys", "switches", "agents"}
    every |= {"faults", "snapshots"}
    assert affected("http.request") == frozenset()  # many: the Agents view catches up once a second instead
    assert affected("emulator.started") == every
    assert affected("switch.changed") == {"switches"} and "keys" in affected("cloud.call")
    assert affected("fault.armed") == affected("fault.fired") == affected("fault.removed") == {"faults"}
    assert affected("snapshot.saved") == {"snapshots"} and affected("snapshot.loaded") == every
    assert {"users", "registrations"} <= affected("clock.moved")  # sessions expire, claims lapse
    shown = [fmt_left(s) for s in (172800, 3600, 3599, 59, 0, None)]
    assert shown == ["48h 00m", "1h 00m", "59m 59s", "59s", "due", "—"]
    spans = [fmt_span(s) for s in (172801, 172800, 90, 60, 5, 0, 0.25)]
    assert spans == ["48h 00m 01s", "48h 00m", "1m 30s", "1m", "5s", "0s", "0.25s"]
    assert short(1795534947.25, "expired_at") == "2026-11-24T15:42:27Z" and short(3, "count") == "3"


def test_a_replayed_clock_event_does_not_set_the_clock() -> None:
    """Attaching replays old `clock.moved` events: their `now` is old, the status read at attach is current."""
    model = Model()
    model.clock.set(2000.0, True)
    data = {"now": 1000.0, "before": 900.0, "frozen": False, "iso": "x"}
    moved = EventView(seq=1, ts=1000.0, iso="x", kind=Kind.CLOCK_MOVED, subject=None, data=data)
    model.note_event(moved, live=False)
    assert model.clock.current() == 2000.0 and model.clock.frozen
    model.note_event(moved)
    assert not model.clock.frozen and model.clock.current() >= 1000.0


# --- live views -------------------------------------------------------------------------------


async def test_registrations_trials_and_databases_appear_live(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu) as (app, pilot), tui_emu.client() as c:
        reg, _, trial = await flow.new_trial(c, tui_emu)
        started = time.monotonic()
        await until(pilot, lambda: row_of(app, "trials", trial["org"]) is not None, "the trial")
        assert time.monotonic() - started < 1.5
        registration = row_of(app, "registrations", reg["id"])
        assert registration is not None
        assert registration[1:3] == ["anonymous", "registered"] and registration[4] == "1"  # one token so far
        assert registration[6] == trial["org"] and "public:read" in registration[-1]
        t = row_of(app, "trials", trial["org"])
        assert t is not None and t[1:3] == ["unclaimed", "48h 00m"] and t[4] == "trial"
        db = row_of(app, "databases", trial["org"])
        assert db is not None and db[2:4] == ["main", "AVAILABLE"]
        # A second token shows as token activity.
        await flow.exchange(c, tui_emu, reg["identity"]["assertion"])
        await until(pilot, lambda: (row_of(app, "registrations", reg["id"]) or [""] * 5)[4] == "2", "token activity")
        # A pending service_auth claim is marked.
        other = await flow.register(c, tui_emu, type="service_auth", login_hint="ops@example.org")
        await until(pilot, lambda: (row_of(app, "registrations", other["id"]) or [""] * 4)[3] == "pending", "claim")
        # The service side revokes a registration: the dashboard shows it revoked, live.
        with tui_emu.admin() as a:
            assert a.post(f"/_emulator/registrations/{other['id']}/revoke").status_code == 200
        await until(pilot, lambda: (row_of(app, "registrations", other["id"]) or [""] * 3)[2] == "revoked", "revoked")
        # The log pane follows the journal.
        assert any(f"trial.created [{trial['org']}]" in line for line in app.log_view.lines())


async def test_a_relayed_connection_shows_in_the_log(tui_emu: Emulator) -> None:
    origin = await Origin().start()
    try:
        async with dashboard(tui_emu) as (app, pilot):
            assert await echo_through(tui_emu.endpoints["proxy"], f"127.0.0.1:{origin.port}", b"ping") == b"ping"
            line = f"proxy.relay [127.0.0.1:{origin.port}] host=127.0.0.1 port={origin.port} route=direct status=200"
            await until(pilot, lambda: any(line in text for text in app.log_view.lines()), "the relay's line")
            shown = next(text for text in app.log_view.lines() if line in text)
            assert "outcome=closed" in shown and "bytes_up=4 bytes_down=4" in shown
    finally:
        await origin.close()


async def test_time_left_runs_on_the_emulators_clock_and_the_trial_is_deleted_at_48h(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu) as (app, pilot), tui_emu.client() as c:
        reg, _, trial = await flow.new_trial(c, tui_emu)
        org = trial["org"]
        await until(pilot, lambda: row_of(app, "trials", org) is not None)
        clock_before = str(app.query_one("#clock").render())
        tui_emu.advance("47h")
        await until(pilot, lambda: (row_of(app, "trials", org) or ["", "", ""])[2] == "1h 00m", "time left 1h")
        assert str(app.query_one("#clock").render()) != clock_before
        assert "(frozen)" in str(app.query_one("#clock").render())
        tui_emu.advance("1h")
        await until(pilot, lambda: (row_of(app, "trials", org) or ["", ""])[1] == "deleted", "the deletion")
        assert row_of(app, "databases", org) is None
        # The deleted trial keeps its name, expiry, key and registration; the registration still names it.
        deleted = row_of(app, "trials", org) or []
        assert deleted[3] == trial["expires_at"] and deleted[4] == "trial" and deleted[6] == reg["id"]
        await until(pilot, lambda: (row_of(app, "registrations", reg["id"]) or [""] * 7)[6] == f"{org} (deleted)")
        assert any(f"trial.expired [{org}]" in line for line in app.log_view.lines())


async def test_slash_filters_tables_and_the_log_and_bang_inverts(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu, initial="trials") as (app, pilot), tui_emu.client() as c:
        orgs = [(await flow.new_trial(c, tui_emu))[2]["org"] for _ in range(2)]
        await until(pilot, lambda: all(row_of(app, "trials", o) for o in orgs))
        await pilot.press("slash", *orgs[0][-6:])
        assert [r[0] for r in rows(app, "trials")] == [orgs[0]]
        assert "filter" in str(app.table_view("trials").border_subtitle)
        await pilot.press("enter")
        assert app.focused is app.table_view("trials").table  # back to the table, filter kept
        await pilot.press("slash", "!", *orgs[0][-6:], "enter")
        shown = [r[0] for r in rows(app, "trials")]
        assert orgs[1] in shown and orgs[0] not in shown
        await pilot.press("escape")  # esc clears the filter
        assert {orgs[0], orgs[1]} <= {r[0] for r in rows(app, "trials")}
        # The log filters too, inverse included.
        await pilot.press("5", "slash", *"l.cre", "enter")
        lines = app.log_view.lines()
        assert lines and all("trial.created" in line for line in lines)
        await pilot.press("slash", *"!idp", "enter")
        lines = app.log_view.lines()
        assert lines and not any(" idp." in line for line in lines)
        # esc while typing puts the previous filter back.
        await pilot.press("slash", *"zzz", "escape")
        assert app.log_view.filter.text == "!idp"


async def test_number_keys_tabs_and_esc_move_between_views(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu) as (app, pilot):
        assert app.active == "registrations"
        await pilot.press("3")
        assert app.active == "databases"
        await pilot.press("tab")
        assert app.active == "services"
        await pilot.press("right_square_bracket")
        assert app.active == "log"
        await pilot.press("escape")
        assert app.active == "services"
        await pilot.press("escape", "escape")
        assert app.active == "registrations"


async def test_question_mark_shows_every_key_and_readonly_hides_the_acts(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu) as (app, pilot):
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = cast(HelpScreen, app.screen).plain()
        for key in ("/", "esc", "ctrl+p", "claim", "approve", "emulator clock advance 48h", "emulator db stop"):
            assert key in text
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)

    async with dashboard(tui_emu, readonly=True, initial="trials") as (app, pilot):
        assert "READ-ONLY" in str(app.query_one("#title").render())
        await pilot.press("question_mark")
        text = cast(HelpScreen, app.screen).plain()
        assert "ctrl+p" in text and "emulator clock advance" not in text and "claim" not in text
        await pilot.press("escape")
        before = clock_now(tui_emu)
        await pilot.press("t", "c", "s")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, PromptScreen) and clock_now(tui_emu) == before
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "View: Trials" in titles and not any("clock" in t.lower() or "Claim" in t for t in titles)


async def test_the_log_follows_the_tail_until_scrolled_up(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu, initial="log") as (app, pilot):
        for _ in range(3):  # more lines than the pane holds
            for _ in range(20):
                tui_emu.advance("1s")
        await until(pilot, lambda: len(app.log_view.lines()) > 60, "enough lines")
        log = app.log_view.log_widget
        assert app.log_view.following and "following" in str(app.log_view.border_subtitle)
        await pilot.press("pageup")
        assert not app.log_view.following and "paused" in str(app.log_view.border_subtitle)
        offset = log.scroll_y
        tui_emu.advance("1s")
        await until(pilot, lambda: "+1s" in app.log_view.lines()[-1] and len(app.log_view.entries) > 0)
        assert log.scroll_y == offset  # it stayed where the person scrolled to
        await pilot.press("end")
        assert app.log_view.following
        tui_emu.advance("2s")
        await until(pilot, lambda: "+2s" in app.log_view.lines()[-1], "the new line")
        assert app.log_view.following and log.scroll_y == log.max_scroll_y


async def test_denying_a_claim_and_a_lapsed_claim_show_as_such(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu) as (app, pilot), tui_emu.client() as c:
        denied = await flow.register(c, tui_emu, type="service_auth", login_hint="no@example.org")
        await until(pilot, lambda: denied["id"] in app.model.claims)
        await select(pilot, app, "registrations", denied["id"])
        assert "d" in footer_keys(app)
        await pilot.press("d")
        await answer(pilot, app)  # the login hint is suggested
        claim = lambda reg: (row_of(app, "registrations", reg) or [""] * 4)[3]  # noqa: E731
        await until(pilot, lambda: claim(denied["id"]) == "denied", "denied")
        act = f"act: emulator approve-claim {denied['id']} --email no@example.org --deny"
        await until(pilot, lambda: any(act in line for line in app.log_view.entries_text()), "the act's line")
        listed = {r["id"]: r for r in admin(tui_emu, "/_emulator/registrations")["registrations"]}
        assert listed[denied["id"]]["claim"]["state"] == "denied"
        # A claim link nobody acted on lapses with the emulator's clock (10 minutes).
        lapsing = await flow.register(c, tui_emu, type="service_auth", login_hint="late@example.org")
        await until(pilot, lambda: claim(lapsing["id"]) == "pending", "pending")
        tui_emu.advance("11m")
        await until(pilot, lambda: claim(lapsing["id"]) == "lapsed", "lapsed")
        assert claim(denied["id"]) == "denied"


async def test_i_is_in_the_footer_only_while_a_sign_in_is_pending(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu) as (app, pilot), tui_emu.client() as c:
        if app.model.logins:  # an earlier test's sign-in still pending: let it lapse
            tui_emu.advance("20m")
            await until(pilot, lambda: not app.model.logins, "no pending sign-in")
        assert "i" not in footer_keys(app)
        started = await c.post(tui_emu.auth + "/user_management/authorize/device", data={"client_id": CLIENT_ID})
        code = started.json()["user_code"]
        await until(pilot, lambda: "i" in footer_keys(app), "i in the footer")
        await pilot.press("i")
        await answer(pilot, app, "footer@example.org")
        await until(pilot, lambda: "i" not in footer_keys(app), "i out of the footer")
        assert code not in [x["user_code"] for x in admin(tui_emu, "/_emulator/logins")["pending"]]


async def test_switches_show_and_toggle(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu, initial="switches") as (app, pilot):
        await until(pilot, lambda: row_of(app, "switches", "trials_enabled") is not None, "the switches")
        assert (row_of(app, "switches", "trials_enabled") or [])[1] == "on"
        assert {r[0] for r in rows(app, "switches")} == set(admin(tui_emu, "/_emulator/switches"))
        await select(pilot, app, "switches", "trials_enabled")
        await pilot.press("space")
        await until(pilot, lambda: (row_of(app, "switches", "trials_enabled") or ["", ""])[1] == "off", "off")
        assert admin(tui_emu, "/_emulator/switches")["trials_enabled"] is False
        async with tui_emu.client() as c:
            _, token = await flow.access_token(c, tui_emu)
            assert (await flow.create_trial(c, tui_emu, token)).status_code == 503
        await pilot.press("enter")  # enter flips it too
        await until(pilot, lambda: (row_of(app, "switches", "trials_enabled") or ["", ""])[1] == "on", "on again")
        assert admin(tui_emu, "/_emulator/switches")["trials_enabled"] is True
    async with dashboard(tui_emu, readonly=True, initial="switches") as (app, pilot):
        await until(pilot, lambda: row_of(app, "switches", "trials_enabled") is not None)
        await select(pilot, app, "switches", "trials_enabled")
        await pilot.press("space", "enter")
        await pilot.pause(0.2)
        assert admin(tui_emu, "/_emulator/switches")["trials_enabled"] is True


async def test_users_sessions_and_keys_are_shown_without_secrets(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu, initial="users") as (app, pilot), tui_emu.client() as c:
        # pxt login: the device flow, approved by the person, redeemed by the client.
        started = (
            await c.post(tui_emu.auth + "/user_management/authorize/device", data={"client_id": CLIENT_ID})
        ).json()
        (
            await c.post(
                tui_emu.url + "/_emulator/logins/approve",
                json={"user_code": started["user_code"], "email": "pat@example.org"},
            )
        ).raise_for_status()
        grant = "urn:ietf:params:oauth:grant-type:device_code"
        form = {"grant_type": grant, "device_code": started["device_code"], "client_id": CLIENT_ID}
        session = await c.post(tui_emu.auth + "/user_management/authenticate", data=form)
        assert session.status_code == 200, session.text
        user = lambda: next((r for r in rows(app, "users") if r[0] == "pat@example.org"), None)  # noqa: E731
        await until(pilot, lambda: user() is not None and user()[4] == "active", "the session")  # type: ignore[index]
        shown = user() or []
        assert shown[2].startswith("session_") and shown[6].startswith("20")  # when it expires
        users = admin(tui_emu, "/_emulator/users")["users"]
        pat = next(u for u in users if u["email"] == "pat@example.org")
        assert pat["sessions"][0]["state"] == "active" and "refresh" not in str(pat)

        # Keys: the trial's key, its last use, and a revoked one; never a secret.
        _, _, trial = await flow.new_trial(c, tui_emu)
        org, secret = trial["org"], trial["api_key"]
        await pilot.press("7")
        key = f"{org}/trial"
        await until(pilot, lambda: row_of(app, "keys", org) is not None, "the trial's key")
        row = lambda: next((r for r in rows(app, "keys") if r[:2] == [org, "trial"]), None)  # noqa: E731
        assert (row() or [""] * 6)[5] == "never"
        assert (await flow.list_orgs(c, tui_emu, secret)).status_code == 200
        await until(pilot, lambda: (row() or [""] * 6)[5].startswith("20"), "last used")
        made = await c.post(
            tui_emu.api, json={"operation_type": "create_key", "name": "ci"}, headers={"X-api-key": secret}
        )
        assert made.status_code == 200, made.text
        await until(pilot, lambda: any(r[:2] == [org, "ci"] for r in rows(app, "keys")), "the new key")
        gone = await c.post(
            tui_emu.api, json={"operation_type": "delete_key", "name": "ci"}, headers={"X-api-key": secret}
        )
        assert gone.status_code == 200, gone.text
        revoked = lambda: next((r for r in rows(app, "keys") if r[:2] == [org, "ci"]), [""] * 3)  # noqa: E731
        await until(pilot, lambda: revoked()[2].startswith("revoked"), "the revoked key")
        listed = str(admin(tui_emu, "/_emulator/keys"))
        assert secret not in listed and "pxtk_" not in listed and "hash" not in listed
        assert all("pxtk_" not in str(r) for r in rows(app, "keys"))
        # enter shows every field of the key.
        await select(pilot, app, "keys", key)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen), "the key's details")
        text = cast(DetailScreen, app.screen).plain()
        assert f"Org: {org}" in text and "Last used: 20" in text and secret not in text
        await pilot.press("escape")


async def test_the_agents_view_shows_counts_latency_the_scorecard_and_the_trace(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu, initial="agents") as (app, pilot), tui_emu.client() as c:
        assert (await c.get("/.well-known/oauth-protected-resource")).status_code == 200
        reg, token, trial = await flow.new_trial(c, tui_emu)
        assert (await flow.list_orgs(c, tui_emu, trial["api_key"])).status_code == 200
        again = await flow.create_trial(c, tui_emu, token)  # a second trial: the scorecard names it
        assert again.status_code == 409
        agent = reg["id"]
        # calls refresh the view once a second: the counts catch up without a fetch per request. Its own are the
        # calls that carried its credentials (the exchange, two trial requests, list_orgs); discovery and the
        # registration carried none and show on the unattributed row, counted and not judged.
        await until(pilot, lambda: (row_of(app, "agents", agent) or [""] * 4)[3] == "4", "the agent's calls", 10)
        nobody = row_of(app, "agents", "(unattributed)") or []
        assert nobody and int(nobody[3]) >= 2 and nobody[7] == "not judged"
        row = row_of(app, "agents", agent) or []
        assert row[1] == "anonymous" and row[2] == trial["org"] and row[4] == "1"  # the 409
        assert row[5].endswith(" ms") and row[6].endswith(" ms") and "second-trial" in row[7]
        await select(pilot, app, "agents", agent)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen), "the agent's details")
        text = cast(DetailScreen, app.screen).plain()
        assert "second-trial: asked for a trial again after 201" in text
        assert "POST /oauth2/token" in text and "POST / list_orgs" in text
        assert text.index("idp.registered") < text.index("trial.created") < text.index("list_orgs")
        assert trial["api_key"] not in text and token not in text
        await pilot.press("escape")


async def test_the_log_colours_errors_wraps_long_lines_and_hints_at_an_empty_database(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu, size=(80, 24), initial="log") as (app, pilot), tui_emu.client() as c:
        rule = {"path": "/ask", "status": 503, "count": 1}
        (await c.post(tui_emu.url + "/_emulator/faults", json=rule)).raise_for_status()
        await c.get(tui_emu.url + "/ask", params={"q": "x" * 120})
        await until(pilot, lambda: any("fault.fired" in e.text for e in app.log_view.entries), "the fault")
        fired = next(e for e in app.log_view.entries if "fault.fired" in e.text)
        assert fired.style == "bold red"
        red = [seg for strip in app.log_view.log_widget.lines for seg in strip if seg.style and seg.style.color]
        assert any(seg.style and seg.style.color and seg.style.color.name == "red" for seg in red)
        # Long lines wrap: more rows on screen than lines; `w` cuts them (one row each), `w` again wraps.
        await pilot.press("slash", *"fault.fired", "enter")
        log = app.log_view.log_widget
        assert len(app.log_view.lines()) >= 1 and len(log.lines) > len(app.log_view.lines())
        await pilot.press("w")
        assert len(log.lines) == len(app.log_view.lines()) and "lines cut" in str(app.log_view.border_subtitle)
        await pilot.press("w")
        assert len(log.lines) > len(app.log_view.lines())
        await pilot.press("escape")
        # A database with no lines yet says when its server starts.
        _, _, trial = await flow.new_trial(c, tui_emu)
        await pilot.press("3")
        key = f"{trial['org']}:main"
        await until(pilot, lambda: row_of(app, "databases", trial["org"]) is not None)
        await select(pilot, app, "databases", key)
        await pilot.press("l")
        await until(pilot, lambda: app.log_view.hint() != "", "the hint")
        assert "starts on the first connection" in app.log_view.hint()


def test_the_reference_lists_every_key_of_the_dashboard_with_its_command() -> None:
    # a key may do one thing in a view and another elsewhere (`x`): the rows are the keys, in order
    rows = [row for row in table_rows(page("dashboard-keys")) if len(row) == 5 and row[0] != "Key"]
    assert [(r[0], r[1], r[4]) for r in rows] == [(k.label, " ".join(k.help.split()), k.cli or "") for k in KEYS]


# --- acts -------------------------------------------------------------------------------------


async def test_approving_a_pending_claim_from_the_dashboard(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu) as (app, pilot), tui_emu.client() as c:
        reg = await flow.register(c, tui_emu, type="service_auth", login_hint="lead@example.org")
        await until(pilot, lambda: reg["id"] in app.model.claims)
        await select(pilot, app, "registrations", reg["id"])
        await pilot.press("a")
        await answer(pilot, app)  # the e-mail suggested is the claim's login hint
        await until(pilot, lambda: (row_of(app, "registrations", reg["id"]) or [""] * 4)[3].startswith("approved"))
        claims = {x["registration"]: x for x in admin(tui_emu, "/_emulator/claims")["claims"]}
        assert claims[reg["id"]]["state"] == "confirmed" and claims[reg["id"]]["email"] == "lead@example.org"


async def test_approving_a_pxt_login_sign_in_from_the_dashboard(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu) as (app, pilot), tui_emu.client() as c:
        started = await c.post(tui_emu.auth + "/user_management/authorize/device", data={"client_id": CLIENT_ID})
        code = started.json()["user_code"]
        await until(pilot, lambda: code in str(app.query_one("#logins").render()), "the pending sign-in")
        await pilot.press("i")
        if isinstance(app.screen, PromptScreen) and "which" in app.screen.title_text:
            await answer(pilot, app, code)  # other sign-ins are pending too: name this one
        await answer(pilot, app, "signer@example.org")
        await until(pilot, lambda: code not in str(app.query_one("#logins").render()), "the approval")
        pending = [x["user_code"] for x in admin(tui_emu, "/_emulator/logins")["pending"]]
        assert code not in pending
        act = f"act: emulator approve-login {code} --email signer@example.org"
        await until(pilot, lambda: any(act in line for line in app.log_view.entries_text()), "the act's line")


async def test_claiming_a_trial_and_advancing_the_clock_from_the_dashboard(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu, initial="trials") as (app, pilot), tui_emu.client() as c:
        _, _, trial = await flow.new_trial(c, tui_emu)
        org = trial["org"]
        await until(pilot, lambda: row_of(app, "trials", org) is not None)
        await select(pilot, app, "trials", org)
        await pilot.press("c")
        await answer(pilot, app, "owner@example.org")
        await until(pilot, lambda: (row_of(app, "trials", org) or ["", ""])[1] == "claimed", "the claim")
        assert (trial_of(tui_emu, org) or {})["state"] == "claimed"
        assert (row_of(app, "trials", org) or [])[5] == "owner@example.org"
        before = clock_now(tui_emu)
        await pilot.press("t")
        await answer(pilot, app, "2h")
        await until(pilot, lambda: clock_now(tui_emu) == before + 7200, "the clock")
        await until(pilot, lambda: "2026-11-" in str(app.query_one("#clock").render()))
        # The command palette does the same.
        await pilot.press("ctrl+p")
        await pilot.press(*"Advance clock by 1h")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await until(pilot, lambda: clock_now(tui_emu) == before + 3 * 3600, "the palette's clock advance")


async def test_stopping_a_database_and_reading_its_log_lines(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu, initial="databases") as (app, pilot), tui_emu.client() as c:
        _, _, trial = await flow.new_trial(c, tui_emu)
        key = f"{trial['org']}:main"
        await until(pilot, lambda: row_of(app, "databases", trial["org"]) is not None)
        await select(pilot, app, "databases", key)
        # Starting reaches the same verb as pxt db start: a database that is not STOPPED is refused.
        await pilot.press("S")
        refused = f"act: emulator db start {trial['org']} main → refused: database main is AVAILABLE, not STOPPED"
        await until(pilot, lambda: any(refused in line for line in app.log_view.entries_text()), "the refusal")
        # `s` asks first: n (or esc) leaves the database running, y (or enter) stops it.
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        assert f"{trial['org']}:main" in cast(ConfirmScreen, app.screen).question
        await pilot.press("n")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, ConfirmScreen)
        assert (row_of(app, "databases", trial["org"]) or [""] * 4)[3] == "AVAILABLE"
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        await pilot.press("y")
        await until(pilot, lambda: (row_of(app, "databases", trial["org"]) or [""] * 4)[3] == "STOPPED", "STOPPED")
        listed = admin(tui_emu, "/_emulator/databases")["databases"]
        assert next(d for d in listed if d["org"] == trial["org"])["state"] == "STOPPED"
        stopped = f"act: emulator db stop {trial['org']} main → stop accepted"
        await until(pilot, lambda: any(stopped in line for line in app.log_view.entries_text()), "the act's line")
        await select(pilot, app, "databases", key)
        await pilot.press("l")
        assert app.active == "log" and app.log_view.scope == key
        await until(pilot, lambda: any("database stopped" in line for line in app.log_view.lines()), "its log")
        assert all(key in line for line in app.log_view.lines())
        await pilot.press("escape")
        assert app.active == "databases" and app.log_view.scope is None


async def test_the_cli_stops_and_lists_databases_like_the_dashboard(tui_emu: Emulator) -> None:
    async with tui_emu.client() as c:
        _, _, trial = await flow.new_trial(c, tui_emu)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "emulator", *args, "--url", tui_emu.url], capture_output=True, text=True, timeout=60
        )

    stop = cli("db", "stop", trial["org"], "main")
    assert stop.returncode == 0 and "stop accepted" in stop.stdout
    listing = cli("db")
    assert any(line.split()[:3] == [trial["org"], "main", "STOPPED"] for line in listing.stdout.splitlines())
    again = cli("db", "stop", trial["org"], "main")
    assert again.returncode != 0 and "STOPPED" in again.stderr
    start = cli("db", "start", "no-such-org", "main")
    assert start.returncode != 0 and "no organization" in start.stderr


# --- restarts ---------------------------------------------------------------------------------


async def test_the_dashboard_reconnects_when_the_emulator_restarts(start_emulator: Any, tmp_path: Path) -> None:
    e: Emulator = start_emulator("--no-watch", "--freeze-clock", FROZEN_AT, state_dir=tmp_path / "state")
    ports = {
        "--site-port": e.url.rsplit(":", 1)[1],
        "--auth-port": e.auth.rsplit(":", 1)[1],
        "--api-port": e.api.rsplit(":", 1)[1],
        "--tunnel-port": e.endpoints["proxy"].rsplit(":", 1)[1],
    }
    async with dashboard(e) as (app, pilot):
        async with e.client() as c:
            _, _, first = await flow.new_trial(c, e)
        await until(pilot, lambda: row_of(app, "trials", first["org"]) is not None)
        e.stop()
        await until(pilot, lambda: app.connection == "reconnecting", "reconnecting")
        assert "reconnecting" in str(app.query_one("#conn").render())
        pinned = [x for pair in ports.items() for x in pair]
        e2: Emulator = start_emulator("--no-watch", *pinned, state_dir=tmp_path / "state")
        await until(pilot, lambda: app.connection == "live", "the reconnection", within=10)
        async with e2.client() as c:
            _, _, second = await flow.new_trial(c, e2)
        await until(pilot, lambda: row_of(app, "trials", second["org"]) is not None, "a change after the restart")
        assert row_of(app, "trials", first["org"]) is not None
        assert sum("emulator.started" in line for line in app.log_view.lines()) >= 2


async def test_the_dashboard_waits_for_an_emulator_that_is_not_running_yet(tmp_path: Path) -> None:
    app = Dashboard(Locator(state_dir=tmp_path), label="emulator")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.connection_detail != "", "the first attempt")
        assert app.connection == "connecting" and "not running" in app.connection_detail


# --- snapshots --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def snap_emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """A fresh, seeded, frozen emulator in the middle of an agent flow, the same on every run."""
    e = Emulator(tmp_path_factory.mktemp("snap"), ["--no-watch", "--freeze-clock", FROZEN_AT, "--seed", "42"]).start()
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.250.0.2"), timeout=20) as c:
        reg = c.post(e.auth + "/agent/identity", json={"type": "anonymous"}).json()
        token = c.post(
            e.auth + "/oauth2/token", data={"grant_type": flow.JWT_BEARER, "assertion": reg["identity"]["assertion"]}
        ).json()["access_token"]
        trial = c.post(e.url + "/api/v1/trial-orgs", headers={"Authorization": f"Bearer {token}"}).json()
        c.post(e.url + f"/_emulator/databases/{trial['org']}/main/stop").raise_for_status()
        e.advance("11h30m")
        # A claim attempt lapses in minutes: this one is made after the clock moved, so it shows as pending.
        c.post(e.auth + "/agent/identity", json={"type": "service_auth", "login_hint": "lead@example.org"})
    yield e
    e.stop()


async def _settled(app: Dashboard, pilot: Pilot[None]) -> None:
    await until(pilot, lambda: len(app.model.registrations) == 2 and app.model.orgs and app.model.claims)
    await until(pilot, lambda: app.model.orgs[0].databases[0].state == "STOPPED")


@pytest.mark.parametrize("view", ["registrations", "trials", "databases"])
async def test_snapshot_of_the_main_views(snap_emu: Emulator, view: str) -> None:
    async with dashboard(snap_emu, initial=view) as (app, pilot):
        await _settled(app, pilot)
        await assert_snapshot(app, pilot, view)


async def test_snapshot_of_the_log_filtered_and_of_the_keys(snap_emu: Emulator) -> None:
    async with dashboard(snap_emu, initial="log") as (app, pilot):
        await _settled(app, pilot)
        await pilot.press("slash", *"trial\\.|db\\.|clock\\.", "enter")
        await assert_snapshot(app, pilot, "log")
        await pilot.press("question_mark")
        await pilot.pause()
        await assert_snapshot(app, pilot, "keys")


async def test_at_80x24_tables_scroll_sideways_and_enter_shows_every_field(snap_emu: Emulator) -> None:
    async with dashboard(snap_emu, size=(80, 24)) as (app, pilot):
        await _settled(app, pilot)
        table = app.table_view("registrations").table
        assert table.size.width < 80 and table.max_scroll_x > 0  # the columns are wider than the pane
        await assert_snapshot(app, pilot, "registrations-80x24")
        for _ in range(40):
            await pilot.press("right")
        assert table.scroll_x > 0
        reg = app.model.registrations[0]
        await select(pilot, app, "registrations", reg.id)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen), "the details")
        text = cast(DetailScreen, app.screen).plain()
        for scope in reg.scopes:
            assert scope in text
        assert reg.id in text and (reg.trial or "—") in text
        await assert_snapshot(app, pilot, "registration-detail-80x24")
        await pilot.press("escape")
        assert not isinstance(app.screen, DetailScreen)


# --- narrow and wide terminals ----------------------------------------------------------------


async def test_at_80_columns_every_tab_shows_and_the_top_bar_keeps_the_url(snap_emu: Emulator) -> None:
    async with dashboard(snap_emu, size=(80, 24), label=None) as (app, pilot):
        await _settled(app, pilot)
        tabs = app.query_one("#views", TabbedContent)
        for v in VIEWS:
            tab = tabs.get_tab(v.name).region
            assert tab.width > 0 and tab.x >= 0 and tab.right <= 80, f"the tab of {v.title} is off screen"
        screen = screen_lines(app)
        assert all(f"{v.key}{v.short}" in screen[1] for v in VIEWS), screen[1]
        assert snap_emu.url in screen[0] and "2026-11-01 11:30:00Z" in screen[0] and "live" in screen[0]
        await pilot.press("9")
        assert app.active == "agents"
        await pilot.press("minus")
        assert app.active == "snapshots"
        await pilot.press("0")
        assert app.active == "faults"
    async with dashboard(snap_emu, size=(200, 50)) as (app, pilot):
        bar = screen_lines(app)[1]
        assert all(f"{v.key} {v.title}" in bar for v in VIEWS), bar


async def test_at_80_columns_ids_are_short_so_the_columns_after_them_show(snap_emu: Emulator) -> None:
    async with dashboard(snap_emu, size=(80, 24)) as (app, pilot):
        await _settled(app, pilot)
        await until(pilot, lambda: len(app.model.agents) == 2, "the agents")
        screen = screen_lines(app)
        header = next(line for line in screen if "Registration" in line)
        assert all(column in header for column in ("Claim", "Trial", "E-mail", "Scopes")), header
        for reg in app.model.registrations:
            line = next(line for line in screen if short_id(reg.id) in line)
            assert reg.id not in line and reg.scopes[0] in line
            assert (reg.trial or reg.login_hint or "") in line and (reg.trial or reg.login_hint)
        # The filter matches the whole id, the part a narrow table does not show included.
        first = app.model.registrations[0].id
        await pilot.press("slash", *first[10:20], "enter")
        assert [r[0] for r in rows(app, "registrations")] == [short_id(first)]
        await pilot.press("escape")
        await pilot.press("9")
        await until(pilot, lambda: len(rows(app, "agents")) == 3, "the agents' rows")
        screen = screen_lines(app)
        assert "Scorecard" in next(line for line in screen if "Agent" in line and "Type" in line)
        for card in app.model.agents:
            line = next(line for line in screen if short_id(card.agent) in line)
            assert ("clean" if card.clean else f"{len(card.findings)}: ") in line, line
        await assert_snapshot(app, pilot, "agents-80x24")


async def test_log_lines_that_came_while_the_log_was_hidden_use_its_whole_width(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu, size=(200, 50)) as (app, pilot), tui_emu.client() as c:
        log = app.log_view.log_widget
        for shown_before in (False, True):  # never shown yet; shown once, then another view
            if shown_before:
                await pilot.press("5", "1")
            before = len(app.log_view.lines())
            _, _, trial = await flow.new_trial(c, tui_emu)
            created = f"trial.created [{trial['org']}]"
            await until(pilot, lambda: any(created in line for line in app.log_view.lines()), "its line")  # noqa: B023
            await pilot.press("5")
            width = log.scrollable_content_region.width
            long = [line for line in app.log_view.lines()[before:] if 80 < len(line) < width]
            assert long, "no new line between 80 columns and the pane's width"
            whole = lambda: all(any(line in strip.text for strip in log.lines) for line in long)  # noqa: E731, B023
            await until(pilot, whole, f"every line on one row of {width} columns")
            await pilot.press("1")


async def test_prompts_and_questions_show_their_whole_text_and_toasts_stay_inside_the_frame(
    tui_emu: Emulator,
) -> None:
    async with tui_emu.client() as c:
        reg = await flow.register(c, tui_emu, type="service_auth", login_hint="whole@example.org")
        _, _, trial = await flow.new_trial(c, tui_emu)
    for size in ((200, 50), (80, 24)):
        async with dashboard(tui_emu, size=size, notifications=True) as (app, pilot):
            await until(pilot, lambda: reg["id"] in app.model.claims, "the pending claim")
            await select(pilot, app, "registrations", reg["id"])
            await pilot.press("a")
            await until(pilot, lambda: isinstance(app.screen, PromptScreen), "the prompt")
            prompt = cast(PromptScreen, app.screen)
            assert reg["id"] in prompt.title_text
            assert shown_in(app, prompt.query(Label).first()) == prompt.title_text
            await pilot.press("escape")
            await pilot.press("3")
            await until(pilot, lambda: row_of(app, "databases", trial["org"]) is not None)
            await select(pilot, app, "databases", f"{trial['org']}:main")
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
            question = cast(ConfirmScreen, app.screen)
            assert shown_in(app, question.query(Label).first()) == question.question
            await pilot.press("n")
            # An act's toast sits inside the view's frame, over neither its border nor the footer.
            await pilot.press("t")
            await answer(pilot, app, "1s")
            await until(pilot, lambda: bool(app.screen.query(Toast)), "the act's toast")
            toast = app.screen.query(Toast).first().region
            inside = app.table_view("databases").region.shrink(Spacing(1, 1, 1, 1))
            assert inside.contains_region(toast), (toast, inside)


async def test_snapshot_of_a_question_at_80x24(snap_emu: Emulator) -> None:
    async with dashboard(snap_emu, size=(80, 24), initial="databases") as (app, pilot):
        await _settled(app, pilot)
        await select(pilot, app, "databases", f"{app.model.orgs[0].org}:main")
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        await assert_snapshot(app, pilot, "stop-question-80x24")
        await pilot.press("n")


# --- every row has its details ----------------------------------------------------------------


async def test_enter_shows_every_field_of_a_trial_and_of_an_org_and_its_database(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu, initial="trials") as (app, pilot), tui_emu.client() as c:
        reg, _, trial = await flow.new_trial(c, tui_emu)
        org = trial["org"]
        await until(pilot, lambda: row_of(app, "trials", org) is not None)
        await select(pilot, app, "trials", org)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen), "the trial's details")
        text = cast(DetailScreen, app.screen).plain()
        assert f"Org: {org}" in text and f"Registration: {reg['id']}" in text
        assert f"Expires at: {trial['expires_at']}" in text and "Databases: main AVAILABLE" in text
        await pilot.press("escape")
        await pilot.press("3")
        await until(pilot, lambda: row_of(app, "databases", org) is not None)
        await select(pilot, app, "databases", f"{org}:main")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen), "the database's details")
        text = cast(DetailScreen, app.screen).plain()
        assert f"Org: {org}" in text and "Database: main" in text and "State: AVAILABLE" in text
        assert "Generation: " in text and "API keys: trial" in text
        await pilot.press("escape")
        assert app.active == "databases" and not isinstance(app.screen, DetailScreen)  # `l` shows its log lines


def test_a_service_row_has_every_field_for_enter() -> None:
    """No service runs in these tests (one takes a built environment): its row and details from the wire type."""
    service = ServiceView("acme", "main", "ingest", "api", "RUNNING", 3, "http://127.0.0.1:9/api/ingest", None, "x")
    model = Model(services=[service])
    view = ServicesView()
    [(key, _)] = view.rows(model)
    fields = dict(view.details(model, key) or [])
    assert fields["Service"] == "ingest" and fields["Generation"] == "3" and fields["Base path"] == "api"
    assert fields["Endpoint"] == "http://127.0.0.1:9/api/ingest" and str(fields["State"]) == "RUNNING"


# --- faults, snapshots, reset -----------------------------------------------------------------


async def test_the_faults_view_lists_the_rules_and_removes_them(tui_emu: Emulator) -> None:
    async with dashboard(tui_emu, initial="faults") as (app, pilot):
        with tui_emu.admin() as a:
            one = a.post("/_emulator/faults", json={"path": "/_tui/one", "status": 500, "count": 3}).json()["id"]
            spec = {"origin": "site", "path": "/_tui/two*", "latency_ms": 50, "nth": 2}
            two = a.post("/_emulator/faults", json=spec).json()["id"]
            a.post("/_emulator/faults", json={"hold": "/_tui/held", "count": 2}).raise_for_status()
        await until(pilot, lambda: row_of(app, "faults", two) and row_of(app, "faults", "hold"), "the rules")
        assert (row_of(app, "faults", one) or [])[1:6] == ["/_tui/one", "500", "3×", "0", "0"]
        assert (row_of(app, "faults", two) or [])[1:4] == ["site /_tui/two*", "+50 ms", "from call 2, until removed"]
        assert (row_of(app, "faults", "hold") or [])[1:4] == ["/_tui/held", "hold until released", "next 2"]
        await select(pilot, app, "faults", one)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen), "the rule's details")
        text = cast(DetailScreen, app.screen).plain()
        assert "Matches: /_tui/one" in text and "status: 500" in text and f"emulator fault clear {one}" in text
        await pilot.press("escape")
        # x removes the selected rule, as `emulator fault clear ID` does.
        await select(pilot, app, "faults", one)
        await pilot.press("x")
        await until(pilot, lambda: row_of(app, "faults", one) is None, "the removal")
        assert one not in {r["id"] for r in admin(tui_emu, "/_emulator/faults")["rules"]}
        act = f"act: emulator fault clear {one} → removed {one}"
        await until(pilot, lambda: any(act in line for line in app.log_view.entries_text()), "the act's line")
        # A rule removed elsewhere (no event says so) is gone when the view is shown again.
        with tui_emu.admin() as a:
            a.delete(f"/_emulator/faults/{two}").raise_for_status()
        await pilot.press("1", "0")
        await until(pilot, lambda: row_of(app, "faults", two) is None, "the rule removed by the API")
        # X asks first, then removes every rule and releases every hold.
        await pilot.press("X")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        await pilot.press("n")
        await pilot.pause(0.2)
        assert row_of(app, "faults", "hold") is not None
        await pilot.press("X")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        await pilot.press("y")
        await until(pilot, lambda: not rows(app, "faults"), "no rule left")
        assert admin(tui_emu, "/_emulator/faults") == {"rules": [], "holds": {}, "waiting": []}


async def test_snapshots_save_load_and_delete_and_reset_asks_first(start_emulator: Any) -> None:
    e: Emulator = start_emulator("--no-watch", "--freeze-clock", FROZEN_AT)
    orgs = lambda app: {o.org for o in app.model.orgs}  # noqa: E731

    async def confirmed(pilot: Pilot[None], app: Dashboard, key: str, yes: bool = True) -> str:
        await pilot.press(key)
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        question = cast(ConfirmScreen, app.screen)
        assert shown_in(app, question.query(Label).first()) == question.question  # long, and whole
        await pilot.press("y" if yes else "n")
        return question.question

    async with dashboard(e, initial="snapshots") as (app, pilot), e.client() as c:
        _, _, kept = await flow.new_trial(c, e)
        await until(pilot, lambda: kept["org"] in orgs(app), "the first trial")
        await pilot.press("n")
        await answer(pilot, app, "before")
        await until(pilot, lambda: row_of(app, "snapshots", "before") is not None, "the snapshot", within=30)
        assert [s["name"] for s in admin(e, "/_emulator/snapshots")["snapshots"]] == ["before"]
        _, _, later = await flow.new_trial(c, e)
        await until(pilot, lambda: later["org"] in orgs(app), "the second trial")
        # L loads the selected snapshot once confirmed: the later trial is gone.
        await select(pilot, app, "snapshots", "before")
        assert "before" in await confirmed(pilot, app, "L")
        await until(pilot, lambda: orgs(app) == {kept["org"]}, "the load", within=30)
        act = "act: emulator snapshot load before → loaded before"
        await until(pilot, lambda: any(act in line for line in app.log_view.entries_text()), "the act's line")
        # x deletes it once confirmed.
        await select(pilot, app, "snapshots", "before")
        await confirmed(pilot, app, "x", yes=False)
        await pilot.pause(0.2)
        assert row_of(app, "snapshots", "before") is not None
        await confirmed(pilot, app, "x")
        await until(pilot, lambda: row_of(app, "snapshots", "before") is None, "the deletion")
        assert admin(e, "/_emulator/snapshots")["snapshots"] == []
        # R resets the emulator once confirmed: nothing the run made is left.
        assert "Reset the emulator to an empty state" in await confirmed(pilot, app, "R")
        await until(pilot, lambda: not app.model.orgs and not app.model.registrations, "the reset", within=30)
        assert admin(e, "/_emulator/registrations")["registrations"] == []
        act = "act: emulator reset → reset to empty"
        await until(pilot, lambda: any(act in line for line in app.log_view.entries_text()), "the reset's line")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert {"Reset the emulator to empty", "Save a snapshot…"} <= set(titles)

    with e.admin() as a:
        a.post("/_emulator/snapshots", json={"name": "kept"}).raise_for_status()
        a.post("/_emulator/faults", json={"path": "/_tui/ro", "status": 500}).raise_for_status()
    async with dashboard(e, readonly=True, initial="snapshots") as (app, pilot):
        await until(pilot, lambda: row_of(app, "snapshots", "kept") is not None, "the snapshot")
        await select(pilot, app, "snapshots", "kept")
        assert not {"n", "L", "x"} & footer_keys(app)
        await pilot.press("n", "L", "x", "R", "0", "x", "X")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, (PromptScreen, ConfirmScreen))
        assert [s["name"] for s in admin(e, "/_emulator/snapshots")["snapshots"]] == ["kept"]
        assert len(admin(e, "/_emulator/faults")["rules"]) == 1
        titles = [c.title for c in app.get_system_commands(app.screen)]
        acts = [t for t in titles if not t.startswith("View: ")]
        assert "View: Snapshots" in titles and not any("Reset" in t or "napshot" in t or "ault" in t for t in acts)
