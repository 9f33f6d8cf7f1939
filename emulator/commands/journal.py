"""`emulator clock|events`: the emulator's clock and its event journal."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from typing import Any

import msgspec

from emulator.admin import ops
from emulator.admin.client import Unreachable
from emulator.admin.wire import ClockMove, EventView
from emulator.commands import common
from emulator.commands.common import add_locator, run_or_exit
from emulator.core import runlog


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    clock = sub.add_parser(
        "clock",
        help="read or move the emulator's clock",
        description="Read or move the emulator's clock. Moving it runs every job that falls due "
        "(expiries, replay windows) before the command returns.",
    )
    add_locator(clock)
    clock.add_argument("action", nargs="?", default="show", choices=["show", "advance", "set", "freeze", "resume"])
    clock.add_argument("value", nargs="?", help="advance: 90s, 15m, 48h, 2d; set/freeze: ISO 8601 instant")
    # `clock advance -1h` is a value (refused by the emulator with a reason), not an unknown flag.
    clock._negative_number_matcher = re.compile(r"^-\d")

    events = sub.add_parser("events", help="print the event journal", description="Print the event journal.")
    add_locator(events)
    events.add_argument("-f", "--follow", action="store_true", help="keep printing new events")
    events.add_argument("--since", type=int, default=0, help="only events after this number")
    events.add_argument("--kinds", default="", help="comma-separated kind prefixes, e.g. site.ask,clock")
    events.add_argument("--json", action="store_true", help="one JSON object per line")

    return {
        "clock": cmd_clock,
        "events": cmd_events,
    }


FELL_DUE = ("trial.expired", "db.state", "service.state", "media.uploads_expired", "idp.claim")
"""Events a clock move can cause, as `clock advance` reports them (requests that came meanwhile are not)."""


def cmd_clock(args: argparse.Namespace) -> int:
    client = common.client(args)
    body: ClockMove | None = None
    if args.action == "advance":
        if not args.value:
            raise SystemExit("emulator: clock advance needs a duration such as 90s, 15m, 48h or 2d")
        if re.fullmatch(r"[+-]?\d+(\.\d+)?", args.value.strip()):
            raise SystemExit(
                f"emulator: {args.value} has no unit: say {args.value}s, {args.value}m, {args.value}h or {args.value}d"
            )
        body = ClockMove(advance=args.value)
    elif args.action == "set":
        if not args.value:
            raise SystemExit("emulator: clock set needs an ISO 8601 instant")
        body = ClockMove(set=args.value)
    elif args.action == "freeze":
        body = ClockMove(freeze=True, set=args.value or None)
    elif args.action == "resume":
        body = ClockMove(freeze=False)
    before = run_or_exit(client, ops.STATUS.call()).events if body else 0
    state = run_or_exit(client, ops.CLOCK_MOVE.call(body) if body else ops.CLOCK.call())
    print(f"{state.iso}{' (frozen)' if state.frozen else ''}")
    if body and (body.advance is not None or body.set is not None):
        query = {"since": before, "kinds": ",".join(FELL_DUE), "limit": 5000}
        due = run_or_exit(client, ops.JOURNAL.call(query=query)).events
        for event in due:
            print(f"  {describe_event(event)}")
        if not due:
            print("  nothing fell due (tokens, assertions and links past their lifetime are refused from now on)")
    return 0


def describe_event(event: EventView) -> str:
    return runlog.describe(event.kind, event.subject, event.data)


def cmd_events(args: argparse.Namespace) -> int:
    client = common.client(args)

    def show(event: EventView) -> None:
        if args.json:  # as the emulator sent it: its fields in its order
            print(json.dumps(msgspec.to_builtins(event)), flush=True)
        else:
            print(f"{event.seq:>6} {event.iso} {describe_event(event)}", flush=True)

    query: dict[str, str | int | None] = {"since": args.since, "kinds": args.kinds or None}
    if not args.follow:
        for event in run_or_exit(client, ops.JOURNAL.call(query={**query, "limit": 5000})).events:
            show(event)
        return 0
    try:
        for event in client.follow(ops.EVENTS.call(query=query)):
            show(event)
    except KeyboardInterrupt:
        pass
    except Unreachable as e:
        raise SystemExit(f"emulator: the event stream ended ({e})") from None
    return 0
