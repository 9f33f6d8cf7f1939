"""The hosted workflow, timed: the real `pxt` client (pixeltable 0.7.21) against the emulator, on a fresh state
directory with an empty build cache (cold: the hosted environment is built), again after a change to the project
files only (warm: the environment is reused), and on another fresh state directory whose build cache the cold path
filled (fresh, warm cache: a new state dir on a machine that built the environment before), next to the same models
applied to a local target by the same client, in the same run.

    python benchmarks/hosted.py [--runs 1] [--runtime process] [--out benchmarks/hosted-results.json]

Every command is bounded by a timeout; the emulator, the client daemons and the embedded Postgres servers they
leave behind are stopped, and the temporary directories removed, on success, on errors, on Ctrl-C and on SIGTERM.
See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.pxt_client import VERSION, Pxt, ensure_client  # noqa: E402

DEFAULT_OUT = HERE / "hosted-results.json"
LOCAL_DIR = "bench"  # the local namespace the reference applies the models to

START_TIMEOUT_S = 60.0  # emulator spawn → endpoints.json
STOP_TIMEOUT_S = 30.0  # after SIGTERM (emulator) or SIGINT (Postgres); then the hard signal
CLI_TIMEOUT_S = 300.0  # emulator env, pxt new/init/service example/daemon start
DB_UPDATE_TIMEOUT_S = 1200.0  # a cold one builds the environment
SCHEMA_TIMEOUT_S = 600.0
INSERT_TIMEOUT_S = 600.0

# The caller's own settings that would steer the client elsewhere; each side gets exactly its own.
STRAY = ("PIXELTABLE_", "PXT_", "PXTCLOUD_", "EMULATOR_", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "HTTP_PROXY")
OWN = ("PIXELTABLE_HOME", "PXT_PORT")
INSERT = (
    "import pixeltable as pxt; t = pxt.get_table({table!r}); "
    "t.insert([{{'title': 'x', 'body': 'y'}}]); print(t.count())"
)

Times = dict[str, float]


class BenchError(RuntimeError):
    pass


# --- processes ----------------------------------------------------------------------------------


def emulator_cmd() -> list[str]:
    exe = shutil.which("emulator")
    return [exe] if exe else [sys.executable, "-m", "emulator"]


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie that nobody reaps counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def stop_postgres(root: Path) -> None:
    """Stop the embedded Postgres servers whose data directory is under `root`: they outlive the processes
    (client daemon, insert script, hosted server) that started them."""
    for pidfile in root.rglob("postmaster.pid"):
        try:
            pid = int(pidfile.read_text().split()[0])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if str(pidfile.parent).encode() not in cmdline:
            continue  # a stale file: that pid is some other process now
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)  # fast shutdown
            if not wait_gone(pid, STOP_TIMEOUT_S):
                os.kill(pid, signal.SIGQUIT)  # immediate shutdown
                wait_gone(pid, STOP_TIMEOUT_S)


@contextlib.contextmanager
def scratch(name: str) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix=f"pxt-emulator-hosted-{name}-"))
    try:
        yield root
    finally:
        stop_postgres(root)
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def emulator(state_dir: Path, extra: Sequence[str] = ()) -> Iterator[dict[str, Any]]:
    """`emulator up` on free ports, `state_dir` (new, or an earlier run's: a restart), `extra` flags; yields
    endpoints.json once it names this process; SIGTERM (then SIGKILL) after."""
    state_dir.mkdir(parents=True, exist_ok=True)
    log_path = state_dir.parent / "emulator.log"
    argv = [*emulator_cmd(), "up", "--site-port", "0", "--auth-port", "0", "--api-port", "0", "--tunnel-port", "0"]
    argv += ["--s3-port", "0"]
    argv += ["--state-dir", str(state_dir), "--no-watch", *extra]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            yield wait_endpoints(proc, state_dir / "endpoints.json", log_path)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)


def wait_endpoints(proc: subprocess.Popen[bytes], path: Path, log_path: Path) -> dict[str, Any]:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"emulator exited with {proc.returncode}:\n{tail(log_path.read_text())}")
        with contextlib.suppress(OSError, ValueError):
            endpoints = json.loads(path.read_text())
            if endpoints.get("pid") == proc.pid:
                return endpoints
        time.sleep(0.05)
    raise BenchError(f"emulator wrote no endpoints.json within {START_TIMEOUT_S:.0f} s:\n{tail(log_path.read_text())}")


def emulator_env(state_dir: Path) -> dict[str, str]:
    r = subprocess.run(
        [*emulator_cmd(), "env", "--state-dir", str(state_dir)], capture_output=True, text=True, timeout=CLI_TIMEOUT_S
    )
    env = dict(re.findall(r"^export (\w+)=(\S+)$", r.stdout, re.M))
    if r.returncode != 0 or "PIXELTABLE_API_URL" not in env:
        raise BenchError(f"emulator env failed ({r.returncode}):\n{tail(r.stdout + r.stderr)}")
    return env


def db_generations(site: str) -> dict[int, tuple[float, bool]]:
    """Per generation, from the emulator's journal: seconds from the update's acceptance to AVAILABLE (the
    server side of `db update`: environment, project, server start), and whether the environment was rebuilt."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
    try:
        with opener.open(f"{site}/_emulator/journal?kinds=db.update_accepted,db.state&limit=5000", timeout=30) as r:
            events = json.load(r)["events"]
    except (OSError, ValueError, KeyError) as e:
        raise BenchError(f"the emulator's journal could not be read: {e}") from e
    accepted = {e["data"]["generation"]: e["ts"] for e in events if e["kind"] == "db.update_accepted"}
    return {
        e["data"]["generation"]: (e["ts"] - accepted[e["data"]["generation"]], bool(e["data"]["rebuilt"]))
        for e in events
        if e["kind"] == "db.state" and "rebuilt" in e["data"] and e["data"].get("generation") in accepted
    }


def tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# --- the client ---------------------------------------------------------------------------------


class Client:
    """`pxt` and the client venv's python, run in one project directory with its own home and daemon port."""

    def __init__(self, exe: Path, root: Path, env: dict[str, str]) -> None:
        self.pxt = Pxt(exe, root / "pxt-home", env)
        kept = self.pxt.env.items()
        self.pxt.env = {k: v for k, v in kept if k in env or k in OWN or not k.upper().startswith(STRAY)}
        self.python = exe.parent / "python"
        self.project = root / "project"
        self.project.mkdir()

    def run(self, *args: str, timeout: float = CLI_TIMEOUT_S) -> tuple[float, str]:
        """Wall time and output of `pxt ARGS`; a failure or a timeout is a BenchError."""
        return self._timed([str(self.pxt.exe), *args], timeout, "pxt " + " ".join(args))

    def insert(self, table: str) -> tuple[float, int]:
        """Wall time of the insert script (a fresh interpreter: import, connect, insert, count) and the count."""
        elapsed, out = self._timed([str(self.python), "-c", INSERT.format(table=table)], INSERT_TIMEOUT_S, "insert")
        counts = re.findall(r"^(\d+)$", out, re.M)
        if not counts:
            raise BenchError(f"the insert script printed no count:\n{tail(out)}")
        return elapsed, int(counts[-1])

    def _timed(self, argv: list[str], timeout: float, what: str) -> tuple[float, str]:
        start = time.perf_counter()
        try:
            r = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, env=self.pxt.env, cwd=self.project
            )
        except subprocess.TimeoutExpired as e:
            raise BenchError(f"{what}: no answer within {timeout:.0f} s") from e
        elapsed = time.perf_counter() - start
        # stdout last: the count the insert script prints is its last line
        out = r.stderr + r.stdout
        if r.returncode != 0:
            raise BenchError(f"{what} failed ({r.returncode}):\n{tail(out)}")
        return elapsed, out

    def stop(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            self.pxt.stop_daemon()


def measure(client: Client, label: str, steps: Sequence[tuple[str, tuple[str, ...], float]], table: str) -> Times:
    """Runs `steps` then the insert, each timed; `total` is their sum."""
    times: Times = {}
    for name, args, timeout in steps:
        times[name], _ = client.run(*args, timeout=timeout)
        print(f"  {label:<6} {name:<14} {times[name]:8.2f} s", flush=True)
    times["insert"], rows = client.insert(table)
    print(f"  {label:<6} {'insert':<14} {times['insert']:8.2f} s  ({rows} rows)", flush=True)
    times["total"] = sum(times.values())
    return times


def emulator_flags(runtime: str, cache: Path) -> list[str]:
    """The flags every emulator of a run gets: the runtime, and the build cache of that path."""
    return ["--runtime", runtime, "--build-cache", str(cache)]


INIT_FIRST = False  # --init-first: the project made before `pxt new` (the README makes it after)


def start_trial(client: Client, endpoints: dict[str, Any]) -> str:
    """Untimed: `pxt new` (a trial; it starts the client's daemon), `pxt init`, `pxt service example`; the db.
    With INIT_FIRST the project is made first, so the daemon `pxt new` starts already knows it."""
    if INIT_FIRST:
        client.run("init")
        client.run("service", "example", "--out", "app.py")
    _, out = client.run("new")
    m = re.search(r"organization (agent-[0-9a-f]{6})", out)
    if not m:
        raise BenchError(f"pxt new named no organization:\n{tail(out)}")
    db = f"pxt://{m.group(1)}:main"
    print(f"  trial {db} on {endpoints['api']}", flush=True)
    if not INIT_FIRST:
        client.run("init")
        client.run("service", "example", "--out", "app.py")
    return db


def apply_steps(db: str, *extra: str) -> list[tuple[str, tuple[str, ...], float]]:
    return [
        ("db_update", ("db", "update", db, "-f", *extra), DB_UPDATE_TIMEOUT_S),
        ("schema_update", ("schema", "update", "app.py", db), SCHEMA_TIMEOUT_S),
    ]


def hosted_run(exe: Path, pause: float, runtime: str, cache: Path) -> tuple[Times, Times, dict[str, bool]]:
    """One emulator on a fresh state directory and the build cache `cache` (empty): the cold path, which fills
    it, then the warm path."""
    with scratch("cloud") as root, emulator(root / "state", emulator_flags(runtime, cache)) as endpoints:
        client = Client(exe, root, emulator_env(root / "state"))
        try:
            db = start_trial(client, endpoints)
            cold = measure(client, "cold", apply_steps(db, "--add-config-entry"), f"{db}/docs")
            app = client.project / "app.py"
            app.write_text(app.read_text() + "\n# a change to the project files only\n")
            time.sleep(pause)  # a developer's edit: the database's spare prepare_project imports meanwhile
            warm = measure(client, "warm", apply_steps(db), f"{db}/docs")
            generations = db_generations(endpoints["site"])
            checks: dict[str, bool] = {}
            for path, times, generation in (("cold", cold, 1), ("warm", warm, 2)):
                if generation not in generations:
                    raise BenchError(f"the emulator's journal has no outcome for generation {generation}")
                times["db_update_server"], checks[f"{path}_rebuilt_environment"] = generations[generation]
        finally:
            client.stop()
    return cold, warm, checks


def fresh_run(exe: Path, runtime: str, cache: Path) -> tuple[Times, dict[str, bool], dict[str, Any]]:
    """Another emulator on a new state directory, with the build cache an earlier emulator of the same project
    filled: the first deployment of a new state dir on a machine that built the environment before. Also the
    server side's phases, from the journal's db.log lines (see `phases`)."""
    with scratch("fresh") as root, emulator(root / "state", emulator_flags(runtime, cache)) as endpoints:
        client = Client(exe, root, emulator_env(root / "state"))
        try:
            db = start_trial(client, endpoints)
            started = time.time()  # the journal's clock: where `db update` began, for the client's share
            times = measure(client, "fresh", apply_steps(db, "--add-config-entry"), f"{db}/docs")
            generations = db_generations(endpoints["site"])
            if 1 not in generations:
                raise BenchError("the emulator's journal has no outcome for generation 1")
            times["db_update_server"], rebuilt = generations[1]
            accepted, lines = db_log(endpoints["site"])
            cached = any("taken from the shared build cache" in text for _, text in lines)
            breakdown = phases(lines, root / "state", accepted)
            breakdown["client"] = client_side(endpoints["site"], started, times["db_update"])
        finally:
            client.stop()
    return times, {"fresh_rebuilt_environment": rebuilt, "fresh_taken_from_cache": cached}, breakdown


def db_log(site: str) -> tuple[float | None, list[tuple[float, str]]]:
    """When the update (generation 1) was accepted, and the database's log lines (journal `db.log` events) as
    (seconds after that, text)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    url = f"{site}/_emulator/journal?kinds=db.update_accepted,db.log,db.state&limit=5000"
    try:
        with opener.open(url, timeout=30) as r:
            events = json.load(r)["events"]
    except (OSError, ValueError, KeyError) as e:
        raise BenchError(f"the emulator's journal could not be read: {e}") from e
    start = next((e["ts"] for e in events if e["kind"] == "db.update_accepted"), None)
    if start is None:
        return None, []
    out: list[tuple[float, str]] = []
    for e in events:
        if e["kind"] == "db.log":
            out.append((round(e["ts"] - start, 3), str(e["data"].get("line") or e["data"].get("text") or e["data"])))
        elif e["kind"] == "db.state":
            out.append((round(e["ts"] - start, 3), f"[db.state] {e['data'].get('state')}"))
    return start, out


def client_side(site: str, started: float, duration: float) -> dict[str, Any]:
    """`db update` from the client's side, in seconds after the command began: its first request to the emulator,
    the update's acceptance, the database AVAILABLE, the command's exit; and each request it made meanwhile."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    url = f"{site}/_emulator/journal?kinds=http.request,db.update_accepted,db.state&limit=5000"
    try:
        with opener.open(url, timeout=30) as r:
            events = [e for e in json.load(r)["events"] if started <= e["ts"] <= started + duration + 1]
    except (OSError, ValueError, KeyError) as e:
        raise BenchError(f"the emulator's journal could not be read: {e}") from e

    def at(kind: str, test: Any = lambda _: True) -> float | None:
        hit = next((e["ts"] for e in events if e["kind"] == kind and test(e["data"])), None)
        return None if hit is None else round(hit - started, 3)

    requests = [
        f"{e['ts'] - started:7.3f}  {e['data'].get('method', '')} {e['data'].get('path', e.get('subject', ''))} "
        f"{e['data'].get('status', '')}"
        for e in events
        if e["kind"] == "http.request"
    ]
    return {
        "first_request_s": at("http.request"),
        "update_accepted_s": at("db.update_accepted"),
        "available_s": at("db.state", lambda d: d.get("state") == "AVAILABLE"),
        "command_exit_s": round(duration, 3),
        "requests": requests,
    }


PHASES = (  # (phase, the first log line that ends it), in the order they happen
    ("environment", re.compile(r"environment .*(taken from the shared build cache|built|unchanged)", re.I)),
    ("server_started", re.compile(r"the Pixeltable server started", re.I)),
    ("postgres_connected", re.compile(r"Connected to Pixeltable database", re.I)),
    ("server_health", re.compile(r"server is ready|\[db\.state\] AVAILABLE", re.I)),
)


def phases(lines: list[tuple[float, str]], state: Path, accepted: float | None) -> dict[str, Any]:
    """When each phase of the server side ended (seconds after the update was accepted), from the database's log,
    and the hosted Postgres's own log timestamps (initdb to ready) where its log is under the state dir."""
    ends: dict[str, float] = {}
    for name, pattern in PHASES:
        hit = next((t for t, text in lines if pattern.search(text)), None)
        if hit is not None:
            ends[name] = hit
    log = [f"{t:7.3f}  {text}" for t, text in lines]
    return {"ends_s": ends, "postgres": postgres_times(state, accepted), "log": log}


def postgres_times(state: Path, accepted: float | None) -> dict[str, Any]:
    """From the hosted Postgres's own log (`pgdata/log`, which `pg_ctl -l` writes): its first line (the server
    starting, after `initdb`) and `ready to accept connections`, in seconds after the update was accepted."""
    found: dict[str, Any] = {}
    for path in sorted(state.rglob("pgdata/log")):
        with contextlib.suppress(OSError):
            text = path.read_text(errors="replace")
            stamp = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) (UTC|GMT)"
            first = re.search(rf"^{stamp}", text, re.M)
            ready = re.search(rf"^{stamp}.*ready to accept connections", text, re.M)
            for name, m in (("log_starts_s", first), ("ready_s", ready)):
                if m and accepted is not None:
                    when = datetime.fromisoformat(m.group(1)).replace(tzinfo=UTC).timestamp()
                    found[name] = round(when - accepted, 3)
    return found


