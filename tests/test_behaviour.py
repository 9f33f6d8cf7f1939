"""How an agent behaved: `http.request` events, traces and the scorecard, with agents that are plain HTTP clients
(each from its own loopback address). Every rule has a misbehaving client that it names, with the events that
show it, and a well-behaved one it leaves alone. The real `pxt` flow's trace and scorecard are in test_pxt_cloud;
the gateway half of `hard-coded-url` and `update-while-not-available` need hosted databases and are checked there.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from emulator.admin.wire import EventView
from emulator.behaviour import scorecard
from emulator.core.payloads import failed
from emulator.hosted.logins import CLIENT_ID
from tests import agent_flow as flow
from tests.conftest import Emulator, next_ip
from tests.reference_pages import page, table_rows
from tui.views.log import event_style

FROZEN = "2031-01-01T00:00:00Z"


@pytest.fixture(scope="module")
def be(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    e = Emulator(tmp_path_factory.mktemp("behaviour"), ["--no-watch", "--freeze-clock", FROZEN]).start()
    yield e
    e.stop()


@pytest.fixture(autouse=True)
def cleared(be: Emulator) -> Iterator[None]:
    yield
    be.admin().delete("/_emulator/faults").raise_for_status()


class Agent:
    """A well-mannered agent by default: it reads discovery, registers, exchanges, and gets one trial."""

    def __init__(self, e: Emulator, c: httpx.AsyncClient) -> None:
        self.e, self.c = e, c
        self.reg: dict[str, Any] = {}
        self.token = ""
        self.trial: dict[str, Any] = {}

    async def discover(self) -> None:
        r = await self.c.get("/.well-known/oauth-protected-resource")
        assert r.status_code == 200
        assert (await self.c.get(self.e.auth + "/.well-known/oauth-authorization-server")).status_code == 200

    async def register(self, discover: bool = True) -> str:
        if discover:
            await self.discover()
        self.reg = await flow.register(self.c, self.e)
        await self.exchange()
        return str(self.reg["id"])

    async def exchange(self) -> None:
        r = await flow.exchange(self.c, self.e, self.reg["identity"]["assertion"])
        assert r.status_code == 200, r.text
        self.token = r.json()["access_token"]

    async def ask_trial(self) -> httpx.Response:
        return await flow.create_trial(self.c, self.e, self.token)

    async def get_trial(self) -> dict[str, Any]:
        r = await self.ask_trial()
        assert r.status_code == 201, r.text
        self.trial = r.json()
        return self.trial

    async def ask(self, body: dict[str, Any], key: str | None = None) -> httpx.Response:
        """POST /ask with its access token, as an agent that sends its credential with every call does (a call
        with none is nobody's: the scorecard never judges it)."""
        headers = {"Authorization": f"Bearer {self.token}", **({"Idempotency-Key": key} if key else {})}
        return await self.c.post("/ask", json=body, headers=headers)

    async def api(self, op: str, **body: Any) -> httpx.Response:
        return await self.c.post(
            self.e.api, json={"operation_type": op, **body}, headers={"X-api-key": self.trial["api_key"]}
        )


def findings(e: Emulator, agent: str) -> list[dict[str, Any]]:
    r = e.admin().get("/_emulator/report", params={"agent": agent})
    assert r.status_code == 200, r.text
    [card] = r.json()["agents"]
    return card["findings"]


def rule_ids(e: Emulator, agent: str) -> list[str]:
    return [f["rule"] for f in findings(e, agent)]


def requests_of(e: Emulator, **match: Any) -> list[dict[str, Any]]:
    return [ev for ev in e.journal("http.request") if all(ev["data"].get(k) == v for k, v in match.items())]


def cli(e: Emulator | None, *args: str) -> subprocess.CompletedProcess[str]:
    where = ["--state-dir", str(e.state_dir)] if e is not None else []  # `record diff` reads files only
    return subprocess.run(
        [sys.executable, "-m", "emulator", *args, *where],
        capture_output=True,
        text=True,
        timeout=60,
    )


# --- the events every rule reads ---------------------------------------------------------------------------------


async def test_every_served_request_is_an_event_with_its_status_duration_and_caller(be: Emulator) -> None:
    ip = next_ip()
    async with be.client(ip) as c:
        agent = Agent(be, c)
        reg = await agent.register()
        trial = await agent.get_trial()
        assert (await agent.api("list_orgs")).status_code == 200
        assert (await c.get("/ask", params={"q": "tables"})).status_code == 200
        refused = await flow.create_trial(c, be, "not-a-token")
        assert refused.status_code == 401
    mine = [ev for ev in be.journal("http.request") if ev["subject"] == ip]
    seen = [(ev["data"]["origin"], ev["data"]["method"], ev["data"]["path"], ev["data"]["status"]) for ev in mine]
    assert seen == [
        ("site", "GET", "/.well-known/oauth-protected-resource", 200),
        ("auth", "GET", "/.well-known/oauth-authorization-server", 200),
        ("auth", "POST", "/agent/identity", 200),
        ("auth", "POST", "/oauth2/token", 200),
        ("site", "POST", "/api/v1/trial-orgs", 201),
        ("api", "POST", "/", 200),
        ("site", "GET", "/ask", 200),
        ("site", "POST", "/api/v1/trial-orgs", 401),
    ]
    trial_call, api_call = mine[4]["data"], mine[5]["data"]
    assert trial_call["reg"] == reg and trial_call["token"].startswith("at_")  # the token's id, not the token
    assert api_call["op"] == "list_orgs" and len(api_call["key"]) == 12
    created = be.journal("trial.created")[-1]
    assert created["subject"] == trial["org"] and created["data"]["key"] == api_call["key"]
    assert all(isinstance(ev["data"]["ms"], float) and ev["data"]["ms"] >= 0 for ev in mine)
    assert mine[-1]["data"]["token"] == "opaque"
    # nothing secret is kept: not the key, not the token, not the assertion
    text = str(mine)
    assert trial["api_key"] not in text and agent.token not in text and agent.reg["identity"]["assertion"] not in text
    # the emulator's own API and liveness probes are not agent calls
    assert not [ev for ev in be.journal("http.request") if ev["data"]["path"].startswith(("/_emulator", "/health"))]


async def test_a_trace_follows_one_agent_across_origins_in_order(be: Emulator) -> None:
    async with be.client() as c, be.client() as other:
        agent, bystander = Agent(be, c), Agent(be, other)
        reg = await agent.register()
        await bystander.register()
        trial = await agent.get_trial()
        await bystander.get_trial()
        assert (await agent.api("list_orgs")).status_code == 200
    by_reg = be.admin().get(f"/_emulator/traces/{reg}").json()
    kinds = [(s["origin"], s["kind"], s["what"].split(" ")[:2]) for s in by_reg["steps"]]
    # Only what carried its credentials: discovery and the registration call carry none (they are unattributed);
    # the exchange carries its assertion, the trial its token, the control plane its key.
    assert kinds[0] == ("auth", "idp.registered", ["idp.registered", reg])
    assert ("auth", "http.request", ["POST", "/oauth2/token"]) in kinds
    assert not [k for k in kinds if k[2][1:2] == ["/.well-known/oauth-protected-resource"]]
    assert ("site", "trial.created", ["trial.created", trial["org"]]) in kinds
    assert kinds[-1] == ("api", "http.request", ["POST", "/"]) and "list_orgs" in by_reg["steps"][-1]["what"]
    assert by_reg["agent"]["orgs"] == [trial["org"]] and by_reg["agent"]["keys"]
    assert by_reg["requests"] == 3 and by_reg["errors"] == 0 and by_reg["p95_ms"] >= by_reg["p50_ms"] >= 0
    seqs = [s["seq"] for s in by_reg["steps"]]
    assert seqs == sorted(seqs)
    # the bystander's calls are not in it, and the same trace is found by the organization and the key's name
    assert bystander_absent(by_reg, bystander.reg["id"])
    assert be.admin().get(f"/_emulator/traces/{trial['org']}").json()["steps"] == by_reg["steps"]
    by_key = be.admin().get(f"/_emulator/traces/{trial['org']}/trial").json()
    assert by_key["steps"] == by_reg["steps"]
    # text for people
    out = cli(be, "trace", reg)
    assert out.returncode == 0, out.stderr
    assert f"agent {reg} (anonymous)" in out.stdout and "POST /api/v1/trial-orgs" in out.stdout
    assert "3 requests, 0 errors" in out.stdout


def bystander_absent(trace: dict[str, Any], other: str) -> bool:
    return all(other not in str(s["data"]) and s["subject"] != other for s in trace["steps"])


async def test_trace_refuses_what_it_cannot_name(be: Emulator) -> None:
    r = be.admin().get("/_emulator/traces/nobody-at-all")
    assert r.status_code == 404 and "nobody-at-all" in r.json()["error"]["message"]
    async with be.client() as a, be.client() as b:
        for c in (a, b):
            agent = Agent(be, c)
            await agent.register()
            await agent.get_trial()
    r = be.admin().get("/_emulator/traces/trial")  # every trial's key is named "trial"
    assert r.status_code == 409 and "say ORG/NAME" in r.json()["error"]["message"]
    out = cli(be, "trace", "nobody-at-all")
    assert out.returncode != 0 and "nobody-at-all" in out.stderr


# --- the rules: a misbehaving client and a well-behaved one each -------------------------------------------------


async def test_ignored_retry_after(be: Emulator) -> None:
    be.admin().post(
        "/_emulator/faults", json={"path": "/api/v1/trial-orgs", "status": 503, "retry_after": 5, "count": 1}
    )
    async with be.client() as c:
        hasty = Agent(be, c)
        reg = await hasty.register()
        down = await hasty.ask_trial()
        assert down.status_code == 503
        await hasty.get_trial()  # at once
    [found] = findings(be, reg)
    assert found["rule"] == "ignored-retry-after" and "Retry-After: 5" in found["detail"]
    calls = requests_of(be, reg=reg, path="/api/v1/trial-orgs")
    assert found["evidence"] == [calls[0]["seq"], calls[1]["seq"]]

    be.admin().post(
        "/_emulator/faults", json={"path": "/api/v1/trial-orgs", "status": 503, "retry_after": 5, "count": 1}
    )
    async with be.client() as c:
        patient = Agent(be, c)
        reg = await patient.register()
        assert (await patient.ask_trial()).status_code == 503
        be.advance(5)  # it waits as long as it was told (the emulator's clock: the test does not sleep)
        await patient.get_trial()
    assert rule_ids(be, reg) == []


async def test_idempotency_key_reused_with_another_body(be: Emulator) -> None:
    async with be.client() as c:
        sloppy = Agent(be, c)
        reg = await sloppy.register()
        first = await sloppy.ask({"query": "tables"}, "k-1")
        other = await sloppy.ask({"query": "views"}, "k-1")
        assert first.status_code == 200 and other.status_code == 422
    [found] = findings(be, reg)
    assert found["rule"] == "idempotency-key-reused" and "'k-1'" in found["detail"]

    async with be.client() as c:
        careful = Agent(be, c)
        reg = await careful.register()
        for _ in range(2):  # a retry: the same key with the same body is what the key is for
            r = await careful.ask({"query": "tables"}, "k-2")
            assert r.status_code == 200
        assert (await careful.ask({"query": "views"}, "k-3")).status_code == 200
    assert rule_ids(be, reg) == []


async def test_unsafe_retry_of_a_post_without_an_idempotency_key(be: Emulator) -> None:
    be.admin().post("/_emulator/faults", json={"path": "/ask", "method": "POST", "status": 500, "count": 1})
    async with be.client() as c:
        reckless = Agent(be, c)
        reg = await reckless.register()
        assert (await reckless.ask({"query": "tables"})).status_code == 500
        assert (await reckless.ask({"query": "tables"})).status_code == 200
    assert rule_ids(be, reg) == ["unsafe-retry"]

    be.admin().post("/_emulator/faults", json={"path": "/ask", "method": "POST", "status": 500, "count": 1})
    async with be.client() as c:
        safe = Agent(be, c)
        reg = await safe.register()
        assert (await safe.ask({"query": "tables"}, "retry-me")).status_code == 500
        assert (await safe.ask({"query": "tables"}, "retry-me")).status_code == 200
        # asking the same thing again after a success is a new question, not a retry
        assert (await safe.ask({"query": "tables"})).status_code == 200
        assert (await safe.ask({"query": "tables"})).status_code == 200
    assert rule_ids(be, reg) == []


async def test_second_trial(be: Emulator) -> None:
    async with be.client() as c:
        greedy = Agent(be, c)
        reg = await greedy.register()
        await greedy.get_trial()
        again = await greedy.ask_trial()
        assert again.status_code == 409
    [found] = findings(be, reg)
    assert found["rule"] == "second-trial" and "after 201" in found["detail"]

    async with be.client() as c:
        content = Agent(be, c)
        reg = await content.register()
        await content.get_trial()
        assert (await content.api("list_orgs")).status_code == 200
    assert rule_ids(be, reg) == []


async def test_expired_token_reuse_and_registering_again_instead_of_exchanging(be: Emulator) -> None:
    async with be.client() as c:
        stubborn = Agent(be, c)
        reg = await stubborn.register()
        be.advance("6m")  # access tokens live 5 minutes
        assert (await stubborn.ask_trial()).status_code == 401
        assert (await stubborn.ask_trial()).status_code == 401  # the same token again
        first = str(stubborn.reg["id"])
        new = await stubborn.register(discover=False)  # a new identity instead of exchanging the assertion
    assert rule_ids(be, first) == ["expired-token-reuse"]
    refusals = requests_of(be, reg=first, status=401)
    assert findings(be, first)[0]["evidence"] == [refusals[0]["seq"], refusals[1]["seq"]]
    found = findings(be, new)
    assert [f["rule"] for f in found] == ["re-registered-instead-of-exchange"]  # its address read discovery before
    assert found[0]["evidence"][0] == refusals[1]["seq"]

    async with be.client() as c:
        mannerly = Agent(be, c)
        reg = await mannerly.register()
        be.advance("6m")
        assert (await mannerly.ask_trial()).status_code == 401
        await mannerly.exchange()  # what a 401 asks for
        await mannerly.get_trial()
    assert rule_ids(be, reg) == []


async def test_registering_again_once_the_assertion_expired_is_not_accused(be: Emulator) -> None:
    """An assertion lives an hour (anonymous and ID-JAG registrations have no refresh token): after it, there is
    nothing to exchange, and registering again is what the agent must do."""
    async with be.client() as c:
        patient = Agent(be, c)
        await patient.register()
        first = str(patient.reg["id"])
        be.advance("61m")
        assert (await patient.ask_trial()).status_code == 401
        new = await patient.register(discover=False)
    assert "re-registered-instead-of-exchange" not in rule_ids(be, new)
    assert rule_ids(be, first) == []


async def test_registering_again_after_a_revocation_is_not_accused(be: Emulator) -> None:
    """A registration the service side revoked: its token's 401 asks for a new registration, not an exchange."""
    async with be.client() as c:
        revoked = Agent(be, c)
        await revoked.register()
        first = str(revoked.reg["id"])
        with be.admin() as a:
            assert a.post(f"/_emulator/registrations/{first}/revoke").status_code == 200
        assert (await revoked.ask_trial()).status_code == 401
        new = await revoked.register(discover=False)
    assert "re-registered-instead-of-exchange" not in rule_ids(be, new)


async def test_hard_coded_issuer_without_discovery(be: Emulator) -> None:
    async with be.client() as c:
        presumptuous = Agent(be, c)
        reg = await presumptuous.register(discover=False)
        await presumptuous.get_trial()
    [found] = findings(be, reg)
    assert found["rule"] == "hard-coded-url" and "discovery" in found["detail"]
    # the well-behaved agent of every other test reads discovery first and is not named


async def test_polling_too_fast(be: Emulator) -> None:
    receipt = {"receipts": [{"kind": "database", "resource_id": "main", "generation": 1}]}
    async with be.client() as c:
        impatient = Agent(be, c)
        reg = await impatient.register()
        await impatient.get_trial()
        for _ in range(4):
            await impatient.api("get_receipts", **receipt)
        await impatient.api("get_db", db="main")  # reads of a settled (or absent) database are not polls
        await impatient.api("get_db", db="main")
        await impatient.api("get_db", db="main")
    [found] = findings(be, reg)
    assert found["rule"] == "polling-too-fast" and "get_receipts" in found["detail"] and "4 times" in found["detail"]
    assert len(found["evidence"]) == 4

    async with be.client() as c:
        steady = Agent(be, c)
        reg = await steady.register()
        await steady.get_trial()
        for _ in range(4):
            await steady.api("get_receipts", **receipt)
            be.advance(5)  # the client's own cadence
    assert rule_ids(be, reg) == []


async def test_secret_in_url(be: Emulator) -> None:
    async with be.client() as c:
        leaky = Agent(be, c)
        reg = await leaky.register()
        await leaky.get_trial()
        await c.get("/ask", params={"q": "tables", "api_key": leaky.trial["api_key"]})
    [found] = findings(be, reg)
    assert found["rule"] == "secret-in-url" and "(api_key)" in found["detail"]
    leak = [ev for ev in be.journal("http.request") if ev["data"].get("secret_in_url")]
    assert leaky.trial["api_key"] not in str(leak)  # the name is kept, never the value

    async with be.client() as c:
        tidy = Agent(be, c)
        reg = await tidy.register()
        await tidy.get_trial()
        await c.get("/ask", params={"q": "what is an api_key"})
    assert rule_ids(be, reg) == []


# --- what the scorecard must not hold against anyone --------------------------------------------------------------


async def test_what_a_person_does_is_nobodys_and_a_claim_link_is_no_secret_in_url(be: Emulator) -> None:
    """A person on the agent's own machine (the same address) opens the claim link the identity provider issued,
    and sends a few bad requests with curl: none of it carries the agent's credentials, so none of it is the
    agent's. It is counted apart, as unattributed, and the link's token is not a secret put in a URL."""
    ip = next_ip()
    before = be.admin().get("/_emulator/report").json()["unattributed"] or {"requests": 0, "errors": 0}
    async with be.client(ip) as c, be.client(ip) as person:
        agent = Agent(be, c)
        reg = await agent.register()
        await agent.get_trial()
        started = await c.post(
            be.auth + "/agent/identity/claim", json={"type": "service_auth", "claim_token": agent.reg["claim"]["token"]}
        )
        assert started.status_code == 200, started.text
        page = await person.get(started.json()["attempt"]["verification_uri"])
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert (await person.get("/ask")).status_code == 400  # no query
        assert (await person.post(be.auth + "/oauth2/token", data={"grant_type": "nope"})).status_code == 400
        assert (await person.get("/ask", params={"q": "x", "token": "not-a-credential"})).status_code == 200
    [card] = be.admin().get("/_emulator/report", params={"agent": reg}).json()["agents"]
    assert card["findings"] == [] and card["errors"] == 0 and card["requests"] == 2  # the exchange, the trial
    claim_page = requests_of(be, path="/claim")[-1]
    assert claim_page["subject"] == ip and "secret_in_url" not in claim_page["data"]
    after = be.admin().get("/_emulator/report").json()["unattributed"]
    assert after["requests"] - before["requests"] == 8  # discovery x2, register, claim start, page, 3 by curl
    assert after["errors"] - before["errors"] == 2 and ip in after["addresses"]
    out = cli(be, "report")
    assert "unattributed (no credential; not judged)" in out.stdout


async def test_a_pending_sign_in_poll_is_a_wait_not_an_error(be: Emulator) -> None:
    """`pxt login` polls the sign-in until the person approves: `authorization_pending` is what it is told to
    wait on, not an error (the dashboard's log leaves it plain too)."""
    before = be.admin().get("/_emulator/report").json()["unattributed"] or {"requests": 0, "errors": 0}
    async with be.client() as c:
        started = (await c.post(be.auth + "/user_management/authorize/device", data={"client_id": CLIENT_ID})).json()
        grant = {
            "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
            "device_code": started["device_code"],
            "client_id": CLIENT_ID,
        }
        pending = await c.post(be.auth + "/user_management/authenticate", data=grant)
        assert pending.status_code == 400 and pending.json()["error"] == "authorization_pending"
    polled = requests_of(be, path="/user_management/authenticate")[-1]
    assert polled["data"]["status"] == 400 and polled["data"]["error_code"] == "authorization_pending"
    assert not failed(polled["data"]) and event_style(msgspec.convert(polled, EventView)) == ""
    after = be.admin().get("/_emulator/report").json()["unattributed"]
    assert (after["requests"] - before["requests"], after["errors"] - before["errors"]) == (2, 0)


async def submit(agent: Agent, generation: int) -> httpx.Response:
    """A `db update` of the agent's trial database (no archive: its size only), planned against `generation`."""
    return await agent.api(
        "submit_update",
        org=agent.trial["org"],
        db="main",
        service_mutations=[],
        blob=None,
        database_target=flow.DATABASE_TARGET,
        expected_generations={"database": generation, "services": []},
    )


async def test_an_update_is_judged_by_the_state_it_saw(be: Emulator) -> None:
    """An update that fails makes its database FAILED before its own answer (and its `http.request` event) is out:
    the rule judges it by the state before it, so it names nothing. An update sent to a stopped database is still
    named."""
    async with be.client() as c:
        unlucky = Agent(be, c)
        reg = await unlucky.register()
        trial = await unlucky.get_trial()
        r = be.admin().post(
            "/_emulator/faults", json={"hosted": "db_update_fails", "target": f"{trial['org']}:main", "message": "x"}
        )
        assert r.status_code == 201, r.text
        submitted = await submit(unlucky, 0)
        assert submitted.status_code == 200, submitted.text
    states = [ev for ev in be.journal("db.state") if ev["subject"] == f"{trial['org']}:main"]
    assert states and states[-1]["data"]["state"] == "FAILED"
    [update] = requests_of(be, op="submit_update", key=requests_of(be, op="submit_update")[-1]["data"]["key"])
    assert update["data"]["after"] < states[-1]["seq"] < update["seq"]  # caused by it, journaled before it
    assert "update-while-not-available" not in rule_ids(be, reg)

    async with be.client() as c:
        rash = Agent(be, c)
        reg = await rash.register()
        trial = await rash.get_trial()
        assert (await rash.api("stop_db", org=trial["org"], db="main")).status_code == 200
        for _ in range(200):  # the stop job settles by itself; read the journal, not the agent's polls
            if [ev for ev in be.journal("db.state") if ev["subject"] == f"{trial['org']}:main"]:
                break
            await asyncio.sleep(0.05)
        refused = await submit(rash, 1)
        assert refused.status_code == 400, refused.text
    [found] = findings(be, reg)
    assert found["rule"] == "update-while-not-available" and "while it was STOPPED" in found["detail"]


# --- the report ---------------------------------------------------------------------------------------------------


def test_report_lists_every_rule_once_and_the_reference_page_is_the_same(be: Emulator) -> None:
    report = be.admin().get("/_emulator/report").json()
    assert [r["id"] for r in report["rules"]] == [r.id for r in scorecard.RULES]
    assert len({r.id for r in scorecard.RULES}) == len(scorecard.RULES) == 10
    # the site's rules page (generated) lists each rule once, with the words the report gives it
    table = {row[0]: row[1] for row in table_rows(page("scorecard")) if row[0] != "Rule"}
    assert table == {r["id"]: r["why"] for r in report["rules"]}
    # the agents of the tests above: some broke rules, so the whole report is not clean and the CLI exits 1
    assert not report["clean"] and any(card["clean"] for card in report["agents"])
    out = cli(be, "report")
    assert out.returncode == 1 and "second-trial" in out.stdout
    json_out = cli(be, "report", "--json")
    assert json_out.returncode == 1 and '"rules"' in json_out.stdout


# --- run records ----------------------------------------------------------------------------------------------


async def _run(e: Emulator, greedy: bool) -> None:
    async with e.client() as c:
        agent = Agent(e, c)
        await agent.register()
        await agent.get_trial()
        assert (await agent.api("list_orgs")).status_code == 200
        await c.get("/ask", params={"q": "tables"})
        if greedy:
            assert (await agent.ask_trial()).status_code == 409


def test_a_record_is_the_run_without_secrets_and_two_runs_diff_by_what_the_agent_did(
    start_emulator: Any, tmp_path: Path
) -> None:
    import asyncio
    import json
    import stat

    e = start_emulator("--no-watch")
    saved: list[Path] = []
    for n, greedy in enumerate((False, False, True)):
        e.admin().post("/_emulator/reset", json={}).raise_for_status()  # each run starts from nothing
        asyncio.run(_run(e, greedy))
        path = tmp_path / f"run{n}.json"
        out = cli(e, "record", "save", str(path))
        assert out.returncode == 0, out.stderr
        saved.append(path)
    text = saved[0].read_text()
    body = json.loads(text)
    assert body["format"] == "pxt-emulator-record/1" and body["agent"] is None
    kinds = [ev["kind"] for ev in body["events"]]
    assert "http.request" in kinds and "trial.created" in kinds and "emulator.started" not in kinds
    assert "pxtk_" not in text.replace("pxtk_<redacted>", "") and '"eyJ' not in text
    assert stat.S_IMODE(saved[0].stat().st_mode) == 0o600  # private, as the state dir is

    same = cli(None, "record", "diff", str(saved[0]), str(saved[1]))  # other ids, addresses, instants: the same run
    assert same.returncode == 0 and "did the same things" in same.stdout, same.stdout
    changed = cli(None, "record", "diff", str(saved[1]), str(saved[2]))
    assert changed.returncode == 1
    added = [line for line in changed.stdout.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert len(added) == 1 and "path=/api/v1/trial-orgs" in added[0] and "status=409" in added[0], changed.stdout

    # one agent's part of a run, and files that are not records
    one = tmp_path / "one.json"
    trial = next(ev["subject"] for ev in json.loads(saved[2].read_text())["events"] if ev["kind"] == "trial.created")
    assert cli(e, "record", "save", str(one), "--agent", trial).returncode == 0
    mine = json.loads(one.read_text())
    assert mine["agent"].startswith("agent_reg_") and {ev["kind"] for ev in mine["events"]} >= {"trial.created"}
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    refused = cli(None, "record", "diff", str(bad), str(saved[0]))
    assert refused.returncode != 0 and "is not a record" in refused.stderr
