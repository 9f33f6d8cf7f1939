"""The fault rules armed now (`/_emulator/faults`, `emulator fault list`): what each matches, what it does, when it
fires, how often it matched and fired; holds below them. `x` removes the selected rule, `X` every rule and hold."""

from __future__ import annotations

from typing import ClassVar

import msgspec
from rich.text import Text

from emulator.admin.wire import FaultRuleView
from tui.model import Model
from tui.views.table import Row, TableView

# A rule's fields that say what it matches, in the order they read.
_MATCH = ("origin", "method", "operation_type", "path")


def matches(rule: FaultRuleView) -> str:
    if rule.hosted:
        return rule.target or "—"
    return " ".join(str(getattr(rule, k)) for k in _MATCH if getattr(rule, k)) or "every request"


def effect(rule: FaultRuleView) -> str:
    if rule.hosted:
        what = rule.hosted
    elif rule.drop:
        what = "drop"
    elif rule.status:
        what = str(rule.status) + (f" Retry-After {rule.retry_after}" if rule.retry_after else "")
    else:
        what = ""
    if rule.latency_ms:
        what = f"{what} +{rule.latency_ms} ms".strip()
    return what


def when(rule: FaultRuleView) -> str:
    parts = [f"from call {rule.nth}"] if rule.nth > 1 else []
    parts.append(f"{rule.count}×" if rule.count else "until removed")
    if rule.probability is not None:
        parts.append(f"p={rule.probability:g} seed {rule.seed}")
    return ", ".join(parts)


def hold_key(path: str) -> str:
    return f"hold:{path}"


class FaultsView(TableView):
    TITLE = "Fault rules"
    COLUMNS: ClassVar[list[str]] = ["Rule", "Matches", "Effect", "When", "Matched", "Fired", "Message"]
    EMPTY = "no fault rules (emulator fault add …)"

    def rows(self, model: Model) -> list[Row]:
        rows: list[Row] = [
            (
                r.id,
                [
                    r.id,
                    matches(r),
                    Text(effect(r), style="bold red" if r.status or r.drop or r.hosted else ""),
                    when(r),
                    str(r.seen),
                    str(r.fired),
                    Text(r.message or "", style="dim"),
                ],
            )
            for r in model.faults
        ]
        for path, count in model.holds.items():
            rows.append((hold_key(path), ["hold", path, "hold until released", f"next {count}", "", "", ""]))
        for path in model.waiting:
            rows.append(
                (f"waiting:{path}", [Text("held", style="yellow"), path, "waiting for a release", "", "", "", ""])
            )
        return rows

    def details(self, model: Model, key: str) -> list[tuple[str, str | Text]] | None:
        r = next((r for r in model.faults if r.id == key), None)
        if r is None:
            return None
        fields: list[tuple[str, str | Text]] = [
            ("Rule", r.id),
            ("Matches", matches(r)),
            ("Effect", effect(r)),
            ("When", when(r)),
            ("Matched", f"{r.seen} calls"),
            ("Fired", f"{r.fired} times"),
        ]
        shown = {"id", "seen", "fired"}
        # Every field as the API has it: those declared (a field left at its default is not sent).
        fields += [(k, str(v)) for k, v in msgspec.to_builtins(r).items() if k not in shown]
        fields.append(("Remove", Text(f"emulator fault clear {r.id}", style="dim")))
        return fields