def local_run(exe: Path) -> Times:
    """The same models, applied by the same client to a local namespace: no emulator, no emulator env."""
    with scratch("local") as root:
        client = Client(exe, root, {})
        try:
            client.run("init")
            client.run("service", "example", "--out", "app.py")
            # untimed, as on the hosted side, where `pxt new` has started the daemon before the timed steps
            client.run("daemon", "start")
            steps = [("schema_update", ("schema", "update", "app.py", LOCAL_DIR), SCHEMA_TIMEOUT_S)]
            return measure(client, "local", steps, f"{LOCAL_DIR}/docs")
        finally:
            client.stop()


# --- report -------------------------------------------------------------------------------------


def machine_info(exe: Path, load_at_start: tuple[float, float, float]) -> dict[str, Any]:
    cfg = (exe.parent.parent / "pyvenv.cfg").read_text()
    client_python = re.search(r"^version(?:_info)?\s*=\s*(\S+)", cfg, re.M)
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "client_python": client_python.group(1) if client_python else None,
        "platform": platform.platform(),
        "loadavg_at_start": [round(x, 2) for x in load_at_start],
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def summarize(
    exe: Path,
    runs: dict[str, list[Times]],
    checks: list[dict[str, bool]],
    breakdowns: list[dict[str, Any]],
    args: argparse.Namespace,
    load_at_start: tuple[float, float, float],
) -> dict[str, Any]:
    medians = {path: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for path, rs in runs.items()}
    local_total = medians["local"]["total"]
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(exe, load_at_start),
        "client": f"pixeltable=={VERSION}",
        "settings": {"runs": args.runs, "pause_s": args.pause, "runtime": args.runtime, "init_first": args.init_first},
        "ratios": {
            "cold_ratio": round(medians["cold"]["total"] / local_total, 3),
            "fresh_warm_cache_ratio": round(medians["fresh"]["total"] / local_total, 3),
            "warm_ratio": round(medians["warm"]["total"] / local_total, 3),
        },
        "aims": {"fresh_warm_cache_ratio": 1.5, "warm_ratio": 1.5},
        "medians_s": {path: {k: round(v, 3) for k, v in m.items()} for path, m in medians.items()},
        "runs_s": {path: [{k: round(v, 3) for k, v in r.items()} for r in rs] for path, rs in runs.items()},
        "checks": checks,
        "fresh_server_side": breakdowns,
    }


