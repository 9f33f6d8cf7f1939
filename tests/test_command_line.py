"""What a newcomer meets on the command line: every setting a flag (and a README row), wrong flags and values
explained where they came from, a line per request in the log, JSON from every listing, a clock that says what it
expired, and the truth about an emulator that was killed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from emulator.cli import parser
from emulator.config import (
    BOOLS,
    CHOICES,
    FIELDS,
    HELP,
    NOT_SETTINGS,
    ConfigError,
    env_of,
    flag_of,
    load_settings,
)
from tests.conftest import Emulator
from tests.reference_pages import page, table_rows
from tests.test_cli import FREE_PORTS, run

ROOT = Path(__file__).resolve().parent.parent


def reference_settings() -> dict[str, list[str]]:
    """The site's settings reference (generated from the code): each setting's row, by its name."""
    return {row[0]: row for row in table_rows(page("settings")) if row[0] in FIELDS or row[0].islower()}


def test_every_setting_is_a_flag_an_environment_variable_a_file_key_and_a_reference_row(tmp_path: Path) -> None:
    rows = reference_settings()
    assert set(rows) >= set(FIELDS)
    for name in FIELDS:
        # the row names the flag `up --help` offers, the variable the loader reads, and the help of the flag
        assert flag_of(name) in rows[name][1] or name in {"site_port", "watch_docs"}, rows[name]
        assert rows[name][2] == f"EMULATOR_{name.upper()}" and HELP[name].split(" (")[0] in rows[name][4]
    up_help = run("up", "--help").stdout
    p = parser()
    for name in FIELDS:
        flag = flag_of(name)
        assert flag in up_help and HELP[name]
        value = CHOICES[name][0] if name in CHOICES else "1"
        args = p.parse_args(["up", flag] if name in BOOLS else ["up", flag, value])
        assert getattr(args, name) in (True, value), name
        if name in BOOLS:
            assert p.parse_args(["up", "--no-" + flag[2:]]).__dict__[name] is False
    # the same setting three ways, each naming itself when its value is wrong
    (tmp_path / "emulator.toml").write_text("trial_lifetime = 'long'\n")
    cases = [
        ({"trial_lifetime": "x"}, {}, "(set by --trial-lifetime)"),
        ({}, {env_of("trial_lifetime"): "x"}, "(set by EMULATOR_TRIAL_LIFETIME)"),
        ({}, {}, f"(set by {tmp_path / 'emulator.toml'})"),
    ]
    for flags, env, source in cases:
        with pytest.raises(ConfigError) as e:
            load_settings({"state_dir": tmp_path, **flags}, env)
        assert str(e.value).startswith("trial_lifetime: ") and str(e.value).endswith(source), e.value
    (tmp_path / "emulator.toml").write_text("trial_lifetime = 60\n")
    assert load_settings({"state_dir": tmp_path}, {}).trial_lifetime == 60
    assert load_settings({"state_dir": tmp_path, "trial_lifetime": "90"}, {}).trial_lifetime == 90


def test_an_unknown_file_key_gets_the_nearest_setting(tmp_path: Path) -> None:
    (tmp_path / "emulator.toml").write_text("ask_rate_limt = 3\nsite-port = 1\n")
    with pytest.raises(ConfigError) as e:
        load_settings({"state_dir": tmp_path}, {})
    assert "ask_rate_limt (did you mean ask_rate_limit?)" in str(e.value)
    assert "site-port (did you mean site_port?)" in str(e.value)


def test_an_unknown_emulator_variable_is_refused_with_the_nearest_name(tmp_path: Path) -> None:
    """`-e EMULATOR_ADMIN_TOKN=…` was ignored silently; now it stops the start, as a wrong flag or file key does."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMULATOR_")}
    cmd = [sys.executable, "-m", "emulator", "up", "--state-dir", str(tmp_path), "--free-ports"]
    typo = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env | {"EMULATOR_ADMIN_TOKN": "x" * 20})
    assert typo.returncode == 1 and not (tmp_path / "endpoints.json").exists()
    assert "EMULATOR_ADMIN_TOKN (did you mean EMULATOR_ADMIN_TOKEN?) is not a setting" in typo.stderr, typo.stderr
    with pytest.raises(ConfigError) as e:
        load_settings({"state_dir": tmp_path}, {"EMULATOR_WHATEVER": "1", "EMULATOR_ASK_RATE_LIMT": "3"})
    assert "EMULATOR_ASK_RATE_LIMT (did you mean EMULATOR_ASK_RATE_LIMIT?), EMULATOR_WHATEVER are not settings" in (
        str(e.value)
    )
    # the variables the project reads that are not settings are taken, and so is any name of another prefix
    other = dict.fromkeys(NOT_SETTINGS, "x") | {"EMULATOR_CONFIG": str(tmp_path / "none.toml")}
    (tmp_path / "none.toml").write_text("")
    assert load_settings({"state_dir": tmp_path}, other | {"EMULATOR_TRIAL_LIFETIME": "60"}).trial_lifetime == 60
    assert load_settings({"state_dir": tmp_path}, {"PXT_EMULATOR_SPARE": "1", "MY_EMULATOR_X": "1"}).host


