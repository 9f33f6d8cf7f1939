"""A declared starting state: a TOML file of organizations, users, registrations, API keys with fixed secrets,
provider secrets, webhook endpoints, the service side's keys and the clock, which `emulator apply`
(`POST /_emulator/apply`, `up --apply`, `exec --apply`) makes the emulator hold, so a test starts from the same world
every time.

The file is checked whole before anything is written: its TOML syntax, then every table and key (an unknown one
is refused), then each value by the rules the control plane and the identity provider apply (the same functions),
then its references (a key of an unknown organization). A refusal names `FILE:LINE`. Every row is written in one
store transaction by the module that owns its table; a declared clock moves once it commits. Applying is
idempotent: each thing is upserted by its name and left alone when it already is as declared, and the answer
counts what was created, updated or found unchanged. Nothing the file does not name is removed (reset first for
exactly the declared world; `up --apply` and `reset --to start` do that).

Times: a trial's `time_left` and a registration's claim window count from the declared `clock`, and every apply
puts them back exactly. Without `clock` they count from the apply that makes the thing, and a later apply keeps
them (unless they lapsed), so applying twice on a running clock changes nothing either.
"""

from __future__ import annotations

import contextlib
import re
import tomllib
from collections.abc import Callable, Generator
from datetime import UTC, datetime
from typing import Literal

import aiosqlite
import msgspec

from emulator.core import jsonbody
from emulator.core.clock import MAX_TIME, iso, parse_duration
from emulator.core.context import Core
from emulator.core.errors import BAD_REQUEST, ApiError
from emulator.core.payloads import StateApplied
from emulator.core.secretbox import SecretBox
from emulator.core.store import Db, Outcome
from emulator.hosted import databases, keys, orgs, plans, secrets
from emulator.hosted.states import MemberRole
from emulator.identity import endpoints, service_keys, users
from emulator.identity.identity import Identity
from emulator.identity.states import RegType
from emulator.identity.wire import valid_email

MAX_BYTES = 4 * 1024 * 1024  # a declared state is a hand-written file; secrets hold at most 1 MiB per organization
_CLAIM_LINK = re.compile(r"^tcl_[A-Za-z0-9_-]{16,128}$")  # a trial's claim link token, as trials make them
_CLAIM_TOKEN = re.compile(r"^clm_[A-Za-z0-9_-]{16,128}$")  # a registration's claim token
_REFRESH_TOKEN = re.compile(r"^art_[A-Za-z0-9_-]{16,128}$")
_REGISTRATION_ID = re.compile(r"^agent_reg_[A-Za-z0-9]{1,64}$")
MAX_DISPLAY_NAME = 200

Path = tuple[str | int, ...]  # where in the file: ("orgs", 1, "trial")


# --- the file's shape (decoded strictly: an unknown key is refused with its line) ----------------------------


