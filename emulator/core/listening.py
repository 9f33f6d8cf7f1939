"""Where this emulator listens, and whether an address and port lead back to it.

The emulator calls URLs it is told (webhook endpoints). One that leads back to one of its own sockets would let
whoever may add a webhook drive the emulator from inside (its operator API, past the boundary's token and Origin
rules, or a gateway). The composition root (emulator.server) knows every socket it bound and sets this value on
the core; a URL is checked by its spelling and by every address its host resolves to, when it is added and again
at each try (a name may resolve elsewhere by then).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

_IP = ipaddress.IPv4Address | ipaddress.IPv6Address
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")  # Linux connects 0.0.0.0 to this machine


def _none() -> Mapping[int, str]:
    return {}


def literal(host: str) -> _IP | None:
    """The address a host spells, in any form the system's resolver takes (`127.1`, `2130706433`, `0x7f000001`,
    `[::1]`), or None for a name."""
    name = host.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(name))
    except (OSError, ValueError):
        return None


def this_machine(ip: _IP) -> bool:
    """Whether a connection to `ip` stays on this machine: loopback (all of 127/8, ::1), unspecified, or an
    address of one of its interfaces (a UDP socket can bind it; a system that lets any address be bound says yes
    to all, which refuses too much, never too little)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback or ip.is_unspecified or (isinstance(ip, ipaddress.IPv4Address) and ip in _THIS_NETWORK):
        return True
    family = socket.AF_INET if ip.version == 4 else socket.AF_INET6
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.bind((str(ip), 0))
    except OSError:
        return False
    return True


def _name(host: str) -> str:
    return host.strip().lower().strip("[]").rstrip(".")


@dataclass(frozen=True)
class Listening:
    """Every port this emulator listens on, with what listens there, and the names it goes by. Empty (nothing
    known) where no server bound sockets (a core opened by a test alone)."""

    ports: Mapping[int, str] = field(default_factory=dict[int, str])  # each port → what listens there ("site", …)
    names: frozenset[str] = frozenset()  # its configured names (host, public_host, allowed_hosts), lower-case
    later: Callable[[], Mapping[int, str]] = _none  # ports opened since the start: the service gateways

    @classmethod
    def of(
        cls, ports: Mapping[int, str], names: Iterable[str], later: Callable[[], Mapping[int, str]] = _none
    ) -> Listening:
        return cls(dict(ports), frozenset(n for n in map(_name, names) if n), later)

    def what(self, port: int) -> str | None:
        return self.ports.get(port) or self.later().get(port)

    def refusal(self, host: str, port: int, addresses: Iterable[str] = ()) -> str | None:
        """Why `host:port` (resolved to `addresses`, if it was) is this emulator, or None when it is not: the port
        is one of its own and the host names this machine (a loopback name, one of its configured names, or an
        address that stays here)."""
        what = self.what(port)
        if what is None:
            return None
        name = _name(host)
        ip = literal(name)
        here = name == "localhost" or name.endswith(".localhost") or name in self.names
        here = here or (ip is not None and this_machine(ip))
        if not here:
            for a in addresses:
                found = literal(a)
                if found is not None and this_machine(found):
                    name = f"{name} ({found})"
                    here = True
                    break
        if not here:
            return None
        return (
            f"{name}:{port} is this emulator's own {what}; a webhook must lead to a receiver of yours, "
            "never back into the emulator"
        )


async def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to (a literal one at once), in the resolver's order; socket.gaierror when it
    does not. The lookup runs in a thread of its own (a daemon, which a stop never waits for): a slow resolver
    holds up only this caller, and cancelling it (a deadline) returns at once."""
    ip = literal(host)
    if ip is not None:
        return [str(ip)]
    loop = asyncio.get_running_loop()
    done: asyncio.Future[list[str]] = loop.create_future()

    def settle(result: list[str] | BaseException) -> None:
        if done.done():
            return
        if isinstance(result, BaseException):
            done.set_exception(result)
        else:
            done.set_result(result)

    def look_up() -> None:
        result: list[str] | BaseException
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            result = list(dict.fromkeys(str(info[4][0]) for info in infos))
        except Exception as e:  # gaierror, or a name the resolver cannot encode: the caller's to word
            result = e
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: no one waits any more
            loop.call_soon_threadsafe(settle, result)

    threading.Thread(target=look_up, name=f"resolve {host[:40]}", daemon=True).start()
    return await done
