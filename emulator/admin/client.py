"""The one client of `/_emulator`, for the `emulator` command and the dashboard: finding a running emulator,
calling it, and turning its errors into a message a person reads.

The emulator is found by an explicit URL (`--url`, `EMULATOR_URL`) or by `endpoints.json` in its state dir. The
file is read again before every reconnect, so a restarted emulator that picked new ports is found again. The
CLI calls synchronously (standard library only, so a command starts fast); the dashboard uses the async client.
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
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import msgspec

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
    LogLines,
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

T = TypeVar("T")

Body = msgspec.Struct | dict[str, bool] | None  # what an act sends: its wire type (the switches: name → on)
NO_BODY: dict[str, bool] = {}  # an act that takes no body sends an empty object

# Seconds a snapshot save or load, or a reset, may take (each copies every hosted database's files).
SLOW = 900.0


class EmulatorError(Exception):
    """The emulator answered with an error (its message is what a person should read)."""


class Unreachable(Exception):
    """The emulator is not running, or not where endpoints.json says."""


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
            found = msgspec.convert(fetch(StatusView, self.site() + "/_emulator/status").endpoints, Endpoints)
            # Its CA bundle is a file of its machine (or container): a bundle of this machine's, with its CA.
            return msgspec.structs.replace(found, ca_bundle=str(local_bundle(self.site())))
        return self.running()

    def site(self) -> str:
        """The site's URL, without a call."""
        return (self.url or self.running().site).rstrip("/")

    def describe(self) -> str:
        return self.url or str(self.state_dir)


def local_bundle(site: str) -> Path:
    """A CA bundle on this machine for the emulator at `site`: this machine's CAs and the emulator's (fetched), in the
    per-user cache, named by its content (so a second emulator, or a new CA, gets a file of its own)."""
    from emulator.tunnel.tlsfiles import client_bundle

    req = urllib.request.Request(site + "/_emulator/ca.pem", headers=admin_headers())
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            ca = resp.read()
    except urllib.error.HTTPError as e:
        raise EmulatorError(error_message(e.code, e.read().decode(errors="replace"))) from None
    except (urllib.error.URLError, OSError) as e:
        raise Unreachable(f"cannot reach {site} ({e}); is it running?") from None
    bundle = client_bundle(ca)
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pxt-emulator" / "ca"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"bundle-{hashlib.sha256(bundle).hexdigest()[:16]}.pem"
    if not target.is_file():
        tmp = target.with_name(f".{target.name}.{os.getpid()}")
        tmp.write_bytes(bundle)
        tmp.replace(target)
    return target


