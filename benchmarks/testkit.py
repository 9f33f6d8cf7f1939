"""The agent test kit, timed: a reset of a running emulator, as a ratio to a plain restart of it in the same run.

    python benchmarks/testkit.py [--runs 5] [--trials 100] [--out PATH]

One emulator on free ports (the process runtime, no hosted database yet). For each of `runs` rounds: a plain
restart (from SIGTERM to the old process until the new `emulator up` on the same state dir answers /health with
200), a reset of the empty emulator, and a reset after `trials` agents each registered, exchanged a token and
created a trial (populating is not timed). Figures are medians; each is also given as a ratio to the restart's median.
Snapshot save and load join this table when they exist (issue 13). Every wait is bounded; the emulator and the
temporary directory are removed on success, errors, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.hosted import BenchError, emulator, write_report  # noqa: E402

LIMITS = {  # the limits that would refuse a hundred agents from one machine
    "EMULATOR_REGISTRATION_RATE_LIMIT": "1000000",
    "EMULATOR_TRIAL_CAPACITY": "1000000",
    "EMULATOR_TRIAL_NETWORK_LIMIT": "1000000",
}
TIMEOUT_S = 60.0


def call(url: str, body: dict[str, Any] | None = None, form: dict[str, str] | None = None, **headers: str) -> Any:
    data, kind = None, "application/json"
    if body is not None:
        data = json.dumps(body).encode()
    elif form is not None:
        data, kind = urllib.parse.urlencode(form).encode(), "application/x-www-form-urlencoded"
    req = urllib.request.Request(url, data=data, headers={"Content-Type": kind, **headers})
    with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
        return json.loads(resp.read() or b"null")


def populate(endpoints: dict[str, Any], trials: int) -> None:
    grant = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    for _ in range(trials):
        reg = call(endpoints["auth"] + "/agent/identity", {"type": "anonymous"})
        token = call(
            endpoints["auth"] + "/oauth2/token", form={"grant_type": grant, "assertion": reg["identity"]["assertion"]}
        )["access_token"]
        call(endpoints["site"] + "/api/v1/trial-orgs", {}, Authorization=f"Bearer {token}")


def timed_reset(endpoints: dict[str, Any]) -> float:
    began = time.perf_counter()
    call(endpoints["site"] + "/_emulator/reset", {"to": "empty"})
    return time.perf_counter() - began


def healthy(site: str) -> bool:
    with contextlib.suppress(OSError):
        with urllib.request.urlopen(site + "/health", timeout=2) as resp:
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
    with emulator(state_dir, ["--runtime", "process"]) as endpoints:
        deadline = time.monotonic() + TIMEOUT_S
        while not healthy(endpoints["site"]):
            if time.monotonic() > deadline:
                raise BenchError("the emulator did not become healthy")
            time.sleep(0.01)
        yield endpoints


def run(runs: int, trials: int) -> dict[str, list[float]]:
    many = f"reset_{trials}_trials"
    times: dict[str, list[float]] = {"restart": [], "reset_empty": [], many: []}
    with tempfile.TemporaryDirectory(prefix="pxt-emulator-testkit-") as tmp, env(LIMITS):
        state = Path(tmp) / "state"
        stopping: float | None = None
        for i in range(runs + 1):  # the first start (the store created, the docs indexed) is not a restart
            with up(state) as endpoints:
                if stopping is not None:  # from the stop of the last one to this one's healthy /health
                    times["restart"].append(time.perf_counter() - stopping)
                    times["reset_empty"].append(timed_reset(endpoints))
                    populate(endpoints, trials)
                    times[many].append(timed_reset(endpoints))
                    print(f"run {i}/{runs}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in times.items()), flush=True)
                stopping = time.perf_counter()
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--out", type=Path, default=HERE / "testkit-results.json")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    times = run(args.runs, args.trials)
    restart = statistics.median(times["restart"])
    figures = {
        k: {"median_s": round(statistics.median(v), 4), "ratio_to_restart": round(statistics.median(v) / restart, 3)}
        for k, v in times.items()
    }
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "runs": args.runs,
        "trials": args.trials,
        "figures": figures,
        "samples": times,
    }
    for k, f in figures.items():
        print(f"{k:<22} {f['median_s']:.3f} s   {f['ratio_to_restart']:.3f}× a restart")
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"testkit.py: {e}", file=sys.stderr)
        sys.exit(1)
