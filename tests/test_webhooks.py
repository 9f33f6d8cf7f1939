"""Registration events delivered to webhook endpoints, signed as WorkOS signs them: real registrations over HTTP,
a real receiver on loopback, and the `workos` SDK's own verifier. Retries are moved with the emulator's clock."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from workos.common.models.agent_registration_created import AgentRegistrationCreated
from workos.events.models import EventSchemaUnknown
from workos.webhooks._verification import verify_event

from tests import agent_flow as flow
from tests.conftest import Emulator

DEADLINE = 20.0  # seconds a delivery may take on a busy machine
SECRET = "whsec_test_0123456789abcdef"


class Receiver:
    """A webhook receiver on 127.0.0.1: records every POST (body, headers) and answers the statuses it is given
    in turn (then 200)."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.statuses = list(statuses or [])
        self.got: list[tuple[bytes, dict[str, str]]] = []
        received = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                received.got.append((body, dict(self.headers.items())))
                status = received.statuses.pop(0) if received.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/workos"

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def receiver() -> Iterator[Callable[..., Receiver]]:
    made: list[Receiver] = []

    def make(statuses: list[int] | None = None) -> Receiver:
        r = Receiver(statuses).__enter__()
        made.append(r)
        return r

    yield make
    for r in made:
        r.__exit__()


@pytest.fixture
def hooks(start_emulator: Callable[..., Emulator]) -> Emulator:
    """An emulator of this test's own (its endpoints and deliveries are the test's), clock frozen."""
    return start_emulator("--no-watch", "--freeze-clock", "2026-11-01T00:00:00Z")


def admin(e: Emulator, method: str, path: str, **kw: Any) -> httpx.Response:
    with e.admin() as c:
        return c.request(method, path, **kw)


def add(e: Emulator, url: str, **body: Any) -> dict[str, Any]:
    r = admin(e, "POST", "/_emulator/webhooks", json={"url": url, **body})
    assert r.status_code == 201, r.text
    return r.json()


def deliveries(e: Emulator, **params: str) -> list[dict[str, Any]]:
    r = admin(e, "GET", "/_emulator/webhooks/deliveries", params=params)
    assert r.status_code == 200, r.text
    return r.json()["deliveries"]


def verified(body: bytes, headers: dict[str, str], secret: str = SECRET) -> Any:
    """The SDK's own verification of a delivery, and its typed event: one of its known kinds, not its fallback."""
    event = verify_event(event_body=body, event_signature=headers["WorkOS-Signature"], secret=secret)
    assert not isinstance(event, EventSchemaUnknown), event
    return event


def until(what: Callable[[], Any], why: str, within: float = DEADLINE) -> Any:
    """Poll until `what()` is truthy (its value), within a bounded deadline."""
    deadline = time.monotonic() + within
    while True:
        found = what()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {why}")
        time.sleep(0.05)


def tried(e: Emulator, n: int, **params: str) -> list[dict[str, Any]]:
    """The deliveries once the first has `n` tries recorded."""
    return until(lambda: (d := deliveries(e, **params)) and len(d[0]["tries"]) >= n and d, f"{n} tries of {params}")


async def register(e: Emulator) -> dict[str, Any]:
    async with e.client() as c:
        return await flow.register(c, e)