def error_message(status: int, body: str) -> str:
    """What a person should read of an error answer: the message of the emulator's error envelope, else the body."""
    try:
        return str(json.loads(body)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return body.strip() or f"HTTP {status}"


def call(url: str, body: Body = None, timeout: float = 10, method: str | None = None) -> Any:
    """One synchronous call (a POST when there is a body, unless `method` says otherwise): the answer as plain
    JSON (what `--json` prints as it came), or EmulatorError / Unreachable."""
    return json.loads(_send(url, body, timeout, method) or b"null")


def fetch(view: type[T], url: str, body: Body = None, timeout: float = 10, method: str | None = None) -> T:
    """`call`, its answer decoded as `view` (its type in emulator.admin.wire)."""
    return msgspec.json.decode(_send(url, body, timeout, method), type=view)


ADMIN_TOKEN_VAR = "EMULATOR_ADMIN_TOKEN"


def admin_headers() -> dict[str, str]:
    """What every /_emulator call carries: the admin token, when the emulator was given one (admin_token)."""
    token = os.environ.get(ADMIN_TOKEN_VAR, "")
    return {"X-Emulator-Token": token} if token else {}


def _send(url: str, body: Body, timeout: float, method: str | None) -> bytes:
    data = msgspec.json.encode(body) if body is not None else None
    headers = {"Content-Type": "application/json", **admin_headers()}
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.read()
    except urllib.error.HTTPError as e:
        raise EmulatorError(error_message(e.code, e.read().decode(errors="replace"))) from None
    except (urllib.error.URLError, OSError) as e:
        raise Unreachable(f"cannot reach {url} ({e}); is it running?") from None


def download(url: str, target: Path, timeout: float = 600) -> int:
    """GET `url` into the file `target` (written whole or not at all); returns its size."""
    tmp = target.with_name(f".{target.name}.part")
    try:
        # An export holds the emulator's keys: the file is the user's alone, as the state dir is.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        req = urllib.request.Request(url, headers=admin_headers())
        with urllib.request.urlopen(req, timeout=timeout) as resp, os.fdopen(fd, "wb") as f:
            shutil.copyfileobj(resp, f, 1024 * 1024)
        tmp.replace(target)
    except urllib.error.HTTPError as e:
        raise EmulatorError(error_message(e.code, e.read().decode(errors="replace"))) from None
    except (urllib.error.URLError, OSError) as e:
        raise Unreachable(f"cannot reach {url} ({e}); is it running?") from None
    finally:
        tmp.unlink(missing_ok=True)
    return target.stat().st_size


def upload(url: str, source: Path, media_type: str, timeout: float = 600) -> Any:
    """POST the file `source` as the body (streamed); the decoded answer."""
    try:
        with open(source, "rb") as f:
            headers = {"Content-Type": media_type, "Content-Length": str(source.stat().st_size), **admin_headers()}
            req = urllib.request.Request(url, data=f, headers=headers, method="POST")
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        raise EmulatorError(error_message(e.code, e.read().decode(errors="replace"))) from None
    except FileNotFoundError:
        raise EmulatorError(f"{source}: no such file") from None
    except (urllib.error.URLError, OSError) as e:
        raise Unreachable(f"cannot reach {url} ({e}); is it running?") from None


def follow(url: str) -> Iterator[EventView]:
    """The events of an `/_emulator/events` stream, decoded, until it ends (Unreachable if it breaks)."""
    req = urllib.request.Request(url, headers={"Accept": "text/event-stream", **admin_headers()})
    try:
        with urllib.request.urlopen(req) as resp:
            for raw in resp:
                line = raw.decode().rstrip("\n")
                if line.startswith("data: "):
                    yield msgspec.json.decode(line[6:], type=EventView)
    except (urllib.error.URLError, OSError) as e:
        raise Unreachable(str(e)) from None


class EmulatorClient:
    """The dashboard's client: async, one connection pool, the live event stream."""

    def __init__(self, locator: Locator, timeout: float = 10.0) -> None:
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

    async def _request(
        self, answer: type[T], method: str, path: str, body: Body = None, within: float | None = None
    ) -> T:
        """One call with `body` (the wire type the endpoint takes), its answer decoded as `answer` (its view)."""
        content = None if body is None else msgspec.json.encode(body)
        headers = None if body is None else {"Content-Type": "application/json"}
        try:
            r = await self._http.request(
                method,
                self.site + path,
                content=content,
                headers=headers,
                timeout=within if within is not None else self._http.timeout,
            )
        except self._httpx.TransportError as e:
            self.relocate()
            raise Unreachable(f"cannot reach {self._site or self.locator.describe()} ({type(e).__name__})") from e
        if r.status_code >= 400:
            raise EmulatorError(error_message(r.status_code, r.text))
        return msgspec.json.decode(r.content, type=answer)

    async def _get(self, answer: type[T], path: str) -> T:
        return await self._request(answer, "GET", path)

    async def _post(self, answer: type[T], path: str, body: Body = None, within: float | None = None) -> T:
        """`within`: seconds the answer may take, when not the client's usual."""
        return await self._request(answer, "POST", path, body if body is not None else NO_BODY, within)

    async def _delete(self, answer: type[T], path: str) -> T:
        return await self._request(answer, "DELETE", path)

    # --- snapshots ----------------------------------------------------------------------------

    async def status(self) -> StatusView:
        return await self._get(StatusView, "/_emulator/status")

    async def registrations(self) -> RegistrationList:
        return await self._get(RegistrationList, "/_emulator/registrations")

    async def claims(self) -> ClaimList:
        """Claim attempts a person can still act on."""
        return await self._get(ClaimList, "/_emulator/claims")

    async def logins(self) -> LoginList:
        """`pxt login` sign-ins waiting for the person."""
        return await self._get(LoginList, "/_emulator/logins")

    async def orgs(self) -> OrgList:
        """Every organization (trials among them) with its keys, admins and databases."""
        return await self._get(OrgList, "/_emulator/orgs")

    async def services(self) -> ServiceList:
        return await self._get(ServiceList, "/_emulator/services")

    async def users(self) -> UserList:
        """People who signed in, their organizations and roles, and their `pxt login` sessions."""
        return await self._get(UserList, "/_emulator/users")

    async def keys(self) -> KeyList:
        """Every API key by organization and name (never its secret), revoked ones included."""
        return await self._get(KeyList, "/_emulator/keys")

    async def webhooks(self) -> WebhookList:
        """The endpoints the registration events go to (never a secret)."""
        return await self._get(WebhookList, "/_emulator/webhooks")

    async def webhook_deliveries(self) -> DeliveryList:
        """Every delivery with its state and each try."""
        return await self._get(DeliveryList, "/_emulator/webhooks/deliveries")

    async def switches(self) -> dict[str, bool]:
        return await self._get(dict[str, bool], "/_emulator/switches")

    async def report(self) -> Report:
        """Every agent the journal knows, with its counts, latency and scorecard."""
        return await self._get(Report, "/_emulator/report")

    async def trace(self, who: str) -> Trace:
        return await self._get(Trace, "/_emulator/traces/" + quote(who, safe=""))

    async def faults(self) -> FaultList:
        return await self._get(FaultList, "/_emulator/faults")

    async def snapshots(self) -> SnapshotList:
        return await self._get(SnapshotList, "/_emulator/snapshots")

    async def db_logs(self, org: str, db: str, since: int = 0) -> list[LogLineView]:
        path = f"/_emulator/databases/{quote(org)}/{quote(db)}/logs?since={since}"
        return (await self._get(LogLines, path)).lines

    # --- acts (each is also an `emulator` command) --------------------------------------------

    async def advance_clock(self, duration: str) -> ClockView:
        return await self._post(ClockView, "/_emulator/clock", ClockMove(advance=duration))

    async def claim_trial(self, org: str, email: str) -> TrialClaimed:
        return await self._post(TrialClaimed, "/_emulator/trials/claim", TrialClaim(org, email))

    async def approve_claim(self, registration: str, email: str) -> ClaimDecided:
        body = ClaimDecision(email, registration=registration)
        return await self._post(ClaimDecided, "/_emulator/claims/approve", body)

    async def deny_claim(self, registration: str, email: str) -> ClaimDecided:
        return await self._post(ClaimDecided, "/_emulator/claims/deny", ClaimDecision(email, registration=registration))

    async def set_switch(self, name: str, value: bool) -> dict[str, bool]:
        return await self._post(dict[str, bool], "/_emulator/switches", {name: value})

    async def approve_login(self, user_code: str, email: str) -> LoginDecided:
        return await self._post(LoginDecided, "/_emulator/logins/approve", LoginDecision(user_code, email))

    async def db_verb(self, org: str, db: str, verb: str) -> VerbAccepted:
        return await self._post(VerbAccepted, f"/_emulator/databases/{quote(org)}/{quote(db)}/{verb}")

    async def remove_fault(self, rule_id: str) -> FaultRemoved:
        return await self._delete(FaultRemoved, f"/_emulator/faults/{quote(rule_id, safe='')}")

    async def clear_faults(self) -> FaultsCleared:
        return await self._delete(FaultsCleared, "/_emulator/faults")

    async def save_snapshot(self, name: str) -> SnapshotView:
        return await self._post(SnapshotView, "/_emulator/snapshots", SnapshotSave(name), within=SLOW)

    async def load_snapshot(self, name: str) -> SnapshotLoaded:
        return await self._post(SnapshotLoaded, f"/_emulator/snapshots/{quote(name, safe='')}/load", within=SLOW)

    async def delete_snapshot(self, name: str) -> SnapshotDeleted:
        return await self._delete(SnapshotDeleted, f"/_emulator/snapshots/{quote(name, safe='')}")

    async def reset(self, to: Literal["empty", "start"] = "empty") -> ResetView:
        return await self._post(ResetView, "/_emulator/reset", ResetRequest(to), within=SLOW)

    # --- the live feed ------------------------------------------------------------------------

    async def events(self, since: int) -> AsyncIterator[EventView]:
        """The SSE stream from event `since` on: the journal's backlog first, then live events.

        Ends when the emulator closes the stream (it does so when it stops); raises Unreachable when
        the connection cannot be made or breaks.
        """
        timeout = self._httpx.Timeout(10.0, read=None)  # the stream is quiet while nothing happens
        try:
            async with self._http.stream(
                "GET", f"{self.site}/_emulator/events", params={"since": since}, timeout=timeout
            ) as r:
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
