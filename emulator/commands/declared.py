"""`emulator apply FILE`: make a running emulator hold the declared state in FILE (TOML), all of it or none."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emulator.admin import ops
from emulator.admin.client import EmulatorError, Unreachable
from emulator.commands import common
from emulator.commands.common import add_locator

EXAMPLE = """\
clock = "2026-01-01T00:00:00Z"          # frozen there; or { at = "…", frozen = false }

[[orgs]]
name = "acme"                            # not a trial: stays
[[orgs]]
name = "agent-demo"
trial = true
time_left = "36h"                        # unclaimed: deleted when it runs out; or claimed = true

[[users]]
email = "ann@example.com"
orgs = ["acme"]                          # admin of acme (role = "member" otherwise)

[[registrations]]
id = "agent_reg_demo"
trial = "agent-demo"                     # the anonymous registration that made the trial

[[api_keys]]
org = "acme"
name = "ci"
secret = "pxtk_0123456789abcdef0123456789abcdef"

[[secrets]]
org = "acme"
key = "OPENAI_API_KEY"
value = "sk-test"

[[webhooks]]
url = "http://127.0.0.1:9000/workos"     # receives the agent registration events
secret = "whsec_ci_0123456789abcdef"     # signs them: the receiver knows it beforehand

[[service_keys]]
name = "backend"                         # the service side's key for the agents API (/agents/*)
key = "sk_test_backend0123456789abcdef"
"""


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser(
        "apply",
        help="make a running emulator hold a declared state (TOML): orgs, users, registrations, keys, secrets, clock",
        description="Make a running emulator hold the declared state in FILE: organizations (trial or not, claimed "
        "or not, time left), users, agent registrations, API keys with fixed secrets, secrets, webhook endpoints and "
        "the clock. The file "
        "is checked whole first and refused with FILE:LINE and nothing changed; applying it twice changes nothing. "
        "Nothing the file does not name is removed: `emulator reset` first for exactly its world, or start with "
        "`emulator up --apply FILE` (then `emulator reset --to start` returns to it).",
        epilog=f"example FILE:\n\n{EXAMPLE}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_locator(p)
    p.add_argument("file", type=Path, metavar="FILE", help="the declared state (TOML)")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")
    return {"apply": cmd_apply}


def cmd_apply(args: argparse.Namespace) -> int:
    client = common.client(args)
    try:
        done = client.plain(ops.APPLY.call(args.file, query={"name": str(args.file)}).within(60))
    except (EmulatorError, Unreachable) as e:
        raise SystemExit(f"emulator: {e}") from None
    if args.json:
        print(json.dumps(done, indent=2))
        return 0
    parts = [
        f"{part} {', '.join(f'{n} {what}' for what, n in counts.items() if n)}"
        for part, counts in done["applied"].items()
        if any(counts.values())
    ]
    verdict = "unchanged" if done["unchanged"] else "applied"
    print(f"{verdict} {done['file']}: {'; '.join(parts) or 'nothing declared'}; the clock reads {done['clock']}")
    return 0
