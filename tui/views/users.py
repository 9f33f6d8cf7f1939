"""People who signed in (by `pxt login`, or approving a claim): their organizations and roles, and their
`pxt login` sessions with when each was made, expires and was revoked. One row per session."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from emulator.admin.wire import UserView
from tui.model import Model
from tui.views.table import Row, TableView, state_cell


def memberships(u: UserView) -> str:
    return ", ".join(f"{m.org} ({m.role})" for m in u.orgs) or "—"


class UsersView(TableView):
    TITLE = "Users and pxt login sessions"
    COLUMNS: ClassVar[list[str]] = ["E-mail", "Orgs (role)", "Session", "Session org", "State", "Created", "Expires"]
    EMPTY = "nobody signed in yet (pxt login, or a person approving a claim)"

    def rows(self, model: Model) -> list[Row]:
        rows: list[Row] = []
        for u in model.users:
            if not u.sessions:
                none = Text("no session", style="dim")
                rows.append((f"{u.id}/", [u.email, memberships(u), none, "", "", "", ""]))
            for s in u.sessions:
                rows.append(
                    (
                        f"{u.id}/{s.id}",
                        [
                            u.email,
                            memberships(u),
                            s.id,
                            s.org or "—",
                            state_cell(s.state),
                            s.created_at,
                            f"revoked {s.revoked_at}" if s.revoked_at else s.expires_at,
                        ],
                    )
                )
        return rows

    def details(self, model: Model, key: str) -> list[tuple[str, str | Text]] | None:
        user_id = key.partition("/")[0]
        u = next((u for u in model.users if u.id == user_id), None)
        if u is None:
            return None
        fields: list[tuple[str, str | Text]] = [
            ("E-mail", u.email),
            ("User", u.id),
            ("Since", u.created_at),
            ("Orgs (role)", "\n".join(f"{m.org} ({m.role})" for m in u.orgs) or "—"),
        ]
        for s in u.sessions:
            lines = Text.assemble(
                state_cell(s.state),
                f" in {s.org or '—'}\ncreated {s.created_at}\nexpires {s.expires_at}",
                f"\nrevoked {s.revoked_at}" if s.revoked_at else "",
            )
            fields.append((f"Session {s.id}", lines))
        if not u.sessions:
            fields.append(("Sessions", Text("none (pxt login makes one)", style="dim")))
        return fields
