"""One emulator per state directory: a lock held for the emulator's whole life.

Two emulators on one state dir share one SQLite store, each runs its own due jobs against it, the second stops the
first's hosted databases and removes their sockets, and their journal writes collide. So `emulator up` takes an
exclusive `flock` on `<state-dir>/emulator.lock` before it touches anything else there, and keeps the descriptor
open until it exits. The kernel releases it when the process ends, however it ends (`kill -9` included), so a lock
is never stale. The file holds the holder's pid, to name it when a second start is refused.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

LOCK_NAME = "emulator.lock"


class StateDirInUse(RuntimeError):
    """Another emulator holds this state dir; the message names it and says what to do."""


class StateLock:
    def __init__(self, fd: int) -> None:
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor releases the lock; the file stays (its pid is stale then)
            self._fd = -1


def hold(state_dir: Path) -> StateLock:
    """Take the state dir's lock for this process, or raise `StateDirInUse` naming the emulator that has it."""
    path = state_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip()
        os.close(fd)
        raise StateDirInUse(_refusal(state_dir, holder)) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return StateLock(fd)


def holder(state_dir: Path) -> int | None:
    """The pid of the emulator that holds this state dir now, or None when none does (whatever endpoints.json says:
    an emulator killed with `kill -9` leaves that file behind, never the lock)."""
    try:
        fd = os.open(state_dir / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.read(fd, 64).decode(errors="replace").strip()
        return int(text) if text.isdigit() else 0
    finally:
        os.close(fd)  # a shared lock taken only to look is released with the descriptor
    return None


def _refusal(state_dir: Path, holder: str) -> str:
    who = f"pid {holder}" if holder.isdigit() else "another process"
    urls = ""
    try:
        endpoints = json.loads((state_dir / "endpoints.json").read_text())
        if str(endpoints.get("pid")) == holder:
            urls = f" (site {endpoints.get('site')}, api {endpoints.get('api')})"
    except (OSError, ValueError):
        pass
    return (
        f"{state_dir} is in use by the emulator running as {who}{urls}. Stop it with "
        f"`emulator down --state-dir {state_dir}`, or start this one with another --state-dir"
    )
