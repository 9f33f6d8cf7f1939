"""The JSON Schema of `task.toml`, made from the structs tasks.py decodes it with, then told what the structs check
elsewhere: the settings a task may choose and their types, the journal's event kinds, the scorecard's rules, the
kinds `collateral` knows, a moment's one of `advance` or `fault`, and the bounds `load` holds numbers to.

The package ships it as `emulator/eval/task.schema.json` (`emulator eval --schema` prints it); a test holds that file
to what this module makes now. After changing a struct:

    python -m emulator.eval.schema > emulator/eval/task.schema.json
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from emulator import config
from emulator.behaviour.scorecard import RULES
from emulator.eval.inventory import KINDS
from emulator.eval.tasks import EVENT_KINDS, TASK_SETTINGS, TaskFile

_JSON_TYPE = {bool: "boolean", int: "integer", float: "number", str: "string"}
# What the clock API's `advance` takes (core/clock.py parse_duration), forward only: 90, 90s, 15m, 1h30m, 2d.
DURATION = r"^\+?(\d+(\.\d*)?|(\d+(\.\d*)?[smhdw])+)$"


def generate() -> dict[str, Any]:
    schema = msgspec.json.schema(TaskFile)
    defs: dict[str, Any] = schema["$defs"]

    def props(name: str) -> dict[str, Any]:
        return defs[name]["properties"]

    emulator = props("EmulatorSection")
    emulator["settings"] = {
        "type": "object",
        "description": "The trial emulator's settings (`emulator up --help`); those the trial decides are not here.",
        "properties": {name: _setting(name) for name in TASK_SETTINGS},
        "additionalProperties": False,
    }
    emulator["trials"]["minimum"] = 1
    emulator["pass_k"] |= {"minimum": 0, "maximum": 1}
    props("AgentSection")["timeout_sec"]["exclusiveMinimum"] = 0
    props("EventCheck")["kind"]["enum"] = list(EVENT_KINDS)
    props("Canary")["events"]["items"]["enum"] = list(EVENT_KINDS)
    props("ScorecardCheck")["allow"]["items"]["enum"] = [rule.id for rule in RULES]
    props("CollateralCheck")["may_change"]["items"]["pattern"] = f"^({'|'.join(KINDS)})(:.+)?$"
    moment = props("Moment")
    moment["at"]["exclusiveMinimum"] = 0
    moment["advance"] = {
        "description": "a clock move: seconds, or a duration such as 90s, 15m, 48h, 2d",
        "anyOf": [{"type": "string", "pattern": DURATION}, {"type": "number", "exclusiveMinimum": 0}],
    }
    moment["fault"] = {"$ref": "#/$defs/FaultSpec"}
    defs["Moment"]["oneOf"] = [{"required": ["advance"]}, {"required": ["fault"]}]
    # Draft 7, which every editor's validator reads (taplo's too); `#/$defs/...` references are plain pointers there.
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "task.toml of `emulator eval`",
        "description": "An evaluation task in Harbor's layout; [emulator] is the emulator's own section.",
        **schema,
    }


def _setting(name: str) -> dict[str, Any]:
    types = [_JSON_TYPE[t] for t in config.toml_types(name)]
    types = ["number"] if types == ["integer", "number"] else types
    out: dict[str, Any] = {"type": types[0] if len(types) == 1 else types, "description": config.HELP[name]}
    if name in config.CHOICES:
        out["enum"] = list(config.CHOICES[name])
    return out


def text() -> str:
    """The schema as the shipped file holds it."""
    return json.dumps(generate(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(text(), end="")
