"""Ten throwaway emulators in a row: `emulator exec` around the real client's hosted workflow (`pxt new`,
`pxt db update` of the same project, `pxt schema update` and the first insert), each a new emulator in a new state
directory, all sharing one build cache as a user's emulators do; the total next to ten local runs of the same models
(`pxt schema update` + the insert script against a local namespace, as hosted.py's local reference), interleaved.

    python benchmarks/throwaway.py [--runs 10] [--runtime process] [--out benchmarks/throwaway-results.json]

Every command is bounded by a timeout; each `emulator exec` runs in a session of its own and is stopped (SIGTERM,
which it forwards to its command and its emulator, then SIGKILL) on a timeout, an error, Ctrl-C or SIGTERM; after
each run, the client's daemon and every process still naming the run's directory (the hosted Postgres, the client's)
are stopped, and the directories removed. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from hosted import (  # noqa: E402
    CLI_TIMEOUT_S,
    STOP_TIMEOUT_S,
    BenchError,
    Client,
    Times,
    emulator_cmd,
    local_run,
    machine_info,
    scratch,
    tail,
    wait_gone,
)

from tests.pxt_client import VERSION, ensure_client  # noqa: E402

DEFAULT_OUT = HERE / "throwaway-results.json"
EXEC_TIMEOUT_S = 1500.0  # the whole `emulator exec`: the first one may build the environment

# Run by `emulator exec` with the client venv's python: the workflow, each step timed, written to argv[3] as JSON.
DRIVER = r"""
import json, re, subprocess, sys, time
started = time.time()
pxt, out = sys.argv[1], sys.argv[2]
times = {"driver_started": started}

