"""The agent test kit for Python: start an emulator (or attach to one) and steer it from a test.

`emulator.pytest_plugin` hands a `Testkit` to tests as the `emulator` fixture; scripts can use it directly:

    with Testkit.start(Path("state"), args=["--freeze-clock", "2026-01-01T00:00:00Z"]) as emu:
        ...  # an agent makes a trial, agent-1a2b3c
        emu.clock.advance("48h1s")
        emu.assert_event("trial.expired", subject="agent-1a2b3c")

Everything goes through the emulator's own API (`/_emulator`), so a test does exactly what a person at the
command line or the dashboard could, and the same calls work on an emulator started elsewhere (`attach`).
Its methods answer the admin API's own types (emulator.admin.wire, and the behaviour and declared-state answers),
decoded: attributes, not dict keys. The launch of an `emulator up` process on free ports is here too, shared with
`emulator exec`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import httpx
import msgspec

from emulator.admin import client, ops
from emulator.admin.client import Client, Httpx, Unreachable, admin_headers, local_bundle
from emulator.admin.ops import Call
from emulator.admin.wire import (
    AgentRegistrationView,
    ClaimDecided,
    ClaimDecision,
    ClockMove,
    ClockView,
    DeliveryView,
    Endpoints,
    EndpointsFile,
    EventView,
    FaultList,
    FaultRelease,
    FaultRuleView,
    FaultsReleased,
    HostedTable,
    LoginDecided,
    LoginDecision,
    RegistrationDeleted,
    ResetRequest,
    ResetView,
    SecretView,
    ServiceAnswer,
    ServiceCall,
    ServiceKeyCreate,
    ServiceKeyCreated,
    ServiceKeyView,
    SnapshotLoaded,
    SnapshotSave,
    StatusView,
    TrialClaim,
    TrialClaimed,
    WatchSet,
    WatchView,
    WebhookAdd,
    WebhookCreated,
    WebhookView,
)
from emulator.core.processes import alive
from emulator.core.snapshots import SnapshotView
from emulator.identity.idjag import Minted, MintRequest

if TYPE_CHECKING:  # loaded when first used: a pytest run that never asks for them does not import the domain
    from emulator.behaviour.scorecard import Report
    from emulator.behaviour.traces import Trace
    from emulator.hosted.declared import Applied

T = TypeVar("T")
A = TypeVar("A")

START_TIMEOUT = 120.0  # seconds; a cold start that imports hosted data can take a while
STOP_TIMEOUT = 60.0
HOSTED_READ_TIMEOUT = 300.0  # seconds: a database's tables (pixeltable imported beside its server), a service's answer
ORIGINS = ("site", "auth", "api", "tunnel", "s3")
REUSE_FILE = "testkit-reuse.json"  # in a reused state dir: the flags it was started with and its pid


class EmulatorError(client.EmulatorError):
    """The emulator answered a call with an error (its status, code and message; the text names the call), or
    could not be started."""

    def __init__(self, message: str, status: int | None = None, code: str = "") -> None:
        super().__init__(status, code, message)


class _Reused(msgspec.Struct):
    """REUSE_FILE: the flags a kept emulator was started with, and its pid."""

    flags: str
    pid: int


# --- starting and stopping an `emulator up` process ---------------------------------------------------------


def running(state_dir: Path) -> EndpointsFile:
    """What `state_dir`'s endpoints.json says (OSError when there is none, ValueError when it is not one)."""
    return msgspec.json.decode((state_dir / "endpoints.json").read_bytes(), type=EndpointsFile)


