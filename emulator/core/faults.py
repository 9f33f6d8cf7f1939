"""Faults on purpose: rules that make calls fail, slow down or drop, and holds.

A rule matches requests by origin, path, method, control-plane `operation_type`, or `/mcp`'s JSON-RPC method
(`mcp_method`, and a tools/call's `tool`) and fires on the Nth
match, N times, or with a seeded probability (a `random.Random(seed)` of its own, so a run repeats). When it
fires it answers a chosen status in the origin's own error format with that status's own code (`code_for`: 503
is `service_unavailable`) and `Retry-After` where asked, adds latency, or drops the connection; on `/mcp` it can
also break the protocol (`mcp`: an unsupported version, a cut stream, an `input_required` result); each firing is a
`fault.fired` journal event. Hosted rules make the next `db update` fail, or its environment build; killing a
workload is done once, when the rule is added.

A hold keeps the next N requests to a path waiting, after their admission (rate limit, idempotency claim),
until released: how a test sees what clients get while a request is still running (the 409 of a concurrent
Idempotency-Key, a slow answer) without any timing luck.

`/_emulator` itself is never faulted: a test must always be able to clear its faults.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass, field

import msgspec
from msgspec import UNSET, UnsetType

from emulator.core.errors import BAD_REQUEST, NOT_FOUND, ApiError, code_for
from emulator.core.events import EventBus
from emulator.core.operatorpath import ADMIN_PREFIX
from emulator.core.payloads import FaultArmed, FaultFired, FaultHeld, FaultRemoved

# A hold that nobody releases must not pin a request forever.
MAX_HOLD_SECONDS = 120.0
MAX_LATENCY_MS = 60_000
HTTP_ORIGINS = ("site", "auth", "api")
ORIGINS = (*HTTP_ORIGINS, "gateway", "tunnel")
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT")
# Hosted faults: the next update (of `target`, or of any database) fails, or its environment build does;
# a kill stops a running workload at once, as the kernel's OOM killer would.
NEXT_UPDATE = ("db_update_fails", "build_fails")
KILLS = ("kill_database", "kill_service")
HOSTED = (*NEXT_UPDATE, *KILLS)
# Protocol faults on /mcp (rules with an `mcp_method`): the client's revision refused as unsupported (-32022), the
# answer's event stream cut (after `events` events, 0 or 1), or a tools/call answered `input_required` (2026-07-28).
MCP_FAULTS = ("unsupported_version", "stream_cut", "input_required")
MCP_ORIGIN = "site"
DROP_EXTENSION = "emulator.drop"  # the ASGI scope's way to the socket (core.httpserver puts it there)


class FaultSpec(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A fault rule as a test declares it (the body of POST /_emulator/faults)."""

    origin: str | None = None
    path: str | None = None  # exact, or a prefix when it ends with `*`
    method: str | None = None
    operation_type: str | None = None
    mcp_method: str | None = None  # /mcp's JSON-RPC method (tools/call, server/discover, initialize, …)
    tool: str | None = None  # a tools/call's tool name (with mcp_method tools/call)
    mcp: str | None = None  # a protocol fault on /mcp: one of MCP_FAULTS
    events: int | None = None  # stream_cut: events sent before the cut (0: none, 1: a notification first)
    status: int | None = None
    message: str | None = None
    retry_after: int | None = None
    latency_ms: int | None = None
    drop: bool = False
    nth: int = 1
    count: int | None = None
    probability: float | None = None
    seed: int | None = None
    hosted: str | None = None
    target: str | None = None  # a database (`DB` or `ORG:DB`), or `ORG:DB:SERVICE` for kill_service
    hold: str | None = None  # the older form: hold the next `count` requests to this path


class FaultRuleView(FaultSpec, kw_only=True):
    """An armed rule: its id, the fields it was declared with (those left at their default are not sent), and
    how often it matched and fired."""

    id: str
    fired: int
    seen: int  # matching calls so far


