"""The emulator as a container, against this machine's Docker engine: the image built from the local base, a
container reached from outside through its published ports and `emulator env`'s exports (a trial, /ask, the real
`pxt` hosted workflow on the process runtime inside), a restart on the same volume, import on start and export on
exit, the admin token, the compose example and the Testcontainers module's reuse.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import docker
import httpx
import pytest
from docker.errors import DockerException, NotFound
from testcontainers.core.config import testcontainers_config
from testcontainers.core.network import Network

from emulator.container.testcontainer import REUSE_LABEL, PxtEmulatorContainer, free_ports
from emulator.hosted.plans import TRIAL_DATABASE
from emulator.runtime.engine import Engine
from emulator.runtime.sibling import SiblingError, detect, own_container_id
from tests.agent_flow import must
from tests.pxt_client import Pxt, ensure_client

# No registry answers here, so Ryuk (Testcontainers' reaper, an image from Docker Hub) cannot be pulled: each test
# removes its containers itself (the `with`), and the last test checks that none is left.
testcontainers_config.ryuk_disabled = True
ROOT = Path(__file__).resolve().parent.parent
IMAGE = os.environ.get("PXT_EMULATOR_TEST_IMAGE", "pxt-emulator:test")  # another tag: not a parallel run's image
ENVS = Path.home() / ".cache" / "pxt-emulator" / "envs"  # the per-user build cache: hosted environments built here
CA = Path("/etc/ssl/certs/ca-certificates.crt")  # this machine's CAs: an environment built inside reaches its index


VOLUMES_BEFORE: set[str] = set()  # the engine's volumes before this module's first container


def volumes() -> set[str]:
    client = docker.from_env()
    try:
        return {str(v.name) for v in client.volumes.list()}
    finally:
        client.close()


@pytest.fixture(scope="module")
def image() -> str:
    VOLUMES_BEFORE.update(volumes())
    built = subprocess.run(
        [sys.executable, "-m", "emulator", "image", "build", "--tag", IMAGE],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=ROOT,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert f"built {IMAGE}" in built.stdout
    return IMAGE


def container(image: str, **kw: object) -> PxtEmulatorContainer:
    kw.setdefault("build_cache", ENVS)  # None: the image's own, on its state volume
    c = PxtEmulatorContainer(image, **kw)  # type: ignore[arg-type]
    if CA.is_file():
        c.with_volume_mapping(str(CA), "/etc/ssl/certs/host-ca.crt", "ro").with_env(
            "SSL_CERT_FILE", "/etc/ssl/certs/host-ca.crt"
        )
    return c


def labelled(label: str) -> list[str]:
    client = docker.from_env()
    try:
        return [str(c.id) for c in client.containers.list(all=True, filters={"label": label})]
    finally:
        client.close()


def test_the_image_is_built_from_the_local_base_with_a_health_check(image: str) -> None:
    client = docker.from_env()
    try:
        attrs = client.images.get(image).attrs
    finally:
        client.close()
    config = attrs["Config"]
    # A `test` in /bin/sh of the file PID 1 keeps while /health answers: no Python start per check.
    assert config["Healthcheck"]["Test"] == ["CMD", "/bin/sh", "-c", "test -f /tmp/pxt-emulator.healthy"]
    assert "/var/lib/pxt-emulator" in config["Volumes"]
    assert config["Entrypoint"] == ["python3", "-m", "emulator.container.init"]
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["EMULATOR_HOST"] == "0.0.0.0" and env["EMULATOR_STATE_DIR"] == "/var/lib/pxt-emulator"


def test_a_container_serves_a_trial_ask_and_the_real_hosted_workflow_from_outside(image: str, tmp_path: Path) -> None:
    with container(image) as emulator:
        exported = emulator.client_env()
        site = exported["EMULATOR_URL"]
        assert site == emulator.url and site.startswith("http://127.0.0.1:")
        assert Path(exported["SSL_CERT_FILE"]).is_file()  # a bundle of this machine's, with the container's CA
        assert httpx.get(site + "/health", trust_env=False).json()["status"] == "ok"
        asked = httpx.get(site + "/ask", params={"query": "what is a trial"}, trust_env=False)
        assert asked.status_code == 200 and asked.json()["answer"]
        # The discovery documents name the addresses a client here uses: the published ones.
        resource = httpx.get(site + "/.well-known/oauth-protected-resource", trust_env=False).json()
        assert resource["authorization_servers"] == [exported["EMULATOR_AUTH_URL"]]
        logs = emulator.get_wrapped_container().logs().decode()
        assert f"site         {site}" in logs  # `emulator up` printed what a person outside uses

        hosted_workflow(exported, tmp_path)


def pxt_project(exported: dict[str, str], tmp_path: Path, timeout: float = 900) -> tuple[Pxt, Path, Callable[..., str]]:
    """The real `pxt` against a container's emulator, a project folder, and `run(*args)`: its output, asserted 0."""
    pxt = Pxt(ensure_client(), tmp_path / "home", exported)
    project = tmp_path / "project"
    project.mkdir(parents=True)

    def run(*args: str) -> str:
        done = subprocess.run(
            [str(pxt.exe), *args], capture_output=True, text=True, timeout=timeout, env=pxt.env, cwd=project
        )
        assert done.returncode == 0, f"pxt {' '.join(args)}:\n{done.stdout}{done.stderr}"
        return done.stdout + done.stderr

    return pxt, project, run


