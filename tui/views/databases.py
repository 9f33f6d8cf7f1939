"""Organizations and their databases, with the databases' states (AVAILABLE, STOPPED, UPDATING, FAILED, ...)."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text

from tui.model import Model
from tui.views.table import Row, TableView, state_cell


def org_kind(o: dict[str, Any]) -> Text:
    if not o["trial"]:
        return Text("org", style="green")
    return Text(f"trial, {o['state']}", style="green" if o["state"] == "claimed" else "yellow")


def server_cell(d: dict[str, Any]) -> Text:
    server = d.get("server")
    if not server:
        return Text("—", style="dim")
    return Text("serving" if server.get("ready") else "starting", style="green" if server.get("ready") else "cyan")


class DatabasesView(TableView):
    TITLE = "Organizations and databases"
    COLUMNS: ClassVar[list[str]] = ["Org", "Kind", "Database", "State", "Gen", "Environment", "Server", "Note"]

    def rows(self, model: Model) -> list[Row]:
        rows: list[Row] = []
        for o in model.orgs:
            if not o["databases"]:
                rows.append((f"{o['org']}:", [o["org"], org_kind(o), "—", state_cell(None), "", "", "", ""]))
            for d in o["databases"]:
                rows.append(
                    (
                        f"{o['org']}:{d['db']}",
                        [
                            o["org"],
                            org_kind(o),
                            d["db"],
                            state_cell(d["state"]),
                            str(d["generation"]),
                            d["environment"] or "base",
                            server_cell(d),
                            Text(d["failure_reason"] or "", style="red"),
                        ],
                    )
                )
        return rows

    def selected_db(self) -> tuple[str, str] | None:
        key = self.selected_key()
        if not key or key.endswith(":"):
            return None
        org, _, db = key.partition(":")
        return org, db
