"""`emulator service-key create|list|revoke` and `emulator registration revoke|delete`: the service side of agent
registration on a running emulator (the keys a service calls the agents API with), and the operator's acts on a
registration."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from emulator.admin import ops
from emulator.admin.wire import ServiceKeyCreate
from emulator.commands import common
from emulator.commands.common import add_json, add_locator, plain_or_exit, print_json, shown_whole
from emulator.identity.states import CredentialState


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    key = sub.add_parser(
        "service-key",
        help="make, list or revoke the service keys of the agents API",
        description="A service that accepts agents calls the identity provider's agents API (/agents/*: validate a "
        "credential, link a claim to its user, read or revoke a registration) with a service key, as "
        "Authorization: Bearer sk_test_…. The key is printed once, when it is made; only its hash is kept.",
        epilog="examples:\n  emulator service-key create backend\n  emulator service-key list\n"
        "  emulator service-key revoke skey_01K…",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = key.add_subparsers(dest="verb", metavar="VERB", required=True)
    create = verbs.add_parser("create", help="make a key (printed once)", description="Make a service key.")
    add_locator(create)
    create.add_argument("name", help="what the key is for (1 to 64 letters, digits, spaces, . _ -)")
    add_json(create)
    listed = verbs.add_parser("list", help="list the keys (never the keys themselves)")
    add_locator(listed)
    add_json(listed)
    revoke = verbs.add_parser("revoke", help="revoke a key by id")
    add_locator(revoke)
    revoke.add_argument("id", help="the key's id (skey_…)")
    add_json(revoke)

    reg = sub.add_parser(
        "registration",
        help="revoke or delete an agent registration as the operator",
        description="Revoke a registration (its assertion, access and refresh tokens, claim links and trial key stop "
        "working on every origin; it stays listed as revoked), or delete it with its tokens and claims.",
    )
    acts = reg.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, text in (("revoke", "revoke a registration"), ("delete", "delete a registration")):
        act = acts.add_parser(verb, help=text, description=text[0].upper() + text[1:] + ".")
        add_locator(act)
        act.add_argument("id", help="the registration's id (agent_reg_…)")
        add_json(act)
    return {"service-key": cmd_service_key, "registration": cmd_registration}


def cmd_service_key(args: argparse.Namespace) -> int:
    client = common.client(args)
    if args.verb == "create":
        made = plain_or_exit(client, ops.SERVICE_KEY_CREATE.call(ServiceKeyCreate(args.name)))
        if args.json:
            print_json(made)
        else:
            print(f"{made['id']}  {made['name']}\n{made['key']}\n(shown once: keep it; only its hash is stored)")
        return 0
    if args.verb == "list":
        found = plain_or_exit(client, ops.SERVICE_KEYS.call())["service_keys"]
        if shown_whole(args, found, "no service keys yet (emulator service-key create NAME makes one)"):
            return 0
        for k in found:
            state = f"{CredentialState.REVOKED} {k['revoked_at']}" if k["revoked_at"] else CredentialState.LIVE
            print(f"{k['id']}  {k['name']:<20} …{k['hint']}  created {k['created_at']}  {state}")
        return 0
    revoked = plain_or_exit(client, ops.SERVICE_KEY_REVOKE.call(key_id=args.id))
    if args.json:
        print_json(revoked)
    else:
        print(f"{revoked['id']} ({revoked['name']}) revoked at {revoked['revoked_at']}")
    return 0


def cmd_registration(args: argparse.Namespace) -> int:
    client = common.client(args)
    if args.verb == "revoke":
        answer = plain_or_exit(client, ops.REGISTRATION_REVOKE.call(registration_id=args.id))
        if not args.json:
            print(f"{answer['id']} revoked at {answer['revoked_at']}: nothing issued from it works any more")
    else:
        answer = plain_or_exit(client, ops.REGISTRATION_DELETE.call(registration_id=args.id))
        if not args.json:
            print(f"{answer['id']} deleted, with its tokens and claims")
    if args.json:
        print_json(answer)
    return 0