def launch(
    state_dir: Path, args: Sequence[str] = (), *, log_path: Path | None = None, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], EndpointsFile]:
    """Start `emulator up` on free loopback ports in `state_dir` and wait until it serves; its own process
    group, so it outlives nothing it should not and can be stopped with everything it started."""
    state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(state_dir, 0o700)
    log_path = log_path or state_dir / "emulator.log"
    argv = [sys.executable, "-m", "emulator", "up", "--state-dir", str(state_dir)]
    argv += [f"--{name}-port=0" for name in ORIGINS]
    if "EMULATOR_PROFILE" not in (env or os.environ) and not any(a.startswith("--profile") for a in args):
        argv += ["--profile", "throwaway"]  # one of many short-lived emulators: memory over restart speed
    base = {k: v for k, v in (env or os.environ).items() if k not in ("EMULATOR_URL", "EMULATOR_STATE_DIR")}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [*argv, *args], stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True, env=base
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EmulatorError(f"the emulator stopped at start (exit {proc.returncode}):\n{log_tail(log_path)}")
        with contextlib.suppress(OSError, ValueError):
            found = running(state_dir)
            if found.pid == proc.pid:
                return proc, found
        time.sleep(0.05)
    stop_process(proc)
    raise EmulatorError(f"the emulator was not serving after {START_TIMEOUT:.0f} s:\n{log_tail(log_path)}")


