"""The Docker runtime's own guarantees, shown with containers and disks these tests make themselves:
the egress rule (TCP 80/443/5432 out, nothing else), loop-mounted disks of a fixed size that grow,
and the base image made without a registry. The hosted workflow in containers is in test_pxt_cloud_docker.py.

These need a Docker engine and root; `.ci/run` provides both (scripts/setup-docker.sh). Without them they
fail, not skip: a runtime that cannot be checked is not done.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulator.runtime import disks, egress
from emulator.runtime.containers import docker_client
from emulator.runtime.engine import Engine, unix_socket
from emulator.runtime.images import BUILDER_LABEL
from tests.conftest import BASE_IMAGE

# A tiny TCP listener on the given ports, in the image's own python3.
LISTEN = (
    "import socket, sys, threading\n"
    "def serve(port):\n"
    "    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "    s.bind(('0.0.0.0', port)); s.listen()\n"
    "    while True: s.accept()[0].close()\n"
    "for p in sys.argv[1:]: threading.Thread(target=serve, args=(int(p),), daemon=True).start()\n"
    "threading.Event().wait()\n"
)
# Try each port once with a short timeout; print port=ok|refused|timeout.
CONNECT = (
    "import socket, sys\n"
    "for p in sys.argv[2:]:\n"
    "    try:\n"
    "        socket.create_connection((sys.argv[1], int(p)), timeout=3).close(); r = 'ok'\n"
    "    except ConnectionRefusedError: r = 'refused'\n"
    "    except OSError as e: r = type(e).__name__\n"
    "    print(f'{p}={r}')\n"
)


@pytest.fixture(scope="module")
def client() -> Any:
    found = docker_client()
    assert found is not None, "no Docker engine answers: run scripts/setup-docker.sh (as .ci/run does)"
    return found


@pytest.fixture(scope="module")
def engine() -> Engine:
    found = Engine.from_env()
    assert found is not None and found.answers(), "no Docker engine answers: run scripts/setup-docker.sh"
    return found


@pytest.fixture
def containers(client: Any) -> Iterator[list[Any]]:
    made: list[Any] = []
    yield made
    for c in made:
        c.remove(force=True)


def test_egress_allows_only_web_and_postgres_ports(client: Any, engine: Engine, containers: list[Any]) -> None:
    network, _ = egress.ensure_network(engine, "pxt-emulator")
    asyncio.run(egress.install(egress.bridge_of(network)))
    tag = uuid.uuid4().hex[:8]
    # The peer stands in for the internet: a container of this test, on the emulator's network.
    peer = client.containers.run(
        BASE_IMAGE,
        ["python3", "-c", LISTEN, "80", "443", "5432", "8080", "6379"],
        name=f"pxt-test-peer-{tag}",
        detach=True,
        network="pxt-emulator",
    )
    containers.append(peer)
    peer.reload()
    address = peer.attrs["NetworkSettings"]["Networks"]["pxt-emulator"]["IPAddress"]
    out = client.containers.run(
        BASE_IMAGE,
        ["python3", "-c", CONNECT, address, "443", "80", "5432", "8080", "6379"],
        name=f"pxt-test-client-{tag}",
        network="pxt-emulator",
        remove=True,
    ).decode()
    results = dict(line.split("=") for line in out.split())
    assert results == {"443": "ok", "80": "ok", "5432": "ok", "8080": "refused", "6379": "refused"}, out


def test_outside_the_network_the_same_ports_are_open(client: Any, containers: list[Any]) -> None:
    """The refusals above are the rule's doing: from Docker's default network the peer answers on all."""
    tag = uuid.uuid4().hex[:8]
    peer = client.containers.run(
        BASE_IMAGE, ["python3", "-c", LISTEN, "443", "8080"], name=f"pxt-test-peer-{tag}", detach=True
    )
    containers.append(peer)
    peer.reload()
    address = peer.attrs["NetworkSettings"]["IPAddress"]
    out = client.containers.run(
        BASE_IMAGE, ["python3", "-c", CONNECT, address, "443", "8080"], name=f"pxt-test-client-{tag}", remove=True
    ).decode()
    assert dict(line.split("=") for line in out.split()) == {"443": "ok", "8080": "ok"}, out


def test_the_rule_is_installed_once(engine: Engine) -> None:
    network, _ = egress.ensure_network(engine, "pxt-emulator")
    for _ in range(2):
        asyncio.run(egress.install(egress.bridge_of(network)))
    rules = subprocess.check_output(["iptables", "-S", "DOCKER-USER"], text=True)
    assert rules.count(f"-j {egress.CHAIN}") == 1, rules


def test_emulators_starting_at_once_share_one_network_and_one_rule(client: Any, engine: Engine) -> None:
    """Four emulators' starts at the same moment (threads here, processes in a parallel run): one network of
    that name, the same gateway for each, and the rule whole (RETURNs before the REJECTs, each rule once)."""
    name, bridge = f"pxt-race-{uuid.uuid4().hex[:6]}", f"pxt-r{uuid.uuid4().hex[:6]}"
    gateways: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def one_start() -> None:
        try:
            start.wait()
            network, gateway = egress.ensure_network(engine, name, bridge)
            asyncio.run(egress.install(egress.bridge_of(network)))
            gateways.append(gateway)
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=one_start) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert len(client.networks.list(names=[name])) == 1
        assert len(set(gateways)) == 1 and len(gateways) == 4, gateways
        chain = subprocess.check_output(["iptables", "-S", egress.CHAIN], text=True).splitlines()[1:]
        assert [line.split(" -j ")[1].split()[0] for line in chain] == ["RETURN", "RETURN", "REJECT", "REJECT"], chain
        jumps = subprocess.check_output(["iptables", "-S", "DOCKER-USER"], text=True)
        assert jumps.count(f"-i {bridge} -j {egress.CHAIN}") == 1, jumps
    finally:
        subprocess.run(["iptables", "-D", "DOCKER-USER", "-i", bridge, "-j", egress.CHAIN], capture_output=True)
        for network in client.networks.list(names=[name]):
            network.remove()


def test_a_disk_has_its_size_keeps_its_data_and_grows(tmp_path: Path) -> None:
    assert disks.supported() is None, disks.supported()
    image, mount = tmp_path / "d.img", tmp_path / "mnt"
    try:
        assert disks.ensure(image, mount, 0.2) is True
        assert 0.18e9 < disks.size_of(mount) <= 0.2e9
        (mount / "kept.txt").write_text("data")
        assert disks.ensure(image, mount, 0.2) is False  # already there: nothing to do
        # A full disk fails writes with ENOSPC, as a full volume does.
        with pytest.raises(OSError) as full, open(mount / "fill", "wb") as f:
            for _ in range(300):
                f.write(b"\0" * 1_000_000)
                f.flush()
                os.fsync(f.fileno())
        assert full.value.errno == 28
        assert disks.free_bytes(mount) < 1_000_000
        (mount / "fill").unlink()
        assert disks.ensure(image, mount, 0.4) is True  # not in use: unmounted, grown, mounted again
        assert 0.36e9 < disks.size_of(mount) <= 0.4e9
        assert (mount / "kept.txt").read_text() == "data"
    finally:
        disks.release(mount)
    assert not os.path.ismount(mount)


def test_the_base_image_was_made_without_a_registry(client: Any) -> None:
    image = client.images.get(BASE_IMAGE)
    # `docker import` leaves no build history and no registry digest; its python is 3.11 (the client's).
    assert image.attrs.get("RepoDigests") == []
    out = client.containers.run(
        BASE_IMAGE,
        [
            "python3",
            "-c",
            "import sys, tarfile, inspect; print(sys.version_info[:2], "
            "'filter' in inspect.signature(tarfile.TarFile.extractall).parameters)",
        ],
        network_mode="none",
        remove=True,
    ).decode()
    assert out.strip() == "(3, 11) True"


def test_with_no_base_image_set_a_machine_without_a_registry_uses_the_one_it_built(
    client: Any, start_emulator: Any
) -> None:
    """`--runtime docker` (or `auto` with an engine) and no `--docker-base-image`: the public slim image where this
    machine has it, else the one `emulator base-image` built here (a machine with no registry), never a pull that
    cannot succeed. `emulator status` says which."""
    import docker.errors

    try:
        client.images.get("python:3.11-slim-bookworm")
        expected = "python:3.11-slim-bookworm"
    except docker.errors.ImageNotFound:
        expected = "pxt-emulator-base:bookworm"  # setup-docker.sh built it; the suite's machines have no registry
    e = start_emulator("--no-watch", "--runtime", "docker")
    status = e.admin().get("/_emulator/status").json()
    assert status["runtime"] == {
        "kind": "docker",
        "unenforced_limits": status["runtime"]["unenforced_limits"],
        "base_image": expected,
        "profile": "developer",
        "spares": True,
        "build_cache": status["runtime"]["build_cache"],
    }
    shown = subprocess.run(
        [sys.executable, "-m", "emulator", "status", "--state-dir", str(e.state_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert f"runtime      docker, base image {expected} (limits" in shown
    assert shown.count("runtime") == 1  # once, not also among the endpoints


def test_a_build_container_of_a_dead_emulator_is_removed_at_the_next_start(client: Any, start_emulator: Any) -> None:
    """An emulator killed while it made an image leaves its build container; the next start removes it, and leaves
    one whose emulator still runs (this test's process stands in for it) alone."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    made = {
        pid: client.containers.create(
            BASE_IMAGE, ["true"], labels={"pxt-emulator": "build", BUILDER_LABEL: str(pid)}, network_mode="none"
        )
        for pid in (dead.pid, os.getpid())
    }
    try:
        start_emulator("--runtime", "docker", "--no-watch")
        left = {c.id for c in client.containers.list(all=True, filters={"label": "pxt-emulator=build"})}
        assert made[dead.pid].id not in left and made[os.getpid()].id in left
    finally:
        for container in made.values():
            with contextlib.suppress(Exception):
                container.remove(force=True)


