"""`emulator eval`'s task format, checked whole before any trial: unknown keys with the nearest name, settings by
their types, event kinds against the journal's, checks that cannot fail (a warning; an error under `--strict`),
every invalid task reported with exit 2; the JSON Schema the package ships; moments (clock moves, faults)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import jsonschema
import pytest

from emulator import shipped
from emulator.core.faults import FaultSpec
from emulator.eval import schema
from emulator.eval.moments import Moment, act, due
from emulator.eval.tasks import TaskError, load, load_all
from emulator.testkit import Testkit

ROOT = Path(__file__).resolve().parent.parent
TASKS = sorted(t for t in (ROOT / "fixtures" / "tasks").iterdir() if (t / "task.toml").is_file())
CHECK = '[[emulator.checks]]\ncheck = "trial"\n'


def task(folder: Path, toml: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "instruction.md").write_text("Do it.\n")
    (folder / "task.toml").write_text(toml)
    return folder


def problems(folder: Path, toml: str) -> list[str]:
    with pytest.raises(TaskError) as e:
        load(task(folder, toml))
    return [p.split("task.toml: ", 1)[1] for p in e.value.problems]


def evaluate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "emulator", "eval", *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


@pytest.mark.parametrize(
    ("toml", "said"),
    [
        ("emulater = 1\n[emulator]\n" + CHECK, "emulater: no such key (did you mean emulator?)"),
        (
            "[agent]\ntimout_sec = 5\n[emulator]\n" + CHECK,
            "[agent] timout_sec: no such key (did you mean timeout_sec?)",
        ),
        ('[task]\nnmae = "x/y"\n[emulator]\n' + CHECK, "[task] nmae: no such key (did you mean name?)"),
        ("[emulator]\ntrails = 2\n" + CHECK, "[emulator] trails: no such key (did you mean trials?)"),
        (
            '[emulator.person]\nemial = "a@example.com"\n' + CHECK,
            "[emulator.person] emial: no such key (did you mean email?)",
        ),
        (
            '[emulator]\n[[emulator.checks]]\ncheck = "event"\nkind = "trial.created"\nat_mots = 1\n',
            "[[emulator.checks]] #1 (event) at_mots: no such key (did you mean at_most?)",
        ),
        (
            '[emulator]\n[[emulator.checks]]\ncheck = "evnet"\nkind = "trial.created"\n',
            "[[emulator.checks]] #1 (evnet): check = 'evnet' is not one of trial, event,",
        ),
        (
            "[agent]\ntimeout_sec = 60\n[emulator]\n" + CHECK + "[[emulator.moments]]\nat = 5\n"
            'fault = { path = "/ask", stauts = 503 }\n',
            "[[emulator.moments]] #1 fault.stauts: no such key (did you mean status?)",
        ),
    ],
)
def test_an_unknown_key_anywhere_is_an_error_naming_it_where_it_is_and_the_nearest_name(
    tmp_path: Path, toml: str, said: str
) -> None:
    found = problems(tmp_path, toml)
    assert any(p.startswith(said) for p in found), found


def test_every_problem_of_a_task_is_said_at_once(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        '[agent]\ntimout_sec = 5\n[emulator]\ntrails = 2\n[emulator.settings]\nask_rate_limit = "three"\n'
        '[[emulator.checks]]\ncheck = "event"\nkind = "trial.craeted"\n'
        '[[emulator.checks]]\ncheck = "event"\nkind = "trial.created"\nat_least = "x"\n',
    )
    assert found == [
        "[agent] timout_sec: no such key (did you mean timeout_sec?)",
        "[emulator] trails: no such key (did you mean trials?)",
        "[[emulator.checks]] #2 (event) at_least: Expected `int`, got `str`",
        "[emulator.settings] ask_rate_limit = 'three': a string, not an integer",
        "[[emulator.checks]] #1 (event) kind: 'trial.craeted' is not a kind of event the journal has "
        "(did you mean trial.created?)",
    ]


def test_harbors_sections_the_emulator_does_not_read_are_taken_and_every_shipped_task_is_clean(
    tmp_path: Path,
) -> None:
    harbor = (
        'schema_version = "1.1"\nsource = "somewhere"\n'
        '[task]\nname = "org/x"\nkeywords = ["a"]\nauthors = [{ name = "A", email = "a@example.com" }]\n'
        '[metadata]\ndifficulty = "easy"\nanything = { goes = [1, 2] }\n'
        '[verifier]\ntimeout_sec = 120\nenv = { A = "b" }\n[verifier.anything]\nx = 1\n'
        "[environment]\ncpus = 2\nmemory_mb = 4096\n[solution]\nenv = {}\n"
        '[agent]\ntimeout_sec = 30\nuser = "agent"\n[emulator]\n' + CHECK
    )
    assert load(task(tmp_path / "harbor", harbor)).name == "org/x"
    loaded = load_all(TASKS, strict=True)
    assert (len(loaded.tasks), loaded.errors, loaded.warnings) == (len(TASKS), [], [])


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ('ask_rate_limit = "three"', "[emulator.settings] ask_rate_limit = 'three': a string, not an integer"),
        ("trials_enabled = 1", "[emulator.settings] trials_enabled = 1: an integer, not a boolean"),
        ("ask_rate_limit = 2.5", "[emulator.settings] ask_rate_limit = 2.5: a float, not an integer"),
        ("runtime = 3", "[emulator.settings] runtime = 3: an integer, not a string"),
        ("ask_rate_limit = 0", "[emulator.settings] ask_rate_limit must be at least 1"),
        ('runtime = "vm"', "[emulator.settings] runtime: 'vm' is not one of auto, docker, process"),
        ("ask_rate_limt = 3", "[emulator.settings] ask_rate_limt: not a setting (did you mean ask_rate_limit?)"),
        ("site_port = 1", "[emulator.settings] site_port: not a setting a task may choose"),
    ],
)
def test_settings_are_checked_by_their_types_and_values_at_load(tmp_path: Path, settings: str, said: str) -> None:
    found = problems(tmp_path, f"[emulator.settings]\n{settings}\n" + CHECK)
    assert any(p.startswith(said) for p in found), found


def test_settings_of_the_right_types_load(tmp_path: Path) -> None:
    toml = "[emulator.settings]\nask_rate_limit = 2\nproxy_connect_timeout = 5\ntrials_enabled = false\n" + CHECK
    assert load(task(tmp_path, toml)).settings == {
        "ask_rate_limit": 2,
        "proxy_connect_timeout": 5,
        "trials_enabled": False,
    }


def test_event_kinds_are_the_journals(tmp_path: Path) -> None:
    found = problems(
        tmp_path,
        '[emulator]\n[[emulator.checks]]\ncheck = "event"\nkind = "db.delete_acepted"\nat_least = 0\nat_most = 0\n'
        '[[emulator.canaries]]\npage = "docs/auth/agent-registration.md"\ntext = "x"\n'
        'events = ["db.delete_accepted", "trial.claim"]\n',
    )
    assert found == [
        "[[emulator.checks]] #1 (event) kind: 'db.delete_acepted' is not a kind of event the journal has "
        "(did you mean db.delete_accepted?)",
        "[[emulator.canaries]] #1 events: 'trial.claim' is not a kind of event the journal has "
        "(did you mean trial.claimed?)",
    ]
    found = problems(tmp_path, '[emulator]\n[[emulator.checks]]\ncheck = "scorecard_clean"\nallow = ["hard-coded"]\n')
    assert found == [
        "[[emulator.checks]] #1 (scorecard_clean) allow: 'hard-coded' is not a scorecard rule "
        "(did you mean hard-coded-url?)"
    ]


CANNOT_FAIL = [
    ('check = "event"\nkind = "trial.created"\nat_least = 0', "at_least = 0 and no at_most"),
    ('check = "trial"\ncount = 0', "count = 0 and no claimed_by"),
    (
        'check = "collateral"\nmay_change = ["orgs", "databases:*", "services", "keys", "registrations", "users"]',
        "may_change covers every kind",
    ),
    (
        'check = "scorecard_clean"\nallow = ["ignored-retry-after", "idempotency-key-reused", "unsafe-retry", '
        '"second-trial", "expired-token-reuse", "re-registered-instead-of-exchange", "hard-coded-url", '
        '"polling-too-fast", "update-while-not-available", "secret-in-url"]',
        "allow lists every scorecard rule",
    ),
    ('check = "egress"', "no allow-list"),
    ('check = "egress"\nallow = ["*"]', "an allow pattern matches every host"),
]


@pytest.mark.parametrize(("check", "said"), CANNOT_FAIL)
def test_a_check_that_can_never_fail_is_a_warning_naming_it_and_an_error_under_strict(
    tmp_path: Path, check: str, said: str
) -> None:
    folder = task(tmp_path, f"[emulator]\n{CHECK}[[emulator.checks]]\n{check}\n")
    kind = check.split('"')[1]
    (warning,) = load(folder).warnings
    assert (
        warning
        == f"{folder / 'task.toml'}: [[emulator.checks]] #2 ({kind}) can never fail: "
        + warning.split("can never fail: ")[1]
        and said in warning
    ), warning
    loaded = load_all([folder], strict=True)
    assert loaded.tasks == [] and loaded.errors == [f"{warning} (an error under --strict)"]


def test_checks_that_can_fail_give_no_warning(tmp_path: Path) -> None:
    checks = [
        'check = "event"\nkind = "trial.created"\nat_least = 0\nat_most = 0',  # none: fails on one
        'check = "trial"\ncount = 0\nclaimed_by = "a@example.com"',
        'check = "egress"\nallow = ["api.example.com"]',
        'check = "requests"\nat_most = 0',
        'check = "collateral"\nmay_change = ["orgs", "databases:agent-*", "services", "keys", "registrations", '
        '"users"]',
    ]
    toml = "[emulator]\n" + "".join(f"[[emulator.checks]]\n{c}\n" for c in checks)
    assert load(task(tmp_path, toml)).warnings == []


def test_a_check_that_can_never_pass_is_an_error(tmp_path: Path) -> None:
    found = problems(
        tmp_path, '[emulator]\n[[emulator.checks]]\ncheck = "event"\nkind = "trial.created"\nat_most = 0\n'
    )
    assert found == [
        "[[emulator.checks]] #1 (event) can never pass: at_most = 0 is below at_least = 1 (its default: say "
        "at_least = 0 for none at all)"
    ]


def test_every_invalid_task_is_reported_with_exit_2_before_any_trial(tmp_path: Path) -> None:
    good = task(tmp_path / "good", "[emulator]\n" + CHECK)
    typo = task(tmp_path / "typo", "[agent]\ntimout_sec = 5\n[emulator]\n" + CHECK)
    settings = task(tmp_path / "settings", '[emulator.settings]\nask_rate_limit = "three"\n' + CHECK)
    vacuous = task(tmp_path / "vacuous", '[emulator]\n[[emulator.checks]]\ncheck = "trial"\ncount = 0\n')
    marker = tmp_path / "the-agent-ran"
    r = evaluate(str(good), str(typo), str(settings), str(vacuous), "--agent", f"touch {marker}")
    assert r.returncode == 2, r.stderr
    assert f"emulator: {typo / 'task.toml'}: [agent] timout_sec: no such key (did you mean timeout_sec?)" in r.stderr
    assert f"emulator: {settings / 'task.toml'}: [emulator.settings] ask_rate_limit = 'three'" in r.stderr
    assert f"emulator: warning: {vacuous / 'task.toml'}: [[emulator.checks]] #1 (trial) can never fail" in r.stderr
    assert "Traceback" not in r.stderr and not marker.exists()
    # --strict: the warning alone is enough to refuse the run.
    r = evaluate(str(good), str(vacuous), "--agent", f"touch {marker}", "--strict")
    assert r.returncode == 2 and "(an error under --strict)" in r.stderr and not marker.exists(), r.stderr


def test_the_shipped_schema_is_what_the_structs_make_now_and_eval_prints_it() -> None:
    assert shipped.TASK_SCHEMA.read_text() == schema.text(), (
        "the structs changed: python -m emulator.eval.schema > emulator/eval/task.schema.json"
    )
    r = evaluate("--schema")
    assert r.returncode == 0 and json.loads(r.stdout) == schema.generate()


def test_the_schema_takes_every_shipped_task_and_refuses_what_load_refuses() -> None:
    validator = jsonschema.Draft7Validator(json.loads(shipped.TASK_SCHEMA.read_text()))
    for folder in TASKS:
        assert list(validator.iter_errors(tomllib.loads((folder / "task.toml").read_text()))) == [], folder
    base = tomllib.loads((TASKS[0] / "task.toml").read_text())
    bad = [
        {**base, "agent": {"timout_sec": 5}},
        {**base, "emulator": {**base["emulator"], "settings": {"ask_rate_limit": "three"}}},
        {**base, "emulator": {**base["emulator"], "settings": {"site_port": 1}}},
        {**base, "emulator": {**base["emulator"], "checks": [{"check": "event", "kind": "trial.craeted"}]}},
        {**base, "emulator": {**base["emulator"], "moments": [{"at": 1, "advance": "2h", "fault": {"path": "/a"}}]}},
        {**base, "emulator": {**base["emulator"], "moments": [{"at": 0, "advance": "2h"}]}},
        {**base, "emulator": {**base["emulator"], "moments": [{"at": 1, "advance": "2 hours"}]}},
    ]
    assert [validator.is_valid(b) for b in bad] == [False] * len(bad)
    good = {
        **base,
        "emulator": {
            **base["emulator"],
            "moments": [{"at": 1, "advance": "1h30m"}, {"at": 2, "fault": {"path": "/ask", "status": 503}}],
        },
    }
    assert validator.is_valid(good)


@pytest.mark.parametrize(
    ("moment", "said"),
    [
        ('at = 0\nadvance = "1h"', "[[emulator.moments]] #1: at must be more than 0 seconds"),
        ("at = 5", "[[emulator.moments]] #1: say exactly one of `advance` (a clock move) or `fault`"),
        (
            'at = 5\nadvance = "1h"\nfault = { path = "/ask", status = 503 }',
            "[[emulator.moments]] #1: say exactly one of",
        ),
        ('at = 5\nadvance = "2 hours"', "[[emulator.moments]] #1: advance: '2 hours' is not a duration"),
        ('at = 5\nadvance = "-5m"', "[[emulator.moments]] #1: advance: '-5m' must move the clock forward"),
        ('at = 5\nfault = { path = "/ask" }', "[[emulator.moments]] #1: fault: a fault needs an effect"),
        ('at = 5\nfault = { path = "/ask", status = "x" }', "[[emulator.moments]] #1 fault.status: Expected `int"),
        ('at = 90\nadvance = "1h"', "[[emulator.moments]] #1: at 90 s is not before [agent] timeout_sec (60)"),
        ('at = 5\nadvnace = "1h"', "[[emulator.moments]] #1 advnace: no such key (did you mean advance?)"),
    ],
)
def test_a_moment_is_decoded_strictly(tmp_path: Path, moment: str, said: str) -> None:
    found = problems(tmp_path, f"[agent]\ntimeout_sec = 60\n[emulator]\n{CHECK}[[emulator.moments]]\n{moment}\n")
    assert any(p.startswith(said) for p in found), found


def test_moments_load_and_fall_due_once_in_their_order(tmp_path: Path) -> None:
    toml = (
        f"[agent]\ntimeout_sec = 60\n[emulator]\n{CHECK}"
        '[[emulator.moments]]\nat = 10\nfault = { path = "/ask", status = 503, count = 1 }\n'
        '[[emulator.moments]]\nat = 2.5\nadvance = "2h"\n[[emulator.moments]]\nat = 10\nadvance = 60\n'
    )
    moments = load(task(tmp_path, toml)).moments
    assert moments == [
        Moment(at=10, fault=FaultSpec(path="/ask", status=503, count=1)),
        Moment(at=2.5, advance="2h"),
        Moment(at=10, advance=60),
    ]
    assert due(moments, 1.0, set()) == []
    assert due(moments, 2.5, set()) == [(1, moments[1])]
    assert due(moments, 30, {1}) == [(0, moments[0]), (2, moments[2])]  # ties in the task's order
    assert due(moments, 30, {0, 1, 2}) == []


def test_act_moves_the_clock_and_arms_a_fault_on_a_real_emulator(tmp_path: Path) -> None:
    with Testkit.start(tmp_path / "emu", ["--no-watch", "--freeze-clock", "2026-03-01T00:00:00Z"]) as kit:
        said = act(kit, Moment(at=2.5, advance="2h"))
        assert kit.clock.now().isoformat() == "2026-03-01T02:00:00+00:00"
        assert said.startswith("at 2.5 s: the clock advanced 2h to 2026-03-01T02:00:00"), said
        said = act(kit, Moment(at=5, advance=90))
        assert kit.clock.now().isoformat() == "2026-03-01T02:01:30+00:00"
        said = act(kit, Moment(at=10, fault=FaultSpec(path="/ask", status=503, retry_after=2, count=1)))
        (rule,) = kit.faults.list()
        assert (rule.path, rule.status, rule.retry_after, rule.count, rule.fired) == ("/ask", 503, 2, 1, 0)
        assert said == f"at 10 s: fault {rule.id} armed: {said.split('armed: ')[1]}" and "503" in said, said
        kinds = [e.kind for e in kit.events(since=0) if e.kind in ("clock.moved", "fault.armed")]
        assert kinds == ["clock.moved", "clock.moved", "fault.armed"]
        # Armed as the API arms any rule: the next /ask gets it, with its Retry-After.
        r = httpx.get(f"{kit.url}/ask", params={"q": "x"}, trust_env=False, timeout=30)
        assert (r.status_code, r.headers.get("retry-after")) == (503, "2")
        # A hold is the faults API's too.
        said = act(kit, Moment(at=12, fault=FaultSpec(hold="/ask", count=2)))
        assert said == "at 12 s: holding the next 2 request(s) to /ask" and kit.faults.release() is not None
