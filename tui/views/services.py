"""Hosted services and their endpoints (the database gateway's address while it runs). Enter shows every field
of the selected service."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from emulator.admin.wire import ServiceView
from tui.model import Model
from tui.views.table import Row, TableView, state_cell


class ServicesView(TableView):
    TITLE = "Services"
    COLUMNS: ClassVar[list[str]] = ["Org", "Database", "Service", "State", "Gen", "Endpoint", "Error"]
    EMPTY = "no services (pxt service update deploys one)"

    @staticmethod
    def key_of(s: ServiceView) -> str:
        return f"{s.org}:{s.db}/{s.base_path}/{s.service}"

    def rows(self, model: Model) -> list[Row]:
        return [
            (
                self.key_of(s),
                [
                    s.org,
                    s.db,
                    f"{s.base_path}/{s.service}" if s.base_path else s.service,
                    state_cell(s.state),
                    str(s.generation),
                    s.endpoint or "—",
                    Text(s.error or "", style="red"),
                ],
            )
            for s in model.services
        ]

    def details(self, model: Model, key: str) -> list[tuple[str, str | Text]] | None:
        s = next((s for s in model.services if self.key_of(s) == key), None)
        if s is None:
            return None
        return [
            ("Org", s.org),
            ("Database", s.db),
            ("Service", s.service),
            ("Base path", s.base_path or "—"),
            ("State", state_cell(s.state)),
            ("Generation", str(s.generation)),
            ("Endpoint", s.endpoint or "—"),
            ("Error", Text(s.error or "—", style="red" if s.error else "")),
            ("Updated", s.updated_at),
        ]
