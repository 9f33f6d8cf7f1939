"""API keys by organization and name, never their secret (only a hash of it is stored): type, grants, when
made and by whom, last used (its newest control-plane call in the journal), and revoked (deleted) ones."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from emulator.admin.wire import KeyView
from tui.model import Model
from tui.views.table import Row, TableView, state_cell


class KeysView(TableView):
    TITLE = "API keys (never their secrets)"
    COLUMNS: ClassVar[list[str]] = ["Org", "Name", "State", "Type", "Created", "Last used", "Created by", "Grants"]
    EMPTY = "no API keys (a trial comes with one; pxt key create makes more)"

    @staticmethod
    def key_of(k: KeyView) -> str:
        return f"{k.org}/{k.name}" + (f"@{k.revoked_at}" if k.revoked_at else "")

    def rows(self, model: Model) -> list[Row]:
        rows: list[Row] = []
        for k in model.keys:
            revoked = k.revoked_at
            state = state_cell("revoked") if revoked else state_cell("active")
            dim = "dim" if revoked else ""
            rows.append(
                (
                    self.key_of(k),
                    [
                        k.org,
                        Text(k.name, style=dim),
                        Text.assemble(state, f" {revoked}" if revoked else ""),
                        k.key_type or "—",
                        k.created_at or "—",
                        k.last_used_at or Text("never", style="dim"),
                        k.created_by or "—",
                        " ".join(k.grants) or ("—" if revoked else "all its creator's"),
                    ],
                )
            )
        return rows

    def details(self, model: Model, key: str) -> list[tuple[str, str | Text]] | None:
        k = next((k for k in model.keys if self.key_of(k) == key), None)
        if k is None:
            return None
        return [
            ("Org", k.org),
            ("Name", k.name),
            ("State", state_cell("revoked") if k.revoked_at else state_cell("active")),
            ("Revoked at", k.revoked_at or "—"),
            ("Type", k.key_type or "—"),
            ("Grants", "\n".join(k.grants) or "none: it acts as its creator"),
            ("Created", k.created_at or "—"),
            ("Created by", k.created_by or "—"),
            ("Last used", k.last_used_at or "never (no control-plane call in the journal)"),
            ("Secret", Text("shown once, when the key was made; only its hash is stored", style="dim")),
        ]