def new_trial_with_the_service_example(run: Callable[..., str]) -> str:
    """`pxt new`, `init` and the service example in the project: the trial's main database's URI."""
    org = must(re.search(r"organization (agent-[0-9a-f]{6})", run("new"))).group(1)
    run("init")
    run("service", "example", "--out", "app.py")
    return f"pxt://{org}:main"


def hosted_workflow(exported: dict[str, str], tmp_path: Path) -> None:
    """The real `pxt` hosted workflow from this machine against a container's emulator: new, init, the service
    example, db update, schema update, service update, a call through the gateway's published port, and the row the
    service inserted read through the tunnel."""
    pxt, project, run = pxt_project(exported, tmp_path)
    try:
        db = new_trial_with_the_service_example(run)
        assert "main generation 1  done" in run("db", "update", db, "-f", "--add-config-entry")
        assert f"created   {db}/docs" in run("schema", "update", "app.py", db)
        run("service", "update", "app.py", db, "-f")
        endpoint = must(re.search(rf"^{re.escape(db)}/ingest\s+(\S+)\s", run("service", "list", db), re.M)).group(1)
        assert endpoint.startswith("http://127.0.0.1:")  # a published gateway port
        key = must(re.search(r"^(pxtk_\w+)$", run("key", "create", "k"), re.M)).group(1)
        answer = httpx.post(
            endpoint + "/docs",
            json={"title": "from outside", "body": "b"},
            headers={"X-api-key": key},
            timeout=120,
            trust_env=False,
        )
        assert answer.status_code == 200 and answer.json()["title_upper"] == "FROM OUTSIDE", answer.text
        # Through the tunnel, as the library reaches a hosted table: the row the service inserted.
        count = subprocess.run(
            [
                str(pxt.exe.parent / "python"),
                "-c",
                f"import pixeltable as pxt; print('N', pxt.get_table('{db}/docs').count())",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            env=pxt.env,
            cwd=project,
        )
        assert count.stdout.split("N", 1)[-1].strip() == "1", count.stdout + count.stderr
    finally:
        pxt.stop_daemon()


def test_with_the_docker_socket_hosted_workloads_are_its_sibling_containers_under_the_trials_limits(
    image: str, tmp_path: Path
) -> None:
    client = docker.from_env()
    emulator = container(image, runtime="docker", docker_socket=True)
    try:
        with emulator:
            state = emulator.state_dir
            assert state is not None
            instance = hashlib.sha256(str(state.resolve()).encode()).hexdigest()[:10]  # the launcher's label
            runtime = emulator.testkit().status().runtime
            # The egress rule is installed on the host (its helper); a loop disk is not made from a container.
            assert runtime.kind == "docker" and runtime.unenforced_limits == ["disk_gb"]
            own = emulator.get_wrapped_container()
            volumes = [m["Name"] for m in own.attrs["Mounts"] if m["Type"] == "volume"]  # its anonymous state volume
            hosted_workflow(emulator.client_env(), tmp_path)
            siblings = client.containers.list(filters={"label": f"pxt-emulator={instance}"})
            assert {"pod", "database", "service"} <= {c.labels["role"] for c in siblings}
            database = next(c for c in siblings if c.labels["role"] == "database")
            limits = database.attrs["HostConfig"]
            assert limits["NanoCpus"] == int(TRIAL_DATABASE["cpu"] * 1e9)
            assert limits["Memory"] == limits["MemorySwap"] == TRIAL_DATABASE["memory_mb"] * 2**20
            assert set(database.attrs["NetworkSettings"]["Networks"]) == {"pxt-emulator"}
            assert database.attrs["Mounts"] and all(str(state) in m["Source"] for m in database.attrs["Mounts"])
        assert labelled(f"pxt-emulator={instance}") == []  # its siblings, its pods and its host helper
        assert not state.exists()
        for name in volumes:
            with pytest.raises(NotFound):
                client.volumes.get(name)
        # The only network it makes is the one every emulator on this machine shares, as on the host.
        assert {n.name for n in client.networks.list(filters={"label": "pxt-emulator"})} <= {"pxt-emulator"}
    finally:
        client.close()


SECOND_SERVICE = """

lookup = FastAPIRouter(name='lookup')
lookup.add_compute_route(Docs, path='/titles', inputs=[Docs.title], outputs=[Docs.title_upper])
"""


def database_and_two_services(exported: dict[str, str], tmp_path: Path) -> None:
    """With the real `pxt`: a trial's database, its tables and two services (the example's, and one more)."""
    pxt, project, run = pxt_project(exported, tmp_path)
    try:
        db = new_trial_with_the_service_example(run)
        with (project / "app.py").open("a") as app:
            app.write(SECOND_SERVICE)
        run("db", "update", db, "-f", "--add-config-entry")
        run("schema", "update", "app.py", db)
        run("service", "update", "app.py", db, "-f")
        listed = run("service", "list", db)
        assert f"{db}/ingest" in listed and f"{db}/lookup" in listed, listed
    finally:
        pxt.stop_daemon()


def test_docker_stop_with_its_default_grace_ends_an_emulator_with_a_database_and_two_services_cleanly(
    image: str, tmp_path: Path
) -> None:
    """The socket mode: the database, the services, their spares and the pod are the engine's containers, and
    `docker stop` (SIGTERM, then SIGKILL after 10 s) must leave none of them, nor a volume or network of theirs."""
    client = docker.from_env()
    emulator = container(image, runtime="docker", docker_socket=True)
    try:
        with emulator:
            state = emulator.state_dir
            assert state is not None
            instance = hashlib.sha256(str(state.resolve()).encode()).hexdigest()[:10]
            database_and_two_services(emulator.client_env(), tmp_path)
            roles = [c.labels["role"] for c in client.containers.list(filters={"label": f"pxt-emulator={instance}"})]
            assert roles.count("service") >= 2 and "database" in roles and "pod" in roles, roles
            own = emulator.get_wrapped_container()
            began = time.monotonic()
            stopped = subprocess.run(
                ["docker", "stop", emulator.get_container_id()], capture_output=True, text=True, timeout=120
            )
            took = time.monotonic() - began
            assert stopped.returncode == 0, stopped.stderr
            own.reload()
            # 0, not 137: the emulator ended within the grace, rather than being killed at its end.
            assert own.attrs["State"]["ExitCode"] == 0, (took, own.logs().decode()[-3000:])
            print(f"docker stop took {took:.1f} s")
            assert labelled(f"pxt-emulator={instance}") == []
            assert client.volumes.list(filters={"label": f"pxt-emulator={instance}"}) == []
            networks = {n.name for n in client.networks.list(filters={"label": "pxt-emulator"})}
            assert networks <= {"pxt-emulator"}  # the one every emulator on this machine shares, as on the host
    finally:
        client.close()


def test_an_emulator_in_a_container_of_its_engine_is_told_so_and_needs_its_state_dir_at_the_same_path(
    tmp_path: Path,
) -> None:
    ident = "ab" * 32
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"173 155 254:0 /var/lib/docker/containers/{ident}/hostname /etc/hostname rw - ext4 vda\n")
    assert own_container_id(mountinfo) == ident
    assert own_container_id(tmp_path / "none") is None
    info: dict[str, object] = {"Id": ident, "Image": "sha256:0"}

    def engine(status: int = 200) -> Engine:
        answer = info if status == 200 else {"message": "no such container"}
        return Engine(lambda *_: (status, json.dumps(answer).encode()))

    assert detect(engine(404), tmp_path, ident) is None  # a container, but not this engine's
    info["Mounts"] = [{"Type": "volume", "Source": "/var/lib/docker/volumes/v/_data", "Destination": "/state"}]
    with pytest.raises(SiblingError, match="same path on the host"):
        detect(engine(), Path("/state"), ident)
    info["Mounts"] = [{"Type": "bind", "Source": str(tmp_path), "Destination": str(tmp_path), "RW": True}]
    found = detect(engine(), tmp_path / "state", ident)
    assert found is not None and found.container == ident and found.state_dir == (tmp_path / "state").resolve()


