"""The one client of `/_emulator`: finding a running emulator, calling one of its operations (admin/ops.py), and
turning its errors into an `EmulatorError` a person reads.

A call is `ops.X.call(...)`, run by a client over one of three transports: `Client` with urllib (the CLI: standard
library only, so a command starts fast) or with an httpx client (the test kit, evaluation), and `AsyncClient` over
httpx for the dashboard (with the live event stream). Each decodes the answer as the op's answer type.

The emulator is found by an explicit URL (`--url`, `EMULATOR_URL`) or by `endpoints.json` in its state dir. The
file is read again before every reconnect, so a restarted emulator that picked new ports is found again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, Protocol, TypeVar

import msgspec

from emulator.admin import ops
from emulator.admin.ops import Call
from emulator.admin.wire import (
    ClaimDecided,
    ClaimDecision,
    ClaimList,
    ClockMove,
    ClockView,
    DeliveryList,
    Endpoints,
    EndpointsFile,
    EventView,
    FaultList,
    FaultRemoved,
    FaultsCleared,
    KeyList,
    LoginDecided,
    LoginDecision,
    LoginList,
    LogLineView,
    OrgList,
    RegistrationList,
    ResetRequest,
    ResetView,
    ServiceList,
    SnapshotDeleted,
    SnapshotList,
    SnapshotLoaded,
    SnapshotSave,
    StatusView,
    TrialClaim,
    TrialClaimed,
    UserList,
    VerbAccepted,
    WebhookList,
)
from emulator.behaviour.scorecard import Report
from emulator.behaviour.traces import Trace
from emulator.core import statelock
from emulator.core.snapshots import SnapshotView

if TYPE_CHECKING:
    import httpx

A = TypeVar("A")

# Seconds a snapshot save or load, or a reset, may take (each copies every hosted database's files).
SLOW = 900.0
TIMEOUT = 10.0  # seconds an operation may take, unless its call says otherwise


class EmulatorError(Exception):
    """The emulator answered with an error: its status, its error code and its message (what a person should
    read, and the exception's text). `status` None: no answer came to read (a file to send was missing)."""

    def __init__(self, status: int | None, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    @classmethod
    def of(cls, status: int, body: bytes) -> EmulatorError:
        """From an error answer: the operator's envelope `{"error": {"code", "message"}}`, else the body itself."""
        text = body.decode(errors="replace")
        try:
            error = json.loads(text)["error"]
            return cls(status, str(error.get("code", "")), str(error["message"]))
        except (ValueError, KeyError, TypeError, AttributeError):
            return cls(status, "", text.strip() or f"HTTP {status}")


class Unreachable(Exception):
    """The emulator is not running, or not where endpoints.json says."""


ADMIN_TOKEN_VAR = "EMULATOR_ADMIN_TOKEN"


def admin_headers() -> dict[str, str]:
    """What every /_emulator call carries: the admin token, when the emulator was given one (admin_token)."""
    token = os.environ.get(ADMIN_TOKEN_VAR, "")
    return {"X-Emulator-Token": token} if token else {}


# --- the transports: one request of a call, its answer's bytes (or EmulatorError / Unreachable) ---------------


class Transport(Protocol):
    def send(self, site: str, call: Call[Any]) -> bytes: ...

    def download(self, site: str, call: Call[Any], into: BinaryIO) -> None: ...


class Urllib:
    """The standard library's HTTP: what the CLI calls with (no import of httpx, so a command starts fast)."""

    def __init__(self, headers: dict[str, str] | None = None) -> None:
        self.headers = admin_headers() if headers is None else headers

    def _open(self, site: str, call: Call[Any], body: bytes | BinaryIO | None, timeout: float | None) -> Any:
        url = site + call.target
        headers = dict(self.headers)
        if call.media is not None:
            headers["Content-Type"] = call.media
        if isinstance(call.content, Path):
            headers["Content-Length"] = str(call.content.stat().st_size)
        if call.stream:
            headers["Accept"] = "text/event-stream"
        req = urllib.request.Request(url, data=body, headers=headers, method=call.method)
        try:
            return urllib.request.urlopen(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            raise EmulatorError.of(e.code, e.read()) from None
        except (urllib.error.URLError, OSError) as e:
            raise Unreachable(f"cannot reach {url} ({e}); is it running?") from None

    def send(self, site: str, call: Call[Any]) -> bytes:
        timeout = call.timeout or TIMEOUT
        if isinstance(call.content, Path):
            try:
                f = open(call.content, "rb")  # closed below, after the answer
            except FileNotFoundError:
                raise EmulatorError(None, "", f"{call.content}: no such file") from None
            with f, self._open(site, call, f, timeout) as resp:
                return self._read(site, call, resp)
        with self._open(site, call, call.content, timeout) as resp:
            return self._read(site, call, resp)

    @staticmethod
    def _read(site: str, call: Call[Any], resp: Any) -> bytes:
        try:
            return resp.read()
        except OSError as e:
            raise Unreachable(f"cannot reach {site + call.target} ({e}); is it running?") from None

    def download(self, site: str, call: Call[Any], into: BinaryIO) -> None:
        with self._open(site, call, None, call.timeout or 600) as resp:
            try:
                shutil.copyfileobj(resp, into, 1024 * 1024)
            except OSError as e:
                raise Unreachable(f"cannot reach {site + call.target} ({e}); is it running?") from None

    def lines(self, site: str, call: Call[Any]) -> Iterator[bytes]:
        """An event stream's lines as they come, until it ends."""
        resp = self._open(site, call, None, None)
        try:
            with resp:
                yield from resp
        except OSError as e:
            raise Unreachable(str(e)) from None


class Httpx:
    """A synchronous httpx client's HTTP (its pool, its headers): the test kit's and evaluation's."""

    def __init__(self, http: httpx.Client) -> None:
        import httpx

        self._httpx = httpx
        self.http = http

    def _request(self, site: str, call: Call[Any]) -> httpx.Request:
        content = call.content.read_bytes() if isinstance(call.content, Path) else call.content
        headers = {"Content-Type": call.media} if call.media is not None else None
        return self.http.build_request(
            call.method,
            site + call.path,
            params=call.query,
            content=content,
            headers=headers,
            timeout=call.timeout if call.timeout is not None else self.http.timeout,
        )

    def send(self, site: str, call: Call[Any]) -> bytes:
        try:
            r = self.http.send(self._request(site, call))
        except self._httpx.TransportError as e:
            raise Unreachable(f"cannot reach {site} ({type(e).__name__}: {e})") from e
        if r.status_code >= 400:
            raise EmulatorError.of(r.status_code, r.content)
        return r.content

    def download(self, site: str, call: Call[Any], into: BinaryIO) -> None:
        try:
            r = self.http.send(self._request(site, call), stream=True)
            try:
                if r.status_code >= 400:
                    raise EmulatorError.of(r.status_code, r.read())
                for chunk in r.iter_bytes():
                    into.write(chunk)
            finally:
                r.close()
        except self._httpx.TransportError as e:
            raise Unreachable(f"cannot reach {site} ({type(e).__name__}: {e})") from e


# --- the clients ----------------------------------------------------------------------------------------------


class Client:
    """Runs ops' calls on one emulator's site, synchronously."""

    def __init__(self, site: str, transport: Transport | None = None) -> None:
        self.site = site.rstrip("/")
        self.transport: Transport = transport or Urllib()

    def run(self, call: Call[A]) -> A:
        """The call's answer, decoded as its op's answer type."""
        return call.decode(self.raw(call))

    def raw(self, call: Call[Any]) -> bytes:
        """The answer's bytes as they came."""
        return self.transport.send(self.site, call)

    def plain(self, call: Call[Any]) -> Any:
        """The answer as plain JSON (what `--json` prints as it came)."""
        return json.loads(self.raw(call) or b"null")

    def download(self, call: Call[Any], target: Path) -> int:
        """The answer (a file) into `target`, written whole or not at all; its size."""
        tmp = target.with_name(f".{target.name}.part")
        try:
            # An export holds the emulator's keys: the file is the user's alone, as the state dir is.
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                self.transport.download(self.site, call, f)
            tmp.replace(target)
        except OSError as e:
            raise Unreachable(f"cannot write {target} ({e})") from None
        finally:
            tmp.unlink(missing_ok=True)
        return target.stat().st_size

    def follow(self, call: Call[EventView]) -> Iterator[EventView]:
        """The events of an event stream (ops.EVENTS), decoded, until it ends (Unreachable if it breaks)."""
        transport = self.transport if isinstance(self.transport, Urllib) else Urllib()
        for raw in transport.lines(self.site, call):
            line = raw.decode().rstrip("\n")
            if line.startswith("data: "):
                yield msgspec.json.decode(line[6:], type=EventView)


@dataclass(frozen=True)
class Locator:
    """Where the emulator is: a fixed site URL, or the state dir whose endpoints.json names it."""

    url: str | None = None
    state_dir: Path | None = None

    def running(self) -> EndpointsFile:
        """What the state dir's endpoints.json says (Unreachable when it names no running emulator)."""
        folder = self.state_dir or Path(".")
        path = folder / "endpoints.json"
        try:
            found = msgspec.json.decode(path.read_bytes(), type=EndpointsFile)
        except (OSError, ValueError) as e:
            raise Unreachable(f"not running ({path} does not exist); start it with `emulator up`") from e
        if (folder / statelock.LOCK_NAME).exists() and statelock.holder(folder) is None:
            raise Unreachable(
                f"not running: the emulator of {folder} (pid {found.pid}) ended without cleaning up, "
                f"and its endpoints.json is stale; start it again with `emulator up --state-dir {folder}`"
            )
        return found

    def endpoints(self) -> Endpoints:
        """Where every origin is: endpoints.json's, or the status's of an emulator named by URL (a call)."""
        if self.url:
            found = msgspec.convert(Client(self.site()).run(ops.STATUS.call()).endpoints, Endpoints)
            # Its CA bundle is a file of its machine (or container): a bundle of this machine's, with its CA.
            return msgspec.structs.replace(found, ca_bundle=str(local_bundle(self.site())))
        return self.running()

    def site(self) -> str:
        """The site's URL, without a call."""
        return (self.url or self.running().site).rstrip("/")

    def client(self) -> Client:
        """A client of the site (found now), over urllib."""
        return Client(self.site())

    def describe(self) -> str:
        return self.url or str(self.state_dir)


def local_bundle(site: str) -> Path:
    """A CA bundle on this machine for the emulator at `site`: this machine's CAs and the emulator's (fetched), in the
    per-user cache, named by its content (so a second emulator, or a new CA, gets a file of its own)."""
    from emulator.tunnel.tlsfiles import client_bundle

    bundle = client_bundle(Client(site).run(ops.CA_PEM.call()))
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pxt-emulator" / "ca"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"bundle-{hashlib.sha256(bundle).hexdigest()[:16]}.pem"
    if not target.is_file():
        tmp = target.with_name(f".{target.name}.{os.getpid()}")
        tmp.write_bytes(bundle)
        tmp.replace(target)
    return target


class AsyncClient:
    """Runs ops' calls asynchronously over httpx (one connection pool), and reads the live event stream; finds the
    site through its locator again after a connection fails."""

    def __init__(self, locator: Locator, timeout: float = TIMEOUT) -> None:
        import httpx  # here, not at the top: the CLI's commands use this module without it, and start faster

        self._httpx = httpx
        self.locator = locator
        self._http = httpx.AsyncClient(timeout=timeout, headers=admin_headers())
        self._site: str | None = None

    @property
    def site(self) -> str:
        if self._site is None:
            self._site = self.locator.site()
        return self._site

    @property
    def known_site(self) -> str | None:
        """The URL in use, if one was found (without reading endpoints.json)."""
        return self._site

    def relocate(self) -> None:
        """Forget the URL so the next call reads endpoints.json again (after a restart)."""
        self._site = None

    async def close(self) -> None:
        await self._http.aclose()

    async def run(self, call: Call[A]) -> A:
        """The call's answer, decoded as its op's answer type."""
        content = call.content.read_bytes() if isinstance(call.content, Path) else call.content
        try:
            r = await self._http.request(
                call.method,
                self.site + call.path,
                params=call.query,
                content=content,
                headers={"Content-Type": call.media} if call.media is not None else None,
                timeout=call.timeout if call.timeout is not None else self._http.timeout,
            )
        except self._httpx.TransportError as e:
            self.relocate()
            raise Unreachable(f"cannot reach {self._site or self.locator.describe()} ({type(e).__name__})") from e
        if r.status_code >= 400:
            raise EmulatorError.of(r.status_code, r.content)
        return call.decode(r.content)

    async def follow(self, call: Call[EventView]) -> AsyncIterator[EventView]:
        """An event stream's events (ops.EVENTS): the journal's backlog first, then live events.

        Ends when the emulator closes the stream (it does so when it stops); raises Unreachable when the connection
        cannot be made or breaks.
        """
        timeout = self._httpx.Timeout(TIMEOUT, read=None)  # the stream is quiet while nothing happens
        try:
            async with self._http.stream(call.method, self.site + call.path, params=call.query, timeout=timeout) as r:
                if r.status_code != 200:
                    raise Unreachable(f"the event stream answered HTTP {r.status_code}")
                data: list[str] = []
                async for line in r.aiter_lines():
                    if line.startswith("data:"):
                        data.append(line[5:].lstrip())
                    elif not line and data:
                        yield msgspec.json.decode("\n".join(data), type=EventView)
                        data = []
        except (self._httpx.TransportError, self._httpx.StreamError) as e:
            self.relocate()
            raise Unreachable(f"the event stream broke ({type(e).__name__})") from e


class EmulatorClient(AsyncClient):
    """The dashboard's client: what it reads and does, each one op."""

    # --- what it shows --------------------------------------------------------------------------

    async def status(self) -> StatusView:
        return await self.run(ops.STATUS.call())

    async def registrations(self) -> RegistrationList:
        return await self.run(ops.REGISTRATIONS.call())

    async def claims(self) -> ClaimList:
        """Claim attempts a person can still act on."""
        return await self.run(ops.CLAIMS.call())

    async def logins(self) -> LoginList:
        """`pxt login` sign-ins waiting for the person."""
        return await self.run(ops.LOGINS.call())

    async def orgs(self) -> OrgList:
        """Every organization (trials among them) with its keys, admins and databases."""
        return await self.run(ops.ORGS.call())

    async def services(self) -> ServiceList:
        return await self.run(ops.SERVICES.call())

    async def users(self) -> UserList:
        """People who signed in, their organizations and roles, and their `pxt login` sessions."""
        return await self.run(ops.USERS.call())

    async def keys(self) -> KeyList:
        """Every API key by organization and name (never its secret), revoked ones included."""
        return await self.run(ops.KEYS.call())

    async def webhooks(self) -> WebhookList:
        """The endpoints the registration events go to (never a secret)."""
        return await self.run(ops.WEBHOOKS.call())

    async def webhook_deliveries(self) -> DeliveryList:
        """Every delivery with its state and each try."""
        return await self.run(ops.WEBHOOK_DELIVERIES.call())

    async def switches(self) -> dict[str, bool]:
        return msgspec.structs.asdict(await self.run(ops.SWITCHES.call()))

    async def report(self) -> Report:
        """Every agent the journal knows, with its counts, latency and scorecard."""
        return await self.run(ops.REPORT.call())

    async def trace(self, who: str) -> Trace:
        return await self.run(ops.TRACE.call(who=who))

    async def faults(self) -> FaultList:
        return await self.run(ops.FAULTS.call())

    async def snapshots(self) -> SnapshotList:
        return await self.run(ops.SNAPSHOTS.call())

    async def db_logs(self, org: str, db: str, since: int = 0) -> list[LogLineView]:
        return (await self.run(ops.DATABASE_LOGS.call(org=org, db=db, query={"since": since}))).lines

    # --- acts (each is also an `emulator` command) --------------------------------------------

    async def advance_clock(self, duration: str) -> ClockView:
        return await self.run(ops.CLOCK_MOVE.call(ClockMove(advance=duration)))

    async def claim_trial(self, org: str, email: str) -> TrialClaimed:
        return await self.run(ops.TRIAL_CLAIM.call(TrialClaim(org, email)))

    async def approve_claim(self, registration: str, email: str) -> ClaimDecided:
        return await self.run(ops.CLAIM_APPROVE.call(ClaimDecision(email, registration=registration)))

    async def deny_claim(self, registration: str, email: str) -> ClaimDecided:
        return await self.run(ops.CLAIM_DENY.call(ClaimDecision(email, registration=registration)))

    async def set_switch(self, name: str, value: bool) -> dict[str, bool]:
        return msgspec.structs.asdict(await self.run(ops.SWITCHES_SET.call({name: value})))

    async def approve_login(self, user_code: str, email: str) -> LoginDecided:
        return await self.run(ops.LOGIN_APPROVE.call(LoginDecision(user_code, email)))

    async def db_verb(self, org: str, db: str, verb: str) -> VerbAccepted:
        return await self.run(ops.DATABASE_VERBS[verb].call(org=org, db=db))

    async def remove_fault(self, rule_id: str) -> FaultRemoved:
        return await self.run(ops.FAULT_REMOVE.call(rule_id=rule_id))

    async def clear_faults(self) -> FaultsCleared:
        return await self.run(ops.FAULTS_CLEAR.call())

    async def save_snapshot(self, name: str) -> SnapshotView:
        return await self.run(ops.SNAPSHOT_SAVE.call(SnapshotSave(name)).within(SLOW))

    async def load_snapshot(self, name: str) -> SnapshotLoaded:
        return await self.run(ops.SNAPSHOT_LOAD.call(name=name).within(SLOW))

    async def delete_snapshot(self, name: str) -> SnapshotDeleted:
        return await self.run(ops.SNAPSHOT_DELETE.call(name=name))

    async def reset(self, to: Literal["empty", "start"] = "empty") -> ResetView:
        return await self.run(ops.RESET.call(ResetRequest(to)).within(SLOW))

    # --- the live feed ------------------------------------------------------------------------

    def events(self, since: int) -> AsyncIterator[EventView]:
        """The live feed from event `since` on: the journal's backlog first, then live events."""
        return self.follow(ops.EVENTS.call(query={"since": since}))
