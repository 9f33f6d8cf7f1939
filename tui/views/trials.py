"""Trial organizations: claimed or not, time left on the emulator's clock, API keys by name. A trial deleted
while watched keeps its row, name and expiry, shown as deleted. Enter shows every field of the selected trial."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from emulator.admin.wire import OrgView
from tui.model import ExpiredTrial, Model, fmt_instant, fmt_left
from tui.views.table import Row, TableView, state_cell


class TrialsView(TableView):
    TITLE = "Trial organizations"
    COLUMNS: ClassVar[list[str]] = ["Org", "State", "Time left", "Expires at", "API keys", "Admins", "Registration"]
    ID_COLUMNS: ClassVar[frozenset[str]] = frozenset({"Registration"})

    def rows(self, model: Model) -> list[Row]:
        now = model.clock.current()
        rows: list[Row] = []
        for o in model.trials():
            left = fmt_left(o.expires_ts - now) if o.expires_ts else "never (claimed)"
            soon = o.expires_ts is not None and o.expires_ts - now < 3600
            rows.append(
                (
                    o.org,
                    [
                        o.org,
                        state_cell(o.state),
                        Text(left, style="bold red" if soon else ""),
                        o.expires_at or "—",
                        ", ".join(o.api_keys) or "—",
                        ", ".join(o.admins) or "—",
                        o.registration or "—",
                    ],
                )
            )
        for slug, e in model.expired.items():
            dim = "dim"
            known = e.known
            rows.append(
                (
                    f"expired:{slug}",
                    [
                        slug,
                        state_cell("deleted"),
                        Text("deleted", style=dim),
                        Text(_expired_at(e), style=dim),
                        Text(", ".join(known.api_keys if known else []) or "—", style=dim),
                        Text(", ".join(known.admins if known else []) or "—", style=dim),
                        Text((known.registration if known else None) or "—", style=dim),
                    ],
                )
            )
        return rows

    def details(self, model: Model, key: str) -> list[tuple[str, str | Text]] | None:
        if key.startswith("expired:"):
            slug = key.removeprefix("expired:")
            e = model.expired.get(slug)
            if e is None:
                return None
            return [
                ("Org", slug),
                ("State", Text("deleted (its trial expired)", style="dim")),
                ("Expired at", _expired_at(e)),
                *_known(e.org_id, e.known),
            ]
        o = next((o for o in model.trials() if o.org == key), None)
        if o is None:
            return None
        left = fmt_left(o.expires_ts - model.clock.current()) if o.expires_ts else "never (claimed)"
        return [
            ("Org", o.org),
            ("State", state_cell(o.state)),
            ("Time left", left),
            ("Expires at", o.expires_at or "—"),
            ("Created", o.created_at or "—"),
            *_known(o.org_id, o),
            ("Databases", "\n".join(f"{d.db} {d.state}" for d in o.databases) or "—"),
        ]


def _expired_at(e: ExpiredTrial) -> str:
    """When a deleted trial was due (as the API wrote it when it was known), else when it was deleted."""
    return (e.known.expires_at if e.known else None) or fmt_instant(e.expired_at)


def _known(org_id: str | None, o: OrgView | None) -> list[tuple[str, str | Text]]:
    """What a trial and a deleted trial both tell: its id, keys, admins, registration and network (a trial
    deleted before the dashboard saw it tells only its id)."""
    return [
        ("Org id", org_id or "—"),
        ("API keys", "\n".join(o.api_keys if o else []) or "—"),
        ("Admins", "\n".join(o.admins if o else []) or "—"),
        ("Registration", (o.registration if o else None) or "—"),
        ("Network", (o.network if o else None) or "—"),
    ]
