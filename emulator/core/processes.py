"""Processes of this machine, by pid."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether a process with this pid exists (another user's included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running(pid: int) -> bool:
    """Whether the process runs: a zombie (exited, its parent gone, not yet reaped by init) does not."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat.rsplit(b")", 1)[1].split()[0] != b"Z"


def group_alive(pgid: int) -> bool:
    """Whether any process of this process group still exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def with_argument(argument: str) -> list[int]:
    """This user's processes one of whose arguments is `argument` exactly (Linux's /proc only; elsewhere none)."""
    return _holding("cmdline", argument.encode())


def marked(name: str, value: str) -> list[int]:
    """This user's processes whose environment holds `name=value`, in any session: what a command started and
    detached (a client's daemon, the database it runs) still carries the variable it was given. Linux's /proc
    only; elsewhere none are found."""
    return _holding("environ", f"{name}={value}".encode())


def _holding(part: str, entry: bytes) -> list[int]:
    """The processes whose /proc/PID/`part` (NUL-separated: cmdline, environ) has `entry` as one of its items."""
    found: list[int] = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/{part}", "rb") as f:
                if entry in f.read().split(b"\0"):
                    found.append(pid)
        except OSError:  # gone, or another user's
            continue
    return found
