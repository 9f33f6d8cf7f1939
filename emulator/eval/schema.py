"""The JSON Schema of `task.toml`, made from the structs tasks.py decodes it with, then told what the structs check
elsewhere: the settings a task may choose and their types, the journal's event kinds, the scorecard's rules, the
kinds `collateral` knows, a moment's one of `advance` or `fault`, and the bounds `load` holds numbers to.

The package ships it as `emulator/eval/task.schema.json` (`emulator eval --schema` prints it); a test holds that file
to what this module makes now. After changing a struct:

    python -m emulator.eval.schema > emulator/eval/task.schema.json
"""

from __future__ import annotations

import json
from typing import TypeAlias

import msgspec

from emulator import config
from emulator.behaviour.scorecard import RULES
from emulator.eval.inventory import KINDS
from emulator.eval.tasks import EVENT_KINDS, TASK_SETTINGS, TaskFile

# A JSON value (here: a JSON Schema, or a part of one).
Json: TypeAlias = "str | int | float | bool | list[Json] | dict[str, Json] | None"
JsonObject: TypeAlias = dict[str, Json]

_JSON_TYPE = {bool: "boolean", int: "integer", float: "number", str: "string"}
# What the clock API's `advance` takes (core/clock.py parse_duration), forward only: 90, 90s, 15m, 1h30m, 2d.
DURATION = r"^\+?(\d+(\.\d*)?|(\d+(\.\d*)?[smhdw])+)$"


def generate() -> JsonObject:
    schema: JsonObject = msgspec.json.schema(TaskFile)
    defs = _object(schema["$defs"])

    def props(name: str) -> JsonObject:
        return _object(_object(defs[name])["properties"])

    def prop(name: str, field: str) -> JsonObject:
        return _object(props(name)[field])

    emulator = props("EmulatorSection")
    emulator["settings"] = {
        "type": "object",
        "description": "The trial emulator's settings (`emulator up --help`); those the trial decides are not here.",
        "properties": {name: _setting(name) for name in TASK_SETTINGS},
        "additionalProperties": False,
    }
    prop("EmulatorSection", "trials")["minimum"] = 1
    prop("EmulatorSection", "pass_k").update({"minimum": 0, "maximum": 1})
    prop("AgentSection", "timeout_sec")["exclusiveMinimum"] = 0
    prop("EventCheck", "kind")["enum"] = list[Json](EVENT_KINDS)
    _object(prop("Canary", "events")["items"])["enum"] = list[Json](EVENT_KINDS)
    _object(prop("ScorecardCheck", "allow")["items"])["enum"] = [rule.id for rule in RULES]
    _object(prop("CollateralCheck", "may_change")["items"])["pattern"] = f"^({'|'.join(KINDS)})(:.+)?$"
    moment = props("Moment")
    prop("Moment", "at")["exclusiveMinimum"] = 0
    moment["advance"] = {
        "description": "a clock move: seconds, or a duration such as 90s, 15m, 48h, 2d",
        "anyOf": [{"type": "string", "pattern": DURATION}, {"type": "number", "exclusiveMinimum": 0}],
    }
    moment["fault"] = {"$ref": "#/$defs/FaultSpec"}
    _object(defs["Moment"])["oneOf"] = [{"required": ["advance"]}, {"required": ["fault"]}]
    # Draft 7, which every editor's validator reads (taplo's too); `#/$defs/...` references are plain pointers there.
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "task.toml of `emulator eval`",
        "description": "An evaluation task in Harbor's layout; [emulator] is the emulator's own section.",
        **schema,
    }


def _setting(name: str) -> JsonObject:
    types: list[Json] = [_JSON_TYPE[t] for t in config.toml_types(name)]
    types = ["number"] if types == ["integer", "number"] else types
    out: JsonObject = {"type": types[0] if len(types) == 1 else types, "description": config.HELP[name]}
    if name in config.CHOICES:
        out["enum"] = list[Json](config.CHOICES[name])
    return out


def _object(value: Json) -> JsonObject:
    """A part of the schema that msgspec makes an object (a definition, its properties, one property)."""
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object in the generated schema, got {value!r}")
    return value


def text() -> str:
    """The schema as the shipped file holds it."""
    return json.dumps(generate(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(text(), end="")
