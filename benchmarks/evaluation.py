"""How fast `emulator eval` runs trials of a task without hosted workloads (fixtures/tasks/create-a-trial, the
careful reference agent), with the agent in the namespace sandbox (`--sandbox namespace`: bubblewrap, its own
network, PID namespace, user and read-only file system) and as a plain process group (`--sandbox none`); each as a
ratio to the same number of `emulator exec -- true` runs in the same run (what a trial costs beyond the throwaway
emulator it needs), and the sandbox as a ratio of trials per minute, namespace over none, with its cost per trial
start in seconds. Per run, interleaved: the execs, then both sandboxes one trial at a time, then both with
--parallel 2 (the sandbox that goes first alternates from run to run); the figures are medians of `--runs`.

    python benchmarks/evaluation.py [--trials 10] [--runs 3] [--out benchmarks/evaluation-results.json]

Every command has a timeout; `emulator eval` and `emulator exec` stop what they started, on errors too. An `eval`
whose task is not met, or whose trials did not run in the sandbox asked for, stops the benchmark.
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
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TASK = ROOT / "fixtures" / "tasks" / "create-a-trial"
AGENT = f"{sys.executable} examples/eval/careful_agent.py"
TIMEOUT_S = 900.0
SANDBOXES = ("namespace", "none")
PARALLEL = (1, 2)


def run(argv: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    seconds = time.perf_counter() - started
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return seconds, r.stdout


def key(sandbox: str, parallel: int) -> str:
    return f"eval_{sandbox}" + ("" if parallel == 1 else f"_parallel_{parallel}")


def evaluation(trials: int, parallel: int, sandbox: str) -> tuple[float, float]:
    """The eval's wall seconds, and its agents' seconds per trial (the report's `cost.agent_seconds`)."""
    argv = [sys.executable, "-m", "emulator", "eval", str(TASK), "--agent", AGENT, "--sandbox", sandbox]
    seconds, out = run([*argv, "-k", str(trials), "--parallel", str(parallel), "--json"])
    report: dict[str, Any] = json.loads(out)
    ran = {t["sandbox"] for task in report["tasks"] for t in task["trials"]}
    if not report["met"] or ran != {sandbox}:
        raise SystemExit(f"eval --sandbox {sandbox} --parallel {parallel}: met {report['met']}, trials ran in {ran}")
    return seconds, report["cost"]["agent_seconds"] / trials


def execs(trials: int) -> float:
    argv = [sys.executable, "-m", "emulator", "exec", "--quiet", "--", "true"]
    return sum(run(argv)[0] for _ in range(trials))


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", type=Path, default=HERE / "evaluation-results.json")
    args = p.parse_args()
    trials: int = args.trials
    keys = ["exec", *(key(s, n) for n in PARALLEL for s in SANDBOXES)]
    seen: dict[str, list[float]] = {k: [] for k in keys}
    agent_s: dict[str, list[float]] = {k: [] for k in keys[1:]}
    load_start = os.getloadavg()
    for r in range(1, args.runs + 1):
        seen["exec"].append(execs(trials))
        order = SANDBOXES if r % 2 else SANDBOXES[::-1]  # neither sandbox always runs first
        for n in PARALLEL:
            for s in order:
                wall, agent = evaluation(trials, n, s)
                seen[key(s, n)].append(wall)
                agent_s[key(s, n)].append(agent)
        print(f"run {r}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in seen.items()), flush=True)
    medians = {k: statistics.median(v) for k, v in seen.items()}
    sandbox: dict[str, dict[str, object]] = {}
    for n in PARALLEL:
        ns, none = key("namespace", n), key("none", n)
        paired = [(a - b) / trials for a, b in zip(seen[ns], seen[none], strict=True)]
        sandbox[f"parallel_{n}"] = {
            # trials per minute with the sandbox over without: 1 would be free
            "trials_per_minute_ratio": round(medians[none] / medians[ns], 3),
            # wall seconds the sandbox adds per trial (of the medians; with --parallel 2, of the wall time)
            "cost_s_per_trial": round((medians[ns] - medians[none]) / trials, 3),
            # the same within each run, where the two ran back to back, and its median: less moved by the load
            "cost_s_per_trial_per_run": [round(c, 3) for c in paired],
            "cost_s_per_trial_paired_median": round(statistics.median(paired), 3),
            "trials_per_minute_ratio_per_run": [round(b / a, 3) for a, b in zip(seen[ns], seen[none], strict=True)],
            "agent_s_per_trial": {s: round(statistics.median(agent_s[key(s, n)]), 3) for s in SANDBOXES},
        }
    result: dict[str, object] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
        },
        "trials": trials,
        "runs_s": seen,
        "agent_s_per_trial_runs": agent_s,
        "medians_s": medians,
        "trials_per_minute": {k: round(trials / v * 60, 1) for k, v in medians.items() if k != "exec"},
        "ratio_to_exec": {k: round(v / medians["exec"], 3) for k, v in medians.items() if k != "exec"},
        "sandbox_namespace_over_none": sandbox,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    shown = ("medians_s", "trials_per_minute", "ratio_to_exec", "sandbox_namespace_over_none")
    print(json.dumps({k: result[k] for k in shown}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
