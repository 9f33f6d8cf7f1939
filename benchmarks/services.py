"""The hosted services path, timed: the warm path from `pxt service update` (or `pxt service restart`) to the
first successful route call, and the gateway's added latency per request against calling the service directly.

    python benchmarks/services.py [--runs 3] [--requests 300] [--runtime docker|process] [--out PATH]

One emulator (Docker runtime by default) and one trial with the example app deployed, untimed; then `runs`
rounds of three variants, each after `--pause` seconds (a developer's edit; the service's spare imports meanwhile)
and timed from the command's launch to the first 200 of the new service generation on POST <endpoint>/titles,
with how long the route was down meanwhile: `restart` (`pxt service restart`, which takes the service's spare),
`cold` (the same restart with the spare killed first: the reference, a plain start of the real pod_runner) and
`update` (`pxt service update` of a resource change: a size change is a stop and a cold start); then `requests` calls
through the gateway and as many straight to the service, interleaved in blocks. Every wait is bounded; the
emulator, the client's daemon, this run's containers and mounts, and the temporary directories are cleaned up on
success, errors, Ctrl-C and SIGTERM.
See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.hosted import (  # noqa: E402
    DB_UPDATE_TIMEOUT_S,
    SCHEMA_TIMEOUT_S,
    STOP_TIMEOUT_S,
    BenchError,
    Client,
    _stop_on_sigterm,
    alive,
    emulator,
    emulator_env,
    machine_info,
    scratch,
    tail,
    wait_gone,
    write_report,
)
from emulator.runtime import disks  # noqa: E402
from tests.pxt_client import VERSION, ensure_client  # noqa: E402

DEFAULT_OUT = HERE / "services-results.json"
DEFAULT_BASE_IMAGE = "pxt-emulator-base:bookworm"
SERVICE = "ingest"
ENDPOINT_RE = re.compile(r"\+ ingest\s+applied\s+(http://127\.0\.0\.1:\d+/ingest)")

SERVICE_UPDATE_TIMEOUT_S = 600.0  # the first one starts the service (and the database, if it stopped)
WARM_TIMEOUT_S = 300.0  # a warm run: launch → the command's exit and a 200 after it
JOURNAL_TIMEOUT_S = 15.0  # the journal is written asynchronously: wait this long for an event to land
POLL_S = 0.05  # between route calls during a warm run
POLL_CALL_TIMEOUT_S = 5.0
CALL_TIMEOUT_S = 10.0
WARMUP_CALLS = 20  # per side, before the measured calls: connection set-up paths, the udf, caches
DOCKER_TIMEOUT_S = 60.0

BODY = json.dumps({"title": "benchmark"}).encode()
EXPECTED = {"title_upper": "BENCHMARK"}
# The service's own log lines that mark the phases of a (re)start; emitted by emulator/runtime/supervisor.py.
STARTED = f"service {SERVICE} started, listening on "
READY = f"service {SERVICE} is ready"
ACCESS_LOG = re.compile(r'"(GET|POST) /')  # per-request lines: noise in a timeline


# --- HTTP ---------------------------------------------------------------------------------------


class UnixConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket: the process runtime's servers listen on private sockets, not on ports."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.path)
        self.sock = sock


def call(host: str, port: int, path: str, headers: dict[str, str], timeout: float) -> tuple[int, float, bytes]:
    """One POST on a fresh connection (no keep-alive, as the gateway does upstream): status, seconds, body.
    http.client never consults proxy variables, so this stays on loopback or the run's container network."""
    start = time.perf_counter()
    conn = (
        UnixConnection(host, timeout)
        if host.startswith("/")
        else http.client.HTTPConnection(host, port, timeout=timeout)
    )
    try:
        head = {"Content-Type": "application/json", "Connection": "close", **headers}
        conn.request("POST", path, body=BODY, headers=head)
        response = conn.getresponse()
        body = response.read()
        return response.status, time.perf_counter() - start, body
    finally:
        conn.close()


def try_call(host: str, port: int, path: str, headers: dict[str, str], timeout: float) -> int:
    """The status of one call, or 0 when there was no HTTP answer (refused, reset, timed out)."""
    try:
        return call(host, port, path, headers, timeout)[0]
    except (OSError, http.client.HTTPException):
        return 0


def body_is_expected(body: bytes) -> bool:
    try:
        return bool(json.loads(body) == EXPECTED)
    except ValueError:
        return False


