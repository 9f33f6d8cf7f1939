"""The emulator in a container of the engine whose socket it holds (`-v /var/run/docker.sock:/var/run/docker.sock`):
its hosted containers are then its siblings, made by the host's engine, as LocalStack's Lambda containers are.

Two things differ from an emulator on the host, and both are settled here, explicitly:
- the engine resolves bind mounts on the host, so every directory the launcher mounts must be at the same path on
  the host as in this container: the state dir is bind-mounted at its own path (`-v /p:/p -e EMULATOR_STATE_DIR=/p`),
  and everything mounted lives under it (checked at start: anything else is refused, not guessed);
- what must happen on the host itself (the egress rule in its iptables) is done by a helper container of this
  emulator's image, in the host's namespaces with the capabilities that takes, while it is done (`HostHelper`).

Being such a container is not guessed from `/.dockerenv` (a machine that runs its own engine inside a container has
one too): this container's id is read from its mounts and the engine is asked whether it is one of its containers.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from emulator.runtime.engine import ContainerInfo, Engine, EngineError

# The engine bind-mounts each container's /etc/hostname from its own directory, named by the container's id.
_ID_IN_MOUNTS = re.compile(r"/containers/([0-9a-f]{64})/hostname\s+/etc/hostname\s")


class SiblingError(RuntimeError):
    """The emulator is a container of its engine, but not set up so that its hosted containers can work."""


@dataclass(frozen=True)
class Sibling:
    """This emulator's container, as the engine describes it."""

    container: str  # its id
    image: str  # its image's id: the host helper runs it (present on the engine, with nsenter)
    state_dir: Path  # bind-mounted at the same path on the host


def own_container_id(mountinfo: Path = Path("/proc/self/mountinfo")) -> str | None:
    """This process's container id, as its engine named it; None outside a container (or in one made otherwise)."""
    try:
        found = _ID_IN_MOUNTS.search(mountinfo.read_text())
    except OSError:
        return None
    return found[1] if found else None


def detect(engine: Engine, state_dir: Path, ident: str | None = None) -> Sibling | None:
    """The emulator's container when the engine runs it (None when the engine does not know this process: on the host,
    or in a container of another engine); SiblingError when it does but the state dir is not at its own path on the
    host, where the engine would resolve the database directories the launcher mounts."""
    ident = ident if ident is not None else own_container_id()
    if ident is None:
        return None
    try:
        info: ContainerInfo = engine.call("GET", f"/containers/{quote(ident, safe='')}/json")
    except EngineError as e:
        if e.status == 404:
            return None
        raise
    if not str(info.get("Id", "")).startswith(ident):
        return None
    state = state_dir.resolve()
    for mount in info.get("Mounts") or []:
        if mount.get("Type") != "bind" or not mount.get("RW", True):
            continue
        source, destination = Path(mount.get("Source", "")), Path(mount.get("Destination", ""))
        if source == destination and (state == destination or destination in state.parents):
            return Sibling(container=str(info["Id"]), image=str(info.get("Image", "")), state_dir=state)
    raise SiblingError(
        f"the emulator runs in container {ident[:12]} of the Docker engine it starts hosted containers on, whose bind "
        f"mounts are resolved on the host: its state dir {state} must be a bind mount of the same path on the host "
        f"(docker run -v {state}:{state} -e EMULATOR_STATE_DIR={state} ...), or use --runtime process"
    )


# The capabilities `nsenter` into the engine's namespaces and iptables there take (not --privileged, which an engine
# without every capability itself cannot grant).
HOST_CAPS = ["SYS_ADMIN", "SYS_PTRACE", "SYS_CHROOT", "NET_ADMIN", "NET_RAW"]
# The helper's first process notes its parent, the engine's shim: its namespaces are those the engine works in (the
# host's PID 1 may be out of reach, e.g. when the engine itself runs in a container).
_HELPER_INIT = 'echo "$PPID" > /tmp/engine-pid && exec sleep infinity'
_IN_ENGINE = 'exec nsenter -t "$(cat /tmp/engine-pid)" -m -n -- "$@"'


class HostHelper:
    """A container of the emulator's image in the host's PID and network namespaces that runs commands in the
    engine's mount and network namespaces for the emulator: what the emulator on the host would run itself. It
    carries the emulator's labels, so that one left by an emulator that died goes with its leftovers."""

    def __init__(self, client: Any, sibling: Sibling, name: str, labels: dict[str, str]) -> None:
        self.client = client
        self.sibling = sibling
        self.name = name
        self.labels = labels
        self.container: Any = None

    def open(self) -> None:
        self.container = self.client.containers.run(
            self.sibling.image,
            ["-c", _HELPER_INIT],
            entrypoint=["sh"],
            name=self.name,
            detach=True,
            cap_add=HOST_CAPS,
            pid_mode="host",
            network_mode="host",
            labels=self.labels,
        )

    def run(self, argv: list[str]) -> tuple[int, str]:
        """`argv` in the engine's mount and network namespaces (the host's own programs, as it runs them): the exit
        status and the output."""
        assert self.container is not None, "the host helper is not open"
        code, out = self.container.exec_run(["sh", "-c", _IN_ENGINE, "in-engine", *argv])
        return int(code if code is not None else -1), (out or b"").decode(errors="replace")

    def close(self) -> None:
        import docker.errors

        if self.container is not None:
            with contextlib.suppress(docker.errors.DockerException):
                self.container.remove(force=True, v=True)  # and the anonymous volume the image declares
            self.container = None
