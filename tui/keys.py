"""Every key of the dashboard in one list: it makes the bindings, the `?` screen and the site's key reference.

An act (a key that changes the emulator) names the `emulator` command that does the same, and is hidden
with `--readonly`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from textual.binding import Binding


@dataclass(frozen=True)
class Key:
    keys: str  # Textual key names, comma-separated
    label: str  # as the help screen shows it
    action: str
    help: str
    group: str
    footer: str | None = None  # short text in the footer; None keeps it out of the footer
    act: bool = False  # changes the emulator: hidden by --readonly
    cli: str | None = None
    bind: bool = True  # False: Textual already binds it (the palette)
    priority: bool = False


class View(NamedTuple):
    name: str
    title: str  # the tab's label when the bar has room for every title
    short: str  # the tab's label when it has not (80 columns must show every tab)
    key: str  # the key that shows it, as it reads


VIEWS: list[View] = [
    View("registrations", "Registrations", "Regs", "1"),
    View("trials", "Trials", "Trials", "2"),
    View("databases", "Orgs & databases", "Orgs", "3"),
    View("services", "Services", "Svcs", "4"),
    View("log", "Log", "Log", "5"),
    View("users", "Users", "Users", "6"),
    View("keys", "Keys", "Keys", "7"),
    View("switches", "Switches", "Switch", "8"),
    View("agents", "Agents", "Agents", "9"),
    View("faults", "Faults", "Faults", "0"),
    View("snapshots", "Snapshots", "Snaps", "-"),
]
# Textual's names of the view keys that are not letters or digits.
_KEY_NAMES = {"-": "minus"}


KEYS: list[Key] = [
    *(Key(_KEY_NAMES.get(v.key, v.key), v.key, f"view('{v.name}')", f"show {v.title.lower()}", "Views") for v in VIEWS),
    Key("tab,right_square_bracket", "tab ]", "next_view", "next view", "Views", priority=True),
    Key("shift+tab,left_square_bracket", "shift+tab [", "prev_view", "previous view", "Views", priority=True),
    Key(
        "slash",
        "/",
        "filter",
        "filter the table or log (a regex; !text keeps what does not match)",
        "Navigate",
        "filter",
    ),
    Key("escape", "esc", "go_back", "close or clear the filter, else go back", "Navigate"),
    Key("question_mark", "?", "help", "show every key", "Navigate", "keys"),
    Key("ctrl+p", "ctrl+p", "command_palette", "command palette: every view and act by name", "Navigate", bind=False),
    Key("up,down,pgup,pgdn", "↑ ↓ pgup pgdn", "", "move in a table, scroll the log", "Navigate", bind=False),
    Key("l", "l", "db_logs", "log lines of the selected database", "Navigate", "logs"),
    Key("enter", "enter", "details", "every field of the selected row, wrapped", "Navigate", bind=False),
    Key("left,right", "← →", "", "scroll a wide table sideways", "Navigate", bind=False),
    Key("w", "w", "wrap", "log: wrap long lines, or cut them (wrapping is on at start)", "Navigate", "wrap"),
    Key("end", "end", "follow", "log: jump to the tail and follow it again", "Navigate"),
    Key("q", "q", "quit", "quit the dashboard", "Navigate", "quit"),
    Key(
        "c",
        "c",
        "claim_trial",
        "claim the selected trial as an e-mail",
        "Acts",
        "claim",
        act=True,
        cli="emulator claim-trial ORG --email E",
    ),
    Key(
        "a",
        "a",
        "approve_claim",
        "approve the selected registration's claim",
        "Acts",
        "approve",
        act=True,
        cli="emulator approve-claim REG --email E",
    ),
    Key(
        "d",
        "d",
        "deny_claim",
        "deny the selected registration's claim",
        "Acts",
        "deny",
        act=True,
        cli="emulator approve-claim REG --email E --deny",
    ),
    Key(
        "i",
        "i",
        "approve_login",
        "approve a pending pxt login sign-in (in the footer while one is pending)",
        "Acts",
        "sign-in",
        act=True,
        cli="emulator approve-login [CODE] --email E",
    ),
    Key(
        "t",
        "t",
        "advance_clock",
        "advance the clock (48h: a trial expires)",
        "Acts",
        "+time",
        act=True,
        cli="emulator clock advance 48h",
    ),
    Key(
        "s",
        "s",
        "stop_db",
        "stop the selected database (asks first: y or enter stops, n or esc does not)",
        "Acts",
        "stop",
        act=True,
        cli="emulator db stop ORG DB",
    ),
    Key(
        "S",
        "S",
        "start_db",
        "start the selected database",
        "Acts",
        "start",
        act=True,
        cli="emulator db start ORG DB",
    ),
    Key(
        "space",
        "space",
        "toggle_switch",
        "switches: turn the selected switch on or off",
        "Acts",
        "on/off",
        act=True,
        cli="emulator switch NAME on/off",
    ),
    Key(
        "x",
        "x",
        "remove_fault",
        "faults: remove the selected rule",
        "Acts",
        "remove",
        act=True,
        cli="emulator fault clear ID",
    ),
    Key(
        "X",
        "X",
        "clear_faults",
        "faults: remove every rule and release every hold (asks first)",
        "Acts",
        "clear all",
        act=True,
        cli="emulator fault clear",
    ),
    Key(
        "n",
        "n",
        "save_snapshot",
        "snapshots: save the emulator as a new snapshot (asks its name)",
        "Acts",
        "save",
        act=True,
        cli="emulator snapshot save NAME",
    ),
    Key(
        "L",
        "L",
        "load_snapshot",
        "snapshots: load the selected snapshot, replacing the emulator's state (asks first)",
        "Acts",
        "load",
        act=True,
        cli="emulator snapshot load NAME",
    ),
    Key(
        "x",
        "x",
        "delete_snapshot",
        "snapshots: delete the selected snapshot (asks first)",
        "Acts",
        "delete",
        act=True,
        cli="emulator snapshot delete NAME",
    ),
    Key(
        "R",
        "R",
        "reset",
        "reset the emulator to empty: everything a run made is gone (asks first)",
        "Acts",
        None,  # out of the footer: rare, and the footer is short at 80 columns
        act=True,
        cli="emulator reset",
    ),
]

ACTS = frozenset(k.action for k in KEYS if k.act)


def bindings() -> list[Binding]:
    return [
        Binding(k.keys, k.action, k.footer or k.help, show=k.footer is not None, priority=k.priority)
        for k in KEYS
        if k.bind
    ]


def visible(readonly: bool) -> list[Key]:
    return [k for k in KEYS if not (readonly and k.act)]
