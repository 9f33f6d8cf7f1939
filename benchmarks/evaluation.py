"""How fast `emulator eval` runs trials of a task without hosted workloads (fixtures/tasks/create-a-trial, the
careful reference agent), as a ratio to the same number of `emulator exec -- true` runs in the same run: what a
trial costs beyond the throwaway emulator it needs (the starting inventory, the agent's process group, the checks,
the report). Both are timed one at a time, then the trials again with --parallel 2, interleaved, median of `--runs`.

    python benchmarks/evaluation.py [--trials 10] [--runs 3] [--out benchmarks/evaluation-results.json]

Every command has a timeout; `emulator eval` and `emulator exec` stop what they started, on errors too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TASK = ROOT / "fixtures" / "tasks" / "create-a-trial"
AGENT = f"{sys.executable} examples/eval/careful_agent.py"
TIMEOUT_S = 900.0


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    seconds = time.perf_counter() - started
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return seconds


def evaluation(trials: int, parallel: int) -> float:
    argv = [sys.executable, "-m", "emulator", "eval", str(TASK), "--agent", AGENT]
    return timed([*argv, "-k", str(trials), "--parallel", str(parallel), "--json"])


def execs(trials: int) -> float:
    return sum(timed([sys.executable, "-m", "emulator", "exec", "--quiet", "--", "true"]) for _ in range(trials))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", type=Path, default=HERE / "evaluation-results.json")
    args = p.parse_args()
    seen: dict[str, list[float]] = {"exec": [], "eval": [], "eval_parallel_2": []}
    for run in range(1, args.runs + 1):
        seen["exec"].append(execs(args.trials))
        seen["eval"].append(evaluation(args.trials, 1))
        seen["eval_parallel_2"].append(evaluation(args.trials, 2))
        print(f"run {run}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in seen.items()), flush=True)
    medians = {k: statistics.median(v) for k, v in seen.items()}
    result = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"nproc": os.cpu_count(), "python": platform.python_version(), "loadavg": os.getloadavg()},
        "trials": args.trials,
        "runs_s": seen,
        "medians_s": medians,
        "trials_per_minute": {k: round(args.trials / v * 60, 1) for k, v in medians.items() if k != "exec"},
        "ratio_to_exec": {k: round(v / medians["exec"], 3) for k, v in medians.items() if k != "exec"},
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("medians_s", "trials_per_minute", "ratio_to_exec")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
