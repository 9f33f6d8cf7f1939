"""Who an agent is in the journal, and which events are its own: the one attribution rule that traces, the
scorecard and the dashboard's Agents view share.

An agent is a registration at the identity provider, with what it made: its trial organizations, their keys
(by the fingerprint `http.request` events carry) and the address it registered from. A request is the agent's
only when it carries one of its credentials: its access token, its assertion (a token exchange), or one of its
keys. A request with none is nobody's: it is counted apart as unattributed (its address may be shared by any
number of agents and people), never judged. An organization with no registration (made by `pxt login` or a
declared state) is an agent of its own, found by its name.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

import msgspec

from emulator.core.errors import CONFLICT, NOT_FOUND
from emulator.core.events import Event
from emulator.core.kinds import Kind
from emulator.core.payloads import (
    CloudKeyCreated,
    CloudOrgCreated,
    GatewayRequest,
    HttpRequest,
    IdpClaimed,
    IdpRefreshed,
    IdpRegistered,
    TrialCreated,
)

# A registration's end at the service side's hand (revoked, or deleted): from then on its credentials are refused,
# and registering again is what the agent must do.
ENDED = frozenset({Kind.IDP_REVOKED.value, Kind.AGENT_REGISTRATION_DELETED.value})

# Discovery documents: read before registering, so attributed forward.
DISCOVERY = ("/.well-known/", "/llms.txt", "/mcp")
# Hosted resources' subjects are `<org>:<db>…`; these kinds name one.
_HOSTED = ("db.", "service.", "tunnel.", "disk.", "gateway.")
# Events that repeat what an `http.request` already says of the same call.
_ECHOES = frozenset({Kind.CLOUD_CALL.value, Kind.SITE_ASK.value, Kind.SITE_MCP.value})


class Agent(msgspec.Struct, kw_only=True):
    id: str  # the registration, or the organization for an agent without one
    type: str | None = None  # the registration's type (anonymous, …)
    registrations: list[str] = []
    orgs: list[str] = []
    keys: dict[str, str] = {}  # fingerprint → "org/name"
    ips: list[str] = []
    first_seq: int = 0


class Journal:
    """The whole journal, indexed once for attribution."""

    def __init__(self, events: Sequence[Event]) -> None:
        self.events = list(events)
        self.registered: dict[str, Event] = {}
        self.ended: dict[str, Event] = {}  # registration → its first revocation or deletion
        self.assertions: dict[str, list[tuple[int, float]]] = defaultdict(list)  # registration → (seq, its expiry)
        self.trials: dict[str, list[Event]] = defaultdict(list)  # registration → trial.created
        self.keys_of_org: dict[str, dict[str, str]] = defaultdict(dict)  # org → fingerprint → name
        self.orgs: list[str] = []
        for e in self.events:
            d = e.data
            if isinstance(d, IdpRegistered | IdpClaimed | IdpRefreshed) and e.subject and d.assertion_expires_at:
                self.assertions[e.subject].append((e.seq, d.assertion_expires_at))
            if isinstance(d, IdpRegistered) and e.subject:
                self.registered[e.subject] = e
            elif e.kind in ENDED and e.subject:
                self.ended.setdefault(e.subject, e)
            elif isinstance(d, TrialCreated) and e.subject:
                self.trials[d.registration].append(e)
                if d.key:
                    self.keys_of_org[e.subject][d.key] = "trial"
            elif isinstance(d, CloudKeyCreated) and e.subject and d.key:
                self.keys_of_org[e.subject][d.key] = d.name
            if isinstance(d, TrialCreated | CloudOrgCreated) and e.subject and e.subject not in self.orgs:
                self.orgs.append(e.subject)
        self.requests_from: dict[str, list[Event]] = defaultdict(list)  # client address → its http.requests
        for e in self.events:
            if isinstance(e.data, HttpRequest) and e.subject:
                self.requests_from[e.subject].append(e)

    # -- who

    def agents(self) -> list[Agent]:
        """Every agent the journal knows, in the order they first appeared."""
        found = [self.of_registration(reg) for reg in self.registered]
        claimed = {org for a in found for org in a.orgs}
        found += [self.of_org(org) for org in self.orgs if org not in claimed]
        return sorted(found, key=lambda a: a.first_seq)

    def of_registration(self, reg: str) -> Agent:
        registered = self.registered.get(reg)
        said = registered.payload(IdpRegistered) if registered else None
        trials = self.trials.get(reg, [])
        orgs = [str(t.subject) for t in trials]
        return Agent(
            id=reg,
            type=said.type if said else None,
            registrations=[reg],
            orgs=orgs,
            keys=self._keys(orgs),
            ips=[said.ip] if said and said.ip else [],
            first_seq=registered.seq if registered else (trials[0].seq if trials else 0),
        )

    def of_org(self, org: str) -> Agent:
        regs = [reg for reg, trials in self.trials.items() if any(t.subject == org for t in trials)]
        if regs:
            return self.of_registration(regs[0])
        first = next((e.seq for e in self.events if e.subject == org), 0)
        return Agent(id=org, orgs=[org], keys=self._keys([org]), first_seq=first)

    def _keys(self, orgs: Iterable[str]) -> dict[str, str]:
        return {fp: f"{org}/{name}" for org in orgs for fp, name in self.keys_of_org.get(org, {}).items()}

    def find(self, who: str) -> Agent:
        """A registration id, an organization, or an API key's name (`ORG/NAME` when the name is not unique)."""
        if who in self.registered:
            return self.of_registration(who)
        if who in self.orgs:
            return self.of_org(who)
        named = [
            (org, fp)
            for org, keys in self.keys_of_org.items()
            for fp, name in keys.items()
            if name == who or f"{org}/{name}" == who
        ]
        if len(named) == 1:
            return self.of_org(named[0][0])
        if named:
            many = ", ".join(sorted(f"{org}/{self.keys_of_org[org][fp]}" for org, fp in named)[:10])
            raise CONFLICT(f"{len(named)} keys are named {who!r} ({many}); say ORG/NAME")
        raise NOT_FOUND(f"the journal names no registration, organization or API key {who!r} (a reset empties it)")

    # -- what is theirs

    def events_of(self, agent: Agent) -> list[Event]:
        return self.partition([agent])[agent.id]

    def partition(self, agents: Sequence[Agent]) -> dict[str, list[Event]]:
        """Each agent's events, in one pass over the journal."""
        by_reg = {r: a.id for a in agents for r in a.registrations}
        by_org = {o: a.id for a in agents for o in a.orgs}
        by_key = {k: a.id for a in agents for k in a.keys}
        out: dict[str, list[Event]] = {a.id: [] for a in agents}
        for e in self.events:
            if e.kind in _ECHOES:
                continue
            d = e.data
            owner: str | None = None
            if isinstance(d, HttpRequest | GatewayRequest):
                owner = by_reg.get(d.reg or "") or by_key.get(d.key or "")
            elif e.subject is not None:
                owner = by_reg.get(e.subject) or by_org.get(e.subject)
                if owner is None and e.kind.startswith(_HOSTED):
                    owner = by_org.get(e.subject.split(":", 1)[0])
            if owner is not None:
                out[owner].append(e)
        return out

    def unattributed(self) -> list[Event]:
        """The requests that carried no credential: a person's browser or curl, discovery reads, registrations,
        `pxt login`'s polls. Counted apart, never judged: their address proves nothing of who sent them."""
        return [e for e in self.events if isinstance(e.data, HttpRequest) and not carried(e.data)]

    def assertion_expired(self, reg: str, at: Event) -> bool:
        """Whether the registration's newest assertion before `at` had expired by then (nothing left to exchange)."""
        issued = [exp for seq, exp in self.assertions.get(reg, []) if seq < at.seq]
        return bool(issued) and at.ts >= max(issued)


def carried(d: HttpRequest | GatewayRequest) -> bool:
    """Whether a request carried a credential (a registration, key, person or token it names)."""
    return any(c is not None for c in (d.reg, d.key, d.user, d.token))
