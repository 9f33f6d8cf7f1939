"""One error type for every refusal; each surface renders it in the format its clients parse."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path


class ApiError(Exception):
    """A refusal with an HTTP status, a machine-readable code and a message a person can act on."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retryable = retryable
        self.headers = headers or {}


def disk_full(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is a full disk: the OS's ENOSPC or EDQUOT, or SQLite's "database or disk
    is full"."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(cause, sqlite3.OperationalError) and "disk is full" in str(cause):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def full_disk(state_dir: Path) -> ApiError:
    """The answer while the state dir's disk is full: 507, which names it; the write did not happen."""
    return ApiError(
        507,
        "insufficient_storage",
        f"the disk of the emulator's state dir ({state_dir}) is full, so nothing was changed; free some space and "
        "send the request again",
        retryable=True,
        headers={"Retry-After": "10"},
    )
