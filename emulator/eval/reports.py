"""An evaluation's result for CI and for people: the text `emulator eval` prints, JUnit XML (a test suite per task
with its figures and cost as properties, a test case per trial, each failing check a failure with its evidence, the
agent's transcript as its output), and one self-contained HTML page (no script, no request anywhere: it opens from a
CI artifact as it is) with the tasks' figures and cost, a row per trial, its timeline of requests across the
emulator's origins, its failing checks inline, and its transcript and requests to unfold."""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

from emulator.eval.cost import AgentUsage, CostSum
from emulator.eval.results import SuiteResult, TaskResult, TrialResult
from emulator.eval.scoring import Interval


def figures(task: TaskResult) -> str:
    """`pass@1 0.67 [0.21, 0.94], pass@3 1.00 [0.50, 1.00], pass^3 0.00 [0.00, 0.83]`: each with its 95% interval."""
    k = task.k
    at_k = f"pass@{k} {task.pass_at_k:.2f} {_ci(task.pass_at_k_ci)}, " if k > 1 else ""  # k = 1: pass@1 again
    return (
        f"pass@1 {task.pass_at_1:.2f} {_ci(task.pass_at_1_ci)}, {at_k}"
        f"pass^{k} {task.pass_hat_k:.2f} {_ci(task.pass_hat_k_ci)}"
    )


def cost_line(cost: CostSum) -> str:
    """What a task's or suite's trials cost: measured (the emulator's), then reported (the agents' usage files)."""
    line = f"{cost.requests} requests, agent {cost.agent_seconds:.1f} s, hosted CPU {cost.hosted_cpu_seconds:.1f} s"
    if not cost.usage_reported:
        return f"{line}; no usage reported by the agent"
    said = f"{cost.input_tokens} input + {cost.output_tokens} output tokens"
    said += f", ${cost.usd:.4f}" if cost.usd is not None else ", no dollars reported"
    models = f" ({', '.join(cost.models)})" if cost.models else ""
    return f"{line}; reported by {cost.usage_reported} of {cost.trials} trials: {said}{models}"


def usage_words(usage: AgentUsage | None) -> str:
    if usage is None:
        return ""
    usd = f", ${usage.usd:.4f}" if usage.usd is not None else ""
    return f"{usage.input_tokens} + {usage.output_tokens} tokens{usd}"


def trial_line(trial: TrialResult) -> str:
    """A trial's line as it ends: verdict, time, requests, reported usage, and what failed."""
    verdict = ("passed" if trial.passed else "FAILED") + (" under attack" if trial.attacked else "")
    failing = [c.check for c in trial.checks if not c.passed]
    failing += [f"followed canary {hit.canary}" for hit in trial.canaries_followed]
    why = f" ({'; '.join(failing)})" if failing else f" ({trial.error})" if trial.error else ""
    used = f", {usage_words(trial.usage)}" if trial.usage else ""
    return f"{trial.task} trial {trial.trial}: {verdict} in {trial.seconds:.1f} s, {trial.requests} requests{used}{why}"


def text(result: SuiteResult) -> str:
    """What `emulator eval` prints at the end (without --json): each task's figures and cost, then each trial's
    failures with their evidence, then the suite's cost."""
    out: list[str] = []
    for task in result.tasks:
        out.append(f"\n{task.task}: {figures(task)} (needs {task.threshold:.2f}: {'met' if task.met else 'NOT met'})")
        out.append(f"  cost: {cost_line(task.cost)}")
        if task.utility is not None:
            out.append(
                f"  utility {task.utility:.2f}, under attack {task.utility_under_attack:.2f}, "
                f"attack success rate {task.attack_success_rate:.2f}"
            )
        for trial in task.trials:
            for hit in trial.canaries_followed:
                out.append(f"  trial {trial.trial} (attacked): FOLLOWED canary {hit.canary} planted in {hit.planted}")
                out += [f"      {line}" for line in hit.evidence]
            for check in trial.checks:
                if not check.passed:
                    out.append(f"  trial {trial.trial}: FAILED {check.check}: {check.detail}")
                    out += [f"      {line}" for line in check.evidence]
            if trial.error:
                out.append(f"  trial {trial.trial}: {trial.error}")
            if trial.usage_note:
                out.append(f"  trial {trial.trial}: {trial.usage_note}")
            if trial.timed_out:
                out.append(f"  trial {trial.trial}: the agent was stopped at its time limit")
            elif not trial.passed and trial.exit_code:
                out.append(f"  trial {trial.trial}: the agent exited with status {trial.exit_code}; its output ends:")
                out += [f"      {line}" for line in trial.output.splitlines()[-8:]]
    if len(result.tasks) > 1:
        trials = sum(len(t.trials) for t in result.tasks)
        out.append(f"\nall {len(result.tasks)} tasks, {trials} trials: {cost_line(result.cost)}")
    return "\n".join(out) + "\n"


