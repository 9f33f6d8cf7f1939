"""Hosted services and their endpoints (the database gateway's address while it runs)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from tui.model import Model
from tui.views.table import Row, TableView, state_cell


class ServicesView(TableView):
    TITLE = "Services"
    COLUMNS: ClassVar[list[str]] = ["Org", "Database", "Service", "State", "Gen", "Endpoint", "Error"]
    EMPTY = "no services (pxt service update deploys one)"

    def rows(self, model: Model) -> list[Row]:
        return [
            (
                f"{s['org']}:{s['db']}/{s['base_path']}/{s['service']}",
                [
                    s["org"],
                    s["db"],
                    f"{s['base_path']}/{s['service']}" if s["base_path"] else s["service"],
                    state_cell(s["state"]),
                    str(s["generation"]),
                    s["endpoint"] or "—",
                    Text(s["error"] or "", style="red"),
                ],
            )
            for s in model.services
        ]