def test_every_emulator_variable_the_project_uses_is_a_setting_or_listed_as_not_one() -> None:
    """The one list of EMULATOR_* names that are not settings (config.NOT_SETTINGS) holds every name the CLI, the
    testkit, the plugin, the eval runner, the container, the scripts and the docs use: none of them is refused."""
    from emulator.core.kinds import Kind

    # a whole name (`EMULATOR_TASK_*` names a family, whose members are listed one by one)
    pattern = re.compile(r"(?<![A-Za-z0-9_.])EMULATOR_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9]|_\*)")
    kinds = {k.name for k in Kind}  # Kind.EMULATOR_STARTED and the like: event kinds, not variables
    misspelt = {"EMULATOR_ADMIN_TOKN", "EMULATOR_ASK_RATE_LIMT", "EMULATOR_WHATEVER"}  # the refusal's examples
    settings = {env_of(name) for name in FIELDS}
    used: dict[str, str] = {}
    tops = [top for top in ROOT.iterdir() if not top.name.startswith(".") or top.name == ".ci"]
    for path in (p for top in tops for p in ([top] if top.is_file() else top.rglob("*"))):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        if path.suffix in (".py", ".sh", ".toml", ".md", ".yml", ".yaml") or path.name in ("Dockerfile", "run"):
            for name in pattern.findall(path.read_text(errors="replace")):
                used.setdefault(name, str(path.relative_to(ROOT)))
    stray = {name: where for name, where in used.items() if name not in settings | set(NOT_SETTINGS) | kinds | misspelt}
    assert not stray, f"add these to NOT_SETTINGS in emulator/config.py (or make them settings): {stray}"
    assert set(NOT_SETTINGS) <= set(used)  # and the list holds nothing the project no longer uses


def test_free_ports_takes_every_port_free_unless_a_port_is_set_as_strongly(tmp_path: Path) -> None:
    free = load_settings({"state_dir": tmp_path, "free_ports": True}, {"EMULATOR_SITE_PORT": "8700"})
    assert (free.site_port, free.auth_port, free.api_port, free.tunnel_port, free.s3_port) == (0, 0, 0, 0, 0)
    assert free.gateway_ports == ""
    kept = load_settings({"state_dir": tmp_path, "free_ports": True, "api_port": "8802"}, {})
    assert (kept.site_port, kept.api_port) == (0, 8802)
    (tmp_path / "emulator.toml").write_text("free_ports = true\ngateway_ports = '8710-8729'\nauth_port = 8801\n")
    from_file = load_settings({"state_dir": tmp_path}, {"EMULATOR_SITE_PORT": "8800"})
    assert (from_file.site_port, from_file.auth_port, from_file.s3_port) == (8800, 8801, 0)
    assert from_file.gateway_ports == "8710-8729"
    off = load_settings({"state_dir": tmp_path}, {"EMULATOR_FREE_PORTS": "off"})
    assert (off.site_port, off.auth_port) == (8700, 8801)


