"""The agent test kit, timed: reset, snapshot save and snapshot load of a running emulator, each as a ratio to a
plain restart of the same emulator in the same run (issue 13).

    python benchmarks/testkit.py [--runs 5] [--hosted-runs 3] [--trials 100] [--rows 5] [--out PATH]

One emulator on free ports, on the process runtime. Three states, each timed for a reset (to empty), a save (to
a new name) and a load (of the snapshot just saved, into the same state):

- `empty`: the emulator as it starts on an empty state dir;
- `trials`: `--trials` agents each registered, exchanged a token and created a trial (plain HTTP, as an agent);
- `hosted`: those trials plus one more, made by the real client (`pxt new`), with a hosted database (`pxt db
  update`), a table (`pxt schema update` of `pxt service example`) and `--rows` rows, its server running.

The reference is a plain restart: from SIGTERM to the old `emulator up` until the new one, on the same state dir,
answers /health with 200. `runs` rounds of: restart, the empty state's figures, the trials' figures, then (in the
first `hosted_runs` rounds) the hosted ones; every round ends empty, so each restart restarts the same emulator.
Everything else (populating, refilling a state with an untimed load, starting the database's server) is untimed.
Figures are medians with their min and max; ratios are medians over the restart's median. Nothing is asserted.
Every wait is bounded; the client's daemon, the emulator, the Postgres servers left under the temporary directory
and the directory itself are removed on success, errors, Ctrl-C and SIGTERM. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.hosted import (  # noqa: E402
    DB_UPDATE_TIMEOUT_S,
    INSERT_TIMEOUT_S,
    SCHEMA_TIMEOUT_S,
    BenchError,
    Client,
    emulator,
    emulator_env,
    machine_info,
    scratch,
    tail,
    write_report,
)
from tests.pxt_client import VERSION, ensure_client  # noqa: E402

LIMITS = {  # the limits that would refuse a hundred agents from one machine
    "EMULATOR_REGISTRATION_RATE_LIMIT": "1000000",
    "EMULATOR_TRIAL_CAPACITY": "1000000",
    "EMULATOR_TRIAL_NETWORK_LIMIT": "1000000",
}
RUNTIME = "process"
TIMEOUT_S = 60.0  # one HTTP call
WAKE_TIMEOUT_S = 300.0  # a database's server stopped and started again
OPS = ("reset", "save", "load")
STATES = ("empty", "trials", "hosted")
# Loopback only: never through a proxy the caller's environment names.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
INSERT_ROWS = (
    "import pixeltable as pxt; t = pxt.get_table({table!r}); "
    "t.insert([{{'title': f'row {{i}}', 'body': 'benchmark'}} for i in range({rows})]); print(t.count())"
)


def call(url: str, body: dict[str, Any] | None = None, form: dict[str, str] | None = None, **headers: str) -> Any:
    data, kind = None, "application/json"
    if body is not None:
        data = json.dumps(body).encode()
    elif form is not None:
        data, kind = urllib.parse.urlencode(form).encode(), "application/x-www-form-urlencoded"
    req = urllib.request.Request(url, data=data, headers={"Content-Type": kind, **headers})
    with OPENER.open(req, timeout=TIMEOUT_S) as resp:
        return json.loads(resp.read() or b"null")


def populate(endpoints: dict[str, Any], trials: int) -> None:
    grant = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    for _ in range(trials):
        reg = call(endpoints["auth"] + "/agent/identity", {"type": "anonymous"})
        token = call(
            endpoints["auth"] + "/oauth2/token", form={"grant_type": grant, "assertion": reg["identity"]["assertion"]}
        )["access_token"]
        call(endpoints["site"] + "/api/v1/trial-orgs", {}, Authorization=f"Bearer {token}")


# --- the timed operations: one HTTP call each, wall time around it -----------------------------------------------


def reset(site: str) -> dict[str, Any]:
    return call(site + "/_emulator/reset", {"to": "empty"})


def save(site: str, name: str) -> dict[str, Any]:
    return call(site + "/_emulator/snapshots", {"name": name})


def load(site: str, name: str) -> dict[str, Any]:
    return call(f"{site}/_emulator/snapshots/{name}/load", {})


def timed(op: Callable[[], dict[str, Any]]) -> tuple[float, float | None]:
    """(wall seconds of the call, the seconds the emulator says it took, when it says)."""
    began = time.perf_counter()
    answer = op()
    return time.perf_counter() - began, answer.get("seconds")


# --- states --------------------------------------------------------------------------------------------------


def counts(site: str) -> tuple[int, int]:
    """(organizations, deployed databases) the emulator holds: a check that a state is what it should be (every
    trial has a database `main`; a deployed one has an environment)."""
    dbs = call(site + "/_emulator/databases")["databases"]
    return len(call(site + "/_emulator/orgs")["orgs"]), sum(d["environment"] is not None for d in dbs)


def expect(site: str, orgs: int, dbs: int, what: str) -> None:
    got = counts(site)
    if got != (orgs, dbs):
        raise BenchError(f"{what}: expected {orgs} organizations and {dbs} databases, found {got}")


def database(site: str, org: str) -> dict[str, Any]:
    for d in call(site + "/_emulator/databases")["databases"]:
        if d["org"] == org and d["db"] == "main":
            return d
    raise BenchError(f"no database {org}:main")


def wait_database(site: str, org: str, ready: Callable[[dict[str, Any]], bool], what: str) -> None:
    deadline = time.monotonic() + WAKE_TIMEOUT_S
    while not ready(d := database(site, org)):
        if d["state"] == "FAILED" or time.monotonic() > deadline:
            raise BenchError(f"{org}:main did not become {what}: {d['state']}, {d['failure_reason']}")
        time.sleep(0.1)


def running(d: dict[str, Any]) -> bool:
    return d["state"] == "AVAILABLE" and bool((d["server"] or {}).get("ready"))


def wake(site: str, org: str) -> None:
    """The database's server running, as after an agent's `db update` (a load or a save leaves it stopped until
    its next use): the operator's stop and start, the same jobs as `pxt db stop/start`."""
    if running(database(site, org)):
        return
    call(f"{site}/_emulator/databases/{org}/main/stop", {})
    wait_database(site, org, lambda d: d["state"] == "STOPPED", "STOPPED")
    call(f"{site}/_emulator/databases/{org}/main/start", {})
    wait_database(site, org, running, "AVAILABLE with its server ready")


