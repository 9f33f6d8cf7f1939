"""The hosted containers' network and its egress rule: outbound TCP to ports 80, 443 and 5432 only.

The containers join one Docker bridge network of the emulator's, with a bridge name of its own so that
iptables can tell its traffic apart. Docker sends forwarded traffic through the DOCKER-USER chain first;
there, everything the bridge forwards (to the internet, to other networks, and between its own containers)
jumps to PXT-EMULATOR-EGRESS: replies to accepted connections pass, new TCP connections to 80/443/5432
pass, the rest is refused at once (a TCP reset, not a silent drop, so a blocked call fails fast and
plainly). The gateway and the emulator's relays on the gateway address are not forwarded traffic, so the
containers still reach the control plane and the media store.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import shutil
import stat
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

from emulator.runtime.engine import Created, Engine, Network

log = logging.getLogger("emulator.runtime.egress")

CHAIN = "PXT-EMULATOR-EGRESS"
ALLOWED_PORTS = (80, 443, 5432)
BRIDGE = "pxt-emu0"
# How a command is run where the engine's iptables are (argv → exit status, output): here, or on the host when the
# emulator is a container (sibling.py's host helper).
Run = Callable[[list[str]], Awaitable[tuple[int, str]]]
NOT_FOUND = 127  # a shell's (and nsenter's) status for a program that is not there


class EgressError(RuntimeError):
    pass


def ensure_network(engine: Engine, name: str, bridge: str = BRIDGE) -> tuple[Network, str]:
    """The emulator's network (made on first use), as the engine describes it, and its gateway address."""
    with _host_lock():  # two emulators starting at once must not both create it (same bridge name)
        found: list[Network] = engine.call("GET", "/networks", {"filters": json.dumps({"name": [name]})}) or []
        ident = next((n["Id"] for n in found if n.get("Name") == name), None)
        if ident is None:
            made: Created = engine.call(
                "POST",
                "/networks/create",
                body={
                    "Name": name,
                    "Driver": "bridge",
                    "Options": {"com.docker.network.bridge.name": bridge},
                    "Labels": {"pxt-emulator": "network"},
                    "CheckDuplicate": True,  # engines before API 1.44 would otherwise make a second one of that name
                },
            )
            ident = made["Id"]
    network: Network = engine.call("GET", f"/networks/{ident}")
    configs = network.get("IPAM", {}).get("Config") or []
    gateway = next((c.get("Gateway") for c in configs if c.get("Gateway")), None)
    if not gateway:
        raise EgressError(f"the Docker network {name} has no gateway address")
    return network, gateway


def bridge_of(network: Network) -> str:
    options = network.get("Options") or {}
    return options.get("com.docker.network.bridge.name") or "br-" + network["Id"][:12]


async def run_here(argv: list[str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode(errors="replace")


async def _iptables(run: Run, *args: str, check: bool = True) -> int:
    code, out = await run(["iptables", "-w", *args])
    if code == NOT_FOUND:
        raise EgressError("iptables is not installed where the Docker engine runs")
    if check and code != 0:
        raise EgressError(f"iptables {' '.join(args)}: {out.strip()}")
    return code


async def install(bridge: str, run: Run | None = None) -> None:
    """Install (or refresh) the rule; safe to run again and from several emulators at once (a host-wide lock).
    `run`: where iptables runs (default: here)."""
    if run is None:
        if shutil.which("iptables") is None:
            raise EgressError("iptables is not installed")
        run = run_here
    async with _host_lock_async():
        await _install(bridge, run)


_LOCK_WAIT = 60.0  # s: longer than any network creation or rule install takes


def _open_lock() -> int | None:
    """The host's lock file, in a directory only this user can write (root's in /run): a lock file in a
    world-writable directory could be made and held by anyone. None when there is none to be had."""
    home = os.path.join(os.path.expanduser("~"), ".cache", "pxt-emulator")
    folder = "/run/pxt-emulator" if os.geteuid() == 0 else home
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            log.warning("not locking the Docker network's setup: %s is not a private directory", folder)
            return None
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        return os.open(os.path.join(folder, "egress.lock"), flags, 0o600)
    except OSError as e:
        log.warning("not locking the Docker network's setup: %s", e)
        return None


def _pauses(fd: int | None) -> Iterator[float]:
    """How long to sleep, again and again, until this process holds the lock (none: at once, or without a lock
    file); after a minute it goes on as if there were no lock."""
    deadline = time.monotonic() + _LOCK_WAIT
    while fd is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                log.warning("another emulator has held the Docker network's lock for over %d s; going on", _LOCK_WAIT)
                return
            yield 0.05


@contextlib.contextmanager
def _lock_fd() -> Iterator[int | None]:
    fd = _open_lock()
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)  # closing releases the lock


@contextlib.contextmanager
def _host_lock() -> Iterator[None]:
    """One emulator at a time on this host changes the network or the rule: two that both find the chain empty
    would both refill it, and their rules interleave (a REJECT before a RETURN)."""
    with _lock_fd() as fd:
        for pause in _pauses(fd):
            time.sleep(pause)
        yield


@contextlib.asynccontextmanager
async def _host_lock_async() -> AsyncIterator[None]:
    with _lock_fd() as fd:
        for pause in _pauses(fd):
            await asyncio.sleep(pause)
        yield


async def _install(bridge: str, run: Run) -> None:
    if await _iptables(run, "-n", "-L", "DOCKER-USER", check=False) != 0:
        raise EgressError("the DOCKER-USER chain is missing (is the Docker engine managing iptables?)")
    ports = ",".join(str(p) for p in ALLOWED_PORTS)
    rules = [
        ("-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "RETURN"),
        ("-p", "tcp", "-m", "multiport", "--dports", ports, "-j", "RETURN"),
        ("-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"),
        ("-j", "REJECT", "--reject-with", "icmp-port-unreachable"),
    ]
    if await _iptables(run, "-n", "-L", CHAIN, check=False) != 0:
        await _iptables(run, "-N", CHAIN, check=False)  # another emulator may create it at the same moment
    present = [await _iptables(run, "-C", CHAIN, *rule, check=False) == 0 for rule in rules]
    if not all(present):  # refill only when it differs: a flush would open the gate for a moment
        await _iptables(run, "-F", CHAIN)
        for rule in rules:
            await _iptables(run, "-A", CHAIN, *rule)
    jump = ("DOCKER-USER", "-i", bridge, "-j", CHAIN)
    if await _iptables(run, "-C", *jump, check=False) != 0:
        await _iptables(run, "-I", *jump)