def runtime_of(site: str) -> str:
    """The runtime the emulator says it runs (`/_emulator/status`), to be sure the flag took."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{site}/_emulator/status", timeout=30) as r:
            return str(json.load(r).get("runtime", {}).get("kind"))
    except (OSError, ValueError) as e:
        raise BenchError(f"the emulator's status could not be read: {e}") from e


def journal(site: str, since: int, kinds: str) -> tuple[list[dict[str, Any]], int]:
    """Events after `since` of `kinds` (all pages, bounded), and the journal's last sequence number."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
    events: list[dict[str, Any]] = []
    last = since
    for _ in range(50):  # 50 pages of 5000: far more than a run writes
        url = f"{site}/_emulator/journal?kinds={kinds}&since={since}&limit=5000"
        try:
            with opener.open(url, timeout=30) as r:
                page = json.load(r)
        except (OSError, ValueError) as e:
            raise BenchError(f"the emulator's journal could not be read: {e}") from e
        last = page["last_seq"]
        if not page["events"]:
            break
        events += page["events"]
        since = page["events"][-1]["seq"]
    return events, last


# --- the run's leftovers ------------------------------------------------------------------------


def state_tag(state_dir: Path) -> str:
    """The label value the Docker launcher gives this state directory's containers (emulator/runtime/containers.py)."""
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:10]


