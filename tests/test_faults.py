"""Faults on purpose: rules by origin, path, method and operation_type that answer an error in the origin's own
format (with Retry-After), add latency or drop the connection, on the Nth call, N times or with a seeded
probability; each firing is a journal event; bad rules are refused whole; reset and `fault clear` end them.
Hosted faults (a failing db update, a killed database) run with the real client in test_pxt_cloud."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from tests import agent_flow as flow
from tests.conftest import Emulator

FROZEN = "2030-01-01T00:00:00Z"


@pytest.fixture(scope="module")
def fe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    e = Emulator(tmp_path_factory.mktemp("faults"), ["--no-watch", "--freeze-clock", FROZEN]).start()
    yield e
    e.stop()


@pytest.fixture(autouse=True)
def cleared(fe: Emulator) -> Iterator[None]:
    yield
    fe.admin().delete("/_emulator/faults").raise_for_status()


def add(e: Emulator, **rule: object) -> dict:
    r = e.admin().post("/_emulator/faults", json=rule)
    assert r.status_code == 201, r.text
    return r.json()


def fired(e: Emulator, rule: str) -> list[dict]:
    return [ev for ev in e.journal("fault.fired") if ev["data"]["rule"] == rule]


def cli(e: Emulator, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "emulator", "fault", *args, "--state-dir", str(e.state_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_ask_answers_503_with_retry_after_twice_then_normally(fe: Emulator) -> None:
    rule = add(fe, path="/ask", status=503, retry_after=5, count=2, message="down for a test")
    assert rule["id"] and rule["fired"] == 0
    async with fe.client() as c:
        for _ in range(2):
            r = await c.get("/ask", params={"q": "tables"})
            assert r.status_code == 503 and r.headers["retry-after"] == "5"
            error = r.json()["error"]  # the site's own error format
            assert error["status"] == 503 and error["retryable"] is True and error["message"] == "down for a test"
        assert (await c.get("/ask", params={"q": "tables"})).status_code == 200
    assert len(fired(fe, rule["id"])) == 2
    assert fe.admin().get("/_emulator/faults").json()["rules"] == []  # spent rules go


async def test_nth_fires_from_the_nth_matching_call_and_method_narrows(fe: Emulator) -> None:
    rule = add(fe, origin="site", path="/health", method="get", status=500, nth=2, count=1)
    assert rule["method"] == "GET"
    async with fe.client() as c:
        assert (await c.post("/health")).status_code != 500  # another method: not counted
        statuses = [(await c.get("/health")).status_code for _ in range(3)]
    assert statuses == [200, 500, 200]


async def test_a_seeded_probability_repeats_the_same_firings(fe: Emulator) -> None:
    async def run() -> list[int]:
        rule = add(fe, path="/health", status=502, probability=0.5, seed=7)
        async with fe.client() as c:
            statuses = [(await c.get("/health")).status_code for _ in range(24)]
        fe.admin().delete(f"/_emulator/faults/{rule['id']}").raise_for_status()
        return statuses

    first, second = await run(), await run()
    assert first == second
    assert 200 in first and 502 in first


async def test_latency_delays_but_answers(fe: Emulator) -> None:
    rule = add(fe, path="/health", latency_ms=30, count=1)
    async with fe.client() as c:
        assert (await c.get("/health")).status_code == 200
    (event,) = fired(fe, rule["id"])
    assert event["data"]["effect"] == "latency 30 ms" and event["data"]["origin"] == "site"


async def test_drop_closes_the_connection_without_an_answer(fe: Emulator) -> None:
    add(fe, path="/ask", drop=True, count=1)
    async with fe.client() as c:
        with pytest.raises(httpx.TransportError):
            await c.get("/ask", params={"q": "tables"})
        assert (await c.get("/ask", params={"q": "tables"})).status_code == 200  # and the emulator serves on
    assert "Traceback" not in fe.log()


async def test_the_identity_provider_answers_in_its_own_format(fe: Emulator) -> None:
    """Its registration format on its own paths, and OAuth's on the OAuth endpoints, as their routes answer."""
    add(fe, origin="auth", path="/oauth2/*", status=429, retry_after=3)
    add(fe, origin="auth", path="/agent/identity", status=429, retry_after=3)
    async with fe.client() as c:
        r = await c.post(fe.auth + "/oauth2/token", data={"grant_type": "client_credentials"})
        assert r.status_code == 429 and r.headers["retry-after"] == "3"
        body = r.json()
        assert (
            body["error"] == "rate_limited"
            and body["error_description"]
            and set(body)
            == {
                "error",
                "error_description",
            }
        )
        r = await c.post(fe.auth + "/agent/identity", json={"type": "anonymous"})
        assert r.status_code == 429 and r.headers["retry-after"] == "3"
        body = r.json()
        assert body["code"] == "rate_limited" and body["error"] == "rate_limited" and "message" in body


