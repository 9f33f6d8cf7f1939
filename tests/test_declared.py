"""A declared starting state: `POST /_emulator/apply`, `emulator apply`, `up --apply` with `reset --to start`, and
`exec --apply`, against real emulator processes. The world is fixtures/world.toml; time is moved with the clock."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests import agent_flow as flow
from tests.conftest import Emulator

WORLD = Path(__file__).parent.parent / "fixtures" / "world.toml"
ACME_KEY = "pxtk_acme0123456789abcdef0123456789"
DEMO_KEY = "pxtk_demo0123456789abcdef0123456789"
PARTS = ("clock", "orgs", "users", "registrations", "api_keys", "secrets")


def apply(e: Emulator, text: str, name: str = "world.toml") -> httpx.Response:
    with e.admin() as admin:
        return admin.post(
            "/_emulator/apply", params={"name": name}, content=text, headers={"Content-Type": "application/toml"}
        )


def cli(e: Emulator | None, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    where = ["--state-dir", str(e.state_dir)] if e is not None else []
    return subprocess.run(
        [sys.executable, "-m", "emulator", *args, *where], capture_output=True, text=True, timeout=timeout
    )


def orgs_of(e: Emulator) -> dict[str, dict[str, Any]]:
    with e.admin() as admin:
        return {o["org"]: o for o in admin.get("/_emulator/orgs").json()["orgs"]}


def registrations_of(e: Emulator) -> dict[str, dict[str, Any]]:
    with e.admin() as admin:
        return {r["id"]: r for r in admin.get("/_emulator/registrations").json()["registrations"]}


def clock_of(e: Emulator) -> dict[str, Any]:
    with e.admin() as admin:
        return admin.get("/_emulator/clock").json()


async def op(c: httpx.AsyncClient, e: Emulator, key: str, /, **body: object) -> httpx.Response:
    return await c.post(e.api, json=body, headers={"X-api-key": key})


def world_of(e: Emulator) -> str:
    """What a refused file must leave as it was: organizations, registrations and the clock."""
    return json.dumps([orgs_of(e), registrations_of(e), clock_of(e)["iso"]], sort_keys=True)


async def test_apply_makes_the_declared_world(start_emulator: Callable[..., Emulator]) -> None:
    e = start_emulator("--no-watch")
    r = apply(e, WORLD.read_text())
    assert r.status_code == 200, r.text
    done = r.json()
    assert done["unchanged"] is False and done["file"] == "world.toml" and done["clock"] == "2026-01-01T00:00:00Z"
    created = {part: done["applied"][part]["created"] for part in PARTS}
    assert created == {"clock": 0, "orgs": 3, "users": 1, "registrations": 3, "api_keys": 2, "secrets": 2}
    assert done["applied"]["clock"] == {"created": 0, "updated": 1, "unchanged": 0}

    # The clock stands at the declared instant.
    clock = clock_of(e)
    assert clock["iso"] == "2026-01-01T00:00:00Z" and clock["frozen"] is True

    orgs = orgs_of(e)
    assert set(orgs) == {"acme", "agent-demo", "agent-kept"}
    acme, demo, kept = orgs["acme"], orgs["agent-demo"], orgs["agent-kept"]
    assert (acme["trial"], acme["state"], acme["admins"], acme["api_keys"]) == (
        False,
        "active",
        ["ann@example.com"],
        ["ci"],
    )
    assert [d["db"] for d in acme["databases"]] == ["main"]
    assert (demo["trial"], demo["state"], demo["expires_at"]) == (True, "unclaimed", "2026-01-02T12:00:00Z")
    assert demo["registration"] == "agent_reg_demo" and demo["api_keys"] == ["trial"]
    assert (kept["state"], kept["expires_at"], kept["admins"]) == ("claimed", None, ["ann@example.com"])

    regs = registrations_of(e)
    assert (regs["agent_reg_demo"]["status"], regs["agent_reg_demo"]["trial"]) == ("registered", "agent-demo")
    assert (regs["agent_reg_kept"]["status"], regs["agent_reg_kept"]["claimed_email"]) == ("claimed", "ann@example.com")

    async with e.client() as c:
        # The fixed secrets are real keys of the control plane, each in its own organization.
        mine = await flow.list_orgs(c, e, ACME_KEY)
        assert mine.status_code == 200 and [o["org"] for o in mine.json()["orgs"]] == ["acme"], mine.text
        assert [o["org"] for o in (await flow.list_orgs(c, e, DEMO_KEY)).json()["orgs"]] == ["agent-demo"]
        listed = (await op(c, e, ACME_KEY, operation_type="list_all_secrets")).json()["secrets"]
        assert sorted((s["key"], s["db"]) for s in listed) == [("FEATURE_FLAG", "main"), ("OPENAI_API_KEY", None)]
        # The trial's claim page and the claimed registration's refresh token work.
        assert (await c.get(e.url + "/claim/tcl_demo0123456789abcdef")).status_code == 200
        refreshed = await c.post(
            e.auth + "/agent/identity", json={"type": "refresh", "refresh_token": "art_kept0123456789abcdef"}
        )
        assert refreshed.status_code == 200, refreshed.text
        token = await flow.exchange(c, e, refreshed.json()["identity"]["assertion"])
        assert token.status_code == 200 and "account:write" in token.json()["scope"]
        # The declared ID-JAG registration linked Ann's upstream identity: her next ID-JAG registers at once.
        assert regs["agent_reg_jag"]["type"] == "identity_assertion" and regs["agent_reg_jag"]["status"] == "claimed"
        await c.post(e.url + "/_emulator/switches", json={"identity_assertion_registration": True})
        jag = await c.post(e.url + "/_emulator/id-jag", json={"email": "ann@example.com", "sub": "ann-at-upstream"})
        body = {"type": "identity_assertion", "assertion_type": jag.json()["assertion_type"]}
        linked = await c.post(e.auth + "/agent/identity", json={**body, "assertion": jag.json()["id_jag"]})
        assert linked.status_code == 200 and "claim" not in linked.json(), linked.text
        # The anonymous registration can start its claim ceremony with the declared claim token.
        started = await c.post(
            e.auth + "/agent/identity/claim",
            json={"type": "service_auth", "claim_token": "clm_demo0123456789abcdef", "login_hint": "bo@example.com"},
        )
        assert started.status_code == 200 and started.json()["id"] == "agent_reg_demo", started.text

        # Secrets are stored as hashes and ciphertext only.
        with sqlite3.connect(f"file:{e.state_dir / 'emulator.sqlite3'}?mode=ro", uri=True) as db:
            stored = json.dumps([list(map(str, row)) for row in db.execute("SELECT key_hash FROM api_keys")])
            values = [bytes(row[0]) for row in db.execute("SELECT value FROM secrets")]
        assert ACME_KEY not in stored and DEMO_KEY not in stored
        assert all(b"sk-test" not in v and b"on" != v for v in values)

        [event] = e.journal(kinds="state.applied")
        assert event["subject"] == "world.toml" and event["data"]["counts"]["orgs"]["created"] == 3

        # Declared time is emulator time: 36 hours on, the unclaimed trial is gone with its key; the rest stays.
        e.advance("36h1s")
        assert set(orgs_of(e)) == {"acme", "agent-kept"}
        assert (await flow.list_orgs(c, e, DEMO_KEY)).status_code == 401
        assert (await flow.list_orgs(c, e, ACME_KEY)).status_code == 200


async def test_applying_twice_changes_nothing_and_puts_back_what_a_test_changed(
    start_emulator: Callable[..., Emulator],
) -> None:
    e = start_emulator("--no-watch")
    assert apply(e, WORLD.read_text()).status_code == 200
    before = world_of(e)
    moved = len(e.journal(kinds="clock.moved"))

    again = apply(e, WORLD.read_text()).json()
    assert again["unchanged"] is True
    assert all(again["applied"][p]["created"] == again["applied"][p]["updated"] == 0 for p in PARTS)
    assert again["applied"]["orgs"]["unchanged"] == 3 and again["applied"]["secrets"]["unchanged"] == 2
    assert world_of(e) == before and len(e.journal(kinds="clock.moved")) == moved

    # A test changes the world: a secret, a key's grants, the clock, a claim; applying puts the declared one back.
    async with e.client() as c:
        assert (
            await op(c, e, ACME_KEY, operation_type="set_secret", key="OPENAI_API_KEY", value="x")
        ).status_code == 200
        assert (await op(c, e, ACME_KEY, operation_type="delete_secret", key="OPENAI_API_KEY")).status_code == 200
        e.advance("2h")
        with e.admin() as admin:
            claimed = admin.post("/_emulator/trials/claim", json={"org": "agent-demo", "email": "bo@example.com"})
            assert claimed.status_code == 200, claimed.text
        back = apply(e, WORLD.read_text()).json()
        assert back["unchanged"] is False
        assert back["applied"]["secrets"] == {"created": 1, "updated": 0, "unchanged": 1}
        assert back["applied"]["orgs"]["updated"] == 1 and back["applied"]["registrations"]["updated"] == 1
        assert back["applied"]["clock"]["updated"] == 1
        demo = orgs_of(e)["agent-demo"]
        assert (demo["state"], demo["expires_at"]) == ("unclaimed", "2026-01-02T12:00:00Z")
        assert registrations_of(e)["agent_reg_demo"]["status"] == "registered"
        assert clock_of(e)["iso"] == "2026-01-01T00:00:00Z"
        assert apply(e, WORLD.read_text()).json()["unchanged"] is True

        # Without a declared clock, on a running one, times count from the apply that made the thing: still idempotent.
        running = '[[orgs]]\nname = "agent-run"\ntrial = true\ntime_left = "1h"\n'
        with e.admin() as admin:
            assert admin.post("/_emulator/clock", json={"freeze": False}).status_code == 200
        first = apply(e, running).json()
        assert first["applied"]["orgs"]["created"] == 1 and first["applied"]["clock"] == {
            "created": 0,
            "updated": 0,
            "unchanged": 0,
        }
        expires = orgs_of(e)["agent-run"]["expires_ts"]
        assert apply(e, running).json()["unchanged"] is True
        assert orgs_of(e)["agent-run"]["expires_ts"] == expires


async def test_an_invalid_file_is_refused_whole_with_its_line(start_emulator: Callable[..., Emulator]) -> None:
    e = start_emulator("--no-watch")
    assert apply(e, WORLD.read_text()).status_code == 200
    before = world_of(e)
    applied = len(e.journal(kinds="state.applied"))
    good = '[[orgs]]\nname = "new-org"\n\n'
    cases = {
        # TOML syntax: tomllib's line
        'clock = "2026-02-01T00:00:00Z"\n[[orgs]]\nname = "new-org"\ntrial = \n': ("bad.toml:4: Invalid value",),
        # an unknown key, on its line, with the keys there are
        good + '[[orgs]]\nname = "other"\ncolour = "red"\n': (
            "bad.toml:6: orgs[1].colour: unknown key; [[orgs]] has name, trial",
        ),
        # a wrongly typed value
        good + '[[users]]\nemail = "x@example.com"\norgs = "new-org"\n': (
            "bad.toml:6: users[0].orgs: Expected `array`",
        ),
        # a key of an unknown organization (the organization declared first is not written either)
        good + '[[api_keys]]\norg = "nope"\nname = "ci"\nsecret = "pxtk_0123456789abcdef0123"\n': (
            "bad.toml:5: api_keys[0].org: no organization 'nope'",
        ),
        # the rules of the control plane: a key's secret shape, an organization's name
        good + '[[api_keys]]\norg = "new-org"\nname = "ci"\nsecret = "sk-live-123"\n': (
            "bad.toml:7: api_keys[0].secret: a key's secret is pxtk_",
        ),
        '[[orgs]]\nname = "Bad_Name"\n': ("bad.toml:2: orgs[0].name: 'Bad_Name' is not a valid organization name",),
        # a rule that needs the store: this secret is already another key's (found inside the transaction)
        good + f'[[api_keys]]\norg = "new-org"\nname = "ci"\nsecret = "{ACME_KEY}"\n': (
            "bad.toml:7: api_keys[0].secret: this secret is already the key ci of acme",
        ),
        # a trial cannot become a non-trial organization
        'clock = "2027-01-01T00:00:00Z"\n[[orgs]]\nname = "agent-demo"\n': (
            "bad.toml:3: orgs[0].name: the organization agent-demo exists and is a trial",
        ),
        '[[orgs]]\nname = "acme"\ntime_left = "2d"\n': ("bad.toml:3: orgs[0].time_left: only a trial has time_left",),
    }
    for text, (fragment,) in cases.items():
        r = apply(e, text, "bad.toml")
        assert r.status_code == 400, (text, r.text)
        message = r.json()["error"]["message"]
        assert message.startswith(fragment), (text, message)
        assert ACME_KEY not in message
    assert world_of(e) == before and len(e.journal(kinds="state.applied")) == applied

    with e.admin() as admin:
        wrong_type = admin.post("/_emulator/apply", content=good, headers={"Content-Type": "text/plain"})
        assert wrong_type.status_code == 415 and "application/toml" in wrong_type.text
        binary = admin.post("/_emulator/apply", content=b"\xff\xfe", headers={"Content-Type": "application/toml"})
        assert binary.status_code == 400 and "body: not UTF-8" in binary.json()["error"]["message"]


async def test_up_apply_then_reset_to_start_brings_the_declared_world_back(
    start_emulator: Callable[..., Emulator], tmp_path: Path
) -> None:
    e = start_emulator("--no-watch", "--apply", str(WORLD))
    assert clock_of(e)["iso"] == "2026-01-01T00:00:00Z"
    assert set(orgs_of(e)) == {"acme", "agent-demo", "agent-kept"}
    async with e.client() as c:
        assert (await flow.list_orgs(c, e, DEMO_KEY)).status_code == 200
        e.advance("40h")  # the trial expires
        assert (await op(c, e, ACME_KEY, operation_type="delete_key", name="ci")).status_code == 200
        assert set(orgs_of(e)) == {"acme", "agent-kept"}

        back = cli(e, "reset", "--to", "start")
        assert back.returncode == 0, back.stderr
        assert clock_of(e)["iso"] == "2026-01-01T00:00:00Z"
        assert orgs_of(e)["agent-demo"]["expires_at"] == "2026-01-02T12:00:00Z"
        assert (await flow.list_orgs(c, e, ACME_KEY)).status_code == 200
        assert (await flow.list_orgs(c, e, DEMO_KEY)).status_code == 200

    # A file that holds only the clock is a start too.
    only_clock = tmp_path / "clock.toml"
    only_clock.write_text('clock = "2030-06-01T00:00:00Z"\n')
    f = start_emulator("--no-watch", "--apply", str(only_clock))
    f.advance("5h")
    assert cli(f, "reset", "--to", "start").returncode == 0
    assert clock_of(f)["iso"] == "2030-06-01T00:00:00Z"

    # A bad file stops the start with its line.
    bad = tmp_path / "bad.toml"
    bad.write_text('[[orgs]]\nname = "a"\nnope = 1\n')
    ports = [f"--{n}-port=0" for n in ("site", "auth", "api", "tunnel", "s3")]
    up = [sys.executable, "-m", "emulator", "up", "--state-dir", str(tmp_path / "bad"), "--runtime", "process"]
    run = await asyncio.to_thread(
        subprocess.run,
        [*up, *ports, "--no-watch", "--apply", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1 and f"--apply: {bad}:3: orgs[0].nope: unknown key" in run.stderr, run.stderr


async def test_the_apply_command_and_exec_apply(start_emulator: Callable[..., Emulator], tmp_path: Path) -> None:
    e = start_emulator("--no-watch")
    first = cli(e, "apply", str(WORLD))
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith(f"applied {WORLD}: ") and "orgs 3 created" in first.stdout
    assert first.stdout.rstrip().endswith("the clock reads 2026-01-01T00:00:00Z")
    again = cli(e, "apply", str(WORLD))
    assert again.returncode == 0 and again.stdout.startswith(f"unchanged {WORLD}: "), again.stdout
    as_json = json.loads(cli(e, "apply", str(WORLD), "--json").stdout)
    assert as_json["unchanged"] is True and as_json["applied"]["api_keys"]["unchanged"] == 2

    bad = tmp_path / "bad.toml"
    bad.write_text('[[secrets]]\norg = "acme"\nkey = "PIXELTABLE_TOKEN"\nvalue = "v"\n')
    refused = cli(e, "apply", str(bad))
    assert refused.returncode != 0 and f"emulator: {bad}:3: secrets[0].key: " in refused.stderr, refused.stderr
    assert "reserved" in refused.stderr
    missing = cli(e, "apply", str(tmp_path / "none.toml"))
    assert missing.returncode != 0 and "no such file" in missing.stderr

    probe = (
        "import json, os, sys, urllib.request\n"
        "site = os.environ['EMULATOR_URL']\n"
        "orgs = json.load(urllib.request.urlopen(site + '/_emulator/orgs'))['orgs']\n"
        "sys.exit(7 if sorted(o['org'] for o in orgs) == ['acme', 'agent-demo', 'agent-kept'] else 1)\n"
    )
    run = cli(None, "exec", "--runtime", "process", "--apply", str(WORLD), "--", sys.executable, "-c", probe)
    assert run.returncode == 7, run.stderr