class ClockDecl(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """`clock = { at = "2026-01-01T00:00:00Z", frozen = false }`: the clock runs on from `at`."""

    at: datetime
    frozen: bool = True


class OrgDecl(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: str  # the slug: the organization naming rule
    trial: bool = False
    claimed: bool = False  # a trial a person claimed: it no longer expires
    time_left: str | int | None = None  # an unclaimed trial's: "7d", "36h", "1h30m" or seconds; default trial_lifetime
    claim_token: str | None = None  # an unclaimed trial's claim link is {base_url}/claim/<claim_token>
    display_name: str | None = None


class UserDecl(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    email: str
    orgs: list[str] = []  # member of these organizations
    role: MemberRole = MemberRole.ADMIN


class RegistrationDecl(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    id: str  # agent_reg_…
    type: Literal["anonymous", "service_auth", "identity_assertion"] = "anonymous"
    login_hint: str | None = None  # service_auth's person
    upstream_sub: str | None = None  # identity_assertion's: the person's id at the upstream issuer, linked to them
    claimed_by: str | None = None  # claimed by this person (a user)
    trial: str | None = None  # the trial organization it made (declared in the same file)
    claim_token: str | None = None  # clm_…: the agent can start the claim ceremony with it
    refresh_token: str | None = None  # art_…: a claimed registration's, for `{type: refresh}`


class ApiKeyDecl(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    org: str
    name: str
    secret: str  # pxtk_…, stored hashed as every key is
    grants: list[str] = []


class ServiceKeyDecl(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: str
    key: str  # sk_test_…: what the service under test sends to the agents API; stored hashed


class SecretDecl(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    org: str
    key: str
    value: str
    db: str | None = None  # a database's own secret; org-wide when absent


class WebhookDecl(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    url: str  # matched by it: an endpoint of this URL is the declared one
    secret: str  # required here: the receiver is configured with it beforehand
    events: list[str] = []  # the registration events it takes; none named: every one


class DeclaredState(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    clock: datetime | ClockDecl | None = None  # a bare instant freezes the clock there
    orgs: list[OrgDecl] = []
    users: list[UserDecl] = []
    registrations: list[RegistrationDecl] = []
    api_keys: list[ApiKeyDecl] = []
    secrets: list[SecretDecl] = []
    webhooks: list[WebhookDecl] = []
    service_keys: list[ServiceKeyDecl] = []


# --- the answer ------------------------------------------------------------------------------------------------


class Counts(msgspec.Struct):
    created: int = 0
    updated: int = 0
    unchanged: int = 0

    def add(self, outcome: Outcome) -> None:
        setattr(self, outcome, getattr(self, outcome) + 1)


class Applied(msgspec.Struct):
    file: str
    applied: dict[str, Counts]  # per part: clock, orgs, users, registrations, api_keys, secrets, webhooks, service_keys
    unchanged: bool  # nothing was created or updated
    clock: str  # the clock after the apply, ISO 8601


# --- where a refusal points ------------------------------------------------------------------------------------


class Refused(Exception):
    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


@contextlib.contextmanager
def _at(*path: str | int) -> Generator[None]:
    """A domain rule's refusal (an ApiError) becomes a refusal of this place in the file."""
    try:
        yield
    except ApiError as e:
        raise Refused(path, e.message) from None


_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_-]+)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*["']?([A-Za-z0-9_-]+)["']?\s*=""")


def line_of(text: str, path: Path) -> int | None:
    """The line a place in the file is on. tomllib keeps no positions, so the text is scanned: the Nth `[[table]]`
    header, then the key inside it; a top-level key, or a `[table]` and its key. None when not found (an inline
    table the scan does not follow): the message then names the place without a line."""
    table, index, key = _parts(path)
    section: tuple[str, int | None] | None = None  # None: the top level
    seen: dict[str, int] = {}
    found: int | None = None
    quotes = False
    for number, line in enumerate(text.splitlines(), 1):
        toggles = bool(line.count('"""') % 2 or line.count("'''") % 2)
        if quotes:  # inside a multi-line string: nothing here is a header or a key
            quotes = not toggles
            continue
        quotes = toggles
        header = _HEADER.match(line)
        if header:
            name = header.group(2)
            if header.group(1) == "[[":
                seen[name] = seen.get(name, -1) + 1
                section = (name, seen[name])
            else:
                section = (name, None)
            if section == (table, index):
                found = number
                if key is None:
                    return number
            continue
        m = _KEY.match(line)
        if m is None:
            continue
        if section is None and m.group(1) == table and found is None:
            found = number  # `orgs = [...]` or `clock = ...` at the top level
            if index is None and key is None:
                return number
        elif section == (table, index) and m.group(1) == key:
            return number
    return found


def _parts(path: Path) -> tuple[str, int | None, str | None]:
    table = str(path[0]) if path else ""
    rest = list(path[1:])
    index: int | None = None
    if rest and isinstance(first := rest[0], int):
        index = first
        rest.pop(0)
    key = str(rest[0]) if rest and isinstance(rest[0], str) else None
    return table, index, key


def _dotted(path: Path) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(path))


def refusal(name: str, text: str, path: Path, message: str) -> ApiError:
    line = line_of(text, path) if path else None
    where = f"{name}:{line}" if line else name
    place = _dotted(path)
    return BAD_REQUEST(f"{where}: {place + ': ' if place else ''}{message}")


# --- reading the file ------------------------------------------------------------------------------------------

_TOML_AT = re.compile(r"^(.*) \(at line (\d+), column \d+\)$")
_MSGSPEC_AT = re.compile(r"^(.*?)(?: - at `\$(.*)`)?$", re.S)
_PATH_PART = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def parse(text: str, name: str) -> DeclaredState:
    """The file, decoded strictly; a refusal is an ApiError whose message starts `FILE:LINE:`."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = _TOML_AT.match(str(e))
        line, message = (m.group(2), m.group(1)) if m else (max(1, len(text.splitlines())), str(e))
        message = message.replace(" (at end of document)", " (at the end of the file)")
        raise BAD_REQUEST(f"{name}:{line}: {message}") from None
    except RecursionError:  # tomllib recurses once per level of nested arrays and inline tables
        raise BAD_REQUEST(f"{name}: arrays or inline tables nested too deeply") from None
    return _strictly(lambda: msgspec.convert(raw, DeclaredState), name, text)


def parse_json(body: bytes, name: str) -> DeclaredState:
    """The same state sent as JSON (the operator API's `application/json`), decoded as strictly; a refusal names the
    place as the file's do, without a line (`body: orgs[0].trial: …`)."""
    try:
        jsonbody.check_depth(body)
        return _strictly(lambda: msgspec.json.decode(body, type=DeclaredState), name, "")
    except (jsonbody.NotJson, msgspec.DecodeError, UnicodeDecodeError) as e:
        raise BAD_REQUEST(f"{name}: {e}") from None


def _strictly(read: Callable[[], DeclaredState], name: str, text: str) -> DeclaredState:
    """`read()`, its msgspec refusal said as a place in the file (`text`, for its line) and what is wrong there."""
    try:
        return read()
    except msgspec.ValidationError as e:
        m = _MSGSPEC_AT.match(str(e))
        message, where = (m.group(1), m.group(2) or "") if m else (str(e), "")
        path: Path = tuple(int(i) if i else str(k) for k, i in _PATH_PART.findall(where))
        unknown = re.search(r"unknown field `([^`]+)`", message)
        if unknown:
            path, message = (*path, unknown.group(1)), f"unknown key; {_known(path)}"
        elif (missing := re.search(r"missing required field `([^`]+)`", message)) is not None:
            message = f"{missing.group(1)} is required"
        raise refusal(name, text, path, message) from None


_TABLES: dict[str, type[msgspec.Struct]] = {
    "orgs": OrgDecl,
    "users": UserDecl,
    "registrations": RegistrationDecl,
    "api_keys": ApiKeyDecl,
    "secrets": SecretDecl,
    "webhooks": WebhookDecl,
    "service_keys": ServiceKeyDecl,
}


def _known(path: Path) -> str:
    """The keys allowed where an unknown one was found."""
    if not path:
        return f"the top level has {', '.join(DeclaredState.__struct_fields__)}"
    if path[0] == "clock":
        return f"clock has {', '.join(ClockDecl.__struct_fields__)}"
    kind = _TABLES.get(str(path[0]))
    if kind is None:
        return f"the top level has {', '.join(DeclaredState.__struct_fields__)}"
    return f"[[{path[0]}]] has {', '.join(kind.__struct_fields__)}"


# --- checking it against the rules (no store needed) --------------------------------------------------------------


class _Plan(msgspec.Struct, kw_only=True):
    world: DeclaredState
    now: float | None  # the declared clock, or None: the clock as it is
    frozen: bool
    lifetimes: list[float | None]  # each org's time left (unclaimed trials)
    declared: dict[str, OrgDecl]  # by slug
    trial_of: dict[str, str]  # trial slug -> the registration that made it


def check(world: DeclaredState, trial_lifetime: float) -> _Plan:
    now, frozen = _clock(world.clock)
    declared: dict[str, OrgDecl] = {}
    lifetimes: list[float | None] = []
    for i, o in enumerate(world.orgs):
        with _at("orgs", i, "name"):
            orgs.check_name(o.name)
        if o.name in declared:
            raise Refused(("orgs", i, "name"), f"the organization {o.name} is declared twice")
        declared[o.name] = o
        if o.display_name is not None and not 0 < len(o.display_name) <= MAX_DISPLAY_NAME:
            raise Refused(("orgs", i, "display_name"), f"a display name is 1 to {MAX_DISPLAY_NAME} characters")
        for field, value in (("claimed", o.claimed), ("time_left", o.time_left), ("claim_token", o.claim_token)):
            if value not in (None, False) and not o.trial:
                raise Refused(("orgs", i, field), f"only a trial has {field} (add trial = true)")
            if value not in (None, False) and field != "claimed" and o.claimed:
                raise Refused(("orgs", i, field), f"a claimed trial has no {field}: it stays until deleted")
        if o.claim_token is not None and not _CLAIM_LINK.match(o.claim_token):
            raise Refused(("orgs", i, "claim_token"), "a trial's claim token is tcl_ and 16 to 128 URL-safe characters")
        seconds: float | None = None
        if o.trial and not o.claimed:
            seconds = trial_lifetime if o.time_left is None else _duration(o.time_left, ("orgs", i, "time_left"))
            if (now or 0) + seconds > MAX_TIME:
                raise Refused(("orgs", i, "time_left"), "the trial would expire after 9999")
        lifetimes.append(seconds)

    emails: set[str] = set()
    for i, u in enumerate(world.users):
        if not valid_email(u.email) or u.email != u.email.strip():
            raise Refused(("users", i, "email"), "not an e-mail address")
        if u.email.lower() in emails:
            raise Refused(("users", i, "email"), f"the user {u.email} is declared twice")
        emails.add(u.email.lower())
        if len(set(u.orgs)) != len(u.orgs):
            raise Refused(("users", i, "orgs"), "an organization is named twice")

    ids: set[str] = set()
    trial_of: dict[str, str] = {}
    for i, r in enumerate(world.registrations):
        if not _REGISTRATION_ID.match(r.id):
            raise Refused(("registrations", i, "id"), "a registration id is agent_reg_ and 1 to 64 letters or digits")
        if r.id in ids:
            raise Refused(("registrations", i, "id"), f"the registration {r.id} is declared twice")
        ids.add(r.id)
        for field, value in (("login_hint", r.login_hint), ("claimed_by", r.claimed_by)):
            if value is not None and (not valid_email(value) or value != value.strip()):
                raise Refused(("registrations", i, field), "not an e-mail address")
        if r.type == RegType.SERVICE_AUTH and r.login_hint is None:
            raise Refused(("registrations", i, "type"), "service_auth needs login_hint: the person's e-mail")
        if r.type == RegType.ANONYMOUS and r.login_hint is not None:
            raise Refused(("registrations", i, "login_hint"), "only a service_auth registration has a login_hint")
        if r.type == RegType.IDENTITY_ASSERTION and (r.claimed_by is None or not r.upstream_sub):
            raise Refused(
                ("registrations", i, "type"),
                "identity_assertion needs claimed_by (its person) and upstream_sub (their id at the upstream issuer)",
            )
        if r.type != RegType.IDENTITY_ASSERTION and r.upstream_sub is not None:
            raise Refused(("registrations", i, "upstream_sub"), "only an identity_assertion registration has one")
        if r.claim_token is not None:
            if not _CLAIM_TOKEN.match(r.claim_token):
                raise Refused(
                    ("registrations", i, "claim_token"), "a claim token is clm_ and 16 to 128 URL-safe characters"
                )
            if r.claimed_by is not None:
                raise Refused(("registrations", i, "claim_token"), "a claimed registration has no claim left to make")
        if r.refresh_token is not None:
            if not _REFRESH_TOKEN.match(r.refresh_token):
                raise Refused(
                    ("registrations", i, "refresh_token"), "a refresh token is art_ and 16 to 128 URL-safe characters"
                )
            if r.claimed_by is None:
                raise Refused(("registrations", i, "refresh_token"), "only a claimed registration has a refresh token")
        if r.trial is not None:
            org = declared.get(r.trial)
            if org is None or not org.trial:
                raise Refused(
                    ("registrations", i, "trial"), f"{r.trial} is not a trial declared in this file (trial = true)"
                )
            if r.type != RegType.ANONYMOUS:
                raise Refused(("registrations", i, "trial"), "only an anonymous registration gets a trial")
            if r.trial in trial_of:
                raise Refused(("registrations", i, "trial"), f"{r.trial} is already the trial of {trial_of[r.trial]}")
            if org.claimed and r.claimed_by is None:
                raise Refused(
                    ("registrations", i, "claimed_by"),
                    f"{r.trial} is claimed, and so is the registration that made it: name its person in claimed_by",
                )
            trial_of[r.trial] = r.id

    named: set[tuple[str, str]] = set()
    secrets_seen: set[str] = set()
    for i, k in enumerate(world.api_keys):
        with _at("api_keys", i, "name"):
            keys.check_name(k.name)
        with _at("api_keys", i, "secret"):
            keys.check_secret(k.secret)
        with _at("api_keys", i, "grants"):
            keys.check_grants(k.grants, k.org)
        if (k.org, k.name) in named:
            raise Refused(("api_keys", i, "name"), f"{k.org} has two keys named {k.name}")
        named.add((k.org, k.name))
        if k.secret in secrets_seen:
            raise Refused(("api_keys", i, "secret"), "two keys have this secret (each key's is its own)")
        secrets_seen.add(k.secret)

    values: set[tuple[str, str, str]] = set()
    for i, s in enumerate(world.secrets):
        with _at("secrets", i, "key"):
            secrets.check_key(s.key)
        with _at("secrets", i, "value"):
            secrets.check_value(s.key, s.value)
        if s.db is not None:
            with _at("secrets", i, "db"):
                orgs.check_name(s.db, "database")
        if (s.org, s.db or "", s.key) in values:
            raise Refused(("secrets", i, "key"), f"the secret {s.key} is declared twice")
        values.add((s.org, s.db or "", s.key))

    urls: set[str] = set()
    for i, w in enumerate(world.webhooks):
        with _at("webhooks", i, "url"):
            endpoints.check_url(w.url)
        with _at("webhooks", i, "events"):
            w.events = endpoints.check_events(w.events)
        with _at("webhooks", i, "secret"):
            endpoints.check_secret(w.secret)
        if w.url in urls:
            raise Refused(("webhooks", i, "url"), "this webhook endpoint is declared twice")
        urls.add(w.url)
    key_names: set[str] = set()
    service_keys_seen: set[str] = set()
    for i, sk in enumerate(world.service_keys):
        with _at("service_keys", i, "name"):
            service_keys.check_name(sk.name)
        with _at("service_keys", i, "key"):
            service_keys.check_key(sk.key)
        if sk.name in key_names:
            raise Refused(("service_keys", i, "name"), f"two service keys are named {sk.name}")
        key_names.add(sk.name)
        if sk.key in service_keys_seen:
            raise Refused(("service_keys", i, "key"), "two service keys have this key (each key's is its own)")
        service_keys_seen.add(sk.key)
    return _Plan(world=world, now=now, frozen=frozen, lifetimes=lifetimes, declared=declared, trial_of=trial_of)


def _clock(clock: datetime | ClockDecl | None) -> tuple[float | None, bool]:
    if clock is None:
        return None, True
    at, frozen = (clock.at, clock.frozen) if isinstance(clock, ClockDecl) else (clock, True)
    at = at if at.tzinfo else at.replace(tzinfo=UTC)  # a local date-time is UTC, as --freeze-clock reads it
    ts = at.timestamp()
    if not 0 <= ts <= MAX_TIME:
        raise Refused(("clock",), "the clock must lie between 1970 and 9999")
    return ts, frozen


def _duration(value: str | int, path: Path) -> float:
    try:
        seconds = parse_duration(str(value))
    except ValueError as e:
        raise Refused(path, str(e)) from None
    if seconds <= 0:
        raise Refused(path, "time_left must be more than zero (an expired trial is simply not declared)")
    return seconds


# --- applying it -----------------------------------------------------------------------------------------------


async def apply(
    core: Core, box: SecretBox, identity: Identity, text: str, name: str, *, decoded: DeclaredState | None = None
) -> Applied:
    """Make the emulator hold the declared state in `text` (the file `name`, for messages), all of it or none; or
    `decoded`, the state already read (sent as JSON: `text` is then empty, and refusals name no line)."""
    world = decoded if decoded is not None else parse(text, name)
    try:
        plan = check(world, core.settings.trial_lifetime)
        for i, w in enumerate(world.webhooks):  # resolves its host: outside the lock, before anything is written
            with _at("webhooks", i, "url"):
                await endpoints.check_destination(core.listening, w.url)
        parts = ("clock", "orgs", "users", "registrations", "api_keys", "secrets", "webhooks", "service_keys")
        counts = {part: Counts() for part in parts}
        # No due job (a trial's expiry) and no reset or load runs between the rows and the clock they are declared
        # for: the clock below is set before the first await after the lock goes.
        async with core.exclusive():
            now = plan.now if plan.now is not None else core.clock.now()
            async with core.store.transaction() as conn:
                await _write(core, box, identity, conn, plan, now, counts)
        state = core.clock.state()
        if plan.now is not None:
            if state.frozen and plan.frozen and state.now == plan.now:
                counts["clock"].add("unchanged")
            else:
                state = await core.move_clock(set_to=plan.now, freeze=plan.frozen)
                counts["clock"].add("updated")
    except Refused as e:
        raise refusal(name, text, e.path, e.message) from None
    unchanged = not any(c.created or c.updated for c in counts.values())
    core.bus.publish(name, StateApplied(counts=msgspec.to_builtins(counts), unchanged=unchanged))
    return Applied(file=name, applied=counts, unchanged=unchanged, clock=iso(state.now))


async def _write(
    core: Core,
    box: SecretBox,
    identity: Identity,
    conn: aiosqlite.Connection,
    plan: _Plan,
    now: float,
    counts: dict[str, Counts],
) -> None:
    world, exact = plan.world, plan.now is not None
    org_ids = await _references(conn, plan)
    for i, o in enumerate(world.orgs):
        registration = plan.trial_of.get(o.name)
        lifetime = plan.lifetimes[i]
        with _at("orgs", i, "name"):
            org_id, outcome = await orgs.declare(
                core,
                conn,
                o.name,
                trial=o.trial,
                claimed=o.claimed,
                display_name=o.display_name if o.display_name is not None or o.trial else o.name,
                expires_at=now + lifetime if lifetime is not None else None,
                claim_token=o.claim_token,
                registration_id=registration,
                now=now,
                exact=exact,
            )
        org_ids[o.name] = org_id
        counts["orgs"].add(outcome)
    for u in world.users:
        user_id = await users.user_id(conn, u.email)
        made: Outcome = "unchanged"
        if user_id is None:
            user_id, made = await identity.ensure_user(conn, u.email, now), "created"
        for slug in u.orgs:
            if await orgs.set_member(conn, org_ids[slug], user_id, u.role) and made == "unchanged":
                made = "updated"
        counts["users"].add(made)
    for i, r in enumerate(world.registrations):
        with _at("registrations", i, "id"):
            outcome = await identity.registrations.declare_registration(
                conn,
                r.id,
                kind=r.type,
                login_hint=r.login_hint,
                claimed_email=r.claimed_by,
                claim_token=r.claim_token,
                refresh_token=r.refresh_token,
                trial_org_id=org_ids[r.trial] if r.trial else None,
                upstream_sub=r.upstream_sub,
                now=now,
                exact=exact,
            )
        counts["registrations"].add(outcome)
    for i, k in enumerate(world.api_keys):
        with _at("api_keys", i, "secret"):
            outcome = await keys.declare(core, conn, org_ids[k.org], k.org, k.name, k.secret, k.grants, now)
        counts["api_keys"].add(outcome)
    for i, s in enumerate(world.secrets):
        with _at("secrets", i, "value"):
            outcome = await secrets.declare(conn, box, org_ids[s.org], s.org, s.db or "", s.key, s.value, now)
        counts["secrets"].add(outcome)
    for w in world.webhooks:
        counts["webhooks"].add(await endpoints.declare(core, box, conn, w.url, w.events, w.secret, now))
    for i, sk in enumerate(world.service_keys):
        with _at("service_keys", i, "key"):
            outcome = await service_keys.declare(core, conn, sk.name, sk.key, now)
        counts["service_keys"].add(outcome)


async def _references(conn: Db, plan: _Plan) -> dict[str, str]:
    """Every organization the file names but does not declare must exist already, and a secret's database must be
    one of its organization's (a declared new organization has `main` only): checked before anything is written.
    Returns the ids of the existing ones."""
    world = plan.world
    found: dict[str, str] = {}

    async def org(slug: str, path: Path) -> None:
        if slug in plan.declared or slug in found:
            return
        existing = await orgs.find(conn, slug)
        if existing is None or existing.slug != slug:
            raise Refused(path, f"no organization {slug!r}: declare it under [[orgs]]")
        found[slug] = existing.id

    for i, u in enumerate(world.users):
        for slug in u.orgs:
            await org(slug, ("users", i, "orgs"))
    for i, k in enumerate(world.api_keys):
        await org(k.org, ("api_keys", i, "org"))
    for i, s in enumerate(world.secrets):
        await org(s.org, ("secrets", i, "org"))
        if s.db is None:
            continue
        existing = await orgs.find(conn, s.org)
        if existing is not None and existing.slug == s.org:
            with _at("secrets", i, "db"):
                await databases.require(conn, existing.id, s.org, s.db)
        elif s.db != plans.DEFAULT_DB:
            raise Refused(("secrets", i, "db"), f"a new organization has one database, {plans.DEFAULT_DB}")
    return found