async def test_an_operation_type_fails_in_the_control_planes_format(fe: Emulator) -> None:
    rule = add(fe, operation_type="list_orgs", status=503, retry_after=2)
    async with fe.client() as c:
        _, _, trial = await flow.new_trial(c, fe)
        r = await flow.list_orgs(c, fe, trial["api_key"])
        assert r.status_code == 503 and r.headers["retry-after"] == "2"
        assert r.text.startswith("Service Unavailable : injected fault")  # the control plane's plain text
        # another operation is untouched, and so is the control plane's gate (the rule is the operation's)
        other = await c.post(fe.api, json={"operation_type": "list_keys"}, headers={"X-api-key": trial["api_key"]})
        assert other.status_code == 200
    (event,) = fired(fe, rule["id"])
    assert event["data"]["operation_type"] == "list_orgs"


@pytest.mark.parametrize(
    ("rule", "says"),
    [
        ({}, "needs something to match"),
        ({"path": "/ask"}, "needs an effect"),
        ({"origin": "moon", "status": 500}, "unknown origin 'moon'; one of site, auth, api, gateway, tunnel"),
        ({"path": "/ask", "status": 200}, "400 to 599"),
        ({"path": "/ask", "status": 500, "retry_after": 5}, "retry_after"),
        ({"path": "ask", "status": 500}, "must start with /"),
        ({"path": "/_emulator/reset", "status": 500}, "never faulted"),
        ({"operation_type": "make_coffee", "status": 500}, "unknown operation_type 'make_coffee'"),
        ({"path": "/ask", "drop": True, "status": 500}, "exclude each other"),
        ({"path": "/ask", "status": 500, "probability": 0}, "probability"),
        ({"path": "/ask", "status": 500, "seed": 3}, "seed goes with probability"),
        ({"path": "/ask", "status": 500, "nth": 0}, "nth"),
        ({"hosted": "kill_database"}, "needs a target"),
        ({"hosted": "flood"}, "unknown hosted fault"),
        ({"hosted": "db_update_fails", "status": 500}, "not status"),
        ({"path": "/ask", "status": 500, "colour": "red"}, "colour"),
        ({"hosted": "kill_database", "target": "nobody:main"}, "no organization"),
    ],
)
def test_a_bad_rule_is_refused_and_nothing_is_stored(fe: Emulator, rule: dict, says: str) -> None:
    r = fe.admin().post("/_emulator/faults", json=rule)
    assert r.status_code in (400, 404), r.text
    assert says in r.json()["error"]["message"]
    assert fe.admin().get("/_emulator/faults").json()["rules"] == []


def test_the_cli_adds_lists_and_clears_rules(fe: Emulator) -> None:
    added = cli(fe, "add", "--path", "/ask", "--status", "503", "--retry-after", "5", "--count", "2")
    assert added.returncode == 0, added.stderr
    rule_id = added.stdout.split()[0]
    assert "/ask → 503 Retry-After 5" in added.stdout
    listed = cli(fe, "list")
    assert rule_id in listed.stdout and "matched 0, fired 0" in listed.stdout
    bad = cli(fe, "add", "--path", "/ask")
    assert bad.returncode != 0 and "needs an effect" in bad.stderr
    assert cli(fe, "clear", "f999").returncode != 0
    assert cli(fe, "clear").stdout.strip() == "cleared 1 rule"
    assert "no fault rules" in cli(fe, "list").stdout


async def test_a_reset_clears_every_rule(fe: Emulator) -> None:
    add(fe, path="/health", status=500)
    fe.admin().post("/_emulator/reset", json={}).raise_for_status()
    assert fe.admin().get("/_emulator/faults").json()["rules"] == []
    async with fe.client() as c:
        assert (await c.get("/health")).status_code == 200