class FaultList(msgspec.Struct):
    rules: list[FaultRuleView]
    holds: dict[str, int]  # path -> requests still to hold
    waiting: list[str]  # paths of requests held now


@dataclass
class Rule:
    id: str
    spec: FaultSpec
    seen: int = 0  # matching calls so far
    fired: int = 0
    rng: random.Random | None = None

    def view(self) -> FaultRuleView:
        return FaultRuleView(**msgspec.structs.asdict(self.spec), id=self.id, fired=self.fired, seen=self.seen)

    def describe(self) -> str:
        s = self.spec
        if s.hosted:
            return f"{s.hosted}{' of ' + s.target if s.target else ''}"
        mcp = f"/mcp {s.mcp_method}{' ' + s.tool if s.tool else ''}" if s.mcp_method else None
        where = " ".join(x for x in (s.origin, s.method, mcp or s.operation_type or s.path) if x) or "every request"
        if s.mcp:
            effect = s.mcp.replace("_", " ") + (f" after {s.events} event(s)" if s.events else "")
        elif s.drop:
            effect = "drop the connection"
        elif s.status:
            effect = f"answer {s.status}" + (f" (Retry-After {s.retry_after})" if s.retry_after is not None else "")
        else:
            effect = ""
        if s.latency_ms:
            effect = f"{effect} after {s.latency_ms} ms" if effect else f"add {s.latency_ms} ms"
        when = f"from call {s.nth}" if s.nth > 1 else ""
        when += f", {s.count} time{'s' if s.count != 1 else ''}" if s.count else ""
        when += f", with probability {s.probability:g}" if s.probability is not None else ""
        return f"{where}: {effect}{' ' + when.lstrip(', ') if when else ''}"


@dataclass(frozen=True)
class Verdict:
    """What a fired rule does to the request in hand (latency has already been waited)."""

    rule: str
    status: int | None
    message: str
    retry_after: int | None
    drop: bool
    mcp: str | None = None  # a protocol fault (MCP_FAULTS), answered by /mcp itself
    events: int = 0

    def error(self) -> ApiError:
        status = self.status or 503
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else None
        return ApiError(status, error_code(status), self.message, retryable=status in (429, 503), headers=headers)


def error_code(status: int) -> str:
    return code_for(status)


def _bad(message: str) -> ApiError:
    return BAD_REQUEST(f"fault: {message}")