async def test_a_registration_arrives_signed_and_the_workos_verifier_accepts_it(
    hooks: Emulator, receiver: Callable[..., Receiver]
) -> None:
    r = receiver()
    made = add(hooks, r.url, secret=SECRET, events=["agent.registration.created"])
    assert made["id"].startswith("we_") and made["secret"] == SECRET
    assert made["events"] == ["agent.registration.created"]
    listed = admin(hooks, "GET", "/_emulator/webhooks").json()["webhooks"]
    assert [w["id"] for w in listed] == [made["id"]] and "secret" not in listed[0]  # shown once only

    reg = await register(hooks)
    until(lambda: r.got, "the receiver got the event")
    body, headers = r.got[0]
    assert headers["Content-Type"] == "application/json"
    signature = headers["WorkOS-Signature"]
    event = verify_event(event_body=body, event_signature=signature, secret=SECRET)
    assert isinstance(event, AgentRegistrationCreated)
    assert event.data.id == reg["id"] and event.event == "agent.registration.created"
    # The signature's timestamp is the real time of the try (the receiver's wall clock checks it), not the
    # emulator's clock, which stands in 2026-11-01.
    stamp = int(signature.split(", ")[0].removeprefix("t="))
    assert abs(stamp / 1000 - time.time()) < 60
    with pytest.raises(ValueError, match="Signature hash does not match"):
        verify_event(event_body=body, event_signature=signature, secret="whsec_not_the_secret")
    with pytest.raises(ValueError):
        verify_event(
            event_body=body.replace(reg["id"].encode(), b"agent_reg_OTHER"), event_signature=signature, secret=SECRET
        )

    done = tried(hooks, 1, endpoint=made["id"])
    assert done[0]["state"] == "delivered" and done[0]["event"] == "agent.registration.created"
    assert done[0]["tries"][0]["status"] == 200 and done[0]["tries"][0]["error"] is None
    journal = hooks.journal(kinds="webhook.")
    assert [(j["kind"], j["subject"], j["data"]["attempt"]) for j in journal] == [("webhook.delivered", made["id"], 1)]


async def test_a_failing_receiver_is_retried_on_the_emulators_clock(
    hooks: Emulator, receiver: Callable[..., Receiver]
) -> None:
    r = receiver([500, 500])
    made = add(hooks, r.url, secret=SECRET, events=["agent.registration.created"])
    reg = await register(hooks)
    first = tried(hooks, 1)
    assert first[0]["state"] == "pending" and first[0]["next_at"] == "2026-11-01T00:01:00Z"
    # Less than the backoff: the sender runs (the clock move waits for it to decide), and nothing is due yet.
    hooks.advance("59s")
    assert len(deliveries(hooks)[0]["tries"]) == 1 and len(r.got) == 1
    hooks.advance("1s")  # a minute after the first try
    second = tried(hooks, 2)
    assert second[0]["next_at"] == "2026-11-01T00:06:00Z"  # then five minutes
    hooks.advance("5m")
    third = tried(hooks, 3)[0]
    assert third["state"] == "delivered" and third["attempts"] == 3
    assert [(t["attempt"], t["status"]) for t in third["tries"]] == [(1, 500), (2, 500), (3, 200)]
    assert [t["error"] for t in third["tries"]] == ["HTTP 500", "HTTP 500", None]
    assert [t["at"] for t in third["tries"]] == ["2026-11-01T00:00:00Z", "2026-11-01T00:01:00Z", "2026-11-01T00:06:00Z"]
    # Every try sent the same event, and each verifies.
    assert len({body for body, _ in r.got}) == 1
    for body, headers in r.got:
        assert verified(body, headers).id
    journal = hooks.journal(kinds="webhook.")
    assert [(j["kind"], j["data"]["attempt"], j["data"]["status"]) for j in journal] == [
        ("webhook.failed", 1, 500),
        ("webhook.failed", 2, 500),
        ("webhook.delivered", 3, 200),
    ]
    assert all(j["subject"] == made["id"] and j["data"]["event_id"] == third["event_id"] for j in journal)
    assert journal[0]["data"]["next_at"] == "2026-11-01T00:01:00Z"
    assert reg["id"] in r.got[0][0].decode()
    # `emulator events` prints each try on a line a person reads.
    shown = emulator_cli(hooks, "events", "--kinds", "webhook.")
    assert shown.returncode == 0, shown.stderr
    assert "try 1: 500 (" in shown.stdout and "next try at 2026-11-01T00:01:00Z" in shown.stdout
    assert "try 3: 200 (" in shown.stdout


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when this returns: a connection there is refused


async def test_a_refused_connection_is_a_failed_try_with_its_error(hooks: Emulator) -> None:
    made = add(hooks, f"http://127.0.0.1:{closed_port()}/hooks", events=["agent.registration.created"])
    assert made["secret"].startswith("whsec_")  # made by the emulator when none is given
    await register(hooks)
    failed = tried(hooks, 1)[0]
    attempt = failed["tries"][0]
    assert failed["state"] == "pending" and attempt["status"] is None
    assert "cannot connect" in attempt["error"] and "refused" in attempt["error"].lower()
    journal = hooks.journal(kinds="webhook.failed")
    assert journal and journal[0]["data"]["error"] == attempt["error"] and journal[0]["data"].get("status") is None
    assert "Traceback" not in hooks.log()