def stop_process(proc: subprocess.Popen[bytes]) -> bool:
    """SIGTERM, on which the emulator stops every workload it started; SIGKILL the group if it hangs."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return False
    return True


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# --- the handle a test holds -------------------------------------------------------------------------------


class Testkit:
    """A running emulator and what a test does with it: reset, the clock, the person's acts, faults, snapshots,
    declared states and the event journal. `since` for the journal defaults to where the current test began."""

    __test__ = False  # not a test class, whatever pytest's naming rules say

    def __init__(
        self,
        endpoints: Endpoints,
        *,
        process: subprocess.Popen[bytes] | None = None,
        state_dir: Path | None = None,
        reused: bool = False,
        admin_token: str | None = None,
    ) -> None:
        self.endpoints = endpoints
        self.process = process  # the process this handle started and stops; None when attached or reused
        self.state_dir = state_dir
        self.reused = reused
        self.mark = 0  # the journal's last event before the current test
        # Never through a proxy: the emulator is on loopback, and a test shell may export the emulator's own proxy.
        # The admin token: the one given (an evaluation's trial, whose token only the harness holds), else the
        # environment's.
        headers = {"X-Emulator-Token": admin_token} if admin_token else admin_headers()
        self._http = httpx.Client(base_url=self.url, timeout=120, trust_env=False, headers=headers)
        self._client = Client(self.url, Httpx(self._http))
        self.clock = Clock(self)
        """The emulator's clock: `now`, `advance`, `set`, `freeze`, `resume`."""
        self.acts = Acts(self)
        """What the person and the operator do: claims, trial claims, sign-ins, ID-JAGs, service keys."""
        self.faults = Faults(self)
        """Fault rules and holds: `add`, `injected` (a context manager), `hold`, `release`, `list`, `clear`."""
        self.snapshots = Snapshots(self)
        """Snapshots of the whole state: `save`, `load`, `list`, `delete`, `export`, `import_file`."""

    # -- how to get one

    @classmethod
    def start(cls, state_dir: Path, args: Sequence[str] = ()) -> Testkit:
        """A new emulator in `state_dir` (on free ports), stopped by `stop()` or at the end of a `with`."""
        proc, found = launch(state_dir, args)
        return cls(found, process=proc, state_dir=state_dir)

    @classmethod
    def attach(cls, url: str) -> Testkit:
        """An emulator someone else started (`EMULATOR_URL`); `stop()` leaves it running."""
        with httpx.Client(timeout=10, trust_env=False, headers=admin_headers()) as http:
            try:
                status = Client(url, Httpx(http)).run(ops.STATUS.call())
            except Unreachable as e:
                raise EmulatorError(f"no emulator answers at {url}: {e}") from None
            except client.EmulatorError as e:
                raise EmulatorError(f"{url} is not an emulator's site (GET {ops.STATUS.path}: {e.status})") from None
        found = msgspec.convert(status.endpoints, Endpoints)
        if not Path(found.ca_bundle).is_file():  # its files are another machine's (a container's): a bundle of ours
            found = msgspec.structs.replace(found, ca_bundle=str(local_bundle(url.rstrip("/"))))
        return cls(found, state_dir=Path(status.state_dir))

    @classmethod
    def reuse(cls, state_dir: Path, args: Sequence[str] = ()) -> Testkit:
        """The emulator a previous run left in `state_dir` when it was started with the same flags (and is healthy),
        else a new one there, left running at the end (Testcontainers' reuse): `emulator down --state-dir DIR`."""
        flags = hashlib.sha256(json.dumps([*args, sys.executable]).encode()).hexdigest()[:16]
        with contextlib.suppress(OSError, ValueError, EmulatorError):
            kept = msgspec.json.decode((state_dir / REUSE_FILE).read_bytes(), type=_Reused)
            found = running(state_dir)
            if kept.flags == flags and kept.pid == found.pid and alive(found.pid):
                return cls(cls.attach(found.site).endpoints, state_dir=state_dir, reused=True)
        # Another run's emulator with other flags, or one that no longer answers: stop it, start ours.
        with contextlib.suppress(OSError, ValueError, ProcessLookupError):
            old = running(state_dir).pid
            os.kill(old, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT
            while alive(old) and time.monotonic() < deadline:
                time.sleep(0.05)
        proc, found = launch(state_dir, args)
        (state_dir / REUSE_FILE).write_text(json.dumps({"flags": flags, "pid": proc.pid}))
        return cls(found, state_dir=state_dir, reused=True)

    def stop(self) -> None:
        """Stop the emulator this handle started (an attached or reused one keeps running)."""
        self._http.close()
        if self.process is not None:
            stop_process(self.process)

    def __enter__(self) -> Testkit:
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    # -- where it is

    @property
    def url(self) -> str:
        """The site's URL (`PIXELTABLE_SITE_URL`), where `/_emulator` is."""
        return self.endpoints.site.rstrip("/")

    @property
    def auth_url(self) -> str:
        """The identity provider's URL (`EMULATOR_AUTH_URL`)."""
        return self.endpoints.auth

    @property
    def api_url(self) -> str:
        """The control plane's URL (`PIXELTABLE_API_URL`)."""
        return self.endpoints.api

    @property
    def env(self) -> dict[str, str]:
        """The variables `emulator env` prints: give them to the agent under test (the `emulator_env` fixture does)."""
        return self.endpoints.exports()

    # -- calls

    def run(self, call: Call[A]) -> A:
        """One operation of the operator API (`kit.run(ops.ORGS.call())`): its answer as the op's type, or
        EmulatorError whose text names the call, its status and the emulator's message."""
        try:
            return self._client.run(call)
        except client.EmulatorError as e:
            raise EmulatorError(f"{call.method} {call.path}: {e.status} {e.message}", e.status, e.code) from None

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        """`/_emulator` (or any site path) with a JSON body; the decoded answer as plain JSON (or the bytes of
        another type), or EmulatorError with its message. The methods below answer typed views instead (`run`)."""
        r = self._send(method, path, body, **kw)
        if r.headers.get("content-type", "").startswith("application/json"):
            return r.json()
        return r.content

    def answer(self, view: type[T], method: str, path: str, body: Any = None, **kw: Any) -> T:
        """A call whose answer is decoded as `view` (a type of emulator.admin.wire)."""
        return msgspec.json.decode(self._send(method, path, body, **kw).content, type=view)

    def _send(self, method: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        """The call, with a body a wire type (encoded as the emulator encodes it) or plain JSON."""
        if isinstance(body, msgspec.Struct):
            kw["content"], kw["headers"] = msgspec.json.encode(body), {"Content-Type": "application/json"}
        elif body is not None:
            kw["json"] = body
        r = self._http.request(method, path, **kw)
        if r.status_code >= 400:
            try:
                error = r.json().get("error", {})
                message = error.get("message") if isinstance(error, dict) else str(error)
            except ValueError:
                message = r.text
            raise EmulatorError(f"{method} {path}: {r.status_code} {message or r.text}", r.status_code)
        return r

    def status(self) -> StatusView:
        return self.run(ops.STATUS.call())

    def tables(self, org: str, db: str = "main", rows: int = 20) -> list[HostedTable]:
        """A running hosted database's tables, as its own pixeltable reads them: each with its columns (name →
        type), its row count and its first `rows` rows. EmulatorError (409) when the database does not run."""
        call = ops.DATABASE_TABLES.call(org=org, db=db, query={"rows": rows})
        return self.run(call.within(HOSTED_READ_TIMEOUT)).tables

    def call_service(
        self, org: str, service: str, path: str, json: Any = None, *, db: str = "main", method: str = "POST"
    ) -> ServiceAnswer:
        """A request to a running service, as the operator (straight to it, no credential, not journaled as an
        agent's): what it answered, whatever the status."""
        call = ServiceCall(service, path, method, msgspec.Raw(msgspec.json.encode(json)))
        return self.run(ops.SERVICE_CALL.call(call, org=org, db=db).within(HOSTED_READ_TIMEOUT))

    def reset(self, to: Literal["empty", "start"] = "empty") -> ResetView:
        """Back to an empty state (`to="empty"`) or to the state the emulator started from (`to="start"`)."""
        answer = self.run(ops.RESET.call(ResetRequest(to)))
        self.mark = self.last_seq()
        return answer

    def apply(self, state: Path | str, name: str | None = None) -> Applied:
        """Make the emulator hold a declared state: a TOML file, or its text (see fixtures/world.toml)."""
        if isinstance(state, Path):
            text, name = state.read_text("utf-8"), name or str(state)
        else:
            text = state
        return self.run(ops.APPLY.call(text.encode(), query={"name": name or "state"}))

    # -- the journal

    def begin_test(self) -> None:
        """From now on `events()` and the assertions look only at what happens next."""
        self.mark = self.last_seq()

    def last_seq(self) -> int:
        return self.run(ops.JOURNAL.call(query={"limit": 1, "since": 2**62})).last_seq

    def events(self, kinds: str | Sequence[str] = (), since: int | None = None) -> list[EventView]:
        """Events since the current test began (or `since`), oldest first; `kinds` are prefixes (`"trial"`)."""
        prefixes = ",".join([kinds] if isinstance(kinds, str) else kinds)
        out: list[EventView] = []
        after = self.mark if since is None else since
        while True:
            page = self.run(ops.JOURNAL.call(query={"since": after, "kinds": prefixes, "limit": 5000}))
            out += page.events
            if len(page.events) < 5000:
                return out
            after = page.events[-1].seq

    def find_events(self, kind: str, subject: str | None = None, **data: object) -> list[EventView]:
        """Events of exactly `kind` whose subject and data fields equal the ones given."""
        wanted = _Wanted(kind, subject, data)
        return [e for e in self.events(kind) if wanted.matches(e)]

    def assert_event(self, kind: str, subject: str | None = None, **data: object) -> EventView:
        """The first event of `kind` (with this subject and these data fields) since the test began, or an
        AssertionError that lists what did happen."""
        found = self.find_events(kind, subject, **data)
        if not found:
            raise AssertionError(f"no {_Wanted(kind, subject, data)} event; {self._seen(kind)}")
        return found[0]

    def assert_no_event(self, kind: str, subject: str | None = None, **data: object) -> None:
        """No event of `kind` (with this subject and these data fields) since the test began, or an AssertionError
        that lists the first few there were."""
        found = self.find_events(kind, subject, **data)
        if found:
            raise AssertionError(
                f"unexpected {_Wanted(kind, subject, data)} event(s): "
                + "; ".join(f"#{e.seq} {e.subject} {e.data}" for e in found[:5])
            )

    def wait_for_event(self, kind: str, timeout: float = 30, subject: str | None = None, **data: object) -> EventView:
        """For what the engine does by itself (a workload that dies, a build that ends), not for emulator time,
        which tests move with `clock.advance`: polls the journal until `timeout` seconds of real time."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.find_events(kind, subject, **data)
            if found:
                return found[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"no {_Wanted(kind, subject, data)} event within {timeout} s")
            time.sleep(0.1)

    def _seen(self, kind: str) -> str:
        family = kind.split(".")[0]
        seen = self.events(family)
        if not seen:
            kinds = sorted({e.kind for e in self.events()})
            return f"no {family}.* event either; kinds seen: {', '.join(kinds) or 'none'}"
        return "seen: " + "; ".join(f"#{e.seq} {e.kind} {e.subject} {e.data}" for e in seen[-8:])

    # -- how the agent behaved (emulator.behaviour)

    def trace(self, who: str) -> Trace:
        """One agent's trace: a registration id, an organization or an API key's name (`ORG/NAME`)."""
        return self.run(ops.TRACE.call(who=who))

    def watch(self, values: dict[str, str], canary_hosts: Sequence[str] = ()) -> WatchView:
        """Watch these values (name → value: each one seen in an agent's request is a `secret.sighted` event, and
        never journaled itself) and answer these canary hosts in the proxy (`canary.request`), instead of what was
        watched before. The values stay in the emulator's memory."""
        return self.run(ops.WATCH_SET.call(WatchSet(values, list(canary_hosts))))

    def secrets(self) -> list[SecretView]:
        """Every organization's secrets by name (never a value), each compared with the watched value of its name."""
        return self.run(ops.SECRETS.call()).secrets

    # -- registration events' webhooks

    def add_webhook(self, url: str, events: Sequence[str] | None = None, secret: str | None = None) -> WebhookCreated:
        """An endpoint the registration events are delivered to (every event, or those named), signed with `secret`
        (or one the emulator makes): the answer shows the secret, the only time it is shown."""
        body = WebhookAdd(url=url, events=list(events) if events is not None else None, secret=secret)
        return self.run(ops.WEBHOOK_ADD.call(body))

    def webhooks(self) -> list[WebhookView]:
        return self.run(ops.WEBHOOKS.call()).webhooks

    def remove_webhook(self, endpoint_id: str) -> None:
        """The endpoint goes, and its pending deliveries with it."""
        self.run(ops.WEBHOOK_REMOVE.call(endpoint_id=endpoint_id))

    def webhook_deliveries(self, endpoint: str | None = None, event: str | None = None) -> list[DeliveryView]:
        """Each delivery (of one endpoint, of one event) with its state and every try."""
        return self.run(ops.WEBHOOK_DELIVERIES.call(query={"endpoint": endpoint, "event": event})).deliveries

    def report(self, agent: str | None = None) -> Report:
        """The scorecard of every agent in the journal, or of one."""
        return self.run(ops.REPORT.call(query={"agent": agent}))

    def record(self, agent: str | None = None) -> bytes:
        """The run as a record, as `emulator record save` writes it (`emulator record diff` compares two)."""
        return self.run(ops.RECORD.call(query={"agent": agent}).answered_as(bytes))

    def assert_clean(self, agent: str | None = None, allow: Sequence[str] = ()) -> None:
        """That the agent (or every agent) broke no scorecard rule, save those in `allow`; an AssertionError
        lists each finding with its evidence. The journal is the emulator's since its last reset."""
        found = [
            f"{card.agent}: {f.rule}: {f.detail} [#{', #'.join(str(s) for s in f.evidence)}]"
            for card in self.report(agent).agents
            for f in card.findings
            if f.rule not in allow
        ]
        if found:
            raise AssertionError("the agent broke scorecard rules:\n  " + "\n  ".join(found))

    def describe_events(self, limit: int = 60) -> str:
        """The current test's events, one line each: what the plugin shows under a failed test."""
        events = self.events()
        lines = [f"#{e.seq} {e.iso} {e.kind} {e.subject or ''} {_brief(e)}" for e in events[-limit:]]
        skipped = len(events) - len(lines)
        return (f"({skipped} earlier events not shown)\n" if skipped > 0 else "") + "\n".join(lines)


@dataclass(frozen=True)
class _Wanted:
    """The event a test looks for: its kind, and the subject and data fields it must have (any value a test
    compares with equality, hence `object`)."""

    kind: str
    subject: str | None
    fields: dict[str, object]

    def matches(self, e: EventView) -> bool:
        return (
            e.kind == self.kind
            and (self.subject is None or e.subject == self.subject)
            and all(e.data.get(k) == v for k, v in self.fields.items())
        )

    def __str__(self) -> str:
        said = [f"subject={self.subject!r}"] if self.subject is not None else []
        said += [f"{k}={v!r}" for k, v in self.fields.items()]
        return self.kind + (f" ({', '.join(said)})" if said else "")


def _brief(e: EventView) -> str:
    text = json.dumps(e.data, separators=(",", ":"), default=str)
    return text if len(text) <= 200 else text[:199] + "…"


class Clock:
    """The emulator's clock: every trial, token and window counts on it; tests move it instead of sleeping."""

    def __init__(self, kit: Testkit) -> None:
        self._kit = kit

    def now(self) -> datetime:
        return datetime.fromisoformat(self.state().iso.replace("Z", "+00:00"))

    def state(self) -> ClockView:
        return self._kit.run(ops.CLOCK.call())

    def advance(self, duration: str | float) -> ClockView:
        """`"48h"`, `"90s"`, `"2d"` or seconds; every job that falls due runs before this returns."""
        return self._move(ClockMove(advance=duration))

    def set(self, instant: str | datetime) -> ClockView:
        return self._move(ClockMove(set=_instant(instant)))

    def freeze(self, at: str | datetime | None = None) -> ClockView:
        return self._move(ClockMove(freeze=True, set=_instant(at) if at else None))

    def resume(self) -> ClockView:
        return self._move(ClockMove(freeze=False))

    def _move(self, move: ClockMove) -> ClockView:
        return self._kit.run(ops.CLOCK_MOVE.call(move))


def _instant(value: str | datetime) -> str:
    return value.isoformat() if isinstance(value, datetime) else value


class Acts:
    """What the person does in a browser, done for the test: decide a claim, claim a trial, approve a sign-in."""

    def __init__(self, kit: Testkit) -> None:
        self._kit = kit

    def approve_claim(self, claim: str, email: str) -> str:
        """Approve an agent's claim (its `verification_uri`, or its registration id); returns the user code the
        person reads to the agent."""
        decided = self._kit.run(ops.CLAIM_APPROVE.call(_claim(claim, email)))
        if decided.user_code is None:
            raise EmulatorError(f"the approval of {claim} showed no user code")
        return decided.user_code

    def deny_claim(self, claim: str, email: str = "person@example.com") -> ClaimDecided:
        return self._kit.run(ops.CLAIM_DENY.call(_claim(claim, email)))

    def id_jag(self, email: str, **claims: Any) -> Minted:
        """An ID-JAG for the person `email` from the upstream issuer the emulator plays (what their own identity
        provider gives the agent by token exchange); `claims` make a bad one on purpose (see `MintRequest`:
        email_verified, auth_age, auth_time, expires_in, audience, jti, typ, sub, client_id, scope)."""
        return self._kit.run(ops.ID_JAG.call(MintRequest(email=email, **claims)))

    def claim_trial(self, org: str, email: str) -> TrialClaimed:
        """The person opens the trial's `claim_url` and claims it: it no longer expires."""
        return self._kit.run(ops.TRIAL_CLAIM.call(TrialClaim(org, email)))

    def approve_login(self, email: str, user_code: str | None = None, deny: bool = False) -> LoginDecided:
        """Approve (or deny) a `pxt login` sign-in: the one pending, or the one with this code."""
        if user_code is None:
            pending = self._kit.run(ops.LOGINS.call()).pending
            if len(pending) != 1:
                raise EmulatorError(f"{len(pending)} sign-ins are pending; name the user code")
            user_code = pending[0].user_code
        body = LoginDecision(user_code, email, deny)
        return self._kit.run(ops.LOGIN_APPROVE.call(body))

    # -- the service side: its keys, and the operator's revocation of an agent

    def create_service_key(self, name: str) -> ServiceKeyCreated:
        """A service key for the agents API (`WorkOSClient(api_key=made.key, …)`): its `key` is shown here once."""
        return self._kit.run(ops.SERVICE_KEY_CREATE.call(ServiceKeyCreate(name)))

    def service_keys(self) -> list[ServiceKeyView]:
        return self._kit.run(ops.SERVICE_KEYS.call()).service_keys

    def revoke_service_key(self, key_id: str) -> ServiceKeyView:
        return self._kit.run(ops.SERVICE_KEY_REVOKE.call(key_id=key_id))

    def revoke_registration(self, registration_id: str) -> AgentRegistrationView:
        """Revoke an agent registration as the operator: nothing issued from it works any more."""
        return self._kit.run(ops.REGISTRATION_REVOKE.call(registration_id=registration_id))

    def delete_registration(self, registration_id: str) -> RegistrationDeleted:
        return self._kit.run(ops.REGISTRATION_DELETE.call(registration_id=registration_id))


def _claim(claim: str, email: str) -> ClaimDecision:
    """A claim named by its `verification_uri` (a URL) or by its registration id."""
    if "://" in claim:
        return ClaimDecision(email, claim=claim)
    return ClaimDecision(email, registration=claim)


class Faults:
    """Fault rules (docs/how-to/faults-and-clock.md): errors in each origin's format, latency, drops, hosted faults."""

    def __init__(self, kit: Testkit) -> None:
        self._kit = kit

    def add(self, **rule: Any) -> FaultRuleView:
        """`add(path="/ask", status=503, retry_after=5, count=2)` (the fields of core.faults.FaultSpec, sent as
        they are: the emulator checks them); answers the stored rule with its `id`. A hold is `hold()`'s."""
        if "hold" in rule:
            raise TypeError("faults.add(hold=...): a hold is no rule; use faults.hold(path, count)")
        return self._kit.run(ops.FAULT_ADD.call(rule))

    def hold(self, path: str, count: int = 1) -> FaultList:
        """Hold the next `count` requests to `path` until `release()` (the older form of a fault)."""
        return self._kit.run(ops.FAULT_ADD.call({"hold": path, "count": count}).answered_as(FaultList))

    @contextlib.contextmanager
    def injected(self, **rule: Any) -> Iterator[FaultRuleView]:
        """The rule holds inside the `with` only."""
        added = self.add(**rule)
        try:
            yield added
        finally:
            with contextlib.suppress(EmulatorError):  # it may have fired its count and gone
                self._kit.run(ops.FAULT_REMOVE.call(rule_id=added.id))

    def list(self) -> list[FaultRuleView]:
        return self._kit.run(ops.FAULTS.call()).rules

    def clear(self, rule_id: str | None = None) -> None:
        if rule_id:
            self._kit.run(ops.FAULT_REMOVE.call(rule_id=rule_id))
        else:
            self._kit.run(ops.FAULTS_CLEAR.call())

    def release(self) -> FaultsReleased:
        """Let held requests go on."""
        return self._kit.run(ops.FAULTS_RELEASE.call(FaultRelease()))


class Snapshots:
    """Save and load the running emulator's whole state (hosted databases included)."""

    def __init__(self, kit: Testkit) -> None:
        self._kit = kit

    def save(self, name: str) -> SnapshotView:
        return self._kit.run(ops.SNAPSHOT_SAVE.call(SnapshotSave(name)))

    def load(self, name: str) -> SnapshotLoaded:
        answer = self._kit.run(ops.SNAPSHOT_LOAD.call(name=name))
        self._kit.mark = self._kit.last_seq()
        return answer

    def list(self) -> list[SnapshotView]:
        return self._kit.run(ops.SNAPSHOTS.call()).snapshots

    def delete(self, name: str) -> None:
        self._kit.run(ops.SNAPSHOT_DELETE.call(name=name))

    def export(self, name: str, target: Path) -> Path:
        call = ops.SNAPSHOT_EXPORT.call(name=name)
        try:
            self._kit._client.download(call, target)
        except client.EmulatorError as e:
            raise EmulatorError(f"export {name}: {e.status} {e.message}", e.status, e.code) from None
        return target

    def import_file(self, source: Path, name: str | None = None) -> SnapshotView:
        return self._kit.run(ops.SNAPSHOT_IMPORT.call(source.read_bytes(), query={"name": name}))
