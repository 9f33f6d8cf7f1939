"""Private sockets for hosted servers: one temporary directory of mode 0700 per emulator run.

A hosted server (the database's `proxy_daemon`, a service's `pod_runner`) listens on a Unix socket in it rather
than on a TCP port, so only the emulator (through the tunnel and the gateways, which check credentials) reaches
it: no other local program, no web page, no other organization's workload. `listen_private.py` is what moves
the unmodified server there; launchers run it with `LISTEN_PRIVATE`.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from pathlib import Path

# The source of listen_private.py, run by the environment's own Python (`python -c`).
LISTEN_PRIVATE = (Path(__file__).parent / "listen_private.py").read_text()
_PREFIX = "pxt-emulator-"  # a short path in the temp dir: a Unix socket's path is limited to 107 bytes


class SocketDir:
    def __init__(self, record: Path, parent: Path | None = None) -> None:
        self._record = record  # names the directory, so that the start after a killed emulator removes it
        # Where it is made: the temp dir, or (an emulator in a container, whose hosted containers' mounts the host's
        # engine resolves) a directory at the same path on the host.
        self._parent = parent
        self.root = Path()

    def open(self) -> None:
        self.close()
        if self._parent is not None:
            self._parent.mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix=_PREFIX, dir=self._parent))  # 0700: this user's alone
        self._record.parent.mkdir(parents=True, exist_ok=True)
        self._record.write_text(str(self.root))

    def new(self) -> Path:
        """A fresh directory of its own for one workload's socket (a container mounts it, and nothing else)."""
        path = self.root / secrets.token_hex(6)
        path.mkdir(mode=0o700)
        return path

    def close(self) -> None:
        try:
            old = Path(self._record.read_text().strip())
        except OSError:
            return
        if old.parent == (self._parent or Path(tempfile.gettempdir())) and old.name.startswith(_PREFIX):
            shutil.rmtree(old, ignore_errors=True)
        self._record.unlink(missing_ok=True)
