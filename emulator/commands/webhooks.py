"""`emulator webhook add|list|remove|deliveries`: where a running emulator sends the registration events, and how
each delivery went (the rules and the sender are emulator/identity/endpoints.py's, deliveries.py's and sender.py's)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import msgspec

from emulator.admin import ops
from emulator.admin.wire import DeliveryList, DeliveryView, WebhookAdd, WebhookCreated, WebhookList
from emulator.commands import common
from emulator.commands.common import add_json, add_locator, plain_or_exit, print_json, run_or_exit, shown_whole
from emulator.identity.agent_events import EVENTS
from emulator.identity.states import DeliveryState


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    hook = sub.add_parser(
        "webhook",
        help="where the registration events are delivered (signed as WorkOS signs them), and how each try went",
        description="Webhook endpoints receive the agent registration events (agent.registration.*) as WorkOS "
        "sends them: a JSON POST signed in the WorkOS-Signature header with the endpoint's secret. A failed try "
        "is tried again on the emulator's clock (1 min, 5 min, 30 min, 2 h, 8 h, 24 h), so `emulator clock "
        "advance` shows a retry at once. Endpoints survive `emulator reset`.",
        epilog="examples:\n  emulator webhook add http://127.0.0.1:9000/hooks\n"
        "  emulator webhook add http://127.0.0.1:9000/hooks --event agent.registration.created --secret whsec_ci\n"
        "  emulator webhook list\n  emulator webhook deliveries --endpoint we_…\n  emulator webhook remove we_…",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = hook.add_subparsers(dest="verb", metavar="VERB", required=True)
    add = verbs.add_parser("add", help="add an endpoint (its secret is printed once)", description="Add an endpoint.")
    add_locator(add)
    # not `url`: that is the locator's --url (the emulator's site)
    add.add_argument("target", metavar="URL", help="the endpoint: an absolute http:// or https:// URL")
    add.add_argument(
        "--event", action="append", choices=EVENTS, metavar="NAME", help="an event it takes (repeat; default: all)"
    )
    add.add_argument("--secret", help="its signing secret (default: one is made, whsec_…)")
    add_json(add)
    listed = verbs.add_parser("list", help="list the endpoints (never a secret)")
    add_locator(listed)
    add_json(listed)
    remove = verbs.add_parser("remove", help="remove an endpoint; its pending deliveries go with it")
    add_locator(remove)
    remove.add_argument("id", help="the endpoint's id (we_…)")
    shown = verbs.add_parser("deliveries", help="each delivery with its state and every try")
    add_locator(shown)
    shown.add_argument("--endpoint", metavar="ID", help="of this endpoint only")
    shown.add_argument("--event", metavar="ID", help="of this event only (event_…)")
    add_json(shown)
    return {"webhook": cmd_webhook}


def describe(d: DeliveryView) -> list[str]:
    """A delivery and its tries, a line each."""
    head = f"{d.id}  {d.event} {d.event_id} → {d.url}  {d.state}"
    if d.state == DeliveryState.PENDING and d.next_at:
        head += f" (try {d.attempts + 1} at {d.next_at})"
    lines = [head]
    for t in d.tries:
        outcome = str(t.status) if t.status is not None else "no answer"
        lines.append(f"  try {t.attempt} {t.at}  {outcome}{'  ' + t.error if t.error else ''}  ({t.ms} ms)")
    return lines


def cmd_webhook(args: argparse.Namespace) -> int:
    client = common.client(args)
    if args.verb == "add":
        answer = plain_or_exit(
            client, ops.WEBHOOK_ADD.call(WebhookAdd(url=args.target, events=args.event, secret=args.secret))
        )
        if args.json:
            print_json(answer)
            return 0
        made = msgspec.convert(answer, WebhookCreated)
        print(f"{made.id}  {made.url}  events: {', '.join(made.events)}")
        print(f"secret: {made.secret}   (shown only now: give it to the receiver)")
        return 0
    if args.verb == "list":
        answer = plain_or_exit(client, ops.WEBHOOKS.call())
        if shown_whole(args, answer["webhooks"], "no webhook endpoints (emulator webhook add URL)"):
            return 0
        for w in msgspec.convert(answer, WebhookList).webhooks:
            every = set(w.events) == set(EVENTS)
            print(f"{w.id}  {w.url}  {'every event' if every else ', '.join(w.events)}  (since {w.created_at})")
        return 0
    if args.verb == "remove":
        removed = run_or_exit(client, ops.WEBHOOK_REMOVE.call(endpoint_id=args.id))
        dropped = f" ({removed.dropped} pending deliver{'ies' if removed.dropped != 1 else 'y'} dropped)"
        print(f"removed {removed.removed}{dropped if removed.dropped else ''}")
        return 0
    query = {"endpoint": args.endpoint or None, "event": args.event or None}
    answer = plain_or_exit(client, ops.WEBHOOK_DELIVERIES.call(query=query))
    if shown_whole(args, answer["deliveries"], "no deliveries yet"):
        return 0
    for d in msgspec.convert(answer, DeliveryList).deliveries:
        print("\n".join(describe(d)))
    return 0
