"""Throughput and start-up of the emulator, as ratios to a bare Litestar app measured in the same run.

    python benchmarks/load.py [--seconds 5] [--concurrency 32] [--out benchmarks/results.json]

Starts `benchmarks/bare_app.py` (the reference) and `emulator up` as subprocesses, each with its own
temporary state directory, loads them with `wrk` when it is on PATH (else with the built-in asyncio
client), and reports every figure next to the reference measured on the same machine, minutes
apart, so that a slow or busy machine moves both sides alike. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import contextlib
import importlib.util
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, Protocol
from urllib.parse import quote, urlencode, urlsplit

HERE = Path(__file__).resolve().parent
BARE_APP = HERE / "bare_app.py"
DEFAULT_OUT = HERE / "results.json"

QUERIES = (
    "how do I create a trial",
    "embedding index",
    "rate limit headers",
    "pxt db update",
    "how do I deploy to a trial org",
    "what does claim_url do",
    "api key authentication",
    "pxt org create",
    "computed columns",
    "how long does a trial last before it expires",
)

READY_TIMEOUT_S = 60.0  # a server that is not answering /health by then has failed to start
POLL_S = 0.010  # start-up is polled this often
STOP_TIMEOUT_S = 10.0  # after SIGTERM; then SIGKILL
PROBE_TIMEOUT_S = 1.0  # one readiness probe
MEASURE_GRACE_S = 30.0  # a measurement that overruns its duration by this much is abandoned

HEALTH_AIM = 0.95
ASK_AIM = 0.6
STARTUP_AIM_S = 0.5  # issue 30: a suite starts many (issue 15 asked 0.8)
RSS_AIM_MIB = 64.0  # issue 30 (issue 15 asked 80)
TOKEN_AIM_RPS = 2000.0
TOKEN_CONCURRENCY = 16  # connections for the token exchanges (the figure was taken with 16)
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


# --- the servers under test ---------------------------------------------------------------------


class ServerError(RuntimeError):
    pass


class Server:
    """A server subprocess: spawned on entry, stopped on exit (SIGTERM, then SIGKILL), always.

    `find_url` says where it serves once it knows (from its stdout or its endpoints.json), else None.
    """

    def __init__(self, name: str, argv: list[str], workdir: Path, *, url_on_stdout: bool) -> None:
        self.name = name
        self.argv = argv
        self.workdir = workdir
        self.log_path = workdir / f"{name}.log"
        self.url_on_stdout = url_on_stdout
        self.proc: subprocess.Popen[bytes] | None = None
        self.spawned_at = 0.0
        self._stdout_url: str | None = None

    # -- life cycle

    def __enter__(self) -> Server:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.spawned_at = time.perf_counter()
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if self.url_on_stdout else log,
                stderr=log,
                start_new_session=True,  # a Ctrl-C reaches us only; we stop it ourselves
            )
        if self.url_on_stdout:
            threading.Thread(target=self._read_stdout, name=f"{self.name}-stdout", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            print(
                f"  {self.name}: did not stop within {STOP_TIMEOUT_S:.0f} s of SIGTERM; killing it",
                flush=True,
            )
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)

    def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with self.proc.stdout:  # keeps draining, so the pipe never fills
            for line in self.proc.stdout:
                if line.startswith(b"URL ") and self._stdout_url is None:
                    self._stdout_url = line[4:].strip().decode()

    # -- readiness

    def find_url(self) -> str | None:
        if self.url_on_stdout:
            return self._stdout_url
        try:
            return json.loads((self.workdir / "state" / "endpoints.json").read_text())["site"]
        except (OSError, ValueError, KeyError):
            return None

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> tuple[str, float]:
        """Poll every 10 ms until GET /health answers 200; return (url, seconds since the spawn)."""
        assert self.proc is not None
        deadline = self.spawned_at + timeout
        url: str | None = None
        while True:
            if self.proc.poll() is not None:
                raise ServerError(f"{self.name} exited with {self.proc.returncode} at start\n{self.log_tail()}")
            url = url or self.find_url()
            if url is not None and health_ok(url):
                return url, time.perf_counter() - self.spawned_at
            now = time.perf_counter()
            if now >= deadline:
                raise ServerError(f"{self.name} did not answer /health within {timeout:g} s\n{self.log_tail()}")
            time.sleep(min(POLL_S, deadline - now))

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return "  (no log)"
        return "\n".join(f"  | {line}" for line in text) or "  (empty log)"


def emulator_argv() -> list[str]:
    """`emulator` from this interpreter's environment if it is there, else from PATH, else `-m emulator`."""
    sibling = Path(sys.executable).with_name("emulator")
    if sibling.is_file() and os.access(sibling, os.X_OK):
        return [str(sibling)]
    found = shutil.which("emulator")
    return [found] if found else [sys.executable, "-m", "emulator"]