async def test_an_endpoint_gets_only_the_events_it_takes(hooks: Emulator, receiver: Callable[..., Receiver]) -> None:
    only = receiver()
    every = receiver()
    picky = add(hooks, only.url, events=["agent.registration.credential.issued"])
    allof = add(hooks, every.url.replace("/workos", "/all"))
    async with hooks.client() as c:
        reg = await flow.register(c, hooks)
        r = await flow.exchange(c, hooks, reg["identity"]["assertion"])
        assert r.status_code == 200, r.text
    until(lambda: len(only.got) >= 1 and len(every.got) >= 2, "both receivers' events")

    def names(rec: Receiver, secret: str) -> list[str]:
        return [verified(b, h, secret).event for b, h in rec.got]

    assert names(only, picky["secret"]) == ["agent.registration.credential.issued"]
    assert names(every, allof["secret"])[:2] == ["agent.registration.created", "agent.registration.credential.issued"]
    assert [d["event"] for d in deliveries(hooks, endpoint=picky["id"])] == ["agent.registration.credential.issued"]
    assert all(d["state"] == "delivered" for d in tried(hooks, 1, endpoint=allof["id"]))


async def test_removing_an_endpoint_drops_its_pending_deliveries_and_a_reset_keeps_endpoints(hooks: Emulator) -> None:
    gone = add(hooks, f"http://127.0.0.1:{closed_port()}/a", events=["agent.registration.created"])
    kept = add(hooks, f"http://127.0.0.1:{closed_port()}/b", secret=SECRET)
    await register(hooks)
    tried(hooks, 1, endpoint=gone["id"])
    assert deliveries(hooks, endpoint=gone["id"])[0]["state"] == "pending"
    r = admin(hooks, "DELETE", f"/_emulator/webhooks/{gone['id']}")
    assert r.status_code == 200 and r.json() == {"removed": gone["id"], "dropped": 1}
    assert deliveries(hooks, endpoint=gone["id"]) == []
    assert admin(hooks, "DELETE", f"/_emulator/webhooks/{gone['id']}").status_code == 404
    # A reset empties the run (events, deliveries) but keeps the installation's endpoints.
    assert admin(hooks, "POST", "/_emulator/reset", json={}).status_code == 200
    assert [w["id"] for w in admin(hooks, "GET", "/_emulator/webhooks").json()["webhooks"]] == [kept["id"]]
    assert deliveries(hooks) == []
    await register(hooks)
    assert tried(hooks, 1, endpoint=kept["id"])[0]["event"] == "agent.registration.created"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({}, "url"),
        ({"url": "ftp://example.com/x"}, "http"),
        ({"url": "/relative"}, "absolute"),
        ({"url": "http://h:notaport/"}, "port"),
        ({"url": "http://example.com/", "events": ["user.created"]}, "unknown"),
        ({"url": "http://example.com/", "events": "agent.registration.created"}, "array"),
        ({"url": "http://example.com/", "secret": "short"}, "secret"),
        ({"url": "http://example.com/", "extra": 1}, "extra"),
    ],
)
def test_bad_input_is_a_400_that_says_why(emu: Emulator, body: dict[str, Any], says: str) -> None:
    r = admin(emu, "POST", "/_emulator/webhooks", json=body)
    assert r.status_code == 400, r.text
    assert says in r.json()["error"]["message"]


def test_not_json_is_a_400(emu: Emulator) -> None:
    r = admin(emu, "POST", "/_emulator/webhooks", content=b"{nope", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["message"]


def emulator_cli(e: Emulator, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "emulator", *args, "--url", e.url], capture_output=True, text=True, timeout=60
    )