def docker(*args: str) -> str:
    try:
        r = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=DOCKER_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BenchError(f"docker {args[0]}: {e}") from e
    if r.returncode != 0:
        raise BenchError(f"docker {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def stop_daemons(root: Path) -> None:
    """Stop, by pid, a client daemon serving a project under `root` that outlived `pxt daemon stop --force` (a
    daemon busy with an interrupted command's request can miss it)."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"pixeltable_cli.server.daemon" not in cmdline or f"{root}/".encode() not in cmdline:
            continue
        pid = int(proc.name)
        print(f"  stopping the client's daemon (pid {pid}), which outlived pxt daemon stop", flush=True)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            if not wait_gone(pid, STOP_TIMEOUT_S):
                os.kill(pid, signal.SIGKILL)
                wait_gone(pid, 10)


@contextlib.contextmanager
def leftovers(root: Path, state_dir: Path, runtime: str) -> Iterator[None]:
    """After the emulator: the client's daemon if it outlived its stop, and what the emulator leaves only when it
    had to be killed, its containers and loop mounts. All found by this run's own tag and directory."""
    try:
        yield
    finally:
        stop_daemons(root)
        if runtime == "docker" and state_dir.exists():
            with contextlib.suppress(BenchError):
                ids = docker("ps", "-aq", "--filter", f"label=pxt-emulator={state_tag(state_dir)}").split()
                if ids:
                    docker("rm", "-f", *ids)
        with contextlib.suppress(OSError):
            mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
            for mountpoint in sorted((m for m in mounts if m.startswith(f"{root}/")), reverse=True):
                with contextlib.suppress(Exception):
                    disks.release(Path(mountpoint))


# --- the deployment -----------------------------------------------------------------------------


class Deployment:
    """A trial with the example app's database and its `ingest` service, driven by the real client."""

    def __init__(self, client: Client, endpoints: dict[str, Any], runtime: str, state_dir: Path) -> None:
        self.client, self.runtime, self.state_dir = client, runtime, state_dir
        self.site, self.emulator_pid = endpoints["site"], int(endpoints["pid"])
        self.db = self.endpoint = self.key = ""
        self.setup_s: dict[str, float] = {}

    def deploy(self) -> None:
        _, out = self.client.run("new")
        m = re.search(r"organization (agent-[0-9a-f]{6})", out)
        if not m:
            raise BenchError(f"pxt new named no organization:\n{tail(out)}")
        self.db = f"pxt://{m.group(1)}:main"
        print(f"  trial {self.db}", flush=True)
        self.client.run("init")
        self.client.run("service", "example", "--out", "app.py")
        steps: list[tuple[str, tuple[str, ...], float]] = [
            ("db_update", ("db", "update", self.db, "-f", "--add-config-entry"), DB_UPDATE_TIMEOUT_S),
            ("schema_update", ("schema", "update", "app.py", self.db), SCHEMA_TIMEOUT_S),
            ("service_update", ("service", "update", "app.py", self.db, "-f"), SERVICE_UPDATE_TIMEOUT_S),
        ]
        out = ""
        for name, args, timeout in steps:
            self.setup_s[name], out = self.client.run(*args, timeout=timeout)
            print(f"  setup  {name:<16}{self.setup_s[name]:8.2f} s", flush=True)
        m = ENDPOINT_RE.search(out)
        if not m:
            raise BenchError(f"pxt service update printed no endpoint for {SERVICE}:\n{tail(out)}")
        self.endpoint = m.group(1)
        sessions = json.loads((Path(self.client.pxt.env["PIXELTABLE_HOME"]) / "auth" / "sessions.json").read_text())
        self.key = next((v["api_key"] for v in sessions.values() if v.get("kind") == "trial"), "")
        if not self.key:
            raise BenchError("the client's sessions.json holds no trial key")
        status, _, body = call(*self.gateway_target(), CALL_TIMEOUT_S)
        if status != 200 or not body_is_expected(body):
            raise BenchError(f"POST {self.endpoint}/titles answered {status}: {body[:300]!r}")
        print(f"  service {self.endpoint} answers", flush=True)

    def gateway_target(self) -> tuple[str, int, str, dict[str, str]]:
        url = urlsplit(self.endpoint)
        return url.hostname or "127.0.0.1", url.port or 80, f"{url.path}/titles", {"X-api-key": self.key}

    def direct_target(self) -> tuple[str, int, str, dict[str, str]]:
        """Where the gateway forwards to: the serving generation's private socket (a container's is mounted from
        this machine), as the emulator logged it at its start. The gateway strips the `/ingest` prefix and the
        credential, so the direct call is `POST /titles` without one."""
        events, _ = journal(self.site, 0, "db.log")
        started = [e["data"]["line"] for e in events if e["data"].get("line", "").startswith(STARTED)]
        if not started:
            raise BenchError("the emulator logged no start of the service")
        where = started[-1].removeprefix(STARTED).strip()
        if where.startswith("a private socket ("):
            return where.removeprefix("a private socket (").removesuffix(")"), 0, "/titles", {}
        host, _, port = where.rpartition(":")
        return host, int(port), "/titles", {}

    def kill_spare(self) -> None:
        """SIGKILL the service's spare (its newest workload; the one serving is older), as if it had died: the next
        restart then starts the real pod_runner cold."""
        if self.runtime == "docker":
            tag = state_tag(self.state_dir)
            ids = docker("ps", "-q", "--filter", "label=role=service", "--filter", f"label=pxt-emulator={tag}").split()
            found = sorted((json.loads(docker("inspect", i))[0] for i in ids), key=lambda c: c["Created"])
            if len(found) != 2:
                raise BenchError(f"expected the service and its spare, found {len(found)} containers")
            docker("kill", found[-1]["Id"])
            return
        ledger = self.state_dir / "runtime" / "workloads"
        pids = []
        for entry in ledger.iterdir():
            with contextlib.suppress(OSError, ValueError):
                if b"serving.pod_runner" in Path(f"/proc/{entry.name}/cmdline").read_bytes():
                    pids.append((json.loads(entry.read_text())["starttime"], int(entry.name)))
        if len(pids) != 2:
            raise BenchError(f"expected the service and its spare, found {len(pids)} processes")
        os.killpg(max(pids)[1], signal.SIGKILL)

    def set_memory(self, memory_mb: int) -> None:
        """A service-relevant change that leaves the environment alone: the service's memory in pixeltable.toml."""
        toml = self.client.project / "pixeltable.toml"
        text = toml.read_text()
        line = f"services.{SERVICE} = {{ memory_mb = {memory_mb} }}"
        if f"services.{SERVICE} = " in text:
            text = re.sub(rf"^services\.{SERVICE} = .*$", line, text, flags=re.M)
        else:
            entry = f"name = '{self.db}'"
            if entry not in text:
                raise BenchError(f"pixeltable.toml has no entry {entry}:\n{tail(text)}")
            text = text.replace(entry, f"{entry}\n{line}", 1)
        toml.write_text(text)

    def warm(self, variant: str, memory_mb: int) -> dict[str, float]:
        """One warm run: launch the command and call the route every POLL_S until the command has exited and the
        route answers 200 again; then the server's phases from the journal, on the same clock. A restart keeps
        the old generation serving until the new one is ready, so the new generation's first 200 is the first
        200 after its `ready` line; a resize stops the old one first, so the route is down for a while. Every
        time is seconds after the launch."""
        if variant == "update":
            self.set_memory(memory_mb)
            args = ["service", "update", "app.py", self.db, "-f", "--allow-destructive"]  # less memory is destructive
        else:
            args = ["service", "restart", f"{self.db}/{SERVICE}"]
        _, since = journal(self.site, 0, "none")
        target = self.gateway_target()
        out_path = self.client.project.parent / f"warm-{variant}.out"
        polls: list[tuple[float, int]] = []
        cli_exit = None
        with open(out_path, "w+") as out:
            launched_wall = time.time()  # the journal's clock is wall time (it is not moved in this run)
            t0 = time.perf_counter()
            proc = subprocess.Popen(
                [str(self.client.pxt.exe), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.client.pxt.env,
                cwd=self.client.project,
            )
            try:
                while time.perf_counter() - t0 < WARM_TIMEOUT_S:
                    if not alive(self.emulator_pid):  # else the route stays down until the timeout
                        raise BenchError(f"the emulator exited during the {variant} run")
                    if cli_exit is None and proc.poll() is not None:
                        cli_exit = time.perf_counter() - t0
                    status = try_call(*target, POLL_CALL_TIMEOUT_S)
                    polls.append((time.perf_counter() - t0, status))
                    if cli_exit is not None and status == 200:
                        break
                    time.sleep(POLL_S)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
            out.seek(0)
            output = out.read()
        if proc.returncode != 0:
            raise BenchError(f"pxt {' '.join(args)} failed ({proc.returncode}):\n{tail(output)}")
        if cli_exit is None or polls[-1][1] != 200:
            raise BenchError(
                f"{variant}: within {WARM_TIMEOUT_S:.0f} s the command did not exit or the route not answer"
            )
        times = self._phases(since, launched_wall)
        times["cli_exit"] = cli_exit
        failed = [t for t, status in polls if status != 200]
        times["failed_calls"] = float(len(failed))
        times["down_s"] = (
            (next(t for t, status in polls if status == 200 and t > failed[-1]) - failed[0]) if failed else 0.0
        )
        times["first_200"] = next((t for t, status in polls if status == 200 and t >= times["ready"]), polls[-1][0])
        return times

    def _phases(self, since: int, launched_wall: float) -> dict[str, float]:
        """From the journal: accepted (the control plane took the change), started (old generation stopped, new
        one launched), ready (it answers the emulator's probe), available (service.state of that generation)."""
        kinds = "service.accepted,service.restart_accepted,service.state,db.log"
        deadline = time.monotonic() + JOURNAL_TIMEOUT_S
        while True:
            events, _ = journal(self.site, since, kinds)
            accepted = [e for e in events if e["kind"] in ("service.accepted", "service.restart_accepted")]
            generation = accepted[-1]["data"]["generation"] if accepted else None
            available = [
                e
                for e in events
                if e["kind"] == "service.state"
                and e["data"].get("state") == "AVAILABLE"
                and e["data"].get("generation") == generation
            ]
            if available or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if not accepted or not available:
            raise BenchError(f"the journal shows no accepted and available generation after seq {since}")
        lines = [(e["ts"], e["data"].get("line", "")) for e in events if e["kind"] == "db.log"]
        started = next((ts for ts, line in lines if line.startswith(STARTED)), None)
        ready = next((ts for ts, line in lines if line.startswith(READY)), None)
        if started is None or ready is None:
            raise BenchError("the service's start and ready lines are missing from the journal")
        return {
            "accepted": accepted[-1]["ts"] - launched_wall,
            "started": started - launched_wall,
            "ready": ready - launched_wall,
            "available": available[-1]["ts"] - launched_wall,
            "generation": float(generation),
        }

    def timeline(self, since: int, launched_wall: float) -> list[tuple[float, str]]:
        """The service's own log lines since `since`, without per-request lines: where a start spends its time."""
        events, _ = journal(self.site, since, "db.log")
        return [
            (round(e["ts"] - launched_wall, 3), e["data"]["line"][:160])
            for e in events
            if e["data"].get("service") and not ACCESS_LOG.search(e["data"].get("line", ""))
        ]


# --- gateway overhead ---------------------------------------------------------------------------


def latencies(
    gateway: tuple[str, int, str, dict[str, str]],
    direct: tuple[str, int, str, dict[str, str]],
    requests: int,
    block: int,
) -> dict[str, Any]:
    """`requests` sequential calls each way, in alternating blocks (ABBA order), so that drift in the machine's
    load falls on both sides alike. Latencies in ms of the calls that answered 200 with the expected body."""
    times: dict[str, list[float]] = {"gateway": [], "direct": []}
    errors = {"gateway": 0, "direct": 0}
    targets = {"gateway": gateway, "direct": direct}
    for target in targets.values():  # warm-up, not counted
        for _ in range(WARMUP_CALLS):
            try_call(*target, CALL_TIMEOUT_S)
    blocks = -(-requests // block)
    for i in range(blocks):
        n = min(block, requests - i * block)
        order = ("gateway", "direct") if i % 2 == 0 else ("direct", "gateway")
        for side in order:
            for _ in range(n):
                try:
                    status, elapsed, body = call(*targets[side], CALL_TIMEOUT_S)
                except (OSError, http.client.HTTPException):
                    errors[side] += 1
                    continue
                if status == 200 and body_is_expected(body):
                    times[side].append(elapsed * 1000)
                else:
                    errors[side] += 1
    for side, values in times.items():
        if len(values) < 20:
            raise BenchError(f"only {len(values)} of {requests} {side} calls answered 200: too few to measure")
    stats = {side: summarize_ms(values) for side, values in times.items()}
    g, d = stats["gateway"], stats["direct"]
    return {
        "gateway_ms": g,
        "direct_ms": d,
        "added_ms": {k: round(g[k] - d[k], 3) for k in ("p50", "p95", "mean")},
        "ratio": {k: round(g[k] / d[k], 3) for k in ("p50", "p95", "mean")},
        "errors": errors,
    }


def summarize_ms(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values), 3),
        "p95": round(statistics.quantiles(values, n=20)[-1], 3),
        "mean": round(statistics.fmean(values), 3),
        "min": round(min(values), 3),
        "n": len(values),
    }


# --- the run ------------------------------------------------------------------------------------


VARIANTS = ("restart", "cold", "update")
PHASES = ("first_200", "cli_exit", "accepted", "started", "ready", "available", "down_s", "failed_calls")


def run(exe: Path, args: argparse.Namespace) -> dict[str, Any]:
    extra = ["--runtime", args.runtime]
    if args.runtime == "docker":
        extra += ["--docker-base-image", args.base_image]
    with scratch("services") as root, leftovers(root, root / "state", args.runtime):
        with emulator(root / "state", extra) as endpoints:
            kind = runtime_of(endpoints["site"])
            if kind != args.runtime:
                raise BenchError(f"the emulator runs the {kind} runtime, not {args.runtime}")
            client = Client(exe, root, emulator_env(root / "state"))
            d = Deployment(client, endpoints, args.runtime, root / "state")
            try:
                d.deploy()
                warm: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
                timelines: dict[str, list[tuple[float, str]]] = {}
                for i in range(args.runs):
                    for variant in VARIANTS:
                        time.sleep(args.pause)
                        if variant == "cold":
                            d.kill_spare()
                        _, since = journal(d.site, 0, "none")
                        launched_wall = time.time()
                        times = d.warm(variant, 900 if i % 2 == 0 else 1000)
                        warm[variant].append(times)
                        timelines[variant] = d.timeline(since, launched_wall)  # the last run's, for reading
                        print(
                            f"  warm {i + 1}/{args.runs} {variant:<8} first 200 {times['first_200']:6.2f} s"
                            f"  (command exits {times['cli_exit']:6.2f}, accepted {times['accepted']:5.2f},"
                            f" started {times['started']:5.2f}, ready {times['ready']:5.2f},"
                            f" route down {times['down_s']:5.2f} s)",
                            flush=True,
                        )
                gateway, direct = d.gateway_target(), d.direct_target()
                print(f"  gateway {gateway[0]}:{gateway[1]}{gateway[2]}  direct {direct[0]}:{direct[1]}{direct[2]}")
                overhead = latencies(gateway, direct, args.requests, args.block)
                overhead["direct_target"] = f"{direct[0]}:{direct[1]}{direct[2]}"
                overhead["gateway_target"] = f"{gateway[0]}:{gateway[1]}{gateway[2]}"
            finally:
                client.stop()
    return {"setup_s": d.setup_s, "warm": warm, "timelines": timelines, "gateway": overhead}


def report(
    exe: Path, result: dict[str, Any], args: argparse.Namespace, load: tuple[float, float, float]
) -> dict[str, Any]:
    warm = {
        variant: {
            "median_s": {k: round(statistics.median(r[k] for r in runs), 3) for k in PHASES},
            "runs_s": [{k: round(r[k], 3) for k in (*PHASES, "generation")} for r in runs],
        }
        for variant, runs in result["warm"].items()
    }
    g = result["gateway"]
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(exe, load),
        "client": f"pixeltable=={VERSION}",
        "runtime": args.runtime,
        "settings": {
            "runs": args.runs,
            "requests": args.requests,
            "block": args.block,
            "pause_s": args.pause,
            "base_image": args.base_image if args.runtime == "docker" else None,
        },
        "ratios": {
            "restart_vs_cold": round(
                warm["restart"]["median_s"]["first_200"] / warm["cold"]["median_s"]["first_200"], 3
            ),
            "gateway_p50_ratio": g["ratio"]["p50"],
            "gateway_p95_ratio": g["ratio"]["p95"],
        },
        "warm": warm,
        "gateway": g,
        "setup_s": {k: round(v, 3) for k, v in result["setup_s"].items()},
        "timelines": result["timelines"],
    }


