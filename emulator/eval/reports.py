"""An evaluation's result for CI and for people: JUnit XML (a test suite per task, a test case per trial, each failing
check a failure with its evidence), and one self-contained HTML page (no script, no request anywhere: it opens from
a CI artifact as it is) with a row per trial, its timeline of requests across the emulator's origins, and its
failing checks inline."""

from __future__ import annotations

import html
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

from emulator.eval.results import SuiteResult, TaskResult, TrialResult

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
        for name, value in (("pass_at_1", task.pass_at_1), ("pass_hat_k", task.pass_hat_k), ("k", task.k)):
            ET.SubElement(props, "property", name=name, value=f"{value:g}")
        ET.SubElement(props, "property", name="threshold_met", value=str(task.met).lower())
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
            if trial.output:
                ET.SubElement(case, "system-out").text = trial.output
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


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
        "<table id=summary><thead><tr><th>task</th><th>trials</th><th>pass@1</th><th>pass^k</th><th>needs</th>"
        "<th>utility</th><th>under attack</th><th>attack success</th></tr></thead><tbody>",
    ]
    for task in result.tasks:
        parts.append(
            f"<tr class={'met' if task.met else 'unmet'}><td>{_e(task.task)}</td><td>{task.k}</td>"
            f"<td>{task.pass_at_1:.2f}</td><td>{task.pass_hat_k:.2f}</td><td>{task.threshold:.2f}</td>"
            f"<td>{_figure(task.utility)}</td><td>{_figure(task.utility_under_attack)}</td>"
            f"<td>{_figure(task.attack_success_rate)}</td></tr>"
        )
    parts.append("</tbody></table>")
    for task in result.tasks:
        parts.append(_task(task))
    parts.append("</body></html>")
    return "".join(parts)


def _task(task: TaskResult) -> str:
    rows = "".join(_trial(t) for t in task.trials)
    return (
        f"<h2>{_e(task.task)}</h2><table class=trials><thead><tr><th>trial</th><th>verdict</th><th>time</th>"
        f"<th>requests</th><th>timeline</th><th>checks</th></tr></thead><tbody>{rows}</tbody></table>"
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
    return (
        f"<tr class=trial data-passed={str(trial.passed).lower()}><td>{trial.trial}</td><td>{verdict}</td>"
        f"<td>{trial.seconds:.1f} s</td><td>{trial.requests}</td><td class=tl>{_timeline(trial)}</td>"
        f"<td><ul class=checks>{''.join(notes)}</ul></td></tr>"
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


def _figure(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _e(text: str) -> str:
    return html.escape(text, quote=True)