def run(name, argv, timeout):
    t = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    times[name] = time.perf_counter() - t
    if r.returncode:
        sys.exit(f"{name} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout + r.stderr

org = re.search(r"organization (agent-[0-9a-f]{6})", run("new", [pxt, "new"], 300)).group(1)
db = f"pxt://{org}:main"
run("db_update", [pxt, "db", "update", db, "-f", "--add-config-entry"], 1200)
run("schema_update", [pxt, "schema", "update", "app.py", db], 600)
code = (
    f"import pixeltable as pxt; t = pxt.get_table('{db}/docs'); "
    "t.insert([{'title': 'x', 'body': 'y'}]); print(t.count())"
)
printed = run("insert", [sys.executable, "-c", code], 600)
if not re.search(r"^1$", printed, re.M):
    sys.exit(f"the insert counted no row:\n{printed}")
times["driver_ended"] = time.time()
with open(out, "w") as f:
    json.dump(times, f)
"""


def stop_exec(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to `emulator exec` (it stops its command, then its emulator), then SIGKILL to its session."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(STOP_TIMEOUT_S + 30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def stragglers(root: Path) -> list[tuple[int, str]]:
    """Processes whose command line names `root` (the hosted Postgres and the client's outlive their parents)."""
    found = []
    needle = str(root).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes()
            if needle in cmdline:
                found.append((int(entry.name), cmdline.replace(b"\0", b" ").decode(errors="replace")[:160]))
    return found


def stop_stragglers(root: Path) -> list[str]:
    """Stops what still names `root` after its emulator ended: a Postgres server by SIGINT (fast shutdown; its
    backends follow it), anything else by SIGTERM; SIGKILL after the timeout. Returns what it found."""
    found = stragglers(root)
    masters = [(pid, c) for pid, c in found if " -D " in c or c.startswith("postgres")] or found
    for pid, cmd in masters:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT if "postgres" in cmd else signal.SIGTERM)
    for pid, _ in found:
        if not wait_gone(pid, STOP_TIMEOUT_S):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                wait_gone(pid, 10)
    return [f"{pid} {cmd}" for pid, cmd in found]


def exec_run(exe: Path, n: int, template: Path, cache: Path, runtime: str) -> tuple[Times, dict[str, Any]]:
    """One `emulator exec` around the workflow, in a new directory with a copy of the project; timed whole."""
    with scratch(f"exec{n}") as root:
        client = Client(exe, root, {})
        shutil.copytree(template, client.project, dirs_exist_ok=True)
        (root / "tmp").mkdir()
        driver = root / "driver.py"
        driver.write_text(DRIVER)
        out = root / "times.json"
        # exec's own state dir goes under TMPDIR: under `root`, so that anything left behind is found there.
        env = {**client.pxt.env, "EMULATOR_BUILD_CACHE": str(cache), "TMPDIR": str(root / "tmp")}
        argv = [*emulator_cmd(), "exec", "--runtime", runtime, "--", str(client.python), str(driver)]
        argv += [str(client.pxt.exe), str(out)]
        log = root / "exec.log"
        try:
            with open(log, "wb") as f:
                start_wall, start = time.time(), time.perf_counter()
                proc = subprocess.Popen(
                    argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                    cwd=client.project, start_new_session=True,
                )  # fmt: skip
                try:
                    code = proc.wait(EXEC_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    raise BenchError(f"emulator exec: not done within {EXEC_TIMEOUT_S:.0f} s") from None
                finally:
                    stop_exec(proc)
                elapsed = time.perf_counter() - start
                end_wall = time.time()
            if code != 0 or not out.is_file():
                raise BenchError(f"emulator exec exited with {code}:\n{tail(log.read_text(errors='replace'))}")
            steps = json.loads(out.read_text())
        finally:
            client.stop()  # the client's daemon; its Postgres and the insert script's go with `scratch`
            left = stop_stragglers(root / "tmp")  # what outlived exec in its own state dir: none expected
    times: Times = {k: steps[k] for k in ("new", "db_update", "schema_update", "insert")}
    times["startup"] = steps["driver_started"] - start_wall  # exec: emulator up, until the command runs
    times["teardown"] = end_wall - steps["driver_ended"]  # exec: the command's end until exec exits
    times["total"] = elapsed
    entries = sorted(p.name for p in (cache / "envs").iterdir() if p.is_dir()) if (cache / "envs").is_dir() else []
    info = {"left_running_after_exec": left, "cache_entries": len(entries)}
    line = "  ".join(f"{k} {v:.2f}" for k, v in times.items())
    print(f"  exec   {line}" + (f"  LEFT RUNNING: {len(left)}" if left else ""), flush=True)
    return times, info


def make_template(exe: Path, root: Path) -> Path:
    """A project (`pxt init`, `pxt service example --out app.py`), copied for every run."""
    client = Client(exe, root, {})
    try:
        client.run("init", timeout=CLI_TIMEOUT_S)
        client.run("service", "example", "--out", "app.py", timeout=CLI_TIMEOUT_S)
    finally:
        client.stop()
    return client.project


def summarize(runs: dict[str, list[Times]], infos: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    ex, lo = runs["exec"], runs["local"]
    total_exec, total_local = sum(r["total"] for r in ex), sum(r["total"] for r in lo)
    rest_exec, rest_local = sum(r["total"] for r in ex[1:]), sum(r["total"] for r in lo[1:])
    medians = {path: {k: round(statistics.median(r[k] for r in rs), 3) for k in rs[0]} for path, rs in runs.items()}
    return {
        "settings": {"runs": args.runs, "runtime": args.runtime, "build_cache": args.build_cache or "empty at start"},
        "totals_s": {"exec": round(total_exec, 2), "local": round(total_local, 2)},
        "ratio": round(total_exec / total_local, 3),
        "after_the_first": {
            "exec_s": round(rest_exec, 2),
            "local_s": round(rest_local, 2),
            "ratio": round(rest_exec / rest_local, 3) if rest_local else None,
        },
        "medians_s": medians,
        "runs_s": {path: [{k: round(v, 3) for k, v in r.items()} for r in rs] for path, rs in runs.items()},
        "per_run": infos,
    }


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=10, help="exec runs (and local runs), interleaved (default 10)")
    p.add_argument("--runtime", choices=("process", "docker"), default="process", help="default process")
    p.add_argument(
        "--build-cache",
        type=Path,
        help="the build cache every exec shares (default: a new, empty one, so that the first run builds)",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})")
    args = p.parse_args(argv)
    if not 1 <= args.runs <= 50:
        p.error("--runs must be between 1 and 50")
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    exe = ensure_client()
    load_at_start = os.getloadavg()
    runs: dict[str, list[Times]] = {"exec": [], "local": []}
    infos: list[dict[str, Any]] = []
    with scratch("throwaway") as root:
        cache = args.build_cache or root / "cache"
        cache.mkdir(parents=True, exist_ok=True)
        template = make_template(exe, root / "template")
        for i in range(1, args.runs + 1):
            print(f"run {i}/{args.runs}: emulator exec", flush=True)
            times, info = exec_run(exe, i, template, cache, args.runtime)
            runs["exec"].append(times)
            infos.append(info)
            print(f"run {i}/{args.runs}: local reference", flush=True)
            runs["local"].append(local_run(exe))
    report = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_info(exe, load_at_start),
        "client": f"pixeltable=={VERSION}",
        **summarize(runs, infos, args),
    }
    print()
    print(f"{args.runs} emulator exec runs: {report['totals_s']['exec']:.1f} s; {args.runs} local runs: "
          f"{report['totals_s']['local']:.1f} s; ratio {report['ratio']:.2f}")  # fmt: skip
    rest = report["after_the_first"]
    print(f"after the first (cache warm): {rest['exec_s']:.1f} s vs {rest['local_s']:.1f} s, ratio {rest['ratio']}")
    print("medians per exec run: " + "  ".join(f"{k} {v:.2f}" for k, v in report["medians_s"]["exec"].items()))
    if any(i["left_running_after_exec"] for i in infos):
        print("warning: processes outlived their emulator exec (stopped by this script): see per_run in the JSON")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"throwaway.py: {e}", file=sys.stderr)
        sys.exit(1)
