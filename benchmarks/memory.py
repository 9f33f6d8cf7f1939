"""Memory of an idle emulator with a hosted database and a service, and how many of them run at once.

One emulator in the throwaway profile and one in the developer profile (process runtime), each with a trial, a
database updated and a service, as the real client makes them (`pxt new`, `pxt db update`, `pxt service update`);
once idle, the resident memory of the emulator and of every hosted process it started (summed from /proc: RSS, and
PSS, which shares the common pages out). Then emulators like that, one after another, until the next would take
the memory in use beyond 85 % of MemAvailable at the start, or a bound; all running at once, then all stopped.

    python benchmarks/memory.py [--max 20] [--count-profile throwaway] [--out benchmarks/memory-results.json]

Every command is bounded by a timeout; every emulator, client daemon and embedded Postgres is stopped, and the
directories removed, on success, on errors, on Ctrl-C and on SIGTERM. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from hosted import (  # noqa: E402
    DB_UPDATE_TIMEOUT_S,
    BenchError,
    Client,
    emulator,
    emulator_env,
    machine_info,
    scratch,
    start_trial,
    tail,
)

from tests.pxt_client import VERSION, ensure_client  # noqa: E402

DEFAULT_OUT = HERE / "memory-results.json"
SERVICE_TIMEOUT_S = 900.0  # `pxt service update`
READY_TIMEOUT_S = 180.0  # the service listed RUNNING
SETTLE_MAX_S = 120.0  # idle: until the processes' memory stops moving
SETTLE_MIN_S = 10.0
SHARE = 0.85  # of MemAvailable at the start: the most the emulators may take together


# --- /proc ---------------------------------------------------------------------------------------


def mem_available() -> int:
    """MemAvailable, in bytes."""
    m = re.search(r"^MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
    if not m:
        raise BenchError("no MemAvailable in /proc/meminfo")
    return int(m.group(1)) * 1024


def processes() -> dict[int, tuple[int, str]]:
    """pid → (parent pid, command line with its arguments separated by NUL) of every process."""
    found: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes().decode(errors="replace").strip("\0")
            found[int(entry.name)] = (ppid, cmd)  # the arguments separated by NUL, as in /proc
    return found


def family(emulator_pid: int, state: Path) -> dict[int, str]:
    """The emulator, every process whose command line names its state dir (the hosted Postgres outlives its
    parent, so it is not always a descendant), and all their descendants."""
    procs = processes()
    members = {emulator_pid} | {pid for pid, (_, cmd) in procs.items() if str(state) in cmd and pid != os.getpid()}
    grew = True
    while grew:
        more = {pid for pid, (ppid, _) in procs.items() if ppid in members} - members
        members |= more
        grew = bool(more)
    return {pid: procs[pid][1] for pid in members if pid in procs}


def memory_of(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of one process in bytes; (0, 0) once it is gone."""
    rss = pss = 0
    with contextlib.suppress(OSError):
        m = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
        rss = int(m.group(1)) * 1024 if m else 0
    with contextlib.suppress(OSError):
        m = re.search(r"^Pss:\s+(\d+) kB", Path(f"/proc/{pid}/smaps_rollup").read_text(), re.M)
        pss = int(m.group(1)) * 1024 if m else 0
    return rss, pss


MODULES = (  # the real modules the hosted processes run (emulator/runtime/workload.py), named last on their command
    ("pixeltable.service.proxy_daemon", "database server (proxy_daemon)"),
    ("pixeltable.serving.pod_runner", "service (pod_runner)"),
    ("pixeltable.service.prepare_project", "prepare_project"),
)


def role(cmd: str, emulator_pid: int, pid: int) -> str:
    """What a process is; a spare shows as one more of its kind."""
    if pid == emulator_pid:
        return "emulator"
    argv = cmd.split("\0")
    for module, name in MODULES:
        if module in argv:
            return name
    if argv[0].endswith("/postgres") or argv[0].startswith("postgres"):
        return "postgres"
    return "other: " + " ".join(argv)[:80]


