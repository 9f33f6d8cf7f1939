"""Identifiers and secrets. With a seed every value is reproducible (tests, snapshots)."""

from __future__ import annotations

import hashlib
import hmac
import random
import re
import secrets
from typing import Any

# A service key as WorkOS shapes a test environment's: `sk_test_` and an opaque tail (the emulator makes 48 hex digits).
# Here, below both the settings that may fix one and the identity provider that makes them.
SERVICE_KEY = re.compile(r"^sk_test_[A-Za-z0-9_]{16,128}$")

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


class Ids:
    def __init__(self, seed: int | None = None) -> None:
        self._seed = seed
        self._rng: random.Random | None = random.Random(seed) if seed is not None else None
        # Identifiers (not secrets) come from a fast generator seeded from the OS once: a uuid per
        # request must not cost a system call.
        self._fast = self._rng or random.Random(secrets.randbits(128))

    def state(self) -> list[Any] | None:
        """Where a seeded generator is in its sequence (for a snapshot), or None without a seed."""
        if self._rng is None:
            return None
        version, internal, gauss = self._rng.getstate()
        return [version, list(internal), gauss]

    def restore(self, state: list[Any] | None) -> None:
        """Continue a seeded sequence where a snapshot left it, so a loaded world never repeats its ids."""
        if self._rng is not None and state is not None:
            self._rng.setstate((state[0], tuple(state[1]), state[2]))

    def reseed(self) -> None:
        """Back to the start of the seeded sequence (a reset: the same test gets the same ids)."""
        if self._rng is not None:
            self._rng.seed(self._seed)

    def _bits(self, n: int) -> int:
        return self._rng.getrandbits(n) if self._rng else secrets.randbits(n)

    def uuid(self) -> str:
        """A random (version 4) UUID for identifiers; not for secrets. Formatted here: uuid.UUID's checks are most
        of the cost of one, and /ask makes one per call."""
        n = (self._fast.getrandbits(128) & ~(0xF000 << 64) & ~(0xC000 << 48)) | (0x4000 << 64) | (0x8000 << 48)
        h = f"{n:032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def token(self, prefix: str, nbytes: int = 24) -> str:
        """An opaque secret such as `pxtk_…`: URL-safe, prefixed so a reader knows what it is."""
        raw = self._bits(nbytes * 8).to_bytes(nbytes, "big")
        return prefix + raw.hex()

    def ident(self, prefix: str) -> str:
        """A sortable-looking public identifier such as `agent_reg_01K…` (26 Crockford base32 chars)."""
        n = self._fast.getrandbits(130)
        return prefix + "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in range(25, -1, -1))

    def digits(self, n: int) -> str:
        """A numeric secret such as a 6-digit user code."""
        return str(self._bits(64) % 10**n).zfill(n)

    def short(self, n: int = 6) -> str:
        """A short lowercase hex suffix for readable names."""
        return format(self._bits(n * 4), f"0{n}x")


def secret_hash(value: str) -> str:
    """How secrets are stored: only this hash is kept, never the value."""
    return hashlib.sha256(value.encode()).hexdigest()


def key_fingerprint(secret: str) -> str:
    """How a request names the API key it carried: the first 12 hex digits of the stored hash (sha256)."""
    return secret_hash(secret)[:12]


def secret_matches(value: str, stored_hash: str) -> bool:
    return hmac.compare_digest(secret_hash(value), stored_hash)