PATHS = ("cold", "fresh", "warm", "local")


def print_table(report: dict[str, Any]) -> None:
    med, ratios, m = report["medians_s"], report["ratios"], report["machine"]
    print()
    print(f"{report['date']}  nproc {m['nproc']}  Python {m['python']}  client {report['client']}")
    print(f"seconds, median of {report['settings']['runs']} run(s); ratio = total / local total")
    print("cold: new state dir, empty build cache; fresh: new state dir, warm cache;")
    print("warm: the cold path's state dir, project changed")
    print()
    print(f"{'step':<16}" + "".join(f"{p:>9}" for p in PATHS))
    steps = ("db_update", "db update"), ("db_update_server", "  server side"), ("schema_update", "schema update")
    for key, name in (*steps, ("insert", "insert")):
        cells = [f"{med[p][key]:9.2f}" if key in med[p] else f"{'-':>9}" for p in PATHS]
        print(f"{name:<16}{''.join(cells)}")
    totals = "".join(f"{med[p]['total']:9.2f}" for p in PATHS)
    print(f"{'total':<16}{totals}")
    cells = (ratios["cold_ratio"], ratios["fresh_warm_cache_ratio"], ratios["warm_ratio"])
    print(f"{'ratio to local':<16}" + "".join(f"{r:9.2f}" for r in cells) + f"{'(ref)':>9}")
    if report["settings"]["runs"] > 1:
        for path, rs in report["runs_s"].items():
            print(f"{path} totals per run: " + " ".join(f"{r['total']:.2f}" for r in rs))
    for i, c in enumerate(report["checks"], 1):
        expected = c["cold_rebuilt_environment"] and not c["warm_rebuilt_environment"]
        expected = expected and not c["fresh_rebuilt_environment"] and c["fresh_taken_from_cache"]
        if not expected:
            print(f"warning: run {i}: the environment was not built cold only and reused otherwise: {c}")
    if report["fresh_server_side"]:
        last = report["fresh_server_side"][-1]
        print(f"fresh path, server side (last run), phases ended at (s after accepted): {last['ends_s']}")