async def test_the_cli_adds_lists_and_shows_deliveries(hooks: Emulator, receiver: Callable[..., Receiver]) -> None:
    r = receiver()
    added = emulator_cli(hooks, "webhook", "add", r.url, "--event", "agent.registration.created", "--secret", SECRET)
    assert added.returncode == 0, added.stderr
    assert f"secret: {SECRET}" in added.stdout and "agent.registration.created" in added.stdout
    endpoint = added.stdout.split()[0]
    listed = emulator_cli(hooks, "webhook", "list")
    assert listed.returncode == 0 and endpoint in listed.stdout and SECRET not in listed.stdout
    reg = await register(hooks)
    tried(hooks, 1)
    shown = emulator_cli(hooks, "webhook", "deliveries", "--endpoint", endpoint)
    assert shown.returncode == 0, shown.stderr
    assert "delivered" in shown.stdout and "try 1" in shown.stdout and " 200" in shown.stdout
    assert reg["id"] not in shown.stdout  # the event's id, not the registration's, names it
    bad = emulator_cli(hooks, "webhook", "add", "not-a-url")
    assert bad.returncode != 0 and "absolute" in bad.stderr
    removed = emulator_cli(hooks, "webhook", "remove", endpoint)
    assert removed.returncode == 0 and f"removed {endpoint}" in removed.stdout
    assert "no webhook endpoints" in emulator_cli(hooks, "webhook", "list").stdout


WORLD = f"""
[[webhooks]]
url = "{{url}}"
secret = "{SECRET}"
events = ["agent.registration.created"]
"""


async def test_apply_declares_an_endpoint_and_twice_changes_nothing(
    hooks: Emulator, receiver: Callable[..., Receiver]
) -> None:
    r = receiver()
    text = WORLD.format(url=r.url)

    def apply(body: str) -> httpx.Response:
        return admin(
            hooks, "POST", "/_emulator/apply", content=body.encode(), headers={"Content-Type": "application/toml"}
        )

    first = apply(text)
    assert first.status_code == 200, first.text
    assert first.json()["applied"]["webhooks"] == {"created": 1, "updated": 0, "unchanged": 0}
    again = apply(text).json()
    assert again["unchanged"] is True and again["applied"]["webhooks"] == {"created": 0, "updated": 0, "unchanged": 1}
    changed = apply(text.replace('events = ["agent.registration.created"]', "")).json()
    assert changed["applied"]["webhooks"] == {"created": 0, "updated": 1, "unchanged": 0}
    assert len(admin(hooks, "GET", "/_emulator/webhooks").json()["webhooks"]) == 1
    # The declared secret signs what the receiver gets.
    reg = await register(hooks)
    until(lambda: r.got, "the declared endpoint's event")
    body, headers = r.got[0]
    event = verify_event(event_body=body, event_signature=headers["WorkOS-Signature"], secret=SECRET)
    assert isinstance(event, AgentRegistrationCreated) and event.data.id == reg["id"]
    missing = apply(f'[[webhooks]]\nurl = "{r.url}"\n')
    assert missing.status_code == 400 and "secret is required" in missing.json()["error"]["message"]


