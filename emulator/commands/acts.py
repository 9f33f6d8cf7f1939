"""`emulator approve-claim|approve-login|claim-trial|switch|trials|registrations|db`: the person's and the
operator's acts on a running emulator, and what they act on."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from emulator.admin import ops
from emulator.admin.wire import ClaimDecision, LoginDecision, TrialClaim
from emulator.commands import common
from emulator.commands.common import add_json, add_locator, plain_or_exit, print_json, shown_whole
from emulator.core.clock import parse_duration
from emulator.identity.idjag import MintRequest


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    approve = sub.add_parser(
        "approve-claim",
        help="play the person approving an agent's claim; prints the user code",
        description="Sign in as EMAIL on a pending claim's verification page and approve it (or --deny). "
        "Prints the 6-digit user code the agent needs for /agent/identity/claim/complete.",
    )
    add_locator(approve)
    approve.add_argument("claim", help="the claim's verification_uri, or the registration id (agent_reg_…)")
    approve.add_argument("--email", required=True, help="the person's e-mail")
    approve.add_argument("--deny", action="store_true", help="deny the claim instead")
    add_json(approve)

    login = sub.add_parser(
        "approve-login",
        help="play the person approving a `pxt login` sign-in",
        description="Approve (or --deny) the pxt login sign-in that shows CODE, signed in as EMAIL. "
        "Without CODE, the only pending sign-in is approved.",
    )
    add_locator(login)
    login.add_argument("code", nargs="?", help="the code pxt login prints (XXXX-XXXX)")
    login.add_argument("--email", required=True, help="the person's e-mail")
    login.add_argument("--deny", action="store_true", help="deny the sign-in instead")

    claim = sub.add_parser(
        "claim-trial",
        help="play the person who opens a trial's claim_url",
        description="Sign in as EMAIL and become the admin of a trial organization; it then never expires.",
    )
    add_locator(claim)
    claim.add_argument("org", help="the trial's organization slug (agent-…)")
    claim.add_argument("--email", required=True, help="the person's e-mail")

    jag = sub.add_parser(
        "id-jag",
        help="mint an ID-JAG for a test person, as their own identity provider would",
        description="Mint an ID-JAG (an identity assertion of the upstream issuer the emulator plays, "
        "{auth_url}/upstream) for the person EMAIL: what an agent gets from the person's identity provider by token "
        "exchange and sends to POST /agent/identity as {type: identity_assertion, assertion_type, assertion}. The "
        "options make a bad one on purpose.",
    )
    add_locator(jag)
    jag.add_argument("email", help="the person's e-mail")
    jag.add_argument("--sub", help="the person's id at the upstream (default: from the e-mail)")
    jag.add_argument("--unverified", action="store_true", help="email_verified: false")
    jag.add_argument("--auth-age", default="0", help="how long ago the person signed in upstream (90s, 2h; default 0)")
    jag.add_argument("--no-auth-time", action="store_true", help="leave the auth_time claim out")
    jag.add_argument(
        "--expires-in", help="its lifetime (default 5m for an ID-JAG, 1h for an ID token; negative: already expired)"
    )
    jag.add_argument("--audience", help="its aud (default: the identity provider's issuer)")
    jag.add_argument("--client-id", default="agent", help="the agent's client_id claim")
    jag.add_argument(
        "--resource",
        help="its resource claim: the site's URL for the jwt-bearer grant at {auth_url}/oauth2/token (MCP's "
        "enterprise-managed authorization)",
    )
    jag.add_argument(
        "--id-token",
        action="store_true",
        help="print the person's ID token instead, which the agent exchanges for an ID-JAG at "
        "{auth_url}/upstream/oauth2/token (RFC 8693)",
    )
    add_json(jag)

    switch = sub.add_parser(
        "switch",
        help="show or flip the platform switches",
        description="Show the switches, or set one: anonymous_registration, service_auth_registration, "
        "identity_assertion_registration, trials_enabled, cloud_reachable.",
    )
    add_locator(switch)
    switch.add_argument("name", nargs="?")
    switch.add_argument("value", nargs="?", choices=["on", "off"])
    add_json(switch)

    for name, text in (
        ("trials", "list trial organizations and their time left"),
        ("registrations", "list agent registrations"),
    ):
        listing = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        add_locator(listing)
        add_json(listing)

    db = sub.add_parser(
        "db",
        help="list hosted databases, or stop or start one",
        description="List hosted databases with their states, or stop or start one as the operator "
        "(the same generation, receipt and events as pxt db stop/start).",
    )
    add_locator(db)
    db.add_argument("action", nargs="?", default="list", choices=["list", "stop", "start"])
    db.add_argument("org", nargs="?", help="the organization's slug")
    db.add_argument("db", nargs="?", help="the database's name (default main)")
    add_json(db)

    return {
        "approve-claim": cmd_approve_claim,
        "approve-login": cmd_approve_login,
        "claim-trial": cmd_claim_trial,
        "id-jag": cmd_id_jag,
        "switch": cmd_switch,
        "trials": cmd_trials,
        "registrations": cmd_registrations,
        "db": cmd_db,
    }


def cmd_approve_claim(args: argparse.Namespace) -> int:
    client = common.client(args)
    if args.claim.startswith("agent_reg_"):
        body = ClaimDecision(args.email, registration=args.claim)
    else:
        body = ClaimDecision(args.email, claim=args.claim)
    answer = plain_or_exit(client, (ops.CLAIM_DENY if args.deny else ops.CLAIM_APPROVE).call(body))
    if args.json:
        print_json(answer)
    elif args.deny:
        print(f"denied: {answer['registration']} stays unclaimed")
    else:
        print(
            f"user code {answer['user_code']} (shown once): the agent completes the claim of "
            f"{answer['registration']} with it (POST /agent/identity/claim/complete) until {answer['expires_at']}"
        )
    return 0


def cmd_approve_login(args: argparse.Namespace) -> int:
    client = common.client(args)
    code = args.code
    if code is None:
        pending = plain_or_exit(client, ops.LOGINS.call())["pending"]
        if len(pending) != 1:
            raise SystemExit(f"emulator: {len(pending)} sign-ins are pending; name the code")
        code = pending[0]["user_code"]
    answer = plain_or_exit(client, ops.LOGIN_APPROVE.call(LoginDecision(code, args.email, args.deny)))
    print(f"{answer['user_code']}: {'approved' if answer['approved'] else 'denied'} as {answer['email']}")
    return 0


def cmd_id_jag(args: argparse.Namespace) -> int:
    try:
        ask = MintRequest(
            email=args.email,
            sub=args.sub,
            email_verified=not args.unverified,
            auth_age=parse_duration(args.auth_age),
            auth_time=not args.no_auth_time,
            expires_in=parse_duration(args.expires_in) if args.expires_in else None,
            audience=args.audience,
            client_id=args.client_id,
            resource=args.resource,
            id_token=args.id_token,
        )
    except ValueError as e:
        raise SystemExit(f"emulator: {e}") from None
    answer = plain_or_exit(common.client(args), ops.ID_JAG.call(ask))
    if args.json:
        print_json(answer)
    else:
        print(answer["id_token"] if args.id_token else answer["id_jag"])
    return 0


def cmd_claim_trial(args: argparse.Namespace) -> int:
    answer = plain_or_exit(common.client(args), ops.TRIAL_CLAIM.call(TrialClaim(args.org, args.email)))
    print(f"{answer['org']} is claimed by {answer['email']}; it no longer expires")
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    client = common.client(args)
    if args.action == "list":
        found = plain_or_exit(client, ops.DATABASES.call())["databases"]
        if shown_whole(args, found, "no hosted databases yet (`pxt db update pxt://ORG:main` creates one)"):
            return 0
        for d in found:
            note = f"  {d['failure_reason']}" if d.get("failure_reason") else ""
            print(f"{d['org']:<16} {d['db']:<12} {d['state']:<12} generation {d['generation']}{note}")
        return 0
    if not args.org:
        raise SystemExit(f"emulator: db {args.action} needs ORG [DB]")
    db = args.db or "main"
    answer = plain_or_exit(client, ops.DATABASE_VERBS[args.action].call(org=args.org, db=db))
    if args.json:
        print_json(answer)
        return 0
    print(f"{answer['org']}:{db}: {args.action} accepted (generation {answer['receipt']['generation']})")
    return 0


def cmd_switch(args: argparse.Namespace) -> int:
    if args.name and not args.value:
        raise SystemExit("emulator: switch NAME needs on or off")
    call = ops.SWITCHES_SET.call({args.name: args.value == "on"}) if args.name else ops.SWITCHES.call()
    switches = plain_or_exit(common.client(args), call)
    if args.json:
        print_json(switches)
        return 0
    for name, value in switches.items():
        print(f"{name:<28} {'on' if value else 'off'}")
    return 0


def cmd_trials(args: argparse.Namespace) -> int:
    found = plain_or_exit(common.client(args), ops.TRIALS.call())["trials"]
    if shown_whole(
        args, found, "no trial organizations yet (an agent creates one with POST /api/v1/trial-orgs, or `pxt new`)"
    ):
        return 0
    for t in found:
        left = f"{t['seconds_left'] // 3600}h{t['seconds_left'] % 3600 // 60:02d}m left" if t["expires_at"] else ""
        print(f"{t['org']:<14} {t['state']:<10} {left:<12} keys: {', '.join(t['api_keys'])}")
    return 0


def cmd_registrations(args: argparse.Namespace) -> int:
    found = plain_or_exit(common.client(args), ops.REGISTRATIONS.call())["registrations"]
    if shown_whole(
        args,
        found,
        "no agent registrations yet (an agent registers with POST /agent/identity on the identity provider)",
    ):
        return 0
    for r in found:
        who = r["claimed_email"] or r["login_hint"] or ""
        state = "revoked" if r["revoked_at"] else r["status"]
        print(
            f"{r['id']}  {r['type']:<12} {state:<10} tokens {r['tokens_issued']:<3} trial {r['trial'] or '-':<14} {who}"
        )
    return 0
