"""The sample agent against the emulator, with nothing but the pytest plugin's `emulator` fixture: each test
starts from an empty emulator, moves its clock instead of sleeping, plays the person, and breaks things on purpose.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agent import AgentError, Trial, TrialAgent

from emulator.testkit import Testkit


def test_gets_a_trial_and_uses_its_key(emulator: Testkit) -> None:
    agent = TrialAgent(emulator.url)
    trial = agent.ensure_trial()
    assert agent.list_orgs() == [trial.org]
    assert trial.expires_at == "2026-01-03T00:00:00Z"  # 48 hours on the frozen clock
    registered = emulator.assert_event("idp.registered", type="anonymous")
    emulator.assert_event("trial.created", subject=trial.org, registration=registered.subject)
    # the agent's trace holds what carried its credentials: from its registration to its last call
    steps = [s.what for s in emulator.trace(trial.org).steps]
    assert steps[0].startswith("idp.registered") and steps[-1] == "POST / list_orgs"
    emulator.assert_clean()


def test_each_test_starts_from_an_empty_emulator(emulator: Testkit) -> None:
    assert emulator.call("GET", "/_emulator/trials")["trials"] == []
    assert emulator.events("trial") == []
    assert emulator.clock.now().isoformat() == "2026-01-01T00:00:00+00:00"


def test_exchanges_its_assertion_again_when_the_token_expires(emulator: Testkit) -> None:
    agent = TrialAgent(emulator.url)
    agent.token()
    emulator.clock.advance("6m")  # access tokens live about 5 minutes
    agent.ensure_trial()
    assert len(emulator.find_events("idp.token_issued")) == 2
    assert len(emulator.find_events("idp.registered")) == 1  # it exchanged again; it did not register again


def test_a_trial_nobody_claims_is_gone_after_48_hours(emulator: Testkit) -> None:
    agent = TrialAgent(emulator.url)
    trial = agent.ensure_trial()
    emulator.clock.advance("47h59m")
    assert agent.list_orgs() == [trial.org]
    emulator.clock.advance("1m1s")
    emulator.assert_event("trial.expired", subject=trial.org)
    with pytest.raises(AgentError) as refused:
        agent.list_orgs()
    assert refused.value.status == 401


def test_a_claimed_trial_stays_and_the_agent_asks_for_no_other(emulator: Testkit) -> None:
    agent = TrialAgent(emulator.url)
    trial = agent.ensure_trial()
    emulator.acts.claim_trial(trial.org, "ann@example.com")

    agent.trial = None  # it forgot its trial: asking again is refused, not retried
    with pytest.raises(AgentError) as refused:
        agent.ensure_trial()
    assert refused.value.status == 403
    agent.trial = trial

    emulator.clock.advance("72h")
    assert agent.list_orgs() == [trial.org]
    emulator.assert_no_event("trial.expired")


def test_waits_as_long_as_retry_after_says(emulator: Testkit) -> None:
    waits: list[float] = []

    def wait(seconds: float) -> None:  # the emulator's time passes instead of the test's
        waits.append(seconds)
        emulator.clock.advance(seconds)

    agent = TrialAgent(emulator.url, sleep=wait)
    emulator.faults.add(path="/api/v1/trial-orgs", status=503, retry_after=7, count=2)
    agent.ensure_trial()
    assert waits == [7, 7]
    assert [e.data["effect"] for e in emulator.find_events("fault.fired")] == ["status 503", "status 503"]
    emulator.assert_clean()  # the scorecard agrees: it honoured Retry-After, and broke no other rule


def test_the_scorecard_names_an_agent_that_does_not_wait(emulator: Testkit) -> None:
    agent = TrialAgent(emulator.url, sleep=lambda seconds: None)  # a bug: it never waits
    emulator.faults.add(path="/api/v1/trial-orgs", status=503, retry_after=7, count=1)
    agent.ensure_trial()
    with pytest.raises(AssertionError, match="ignored-retry-after"):
        emulator.assert_clean()


def test_gives_up_when_the_identity_provider_stays_down(emulator: Testkit) -> None:
    waits: list[float] = []
    agent = TrialAgent(emulator.url, sleep=waits.append, attempts=3)
    with emulator.faults.injected(origin="auth", path="/oauth2/token", status=503, retry_after=30):
        with pytest.raises(AgentError) as down:
            agent.ensure_trial()
    assert down.value.status == 503 and waits == [30, 30]
    agent.ensure_trial()  # the rule is gone with the `with`: the agent goes on
    emulator.assert_event("trial.created")


def test_a_snapshot_brings_the_trial_back(emulator: Testkit) -> None:
    agent = TrialAgent(emulator.url)
    trial = agent.ensure_trial()
    emulator.snapshots.save("sample-agent-trial")
    emulator.clock.advance("49h")
    emulator.assert_event("trial.expired", subject=trial.org)

    emulator.snapshots.load("sample-agent-trial")
    assert agent.list_orgs() == [trial.org]  # the key works again: the store, clock and keys are the saved ones
    emulator.snapshots.delete("sample-agent-trial")


def test_picks_up_a_trial_from_a_declared_world(emulator: Testkit) -> None:
    emulator.apply(Path(__file__).parent / "world.toml")
    key = "pxtk_sample0123456789abcdef0123"
    agent = TrialAgent(emulator.url)
    agent.trial = Trial("agent-earlier", "main", key, emulator.api_url, claim_url="", expires_at="")
    assert agent.list_orgs() == ["agent-earlier"]
    emulator.clock.advance("2h")
    with pytest.raises(AgentError) as refused:
        agent.list_orgs()
    assert refused.value.status == 401


def test_finds_the_docs_it_needs(emulator: Testkit) -> None:
    urls = TrialAgent(emulator.url).ask("how do I add an embedding index")
    assert any("/docs/" in url for url in urls)
    emulator.assert_event("site.ask")
