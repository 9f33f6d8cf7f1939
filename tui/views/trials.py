"""Trial organizations: claimed or not, time left on the emulator's clock, API keys by name. A trial deleted
while watched keeps its row, name and expiry, shown as deleted."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from tui.model import Model, fmt_instant, fmt_left
from tui.views.table import Row, TableView, state_cell


class TrialsView(TableView):
    TITLE = "Trial organizations"
    COLUMNS: ClassVar[list[str]] = ["Org", "State", "Time left", "Expires at", "API keys", "Admins", "Registration"]

    def rows(self, model: Model) -> list[Row]:
        now = model.clock.current()
        rows: list[Row] = []
        for o in model.trials():
            left = fmt_left(o["expires_ts"] - now) if o["expires_ts"] else "never (claimed)"
            soon = o["expires_ts"] is not None and o["expires_ts"] - now < 3600
            rows.append(
                (
                    o["org"],
                    [
                        o["org"],
                        state_cell(o["state"]),
                        Text(left, style="bold red" if soon else ""),
                        o["expires_at"] or "—",
                        ", ".join(o["api_keys"]) or "—",
                        ", ".join(o["admins"]) or "—",
                        o["registration"] or "—",
                    ],
                )
            )
        for slug, e in model.expired.items():
            dim = "dim"
            rows.append(
                (
                    f"expired:{slug}",
                    [
                        slug,
                        state_cell("deleted"),
                        Text("deleted", style=dim),
                        Text(e.get("expires_at") or fmt_instant(e.get("expired_at")), style=dim),
                        Text(", ".join(e.get("api_keys") or []) or "—", style=dim),
                        Text(", ".join(e.get("admins") or []) or "—", style=dim),
                        Text(e.get("registration") or "—", style=dim),
                    ],
                )
            )
        return rows
