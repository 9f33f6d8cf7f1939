"""A Testcontainers module (testcontainers-python) for the emulator's image: `PxtEmulatorContainer`.

    from emulator.container.testcontainer import PxtEmulatorContainer

    with PxtEmulatorContainer() as emulator:          # started, and healthy
        os.environ.update(emulator.client_env())       # what `emulator env` prints, for a client on this machine
        kit = emulator.testkit()                       # the Testkit of the running container

Every origin listens in the container on the same port it is published on (127.0.0.1 only), so the URLs it hands out
(discovery documents, `api_url`, claim links, service URLs) are the ones a client here uses.

`reuse=True` keeps the container running when the `with` ends and gives it to the next session started with the same
configuration, as Testcontainers' reuse does: a label holds the digest of all that makes a container different (the
image's id, not its tag; the settings and environment; the mounts; the command; the name; the network and its
aliases). A stopped container of that configuration is removed with its volume and a new one started. End the kept
containers with `PxtEmulatorContainer.end_reused()` (or `docker rm -f -v $(docker ps -aq --filter
label=pxt-emulator.reuse)`). A start that fails removes what it made: the container, its volume, its state dir.

`docker_socket=True` mounts this machine's Docker socket (with `runtime="docker"`, hosted workloads as sibling
containers) and a state dir at the same path on this machine as in the container (`state_dir`, or a temporary one
removed at the stop), since the engine resolves the hosted containers' mounts here; `build_cache` mounts the per-user
cache of built hosted environments, so a database's first update needs no build (and no network).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict, cast

import docker.errors
import httpx
from docker.types import EndpointConfig
from testcontainers.core.container import DockerContainer

from emulator.admin.client import Locator
from emulator.core.freeports import free_ports
from emulator.testkit import Testkit

DEFAULT_IMAGE = "pxt-emulator:local"
ORIGINS = ("site", "auth", "api", "tunnel", "s3")
GATEWAYS = 4  # service gateways: one per hosted database that runs services
REUSE_LABEL = "pxt-emulator.reuse"
STATE = "/var/lib/pxt-emulator"
CACHE_IN_CONTAINER = "/root/.cache/pxt-emulator"  # where `build_cache` is mounted (its envs/)
HEALTHY_TIMEOUT = 120.0
STOP_TIMEOUT = 60  # seconds the emulator has to stop before the engine kills it


class _Config(TypedDict):
    """What a container is, for reuse (its digest's part that the constructor knows)."""

    image: str
    runtime: str
    docker_socket: bool
    build_cache: str | None
    state_dir: str | None
    settings: dict[str, str]
    admin_token: str  # its SHA-256


class _Networking(TypedDict, total=False):
    """docker-py's `containers.create` keywords for the container's network."""

    network: str
    networking_config: dict[str, EndpointConfig]


class PxtEmulatorContainer(DockerContainer):
    def __init__(
        self,
        image: str = DEFAULT_IMAGE,
        *,
        runtime: str = "process",
        docker_socket: bool = False,
        build_cache: Path | None = None,
        state_dir: Path | None = None,
        reuse: bool = False,
        admin_token: str | None = None,
        settings: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(image, **kwargs)
        self.reuse = reuse
        self.admin_token = admin_token
        self._reused = False
        # What the container is, for reuse (ports aside: a reused container keeps its own).
        self._config: _Config = {
            "image": image,
            "runtime": runtime,
            "docker_socket": docker_socket,
            "build_cache": str(build_cache) if build_cache else None,
            "state_dir": str(state_dir) if state_dir else None,
            "settings": dict(sorted((settings or {}).items())),
            "admin_token": hashlib.sha256((admin_token or "").encode()).hexdigest(),
        }
        self.with_env("EMULATOR_RUNTIME", runtime)
        for name, value in (settings or {}).items():
            self.with_env(f"EMULATOR_{name.upper()}", value)
        if admin_token:
            self.with_env("EMULATOR_ADMIN_TOKEN", admin_token)
        self.state_dir = state_dir  # on this machine, at the same path in the container (with the Docker socket)
        self._made_state_dir = False
        if docker_socket:
            self.with_volume_mapping("/var/run/docker.sock", "/var/run/docker.sock", "rw")
        if build_cache is not None:
            # This machine's cache, not the one the image keeps on its state volume.
            self.with_volume_mapping(str(build_cache), f"{CACHE_IN_CONTAINER}/envs", "rw")
            self.with_env("EMULATOR_BUILD_CACHE", CACHE_IN_CONTAINER)
        self.ports_of: dict[str, int] = {}

    def _digest(self, client: Any) -> str:
        """What makes this container different from another, for reuse: the image's id (a rebuild under the same tag
        is another image), the settings and environment, the mounts, the command, the name, the network and its
        aliases, any other keyword for the engine. Taken before the ports are chosen (a reused container keeps its
        own) and the state dir is made (`state_dir` is in the configuration)."""
        try:
            image_id = str(client.images.get(self.image).id)
        except docker.errors.ImageNotFound:
            image_id = self.image  # not here: the start says so
        what = {
            **self._config,
            "image": image_id,
            "env": dict(sorted(self.env.items())),
            "volumes": dict(sorted(self.volumes.items())),
            "command": self._command,
            "name": self._name,
            "network": self._network.name if self._network is not None else None,
            "aliases": self._network_aliases,
            "kwargs": self._kwargs,
        }
        return hashlib.sha256(json.dumps(what, sort_keys=True, default=repr).encode()).hexdigest()[:24]

    def _publish(self) -> None:
        """Each origin, and the gateways' range, on the same port inside and out: the URLs are right everywhere."""
        ports: dict[str, int] = dict(zip(ORIGINS, free_ports(len(ORIGINS)), strict=True))
        gateways = free_ports(GATEWAYS, contiguous=True)
        for origin, port in ports.items():
            self.with_env(f"EMULATOR_{origin.upper()}_PORT", str(port))
        for port in [*ports.values(), *gateways]:
            # docker-py's (address, port), which Testcontainers' with_bind_ports does not take: on loopback only.
            self.ports[f"{port}/tcp"] = cast(Any, ("127.0.0.1", port))
        self.with_env("EMULATOR_GATEWAY_PORTS", f"{gateways[0]}-{gateways[-1]}")
        self.ports_of.update(ports)

    def start(self) -> PxtEmulatorContainer:
        client = self.get_docker_client().client
        digest = ""
        if self.reuse:
            digest = self._digest(client)
            for found in client.containers.list(all=True, filters={"label": f"{REUSE_LABEL}={digest}"}):
                if found.status != "running":  # stopped (or dead): removed with its volume, not left beside a new one
                    _remove(found)
                    continue
                self._container = found
                env = dict(e.split("=", 1) for e in found.attrs["Config"]["Env"])
                self.ports_of.update({o: int(env[f"EMULATOR_{o.upper()}_PORT"]) for o in ORIGINS})
                self._reused = True
                self._wait_healthy()
                return self
        self._publish()
        self._share_state_dir()
        try:
            if self.reuse:
                self._start_kept(client, digest)
            else:
                super().start()
            self._wait_healthy()
        except BaseException:
            self._discard()
            raise
        return self

    def _start_kept(self, client: Any, digest: str) -> None:
        """A container to reuse, started as Testcontainers' start does but without its session's label (its reaper
        would remove the container when this session ends)."""
        self._configure()
        network: _Networking = {}
        if self._network is not None:
            network = {
                "network": self._network.name,
                "networking_config": {
                    self._network.name: EndpointConfig(client.api.api_version, aliases=self._network_aliases)
                },
            }
        labels = {**self._kwargs.get("labels", {}), REUSE_LABEL: digest}
        create: Any = client.containers.create  # docker-py's overloads do not cover every keyword
        made = create(
            self.image,
            command=self._command,
            environment=self.env,
            ports=self.ports,
            name=self._name,
            volumes={host: {"bind": m["bind"], "mode": m["mode"]} for host, m in self.volumes.items()},
            detach=True,
            **{**network, **self._kwargs, "labels": labels},
        )
        self._container = made  # before the start: a start that fails removes it
        made.start()

    def _discard(self) -> None:
        """After a start that failed: the container it made, its anonymous state volume and the state dir it made."""
        if self._container is not None and not self._reused:
            _remove(self._container)
            self._container = None
        if self._made_state_dir and self.state_dir is not None:
            shutil.rmtree(self.state_dir, ignore_errors=True)
            self._made_state_dir = False

    @classmethod
    def end_reused(cls) -> list[str]:
        """Stop and remove every container kept for reuse on this machine's engine (any configuration's), with its
        state volume; their names."""
        client = docker.from_env()
        try:
            found = client.containers.list(all=True, filters={"label": REUSE_LABEL})
            for container in found:
                with contextlib.suppress(docker.errors.DockerException):
                    container.stop(timeout=STOP_TIMEOUT)
                _remove(container)
            return [str(c.name) for c in found]
        finally:
            client.close()

    def _share_state_dir(self) -> None:
        """With the Docker socket: the state dir at the same path here and in the container, where the hosted
        containers' mounts (which this machine's engine resolves) are (emulator/runtime/sibling.py)."""
        if not self._config["docker_socket"]:
            return
        if self.state_dir is None:
            self.state_dir = Path(tempfile.mkdtemp(prefix="pxt-emu-"))  # short: Unix sockets are made under it
            self._made_state_dir = True
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = str(self.state_dir.resolve())
        self.with_volume_mapping(path, path, "rw").with_env("EMULATOR_STATE_DIR", path)

    def stop(self, force: bool = True, delete_volume: bool = True) -> None:
        """Stops the emulator as `docker stop` does (SIGTERM: it stops its workloads and exports on exit, when asked),
        then removes the container, its anonymous state volume and the state dir it made; a container to reuse is
        left running (with its state dir)."""
        if self.reuse:
            self.get_docker_client().client.close()
            return
        if self._container is not None:
            with contextlib.suppress(docker.errors.DockerException):
                self._container.stop(timeout=STOP_TIMEOUT)
        super().stop(force, delete_volume)
        if self._made_state_dir and self.state_dir is not None:
            shutil.rmtree(self.state_dir, ignore_errors=True)
            self._made_state_dir = False

    @property
    def reused(self) -> bool:
        """Whether `start` found a running container to reuse rather than starting one."""
        return self._reused

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports_of['site']}"

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + HEALTHY_TIMEOUT
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=2, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self._container is not None:
                self._container.reload()
                if self._container.status == "exited":
                    raise RuntimeError("the emulator's container exited:\n" + self._container.logs().decode()[-3000:])
            time.sleep(0.2)
        raise TimeoutError(f"the emulator's container did not answer /health within {HEALTHY_TIMEOUT:.0f} s")

    def client_env(self) -> dict[str, str]:
        """What `emulator env --url` prints for it: the variables that point a client on this machine at it."""
        with _token(self.admin_token):
            return Locator(url=self.url).endpoints().exports()

    def testkit(self) -> Testkit:
        with _token(self.admin_token):
            return Testkit.attach(self.url)


def _remove(container: Any) -> None:
    """A container and its anonymous volumes (the state dir's, unless a named volume is mounted there)."""
    with contextlib.suppress(docker.errors.NotFound):
        container.remove(force=True, v=True)


class _token:
    """EMULATOR_ADMIN_TOKEN for the calls made inside the `with` (the admin client reads it from there)."""

    def __init__(self, token: str | None) -> None:
        self.token, self.before = token, os.environ.get("EMULATOR_ADMIN_TOKEN")

    def __enter__(self) -> None:
        if self.token:
            os.environ["EMULATOR_ADMIN_TOKEN"] = self.token

    def __exit__(self, *_: object) -> None:
        if self.token:
            if self.before is None:
                os.environ.pop("EMULATOR_ADMIN_TOKEN", None)
            else:
                os.environ["EMULATOR_ADMIN_TOKEN"] = self.before
