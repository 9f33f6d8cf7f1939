"""Memory of N evaluation trials side by side, each with a hosted database, and how many fit on this machine.

`emulator eval fixtures/tasks/deploy-and-answer -k N --parallel N` with the careful reference agent, which deploys
the client's example project with the real `pxt` client to its trial's hosted database (a throwaway emulator each,
process runtime), for each N of `--parallel` (1, 2, 3), interleaved, `--runs` times. While each runs, every
`--interval` seconds: the PSS summed over every process of the run (the `eval` process and its descendants, and
whatever carries one of its trials' state dirs or marks: hosted Postgres, the client daemons and their Postgres,
which run in sessions of their own) and, as a cross-check, the machine's MemTotal - MemAvailable over a baseline
read just before. Per N: the peak, the peak per trial, its ratio to N times the 1-trial peak of the same run, the
wall time and its ratio to N = 1, each trial's hosted CPU seconds and peak memory as the runtime meters them, and
MemAvailable over the per-trial peak: how many such trials fit.

    python benchmarks/evaluation_memory.py [--parallel 1,2,3] [--runs 3] [--interval 0.5] [--warmup 1]
        [--runtime process] [--out benchmarks/evaluation-memory-results.json]

Needs the client virtualenv (`ensure_client()` installs it on first use). Every `eval` is bounded by a timeout;
on errors, Ctrl-C and SIGTERM it is stopped (SIGTERM, on which it ends its trials), and any process of the run
left after it is ended by its pid. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from hosted import machine_info  # noqa: E402
from memory import mem_available, memory_of, mib  # noqa: E402

from tests.pxt_client import VERSION, ensure_client  # noqa: E402

TASK = ROOT / "fixtures" / "tasks" / "deploy-and-answer"
AGENT = f"{sys.executable} examples/eval/careful_agent.py"
DEFAULT_OUT = HERE / "evaluation-memory-results.json"
TIMEOUT_S = 1200.0  # one `eval`: the task's own agent limit is 600 s a trial; these take about 30 s
STOP_GRACE_S = 60.0  # SIGTERM to `eval` (it stops its trials) until SIGKILL
SETTLE_S = 5.0  # between two evals, after every process of the last one is gone
TRIAL_DIR = re.compile(rb"/pxt-emulator-eval-[A-Za-z0-9_]+")  # runner.Trial's tempfile.mkdtemp prefix
MARK = re.compile(rb"(?:^|\0)EMULATOR_TRIAL_MARK=([0-9a-f]+)")


# --- /proc ---------------------------------------------------------------------------------------


def mem_used() -> int:
    """MemTotal - MemAvailable, in bytes: what the whole machine holds that the kernel would not give back."""
    info = dict(re.findall(r"^(\w+):\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M))
    return (int(info["MemTotal"]) - int(info["MemAvailable"])) * 1024


@dataclass
class Proc:
    ppid: int
    cmd: bytes  # arguments separated by NUL, as in /proc
    environ: bytes  # b"" for another user's process


def processes() -> dict[int, Proc]:
    found: dict[int, Proc] = {}
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
            environ = b""
            with contextlib.suppress(OSError), open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
            found[int(entry)] = Proc(ppid, cmd, environ)
    return found


def descendants(roots: set[int], procs: dict[int, Proc]) -> set[int]:
    members = {p for p in roots if p in procs}
    children: dict[int, list[int]] = {}
    for pid, p in procs.items():
        children.setdefault(p.ppid, []).append(pid)
    todo = list(members)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in members:
                members.add(child)
                todo.append(child)
    return members


@dataclass
class Run:
    """What belongs to one `eval`: learnt as it goes, since a client daemon or a hosted Postgres may outlive (or be
    reparented away from) the process that started it."""

    eval_pid: int
    dirs: set[bytes] = field(default_factory=set)  # its trials' state dirs
    marks: set[bytes] = field(default_factory=set)  # its trials' EMULATOR_TRIAL_MARK values
    last: set[int] = field(default_factory=set)  # the members seen in the last sample

    def members(self, procs: dict[int, Proc]) -> set[int]:
        tree = descendants({self.eval_pid}, procs)
        for pid in tree:  # another engineer's `eval` has dirs and marks of its own: only ours are learnt
            self.dirs.update(TRIAL_DIR.findall(procs[pid].cmd))
            self.marks.update(MARK.findall(procs[pid].environ))
        marks = [b"EMULATOR_TRIAL_MARK=" + m + b"\0" for m in self.marks]
        ours = {
            pid
            for pid, p in procs.items()
            if any(d in p.cmd or d in p.environ for d in self.dirs) or any(m in p.environ for m in marks)
        }
        self.last = descendants(tree | ours, procs)
        return self.last


def role(pid: int, procs: dict[int, Proc], run: Run) -> str:
    """What a process is, for the breakdown at the peak (a Postgres backend is its postmaster's)."""
    argv = procs[pid].cmd.split(b"\0")
    text = procs[pid].cmd.replace(b"\0", b" ")
    if pid == run.eval_pid:
        return "emulator eval"
    if argv[0].startswith(b"postgres:") and procs[pid].ppid in procs:
        return role(procs[pid].ppid, procs, run)
    if argv[0].endswith(b"/postgres") or argv[0] == b"postgres":
        return "client Postgres" if b"/pxt-home/" in text else "hosted Postgres"
    for needle, name in (
        (b"pixeltable.service.proxy_daemon", "hosted database server"),
        (b"pixeltable.serving.pod_runner", "hosted service"),
        (b"pixeltable.service.prepare_project", "hosted prepare_project"),
        (b"pixeltable_cli.server.daemon", "client daemon"),
        (b"careful_agent.py", "agent"),
        (b"/bin/pxt", "pxt CLI"),
        (b"emulator up", "trial emulator"),
    ):
        if needle in text:
            return name
    return "other: " + text.decode(errors="replace")[:60]


# --- one `eval` ----------------------------------------------------------------------------------


def stop(proc: subprocess.Popen[bytes], run: Run) -> int:
    """`eval` stops its trials on SIGTERM; whatever of the run outlives it (given 10 s to go on its own) is ended by
    pid. Returns how many processes were left to end."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    left = run.members(processes())
    deadline = time.monotonic() + 10
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = run.members(processes())
    leftover = len(left)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 10
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = run.members(processes())
        if not left:
            break
    return leftover


def evaluate(n: int, pxt: Path, runtime: str, interval: float, *, sample: bool = True) -> dict[str, Any]:
    """`eval -k N --parallel N` of the task, sampled while it runs; its --json result's per-trial figures."""
    argv = [sys.executable, "-m", "emulator", "eval", str(TASK), "--agent", AGENT, "-k", str(n)]
    argv += ["--parallel", str(n), "--runtime", runtime, "--json"]
    env = {**os.environ, "PXT": str(pxt)}
    available, baseline = mem_available(), mem_used()
    samples: list[list[float]] = []  # [seconds, PSS MiB, RSS MiB, machine delta MiB, processes]
    peak: dict[str, Any] = {"pss": 0}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=err, start_new_session=True)
        run = Run(proc.pid)
        try:
            while proc.poll() is None:
                at = time.monotonic()
                if at - started > TIMEOUT_S:
                    raise SystemExit(f"eval -k {n} still running after {TIMEOUT_S:.0f} s")
                if sample:
                    procs = processes()
                    members = run.members(procs)
                    mem = {pid: memory_of(pid) for pid in members}
                    pss, rss = sum(p for _, p in mem.values()), sum(r for r, _ in mem.values())
                    used = mem_used() - baseline
                    samples.append([round(at - started, 2), mib(pss), mib(rss), mib(used), len(members)])
                    if pss > peak["pss"]:
                        roles: dict[str, dict[str, float]] = {}
                        for pid, (r, p) in mem.items():
                            entry = roles.setdefault(role(pid, procs, run), {"processes": 0, "rss": 0.0, "pss": 0.0})
                            entry["processes"] += 1
                            entry["rss"] += r
                            entry["pss"] += p
                        peak = {"pss": pss, "at_s": samples[-1][0], "roles": roles}
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(max(0.0, interval - (time.monotonic() - at)))
            wall = time.monotonic() - started
        finally:
            leftover = stop(proc, run)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if proc.returncode not in (0, 1):  # 1: a trial failed its checks, which the result says
        raise SystemExit(f"eval -k {n} failed ({proc.returncode}):\n{stdout[-2000:]}\n{stderr[-2000:]}")
    trials = json.loads(stdout)["tasks"][0]["trials"]
    for t in trials:
        if not t["passed"]:
            failing = [c["check"] for c in t["checks"] if not c["passed"]]
            print(f"  warning: trial {t['trial']} of N={n} failed {failing or t.get('error')}", flush=True)
    figures: dict[str, Any] = {
        "wall_s": round(wall, 2),
        "mem_available_at_start": available,
        "passed": sum(t["passed"] for t in trials),
        "left_after_eval": leftover,  # processes of the run still there 10 s after `eval` exited: expected 0
        "trial_s": [t["seconds"] for t in trials],
        "hosted_peak_memory_mb": [t["cost"]["hosted_peak_memory_mb"] if t["cost"] else None for t in trials],
        "hosted_cpu_seconds": [t["cost"]["hosted_cpu_seconds"] if t["cost"] else None for t in trials],
    }
    if sample:
        figures |= {
            "peak_pss_mib": mib(peak["pss"]),
            "peak_rss_mib": max(s[2] for s in samples),
            "peak_machine_delta_mib": max(s[3] for s in samples),
            "peak_processes": max(s[4] for s in samples),
            "peak_at_s": peak["at_s"],
            "roles_at_peak": {
                k: {"processes": v["processes"], "rss_mib": mib(int(v["rss"])), "pss_mib": mib(int(v["pss"]))}
                for k, v in sorted(peak["roles"].items(), key=lambda kv: -kv[1]["pss"])
            },
            "samples": samples,
        }
    return figures


