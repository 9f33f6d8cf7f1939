"""The mechanisms every part uses: clock, event journal and stream, store, settings, ids."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import httpx
import pytest

from emulator.config import ConfigError, load_settings
from emulator.core.clock import Clock, parse_duration
from emulator.core.ids import Ids, secret_hash, secret_matches
from emulator.core.store.db import migrations
from emulator.site import corpus
from tests.conftest import Emulator

# --- clock -------------------------------------------------------------------------------------


def test_clock_endpoint_moves_time(start_emulator) -> None:
    e: Emulator = start_emulator("--no-watch", "--freeze-clock", "2026-01-01T00:00:00Z")
    with e.admin() as c:
        assert c.get("/_emulator/clock").json() == {
            "now": 1767225600.0,
            "iso": "2026-01-01T00:00:00Z",
            "frozen": True,
            "offset": 0.0,
        }
        assert c.post("/_emulator/clock", json={"advance": "48h"}).json()["iso"] == "2026-01-03T00:00:00Z"
        assert c.post("/_emulator/clock", json={"advance": 30}).json()["iso"] == "2026-01-03T00:00:30Z"
        assert c.post("/_emulator/clock", json={"set": "2027-05-05T05:05:05Z"}).json()["now"] == 1809493505.0
        running = c.post("/_emulator/clock", json={"freeze": False}).json()
        assert running["frozen"] is False and running["now"] >= 1809493505.0
        for bad, fragment in (
            ({"advance": "soon"}, "not a duration"),
            ({"advance": "-5m"}, "must not be negative"),
            ({"set": "yesterday"}, "not an ISO 8601"),
            ({"warp": 1}, "unknown field"),
        ):
            r = c.post("/_emulator/clock", json=bad)
            assert r.status_code == 400 and fragment in r.json()["error"]["message"], r.text
        moves = [ev["data"] for ev in e.journal("clock.")]
        assert [m["iso"][:10] for m in moves[:3]] == ["2026-01-03", "2026-01-03", "2027-05-05"]


def test_clock_survives_a_restart(start_emulator, tmp_path: Path) -> None:
    state = tmp_path / "clock-state"
    e = start_emulator("--no-watch", state_dir=state)
    with e.admin() as c:
        c.post("/_emulator/clock", json={"freeze": True, "set": "2030-02-02T00:00:00Z"}).raise_for_status()
    e.stop()
    e2 = start_emulator("--no-watch", state_dir=state)
    with e2.admin() as c:
        assert c.get("/_emulator/clock").json()["iso"] == "2030-02-02T00:00:00Z"


async def test_advance_runs_due_jobs_before_returning() -> None:
    clock = Clock(frozen_at=0.0)
    seen: list[float] = []

    async def job(now: float) -> None:
        seen.append(now)

    clock.on_due(job)
    clock.advance(3600)
    await clock.run_due()
    assert seen == [3600.0]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("90s", 90),
        ("15m", 900),
        ("48h", 172800),
        ("2d", 172800),
        ("1h30m", 5400),
        ("-5m", -300),
        ("1.5h", 5400),
        ("1w", 604800),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "5x", "10m5"])
def test_parse_duration_refuses_nonsense(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


# --- events ------------------------------------------------------------------------------------


def test_event_stream_replays_history_then_follows_live(emu: Emulator) -> None:
    since = emu.journal()[-1]["seq"]
    got: list[dict] = []
    ready = threading.Event()

    def follow() -> None:
        with (
            httpx.Client(base_url=emu.url, timeout=20) as c,
            c.stream("GET", "/_emulator/events", params={"since": since, "kinds": "site.ask"}) as stream,
        ):
            ready.set()
            ids = []
            for line in stream.iter_lines():
                if line.startswith("id: "):
                    ids.append(int(line[4:]))
                if line.startswith("data: "):
                    got.append({"id": ids[-1], **json.loads(line[6:])})
                    if len(got) == 3:
                        return

    with httpx.Client(base_url=emu.url, transport=httpx.HTTPTransport(local_address="127.0.200.1")) as c:
        c.get("/ask", params={"q": "first event"})  # before the stream opens: comes from history
        t = threading.Thread(target=follow)
        t.start()
        assert ready.wait(10)
        c.get("/health")  # not an ask: filtered out
        c.get("/ask", params={"q": "second event"})
        c.post("/ask", json={"q": "third event"})
        t.join(20)
    assert not t.is_alive()
    assert [g["data"]["query"] for g in got] == ["first event", "second event", "third event"]
    assert [g["id"] for g in got] == sorted(g["seq"] for g in got)
    assert all(g["kind"] == "site.ask" for g in got)


def test_last_event_id_resumes_after_it(emu: Emulator) -> None:
    events = emu.journal()
    last = events[-1]["seq"]
    with httpx.Client(base_url=emu.url, timeout=20) as c:
        c.post("/_emulator/clock", json={"advance": 1})
        with c.stream("GET", "/_emulator/events", headers={"Last-Event-ID": str(last)}) as stream:
            for line in stream.iter_lines():
                if line.startswith("id: "):
                    assert int(line[4:]) == last + 1
                    break


def test_journal_is_capped(start_emulator, tmp_path: Path) -> None:
    state = tmp_path / "capped"
    state.mkdir()
    (state / "emulator.toml").write_text("journal_cap = 600\n")
    e = start_emulator("--no-watch", state_dir=state)
    with e.admin() as c:
        for i in range(1100):
            c.post("/_emulator/clock", json={"advance": 1}) if i % 100 == 0 else c.get("/health")
            if i % 2:
                c.post("/mcp", json={"jsonrpc": "2.0", "id": i, "method": "ping"})
    events = e.journal()
    assert events[-1]["seq"] >= 550
    assert len(events) <= 600 + 500  # the cap is applied every 500 events


# --- store -------------------------------------------------------------------------------------


def test_store_is_migrated_sqlite_in_wal_mode(emu: Emulator) -> None:
    conn = sqlite3.connect(emu.state_dir / "emulator.sqlite3")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == migrations()[-1][0]
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"events", "idempotency", "docs_pages", "docs_passages", "docs_fts", "meta"} <= tables
    assert conn.execute("SELECT COUNT(*) FROM docs_pages").fetchone()[0] >= 40
    conn.close()


def test_the_docs_index_is_not_rebuilt_when_nothing_changed(start_emulator, tmp_path: Path) -> None:
    state = tmp_path / "reindex"
    e = start_emulator("--no-watch", state_dir=state)
    assert len(e.journal("docs.indexed")) == 1
    e.stop()
    e2 = start_emulator("--no-watch", state_dir=state)
    assert len(e2.journal("docs.indexed")) == 1  # the one from the first start


# --- settings and ids --------------------------------------------------------------------------


def test_settings_precedence_is_flags_env_file_defaults(tmp_path: Path) -> None:
    (tmp_path / "emulator.toml").write_text("ask_rate_limit = 3\nsite_port = 9100\nsite_name = 'file'\n")
    env = {
        "EMULATOR_STATE_DIR": str(tmp_path),
        "EMULATOR_SITE_PORT": "9200",
        "EMULATOR_ASK_RATE_WINDOW": "30",
    }
    s = load_settings({"site_port": 9300}, env)
    assert (s.site_port, s.ask_rate_limit, s.ask_rate_window, s.site_name) == (9300, 3, 30, "file")
    s = load_settings({}, env)
    assert s.site_port == 9200 and s.host == "127.0.0.1" and s.idempotency_ttl == 600
    # What the URLs name: the bound address, 127.0.0.1 for a wildcard, or public_host; and the gateways' range.
    assert s.public == "" and load_settings({"host": "0.0.0.0"}, env).public == "127.0.0.1"
    container = load_settings({"host": "0.0.0.0", "public_host": "emulator", "gateway_ports": "8710-8713"}, env)
    assert (container.public, container.gateway_range) == ("emulator", range(8710, 8714))


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        ({"site_port": 70000}, "not a TCP port"),
        ({"ask_rate_limit": "ten"}, "not a whole number"),
        ({"docs": "/no/such/dir"}, "does not exist"),
        ({"deprecations": "2=2026-01-01"}, "not served"),
        ({"deprecations": "1=2027-01-01,2026-01-01"}, "must not be earlier"),
        ({"freeze_clock": "noon"}, "not an ISO 8601"),
        ({"receipt_hold": 30}, "the client gives get_receipts 30 s"),
        ({"gateway_ports": "8720-8710"}, "is not FIRST-LAST"),
        ({"gateway_ports": "lots"}, "is not FIRST-LAST"),
        ({"public_host": "a b"}, "not a host name"),
        ({"admin_token": "short"}, "at least 16 characters"),
    ],
)
def test_bad_settings_are_named(tmp_path: Path, flags: dict, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        load_settings({"state_dir": tmp_path, **flags}, {})


def test_unknown_setting_in_the_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "emulator.toml").write_text("ask_rate_limt = 3\n")
    with pytest.raises(ConfigError, match="unknown settings ask_rate_limt"):
        load_settings({}, {"EMULATOR_STATE_DIR": str(tmp_path)})


def test_seeded_ids_repeat_and_secrets_are_hashed() -> None:
    a, b = Ids(7), Ids(7)
    assert [a.uuid(), a.token("pxtk_")] == [b.uuid(), b.token("pxtk_")]
    assert Ids().uuid() != Ids().uuid()
    token = Ids().token("pxtk_")
    assert token.startswith("pxtk_") and len(token) == 5 + 48
    assert secret_hash(token) != token and secret_matches(token, secret_hash(token))
    assert not secret_matches(token + "x", secret_hash(token))


def test_markdown_pages_split_into_passages_with_code_apart(tmp_path: Path) -> None:
    page = corpus.parse_markdown(
        "---\ntitle: T\ndescription: D\n---\n# T\n\nIntro **bold** [link](/x).\n\n## S1\nText one.\n"
        "```python\nprint('hi')\n```\n### S2\nText two.\n",
        Path("docs/a/index.md"),
    )
    assert page.path == "/docs/a" and page.title == "T" and page.description == "D"
    assert [(p.heading, p.text, p.code) for p in page.passages] == [
        ("T", "Intro bold link.", ""),
        ("S1", "Text one.", "print('hi')"),
        ("S2", "Text two.", ""),
    ]