class EngineRelay:
    """A Unix socket of the test's own in front of the engine's: it relays every call until `hang()`, after which
    it takes connections and never answers (an engine too busy to answer, as under a loaded CI run)."""

    def __init__(self, path: Path, engine_socket: str) -> None:
        self.path, self.engine_socket = path, engine_socket
        self.hung = threading.Event()
        self.asked_while_hung = threading.Event()
        self.held: list[socket.socket] = []
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def hang(self) -> None:
        self.hung.set()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if self.hung.is_set():
                self.asked_while_hung.set()
                self.held.append(conn)  # read by no one, answered never
                continue
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.engine_socket)
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.listener.close()
        for conn in self.held:
            conn.close()


def test_an_emulator_that_made_no_container_stops_at_once_when_the_engine_does_not_answer(
    tmp_path: Path, start_emulator: Any
) -> None:
    """Its stop asks the engine for nothing (it left nothing to sweep): an `emulator eval` stopped by ^C ends its
    trials' emulators at once even while the engine is too busy to answer (it waited up to a minute on each)."""
    engine_socket = unix_socket()
    assert engine_socket is not None
    relay = EngineRelay(Path(tempfile.mkdtemp(prefix="engine-")) / "docker.sock", engine_socket)
    try:
        emu = start_emulator("--runtime", "docker", "--no-watch", env={"DOCKER_HOST": f"unix://{relay.path}"})
        assert emu.endpoints["runtime"] == "docker", emu.log()
        relay.hang()
        assert emu.proc is not None
        emu.proc.send_signal(signal.SIGTERM)
        assert emu.proc.wait(30) == 0, emu.log()  # it waited on the engine for 60 s and more before
        assert not relay.asked_while_hung.is_set()
    finally:
        relay.close()
        shutil.rmtree(relay.path.parent, ignore_errors=True)
