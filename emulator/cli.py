"""`emulator`: start, stop, inspect and steer the local Pixeltable Cloud emulator."""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Callable
from typing import Any

from emulator import __version__
from emulator.commands import (
    acts,
    agents,
    behaviour,
    buildcache,
    declared,
    evaluate,
    faults,
    image,
    journal,
    running,
    snapshots,
    throwaway,
    webhooks,
)

DESCRIPTION = """\
Local emulator of Pixeltable Cloud: the public agent API (/ask, /mcp, /health, trials, discovery),
the identity provider (agent registration, claims, tokens), the control plane, and the emulator's
control API (/_emulator). Everything listens on 127.0.0.1 unless told otherwise, on ports 8700-8705
(--free-ports: a free port for each, for an emulator beside another).

Every setting can also come from an EMULATOR_<NAME> environment variable or from
<state-dir>/emulator.toml; flags win over the environment, which wins over the file.
"""

EPILOG = """\
examples:
  emulator up --free-ports             start in the foreground on free ports (Ctrl-C stops it)
  emulator up -d --free-ports          start in the background; it prints the command that stops it
  emulator status                      what is running, where, and the emulator's clock
  emulator clock advance 48h           move the emulator's clock (due jobs run first)
  emulator events -f                   follow the event journal
  emulator tui                         the live dashboard (registrations, trials, databases, logs)
  emulator down                        stop the emulator started with -d
"""


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="emulator",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    root.add_argument("--version", action="version", version=f"emulator {__version__}")
    sub = root.add_subparsers(dest="command", metavar="COMMAND")
    for module in MODULES:
        COMMANDS.update(module.register(sub))
    return root


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}
MODULES: tuple[Any, ...] = (
    running,
    journal,
    acts,
    agents,
    snapshots,
    throwaway,
    evaluate,
    faults,
    webhooks,
    declared,
    behaviour,
    buildcache,
    image,
)
"""The modules of `emulator.commands` whose subcommands `emulator` offers, in the order its help lists them."""


def main(argv: list[str] | None = None) -> int:
    p = parser()
    argv = sys.argv[1:] if argv is None else argv
    args, extra = p.parse_known_args(argv)
    if not args.command:
        if extra:
            p.error(f"unrecognized arguments: {' '.join(extra)}")
        p.print_help()
        return 2
    if extra:
        _refuse_unknown(subcommand(p, args.command), extra)
    args.argv = argv
    try:
        return COMMANDS[args.command](args)
    except BrokenPipeError:
        # `emulator status | head`: the reader left; say nothing more (and not at exit either).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def subcommand(p: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    actions = (a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return next(actions).choices[name]


def _refuse_unknown(p: argparse.ArgumentParser, extra: list[str]) -> None:
    """A wrong flag is reported with the usage of the subcommand it was given to, and the nearest right one."""
    known = [o for a in p._actions for o in a.option_strings]
    first = next((e for e in extra if e.startswith("-")), extra[0])
    close = difflib.get_close_matches(first.split("=")[0], known, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close and first.startswith("--") else ""
    p.error(f"unrecognized arguments: {' '.join(extra)}{hint}")


if __name__ == "__main__":
    sys.exit(main())
