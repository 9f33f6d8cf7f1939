"""What a trial's emulator holds, resource by resource, in a form two moments can be compared in: the collateral
damage check (as AppWorld's) diffs the inventory taken before the agent ran with the one taken after."""

from __future__ import annotations

from emulator.admin import ops
from emulator.admin.wire import OrgView
from emulator.testkit import Testkit

KINDS = ("orgs", "databases", "services", "keys", "registrations", "users")
Inventory = dict[str, dict[str, str]]  # kind → resource → its state, in a line


def take(kit: Testkit, orgs: list[OrgView] | None = None) -> Inventory:
    """`orgs`: the organizations if the caller read them already (the checks read them too)."""
    orgs = kit.run(ops.ORGS.call()).orgs if orgs is None else orgs
    keys = kit.run(ops.KEYS.call()).keys
    services = kit.run(ops.SERVICES.call()).services
    registrations = kit.run(ops.REGISTRATIONS.call()).registrations
    users = kit.run(ops.USERS.call()).users
    return {
        "orgs": {o.org: f"{o.state}, admins {', '.join(sorted(o.admins)) or 'none'}" for o in orgs},
        "databases": {f"{d.org}:{d.db}": f"{d.state}, generation {d.generation}" for o in orgs for d in o.databases},
        "services": {f"{s.org}:{s.db}/{s.service}": f"{s.state}, generation {s.generation}" for s in services},
        "keys": {
            f"{k.org}/{k.name}": "revoked" if k.revoked_at else f"{k.key_type}, grants {', '.join(k.grants) or 'none'}"
            for k in keys
        },
        "registrations": {r.id: f"{r.type}, {r.status}" for r in registrations},
        "users": {u.email: f"member of {', '.join(sorted(m.org for m in u.orgs)) or 'nothing'}" for u in users},
    }


Change = tuple[str, str, str]  # (kind, resource, what happened to it)


def changes(before: Inventory, after: Inventory) -> list[Change]:
    """Each resource made, removed or changed, kind by kind."""
    found: list[Change] = []
    for kind in KINDS:
        old, new = before.get(kind, {}), after.get(kind, {})
        lines = [(name, f"{name} made ({new[name]})") for name in new.keys() - old.keys()]
        lines += [(name, f"{name} removed (was {old[name]})") for name in old.keys() - new.keys()]
        lines += [(n, f"{n}: {old[n]} → {new[n]}") for n in old.keys() & new.keys() if old[n] != new[n]]
        found += [(kind, name, line) for name, line in sorted(lines)]
    return found
