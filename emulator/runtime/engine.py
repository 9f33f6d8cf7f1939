"""The Docker engine's HTTP API, for what `emulator up` asks it at start: does it answer, which base image is here,
this state dir's leftover containers, the emulator's network (containers.py, egress.py, choose.py).

Over the engine's Unix socket (the default, and what scripts/setup-docker.sh sets up) with the standard library:
docker-py with requests and urllib3 is 7 MiB resident and 40 ms to import, which an emulator that never starts a
database in a container should not carry; containers.py's `LazyClient` imports it at the first workload. An engine that
DOCKER_HOST names otherwise (TCP, SSH, TLS) is reached through docker-py's own session, as before.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import socket
from collections.abc import Callable
from typing import Any, Required, TypedDict
from urllib.parse import quote, urlencode

TIMEOUT = 120.0  # s: docker-py's timeout for the emulator's calls
# (method, path with query, JSON body or None, timeout) → (status, body)
Send = Callable[[str, str, bytes | None, float], tuple[int, bytes]]


# --- what the emulator reads of the engine's answers (each holds more; an engine may answer null for a list or table)


class IpamConfig(TypedDict, total=False):
    Gateway: str


class Ipam(TypedDict, total=False):
    Config: list[IpamConfig] | None


class Network(TypedDict, total=False):
    """GET /networks/{id}, and each network GET /networks lists."""

    Id: Required[str]
    Name: str
    Options: dict[str, str] | None
    IPAM: Ipam


class Created(TypedDict):
    """POST /networks/create."""

    Id: str


class Mount(TypedDict, total=False):
    Type: str
    RW: bool
    Source: str
    Destination: str


class ContainerInfo(TypedDict, total=False):
    """GET /containers/{id}/json."""

    Id: Required[str]
    Image: str
    Mounts: list[Mount] | None


class ContainerSummary(TypedDict, total=False):
    """Each container GET /containers/json lists."""

    Id: Required[str]
    Labels: dict[str, str] | None


class EngineError(RuntimeError):
    """The engine refused a call (an HTTP status of 400 or more)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _unix(path: str) -> Send:
    def send(method: str, target: str, body: bytes | None, timeout: float) -> tuple[int, bytes]:
        conn = _UnixConnection(path, timeout)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, target, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    return send


def _docker_py() -> Send | None:
    """docker-py's session to the engine DOCKER_HOST names; None when docker-py is not installed."""
    try:
        from docker import APIClient
        from docker.errors import DockerException
        from docker.utils import kwargs_from_env
    except ImportError:
        return None
    try:
        api = APIClient(**kwargs_from_env(), version="auto", timeout=int(TIMEOUT))
    except DockerException:
        return None

    def send(method: str, target: str, body: bytes | None, timeout: float) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        try:
            resp = api.request(method, api.base_url + target, data=body, headers=headers, timeout=timeout)
        except Exception as e:  # requests' errors: the engine is not there
            raise OSError(str(e)) from None
        return resp.status_code, resp.content

    return send


def unix_socket(environ: dict[str, str] | os._Environ[str] = os.environ) -> str | None:
    """The Unix socket docker-py's `from_env` reaches, or None when DOCKER_HOST (or TLS) names another kind of host."""
    if environ.get("DOCKER_CERT_PATH") or environ.get("DOCKER_TLS_VERIFY", "") != "":
        return None
    host = environ.get("DOCKER_HOST", "")
    if not host:
        return "/var/run/docker.sock"
    for scheme in ("unix://", "http+unix://"):
        if host.startswith(scheme):
            return host.removeprefix(scheme)
    return None


class Engine:
    def __init__(self, send: Send) -> None:
        self._send = send

    @classmethod
    def from_env(cls) -> Engine | None:
        """The engine docker-py would reach (DOCKER_HOST, else the local socket); None when it cannot be asked, or
        when docker-py is not installed (no workload could run in a container)."""
        if importlib.util.find_spec("docker") is None:
            return None
        path = unix_socket()
        send = _unix(path) if path is not None else _docker_py()
        return cls(send) if send is not None else None

    def call(
        self,
        method: str,
        path: str,
        query: dict[str, str] | None = None,
        body: dict[str, object] | None = None,
        timeout: float = TIMEOUT,
    ) -> Any:
        """The JSON of the engine's answer (None when it has no body); EngineError on a refusal, OSError when it is
        not there."""
        target = path + ("?" + urlencode(query) if query else "")
        status, raw = self._send(method, target, json.dumps(body).encode() if body is not None else None, timeout)
        if status >= 400:
            try:
                message = str(json.loads(raw).get("message", ""))
            except (ValueError, AttributeError):
                message = raw.decode(errors="replace")
            raise EngineError(status, message.strip() or http.client.responses.get(status, ""))
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")  # /_ping answers plain text

    def answers(self) -> bool:
        """Whether an engine answers a ping."""
        try:
            self.call("GET", "/_ping")
        except (OSError, EngineError):
            return False
        return True

    def has_image(self, tag: str) -> bool:
        """Whether the engine has the image; EngineError or OSError when it cannot say."""
        try:
            self.call("GET", f"/images/{quote(tag, safe='')}/json")
        except EngineError as e:
            if e.status == 404:
                return False
            raise
        return True

    def containers(self, label: str) -> list[ContainerSummary]:
        """Every container (running or not) that carries the label, as the engine lists them."""
        found = self.call("GET", "/containers/json", {"all": "1", "filters": json.dumps({"label": [label]})})
        return found if isinstance(found, list) else []

    def remove_container(self, ident: str) -> None:
        """Remove it, running or not."""
        self.call("DELETE", f"/containers/{quote(ident, safe='')}", {"v": "0", "link": "0", "force": "1"})
