"""What every control-plane operation shares."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from emulator.cloud.auth import Caller
from emulator.core.context import Core
from emulator.idp.identity import Urls
from emulator.idp.keys import Signer

if TYPE_CHECKING:
    from emulator.cloud.media import MediaStore


@dataclass
class Cloud:
    core: Core
    signer: Signer
    urls: Urls
    secret_box: Any = None  # emulator.cloud.secrets.SecretBox
    blobs: Any = None  # emulator.cloud.blobs.Blobs
    media: MediaStore | None = None  # the home buckets' S3 endpoint
    # set by the server once the runtime exists (the hosted databases' processes)
    runtime: Any = None


Operation = Callable[[Cloud, Caller, dict[str, Any]], Awaitable[dict[str, Any]]]
