"""What every `emulator` subcommand shares: finding the running emulator and calling it, with errors turned into
a one-line message and exit status (SystemExit)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any, TypeVar

from emulator.admin import ops
from emulator.admin.client import Client, EmulatorError, Locator, Unreachable
from emulator.admin.ops import Call
from emulator.admin.wire import Endpoints
from emulator.config import default_state_dir

A = TypeVar("A")


def add_locator(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--state-dir",
        type=Path,
        help=f"state directory of the emulator to talk to (default {default_state_dir()}; env EMULATOR_STATE_DIR)",
    )
    p.add_argument("--url", help="site URL of the emulator to talk to (default: from endpoints.json; env EMULATOR_URL)")


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print what the emulator answered, as JSON")


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def shown_whole(args: argparse.Namespace, found: list[Any], empty: str) -> bool:
    """A listing's first word: all of it as JSON with --json, or a line that says it is empty (with how to fill
    it); True when that was all there is to print."""
    if args.json:
        print_json(found)
        return True
    if not found:
        print(empty)
        return True
    return False


def state_dir(args: argparse.Namespace) -> Path:
    return Path(args.state_dir or os.environ.get("EMULATOR_STATE_DIR") or default_state_dir()).expanduser()


def locator(args: argparse.Namespace) -> Locator:
    """Which emulator a command talks to: `--url`, else `--state-dir`, else `EMULATOR_URL` (what `emulator env`
    exports: a flag on the command line says more than a shell's leftover), else `EMULATOR_STATE_DIR` or the
    default state dir."""
    url = getattr(args, "url", None)
    if url:
        return Locator(url=url)
    if getattr(args, "state_dir", None):
        return Locator(state_dir=state_dir(args))
    exported = os.environ.get("EMULATOR_URL")
    return Locator(url=exported) if exported else Locator(state_dir=state_dir(args))


def running_state_dir(args: argparse.Namespace) -> Path:
    """The state dir of the emulator a command names: the one given, or, when it is named by URL (`--url`,
    `EMULATOR_URL`), the one its status reports (it must answer, then)."""
    found = locator(args)
    if found.state_dir is not None:
        return found.state_dir
    return Path(run_or_exit(client(args), ops.STATUS.call()).state_dir)


def site(args: argparse.Namespace) -> str:
    """The site's URL of the emulator a command names (where `/_emulator` is)."""
    try:
        return locator(args).site()
    except Unreachable as e:
        raise SystemExit(f"emulator: {e}") from None


def endpoints(args: argparse.Namespace) -> Endpoints:
    """Where every origin of that emulator is (asked of it when it is named by URL)."""
    try:
        return locator(args).endpoints()
    except (EmulatorError, Unreachable) as e:
        raise SystemExit(f"emulator: {e}") from None


def client(args: argparse.Namespace) -> Client:
    """A client of the emulator a command names (its site found now)."""
    return Client(site(args))


def run_or_exit(client: Client, call: Call[A]) -> A:
    """The call's answer, decoded as its op's type (for a command that reads it rather than prints it whole)."""
    try:
        return client.run(call)
    except (EmulatorError, Unreachable) as e:
        raise SystemExit(f"emulator: {e}") from None


def plain_or_exit(client: Client, call: Call[Any]) -> Any:
    """The call's answer as plain JSON, as it came (what `--json` prints)."""
    try:
        return client.plain(call)
    except (EmulatorError, Unreachable) as e:
        raise SystemExit(f"emulator: {e}") from None
