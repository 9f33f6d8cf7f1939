"""What every control-plane operation shares."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from emulator.cloud.auth import Caller
from emulator.core.context import Core
from emulator.idp.identity import Urls
from emulator.idp.keys import Signer


@dataclass
class Cloud:
    core: Core
    signer: Signer
    urls: Urls
    # set by the server once the runtime exists (the hosted databases' processes)
    runtime: Any = None
    secret_box: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


Operation = Callable[[Cloud, Caller, dict[str, Any]], Awaitable[dict[str, Any]]]
