"""`emulator trace WHO`, `emulator report` and `emulator record save|diff`: what an agent did, what it did wrong,
and how one run differs from another (emulator.behaviour)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emulator.admin import ops
from emulator.commands import common
from emulator.commands.common import add_json, add_locator, plain_or_exit, run_or_exit


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    trace = sub.add_parser(
        "trace",
        help="one agent's calls and what they caused, across every origin",
        description="The causal chain of one agent, in journal order on the emulator's clock: discovery it read, "
        "registration, token exchanges, trials, keys, secrets, database generations and receipts, services, "
        "route calls through the gateway, tunnel sessions and its databases' logs; each request with its status "
        "and duration.",
    )
    add_locator(trace)
    trace.add_argument("who", help="a registration id, an organization, or an API key's name (ORG/NAME)")
    add_json(trace)
    report = sub.add_parser(
        "report",
        help="the scorecard: what each agent did that a well-behaved client does not (exit 1 if anything)",
        description="Rules over the journal that name what a well-behaved client of the spec does, each with an id, "
        "why, and the event numbers that show it. Exits 1 when any agent broke a rule.",
    )
    add_locator(report)
    report.add_argument("--agent", help="one agent: a registration id, an organization or an API key's name")
    add_json(report)
    return {"trace": cmd_trace, "report": cmd_report, **register_record(sub)}


def cmd_trace(args: argparse.Namespace) -> int:
    call = ops.TRACE.call(who=args.who)
    if args.json:
        print(json.dumps(plain_or_exit(common.client(args), call), indent=2))
    else:
        from emulator.behaviour import traces  # here, not at start: the CLI's other commands do not pay for it

        print(traces.render(run_or_exit(common.client(args), call)))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    call = ops.REPORT.call(query={"agent": args.agent})
    if args.json:
        found = plain_or_exit(common.client(args), call)
        print(json.dumps(found, indent=2))
        return 0 if found["clean"] else 1
    from emulator.behaviour import scorecard

    report = run_or_exit(common.client(args), call)
    print(scorecard.render(report))
    return 0 if report.clean else 1


def register_record(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    rec = sub.add_parser(
        "record",
        help="save a run's journal to a file (secrets redacted); diff two runs of the same agent",
        description="A record is the journal of a run (every request with its status, and what it caused), or one "
        "agent's part of it, with keys, tokens and passwords redacted. `diff` shows where two runs diverge, "
        "ignoring ids, addresses, ports, instants and durations; it exits 1 when they differ.",
        epilog="examples:\n  emulator record save run.json --agent agent-3f2a1c\n"
        "  emulator record diff before.json after.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = rec.add_subparsers(dest="verb", metavar="VERB", required=True)
    save = verbs.add_parser("save", help="save the running emulator's run to FILE (JSON)")
    add_locator(save)
    save.add_argument("file", type=Path)
    save.add_argument("--agent", help="only this agent: a registration id, an organization or an API key's name")
    compare = verbs.add_parser("diff", help="where two records diverge (exit 1 when they do)")
    compare.add_argument("a", type=Path)
    compare.add_argument("b", type=Path)
    compare.add_argument("--logs", action="store_true", help="compare the databases' log lines too")
    return {"record": cmd_record}


def cmd_record(args: argparse.Namespace) -> int:
    import msgspec

    from emulator.behaviour import records
    from emulator.core.private import write_private

    if args.verb == "save":
        found = plain_or_exit(common.client(args), ops.RECORD.call(query={"agent": args.agent}).within(60))
        write_private(args.file, json.dumps(found, indent=1).encode() + b"\n")
        print(f"saved {len(found['events'])} events to {args.file}")
        return 0
    loaded = []
    for path in (args.a, args.b):
        try:
            loaded.append(msgspec.json.decode(path.read_bytes(), type=records.Record))
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as e:
            raise SystemExit(f"emulator: {path} is not a record: {e}") from None
        if loaded[-1].format != records.FORMAT:
            raise SystemExit(
                f"emulator: {path} is a {loaded[-1].format!r} record; this emulator reads {records.FORMAT}"
            )
    changes = records.diff(loaded[0], loaded[1], str(args.a), str(args.b), logs=args.logs)
    if not changes:
        print("the two runs did the same things")
        return 0
    print("\n".join(changes))
    return 1
