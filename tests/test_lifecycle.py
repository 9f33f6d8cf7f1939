"""Trials on the emulator's clock: an unclaimed trial is deleted after 48 hours, a claimed one stays."""

from __future__ import annotations

import sqlite3

from tests import agent_flow as flow
from tests.conftest import Emulator


async def test_unclaimed_trials_expire_and_claimed_ones_stay(start_emulator) -> None:
    e: Emulator = start_emulator("--no-watch", "--freeze-clock", "2026-06-01T00:00:00Z")
    async with e.client() as c, e.client() as d:
        _, _, doomed = await flow.new_trial(c, e)
        _, _, kept = await flow.new_trial(d, e)
        r = await c.post(e.url + "/_emulator/trials/claim", json={"org": kept["org"], "email": "keeper@example.org"})
        assert r.json() == {"org": kept["org"], "email": "keeper@example.org", "state": "claimed"}

        e.advance("47h59m59s")
        assert (await flow.list_orgs(c, e, doomed["api_key"])).status_code == 200
        left = {t["org"]: t["seconds_left"] for t in (await c.get(e.url + "/_emulator/trials")).json()["trials"]}
        assert left[doomed["org"]] == 1

        e.advance("1s")  # the move returns after the due job ran
        gone = await flow.list_orgs(c, e, doomed["api_key"])
        assert gone.status_code == 401 and gone.text.startswith("Unauthorized : ")
        assert (await flow.list_orgs(d, e, kept["api_key"])).json()["orgs"][0]["org"] == kept["org"]
        trials = {t["org"] for t in (await c.get(e.url + "/_emulator/trials")).json()["trials"]}
        assert trials == {kept["org"]}
        assert (await c.get(doomed["claim_url"])).status_code == 404

        e.advance("30d")
        assert (await flow.list_orgs(d, e, kept["api_key"])).status_code == 200

    # Everything of the deleted trial is gone from the store.
    db = sqlite3.connect(e.state_dir / "emulator.sqlite3")
    for table in ("orgs", "databases", "api_keys"):
        rows = db.execute(
            f"SELECT COUNT(*) FROM {table} WHERE org_id = ?"
            if table != "orgs"
            else "SELECT COUNT(*) FROM orgs WHERE id = ?",
            (doomed["org_id"],),
        ).fetchone()
        assert rows == (0,), table
    kinds = [(ev["kind"], ev["subject"]) for ev in e.journal("trial.")]
    assert ("trial.created", doomed["org"]) in kinds and ("trial.claimed", kept["org"]) in kinds
    assert ("trial.expired", doomed["org"]) in kinds and ("trial.expired", kept["org"]) not in kinds


async def test_a_trial_that_expired_while_the_emulator_was_down_is_deleted_at_start(start_emulator, tmp_path) -> None:
    state = tmp_path / "down"
    e: Emulator = start_emulator("--no-watch", state_dir=state)
    async with e.client() as c:
        _, _, trial = await flow.new_trial(c, e)
        await c.post(e.url + "/_emulator/clock", json={"freeze": True})
    e.stop()
    # Restarted with the clock already past the trial's 48 hours.
    e2: Emulator = start_emulator("--no-watch", "--freeze-clock", "2099-01-01T00:00:00Z", state_dir=state)
    async with e2.client() as c:
        assert (await c.get(e2.url + "/_emulator/trials")).json()["trials"] == []
        assert (await flow.list_orgs(c, e2, trial["api_key"])).status_code == 401