def _validate(spec: FaultSpec, operations: frozenset[str]) -> None:
    """A rule must match something sensible and do something; refused whole otherwise."""
    if spec.hold is not None:
        matching = ("origin", "path", "method", "operation_type", "mcp_method", "tool", "mcp", "events")
        if any(getattr(spec, f) not in (None, False, 1) for f in matching):
            raise _bad("hold takes only a path to hold and count")
        if not spec.hold.startswith("/"):
            raise _bad("hold names a path starting with /")
        if spec.count is not None and spec.count < 1:
            raise _bad("count must be at least 1")
        return
    if spec.hosted is not None:
        if spec.hosted not in HOSTED:
            raise _bad(f"unknown hosted fault {spec.hosted!r}; one of {', '.join(HOSTED)}")
        other = ["origin", "path", "method", "operation_type", "mcp_method", "tool", "mcp", "events", "status"]
        other += ["latency_ms", "retry_after"]
        given = [f for f in other if getattr(spec, f) is not None] + (["drop"] if spec.drop else [])
        if given:
            raise _bad(f"a hosted fault takes target, message and count only, not {', '.join(given)}")
        if spec.hosted in KILLS and not spec.target:
            where = "ORG:DB:SERVICE" if spec.hosted == "kill_service" else "ORG:DB"
            raise _bad(f"{spec.hosted} needs a target ({where}) that runs now")
    else:
        if spec.origin is not None and spec.origin not in ORIGINS:
            raise _bad(f"unknown origin {spec.origin!r}; one of {', '.join(ORIGINS)}")
        if spec.path is not None and not spec.path.startswith("/"):
            raise _bad("path must start with / (end it with * to match a prefix)")
        if (spec.path or "").startswith(ADMIN_PREFIX):
            raise _bad("/_emulator is never faulted (a test must always be able to clear its faults)")
        if spec.method is not None and spec.method.upper() not in METHODS:
            raise _bad(f"unknown method {spec.method!r}; one of {', '.join(METHODS)}")
        if spec.operation_type is not None:
            if spec.origin not in (None, "api"):
                raise _bad("operation_type is the control plane's (origin api)")
            if operations and spec.operation_type not in operations:
                raise _bad(f"unknown operation_type {spec.operation_type!r}; one of {', '.join(sorted(operations))}")
        _validate_mcp(spec)
        if spec.origin is None and spec.path is None and spec.operation_type is None and spec.mcp_method is None:
            raise _bad("a fault needs something to match: origin, path, operation_type, mcp_method (or hosted)")
        if spec.status is None and not spec.drop and not spec.latency_ms and spec.mcp is None:
            raise _bad("a fault needs an effect: status, latency_ms, drop or mcp")
        if spec.status is not None and not 400 <= spec.status <= 599:
            raise _bad("status must be an error status, 400 to 599")
        if spec.drop and spec.status is not None:
            raise _bad("drop and status exclude each other: a dropped connection answers nothing")
        if spec.retry_after is not None and (spec.status not in (429, 503) or not 0 <= spec.retry_after <= 86400):
            raise _bad("retry_after (0 to 86400 s) goes with status 429 or 503")
        if spec.latency_ms is not None and not 0 <= spec.latency_ms <= MAX_LATENCY_MS:
            raise _bad(f"latency_ms must be 0 to {MAX_LATENCY_MS}")
    if spec.nth < 1:
        raise _bad("nth must be at least 1")
    if spec.count is not None and spec.count < 1:
        raise _bad("count must be at least 1")
    if spec.probability is not None and not 0 < spec.probability <= 1:
        raise _bad("probability must be above 0 and at most 1")
    if spec.seed is not None and spec.probability is None:
        raise _bad("seed goes with probability")
    if spec.message is not None and len(spec.message) > 500:
        raise _bad("message is at most 500 characters")


def _validate_mcp(spec: FaultSpec) -> None:
    """The /mcp fields: matched in /mcp's handler by JSON-RPC method (as operation_type is in the control plane's)."""
    if spec.mcp_method is None:
        given = [f for f in ("tool", "mcp", "events") if getattr(spec, f) is not None]
        if given:
            raise _bad(f"{', '.join(given)} go(es) with mcp_method (the /mcp JSON-RPC method to match)")
        return
    if spec.origin not in (None, MCP_ORIGIN) or spec.path not in (None, "/mcp") or spec.operation_type is not None:
        raise _bad("mcp_method matches /mcp's JSON-RPC method (origin site, path /mcp, no operation_type)")
    if not spec.mcp_method or len(spec.mcp_method) > 100:
        raise _bad("mcp_method names a JSON-RPC method (tools/call, server/discover, initialize, …)")
    if spec.tool is not None and spec.mcp_method != "tools/call":
        raise _bad("tool goes with mcp_method tools/call")
    if spec.mcp is None:
        if spec.events is not None:
            raise _bad("events goes with mcp stream_cut")
        return
    if spec.mcp not in MCP_FAULTS:
        raise _bad(f"unknown mcp fault {spec.mcp!r}; one of {', '.join(MCP_FAULTS)}")
    if spec.status is not None or spec.drop:
        raise _bad("mcp excludes status and drop: the protocol fault is the answer")
    if spec.mcp == "input_required" and spec.mcp_method != "tools/call":
        raise _bad("input_required answers a tools/call (2026-07-28 allows it on no other method /mcp serves)")
    if spec.events is not None and (spec.mcp != "stream_cut" or spec.events not in (0, 1)):
        raise _bad("events (0 or 1) goes with mcp stream_cut")


