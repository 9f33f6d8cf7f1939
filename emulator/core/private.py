"""The one writer of private files: signing keys, the CA's keys, the secret box's key.

A private file is written atomically with mode 0600 from its first byte, in a directory of mode 0700, so
a key is never readable by another user, not even for the moment between create and chmod.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path


def private_dir(path: Path) -> Path:
    """Create `path` (and its parents) if needed and make it 0700, whatever the umask or an earlier run left."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def write_private(path: Path, data: bytes) -> None:
    """Replace `path` with `data`, atomically, mode 0600 from the first byte on."""
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)  # O_CREAT's mode is masked by the umask; this is not
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def private_key(path: Path, make: Callable[[], bytes] = lambda: secrets.token_bytes(32)) -> bytes:
    """The key kept in `path`, made with `make` (32 random bytes by default) the first time."""
    if not path.is_file():
        write_private(path, make())
    os.chmod(path, 0o600)
    return path.read_bytes()