def measure_family(emulator_pid: int, state: Path) -> dict[str, Any]:
    """RSS and PSS summed over the emulator's processes, and per role."""
    members = family(emulator_pid, state)
    roles: dict[str, dict[str, int]] = {}
    total_rss = total_pss = 0
    for pid, cmd in members.items():
        rss, pss = memory_of(pid)
        r = roles.setdefault(role(cmd, emulator_pid, pid), {"processes": 0, "rss": 0, "pss": 0})
        r["processes"] += 1
        r["rss"] += rss
        r["pss"] += pss
        total_rss += rss
        total_pss += pss
    return {"processes": len(members), "rss": total_rss, "pss": total_pss, "roles": roles}


def settle(emulator_pid: int, state: Path) -> dict[str, Any]:
    """Waits until the family's RSS and process count hold still (three samples 2 s apart within 1 %, after at
    least SETTLE_MIN_S; spares import at the lowest priority meanwhile), bounded by SETTLE_MAX_S."""
    start = time.monotonic()
    samples: list[dict[str, Any]] = []
    while True:
        samples.append(measure_family(emulator_pid, state))
        last = samples[-3:]
        steady = len(last) == 3 and len({s["processes"] for s in last}) == 1
        steady = steady and max(s["rss"] for s in last) <= 1.01 * min(s["rss"] for s in last)
        waited = time.monotonic() - start
        if (steady and waited >= SETTLE_MIN_S) or waited >= SETTLE_MAX_S:
            return {**samples[-1], "settled_after_s": round(waited, 1), "steady": steady}
        time.sleep(2)


# --- one emulator with a database and a service ---------------------------------------------------


def loopback_get(url: str) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


@contextlib.contextmanager
def hosted_emulator(exe: Path, n: int, profile: str, cache: Path) -> Iterator[dict[str, Any]]:
    """An emulator (process runtime, `profile`) with a trial, a database updated and a service AVAILABLE, its client
    daemon stopped; yields what it is (pid, state dir, site, the service's endpoint); stops everything after."""
    flags = ["--runtime", "process", "--profile", profile, "--build-cache", str(cache)]
    with scratch(f"mem{n}") as root, emulator(root / "state", flags) as endpoints:
        t0 = time.perf_counter()
        client = Client(exe, root, emulator_env(root / "state"))
        try:
            db = start_trial(client, endpoints)
            client.run("db", "update", db, "-f", "--add-config-entry", timeout=DB_UPDATE_TIMEOUT_S)
            client.run("schema", "update", "app.py", db, timeout=SERVICE_TIMEOUT_S)  # the service's tables
            client.run("service", "update", "app.py", db, "-f", timeout=SERVICE_TIMEOUT_S)
            deadline = time.monotonic() + READY_TIMEOUT_S
            while True:
                _, listed = client.run("service", "list", db)
                m = re.search(rf"^{re.escape(db)}/(\w+)\s+(\S+)\s+(AVAILABLE|RUNNING|READY)", listed, re.M)
                if m:
                    break
                if time.monotonic() > deadline:
                    raise BenchError(f"no service AVAILABLE within {READY_TIMEOUT_S:.0f} s:\n{tail(listed)}")
                time.sleep(2)
        finally:
            client.stop()  # the client's daemon and its Postgres: not the emulator's memory
        yield {
            "pid": endpoints["pid"],
            "state": root / "state",
            "site": endpoints["site"],
            "service": f"{m.group(2)}/health",
            "setup_s": round(time.perf_counter() - t0, 1),
        }


def one_profile(exe: Path, profile: str, cache: Path) -> dict[str, Any]:
    print(f"one emulator, {profile} profile: trial, db update, service update", flush=True)
    with hosted_emulator(exe, 0, profile, cache) as e:
        found = settle(e["pid"], e["state"])
        found["setup_s"] = e["setup_s"]
    print(
        f"  {profile}: {found['processes']} processes, RSS {mib(found['rss'])} MiB, PSS {mib(found['pss'])} MiB "
        f"(settled after {found['settled_after_s']} s)",
        flush=True,
    )
    for name, r in sorted(found["roles"].items()):
        print(f"    {name:<24} {r['processes']:3d}  RSS {mib(r['rss']):7.1f}  PSS {mib(r['pss']):7.1f}", flush=True)
    return found


def mib(n: int) -> float:
    return round(n / 2**20, 1)


