"""Project archives uploaded by `pxt db update`: stored by sha256 under `<state-dir>/blobs/`, the only SQL of
the `blobs` table, and the signed URLs they are uploaded and fetched through.

`prepare_update` offers `PUT {api_url}/blobs/<org_id>/<sha256>?sig=…` for a blob it does not hold;
`get_archive` hands out `GET {api_url}/blobs/<sha256>?exp=…&sig=…`, valid for an hour of emulator time.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import shutil
from pathlib import Path

from emulator.core.context import Core
from emulator.core.errors import FORBIDDEN
from emulator.core.payloads import CloudBlobStored
from emulator.core.private import private_key
from emulator.core.snapshots import copy_tree, copy_tree_async
from emulator.core.store import one, run

MAX_BLOB = 2 * 1024**3
URL_TTL = 3600


def is_sha(value: str) -> bool:
    return len(value) == 64 and all(c in "0123456789abcdef" for c in value)


class Blobs:
    def __init__(self, core: Core, root: Path, api_url: str) -> None:
        self.core = core
        self.root = root
        self.api_url = api_url
        root.mkdir(parents=True, exist_ok=True)
        self._key = private_key(core.settings.state_dir / "keys" / "blob-signing.key")

    async def reset(self) -> None:
        """Every uploaded archive gone (their rows go with the store's)."""
        await asyncio.to_thread(shutil.rmtree, self.root, True)
        self.root.mkdir(parents=True, exist_ok=True)

    def reload_key(self) -> None:
        """Sign with the key now in the state dir (a loaded snapshot brought its own)."""
        self._key = private_key(self.core.settings.state_dir / "keys" / "blob-signing.key")

    async def save_to(self, folder: Path) -> None:
        await copy_tree_async(self.root, folder / "files")

    async def load_from(self, folder: Path) -> None:
        """The archives a snapshot holds (after a reset emptied the folder)."""
        await asyncio.to_thread(shutil.rmtree, self.root, True)
        await asyncio.to_thread(copy_tree, folder / "files", self.root)

    def path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    async def has(self, org_id: str, sha256: str) -> bool:
        """Whether this organization uploaded this archive (another's upload of the same bytes does not count)."""
        row = await one(self.core.store, "SELECT 1 FROM blobs WHERE sha256 = ? AND org_id = ?", (sha256, org_id))
        return row is not None

    async def store(self, org_id: str, sha256: str, body: bytes) -> None:
        """Keep an uploaded archive (its hash already checked), then record it."""
        path = self.path(sha256)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".part")
        tmp.write_bytes(body)
        tmp.replace(path)
        await run(
            self.core.store,
            "INSERT OR IGNORE INTO blobs (sha256, org_id, size, created_at) VALUES (?, ?, ?, ?)",
            (sha256, org_id, len(body), self.core.clock.now()),
        )
        self.core.bus.publish(sha256[:12], CloudBlobStored(size=len(body), org_id=org_id))

    def _sign(self, *parts: str) -> str:
        return hmac.new(self._key, "\0".join(parts).encode(), hashlib.sha256).hexdigest()

    def upload_url(self, org_id: str, sha256: str) -> str:
        return f"{self.api_url}/blobs/{org_id}/{sha256}?sig={self._sign('put', org_id, sha256)}"

    def signed_url(self, sha256: str) -> str:
        exp = int(self.core.clock.now()) + URL_TTL
        return f"{self.api_url}/blobs/{sha256}?exp={exp}&sig={self._sign('get', sha256, str(exp))}"

    def check(self, sig: str, *parts: str) -> None:
        # bytes, not str: compare_digest refuses a str that is not ASCII (`?sig=%C3%A9` was a 500)
        if not hmac.compare_digest(sig.encode(), self._sign(*parts).encode()):
            raise FORBIDDEN("the signature of this URL is not valid")
