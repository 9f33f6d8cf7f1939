"""How a sandboxed agent reaches its trial's emulator, and only it: the sandbox has a network of its own (loopback
alone), so each of the emulator's client-facing ports is relayed in. Inside, a listener on 127.0.0.1 (and ::1) at the
same port as outside, so that `emulator env`'s URLs hold unchanged; across, a Unix socket per port in a directory
bound into the sandbox (a Unix socket crosses network namespaces, a TCP port does not); outside, the harness's relay
connects each to the emulator from AGENT_ADDRESS, the loopback address the trial's journal then names every request
of the agent's by.

`python -m emulator.eval.relay DIR PORTS -- COMMAND...` is the inside half: it listens, runs the agent's command and
exits with its status; the sandbox's init ends whatever the command left behind. It imports nothing of the emulator
but this module: it starts once per trial, inside."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

AGENT_ADDRESS = "127.0.0.2"  # the source address of every connection the agent makes (127.0.0.0/8 is loopback)
CHUNK = 65536


def pump(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until both sides have ended, each end's close passed on as a half-close."""

    def one_way(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(CHUNK):
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    back = threading.Thread(target=one_way, args=(b, a), daemon=True)
    back.start()
    one_way(a, b)
    back.join()
    a.close()
    b.close()


def _serve(listener: socket.socket, connect: Callable[[], socket.socket], live: set[socket.socket]) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:  # closed: the relay is ending
            return
        try:
            out = connect()
        except OSError:
            conn.close()
            continue
        live.update((conn, out))
        threading.Thread(target=_pumped, args=(conn, out, live), daemon=True).start()


def _pumped(a: socket.socket, b: socket.socket, live: set[socket.socket]) -> None:
    try:
        pump(a, b)
    finally:
        live.difference_update((a, b))


class HostRelay:
    """The outside half: a Unix socket per port in `folder`, each connection relayed to the emulator's port on
    127.0.0.1 from AGENT_ADDRESS. `close` ends the listeners and every connection still open."""

    def __init__(self, folder: Path, ports: list[int]) -> None:
        self.folder = folder
        folder.mkdir(mode=0o700, exist_ok=True)
        self._listeners: list[socket.socket] = []
        self._live: set[socket.socket] = set()
        for port in ports:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(folder / str(port)))
            listener.listen(128)
            self._listeners.append(listener)
            threading.Thread(target=_serve, args=(listener, _dialer(port), self._live), daemon=True).start()

    def close(self) -> None:
        for listener in self._listeners:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for conn in list(self._live):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()


def _dialer(port: int) -> Callable[[], socket.socket]:
    def connect() -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((AGENT_ADDRESS, 0))
            s.connect(("127.0.0.1", port))
        except OSError:
            s.close()
            raise
        return s

    return connect


def _inside(folder: str, ports: list[int]) -> None:
    """The inside half's listeners, each connection relayed to its port's Unix socket in `folder`."""
    for port in ports:

        def connect(port: int = port) -> socket.socket:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(os.path.join(folder, str(port)))
            except OSError:
                s.close()
                raise
            return s

        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            listener = socket.socket(family, socket.SOCK_STREAM)
            try:
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                listener.bind((host, port))
                listener.listen(128)
            except OSError:  # no IPv6 in the sandbox's loopback: IPv4 alone
                listener.close()
                if family == socket.AF_INET:
                    raise
                continue
            threading.Thread(target=_serve, args=(listener, connect, set()), daemon=True).start()


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m emulator.eval.relay DIR PORT,PORT,... -- COMMAND...", file=sys.stderr)
        return 2
    _inside(argv[0], [int(p) for p in argv[1].split(",") if p])
    agent = subprocess.Popen(argv[3:], start_new_session=True)

    def stop(signum: int, _: object) -> None:  # the harness's "time is up": the agent's whole group hears it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent.pid, signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = agent.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