def host_database(exe: Path, root: Path, state: Path, rows: int) -> tuple[str, dict[str, float]]:
    """With the real client: a trial, a hosted database, a table, `rows` rows. Returns the org and step times."""
    (root / "client").mkdir()
    client = Client(exe, root / "client", emulator_env(state))
    steps: dict[str, float] = {}
    try:
        steps["pxt_new"], out = client.run("new")
        m = re.search(r"organization (agent-[0-9a-f]{6})", out)
        if not m:
            raise BenchError(f"pxt new named no organization:\n{tail(out)}")
        org = m.group(1)
        db = f"pxt://{org}:main"
        client.run("init")
        client.run("service", "example", "--out", "app.py")
        steps["db_update"], _ = client.run("db", "update", db, "-f", "--add-config-entry", timeout=DB_UPDATE_TIMEOUT_S)
        steps["schema_update"], _ = client.run("schema", "update", "app.py", db, timeout=SCHEMA_TIMEOUT_S)
        began = time.perf_counter()
        script = INSERT_ROWS.format(table=f"{db}/docs", rows=rows)
        r = subprocess.run(
            [str(client.python), "-c", script],
            capture_output=True,
            text=True,
            timeout=INSERT_TIMEOUT_S,
            env=client.pxt.env,
            cwd=client.project,
        )
        steps["insert"] = time.perf_counter() - began
        if r.returncode != 0 or not r.stdout.strip().endswith(str(rows)):
            raise BenchError(f"the insert failed ({r.returncode}):\n{tail(r.stderr + r.stdout)}")
    finally:
        client.stop()
    print("  hosted database: " + ", ".join(f"{k} {v:.1f} s" for k, v in steps.items()), flush=True)
    return org, steps


# --- the run -------------------------------------------------------------------------------------------------


def healthy(site: str) -> bool:
    with contextlib.suppress(OSError):
        with OPENER.open(site + "/health", timeout=2) as resp:
            return resp.status == 200
    return False


