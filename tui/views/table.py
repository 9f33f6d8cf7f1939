"""A live table view: rows computed from the model, filtered by `/`, rebuilt in place on each change.

Narrow (a pane under NARROW columns, an 80-column terminal), a view puts the columns a person looks for first
(NARROW_FIRST) and writes long ids by their distinguishing tail (ID_COLUMNS), so they do not push the rest off
screen; the detail pane (enter) still shows every id whole, and the filter still matches it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.events import Resize
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


# Below this many columns a table view is narrow.
NARROW = 120


def short_id(ident: str) -> str:
    """A long generated id by its kind and distinguishing tail: `agent_reg_DXTS0FP1K73B8HS01HFYHV2YCX` reads
    `reg_…FYHV2YCX` (the shared prefix tells rows apart no better than the tail does)."""
    head, _, body = ident.rpartition("_")
    if not head or len(body) <= 12 or not body.isalnum():  # not a generated id: a name, "(unattributed)"
        return ident
    kind = head.rpartition("_")[2]
    return f"{kind}_…{body[-8:]}" if kind else f"…{body[-8:]}"


def squeezed(cell: Cell) -> Cell:
    if isinstance(cell, Text):
        short = short_id(cell.plain)
        return cell if short == cell.plain else Text(short, style=cell.style)
    return short_id(cell)


def state_cell(state: str | None) -> Text:
    state = state or "—"
    return Text(state, style=STATE_STYLES.get(state, "cyan" if state.isupper() else ""))


class TableView(Vertical):
    """Subclasses name their columns and turn the model into rows keyed by a stable id."""

    TITLE: ClassVar[str] = ""
    COLUMNS: ClassVar[list[str]] = []
    EMPTY: ClassVar[str] = "nothing yet"
    NARROW_FIRST: ClassVar[list[str]] = []  # narrow: these columns first, in this order, then the others
    ID_COLUMNS: ClassVar[frozenset[str]] = frozenset()  # narrow: columns of long ids, written by their tail

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.filter = RowFilter()
        self.total = 0
        self.narrow = False
        self._model: Model | None = None  # the last one shown, to show again when the width changes

    def compose(self) -> ComposeResult:
        table: DataTable[Cell] = DataTable(cursor_type="row", zebra_stripes=True)
        table.add_columns(*self.COLUMNS)
        yield table

    def order(self) -> list[int]:
        """The columns' order on screen, as indexes into COLUMNS."""
        if not self.narrow or not self.NARROW_FIRST:
            return list(range(len(self.COLUMNS)))
        first = [self.COLUMNS.index(c) for c in self.NARROW_FIRST]
        return first + [i for i in range(len(self.COLUMNS)) if i not in first]

    def on_resize(self, event: Resize) -> None:
        narrow = 0 < event.size.width < NARROW
        if narrow != self.narrow:
            self.narrow = narrow
            table = self.table
            table.clear(columns=True)
            table.add_columns(*(self.COLUMNS[i] for i in self.order()))
            if self._model is not None:
                self.show(self._model)

    @property
    def table(self) -> DataTable[Cell]:
        return self.query_one(DataTable)

    def rows(self, model: Model) -> list[Row]:
        raise NotImplementedError

    def show(self, model: Model) -> None:
        self._model = model
        rows = self.rows(model)
        self.total = len(rows)
        if self.filter:  # on the whole cells: a narrow table's short ids still match by any part
            rows = [r for r in rows if self.filter.keeps(" ".join(str(c) for c in r[1]))]
        table = self.table
        keep = self.selected_key()
        table.clear()
        order = self.order()
        ids = {self.COLUMNS.index(c) for c in self.ID_COLUMNS} if self.narrow else set()
        for key, cells in rows:
            table.add_row(*(squeezed(cells[i]) if i in ids else cells[i] for i in order), key=key)
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
