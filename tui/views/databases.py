"""Organizations and their databases, with the databases' states (AVAILABLE, STOPPED, UPDATING, FAILED, ...).
Enter shows every field of the selected organization and database; `l` its log lines."""

from __future__ import annotations

from typing import ClassVar

import msgspec
from rich.text import Text

from emulator.admin.wire import DatabaseView, OrgView, ServerView
from tui.model import Model
from tui.views.table import Row, TableView, state_cell


def org_kind(o: OrgView) -> Text:
    if not o.trial:
        return Text("org", style="green")
    return Text(f"trial, {o.state}", style="green" if o.state == "claimed" else "yellow")


def server_cell(d: DatabaseView) -> Text:
    server = d.server
    if server is None:
        return Text("—", style="dim")
    return Text("serving" if server.ready else "starting", style="green" if server.ready else "cyan")


class DatabasesView(TableView):
    TITLE = "Organizations and databases"
    COLUMNS: ClassVar[list[str]] = ["Org", "Kind", "Database", "State", "Gen", "Environment", "Server", "Note"]

    def rows(self, model: Model) -> list[Row]:
        rows: list[Row] = []
        for o in model.orgs:
            if not o.databases:
                rows.append((f"{o.org}:", [o.org, org_kind(o), "—", state_cell(None), "", "", "", ""]))
            for d in o.databases:
                rows.append(
                    (
                        f"{o.org}:{d.db}",
                        [
                            o.org,
                            org_kind(o),
                            d.db,
                            state_cell(d.state),
                            str(d.generation),
                            d.environment or "base",
                            server_cell(d),
                            Text(d.failure_reason or "", style="red"),
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

    def details(self, model: Model, key: str) -> list[tuple[str, str | Text]] | None:
        slug, _, name = key.partition(":")
        o = next((o for o in model.orgs if o.org == slug), None)
        if o is None:
            return None
        fields: list[tuple[str, str | Text]] = [
            ("Org", o.org),
            ("Org id", o.org_id),
            ("Kind", org_kind(o)),
            ("Created", o.created_at),
            ("Expires at", o.expires_at or "—"),
            ("API keys", "\n".join(o.api_keys) or "—"),
            ("Admins", "\n".join(o.admins) or "—"),
        ]
        d = next((d for d in o.databases if d.db == name), None)
        if d is None:
            return [*fields, ("Databases", Text("none", style="dim"))]
        server = d.server
        return [
            *fields,
            ("Database", d.db),
            ("State", state_cell(d.state)),
            ("Generation", str(d.generation)),
            ("Environment", d.environment or "base"),
            ("Last build", d.last_build_outcome or "—"),
            ("Failure", Text(d.failure_reason or "—", style="red" if d.failure_reason else "")),
            ("Server", Text.assemble(server_cell(d), f" ({server_fields(server)})" if server else "")),
            ("Gateway port", str(d.gateway_port) if d.gateway_port else "—"),
            ("Updated", d.updated_at or "—"),
            ("Log lines", Text("l on this row shows them", style="dim")),
        ]


def server_fields(server: ServerView) -> str:
    """Every field of the server, as the API has it."""
    return ", ".join(f"{k} {v}" for k, v in msgspec.structs.asdict(server).items())