def print_table(rep: dict[str, Any]) -> None:
    m = rep["machine"]
    print()
    print(f"{rep['date']}  nproc {m['nproc']}  Python {m['python']}  client {rep['client']}  runtime {rep['runtime']}")
    print(f"warm path: seconds after the command's launch, median of {rep['settings']['runs']} run(s)")
    print(f"{'':<28}" + "".join(f"{v:>9}" for v in VARIANTS))
    names = {
        "accepted": "change accepted",
        "started": "new generation launched",
        "ready": "ready (emulator probe)",
        "available": "service.state AVAILABLE",
        "first_200": "first 200 of the new gen.",
        "cli_exit": "command exits",
        "down_s": "route down (s)",
        "failed_calls": "failed calls",
    }
    for key, name in names.items():
        print(f"{name:<28}" + "".join(f"{rep['warm'][v]['median_s'][key]:9.2f}" for v in VARIANTS))
    for v in VARIANTS:
        print(f"{v} first 200 per run: " + " ".join(f"{r['first_200']:.2f}" for r in rep["warm"][v]["runs_s"]))
    print(f"restart (from the spare) vs cold: {rep['ratios']['restart_vs_cold']:.2f}")
    g = rep["gateway"]
    print()
    print(f"per request, ms ({g['gateway_ms']['n']} gateway, {g['direct_ms']['n']} direct calls, no keep-alive)")
    print(f"{'':<12}{'p50':>9}{'p95':>9}{'mean':>9}")
    for key in ("gateway_ms", "direct_ms", "added_ms"):
        print(f"{key.removesuffix('_ms'):<12}" + "".join(f"{g[key][k]:9.2f}" for k in ("p50", "p95", "mean")))
    print(f"{'ratio':<12}" + "".join(f"{g['ratio'][k]:9.2f}" for k in ("p50", "p95", "mean")))
    if any(g["errors"].values()):
        print(f"warning: calls that failed or answered otherwise than expected: {g['errors']}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3, help="warm runs of each variant, interleaved (default 3)")
    p.add_argument("--requests", type=int, default=300, help="calls each way for the overhead (default 300)")
    p.add_argument("--block", type=int, default=25, help="calls per block when interleaving (default 25)")
    p.add_argument("--runtime", choices=("docker", "process"), default="docker", help="default docker")
    p.add_argument("--base-image", default=DEFAULT_BASE_IMAGE, help=f"Docker base image (default {DEFAULT_BASE_IMAGE})")
    p.add_argument("--pause", type=float, default=15.0, help="seconds before each warm run (default 15)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})")
    args = p.parse_args(argv)
    if args.runs < 1 or args.requests < 20 or args.block < 1:
        p.error("--runs must be at least 1, --requests at least 20, --block at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    exe = ensure_client()
    load = os.getloadavg()
    print(f"services on the {args.runtime} runtime: {args.runs} warm run(s) of each variant, {args.requests} calls")
    result = run(exe, args)
    rep = report(exe, result, args, load)
    print_table(rep)
    write_report(args.out, rep)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"services.py: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:  # everything is stopped by now: the `finally` blocks ran on the way out
        print("services.py: interrupted", file=sys.stderr)
        sys.exit(130)
