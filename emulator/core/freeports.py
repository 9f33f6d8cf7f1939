"""Ports free on this machine's loopback, for what must know its ports before it starts: a container's published
ports, a sandboxed agent's forwarded ones. Free when asked: another process may take one before it is bound."""

from __future__ import annotations

import socket


def free_ports(count: int, contiguous: bool = False) -> list[int]:
    """Ports free on this machine's loopback now: `count` of them, or a run of `count` in a row."""
    if not contiguous:
        held = [socket.socket() for _ in range(count)]
        try:
            for s in held:
                s.bind(("127.0.0.1", 0))
            return [int(s.getsockname()[1]) for s in held]
        finally:
            for s in held:
                s.close()
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            first = int(s.getsockname()[1])
        if first + count > 65535:
            continue
        run = list(range(first, first + count))
        if all(_free(p) for p in run):
            return run
    raise RuntimeError(f"no {count} free ports in a row on 127.0.0.1")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
