"""The fault rules armed now (`/_emulator/faults`, `emulator fault list`): what each matches, what it does, when it
fires, how often it matched and fired; holds below them. `x` removes the selected rule, `X` every rule and hold."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text

from tui.model import Model
from tui.views.table import Row, TableView

# A rule's fields that say what it matches, in the order they read.
_MATCH = ("origin", "method", "operation_type", "path")


def matches(rule: dict[str, Any]) -> str:
    if rule.get("hosted"):
        return rule.get("target") or "—"
    return " ".join(str(rule[k]) for k in _MATCH if rule.get(k)) or "every request"


def effect(rule: dict[str, Any]) -> str:
    if rule.get("hosted"):
        what = str(rule["hosted"])
    elif rule.get("drop"):
        what = "drop"
    elif rule.get("status"):
        what = str(rule["status"]) + (f" Retry-After {rule['retry_after']}" if rule.get("retry_after") else "")
    else:
        what = ""
    if rule.get("latency_ms"):
        what = f"{what} +{rule['latency_ms']} ms".strip()
    return what


def when(rule: dict[str, Any]) -> str:
    parts = [f"from call {rule['nth']}"] if rule.get("nth", 1) > 1 else []
    parts.append(f"{rule['count']}×" if rule.get("count") else "until removed")
    if rule.get("probability") is not None:
        parts.append(f"p={rule['probability']:g} seed {rule.get('seed')}")
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
                r["id"],
                [
                    r["id"],
                    matches(r),
                    Text(effect(r), style="bold red" if r.get("status") or r.get("drop") or r.get("hosted") else ""),
                    when(r),
                    str(r["seen"]),
                    str(r["fired"]),
                    Text(r.get("message") or "", style="dim"),
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
        r = next((r for r in model.faults if r["id"] == key), None)
        if r is None:
            return None
        fields: list[tuple[str, str | Text]] = [
            ("Rule", r["id"]),
            ("Matches", matches(r)),
            ("Effect", effect(r)),
            ("When", when(r)),
            ("Matched", f"{r['seen']} calls"),
            ("Fired", f"{r['fired']} times"),
        ]
        shown = {"id", "seen", "fired"}
        fields += [(k, str(v)) for k, v in r.items() if k not in shown]  # every field, as the API has it
        fields.append(("Remove", Text(f"emulator fault clear {r['id']}", style="dim")))
        return fields