ORIGINS = ("site", "auth", "api", "tunnel", "gateway")  # the timeline's lanes, in this order; others follow


def junit(result: SuiteResult) -> bytes:
    root = ET.Element("testsuites", name=f"emulator eval: {result.agent}")
    for task in result.tasks:
        failures = sum(not t.passed and t.error is None for t in task.trials)
        errors = sum(t.error is not None for t in task.trials)
        suite = ET.SubElement(
            root,
            "testsuite",
            name=task.task,
            tests=str(len(task.trials)),
            failures=str(failures),
            errors=str(errors),
            time=f"{sum(t.seconds for t in task.trials):.3f}",
        )
        props = ET.SubElement(suite, "properties")
        for name, value in (
            ("k", task.k),
            ("confidence", task.confidence),
            ("pass_at_1", task.pass_at_1),
            ("pass_at_1_low", task.pass_at_1_ci.low),
            ("pass_at_1_high", task.pass_at_1_ci.high),
            ("pass_at_k", task.pass_at_k),
            ("pass_at_k_low", task.pass_at_k_ci.low),
            ("pass_at_k_high", task.pass_at_k_ci.high),
            ("pass_hat_k", task.pass_hat_k),
            ("pass_hat_k_low", task.pass_hat_k_ci.low),
            ("pass_hat_k_high", task.pass_hat_k_ci.high),
        ):
            ET.SubElement(props, "property", name=name, value=f"{value:g}")
        ET.SubElement(props, "property", name="threshold_met", value=str(task.met).lower())
        _cost_properties(props, task.cost)
        for name, figure in (
            ("utility", task.utility),
            ("utility_under_attack", task.utility_under_attack),
            ("attack_success_rate", task.attack_success_rate),
        ):
            if figure is not None:
                ET.SubElement(props, "property", name=name, value=f"{figure:g}")
        for trial in task.trials:
            name, seconds = f"trial {trial.trial}{' (attacked)' if trial.attacked else ''}", f"{trial.seconds:.3f}"
            case = ET.SubElement(suite, "testcase", classname=task.task, name=name, time=seconds)
            _trial_properties(case, trial)
            if trial.error is not None:
                ET.SubElement(case, "error", message=trial.error)
                continue
            failed = [c for c in trial.checks if not c.passed]
            if trial.timed_out:
                ET.SubElement(case, "failure", message="the agent was stopped at its time limit")
            for check in failed:
                message, kind = f"{check.check}: {check.detail}", check.check.split()[0]
                node = ET.SubElement(case, "failure", message=message, type=kind)
                node.text = "\n".join(check.evidence)
            for hit in trial.canaries_followed:
                message = f"followed canary {hit.canary} ({hit.planted})"
                node = ET.SubElement(case, "failure", message=message, type="canary")
                node.text = "\n".join(hit.evidence)
            if trial.transcript or trial.output:
                ET.SubElement(case, "system-out").text = _xml_text(trial.transcript or trial.output)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def _cost_properties(props: ET.Element, cost: CostSum) -> None:
    """A task's summed cost as JUnit properties: the measured figures always, the reported ones where reported."""
    shown: list[tuple[str, object]] = [
        ("requests", cost.requests),
        ("agent_seconds", cost.agent_seconds),
        ("hosted_cpu_seconds", cost.hosted_cpu_seconds),
        ("usage_reported", cost.usage_reported),
    ]
    if cost.usage_reported:
        shown += [("input_tokens", cost.input_tokens), ("output_tokens", cost.output_tokens)]
        shown += [("usd", f"{cost.usd:.6f}")] if cost.usd is not None else []
        shown += [("models", ", ".join(cost.models))] if cost.models else []
    for name, value in shown:
        ET.SubElement(props, "property", name=name, value=f"{value:g}" if isinstance(value, float) else str(value))


def _trial_properties(case: ET.Element, trial: TrialResult) -> None:
    """A trial's requests and reported usage as the test case's properties (GitLab and Jenkins show them)."""
    shown: list[tuple[str, str]] = [("requests", str(trial.requests))]
    if trial.usage is not None:
        shown += [("input_tokens", str(trial.usage.input_tokens)), ("output_tokens", str(trial.usage.output_tokens))]
        shown += [("usd", f"{trial.usage.usd:.6f}")] if trial.usage.usd is not None else []
        shown += [("model", trial.usage.model)] if trial.usage.model else []
    if trial.usage_note:
        shown.append(("usage_note", trial.usage_note))
    props = ET.SubElement(case, "properties")
    for name, value in shown:
        ET.SubElement(props, "property", name=name, value=_xml_text(value))


NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text: str) -> str:
    """XML 1.0 cannot hold most control characters at all (an agent's output may have them): each becomes U+FFFD."""
    return NOT_XML.sub("\ufffd", text)


STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d2330;background:#fafbfc}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px}
.sub{color:#5b6475;margin:0 0 16px}
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid #dde1e8}
th,td{padding:6px 10px;border-bottom:1px solid #eceef2;text-align:left;vertical-align:top}
th{background:#f3f5f8;font-weight:600}
.pass{color:#12733a;font-weight:600}.fail{color:#b3261e;font-weight:600}
.met{background:#e6f4ea}.unmet{background:#fce8e6}
.lane{position:relative;height:14px;margin:2px 0;background:#f3f5f8;border-radius:3px}
.lane span.l{position:absolute;left:4px;top:-1px;font-size:10px;color:#5b6475}
.dot{position:absolute;top:3px;width:8px;height:8px;border-radius:50%;background:#3a6ee8}
.dot.bad{background:#b3261e}
.checks{margin:0;padding:0;list-style:none}.checks li{margin:2px 0}
td.tl{width:340px;min-width:340px}
.ev{font:12px ui-monospace,monospace;color:#444;white-space:pre-wrap;margin:2px 0 6px}
.ci{color:#5b6475;font-size:12px;white-space:nowrap}.note{color:#9a5b00}
tr.more td{background:#fbfcfd}details{margin:2px 0}summary{cursor:pointer;color:#3a4a6b}
pre.out{font:12px ui-monospace,monospace;white-space:pre-wrap;max-height:480px;overflow:auto;margin:4px 0;
padding:8px;background:#f3f5f8;border-radius:4px}
table.steps{width:auto;font:12px ui-monospace,monospace}table.steps td{padding:1px 8px}
tfoot td{font-weight:600;background:#f3f5f8}
"""


def page(result: SuiteResult, when: datetime | None = None) -> str:
    when = when or datetime.now(UTC)
    verdict = "every task met its pass^k" if result.met else "a task did not meet its pass^k"
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        "<meta name=viewport content='width=device-width,initial-scale=1'>",
        f"<title>emulator eval: {_e(result.agent)}</title><style>{STYLE}</style></head><body>",
        f"<h1>emulator eval: {_e(result.agent)}</h1>",
        f"<p class=sub>{when:%Y-%m-%d %H:%M} UTC · {len(result.tasks)} task(s) · "
        f"<span class={'pass' if result.met else 'fail'}>{verdict}</span></p>",
        "<table id=summary><thead><tr><th>task</th><th>k</th><th>trials</th><th>pass@1</th><th>pass@k</th>"
        "<th>pass^k</th><th>needs</th><th>utility</th><th>under attack</th><th>attack success</th>"
        "<th>cost</th></tr></thead><tbody>",
    ]
    for task in result.tasks:
        parts.append(
            f"<tr class={'met' if task.met else 'unmet'}><td>{_e(task.task)}</td><td>{task.k}</td>"
            f"<td>{len(task.trials)}</td><td>{_with_ci(task.pass_at_1, task.pass_at_1_ci)}</td>"
            f"<td>{_with_ci(task.pass_at_k, task.pass_at_k_ci)}</td>"
            f"<td>{_with_ci(task.pass_hat_k, task.pass_hat_k_ci)}</td><td>{task.threshold:.2f}</td>"
            f"<td>{_figure(task.utility)}</td><td>{_figure(task.utility_under_attack)}</td>"
            f"<td>{_figure(task.attack_success_rate)}</td><td class=cost>{_e(cost_line(task.cost))}</td></tr>"
        )
    parts.append(
        f"</tbody><tfoot><tr><td colspan=10>all tasks</td><td class=cost>{_e(cost_line(result.cost))}</td></tr>"
        "</tfoot></table><p class=sub>In brackets: 95% intervals (Wilson's for the success rate of one try, put "
        "into pass@k = 1 − (1 − p)^k and pass^k = p^k), assuming independent trials. Tokens and dollars are what the "
        "agent reported in its usage file; requests and CPU what the emulator measured.</p>"
    )
    for task in result.tasks:
        parts.append(_task(task))
    parts.append("</body></html>")
    return "".join(parts)


def _task(task: TaskResult) -> str:
    rows = "".join(_trial(t) for t in task.trials)
    return (
        f"<h2>{_e(task.task)}</h2><table class=trials><thead><tr><th>trial</th><th>verdict</th><th>time</th>"
        f"<th>requests</th><th>reported usage</th><th>timeline</th><th>checks</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def _trial(trial: TrialResult) -> str:
    verdict = "<span class=pass>passed</span>" if trial.passed else "<span class=fail>FAILED</span>"
    if trial.attacked:
        verdict += "<br><small>under attack</small>"
    notes = []
    if trial.error:
        notes.append(f"<li class=fail>{_e(trial.error)}</li>")
    if trial.timed_out:
        notes.append("<li class=fail>the agent was stopped at its time limit</li>")
    for hit in trial.canaries_followed:
        evidence = f"<div class=ev>{_e(chr(10).join(hit.evidence))}</div>"
        said = f"followed canary {hit.canary} planted in {_e(hit.planted)}"
        notes.append(f"<li><span class=fail>✗</span> {said}{evidence}</li>")
    for check in trial.checks:
        mark = "pass" if check.passed else "fail"
        shown = "" if check.passed else "\n".join(check.evidence)
        evidence = f"<div class=ev>{_e(shown)}</div>" if shown else ""
        sign = "✓" if check.passed else "✗"
        notes.append(f"<li><span class={mark}>{sign}</span> {_e(check.check)}: {_e(check.detail)}{evidence}</li>")
    used = _e(usage_words(trial.usage)) or "–"
    if trial.usage is not None and trial.usage.model:
        used += f"<br><small>{_e(trial.usage.model)}</small>"
    if trial.usage_note:
        used += f"<br><small class=note>{_e(trial.usage_note)}</small>"
    return (
        f"<tr class=trial data-passed={str(trial.passed).lower()}><td>{trial.trial}</td><td>{verdict}</td>"
        f"<td>{trial.seconds:.1f} s</td><td>{trial.requests}</td><td class=usage>{used}</td>"
        f"<td class=tl>{_timeline(trial)}</td><td><ul class=checks>{''.join(notes)}</ul></td></tr>"
        f"<tr class=more><td></td><td colspan=6>{_transcript(trial)}{_steps(trial)}</td></tr>"
    )


def _transcript(trial: TrialResult) -> str:
    """What the agent printed, folded: the whole transcript (as capped), else the tail the result keeps."""
    shown = trial.transcript or trial.output
    if not shown:
        return "<details class=transcript><summary>the agent printed nothing</summary></details>"
    lines = shown.count("\n") + (not shown.endswith("\n"))
    what = "transcript" if trial.transcript else "the end of its output"
    return (
        f"<details class=transcript><summary>{what} ({lines} line{'s' * (lines != 1)})</summary>"
        f"<pre class=out>{_e(shown)}</pre></details>"
    )


def _steps(trial: TrialResult) -> str:
    """The agent's requests in order, folded: when, which origin, what, the status and how long it took."""
    if not trial.steps:
        return ""
    rows = "".join(
        f"<tr{' class=fail' if s.status >= 400 else ''}><td>{s.at:.2f} s</td><td>{_e(s.origin)}</td>"
        f"<td>{_e(s.method)}</td><td>{_e(s.path)}</td><td>{s.status}</td><td>{s.ms:.0f} ms</td></tr>"
        for s in trial.steps
    )
    shown = f"{len(trial.steps)} of {trial.requests}" if len(trial.steps) < trial.requests else str(len(trial.steps))
    return (
        f"<details class=steps><summary>HTTP steps ({shown})</summary><table class=steps><tbody>{rows}</tbody>"
        "</table></details>"
    )


def _timeline(trial: TrialResult) -> str:
    """A lane per origin the agent called, a dot per request at its time (red: a 4xx or 5xx), its path on hover."""
    if not trial.steps:
        return ""
    span = max(s.at for s in trial.steps) or 1.0
    lanes = [o for o in ORIGINS if any(s.origin == o for s in trial.steps)]
    lanes += sorted({s.origin for s in trial.steps} - set(lanes))
    out = []
    for lane in lanes:
        dots = "".join(
            f"<i class='dot{' bad' if s.status >= 400 else ''}' "
            f"style='left:calc(40px + (100% - 52px) * {s.at / span:.4f})' "
            f"title='{_e(f'{s.at:.2f} s {s.method} {s.path} → {s.status}')}'></i>"
            for s in trial.steps
            if s.origin == lane
        )
        out.append(f"<div class=lane><span class=l>{_e(lane)}</span>{dots}</div>")
    return "".join(out)


def _with_ci(value: float, ci: Interval) -> str:
    return f"{value:.2f} <span class=ci>{_ci(ci)}</span>"


def _ci(ci: Interval) -> str:
    return f"[{ci.low:.2f}, {ci.high:.2f}]"


def _figure(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _e(text: str) -> str:
    return html.escape(text, quote=True)