# --- main ---------------------------------------------------------------------------------------


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the `finally` blocks, which stop everything


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=1, help="runs of each path, interleaved (default 1; a cold one is long)")
    p.add_argument("--pause", type=float, default=10.0, help="seconds between the cold and the warm path (default 10)")
    p.add_argument(
        "--runtime",
        choices=("process", "docker"),
        default="process",
        help="where the hosted database runs (default process, as the recorded figures)",
    )
    p.add_argument(
        "--init-first",
        action="store_true",
        help="make the project (pxt init, pxt service example) before pxt new rather than after it",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    global INIT_FIRST
    args = parse_args(argv)
    INIT_FIRST = args.init_first
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    exe = ensure_client()
    load_at_start = os.getloadavg()
    runs: dict[str, list[Times]] = {path: [] for path in PATHS}
    checks: list[dict[str, bool]] = []
    breakdowns: list[dict[str, Any]] = []
    for i in range(1, args.runs + 1):
        # One build cache per run, empty for the cold path, which fills it for the fresh path.
        with scratch("cache") as cache:
            print(f"run {i}/{args.runs}: hosted, new state dir, empty build cache (cold), then warm", flush=True)
            cold, warm, check = hosted_run(exe, args.pause, args.runtime, cache)
            print(f"run {i}/{args.runs}: local reference", flush=True)
            runs["local"].append(local_run(exe))
            print(f"run {i}/{args.runs}: hosted, new state dir, the build cache the cold path filled", flush=True)
            fresh, fresh_check, breakdown = fresh_run(exe, args.runtime, cache)
        runs["cold"].append(cold)
        runs["warm"].append(warm)
        runs["fresh"].append(fresh)
        checks.append({**check, **fresh_check})
        breakdowns.append(breakdown)
    report = summarize(exe, runs, checks, breakdowns, args, load_at_start)
    print_table(report)
    write_report(args.out, report)
    return 0


def write_report(out: Path, report: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"hosted.py: {e}", file=sys.stderr)
        sys.exit(1)
