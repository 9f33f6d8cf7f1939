"""`emulator eval TASK_DIR... --agent 'COMMAND' [-k N] [--parallel N] [--json]`: does the agent do the job, every
time? Each task's trials run on throwaway emulators; the exit status says whether every task reached its pass^k."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from emulator import shipped

if TYPE_CHECKING:
    from emulator.eval.results import TrialResult


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser(
        "eval",
        help="run an agent on tasks, k trials each, and check what it did",
        description="Run COMMAND once per trial of each task, each trial on a throwaway emulator started from the "
        "task's starting state, in the agent's sandbox (--sandbox), with `emulator env`'s variables and the "
        "instruction (EMULATOR_TASK_INSTRUCTION, and the file EMULATOR_TASK_INSTRUCTION_FILE) and nothing of the "
        "harness's (no state dir, task dir or admin token); then run the task's checks, and a tampering check, on the "
        "harness's own copy of the trial's journal and on what the emulator holds. Prints each trial's failing checks "
        "with their evidence and each task's pass@1, pass@k and pass^k; exits 0 when every task reached the pass^k "
        "its task.toml asks for, 1 when one did not, 2 on a bad task (every one said before any trial), 128 + the "
        "signal when SIGINT or SIGTERM stopped the run (the report is of the trials that ran).",
        epilog="examples (a shipped task by its name, a shipped reference agent through $EMULATOR_EXAMPLES):\n"
        "  emulator eval create-a-trial --agent 'python \"$EMULATOR_EXAMPLES/eval/careful_agent.py\"' -k 1\n"
        "  emulator eval my-tasks/* --agent 'python my_agent.py' -k 3 --parallel 3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "tasks",
        nargs="*",
        type=_task_path,
        metavar="TASK_DIR",
        help="task directories (task.toml and more), or the name of a shipped task: " + ", ".join(shipped.task_names()),
    )
    p.add_argument("--agent", metavar="COMMAND", help="the agent's command, run by the shell (required)")
    p.add_argument(
        "--strict",
        action="store_true",
        help="a check that can never fail (a warning otherwise) makes its task invalid (exit 2)",
    )
    p.add_argument(
        "--schema",
        action="store_true",
        help="print the JSON Schema of task.toml (for an editor: a `#:schema PATH` first line in task.toml) and exit",
    )
    p.add_argument("-k", type=int, help="trials per task (default: each task's own `trials`)")
    p.add_argument("--parallel", type=int, default=1, metavar="N", help="trials of a task at once (default 1)")
    p.add_argument("--runtime", choices=["auto", "docker", "process"], help="where hosted databases run")
    p.add_argument(
        "--sandbox",
        choices=["namespace", "none"],
        help="where the agent runs: `namespace` (the default on Linux; needs bubblewrap) gives it a network, PID "
        "namespace, user and read-only file system of its own, reaching only its trial's emulator; `none` (the "
        "default elsewhere) runs it as a plain process group, which an agent that cheats can get around",
    )
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument("--junit", type=Path, metavar="FILE", help="write JUnit XML (a test case per trial) to FILE")
    p.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML report to FILE")
    p.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="keep each trial's run record (for `emulator record diff`), the agent's output and the emulator's log",
    )
    return {"eval": cmd_eval}


def _task_path(arg: str) -> Path:
    """A directory as given; a name that is no directory here but a shipped task's is that task (installed)."""
    path = Path(arg)
    return path if path.exists() else shipped.task(arg) or path


def cmd_eval(args: argparse.Namespace) -> int:
    if args.schema:
        sys.stdout.write(shipped.TASK_SCHEMA.read_text())
        return 0
    if not args.tasks or not args.agent:
        print("emulator eval: give TASK_DIR... and --agent COMMAND (or --schema)", file=sys.stderr)
        return 2
    from emulator.config import default_state_dir
    from emulator.eval import sandbox
    from emulator.eval.runner import Setup, run_suite
    from emulator.eval.tasks import load_all

    if args.k is not None and args.k < 1:
        raise SystemExit("emulator: -k must be at least 1")
    if args.parallel < 1:
        raise SystemExit("emulator: --parallel must be at least 1")
    loaded = load_all(args.tasks, strict=args.strict)  # every task checked whole, all problems said, before any trial
    for warning in loaded.warnings:
        print(f"emulator: warning: {warning}", file=sys.stderr)
    for error in loaded.errors:
        print(f"emulator: {error}", file=sys.stderr)
    if loaded.errors:
        return 2
    tasks = loaded.tasks
    chosen = args.sandbox or sandbox.default()
    why = sandbox.unavailable(chosen)
    if why is not None:
        print(f"emulator: {why}", file=sys.stderr)
        return 2
    keep = args.out.expanduser().absolute() if args.out else None
    # What the agent must not see beside its trial's state: the reports' folder and the person's own emulator.
    cover = tuple(p for p in (keep, default_state_dir()) if p is not None)
    setup = Setup(sandbox=chosen, cover=cover)
    caught: list[int] = []

    def stop(signum: int, _: object) -> None:
        if caught:  # a second one: no more waiting (every trial's sandbox dies with this process)
            raise KeyboardInterrupt
        caught.append(signum)
        setup.stop.set(signal.Signals(signum).name)
        print(f"emulator: {signal.Signals(signum).name}: stopping every trial", file=sys.stderr)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    def progress(trial: TrialResult) -> None:
        if not args.json:
            print(_trial_line(trial), file=sys.stderr)

    extra = ["--runtime", args.runtime] if args.runtime else []
    result = run_suite(
        tasks, args.agent, k=args.k, parallel=args.parallel, args=extra, keep=keep, progress=progress, setup=setup
    )
    if args.junit or args.html:
        from emulator.eval import reports

        if args.junit:
            args.junit.write_bytes(reports.junit(result))
        if args.html:
            args.html.write_text(reports.page(result))
    if args.json:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(result)).decode() + "\n")
    else:
        from emulator.eval.reports import text

        sys.stdout.write(text(result))
    if result.incomplete:
        print(f"emulator: stopped ({result.stopped}): the report is of the trials that ran", file=sys.stderr)
        return 128 + (caught[0] if caught else signal.SIGINT)
    return 0 if result.met else 1


def _trial_line(trial: TrialResult) -> str:
    from emulator.eval.reports import trial_line

    return trial_line(trial)