def compile_emulator() -> None:
    """The emulator's bytecode, as installing it writes it (pip compiles a package's modules; an editable install
    leaves that to the first run, and PYTHONDONTWRITEBYTECODE to none): else every measured start compiles the
    emulator's 133 modules again (about 0.1 s), which the bare app's installed libraries never do."""
    spec = importlib.util.find_spec("emulator")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            compileall.compile_dir(folder, quiet=1)


def bare_server(workdir: Path) -> Server:
    return Server("bare", [sys.executable, str(BARE_APP)], workdir, url_on_stdout=True)


def emulator_server(workdir: Path) -> Server:
    argv = [
        *emulator_argv(),
        "up",
        "--site-port",
        "0",
        "--auth-port",
        "0",
        "--api-port",
        "0",
        "--tunnel-port",
        "0",
        "--s3-port",
        "0",
        "--state-dir",
        str(workdir / "state"),
        "--ask-rate-limit",
        "100000000",
        "--no-watch",
    ]
    return Server("emulator", argv, workdir, url_on_stdout=False)


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None, url
    return parts.hostname, parts.port


def health_ok(url: str) -> bool:
    """One GET /health on a fresh connection: True on a 200, False on anything else (refused, timeout...)."""
    host, port = _host_port(url)
    request = f"GET /health HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode()
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as sock:
            sock.sendall(request)
            head = b""
            while b"\r\n" not in head:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                head += chunk
    except OSError:
        return False
    return head.startswith((b"HTTP/1.1 200 ", b"HTTP/1.0 200 "))


def check_answers(url: str) -> None:
    """Fail early if /ask does not answer the way the load assumes (200 with results)."""
    for data in (None, json.dumps({"query": QUERIES[0]}).encode()):
        target = url + "/ask" + ("" if data else "?query=" + quote(QUERIES[0]))
        req = urllib.request.Request(target, data=data, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = json.loads(resp.read())
        if resp.status != 200 or not body.get("results"):
            raise ServerError(f"{req.get_method()} /ask answered {resp.status} without results: {body}")


# --- workloads and load generators -------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """What one measurement sends: the requests, taken in turn by every connection."""

    label: str
    method: str
    requests: tuple[tuple[str, bytes | None], ...]  # (path with query, body)
    content_type: str = "application/json"


HEALTH = Workload("GET /health", "GET", (("/health", None),))
ASK_GET = Workload("GET /ask", "GET", tuple(("/ask?query=" + quote(q), None) for q in QUERIES))
ASK_POST = Workload("POST /ask", "POST", tuple(("/ask", json.dumps({"query": q}).encode()) for q in QUERIES))


@dataclass
class Sample:
    ok: int  # responses with a 2xx/3xx status
    errors: int  # other statuses, socket errors, timeouts
    seconds: float

    @property
    def rps(self) -> float:
        return self.ok / self.seconds if self.seconds > 0 else 0.0


class LoadClient(Protocol):
    name: str

    def run(self, url: str, workload: Workload, seconds: int, concurrency: int) -> Sample: ...


class WrkClient:
    """wrk, one thread (the server under test gets the other core); a Lua script supplies rotating
    requests and prints a machine-readable summary."""

    def __init__(self, exe: str, workdir: Path) -> None:
        self.exe = exe
        self.workdir = workdir
        version = subprocess.run([exe, "-v"], capture_output=True, text=True, timeout=10, check=False)
        first = (version.stdout or version.stderr).strip().splitlines()
        self.name = " ".join(first[0].split()[:2]) if first else "wrk"
        self._scripts: dict[str, Path] = {}

    def run(self, url: str, workload: Workload, seconds: int, concurrency: int) -> Sample:
        script = self._script(workload)
        path = workload.requests[0][0] if len(workload.requests) == 1 else "/"
        argv = [
            self.exe,
            "-t1",
            f"-c{concurrency}",
            f"-d{seconds}s",
            "--timeout",
            "10s",
            "-s",
            str(script),
            url + path,
        ]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + MEASURE_GRACE_S, check=False)
        for line in proc.stdout.splitlines():
            if line.startswith("BENCH "):
                s = json.loads(line[6:])
                errors = s["connect"] + s["read"] + s["write"] + s["timeout"] + s["status"]
                return Sample(ok=s["requests"] - s["status"], errors=errors, seconds=s["duration_us"] / 1e6)
        raise RuntimeError(f"wrk printed no summary (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")

    def _script(self, workload: Workload) -> Path:
        if workload.label not in self._scripts:
            path = self.workdir / f"wrk-{len(self._scripts)}.lua"
            path.write_text(_wrk_lua(workload))
            self._scripts[workload.label] = path
        return self._scripts[workload.label]


