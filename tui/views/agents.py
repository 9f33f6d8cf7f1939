"""Agents: each registration (or organization no registration made) with its trial, request and error counts,
p50/p95 latency and its scorecard, from `/_emulator/report`. Enter shows its findings and its trace."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from emulator.behaviour.scorecard import Card
from emulator.behaviour.traces import Trace
from emulator.core.payloads import failed
from tui.model import Model
from tui.views.table import Row, TableView


def ms(value: float | None) -> str:
    # A fixed width: the columns' widths (and a narrow table's scrollbar) do not move with the latencies measured.
    return "—" if value is None else f"{value:>8.1f} ms"


def verdict(card: Card) -> Text:
    if card.clean:
        return Text("clean", style="green")
    rules = sorted({f.rule for f in card.findings})
    return Text(f"{len(card.findings)}: {', '.join(rules)}", style="bold red")


UNATTRIBUTED = "(unattributed)"


class AgentsView(TableView):
    TITLE = "Agents (enter: scorecard and trace)"
    COLUMNS: ClassVar[list[str]] = ["Agent", "Type", "Trial", "Requests", "Errors", "p50", "p95", "Scorecard"]
    EMPTY = "no agent yet: one appears when it registers or gets an organization"
    NARROW_FIRST: ClassVar[list[str]] = ["Agent", "Type", "Trial", "Scorecard"]
    ID_COLUMNS: ClassVar[frozenset[str]] = frozenset({"Agent"})

    def rows(self, model: Model) -> list[Row]:
        nobody = model.unattributed
        apart: list[Row] = []
        if nobody and nobody.requests:
            apart = [
                (
                    UNATTRIBUTED,
                    [
                        Text("(unattributed)", style="dim"),
                        Text("no credential", style="dim"),
                        Text("—", style="dim"),
                        str(nobody.requests),
                        Text(str(nobody.errors), style="red" if nobody.errors else ""),
                        "—",
                        "—",
                        Text("not judged", style="dim"),
                    ],
                )
            ]
        return [
            (
                c.agent,
                [
                    c.agent,
                    c.type or "—",
                    ", ".join(c.orgs) or Text("—", style="dim"),
                    str(c.requests),
                    Text(str(c.errors), style="red" if c.errors else ""),
                    ms(c.p50_ms),
                    ms(c.p95_ms),
                    verdict(c),
                ],
            )
            for c in model.agents
        ] + apart

    def details(self, model: Model, key: str) -> list[tuple[str, str | Text]] | None:
        if key == UNATTRIBUTED and model.unattributed:
            nobody = model.unattributed
            return [
                ("Requests", f"{nobody.requests} ({nobody.errors} errors) that carried no credential"),
                ("From", ", ".join(nobody.addresses) or "—"),
                (
                    "Why apart",
                    "a person's browser or curl, discovery reads, registrations and pxt login's polls "
                    "name no agent: an address may be any agent's or a person's, so they are counted, not judged",
                ),
            ]
        card = next((c for c in model.agents if c.agent == key), None)
        if card is None:
            return None
        fields: list[tuple[str, str | Text]] = [
            ("Agent", card.agent),
            ("Type", card.type or "—"),
            ("Organizations", ", ".join(card.orgs) or "—"),
            (
                "Requests",
                f"{card.requests} ({card.errors} errors), p50 {ms(card.p50_ms)}, p95 {ms(card.p95_ms)}",
            ),
            ("Scorecard", verdict(card)),
        ]
        for f in card.findings:
            evidence = ", ".join(f"#{s}" for s in f.evidence)
            fields.append((f.rule, Text.assemble((f.detail, "red"), f"\n{f.why}  [{evidence}]")))
        return fields


def trace_lines(trace: Trace, limit: int = 400) -> Text:
    """The trace's steps, one line each, errors in red (the detail pane's last field)."""
    out = Text()
    steps = trace.steps
    if len(steps) > limit:
        out.append(f"({len(steps) - limit} earlier steps not shown; emulator trace {trace.agent.id})\n", "dim")
    for s in steps[-limit:]:
        status = s.status
        style = "red" if failed(status, s.data.get("error_code")) else ""
        cell = "" if status is None else ("drop" if status == 0 else str(status))
        took = "" if s.ms is None else f"{s.ms:.0f}ms"
        out.append(f"#{s.seq:<6} {s.at[11:19]} {s.origin:<7} {cell:>4} {took:>6}  {s.what}\n", style)
    return out