def checked(spec: FaultSpec, operations: frozenset[str] = frozenset()) -> FaultSpec:
    """The rule, normalized, or an ApiError (400) saying what is wrong with it: the API's check, and an evaluation
    task's before any trial (its `[[emulator.moments]]` faults), with no emulator running (`operations` empty: any
    operation_type is taken)."""
    _validate(spec, operations)
    if spec.method is not None:
        spec = msgspec.structs.replace(spec, method=spec.method.upper())
    if spec.mcp_method is not None and spec.origin is None:
        spec = msgspec.structs.replace(spec, origin=MCP_ORIGIN)
    if spec.hosted in NEXT_UPDATE and spec.count is None:
        spec = msgspec.structs.replace(spec, count=1)  # "the next update fails", not every one after it
    return spec


@dataclass
class Faults:
    bus: EventBus
    operations: frozenset[str] = frozenset()  # the control plane's operation types (empty: any is taken)
    rules: dict[str, Rule] = field(default_factory=dict)
    _next: int = 1
    _holds: dict[str, int] = field(default_factory=dict)
    _waiting: list[tuple[str, asyncio.Event]] = field(default_factory=list)

    @property
    def armed(self) -> bool:
        return bool(self.rules)

    # --- rules ------------------------------------------------------------------------------------------------

    def check(self, spec: FaultSpec) -> FaultSpec:
        """The rule, normalized, or a 400 saying what is wrong with it; nothing is stored."""
        return checked(spec, self.operations)

    def add(self, spec: FaultSpec, *, fired: bool = False) -> Rule:
        """Store a checked rule (a kill, done already by the caller, is recorded as fired and not kept)."""
        rule = Rule(f"f{self._next}", spec, rng=random.Random(spec.seed) if spec.probability is not None else None)
        self._next += 1
        if fired:
            rule.fired = rule.seen = 1
            self._publish(rule, spec.target)
            return rule
        self.rules[rule.id] = rule
        self.bus.publish(rule.id, FaultArmed(rule=rule.describe()))
        return rule

    def remove(self, rule_id: str) -> Rule:
        rule = self.rules.pop(rule_id, None)
        if rule is None:
            raise NOT_FOUND(f"no fault {rule_id!r}; `emulator fault list` shows them")
        self.bus.publish(rule.id, FaultRemoved())
        return rule

    def clear(self, announce: bool = False) -> int:
        """Every rule gone and every hold released (a reset, a snapshot load, `emulator fault clear`; the last
        `announce`s it: a reset or a load has events of its own)."""
        cleared = len(self.rules) + len(self._holds)
        self.rules.clear()
        self.release()
        if announce and cleared:
            self.bus.publish(None, FaultRemoved(cleared=cleared))
        return cleared

    def listed(self) -> list[FaultRuleView]:
        return [r.view() for r in self.rules.values()]

    def _fires(self, rule: Rule) -> bool:
        """Count a matching call and decide whether the rule fires on it (spent rules go)."""
        s = rule.spec
        rule.seen += 1
        if rule.seen < s.nth:
            return False
        if rule.rng is not None and rule.rng.random() >= (s.probability or 0):
            return False
        rule.fired += 1
        if s.count is not None and rule.fired >= s.count:
            self.rules.pop(rule.id, None)
        return True

    def _publish(
        self,
        rule: Rule,
        subject: str | None,
        *,
        origin: str | None = None,
        method: str | None = None,
        operation_type: str | UnsetType | None = UNSET,
    ) -> None:
        s = rule.spec
        effect = (
            s.hosted
            or s.mcp
            or ("drop" if s.drop else f"status {s.status}" if s.status else f"latency {s.latency_ms} ms")
        )
        fired = FaultFired(
            rule=rule.id, effect=effect, fired=rule.fired, origin=origin, method=method, operation_type=operation_type
        )
        self.bus.publish(subject, fired)

    async def request(
        self,
        origin: str,
        method: str,
        path: str,
        operation_type: str | None = None,
        *,
        mcp_method: str | None = None,
        tool: str | None = None,
        modern: bool = False,
    ) -> Verdict | None:
        """The verdict of the first rule that fires on this request (after its latency), or None to go on. Rules
        with an operation_type (or mcp_method) match only where the handler that reads it asks."""
        if not self.rules or path.startswith(ADMIN_PREFIX):
            return None
        for rule in list(self.rules.values()):
            s = rule.spec
            if s.hosted is not None:
                continue
            if s.origin is not None and s.origin != origin:
                continue
            if s.method is not None and s.method != method:
                continue
            if s.operation_type != operation_type:
                continue  # operation rules fire in the control plane's handler, the others at the origin's gate
            if s.mcp_method != mcp_method or (s.tool is not None and s.tool != tool):
                continue  # /mcp's rules fire in its handler, once the JSON-RPC message is read
            if s.mcp == "input_required" and not modern:
                continue  # a result of 2026-07-28 only: the handshake era has no such answer
            if s.path is not None and not (path.startswith(s.path[:-1]) if s.path.endswith("*") else path == s.path):
                continue
            if not self._fires(rule):
                continue
            self._publish(rule, path, origin=origin, method=method, operation_type=operation_type)
            if s.latency_ms:
                await asyncio.sleep(s.latency_ms / 1000)  # real time: latency is what the client waits
            if s.status is None and not s.drop and s.mcp is None:
                return None
            if s.mcp is not None:  # /mcp words its own (an empty message: the rule gave none)
                return Verdict(rule.id, None, s.message or "", None, False, s.mcp, s.events or 0)
            message = s.message or f"injected fault {rule.id}: {error_code(s.status or 503).replace('_', ' ')}"
            return Verdict(rule.id, s.status, message, s.retry_after, s.drop, s.mcp, s.events or 0)
        return None

    def next_update(self, kind: str, org: str, db: str) -> str | None:
        """The reason the next update of `org:db` must fail (`db_update_fails` or `build_fails`), if a rule says so."""
        for rule in list(self.rules.values()):
            s = rule.spec
            if s.hosted != kind or (s.target and s.target not in (db, f"{org}:{db}")):
                continue
            if not self._fires(rule):
                continue
            self._publish(rule, f"{org}:{db}")
            return s.message or (
                "injected fault: the environment build failed" if kind == "build_fails" else "injected fault"
            )
        return None

    # --- holds ------------------------------------------------------------------------------------------------

    def hold(self, path: str, count: int = 1) -> None:
        self._holds[path] = self._holds.get(path, 0) + count
        self.bus.publish(path, FaultArmed(action="hold", count=self._holds[path]))

    def release(self, path: str | None = None) -> int:
        """Let held requests (of `path`, or all) go on; also disarms holds not yet used."""
        released = [(p, e) for p, e in self._waiting if path is None or p == path]
        for _, event in released:
            event.set()
        self._waiting = [(p, e) for p, e in self._waiting if (p, e) not in released]
        for p in [p for p in self._holds if path is None or p == path]:
            del self._holds[p]
        return len(released)

    def snapshot(self) -> FaultList:
        return FaultList(self.listed(), dict(self._holds), [p for p, _ in self._waiting])

    async def checkpoint(self, path: str) -> None:
        if not self._holds.get(path):
            return
        self._holds[path] -= 1
        if not self._holds[path]:
            del self._holds[path]
        event = asyncio.Event()
        self._waiting.append((path, event))
        self.bus.publish(path, FaultHeld())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), MAX_HOLD_SECONDS)
        self._waiting = [(p, e) for p, e in self._waiting if e is not event]
