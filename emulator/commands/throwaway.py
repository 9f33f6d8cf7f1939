"""`emulator exec [--import FILE] -- COMMAND...`: a throwaway emulator around one command.

The emulator starts on free ports in a temporary state directory, the command runs with the variables of
`emulator env` (and EMULATOR_STATE_DIR), and when it ends everything the emulator started is stopped, the
directory removed, and the command's exit status returned, as `firebase emulators:exec` does for CI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emulator.commands.common import exports

START_TIMEOUT = 120.0  # seconds; a cold start with an import of hosted data can take a while
STOP_TIMEOUT = 60.0


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser(
        "exec",
        help="run a command against a throwaway emulator, then stop it",
        description="Start an emulator on free ports in a temporary state directory, run COMMAND with the "
        "variables `emulator env` prints (and EMULATOR_STATE_DIR), then stop everything the emulator started "
        "and exit with COMMAND's exit status.",
        epilog="examples:\n  emulator exec -- pytest tests/\n"
        "  emulator exec --import seeded.tar.gz -- python agent.py\n"
        "  emulator exec --runtime process --export-on-exit run.tar.gz -- ./ci-checks.sh",
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
    state = Path(tempfile.mkdtemp(prefix="pxt-emulator-exec-"))
    os.chmod(state, 0o700)
    argv = [sys.executable, "-m", "emulator", "up", "--state-dir", str(state)]
    argv += [f"--{name}-port=0" for name in ("site", "auth", "api", "tunnel", "s3")]
    for flag, value in (
        ("--import", args.import_file),
        ("--apply", args.apply_file),
        ("--export-on-exit", args.export_on_exit),
        ("--runtime", args.runtime),
        ("--config", args.config),
    ):
        if value is not None:
            argv += [flag, str(Path(value).expanduser().absolute()) if isinstance(value, Path) else value]
    log_path = state / "emulator.log"
    env = {k: v for k, v in os.environ.items() if k not in ("EMULATOR_URL", "EMULATOR_STATE_DIR")}
    with open(log_path, "ab") as log:
        emulator = subprocess.Popen(
            argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True, env=env
        )
    try:
        found = _wait_ready(emulator, state, log_path)
        if not args.quiet:
            print(f"emulator: up at {found['site']} (state {state}); running {' '.join(command)}", file=sys.stderr)
        child_env = {**env, **exports(found), "EMULATOR_STATE_DIR": str(state)}
        try:
            code = subprocess.call(command, env=child_env)
        except FileNotFoundError:
            print(f"emulator: {command[0]}: command not found", file=sys.stderr)
            code = 127
        except KeyboardInterrupt:
            code = 130
    finally:
        stopped = _stop(emulator)
        if not stopped or emulator.returncode not in (0, -signal.SIGTERM):
            print(f"emulator: the emulator ended with status {emulator.returncode}; its log:", file=sys.stderr)
            print(_tail(log_path), file=sys.stderr)
        shutil.rmtree(state, ignore_errors=True)
    return code


def _wait_ready(emulator: subprocess.Popen[bytes], state: Path, log_path: Path) -> dict[str, Any]:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if emulator.poll() is not None:
            raise SystemExit(f"emulator: it stopped at start (exit {emulator.returncode}):\n{_tail(log_path)}")
        try:
            found = json.loads((state / "endpoints.json").read_text())
            if found.get("pid") == emulator.pid:
                return found
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise SystemExit(f"emulator: not healthy after {START_TIMEOUT:.0f} s:\n{_tail(log_path)}")


def _stop(emulator: subprocess.Popen[bytes]) -> bool:
    """SIGTERM, which stops every workload it started, then wait; SIGKILL the group if it hangs."""
    if emulator.poll() is None:
        emulator.send_signal(signal.SIGTERM)
        try:
            emulator.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(emulator.pid, signal.SIGKILL)
            emulator.wait()
            return False
    return True


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