def test_a_container_started_again_on_its_volume_keeps_its_trials_and_exports_on_exit(
    image: str, tmp_path: Path
) -> None:
    volume = f"pxt-emulator-test-{tmp_path.name[-12:]}-{int(time.time())}"
    exports = tmp_path / "exports"
    exports.mkdir()
    try:
        first = container(image).with_volume_mapping(volume, "/var/lib/pxt-emulator", "rw")
        first.with_volume_mapping(str(exports), "/exports", "rw").with_env(
            "EMULATOR_EXPORT_ON_EXIT", "/exports/run.tar.gz"
        )
        with first:
            trial = _trial(first.url)
        assert (exports / "run.tar.gz").is_file()  # `docker stop`: SIGTERM reached the emulator through init
        second = container(image).with_volume_mapping(volume, "/var/lib/pxt-emulator", "rw")
        with second:
            assert trial in _trials(second.url)  # the same volume: the same world
        third = container(image).with_volume_mapping(str(exports), "/exports", "ro")
        with third.with_env("EMULATOR_IMPORT", "/exports/run.tar.gz"):
            assert trial in _trials(third.url)  # a new volume, started from the export
    finally:
        client = docker.from_env()
        with contextlib.suppress(NotFound):
            client.volumes.get(volume).remove(force=True)
        client.close()


