"""`emulator exec [--import FILE] -- COMMAND...`: a throwaway emulator around one command.

The emulator starts on free ports in a temporary state directory, the command runs with the variables of
`emulator env` (and EMULATOR_STATE_DIR), and when it ends everything the emulator started is stopped, the
directory removed, and the command's exit status returned, as `firebase emulators:exec` does for CI.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser(
        "exec",
        help="run a command against a throwaway emulator, then stop it",
        description="Start an emulator on free ports in a temporary state directory, run COMMAND with the "
        "variables `emulator env` prints (and EMULATOR_STATE_DIR), then stop everything the emulator started "
        "and exit with COMMAND's exit status.",
        epilog="examples:\n  emulator exec -- pytest tests/\n"
        "  emulator exec --runtime process --export-on-exit seeded.tar.gz -- ./ci-checks.sh\n"
        "  emulator exec --import seeded.tar.gz -- python agent.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--import", dest="import_file", type=Path, metavar="FILE", help="start from this export")
    p.add_argument("--apply", dest="apply_file", type=Path, metavar="FILE", help="apply this declared state first")
    p.add_argument("--export-on-exit", type=Path, metavar="FILE", help="export the state to FILE at the end")
    p.add_argument("--runtime", choices=["auto", "docker", "process"], help="where hosted databases run")
    p.add_argument("--config", type=Path, help="settings file for the emulator")
    p.add_argument("--quiet", action="store_true", help="do not print where the emulator listens")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND...")
    return {"exec": cmd_exec}


def cmd_exec(args: argparse.Namespace) -> int:
    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        raise SystemExit("emulator: exec needs a command after --, e.g. emulator exec -- pytest")
    # Stopped from outside (a CI job cancelled): the command goes, then the emulator, as at a normal end.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    from emulator.testkit import EmulatorError, launch, log_tail, stop_process  # the launch is shared with the kit

    state = Path(tempfile.mkdtemp(prefix="pxt-emulator-exec-"))
    flags: list[str] = []
    for flag, value in (
        ("--import", args.import_file),
        ("--apply", args.apply_file),
        ("--export-on-exit", args.export_on_exit),
        ("--runtime", args.runtime),
        ("--config", args.config),
    ):
        if value is not None:
            flags += [flag, str(Path(value).expanduser().absolute()) if isinstance(value, Path) else value]
    log_path = state / "emulator.log"
    env = {k: v for k, v in os.environ.items() if k not in ("EMULATOR_URL", "EMULATOR_STATE_DIR")}
    try:
        emulator, found = launch(state, flags, log_path=log_path, env=env)
    except EmulatorError as e:
        shutil.rmtree(state, ignore_errors=True)
        raise SystemExit(f"emulator: {e.message}") from None
    try:
        if not args.quiet:
            print(f"emulator: up at {found.site} (state {state}); running {' '.join(command)}", file=sys.stderr)
        child_env = {**env, **found.exports(), "EMULATOR_STATE_DIR": str(state)}
        try:
            code = subprocess.call(command, env=child_env)
        except FileNotFoundError:
            print(f"emulator: {command[0]}: command not found", file=sys.stderr)
            code = 127
        except KeyboardInterrupt:
            code = 130
    finally:
        stopped = stop_process(emulator)
        if not stopped or emulator.returncode not in (0, -signal.SIGTERM):
            print(f"emulator: the emulator ended with status {emulator.returncode}; its log:", file=sys.stderr)
            print(log_tail(log_path), file=sys.stderr)
        shutil.rmtree(state, ignore_errors=True)
    return code