def test_a_wrong_flag_gets_the_subcommands_usage_and_the_nearest_flag(tmp_path: Path) -> None:
    r = run("up", "--trial-lifetme", "5", "--state-dir", str(tmp_path))
    assert r.returncode == 2
    assert r.stderr.startswith("usage: emulator up "), r.stderr
    assert "unrecognized arguments: --trial-lifetme 5 (did you mean --trial-lifetime?)" in r.stderr
    r = run("trials", "--jsn")
    assert r.stderr.startswith("usage: emulator trials ") and "did you mean --json?" in r.stderr
    r = run("up", "--state-dir", str(tmp_path), "--receipt-hold", "40")
    assert r.returncode == 1 and "receipt_hold must be 0 to 25 seconds" in r.stderr
    assert "(set by --receipt-hold)" in r.stderr


def test_listings_speak_json_and_say_when_they_are_empty(start_emulator: object) -> None:
    emu: Emulator = start_emulator("--no-watch")  # type: ignore[operator]
    state = emu.state_dir
    for command, empty in (
        ("trials", "no trial organizations yet"),
        ("registrations", "no agent registrations yet"),
        ("db", "no hosted databases yet"),
    ):
        plain = run(command, state=state)
        assert plain.returncode == 0 and plain.stdout.startswith(empty), plain.stdout
        assert json.loads(run(command, "--json", state=state).stdout) == []
    assert run("snapshot", "list", state=state).stdout.startswith("no snapshots yet")
    assert json.loads(run("snapshot", "list", "--json", state=state).stdout) == []
    plain_status = run("status", state=state).stdout
    assert [line.split()[0] for line in plain_status.splitlines()].count("runtime") == 1, plain_status
    status = json.loads(run("status", "--json", state=state).stdout)
    assert status["endpoints"]["site"] == emu.url and status["runtime"]["kind"] == "process"
    assert json.loads(run("switch", "--json", state=state).stdout)["trials_enabled"] is True
    # a reader that stops early ends nothing in a traceback
    piped = subprocess.run(
        f"{sys.executable} -m emulator status | head -1",
        shell=True,
        capture_output=True,
        text=True,
        env={"EMULATOR_STATE_DIR": str(state), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert piped.stdout.startswith("emulator ") and "Traceback" not in piped.stderr, piped.stderr


def test_the_log_has_a_line_per_request_and_the_clock_says_what_it_expired(start_emulator: object) -> None:
    emu: Emulator = start_emulator("--no-watch", "--freeze-clock", "2026-03-01T00:00:00Z")  # type: ignore[operator]
    state = emu.state_dir
    with httpx.Client() as c:
        c.get(emu.url + "/ask", params={"q": "trial"})
        c.get(emu.url + "/no/such/page")
        reg = c.post(emu.auth + "/agent/identity", json={"type": "anonymous"}).json()
        token = c.post(
            emu.auth + "/oauth2/token",
            data={
                "grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
                "assertion": reg["identity"]["assertion"],
            },
        ).json()["access_token"]
        trial = c.post(emu.url + "/api/v1/trial-orgs", headers={"Authorization": "Bearer " + token}).json()
    assert run("clock", "advance", "48", state=state).stderr.strip() == (
        "emulator: 48 has no unit: say 48s, 48m, 48h or 48d"
    )
    back = run("clock", "advance", "-1h", state=state)
    assert back.returncode == 1 and "advance must not be negative; use set to go back" in back.stderr
    moved = run("clock", "advance", "48h1s", state=state)
    assert moved.stdout.splitlines()[0] == "2026-03-03T00:00:01Z (frozen)"
    assert re.search(rf"^  trial\.expired \[{trial['org']}\]", moved.stdout, re.M), moved.stdout

    events = run("events", state=state).stdout
    assert " rt=" not in events and " after=" not in events
    clock_line = next(line for line in events.splitlines() if "clock.moved" in line)
    assert "before=2026-03-01T00:00:00Z now=2026-03-03T00:00:01Z" in clock_line, clock_line

    deadline = time.monotonic() + 30  # lines follow the journal's writes, a moment after what they tell
    while "trial.expired" not in (log := run("logs", "-n", "200", state=state).stdout):
        assert time.monotonic() < deadline, log
    assert re.search(r"Z INFO +#\d+ site GET /ask -> 200 \(\d", log), log
    assert re.search(r"Z INFO +#\d+ site GET /no/such/page -> 404 not_found", log), log
    assert re.search(r"Z INFO +#\d+ auth POST /oauth2/token -> 200", log), log
    assert re.search(rf"trial\.expired \[{trial['org']}\] .*expired_at=2026-03-0\dT", log), log
    assert reg["identity"]["assertion"] not in log and token not in log  # credentials are never logged
    assert (state / "emulator.log").stat().st_mode & 0o077 == 0


def test_a_killed_emulator_is_reported_as_such_and_down_does_not_claim_to_stop_it(tmp_path: Path) -> None:
    state = tmp_path / "killed"
    up = run("up", "-d", *FREE_PORTS, "--no-watch", "--runtime", "process", state=state)
    assert up.returncode == 0, up.stderr
    pid = json.loads((state / "endpoints.json").read_text())["pid"]
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):  # the kernel releases its lock as it reaps it
        if run("status", state=state).returncode != 0:
            break
    status = run("status", state=state)
    assert status.returncode == 1
    assert "ended without cleaning up, and its endpoints.json is stale; start it again with `emulator up" in (
        status.stderr
    ), status.stderr
    down = run("down", state=state)  # nothing was stopped: not a success
    assert down.returncode == 1 and "no emulator is running in" in down.stderr and "stopped (" not in down.stdout
    assert "removed its stale endpoints.json" in down.stderr and not (state / "endpoints.json").exists()


def test_a_claim_link_is_approved_once(emu: Emulator) -> None:
    state = emu.state_dir
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.99.1.3")) as c:
        reg = c.post(emu.auth + "/agent/identity", json={"type": "service_auth", "login_hint": "once@example.org"})
        reg = reg.json()
        link = reg["claim"]["attempt"]["verification_uri"]
        first = run("approve-claim", link, "--email", "once@example.org", state=state)
        found = re.fullmatch(
            r"user code (\d{6}) \(shown once\): the agent completes the claim of (\S+) .*\n", first.stdout
        )
        assert found and found[2] == reg["id"], first.stdout
        again = run("approve-claim", link, "--email", "once@example.org", "--json", state=state)
        assert again.returncode == 1 and "It was approved as once@example.org; it works once" in again.stderr
        done = c.post(
            emu.auth + "/agent/identity/claim/complete",
            json={"claim_token": reg["claim"]["token"], "user_code": found[1]},
        )
        assert done.json()["status"] == "claimed"  # the first code still works: the second try replaced nothing


def test_down_and_logs_follow_an_exported_url(tmp_path: Path) -> None:
    """`eval "$(emulator env)"` exports EMULATOR_URL: `down` and `logs` find the state dir through it."""
    state = tmp_path / "exported"
    assert run("up", "-d", *FREE_PORTS, "--no-watch", "--runtime", "process", state=state).returncode == 0
    try:
        site = json.loads((state / "endpoints.json").read_text())["site"]
        env = {k: v for k, v in os.environ.items() if k != "EMULATOR_STATE_DIR"} | {"EMULATOR_URL": site}

        def plain(*args: str) -> subprocess.CompletedProcess[str]:
            cmd = [sys.executable, "-m", "emulator", *args]
            return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)

        httpx.get(site + "/no/such/page")
        deadline = time.monotonic() + 30  # the line follows the journal's write, a moment after the answer
        while "site GET /no/such/page -> 404" not in plain("logs").stdout:
            assert time.monotonic() < deadline, plain("logs").stdout
        down = plain("down")
        assert down.returncode == 0 and down.stdout.startswith("emulator: stopped (pid "), down.stdout
        assert not (state / "endpoints.json").exists()
    finally:
        run("down", state=state)  # whatever failed above, the emulator this test started stops
