"""The fast tier: domain rules checked directly, in milliseconds, on a real SQLite store in a temporary directory
(no emulator process, no socket, no workload). The black-box suite checks the same rules through the origins; here
a rule that breaks fails in its own words first.

Run it alone with `python -m pytest -n 0 -q tests/test_rules.py`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from emulator.cloud.compat import MIN_CLIENT, refuse_old_client
from emulator.config import load_settings
from emulator.core.context import Core
from emulator.core.errors import ApiError
from emulator.core.events import Event
from emulator.core.payloads import DbLog, DbStateChanged, HttpRequest, Payload
from emulator.core.runlog import describe, line
from emulator.hosted import databases, lifecycle, orgs, receipts
from emulator.hosted.databases import DbChange
from emulator.hosted.records import ReceiptError
from emulator.hosted.states import (
    ACCEPTS_UPDATE,
    DB_MAY_FOLLOW,
    DB_SETTLING,
    DbState,
    IllegalTransition,
    Phase,
    ServiceState,
    sources,
)


@pytest.fixture
async def core(tmp_path: Path) -> AsyncIterator[Core]:
    opened = await Core.open(load_settings({"state_dir": tmp_path, "seed": 7}, {}))
    yield opened
    await opened.close()


async def an_org(core: Core, slug: str = "acme") -> str:
    async with core.store.transaction() as conn:
        return await orgs.insert(core, conn, slug, trial=True, now=core.clock.now())


# --- states -------------------------------------------------------------------------------------------------


def test_every_state_has_its_sources_and_staying_is_always_allowed() -> None:
    assert set(DB_MAY_FOLLOW) == set(DbState)
    for state in DbState:
        assert state.value in sources(state)
    assert sources(DbState.STOPPED) == ["STOPPED", "STOPPING"]
    assert "STOPPED" not in sources(ServiceState.AVAILABLE)
    assert ACCEPTS_UPDATE == {DbState.AVAILABLE, DbState.PROVISIONING} and not ACCEPTS_UPDATE & {DbState.UPDATING}


async def test_a_write_moves_a_database_only_to_a_state_it_may_follow(core: Core) -> None:
    org_id = await an_org(core)
    now = core.clock.now()
    row = await databases.get(core.store, org_id, "main")
    assert row is not None and row.state == DbState.AVAILABLE  # a trial's main starts on its base resources
    with pytest.raises(IllegalTransition, match="database main: AVAILABLE may not become STOPPED"):
        await databases.update(core.store, org_id, "main", now, DbChange(state=DbState.STOPPED))
    await databases.update(core.store, org_id, "main", now, DbChange(state=DbState.STOPPING))
    await databases.update(core.store, org_id, "main", now, DbChange(state=DbState.STOPPED, failure_reason=None))
    row = await databases.get(core.store, org_id, "main")
    assert row is not None and row.state == DbState.STOPPED and row.failure_reason is None
    # a write that names no state changes nothing else's rule, and a missing row is no transition
    await databases.update(core.store, org_id, "main", now, DbChange(restarts=2))
    await databases.update(core.store, org_id, "gone", now, DbChange(state=DbState.AVAILABLE))


# --- verbs --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "verb", "status", "says"),
    [
        (DbState.UPDATING, "stop", 409, "database main is UPDATING; wait for it to settle"),
        (DbState.AVAILABLE, "start", 400, "database main is AVAILABLE, not STOPPED"),
        (DbState.STOPPED, "stop", 400, "database main is STOPPED; start it with pxt db start"),
        (DbState.STOPPED, "restart", 400, "database main is STOPPED; start it with pxt db start"),
    ],
)
def test_a_verb_is_refused_in_a_state_that_does_not_take_it(state: DbState, verb: str, status: int, says: str) -> None:
    with pytest.raises(ApiError) as refused:
        lifecycle.check("database", "database main", state, verb)
    assert (refused.value.status, refused.value.message) == (status, says)


def test_delete_takes_any_state_even_a_settling_one() -> None:
    def refusal(state: DbState, verb: str) -> int | None:
        try:
            lifecycle.check("database", "database main", state, verb)
        except ApiError as e:
            return e.status
        return None

    for state in DB_SETTLING:
        assert refusal(state, "stop") == 409  # every other verb waits for a settling database...
        assert refusal(state, "delete") is None  # ...a delete interrupts it
    for state in (DbState.STOPPED, DbState.FAILED, DbState.AVAILABLE):
        assert refusal(state, "delete") is None


def test_a_receipt_moves_on_keeping_what_its_job_did_not_say() -> None:
    first = receipts.new("database", "db_1", 2, "main", phase=Phase.PENDING, waiting_for="environment", attempt="a")
    failed = receipts.settled(first, Phase.FAILED, None, error=receipts.failure("no"))
    assert (failed.phase, failed.waiting_for, failed.outcome, failed.error) == (
        Phase.FAILED,
        None,
        None,
        ReceiptError("no", retryable=False, attempts=1, dependency=False),
    )
    assert first.phase == Phase.PENDING  # a new receipt, the old one as it was


# --- clients and the log ------------------------------------------------------------------------------------


def test_an_old_clients_operation_is_told_to_upgrade_and_a_current_one_passes() -> None:
    with pytest.raises(ApiError) as refused:
        refuse_old_client({"operation_type": "update_db", "fingerprint": {"pixeltable_version": "0.7.10"}})
    assert refused.value.code == "client_too_old" and f">= {MIN_CLIENT}" in refused.value.message
    refuse_old_client({"operation_type": "submit_update", "org": "acme", "db": "main"})


def test_each_event_is_a_log_line_at_its_level() -> None:
    def ev(payload: Payload) -> Event:
        return Event(1, 0.0, payload.KIND, "acme:main", payload)

    call = HttpRequest(origin="api", method="POST", path="/", status=500, ms=3.0, rt=0.0, after=0, op="get_db")
    assert line(ev(call)) == (logging.ERROR, "api  POST / get_db -> 500 (3.0 ms) from acme:main")
    assert line(ev(DbStateChanged(state="FAILED", error="boom"))) == (
        logging.ERROR,
        "db.state [acme:main] state=FAILED error=boom",
    )
    assert line(ev(DbLog(db="main", service=None, line="x"))) is None
    assert describe("trial.expired", "agent-1", {"expired_at": 0, "rt": 5.0}) == (
        "trial.expired [agent-1] expired_at=1970-01-01T00:00:00Z"
    )