def test_a_new_container_on_the_same_volume_reuses_the_environments_built_on_it(image: str, tmp_path: Path) -> None:
    """The image keeps the build cache on its state volume: the environment one container built is in the cache the
    next container on that volume lists, and a new trial's database there runs on it without a build."""
    volume = f"pxt-emulator-cache-{tmp_path.name[-12:]}-{int(time.time())}"
    cache = "/var/lib/pxt-emulator/build-cache"

    def database(emulator: PxtEmulatorContainer, home: Path) -> str:
        """A new trial's database, updated with the real `pxt`: its logs."""
        pxt, _, run = pxt_project(emulator.client_env(), home, timeout=1200)
        try:
            org = must(re.search(r"organization (agent-[0-9a-f]{6})", run("new"))).group(1)
            db = f"pxt://{org}:main"
            run("init")
            assert "main generation 1  done" in run("db", "update", db, "-f", "--add-config-entry")
            return run("db", "logs", db, "--tail", "400")
        finally:
            pxt.stop_daemon()

    def cached(emulator: PxtEmulatorContainer) -> set[str]:
        """The keys `emulator build-cache` lists in the container."""
        code, out = emulator.get_wrapped_container().exec_run(
            ["python3", "-m", "emulator", "build-cache", "--json", "--build-cache", cache]
        )
        assert isinstance(out, bytes) and code == 0, out
        listing = json.loads(out)
        assert listing["root"] == cache
        return {e["key"] for e in listing["environments"]}

    try:
        first = container(image, build_cache=None).with_volume_mapping(volume, "/var/lib/pxt-emulator", "rw")
        with first:
            assert first.testkit().status().runtime.build_cache == cache  # the image's default: on the volume
            database(first, tmp_path / "first")
            built = cached(first)
            assert built
        second = container(image, build_cache=None).with_volume_mapping(volume, "/var/lib/pxt-emulator", "rw")
        with second:
            assert built <= cached(second)  # the same volume: the environments the first built
            logs = database(second, tmp_path / "second")
            # The state dir's link into the cache holds (a cache outside the volume would leave it dangling, and
            # the environment would be built again).
            assert "unchanged: not rebuilt" in logs and "building environment" not in logs, logs
    finally:
        client = docker.from_env()
        with contextlib.suppress(NotFound):
            client.volumes.get(volume).remove(force=True)
        client.close()


