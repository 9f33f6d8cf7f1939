"""The box that keeps provider secrets' values (secrets.py): Fernet, its key in `<state-dir>/keys/`.

Apart from secrets.py so that `emulator up`'s key child (emulator/startkeys.py) imports no more than it needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from emulator.core.private import private_key

if TYPE_CHECKING:
    from cryptography.fernet import Fernet


class SecretBox:
    """Seals and opens with the state dir's key. Fernet (cryptography: 10 MiB resident, 40 ms to import) is made at
    the first secret: an emulator no one stores a secret in never maps it (`emulator up` has the key made and checked
    in a child process, emulator/startkeys.py)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fernet: Fernet | None = None

    @classmethod
    def of(cls, state_dir: Path) -> SecretBox:
        """The box of a key already made (`load_or_create`), read at its first use."""
        return cls(_key_path(state_dir))

    @classmethod
    def load_or_create(cls, state_dir: Path) -> SecretBox:
        """The box of the state dir's key, made the first time; the key is read (and so checked) now."""
        from cryptography.fernet import Fernet

        box = cls(_key_path(state_dir))
        box._fernet = Fernet(private_key(box._path, Fernet.generate_key))
        return box

    def _box(self) -> Fernet:
        if self._fernet is None:
            from cryptography.fernet import Fernet

            self._fernet = Fernet(self._path.read_bytes())
        return self._fernet

    def reload(self, state_dir: Path) -> None:
        """Use the key now in the state dir (a loaded snapshot brought its own)."""
        other = SecretBox.load_or_create(state_dir)
        self._path, self._fernet = other._path, other._fernet

    def seal(self, value: str) -> bytes:
        return self._box().encrypt(value.encode())

    def open(self, token: bytes) -> str:
        return self._box().decrypt(token).decode()


def _key_path(state_dir: Path) -> Path:
    return state_dir / "keys" / "secrets.fernet"