_WRK_DONE = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH {"requests": %d, "duration_us": %d, "connect": %d, "read": %d, ' ..
    '"write": %d, "status": %d, "timeout": %d}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout))
end
"""


def _lua_str(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return '"' + "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:03d}" for b in raw) + '"'


def _wrk_lua(workload: Workload) -> str:
    if len(workload.requests) == 1 and workload.requests[0][1] is None:
        return _WRK_DONE  # wrk's own fixed request: no Lua per request
    specs = []
    for path, body in workload.requests:
        headers = f'{{["Content-Type"] = {_lua_str(workload.content_type)}}}' if body is not None else "{}"
        lua_body = _lua_str(body) if body is not None else "nil"
        specs.append(f"  {{{_lua_str(workload.method)}, {_lua_str(path)}, {headers}, {lua_body}}},")
    return (
        "local specs = {\n" + "\n".join(specs) + "\n}\n"
        "local reqs = {}\n"
        "local n = 0\n"
        "init = function(args)\n"
        "  for i, s in ipairs(specs) do reqs[i] = wrk.format(s[1], s[2], s[3], s[4]) end\n"
        "end\n"
        "request = function()\n"
        "  n = n + 1\n"
        "  return reqs[(n % #reqs) + 1]\n"
        "end\n" + _WRK_DONE
    )


class AsyncioClient:
    """N keep-alive HTTP/1.1 connections on a uvloop loop, each sending its next request as soon as it
    has read the whole response (Content-Length or chunked)."""

    name = "asyncio (built-in, uvloop)"

    def run(self, url: str, workload: Workload, seconds: int, concurrency: int) -> Sample:
        host, port = _host_port(url)
        raw = [
            _raw_request(workload.method, path, body, f"{host}:{port}", workload.content_type)
            for path, body in workload.requests
        ]
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            return runner.run(asyncio.wait_for(_load(host, port, raw, seconds, concurrency), seconds + MEASURE_GRACE_S))


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _raw_request(method: str, path: str, body: bytes | None, host: str, content_type: str) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nAccept: */*\r\n"
    if body is None:
        return (head + "\r\n").encode()
    return (head + f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """Read one whole response; return (status, whether the server closes the connection after it)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    close = b"\r\nconnection: close" in lower
    at = lower.find(b"\r\ncontent-length:")
    if at >= 0:
        end = lower.index(b"\r\n", at + 2)
        length = int(lower[at + 17 : end])
        if length:
            await reader.readexactly(length)
    elif b"chunked" in lower and b"\r\ntransfer-encoding:" in lower:
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, then the blank line
                    pass
                break
            await reader.readexactly(size + 2)
    elif not (status < 200 or status in (204, 304)):
        await reader.read()  # no framing: the body runs to the end of the connection
        close = True
    return status, close


async def _load(host: str, port: int, raw: list[bytes], seconds: int, concurrency: int) -> Sample:
    ok = [0] * concurrency
    errors = [0] * concurrency
    writers: list[asyncio.StreamWriter | None] = [None] * concurrency

    async def connect(i: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
        writers[i] = writer
        return reader, writer

    async def worker(i: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        k = i % len(raw)
        while True:
            try:
                writer.write(raw[k])
                status, close = await _read_response(reader)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
                errors[i] += 1
                writer.close()
                await asyncio.sleep(0.01)  # a dead server must not turn this into a busy loop
                with contextlib.suppress(OSError, TimeoutError):
                    reader, writer = await connect(i)
                continue
            if status < 400:
                ok[i] += 1
            else:
                errors[i] += 1
            k = (k + 1) % len(raw)
            if close:
                writer.close()
                reader, writer = await connect(i)

    conns = await asyncio.gather(*(connect(i) for i in range(concurrency)))
    loop = asyncio.get_running_loop()
    started = loop.time()
    tasks = [asyncio.create_task(worker(i, r, w)) for i, (r, w) in enumerate(conns)]
    try:
        await asyncio.sleep(seconds)
        done, elapsed = sum(ok), loop.time() - started
        failed = sum(errors) + sum(1 for t in tasks if t.done())
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for w in writers:
            if w is not None:
                w.close()
    return Sample(ok=done, errors=failed, seconds=elapsed)


def pick_client(choice: str, workdir: Path) -> LoadClient:
    exe = shutil.which("wrk")
    if choice == "wrk" and exe is None:
        raise SystemExit("load.py: --client wrk, but wrk is not on PATH")
    if choice in ("auto", "wrk") and exe is not None:
        return WrkClient(exe, workdir)
    return AsyncioClient()


# --- the benchmark ---------------------------------------------------------------------------------


@dataclass
class Results:
    load: dict[str, list[Sample]] = field(default_factory=dict)
    startup: dict[str, list[float]] = field(default_factory=dict)
    rss: dict[str, list[float]] = field(default_factory=dict)  # MiB, one second after each start

    def rps(self, key: str) -> list[float]:
        return [s.rps for s in self.load[key]]


def rss_mib(pid: int) -> float:
    """The resident set of a process, in MiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure_startup(tmp: Path, runs: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall time from spawn to the first 200 on /health, each start with a fresh state directory; and the
    resident memory one second later (idle: nothing has called it but the probe).

    One unmeasured start of each comes first, so the file cache is warm for every measured one."""
    makers: dict[str, Callable[[Path], Server]] = {"bare": bare_server, "emulator": emulator_server}
    times: dict[str, list[float]] = {name: [] for name in makers}
    rss: dict[str, list[float]] = {name: [] for name in makers}
    for run in range(runs + 1):
        for name, make in makers.items():
            with make(tmp / f"startup-{name}-{run}") as server:
                _, seconds = server.wait_ready()
                time.sleep(1.0)
                assert server.proc is not None
                resident = rss_mib(server.proc.pid)
            if run:
                times[name].append(seconds)
                rss[name].append(resident)
                print(f"  start-up {name:<8} run {run}: {seconds * 1000:7.1f} ms, {resident:5.1f} MiB", flush=True)
    return times, rss


def token_workload(auth_url: str) -> Workload:
    """A registration's assertion exchanged for an access token (RFC 7523), the same form every time, as an agent
    sends it after each 401: one ES256 verification (remembered after the first), one ES256 signature, one row."""
    req = urllib.request.Request(
        auth_url + "/agent/identity",
        data=json.dumps({"type": "anonymous"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assertion = json.loads(resp.read())["identity"]["assertion"]
    form = urlencode({"grant_type": JWT_BEARER, "assertion": assertion}).encode()
    return Workload("POST /oauth2/token", "POST", (("/oauth2/token", form),), "application/x-www-form-urlencoded")


def measure_load(
    client: LoadClient,
    bare_url: str,
    emu_url: str,
    auth_url: str,
    seconds: int,
    warmup: int,
    concurrency: int,
    runs: int,
) -> dict[str, list[Sample]]:
    token = token_workload(auth_url)
    plan = [
        ("bare_health", bare_url, HEALTH, concurrency),
        ("emu_health", emu_url, HEALTH, concurrency),
        ("emu_ask_get", emu_url, ASK_GET, concurrency),
        ("emu_ask_post", emu_url, ASK_POST, concurrency),
        ("emu_token", auth_url, token, TOKEN_CONCURRENCY),
    ]
    samples: dict[str, list[Sample]] = {key: [] for key, _, _, _ in plan}
    for run in range(1, runs + 1):
        for key, url, workload, conns in plan:
            if warmup > 0:
                client.run(url, workload, warmup, conns)
            sample = client.run(url, workload, seconds, conns)
            samples[key].append(sample)
            note = f"  ({sample.errors} errors)" if sample.errors else ""
            print(f"  run {run}  {key:<13} {sample.rps:9.0f} req/s{note}", flush=True)
    return samples


def summarize(results: Results, args: argparse.Namespace, client: LoadClient) -> dict[str, Any]:
    med = {key: statistics.median(results.rps(key)) for key in results.load}
    start = {name: statistics.median(values) for name, values in results.startup.items()}
    rss = {name: statistics.median(values) for name, values in results.rss.items()}
    ref = med["bare_health"]

    def ratio(value: float, reference: float) -> float | None:
        return round(value / reference, 3) if reference > 0 else None

    ratios = {
        "health_ratio": ratio(med["emu_health"], ref),
        "ask_get_ratio": ratio(med["emu_ask_get"], ref),
        "ask_post_ratio": ratio(med["emu_ask_post"], ref),
        "token_ratio": ratio(med["emu_token"], ref),
        "startup_ratio": ratio(start["emulator"], start["bare"]),
        "rss_ratio": ratio(rss["emulator"], rss["bare"]),
    }
    aims = {
        "health_ratio": {"aim": f">= {HEALTH_AIM}", "met": (ratios["health_ratio"] or 0) >= HEALTH_AIM},
        "ask_get_ratio": {"aim": f">= {ASK_AIM}", "met": (ratios["ask_get_ratio"] or 0) >= ASK_AIM},
        "ask_post_ratio": {"aim": f">= {ASK_AIM}", "met": (ratios["ask_post_ratio"] or 0) >= ASK_AIM},
        "emu_startup_s": {"aim": f"<= {STARTUP_AIM_S}", "met": start["emulator"] <= STARTUP_AIM_S},
        "emu_rss_mib": {"aim": f"<= {RSS_AIM_MIB:g}", "met": rss["emulator"] <= RSS_AIM_MIB},
        "emu_token_rps": {"aim": f">= {TOKEN_AIM_RPS:g}", "met": med["emu_token"] >= TOKEN_AIM_RPS},
    }
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "client": client.name,
        "settings": {
            "seconds": args.seconds,
            "warmup_seconds": args.warmup,
            "concurrency": args.concurrency,
            "runs": args.runs,
            "queries": list(QUERIES),
        },
        "ratios": ratios,
        "aims": aims,
        "absolute": {
            **{f"{key}_rps": round(value, 1) for key, value in med.items()},
            "bare_startup_s": round(start["bare"], 4),
            "emu_startup_s": round(start["emulator"], 4),
            "bare_rss_mib": round(rss["bare"], 1),
            "emu_rss_mib": round(rss["emulator"], 1),
        },
        "runs": {
            **{key: [asdict(s) | {"rps": round(s.rps, 1)} for s in samples] for key, samples in results.load.items()},
            **{f"{name}_startup_s": [round(v, 4) for v in values] for name, values in results.startup.items()},
            **{f"{name}_rss_mib": [round(v, 1) for v in values] for name, values in results.rss.items()},
        },
    }


def machine_info() -> dict[str, Any]:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "nproc": usable,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }


def print_table(report: dict[str, Any], results: Results) -> None:
    ab, ra, aims = report["absolute"], report["ratios"], report["aims"]

    def mark(key: str) -> str:
        return f"{aims[key]['aim']:<7} {'met' if aims[key]['met'] else 'MISSED'}"

    def runs(values: list[float], fmt: str) -> str:
        return " ".join(format(v, fmt) for v in values)

    def load_row(name: str, key: str, ratio_key: str | None) -> tuple[str, str, str, str, str]:
        ratio_text = f"{ra[ratio_key]:7.3f}" if ratio_key else "  (ref)"
        return (
            name,
            runs(results.rps(key), "8.0f"),
            f"{ab[key + '_rps']:9.0f}",
            ratio_text,
            mark(ratio_key) if ratio_key in aims else "",
        )

    def startup_row(name: str, key: str, emu: bool) -> tuple[str, str, str, str, str]:
        median = ab["emu_startup_s" if emu else "bare_startup_s"] * 1000
        ratio_text = f"{ra['startup_ratio']:7.3f}" if emu else "  (ref)"
        return (
            name,
            runs([v * 1000 for v in results.startup[key]], "8.1f"),
            f"{median:9.1f}",
            ratio_text,
            mark("emu_startup_s") if emu else "",
        )

    def rss_row(name: str, key: str, emu: bool) -> tuple[str, str, str, str, str]:
        median = ab["emu_rss_mib" if emu else "bare_rss_mib"]
        ratio_text = f"{ra['rss_ratio']:7.3f}" if emu else "  (ref)"
        return (name, runs(results.rss[key], "8.1f"), f"{median:9.1f}", ratio_text, mark("emu_rss_mib") if emu else "")

    rows = [
        load_row("bare     GET /health  req/s", "bare_health", None),
        load_row("emulator GET /health  req/s", "emu_health", "health_ratio"),
        load_row("emulator GET /ask     req/s", "emu_ask_get", "ask_get_ratio"),
        load_row("emulator POST /ask    req/s", "emu_ask_post", "ask_post_ratio"),
        (*load_row("emulator token exch.  req/s", "emu_token", "token_ratio")[:4], mark("emu_token_rps")),
        startup_row("bare     start-up     ms", "bare", False),
        startup_row("emulator start-up     ms", "emulator", True),
        rss_row("bare     idle RSS     MiB", "bare", False),
        rss_row("emulator idle RSS     MiB", "emulator", True),
    ]
    width = max(len(r[1]) for r in rows)
    m = report["machine"]
    print()
    print(f"{report['date']}  nproc {m['nproc']}  Python {m['python']}  client: {report['client']}")
    s = report["settings"]
    print(
        f"{s['runs']} runs of {s['seconds']} s each (after {s['warmup_seconds']} s warm-up), "
        f"{s['concurrency']} connections; median of the runs; ratio = emulator / bare"
    )
    print()
    print(f"{'figure':<28} {'runs':<{width}} {'median':>9} {'ratio':>7}  aim")
    for name, values, median, ratio_text, aim in rows:
        print(f"{name:<28} {values:<{width}} {median} {ratio_text}  {aim}".rstrip())
    print()
    print(
        f"aims of start-up, idle RSS and token exchanges are absolute; token exchanges use {TOKEN_CONCURRENCY} "
        "connections; ratios of start-up and RSS are to the bare app's"
    )
    errors = {key: sum(s.errors for s in samples) for key, samples in results.load.items()}
    if any(errors.values()):
        print(f"warning: errors during load (not counted as requests): {errors}")


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the `with` blocks, which stop the servers


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=int, default=5, help="length of each measured run (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="warm-up before each run, in seconds (default 1; 0: none)")
    p.add_argument("--concurrency", type=int, default=32, help="concurrent keep-alive connections (default 32)")
    p.add_argument("--runs", type=int, default=3, help="runs of each measurement, interleaved (default 3)")
    p.add_argument(
        "--client",
        choices=["auto", "wrk", "asyncio"],
        default="auto",
        help="load generator: wrk if it is on PATH (auto), or force one (default auto)",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})")
    args = p.parse_args(argv)
    if args.seconds < 1 or args.runs < 1 or args.concurrency < 1 or args.warmup < 0:
        p.error("--seconds, --runs and --concurrency must be at least 1, --warmup at least 0")
    return args


@contextlib.contextmanager
def _scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pxt-emulator-bench-") as tmp:
        yield Path(tmp)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    results = Results()
    with _scratch() as tmp:
        client = pick_client(args.client, tmp)
        print(f"client: {client.name}", flush=True)
        compile_emulator()
        print("start-up (fresh state directory each time):", flush=True)
        results.startup, results.rss = measure_startup(tmp, args.runs)
        print("throughput:", flush=True)
        with bare_server(tmp / "bare") as bare, emulator_server(tmp / "emulator") as emu:
            bare_url, _ = bare.wait_ready()
            emu_url, _ = emu.wait_ready()
            check_answers(emu_url)
            auth_url = json.loads((tmp / "emulator" / "state" / "endpoints.json").read_text())["auth"]
            results.load = measure_load(
                client, bare_url, emu_url, auth_url, args.seconds, args.warmup, args.concurrency, args.runs
            )
    report = summarize(results, args, client)
    print_table(report, results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ServerError as e:
        print(f"load.py: {e}", file=sys.stderr)
        sys.exit(1)
