"""The platform's switches (`/_emulator/switches`, `emulator switch`): each one on or off, and what turning it
off makes the emulator refuse. Space (or enter) flips the selected one."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from tui.model import Model
from tui.views.table import Row, TableView, state_cell

WHAT = {
    "anonymous_registration": "off: /agent/identity refuses type anonymous (403 anonymous_registration_disabled)",
    "service_auth_registration": "off: /agent/identity refuses type service_auth (403)",
    "trials_enabled": "off: new trials are refused (503: trials are not available on this host)",
    "cloud_reachable": "off: the cloud cannot be reached; new trials answer 503 (try again later)",
}


class SwitchesView(TableView):
    TITLE = "Switches"
    COLUMNS: ClassVar[list[str]] = ["Switch", "State", "When off"]
    EMPTY = "no switches"

    def rows(self, model: Model) -> list[Row]:
        return [
            (name, [name, state_cell("on" if on else "off"), Text(WHAT.get(name, ""), style="dim")])
            for name, on in model.switches.items()
        ]
