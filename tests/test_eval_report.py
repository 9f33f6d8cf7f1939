"""`emulator eval`'s report: pass@1, pass@k and pass^k with their 95% intervals, the agent's transcript and HTTP steps
per trial, and the agent's own reported token and dollar cost beside the measured one, in JSON, text, JUnit and HTML.

Most tests build results directly (what the runner builds) and run a tiny agent command of their own; the last runs
`emulator eval` as a user does."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import msgspec
import pytest

from emulator.eval import reports, scoring
from emulator.eval.checks import CheckResult
from emulator.eval.cost import MAX_USAGE_BYTES, USAGE_FILE_VAR, AgentUsage, Cost, read_usage
from emulator.eval.results import TRANSCRIPT_CAP, Step, SuiteResult, TaskResult, TrialResult, transcript
from tests.conftest import CHROMIUM

ROOT = Path(__file__).resolve().parent.parent


def _trial(
    n: int,
    passed: bool,
    *,
    usage: AgentUsage | None = None,
    note: str | None = None,
    text: str = "",
    requests: int = 6,
) -> TrialResult:
    check = CheckResult(check="trial", passed=passed, detail="1 trial org" if passed else "no trial org")
    cost = Cost(
        seconds=2.0,
        agent_seconds=1.5,
        requests={"site": requests - 2, "auth": 2},
        trials_created=1,
        keys_created=0,
        db_updates=0,
        egress=[],
        hosted_cpu_seconds=0.25,
        hosted_peak_memory_mb=100.0 * n,
    )
    steps = [Step(at=0.0, origin="site", method="GET", path="/.well-known/oauth-protected-resource", status=200, ms=3)]
    steps.append(Step(at=0.4, origin="auth", method="POST", path="/agent/identity", status=429, ms=2))
    return TrialResult(
        task="t/x",
        trial=n,
        passed=passed,
        exit_code=0,
        timed_out=False,
        seconds=2.0,
        requests=requests,
        checks=[check],
        cost=cost,
        steps=steps,
        output=text[-4000:],
        transcript=text,
        usage=usage,
        usage_note=note,
    )


def _task(trials: list[TrialResult], k: int = 3) -> TaskResult:
    return TaskResult(task="t/x", path="/tasks/x", k=k, threshold=1.0, met=False, trials=trials)


def test_pass_at_k_is_the_unbiased_estimator_and_every_figure_has_a_95_percent_wilson_interval() -> None:
    assert scoring.pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 − C(3,2)/C(5,2)
    assert scoring.pass_at_k(3, 1, 3) == 1.0 and scoring.pass_at_k(3, 0, 3) == 0.0
    assert scoring.pass_at_k(4, 3, 1) == scoring.pass_at_1(4, 3)
    with pytest.raises(ValueError):
        scoring.pass_at_k(2, 1, 3)
    # Wilson's interval at its textbook values: 7 of 10 → [0.397, 0.892]; 3 of 3 → [0.438, 1].
    seven = scoring.wilson(10, 7)
    assert (seven.low, seven.high) == (pytest.approx(0.3968, abs=1e-4), pytest.approx(0.8922, abs=1e-4))
    assert (scoring.wilson(3, 3).low, scoring.wilson(3, 3).high) == (pytest.approx(0.4385, abs=1e-4), 1.0)
    assert (scoring.wilson(3, 0).low, scoring.wilson(0, 0).high) == (0.0, 1.0)
    # pass@k and pass^k at p's bounds: 1 − (1 − p)^k and p^k.
    hat, at = scoring.pass_hat_k_interval(10, 7, 3), scoring.pass_at_k_interval(10, 7, 3)
    assert (hat.low, hat.high) == (pytest.approx(0.3968**3, abs=1e-3), pytest.approx(0.8922**3, abs=1e-3))
    assert (at.low, at.high) == (pytest.approx(1 - 0.6032**3, abs=1e-3), pytest.approx(1 - 0.1078**3, abs=1e-3))
    # Where the unbiased estimate falls outside p's bounds (2 of 3 passed: pass^3 = 0), the interval holds it.
    assert scoring.pass_hat_k(3, 2, 3) == 0.0 and scoring.pass_hat_k_interval(3, 2, 3).low == 0.0
    assert scoring.pass_at_k(3, 2, 3) == 1.0 and scoring.pass_at_k_interval(3, 2, 3).high == 1.0


def test_a_tasks_figures_and_summed_cost_come_from_its_trials_in_the_json() -> None:
    usage = AgentUsage(input_tokens=1200, output_tokens=300, usd=0.0123, model="model-a")
    trials = [
        _trial(1, True, usage=usage),
        _trial(2, True, usage=AgentUsage(input_tokens=800, output_tokens=100, model="model-b")),  # no dollars
        _trial(3, False, note="the agent's usage file was not used: Object missing required field `output_tokens`"),
    ]
    # What a caller passes for a derived figure is replaced: the figures cannot disagree with the trials.
    task = TaskResult(task="t/x", path="p", k=3, threshold=1.0, met=False, trials=trials, pass_at_1=0.99)
    assert (task.pass_at_1, task.pass_at_k, task.pass_hat_k) == (pytest.approx(2 / 3), 1.0, 0.0)
    assert task.pass_at_1_ci == scoring.pass_at_1_interval(3, 2) and task.confidence == 0.95
    assert task.pass_hat_k_ci == scoring.pass_hat_k_interval(3, 2, 3)
    cost = task.cost
    assert (cost.trials, cost.requests, cost.usage_reported) == (3, 18, 2)
    assert (cost.input_tokens, cost.output_tokens, cost.usd, cost.models) == (2000, 400, 0.0123, ["model-a", "model-b"])
    assert (cost.agent_seconds, cost.hosted_cpu_seconds, cost.hosted_peak_memory_mb) == (4.5, 0.75, 300.0)

    suite = SuiteResult(agent="a", tasks=[task, _task([_trial(1, True, usage=usage)], k=1)], met=False)
    assert (suite.cost.trials, suite.cost.input_tokens, suite.cost.usd) == (4, 3200, 0.0246)
    # --json: the figures with their intervals, each trial's usage and note, the sums.
    out = json.loads(msgspec.json.encode(suite))
    first = out["tasks"][0]
    assert first["pass_at_k"] == 1.0 and first["pass_hat_k_ci"] == {"low": 0.0, "high": 0.8266}
    assert first["pass_at_1_ci"] == {"low": 0.2077, "high": 0.9385}
    assert first["trials"][0]["usage"] == {
        "input_tokens": 1200,
        "output_tokens": 300,
        "usd": 0.0123,
        "model": "model-a",
    }
    assert first["trials"][2]["usage"] is None and "output_tokens" in first["trials"][2]["usage_note"]
    assert out["cost"]["usage_reported"] == 3 and first["cost"]["usd"] == 0.0123
    assert msgspec.json.decode(msgspec.json.encode(suite), type=SuiteResult) == suite


def test_no_trial_leaves_every_figure_unknown() -> None:
    task = _task([], k=3)
    assert (task.pass_at_k, task.pass_hat_k, task.cost.trials) == (0.0, 0.0, 0)
    assert (task.pass_hat_k_ci.low, task.pass_hat_k_ci.high) == (0.0, 1.0)


GOOD = b'{"input_tokens": 1200, "output_tokens": 300, "usd": 0.0123, "model": "claude-sonnet-4-5"}'


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b'{"input_tokens": 1, "output_tokens": 2, "cost": 3}', "unknown field `cost`"),
        (b'{"input_tokens": "1200", "output_tokens": 300}', "Expected `int`, got `str` - at `$.input_tokens`"),
        (b'{"input_tokens": 1200}', "missing required field `output_tokens`"),
        (b'{"input_tokens": -1, "output_tokens": 0}', "Expected `int` >= 0 - at `$.input_tokens`"),
        (b'{"input_tokens": 1, "output_tokens": 0, "usd": 1e400}', "at `$.usd`"),
        (b"input_tokens=1200", "malformed"),
        (b"", "not used"),
        (b"[" * 10 + b" " * MAX_USAGE_BYTES, f"over {MAX_USAGE_BYTES} bytes"),
    ],
    ids=["unknown-key", "string-number", "missing", "negative", "infinite", "not-json", "empty", "too-big"],
)
def test_a_bad_usage_file_is_a_note_never_an_error(tmp_path: Path, content: bytes, said: str) -> None:
    path = tmp_path / "usage.json"
    path.write_bytes(content)
    usage, note = read_usage(path)
    assert usage is None and note is not None and said in note, note
    if content:
        assert content[:16].decode() not in note  # the note names what is wrong, never repeats the agent's text


def test_the_usage_file_is_read_only_when_it_is_a_regular_file_of_the_agents(tmp_path: Path) -> None:
    path = tmp_path / "usage.json"
    assert read_usage(path) == (None, None)  # none written: nothing reported, nothing to say
    path.write_bytes(GOOD)
    assert read_usage(path) == (
        AgentUsage(input_tokens=1200, output_tokens=300, usd=0.0123, model="claude-sonnet-4-5"),
        None,
    )
    assert read_usage(tmp_path)[1] is not None  # a directory
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: an open that waited for one would hang the harness
    assert read_usage(fifo) == (None, "the agent's usage file is not a regular file: not read")
    link = tmp_path / "link.json"
    link.symlink_to(path)  # it could point at the harness's own files
    usage, note = read_usage(link)
    assert usage is None and note is not None and "could not be read" in note


def test_the_transcript_is_the_whole_output_up_to_its_cap_and_says_what_was_cut(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    assert transcript(log) == ""
    small = "".join(f"line {i}\n" for i in range(2000))  # over the 4000 characters `output` keeps
    log.write_text(small)
    assert transcript(log) == small
    big = b"S" * 300_000 + "é".encode() * 100_000 + b"THE END\n"
    log.write_bytes(big)
    shown = transcript(log)
    head, said, tail = re.split(r"\n\[… (\d+) bytes of the agent's output cut here: \d+ of \d+ kept …\]\n", shown)
    assert head == "S" * (TRANSCRIPT_CAP * 3 // 4)
    assert tail.endswith("éé" + "THE END\n") and int(said) == len(big) - TRANSCRIPT_CAP
    assert len(head.encode()) + len(tail.encode(errors="surrogateescape")) <= TRANSCRIPT_CAP + 3  # a split é


def _agent_trial(tmp_path: Path, script: str, n: int = 1) -> TrialResult:
    """The tiny agent `script` run as the runner runs one (the usage file's variable set, its output to a log),
    then its transcript and usage read with the calls the runner makes."""
    log, usage_file = tmp_path / f"agent-{n}.log", tmp_path / f"work-{n}" / "usage.json"
    usage_file.parent.mkdir()
    with open(log, "wb") as out:
        env = {**os.environ, USAGE_FILE_VAR: str(usage_file)}
        code = subprocess.run(script, shell=True, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=60)
    usage, note = read_usage(usage_file)
    said = transcript(log)
    result = _trial(n, True, usage=usage, note=note, text=said)
    result.exit_code = code.returncode
    return result


AGENT = (
    f"{sys.executable} -c \"import json, os, sys; [print('step', i, 'of the agent') for i in range(3000)]; "
    "print('\\x1b[1mbold\\x07 <b>not html</b>', file=sys.stderr); "
    "json.dump({'input_tokens': 1200, 'output_tokens': 300, 'usd': 0.0123, 'model': 'model-a'}, "
    f"open(os.environ['{USAGE_FILE_VAR}'], 'w'))\""
)


def test_a_usage_file_the_agent_wrote_and_its_transcript_reach_the_text_junit_and_html(tmp_path: Path) -> None:
    good = _agent_trial(tmp_path, AGENT, 1)
    bad = _agent_trial(tmp_path, f'echo oops; echo \'{{"input_tokens": 5}}\' > "${USAGE_FILE_VAR}"', 2)
    assert good.usage == AgentUsage(input_tokens=1200, output_tokens=300, usd=0.0123, model="model-a")
    assert bad.usage is None and bad.passed, "a bad usage file changes no verdict"
    assert bad.usage_note == "the agent's usage file was not used: Object missing required field `output_tokens`"
    assert "step 0 of the agent" in good.transcript and "step 0 " not in good.output  # whole, not the tail
    suite = SuiteResult(agent="tiny", tasks=[_task([good, bad], k=2)], met=True)

    shown = reports.text(suite)
    assert (
        "t/x: pass@1 1.00 [0.34, 1.00], pass@2 1.00 [0.57, 1.00], pass^2 1.00 [0.12, 1.00] (needs 1.00: NOT met)"
        in shown
    )
    assert (
        "  cost: 12 requests, agent 3.0 s, hosted CPU 0.5 s; reported by 1 of 2 trials: "
        "1200 input + 300 output tokens, $0.0123 (model-a)"
    ) in shown
    assert f"  trial 2: {bad.usage_note}" in shown
    assert reports.trial_line(good) == "t/x trial 1: passed in 2.0 s, 6 requests, 1200 + 300 tokens, $0.0123"

    root = ET.fromstring(reports.junit(suite))  # the agent's control characters did not make it invalid XML
    suite_props = {p.get("name"): p.get("value") for p in root.findall("testsuite/properties/property")}
    assert {k: suite_props[k] for k in ("pass_at_k", "pass_hat_k_low", "pass_hat_k_high", "k")} == {
        "pass_at_k": "1",
        "pass_hat_k_low": "0.1172",
        "pass_hat_k_high": "1",
        "k": "2",
    }
    assert (suite_props["input_tokens"], suite_props["usd"], suite_props["usage_reported"]) == ("1200", "0.012300", "1")
    assert suite_props["requests"] == "12" and suite_props["models"] == "model-a"
    first, second = root.findall("testsuite/testcase")
    assert {p.get("name"): p.get("value") for p in first.findall("properties/property")} == {
        "requests": "6",
        "input_tokens": "1200",
        "output_tokens": "300",
        "usd": "0.012300",
        "model": "model-a",
    }
    assert "usage_note" in {p.get("name") for p in second.findall("properties/property")}
    out = first.findtext("system-out") or ""
    assert out.startswith("step 0 of the agent") and "\ufffd[1mbold\ufffd" in out

    page = reports.page(suite)
    seen = _Page()
    seen.feed(page)
    assert seen.details == [
        "transcript (3001 lines)",
        "HTTP steps (2 of 6)",
        "transcript (1 line)",
        "HTTP steps (2 of 6)",
    ]
    assert "step 2999 of the agent" in seen.pre[0] and "<b>not html</b>" in seen.pre[0]  # escaped, shown as text
    assert "<b>not html</b>" not in page
    assert "1.00 <span class=ci>[0.34, 1.00]</span>" in page and "pass@k" in page
    assert "1200 + 300 tokens, $0.0123" in page and "missing required field" in page
    assert "reported by 1 of 2 trials" in page


class _Page(HTMLParser):
    """The page's <details> summaries and <pre> texts, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.details: list[str] = []
        self.pre: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("summary", "pre"):
            self._in = tag
            (self.details if tag == "summary" else self.pre).append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == self._in:
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "summary":
            self.details[-1] += data
        elif self._in == "pre":
            self.pre[-1] += data


@pytest.mark.skipif(not shutil.which(CHROMIUM), reason="Chromium is not installed")
def test_the_html_page_folds_each_trials_transcript_and_steps_until_opened(browser: Any, tmp_path: Path) -> None:
    trial = _agent_trial(tmp_path, AGENT)
    page = tmp_path / "eval.html"
    page.write_text(reports.page(SuiteResult(agent="tiny", tasks=[_task([trial], k=1)], met=True)))
    tab = browser.new_page()
    tab.goto(page.as_uri())
    transcript_box = tab.locator("details.transcript pre")
    assert not transcript_box.is_visible()  # folded
    tab.locator("details.transcript summary").click()
    assert transcript_box.is_visible() and "step 1234 of the agent" in transcript_box.inner_text()
    tab.locator("details.steps summary").click()
    assert tab.locator("table.steps tr").count() == 2 and "/agent/identity" in tab.locator("table.steps").inner_text()
    tab.close()


def test_the_docs_example_line_is_what_eval_prints() -> None:
    """The evaluation how-to shows a task's line of the text output; it is this module's, for three trials that all
    passed."""
    readme = (ROOT / "docs" / "how-to" / "evaluate.md").read_text()
    trials = [
        _trial(n, True, usage=AgentUsage(input_tokens=0, output_tokens=0, usd=0.0, model="scripted, no model"))
        for n in (1, 2, 3)
    ]
    task = TaskResult(task="pixeltable/create-a-trial", path="p", k=3, threshold=1.0, met=True, trials=trials)
    for line in reports.text(SuiteResult(agent="a", tasks=[task], met=True)).splitlines()[1:3]:
        shown = re.sub(r"\d+ requests, agent [\d.]+ s, hosted CPU [\d.]+ s", "REQUESTS", line)
        documented = [
            re.sub(r"\d+ requests, agent [\d.]+ s, hosted CPU [\d.]+ s", "REQUESTS", x) for x in readme.splitlines()
        ]
        assert shown in documented, line


def test_emulator_eval_reports_the_usage_file_and_transcript_of_a_trial(tmp_path: Path) -> None:
    task = tmp_path / "quiet"
    task.mkdir()
    (task / "instruction.md").write_text("Print, and report your usage.\n")
    (task / "task.toml").write_text(
        '[emulator]\n[[emulator.checks]]\ncheck = "event"\nkind = "trial.created"\nat_least = 0\nat_most = 0\n'
    )
    r = subprocess.run(
        [sys.executable, "-m", "emulator", "eval", str(task), "--agent", AGENT, "-k", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    result = json.loads(r.stdout)
    (trial,) = result["tasks"][0]["trials"]
    assert trial["usage"] == {"input_tokens": 1200, "output_tokens": 300, "usd": 0.0123, "model": "model-a"}
    assert trial["transcript"].startswith("step 0 of the agent")
    assert result["cost"]["input_tokens"] == 1200 and result["tasks"][0]["cost"]["usd"] == 0.0123
