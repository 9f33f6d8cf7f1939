"""A live table view: rows computed from the model, filtered by `/`, rebuilt in place on each change."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable

from tui.filter import RowFilter
from tui.model import Model

Cell = str | Text
Row = tuple[str, list[Cell]]

# How each state reads at a glance; anything else is shown plain.
STATE_STYLES = {
    "AVAILABLE": "green",
    "RUNNING": "green",
    "claimed": "green",
    "active": "green",
    "STOPPED": "yellow",
    "unclaimed": "yellow",
    "registered": "yellow",
    "pending": "yellow",
    "FAILED": "bold red",
    "deleted": "dim strike",
    "DELETED": "dim strike",
    "revoked": "dim strike",
    "expired": "dim",
    "on": "green",
    "off": "bold red",
}


def state_cell(state: str | None) -> Text:
    state = state or "—"
    return Text(state, style=STATE_STYLES.get(state, "cyan" if state.isupper() else ""))


class TableView(Vertical):
    """Subclasses name their columns and turn the model into rows keyed by a stable id."""

    TITLE: ClassVar[str] = ""
    COLUMNS: ClassVar[list[str]] = []
    EMPTY: ClassVar[str] = "nothing yet"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.filter = RowFilter()
        self.total = 0

    def compose(self) -> ComposeResult:
        table: DataTable[Cell] = DataTable(cursor_type="row", zebra_stripes=True)
        table.add_columns(*self.COLUMNS)
        yield table

    @property
    def table(self) -> DataTable[Cell]:
        return self.query_one(DataTable)

    def rows(self, model: Model) -> list[Row]:
        raise NotImplementedError

    def show(self, model: Model) -> None:
        rows = self.rows(model)
        self.total = len(rows)
        if self.filter:
            rows = [r for r in rows if self.filter.keeps(" ".join(str(c) for c in r[1]))]
        table = self.table
        keep = self.selected_key()
        table.clear()
        for key, cells in rows:
            table.add_row(*cells, key=key)
        if keep is not None and keep in {k for k, _ in rows}:
            table.move_cursor(row=table.get_row_index(keep), animate=False)
        count = f"{len(rows)} of {self.total}" if self.filter else str(self.total)
        self.border_title = f"{self.TITLE} ({count})"
        self.border_subtitle = f"filter {self.filter.describe()}" if self.filter else ("" if rows else self.EMPTY)

    def details(self, model: Model, key: str) -> list[tuple[str, str | Text]] | None:
        """Every field of the row `key`, for the detail pane (enter); None when the view has none."""
        return None

    def selected_key(self) -> str | None:
        table = self.table
        if table.row_count == 0:
            return None
        try:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except Exception:  # the cursor is past the rows while the table is rebuilt
            return None
        return key
