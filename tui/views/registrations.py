"""Agent registrations: type, claimed or not, a pending claim, scopes and token activity; pending sign-ins."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from tui.model import Model, fmt_ago, parse_iso
from tui.views.table import Row, TableView, state_cell


class RegistrationsView(TableView):
    TITLE = "Agent registrations"
    COLUMNS: ClassVar[list[str]] = [
        "Registration",
        "Type",
        "Status",
        "Claim",
        "Tokens",
        "Last token",
        "Trial",
        "E-mail",
        "Scopes",
    ]

    def compose(self) -> ComposeResult:
        yield from super().compose()
        yield Static(id="logins")

    def rows(self, model: Model) -> list[Row]:
        now = model.clock.current()
        rows: list[Row] = []
        for r in model.registrations:
            claim = model.claims.get(r["id"])
            if claim is None:
                claim_cell = Text("—", style="dim")
            elif claim["state"] == "confirmed":
                claim_cell = Text("approved, awaiting code", style="cyan")
            else:
                claim_cell = Text("pending", style="bold yellow")
            rows.append(
                (
                    r["id"],
                    [
                        r["id"],
                        r["type"],
                        state_cell(r["status"]),
                        claim_cell,
                        str(r["tokens_issued"]),
                        fmt_ago(parse_iso(r["last_token_at"]), now),
                        r["trial"] or "—",
                        r["claimed_email"] or r["login_hint"] or "—",
                        " ".join(r["scopes"]),
                    ],
                )
            )
        return rows

    def show(self, model: Model) -> None:
        super().show(model)
        logins = self.query_one("#logins", Static)
        if model.logins:
            codes = ", ".join(login["user_code"] for login in model.logins)
            logins.update(Text.assemble(("Pending pxt login sign-ins: ", "bold"), (codes, "yellow")))
            logins.display = True
        else:
            logins.update("")
            logins.display = False