@contextlib.contextmanager
def env(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def up(state_dir: Path) -> Iterator[dict[str, Any]]:
    """The emulator (process runtime) on `state_dir`, yielded once its /health answers 200."""
    with emulator(state_dir, ["--runtime", RUNTIME]) as endpoints:
        deadline = time.monotonic() + TIMEOUT_S
        while not healthy(endpoints["site"]):
            if time.monotonic() > deadline:
                raise BenchError("the emulator did not become healthy")
            time.sleep(0.01)
        yield endpoints


class Samples:
    def __init__(self) -> None:
        self.wall: dict[str, list[float]] = {"restart": []}
        self.server: dict[str, list[float]] = {}  # what the emulator reported, for reset and load
        self.parts: dict[str, list[float]] = {}  # the restart's stop and start

    def add(self, key: str, sample: tuple[float, float | None]) -> None:
        self.wall.setdefault(key, []).append(sample[0])
        if sample[1] is not None:
            self.server.setdefault(key, []).append(sample[1])


def round_small(endpoints: dict[str, Any], i: int, trials: int, s: Samples) -> None:
    """The empty and the trials states (the emulator is empty on entry and on exit)."""
    site = endpoints["site"]
    s.add("reset_empty", timed(lambda: reset(site)))
    s.add("save_empty", timed(lambda: save(site, f"empty-{i}")))
    s.add("load_empty", timed(lambda: load(site, f"empty-{i}")))
    expect(site, 0, 0, "after loading the empty snapshot")
    populate(endpoints, trials)
    s.add("save_trials", timed(lambda: save(site, f"trials-{i}")))
    s.add("reset_trials", timed(lambda: reset(site)))
    expect(site, 0, 0, "after a reset")
    load(site, f"trials-{i}")  # refill (untimed)
    s.add("load_trials", timed(lambda: load(site, f"trials-{i}")))
    expect(site, trials, 0, "after loading the trials' snapshot")
    reset(site)


def round_hosted(site: str, i: int, org: str, trials: int, s: Samples) -> None:
    """The hosted state, from its snapshot `hosted`, with the database's server running before each operation."""
    load(site, "hosted")
    wake(site, org)
    s.add("save_hosted", timed(lambda: save(site, f"hosted-{i}")))
    wake(site, org)  # the save stopped it (its files at rest for the copy)
    s.add("reset_hosted", timed(lambda: reset(site)))
    expect(site, 0, 0, "after a reset")
    load(site, f"hosted-{i}")
    wake(site, org)
    s.add("load_hosted", timed(lambda: load(site, f"hosted-{i}")))
    expect(site, trials + 1, 1, "after loading the hosted snapshot")
    reset(site)


def run(args: argparse.Namespace, exe: Path | None) -> tuple[Samples, dict[str, Any]]:
    s = Samples()
    setup: dict[str, Any] = {}
    org = ""
    with scratch("testkit") as tmp, env(LIMITS):
        state = tmp / "state"
        stopping: float | None = None
        stopped = 0.0
        for i in range(args.runs + 1):  # the first start (the store created, the docs indexed) is not a restart
            with up(state) as endpoints:
                site = endpoints["site"]
                if stopping is None:  # round 0: the hosted state, made once and kept as a snapshot
                    if exe is not None:
                        began = time.perf_counter()
                        populate(endpoints, args.trials)
                        setup["populate_s"] = round(time.perf_counter() - began, 3)
                        org, setup["client_steps_s"] = host_database(exe, tmp, state, args.rows)
                        setup["client_steps_s"] = {k: round(v, 3) for k, v in setup["client_steps_s"].items()}
                        wait_database(site, org, running, "AVAILABLE with its server ready")
                        setup["hosted_snapshot_bytes"] = save(site, "hosted")["size_bytes"]
                        began = time.perf_counter()
                        wake(site, org)
                        setup["wake_s"] = round(time.perf_counter() - began, 3)
                        expect(site, args.trials + 1, 1, "the hosted state")
                        reset(site)
                else:  # from the stop of the last one to this one's healthy /health
                    healthy_at = time.perf_counter()
                    s.wall["restart"].append(healthy_at - stopping)
                    # its two halves, for context: SIGTERM until the old process is gone; spawn until healthy
                    s.parts.setdefault("stop", []).append(stopped - stopping)
                    s.parts.setdefault("start", []).append(healthy_at - stopped)
                    round_small(endpoints, i, args.trials, s)
                    if exe is not None and i <= args.hosted_runs:
                        round_hosted(site, i, org, args.trials, s)
                    last = ", ".join(f"{k} {v[-1]:.3f}" for k, v in s.wall.items() if len(v) == i)
                    print(f"run {i}/{args.runs} (s): {last}", flush=True)
                stopping = time.perf_counter()
            stopped = time.perf_counter()
    return s, setup


# --- report --------------------------------------------------------------------------------------------------


def figure(samples: list[float], restart: float) -> dict[str, Any]:
    med = statistics.median(samples)
    return {
        "ratio_to_restart": round(med / restart, 4),
        "median_s": round(med, 4),
        "min_s": round(min(samples), 4),
        "max_s": round(max(samples), 4),
        "n": len(samples),
    }


def report(
    s: Samples, setup: dict[str, Any], args: argparse.Namespace, exe: Path | None, load0: tuple[float, float, float]
) -> dict[str, Any]:
    restart = statistics.median(s.wall["restart"])
    figures = {k: figure(v, restart) for k, v in s.wall.items()}
    if exe is not None:
        machine = machine_info(exe, load0)
    else:  # no client: the same, without its Python
        machine = {"nproc": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count()}
        machine |= {"python": platform.python_version(), "platform": platform.platform()}
        loads = {"loadavg_at_start": load0, "loadavg_at_end": os.getloadavg()}
        machine |= {k: [round(x, 2) for x in v] for k, v in loads.items()}
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine,
        "runtime": RUNTIME,
        "client": f"pixeltable=={VERSION}" if exe is not None else None,
        "settings": {"runs": args.runs, "hosted_runs": args.hosted_runs, "trials": args.trials, "rows": args.rows},
        "ratios": {
            f"{op}_{st}": figures[f"{op}_{st}"]["ratio_to_restart"]
            for st in STATES
            for op in OPS
            if f"{op}_{st}" in figures
        },
        "figures": figures,
        "samples_s": {k: [round(x, 4) for x in v] for k, v in s.wall.items()},
        "server_s": {k: [round(x, 4) for x in v] for k, v in s.server.items()},  # the emulator's own timing
        "restart_parts_s": {k: [round(x, 4) for x in v] for k, v in s.parts.items()},
        "setup_s": setup,
    }