def count(exe: Path, profile: str, per_emulator: int, bound: int, cache: Path) -> dict[str, Any]:
    """Starts emulators one after another while the next fits (85 % of MemAvailable at the start) and `bound`."""
    available = mem_available()
    limit = SHARE * available
    print(
        f"how many at once: MemAvailable {mib(available)} MiB, per emulator {mib(per_emulator)} MiB "
        f"→ {available // per_emulator} by division, {int(limit // per_emulator)} within {SHARE:.0%}; bound {bound}",
        flush=True,
    )
    running: list[dict[str, Any]] = []
    stopped_by = f"the bound of {bound}"
    with contextlib.ExitStack() as stack:
        for n in range(1, bound + 1):
            used = available - mem_available()
            if used + per_emulator > limit:
                stopped_by = f"memory: {mib(used)} MiB in use, the next would pass {SHARE:.0%} of MemAvailable"
                break
            t0 = time.perf_counter()
            e = stack.enter_context(hosted_emulator(exe, n, profile, cache))
            running.append(e)
            print(
                f"  {n:2d} running (set up in {time.perf_counter() - t0:.1f} s); "
                f"MemAvailable {mib(mem_available())} MiB",
                flush=True,
            )
        time.sleep(SETTLE_MIN_S)
        families = [measure_family(e["pid"], e["state"]) for e in running]
        # A service app has no /health of its own (FastAPI answers its 404): any answer from the app below 500 means
        # it serves; the gateway answers 502/503 for a service that does not.
        healthy = sum(
            1 for e in running if loopback_get(f"{e['site']}/health") == 200 and 0 < loopback_get(e["service"]) < 500
        )
        at_end = mem_available()
        print(f"  {len(running)} at once, {healthy} answering on /health and their service; stopping them", flush=True)
    return {
        "mem_available_at_start": available,
        "per_emulator_rss": per_emulator,
        "by_division": available // per_emulator,
        "by_division_within_share": int(limit // per_emulator),
        "bound": bound,
        "ran_at_once": len(running),
        "healthy_at_once": healthy,
        "stopped_by": stopped_by,
        "mem_available_with_all_running": at_end,
        "used_by_all": available - at_end,
        "rss_sum_of_all": sum(f["rss"] for f in families),
        "pss_sum_of_all": sum(f["pss"] for f in families),
        "setup_s": [e["setup_s"] for e in running],
    }


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max", type=int, default=20, help="at most this many emulators at once (default 20)")
    p.add_argument("--count-profile", choices=("throwaway", "developer"), default="throwaway")
    p.add_argument("--no-count", action="store_true", help="only the two single emulators")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})")
    args = p.parse_args(argv)
    if not 1 <= args.max <= 50:
        p.error("--max must be between 1 and 50")
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    exe = ensure_client()
    load_at_start = os.getloadavg()
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "client": f"pixeltable=={VERSION}"}
    with scratch("memcache") as cache:
        report["profiles"] = {profile: one_profile(exe, profile, cache) for profile in ("throwaway", "developer")}
        if not args.no_count:
            per = report["profiles"][args.count_profile]["rss"]
            report["count"] = {"profile": args.count_profile, **count(exe, args.count_profile, per, args.max, cache)}
    report["machine"] = machine_info(exe, load_at_start)
    report["machine"]["mem_total"] = int(re.findall(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text())[0]) * 1024
    t, d = report["profiles"]["throwaway"], report["profiles"]["developer"]
    print()
    print(f"idle emulator with a database and a service: throwaway {mib(t['rss'])} MiB RSS ({mib(t['pss'])} PSS), ")
    print(f"developer {mib(d['rss'])} MiB RSS ({mib(d['pss'])} PSS); throwaway/developer {t['rss'] / d['rss']:.2f}")
    if "count" in report:
        c = report["count"]
        print(
            f"at once: {c['ran_at_once']} ran ({c['healthy_at_once']} answering), stopped by {c['stopped_by']}; "
            f"by division {c['by_division']} ({c['by_division_within_share']} within {SHARE:.0%})"
        )
    report["ratios"] = {"throwaway_to_developer_rss": round(t["rss"] / d["rss"], 3)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"memory.py: {e}", file=sys.stderr)
        sys.exit(1)
