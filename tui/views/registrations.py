"""Agent registrations: type, claimed or not, a claim (pending, approved, denied, lapsed), scopes and token
activity; pending sign-ins. Enter shows every field of the selected registration."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from emulator.admin.wire import RegistrationView
from tui.model import Model, fmt_ago, parse_iso
from tui.views.table import Row, TableView, state_cell

# A claim as it reads in the table: the last attempt's state (what `/_emulator/claims` still offers is newer).
CLAIM_CELLS = {
    "pending": Text("pending", style="bold yellow"),
    "confirmed": Text("approved, awaiting code", style="cyan"),
    "denied": Text("denied", style="red"),
    "lapsed": Text("lapsed", style="dim"),
    "completed": Text("completed", style="green"),
}


def claim_state(model: Model, r: RegistrationView) -> str | None:
    """The registration's claim: pending or approved while a person can still act on it, else how its last
    attempt ended (denied, lapsed, completed), None when no claim was ever started."""
    live = model.claims.get(r.id)
    if live is not None:
        return live.state
    return r.claim.state if r.claim else None


def trial_name(model: Model, r: RegistrationView) -> Text:
    if r.trial:
        return Text(r.trial)
    if r.trial_org_id:
        slug = model.deleted_trial(r.trial_org_id)
        return Text(f"{slug} (deleted)" if slug else "deleted", style="dim")
    return Text("—", style="dim")


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
    # Narrow, the claim, trial, e-mail and scopes come before the counts (the type and status follow them).
    NARROW_FIRST: ClassVar[list[str]] = ["Registration", "Claim", "Trial", "E-mail", "Scopes"]
    ID_COLUMNS: ClassVar[frozenset[str]] = frozenset({"Registration"})

    def compose(self) -> ComposeResult:
        yield from super().compose()
        yield Static(id="logins")

    def rows(self, model: Model) -> list[Row]:
        now = model.clock.current()
        rows: list[Row] = []
        for r in model.registrations:
            state = claim_state(model, r)
            rows.append(
                (
                    r.id,
                    [
                        r.id,
                        r.type,
                        state_cell("revoked" if r.revoked_at else r.status),
                        CLAIM_CELLS.get(state or "", Text(state or "—", style="dim")),
                        str(r.tokens_issued),
                        fmt_ago(parse_iso(r.last_token_at), now),
                        trial_name(model, r),
                        r.claimed_email or r.login_hint or "—",
                        " ".join(r.scopes),
                    ],
                )
            )
        return rows

    def details(self, model: Model, key: str) -> list[tuple[str, str | Text]] | None:
        r = next((r for r in model.registrations if r.id == key), None)
        if r is None:
            return None
        now = model.clock.current()
        state = claim_state(model, r)
        live = model.claims.get(r.id) or r.claim
        claim = CLAIM_CELLS.get(state or "", Text(state or "none started", style="dim")).copy()
        if live and live.expires_at and state in ("pending", "confirmed"):
            claim.append(f" (link lapses at {live.expires_at})", style="dim")
        if live and live.email:
            claim.append(f" as {live.email}")
        last = r.last_token_at
        return [
            ("Registration", r.id),
            ("Type", r.type),
            ("Status", state_cell("revoked" if r.revoked_at else r.status)),
            ("Claim", claim),
            ("Login hint", r.login_hint or "—"),
            ("Claimed by", r.claimed_email or "—"),
            ("Scopes", "\n".join(r.scopes) or "—"),
            ("Tokens issued", str(r.tokens_issued)),
            ("Last token", f"{last} ({fmt_ago(parse_iso(last), now)})" if last else "—"),
            ("Trial", trial_name(model, r)),
            ("Trial org id", r.trial_org_id or "—"),
            ("Registered at", r.created_at),
            *([("Revoked at", r.revoked_at)] if r.revoked_at else []),
        ]

    def show(self, model: Model) -> None:
        super().show(model)
        logins = self.query_one("#logins", Static)
        if model.logins:
            codes = ", ".join(login.user_code for login in model.logins)
            logins.update(Text.assemble(("Pending pxt login sign-ins: ", "bold"), (codes, "yellow")))
            logins.display = True
        else:
            logins.update("")
            logins.display = False