# --- the report ----------------------------------------------------------------------------------


def median_of(values: list[float | None]) -> float | None:
    """Over the trials that ran (a trial whose emulator did not start has no cost)."""
    ran = [v for v in values if v is not None]
    return round(statistics.median(ran), 2) if ran else None


def summarize(ns: list[int], runs: list[dict[int, dict[str, Any]]], available: int) -> dict[str, Any]:
    per_n: dict[str, dict[str, Any]] = {}
    for n in ns:
        rs = [r[n] for r in runs]
        peak = statistics.median(r["peak_pss_mib"] for r in rs)
        machine = statistics.median(r["peak_machine_delta_mib"] for r in rs)
        figures: dict[str, Any] = {
            "peak_pss_mib": peak,
            "peak_pss_per_trial_mib": round(peak / n, 1),
            "peak_machine_delta_mib": machine,
            "peak_machine_delta_per_trial_mib": round(machine / n, 1),
            "peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in rs),
            "wall_s": statistics.median(r["wall_s"] for r in rs),
            "passed": f"{sum(r['passed'] for r in rs)}/{n * len(rs)}",
            "hosted_peak_memory_mb": median_of([m for r in rs for m in r["hosted_peak_memory_mb"]]),
            "hosted_cpu_seconds": median_of([c for r in rs for c in r["hosted_cpu_seconds"]]),
            "fit_by_pss": math.floor(mib(available) / (peak / n)),
        }
        if 1 in ns:  # against the 1-trial run of the same round: the machine's load moves between rounds
            figures["ratio_to_n_times_1"] = round(
                statistics.median(r[n]["peak_pss_mib"] / (n * r[1]["peak_pss_mib"]) for r in runs), 3
            )
            figures["wall_ratio_to_1"] = round(statistics.median(r[n]["wall_s"] / r[1]["wall_s"] for r in runs), 3)
        per_n[str(n)] = figures
    return per_n


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parallel", default="1,2,3", help="the N values, comma-separated (default 1,2,3)")
    p.add_argument("--runs", type=int, default=3, help="rounds of every N, interleaved (default 3)")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between two samples (default 0.5)")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured 1-trial evals first (default 1)")
    p.add_argument("--runtime", choices=("process", "docker", "auto"), default="process")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})")
    args = p.parse_args(argv)
    ns = sorted({int(x) for x in args.parallel.split(",")})
    if not ns or ns[0] < 1 or ns[-1] > 8 or args.runs < 1 or not 0.1 <= args.interval <= 10:
        p.error("--parallel between 1 and 8, --runs at least 1, --interval between 0.1 and 10")
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    pxt = ensure_client()
    load_at_start = os.getloadavg()
    for _ in range(args.warmup):  # the environment in the build cache, the client's and the server's files cached
        print(f"warm-up: {evaluate(1, pxt, args.runtime, args.interval, sample=False)['wall_s']} s", flush=True)
        time.sleep(SETTLE_S)
    available = mem_available()
    runs: list[dict[int, dict[str, Any]]] = []
    for i in range(1, args.runs + 1):
        runs.append({})
        for n in ns:
            r = runs[-1][n] = evaluate(n, pxt, args.runtime, args.interval)
            print(
                f"run {i}, N={n}: {r['wall_s']} s, {r['passed']}/{n} passed, peak PSS {r['peak_pss_mib']} MiB "
                f"({r['peak_processes']} processes), machine +{r['peak_machine_delta_mib']} MiB, load "
                f"{os.getloadavg()[0]:.2f}",
                flush=True,
            )
            time.sleep(SETTLE_S)  # what the last trials held is freed before the next baseline
    per_n = summarize(ns, runs, available)
    exe_usage = resource.getrusage(resource.RUSAGE_SELF)
    top = per_n[str(ns[-1])]
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "task": TASK.name,
        "agent": "examples/eval/careful_agent.py",
        "client": f"pixeltable=={VERSION}",
        "runtime": args.runtime,
        "settings": {"parallel": ns, "runs": args.runs, "interval_s": args.interval, "warmup": args.warmup},
        "mem_available_at_start_mib": mib(available),
        "per_n": per_n,
        # The largest N's per-trial peak shares the most (one build cache, libraries mapped by every trial).
        "fit_on_this_machine": {"by_pss": top["fit_by_pss"], "per_trial_mib": top["peak_pss_per_trial_mib"]},
        "sampler_cpu_s": round(exe_usage.ru_utime + exe_usage.ru_stime, 1),
        "runs": [{str(n): r for n, r in run.items()} for run in runs],
        "machine": machine_info(pxt, load_at_start),
    }
    report["machine"]["mem_total"] = int(re.findall(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text())[0]) * 1024
    print()
    print(f"{'N':>3} {'wall s':>8} {'×N=1':>6} {'peak PSS':>9} {'/trial':>7} {'÷N×1':>6} {'machine':>8} {'fit':>5}")
    for n in ns:
        f = per_n[str(n)]
        print(
            f"{n:>3} {f['wall_s']:>8.1f} {f.get('wall_ratio_to_1', 0):>6.2f} {f['peak_pss_mib']:>9.1f} "
            f"{f['peak_pss_per_trial_mib']:>7.1f} {f.get('ratio_to_n_times_1', 0):>6.2f} "
            f"{f['peak_machine_delta_mib']:>8.1f} {f['fit_by_pss']:>5}"
        )
    print(f"MemAvailable at the start {mib(available)} MiB; the sampler used {report['sampler_cpu_s']} s of CPU")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
