"""Runtime switches: the product's refusals that depend on the platform's state, not the request.

Each starts from its setting and can be flipped while the emulator runs (`/_emulator/switches`,
`emulator switch`), so an agent can be shown "registration disabled" or "cloud unreachable".
"""

from __future__ import annotations

import msgspec

from emulator.config import Settings
from emulator.core.errors import BAD_REQUEST
from emulator.core.events import EventBus
from emulator.core.payloads import SwitchChanged

SWITCHES = (
    "anonymous_registration",
    "service_auth_registration",
    "identity_assertion_registration",
    "trials_enabled",
    "cloud_reachable",
)
# The switches whose default is off (ID-JAG registration), as the settings' defaults say.
OFF_AT_FIRST = frozenset(f.name for f in msgspec.structs.fields(Settings) if f.name in SWITCHES and f.default is False)


class Switches:
    def __init__(self, settings: Settings, bus: EventBus) -> None:
        self._bus = bus
        self._settings = settings
        self._values = {name: bool(getattr(settings, name)) for name in SWITCHES}

    def reset(self) -> None:
        """Back to the values the emulator was started with."""
        self._values = {name: bool(getattr(self._settings, name)) for name in SWITCHES}

    def restore(self, saved: dict[str, bool]) -> None:
        """The values a snapshot saved (a switch it does not name keeps its start value)."""
        self.reset()
        self._values.update({k: bool(v) for k, v in saved.items() if k in self._values})

    def __getitem__(self, name: str) -> bool:
        return self._values[name]

    def set(self, name: str, value: bool) -> None:
        if name not in self._values:
            raise BAD_REQUEST(f"no switch {name!r}; switches: {', '.join(SWITCHES)}")
        if self._values[name] != value:
            self._values[name] = value
            self._bus.publish(name, SwitchChanged(value=value))

    def snapshot(self) -> dict[str, bool]:
        return dict(self._values)