async def test_every_kind_the_provider_emits_arrives_and_the_sdk_reads_it_typed(
    hooks: Emulator, receiver: Callable[..., Receiver]
) -> None:
    """created, claim.attempt.created, claim.completed, credential.issued (an access token, a trial's API key),
    refreshed and expired, each caused by a real call, each parsed by the SDK into its own model."""
    r = receiver()
    add(hooks, r.url, secret=SECRET)
    async with hooks.client() as c:
        reg = await flow.register(c, hooks)
        token = (await flow.exchange(c, hooks, reg["identity"]["assertion"])).json()["access_token"]
        trial = await flow.create_trial(c, hooks, token)
        assert trial.status_code == 201, trial.text
        started = await c.post(
            hooks.auth + "/agent/identity/claim",
            json={"type": "service_auth", "claim_token": reg["claim"]["token"], "login_hint": "eve@example.org"},
        )
        uri = started.json()["attempt"]["verification_uri"]
        with hooks.admin() as a:
            code = a.post("/_emulator/claims/approve", json={"claim": uri, "email": "eve@example.org"}).json()
        done = await c.post(
            hooks.auth + "/agent/identity/claim/complete",
            json={"claim_token": reg["claim"]["token"], "user_code": code["user_code"]},
        )
        refresh = done.json()["identity"]["refresh_token"]["value"]
        assert (
            await c.post(hooks.auth + "/agent/identity", json={"type": "refresh", "refresh_token": refresh})
        ).is_success
        waiting = await flow.register(c, hooks, type="service_auth", login_hint="late@example.org")
    hooks.advance("25h")  # past the unclaimed registration's claim window
    want = 9  # created ×2, credential ×2, attempts ×2, completed, refreshed, expired
    until(lambda: len(r.got) >= want, f"{want} events")
    events = [verified(b, h) for b, h in r.got]
    by_kind: dict[str, list[Any]] = {}
    for ev in events:
        by_kind.setdefault(ev.event, []).append(ev)
    assert {k: len(v) for k, v in by_kind.items()} == {
        "agent.registration.created": 2,
        "agent.registration.credential.issued": 2,
        "agent.registration.claim.attempt.created": 2,
        "agent.registration.claim.completed": 1,
        "agent.registration.refreshed": 1,
        "agent.registration.expired": 1,
    }
    created = by_kind["agent.registration.created"][0]
    assert (created.data.id, created.data.kind.value, created.data.method.value) == (
        reg["id"],
        "anonymous",
        "anonymous",
    )
    assert created.data.status.value == "unverified"
    issued = {type(e.data.detail).__name__: e.data for e in by_kind["agent.registration.credential.issued"]}
    assert issued["AccessTokenAgentRegistrationCredentialIssuedDataDetail"].agent_registration_id == reg["id"]
    assert issued["AgentRegistrationCredentialIssuedDataDetail"].detail.api_key_id.startswith("key_")
    completed = by_kind["agent.registration.claim.completed"][0].data
    attempt = next(
        e.data for e in by_kind["agent.registration.claim.attempt.created"] if e.data.agent_registration_id == reg["id"]
    )
    assert completed.agent_registration_id == reg["id"] and completed.completed_by_attempt_id == attempt.id
    assert completed.claimed_by.user_id.startswith("user_") and attempt.login_hint == "eve@example.org"
    assert by_kind["agent.registration.refreshed"][0].data.agent_registration_id == reg["id"]
    assert by_kind["agent.registration.expired"][0].data.agent_registration_id == waiting["id"]
    # In order: each registration's events arrive in the order they happened.
    mine = [
        e.event
        for e in events
        if reg["id"] in (getattr(e.data, "id", None), getattr(e.data, "agent_registration_id", None))
    ]
    assert mine[0] == "agent.registration.created" and mine[-1] == "agent.registration.refreshed"


async def test_the_events_are_kept_as_the_journal_is_never_one_still_to_send(
    start_emulator: Callable[..., Emulator], receiver: Callable[..., Receiver]
) -> None:
    """An agent that exchanges tokens in a loop makes an event each time: of those an endpoint takes, the newest
    `journal_cap` are kept, and one whose delivery still waits is never dropped; one no endpoint takes is journaled
    only."""
    import sqlite3

    e = start_emulator("--no-watch", "--freeze-clock", "2026-11-01T00:00:00Z", env={"EMULATOR_JOURNAL_CAP": "100"})

    def stored() -> list[tuple[int, str]]:
        db = sqlite3.connect(f"file:{e.state_dir / 'emulator.sqlite3'}?mode=ro", uri=True)
        try:
            return db.execute("SELECT seq, event FROM agent_events ORDER BY seq").fetchall()
        finally:
            db.close()

    async with e.client() as c:
        await flow.register(c, e)  # no endpoint yet: journaled, not stored
        assert stored() == [] and e.journal(kinds="agent.registration.created")
        down = f"http://127.0.0.1:{closed_port()}/down"
        add(e, down, secret=SECRET, events=["agent.registration.created"])
        add(e, receiver().url, secret=SECRET, events=["agent.registration.credential.issued"])
        reg = await flow.register(c, e)  # its created event waits: that receiver never answers
        for _ in range(399):
            assert (await flow.exchange(c, e, reg["identity"]["assertion"])).status_code == 200
        # Every credential.issued so far delivered, so the prune at the 500th finds them sent.
        until(lambda: all(d["state"] == "delivered" for d in deliveries(e) if d["event"].endswith("issued")), "sent")
        for _ in range(121):
            assert (await flow.exchange(c, e, reg["identity"]["assertion"])).status_code == 200
    kept = stored()
    # Stored: 1 (created, pending) and 2…521 (each exchange's credential.issued). At the 500th, those at or below
    # 400 went, but the one still to send.
    assert kept[0] == (1, "agent.registration.created") and [s for s, _ in kept[1:]] == list(range(401, 522))