def print_table(r: dict[str, Any]) -> None:
    f, m = r["figures"], r["machine"]
    rs = f["restart"]
    print()
    print(f"{r['date']}  nproc {m['nproc']}  runtime {r['runtime']}  trials {r['settings']['trials']}")
    spread = f"[{rs['min_s']:.3f}-{rs['max_s']:.3f}]"
    print(f"reference, a plain restart: {rs['median_s']:.3f} s median {spread}, n={rs['n']}")
    parts = {k: statistics.median(v) for k, v in r["restart_parts_s"].items()}
    print(f"  of which: stop (SIGTERM until gone) {parts['stop']:.3f} s, start (until healthy) {parts['start']:.3f} s")
    print("each cell: ratio to the restart, median seconds [min-max]")
    print(f"{'state':<8}" + "".join(f"{op:>30}" for op in OPS))
    for st in STATES:
        cells = []
        for op in OPS:
            x = f.get(f"{op}_{st}")
            cells.append(
                f"{x['ratio_to_restart']:>7.3f} {x['median_s']:>7.3f} [{x['min_s']:.3f}-{x['max_s']:.3f}]"
                if x
                else f"{'-':>30}"
            )
        print(f"{st:<8}" + "".join(f"{c:>30}" for c in cells))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5, help="rounds: restarts and the empty and trials states (default 5)")
    p.add_argument("--hosted-runs", type=int, default=3, help="rounds with the hosted state (default 3; 0: none)")
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--rows", type=int, default=5, help="rows inserted in the hosted table (default 5)")
    p.add_argument("--out", type=Path, default=HERE / "testkit-results.json")
    args = p.parse_args(argv)
    if args.runs < 1 or not 0 <= args.hosted_runs <= args.runs:
        p.error("--runs must be at least 1 and --hosted-runs between 0 and --runs")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds through the `finally` blocks
    exe = ensure_client() if args.hosted_runs else None
    load0 = os.getloadavg()
    s, setup = run(args, exe)
    r = report(s, setup, args, exe, load0)
    print_table(r)
    write_report(args.out, r)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"testkit.py: {e}", file=sys.stderr)
        sys.exit(1)
