"""Snapshots of the emulator (`/_emulator/snapshots`, `emulator snapshot list`): when each was saved, the clock it
holds, its size and what is in it. `n` saves one, `L` loads the selected one, `x` deletes it."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from emulator.core.snapshots import SnapshotView
from tui.model import Model
from tui.views.table import Row, TableView


def size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def contents(s: SnapshotView) -> str:
    return ", ".join(f"{v} {k}" for k, v in s.counts.items() if v) or "empty"


class SnapshotsView(TableView):
    TITLE = "Snapshots"
    COLUMNS: ClassVar[list[str]] = ["Name", "Saved", "Clock", "Size", "Holds"]
    EMPTY = "no snapshots yet (n saves one; emulator snapshot save NAME)"

    def rows(self, model: Model) -> list[Row]:
        return [(s.name, [s.name, s.created_at, s.clock, size(s.size_bytes), contents(s)]) for s in model.snapshots]

    def details(self, model: Model, key: str) -> list[tuple[str, str | Text]] | None:
        s = next((s for s in model.snapshots if s.name == key), None)
        if s is None:
            return None
        counts = "\n".join(f"{k}: {v}" for k, v in s.counts.items()) or "—"
        return [
            ("Name", s.name),
            ("Saved", s.created_at),
            ("Clock", s.clock),
            ("Emulator", s.emulator),
            ("Size", size(s.size_bytes)),
            ("Holds", counts),
            ("Load", Text(f"emulator snapshot load {s.name}", style="dim")),
        ]
