"""`emulator fault add|list|clear`: fault rules on a running emulator (the rules are core.faults')."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import msgspec

from emulator.admin import ops
from emulator.admin.wire import FaultList, FaultRuleView
from emulator.commands import common
from emulator.commands.common import add_json, add_locator, plain_or_exit
from emulator.core.faults import HOSTED, KILLS, MCP_FAULTS, ORIGINS, FaultSpec

# flag → the rule's field, for the flags that carry a value
_FIELDS = (
    "origin",
    "path",
    "method",
    "operation_type",
    "mcp_method",
    "tool",
    "mcp",
    "events",
    "status",
    "message",
    "retry_after",
    "latency_ms",
    "nth",
    "count",
    "probability",
    "seed",
    "hosted",
    "target",
)


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    fault = sub.add_parser(
        "fault",
        help="make calls fail, slow down or drop on purpose; kill hosted workloads",
        description="Fault rules match requests by origin, path, method or control-plane operation type, and answer "
        "a status in that origin's own error format (with Retry-After), add latency or drop the connection; on "
        "the Nth call, N times, or with a seeded probability. Hosted faults fail the next db update or its "
        "environment build, or kill a running database or service as an OOM kill would. Each firing is a "
        "fault.fired event in the journal. A reset or a snapshot load clears every rule.",
        epilog="examples:\n  emulator fault add --path /ask --status 503 --retry-after 5 --count 2\n"
        "  emulator fault add --operation-type list_orgs --status 500 --nth 3\n"
        "  emulator fault add --origin auth --path '/oauth2/*' --drop --probability 0.2 --seed 7\n"
        "  emulator fault add --mcp-method tools/call --tool search_docs --mcp input_required\n"
        "  emulator fault add --hosted db_update_fails --target acme:main --message 'out of disk'\n"
        "  emulator fault add --hosted kill_database --target acme:main\n"
        "  emulator fault list\n  emulator fault clear",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = fault.add_subparsers(dest="verb", metavar="VERB", required=True)
    add = verbs.add_parser("add", help="add a rule (printed with its id)", description="Add a fault rule.")
    add_locator(add)
    match = add.add_argument_group("what it matches")
    match.add_argument("--origin", choices=ORIGINS, help="the origin (default: any)")
    match.add_argument("--path", help="the path, exactly, or a prefix ending with * (the tunnel's is /ORG/DB)")
    match.add_argument("--method", help="the HTTP method (default: any)")
    match.add_argument("--operation-type", help="a control-plane operation_type (list_orgs, submit_update, …)")
    match.add_argument("--mcp-method", help="/mcp's JSON-RPC method (tools/call, server/discover, initialize, …)")
    match.add_argument("--tool", help="a tools/call's tool name (with --mcp-method tools/call)")
    effect = add.add_argument_group("what it does")
    effect.add_argument("--status", type=int, help="answer this error status (400-599)")
    effect.add_argument("--message", help="the error's message (or a hosted fault's reason)")
    effect.add_argument("--retry-after", type=int, help="seconds, in Retry-After (with --status 429 or 503)")
    effect.add_argument("--latency-ms", type=int, help="wait this long before answering (or going on)")
    effect.add_argument("--drop", action="store_true", help="close the connection without an answer")
    effect.add_argument("--mcp", choices=MCP_FAULTS, help="a protocol fault on /mcp (with --mcp-method)")
    effect.add_argument("--events", type=int, choices=(0, 1), help="stream_cut: events sent before the cut")
    effect.add_argument("--hosted", choices=HOSTED, help="a hosted fault instead (with --target)")
    effect.add_argument("--target", help="the hosted fault's database ORG:DB (or DB), or ORG:DB:SERVICE")
    when = add.add_argument_group("when it fires")
    when.add_argument("--nth", type=int, help="from the Nth matching call on (default 1)")
    when.add_argument("--count", type=int, help="this many times, then the rule goes (default: until cleared)")
    when.add_argument("--probability", type=float, help="fire with this probability (0-1]")
    when.add_argument("--seed", type=int, help="the probability's seed, so a run repeats")
    add.add_argument("--json", action="store_true", help="print the rule as JSON")
    listed = verbs.add_parser("list", help="list the rules, with how often each matched and fired")
    add_locator(listed)
    add_json(listed)
    clear = verbs.add_parser("clear", help="remove one rule by id, or every rule and hold")
    add_locator(clear)
    clear.add_argument("id", nargs="?", help="the rule's id (default: all)")
    return {"fault": cmd_fault}


def describe(rule: FaultSpec) -> str:
    if rule.hosted:
        return f"{rule.hosted}{' of ' + rule.target if rule.target else ''}"
    mcp = f"/mcp {rule.mcp_method}{' ' + rule.tool if rule.tool else ''}" if rule.mcp_method else None
    where = " ".join(str(v) for v in (rule.origin, rule.method, rule.operation_type, mcp or rule.path) if v)
    if rule.mcp:
        effect = rule.mcp + (f" after {rule.events} event(s)" if rule.events else "")
    elif rule.drop:
        effect = "drop"
    elif rule.status:
        effect = f"{rule.status}" + (f" Retry-After {rule.retry_after}" if rule.retry_after is not None else "")
    else:
        effect = ""
    if rule.latency_ms:
        effect = f"{effect} +{rule.latency_ms} ms".strip()
    when = [f"from call {rule.nth}"] if rule.nth > 1 else []
    when += [f"{rule.count}×"] if rule.count else []
    when += [f"p={rule.probability:g} seed={rule.seed}"] if rule.probability is not None else []
    return f"{where or 'any'} → {effect}{'  (' + ', '.join(when) + ')' if when else ''}"


def cmd_fault(args: argparse.Namespace) -> int:
    client = common.client(args)
    if args.verb == "add":
        given = {f: getattr(args, f) for f in _FIELDS if getattr(args, f) is not None}  # the flags given
        answer = plain_or_exit(client, ops.FAULT_ADD.call(FaultSpec(**given, drop=args.drop)))
        if args.json:
            print(json.dumps(answer, indent=2))
        else:
            rule = msgspec.convert(answer, FaultRuleView)
            done = "  (killed now)" if rule.hosted in KILLS else ""
            print(f"{rule.id}  {describe(rule)}{done}")
        return 0
    if args.verb == "list":
        answer = plain_or_exit(client, ops.FAULTS.call())
        if args.json:
            print(json.dumps(answer, indent=2))
            return 0
        found = msgspec.convert(answer, FaultList)
        if not found.rules and not found.holds:
            print("no fault rules (emulator fault add …)")
        for rule in found.rules:
            print(f"{rule.id:<5} {describe(rule)}   matched {rule.seen}, fired {rule.fired}")
        for path, count in found.holds.items():
            print(f"hold  {path}: the next {count} request{'s' if count != 1 else ''} wait for a release")
        return 0
    if args.id:
        plain_or_exit(client, ops.FAULT_REMOVE.call(rule_id=args.id))
        print(f"removed {args.id}")
    else:
        cleared = plain_or_exit(client, ops.FAULTS_CLEAR.call())["cleared"]
        print(f"cleared {cleared} rule{'s' if cleared != 1 else ''}")
    return 0
