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
        "task's starting state, with `emulator env`'s variables and the instruction (EMULATOR_TASK_INSTRUCTION, "
        "and the file EMULATOR_TASK_INSTRUCTION_FILE); then run the task's checks on what the emulator holds and "
        "recorded. Prints each trial's failing checks with their evidence and each task's pass@1 and pass^k; "
        "exits 0 when every task reached the pass^k its task.toml asks for, 1 when one did not, 2 on a bad task.",
        epilog="examples (a shipped task by its name, a shipped reference agent through $EMULATOR_EXAMPLES):\n"
        "  emulator eval create-a-trial --agent 'python \"$EMULATOR_EXAMPLES/eval/careful_agent.py\"' -k 1\n"
        "  emulator eval my-tasks/* --agent 'python my_agent.py' -k 3 --parallel 3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "tasks",
        nargs="+",
        type=_task_path,
        metavar="TASK_DIR",
        help="task directories (task.toml and more), or the name of a shipped task: " + ", ".join(shipped.task_names()),
    )
    p.add_argument("--agent", required=True, metavar="COMMAND", help="the agent's command, run by the shell")
    p.add_argument("-k", type=int, help="trials per task (default: each task's own `trials`)")
    p.add_argument("--parallel", type=int, default=1, metavar="N", help="trials of a task at once (default 1)")
    p.add_argument("--runtime", choices=["auto", "docker", "process"], help="where hosted databases run")
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
    from emulator.eval.runner import run_suite
    from emulator.eval.tasks import TaskError, load

    if args.k is not None and args.k < 1:
        raise SystemExit("emulator: -k must be at least 1")
    if args.parallel < 1:
        raise SystemExit("emulator: --parallel must be at least 1")
    try:
        tasks = [load(path) for path in args.tasks]
    except TaskError as e:
        print(f"emulator: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # trials stop as at a normal end

    def progress(trial: TrialResult) -> None:
        if not args.json:
            print(_trial_line(trial), file=sys.stderr)

    extra = ["--runtime", args.runtime] if args.runtime else []
    keep = args.out.expanduser().absolute() if args.out else None
    result = run_suite(tasks, args.agent, k=args.k, parallel=args.parallel, args=extra, keep=keep, progress=progress)
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
    return 0 if result.met else 1


def _trial_line(trial: TrialResult) -> str:
    from emulator.eval.reports import trial_line

    return trial_line(trial)