def _trial(site: str) -> str:
    """A trial made as an agent makes one: discovery, registration, the token, the trial."""
    with httpx.Client(trust_env=False, timeout=30) as http:
        meta = http.get(site + "/.well-known/oauth-protected-resource").json()
        issuer = meta["authorization_servers"][0]
        token_url = http.get(issuer + "/.well-known/oauth-authorization-server").json()["token_endpoint"]
        reg = http.post(issuer + "/agent/identity", json={"type": "anonymous"}).json()
        form = {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": reg["identity"]["assertion"]}
        token = http.post(token_url, data=form).json()["access_token"]
        made = http.post(site + "/api/v1/trial-orgs", headers={"Authorization": f"Bearer {token}"})
        assert made.status_code in (200, 201), made.text
        return str(made.json()["org"])


def _trials(site: str) -> set[str]:
    return {t["org"] for t in httpx.get(site + "/_emulator/trials", trust_env=False).json()["trials"]}


def test_an_admin_token_guards_the_operator_api(image: str) -> None:
    token = "t0ken-for-this-test-only-0123456789"
    with container(image, admin_token=token) as emulator:
        bare = httpx.get(emulator.url + "/_emulator/status", trust_env=False)
        assert bare.status_code == 401 and "admin token" in bare.json()["error"]["message"]
        wrong = httpx.get(emulator.url + "/_emulator/status", headers={"X-Emulator-Token": "nope"}, trust_env=False)
        assert wrong.status_code == 401
        assert emulator.testkit().status().version  # the testkit carries it
        assert emulator.client_env()["EMULATOR_URL"] == emulator.url
        assert httpx.get(emulator.url + "/health", trust_env=False).status_code == 200  # the product is not guarded


def test_the_testcontainers_modules_reuse_gives_a_second_session_the_same_container(image: str) -> None:
    before = set(labelled(REUSE_LABEL))
    first = container(image, reuse=True, settings={"seed": "7"})
    try:
        first.start()
        assert not first.reused
        trial = _trial(first.url)
        first.stop()  # kept running: it is one to reuse
        second = container(image, reuse=True, settings={"seed": "7"}).start()
        assert second.reused and second.get_container_id() == first.get_container_id()
        assert trial in _trials(second.url)
        other = container(image, reuse=True, settings={"seed": "8"})  # another configuration: not that one
        other.start()
        assert not other.reused and other.get_container_id() != first.get_container_id()
    finally:
        client = docker.from_env()
        for found in set(labelled(REUSE_LABEL)) - before:
            with contextlib.suppress(NotFound):
                client.containers.get(found).remove(force=True, v=True)
        client.close()


def _remove_reused(before: set[str]) -> None:
    client = docker.from_env()
    for found in set(labelled(REUSE_LABEL)) - before:
        with contextlib.suppress(NotFound):
            client.containers.get(found).remove(force=True, v=True)
    client.close()


def _state_volume(c: PxtEmulatorContainer) -> str:
    """The name of the container's anonymous state volume."""
    mounts = c.get_wrapped_container().attrs["Mounts"]
    return next(str(m["Name"]) for m in mounts if m["Type"] == "volume" and m["Destination"] == "/var/lib/pxt-emulator")


def test_reuse_is_keyed_by_the_image_id_the_command_the_name_and_the_network(image: str) -> None:
    before = set(labelled(REUSE_LABEL))
    client = docker.from_env()
    token = hashlib.sha256(f"{time.time()}".encode()).hexdigest()[:8]
    retagged = f"pxt-emulator:reuse-{token}"  # an image of its own, rebuilt under the same tag below
    client.images.get(image).tag(retagged)
    network = Network()
    network.name = f"pxt-reuse-{token}"
    try:
        network.create()
        first = container(retagged, reuse=True).start()
        assert not first.reused
        assert container(retagged, reuse=True).start().get_container_id() == first.get_container_id()
        others = [
            container(retagged, reuse=True, command=["up", "--ask-rate-limit", "7"]),
            container(retagged, reuse=True, name=f"pxt-reuse-{token}"),
            container(retagged, reuse=True, network=network, network_aliases=["emulator"]),
        ]
        ids = {first.get_container_id()}
        for other in others:
            other.start()
            assert not other.reused and other.get_container_id() not in ids
            ids.add(other.get_container_id())
        assert others[1].get_wrapped_container().name == f"pxt-reuse-{token}"
        aliases = others[2].get_wrapped_container().attrs["NetworkSettings"]["Networks"][network.name]["Aliases"]
        assert "emulator" in aliases
        assert container(retagged, reuse=True, name=f"pxt-reuse-{token}").start().reused  # the same name: that one
        # The tag rebuilt (another image id): a container of the new image, not the old one's.
        dockerfile = io.BytesIO(f"FROM {image}\nLABEL pxt-test={token}\n".encode())
        client.images.build(fileobj=dockerfile, tag=retagged, rm=True, forcerm=True)  # no build container left
        rebuilt = container(retagged, reuse=True).start()
        assert not rebuilt.reused and rebuilt.get_container_id() not in ids
        made_of = rebuilt.get_wrapped_container().image
        assert made_of is not None and made_of.id == client.images.get(retagged).id
    finally:
        _remove_reused(before)
        with contextlib.suppress(DockerException):
            network.remove()
        with contextlib.suppress(DockerException):
            client.images.remove(retagged)
        client.close()


def test_a_stopped_reused_container_is_removed_with_its_volume_and_end_reused_ends_them(image: str) -> None:
    before = set(labelled(REUSE_LABEL))
    client = docker.from_env()
    try:
        first = container(image, reuse=True, settings={"seed": "11"}).start()
        volume = _state_volume(first)
        first.get_wrapped_container().stop()
        second = container(image, reuse=True, settings={"seed": "11"}).start()
        assert not second.reused and second.get_container_id() != first.get_container_id()
        with pytest.raises(NotFound):
            client.containers.get(first.get_container_id())
        with pytest.raises(NotFound):
            client.volumes.get(volume)
        # How a person ends the kept containers (the README's way): each, with its volume.
        volume = _state_volume(second)
        ended = PxtEmulatorContainer.end_reused()
        assert second.get_wrapped_container().name in ended
        assert labelled(REUSE_LABEL) == []
        with pytest.raises(NotFound):
            client.volumes.get(volume)
    finally:
        _remove_reused(before)
        client.close()


def test_a_start_that_fails_removes_its_container_and_its_volume(image: str) -> None:
    """The Docker runtime without the engine's socket: the emulator exits at start, and nothing of it is left."""
    client = docker.from_env()
    try:
        for reuse in (False, True):
            token = hashlib.sha256(f"{time.time()}{reuse}".encode()).hexdigest()[:12]
            since = int(time.time()) - 1
            failing = container(image, runtime="docker", reuse=reuse, labels={"pxt-test": token})
            with pytest.raises(RuntimeError, match="exited"):
                failing.start()
            assert labelled(f"pxt-test={token}") == []
            until = int(time.time()) + 1
            made = [
                e["Actor"]["ID"]
                for e in client.events(since=since, until=until, decode=True, filters={"type": "container"})
                if e.get("Action") == "create" and e["Actor"]["Attributes"].get("pxt-test") == token
            ]
            assert len(made) == 1  # it was made, and is gone
            mounted = {
                e["Actor"]["ID"]
                for e in client.events(since=since, until=until, decode=True, filters={"type": "volume"})
                if e.get("Action") == "mount" and e["Actor"]["Attributes"].get("container") == made[0]
            }
            anonymous = {v for v in mounted if re.fullmatch(r"[0-9a-f]{64}", v)}
            assert anonymous  # its state volume
            for name in anonymous:
                with pytest.raises(NotFound):
                    client.volumes.get(name)
    finally:
        client.close()


def test_the_compose_example_comes_up_and_its_client_succeeds(image: str) -> None:
    assert shutil.which("docker-compose"), "docker-compose is missing: scripts/setup-docker.sh installs it"
    project = f"pxtcompose{int(time.time())}"
    compose = ["docker-compose", "-p", project, "-f", str(ROOT / "examples" / "compose" / "docker-compose.yml")]
    site_port = str(free_ports(1)[0])
    env = {"EMULATOR_IMAGE": image, "EMULATOR_SITE_PORT": site_port, "PATH": "/usr/bin:/bin:/usr/local/bin"}
    try:
        up = subprocess.run(
            [*compose, "up", "--exit-code-from", "agent"], capture_output=True, text=True, timeout=600, env=env
        )
        out = up.stdout + up.stderr
        assert up.returncode == 0, out[-4000:]
        assert "the trial's API key works" in out and "is now claimed" in out
        assert re.search(
            r"claim link \(for the person\): http://emulator:8700/claim/", out
        )  # the name it is reached by
    finally:
        subprocess.run([*compose, "down", "-v"], capture_output=True, timeout=300, env=env)


def test_the_pytest_plugin_runs_a_suite_against_a_container(image: str, tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\nemulator_args = --ask-rate-limit 7\n")
    (suite / "test_it.py").write_text(
        "def test_a_trial_in_the_container(emulator, emulator_env):\n"
        "    import httpx\n"
        "    assert emulator.url == emulator_env['EMULATOR_URL']\n"
        "    assert httpx.get(emulator.url + '/health', trust_env=False).json()['status'] == 'ok'\n"
        "    status = emulator.status()\n"
        "    assert status.state_dir == '/var/lib/pxt-emulator'  # the container's\n"
        "    assert status.runtime.profile == 'throwaway'  # as the process mode runs it\n"
        "    assert status.limits.ask_rate_limit == 7  # the ini's emulator_args\n"
    )
    base = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "EMULATOR_URL")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "--emulator-container", image],
        cwd=suite,
        capture_output=True,
        text=True,
        timeout=600,
        env={**base, "TESTCONTAINERS_RYUK_DISABLED": "true"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"emulator: started for this run in a container of {image}" in done.stdout


def test_nothing_of_the_emulators_containers_is_left(image: str) -> None:
    """Every container these tests started (the image's, the compose project's, a host helper's), and every volume
    they made (the image declares its state dir a volume: each container without a named one gets its own), is gone.
    Nothing else on this machine makes volumes: the hosted workloads' data is in bind mounts."""
    client = docker.from_env()
    try:
        left = [c.name for c in client.containers.list(all=True) if c.image is not None and IMAGE in c.image.tags]
        in_use = {m.get("Name") for c in client.containers.list(all=True) for m in c.attrs.get("Mounts", [])}
    finally:
        client.close()
    assert left == []
    assert volumes() - VOLUMES_BEFORE - in_use == set()
