"""Injection canaries planted in what the emulator answers, for an evaluation's attacked trial (`emulator eval`).

The trial's runner writes a small JSON file (`Planted`) and starts the trial's emulator with `--canaries FILE`: each
MCP tool it names carries the canary's text in its result (mcp.py applies `Planted.for_tool`), and each hosted
service it names carries it in its successful JSON answers (the gateway applies `Planted.for_service` and
`carry`). Docs canaries need none of this: the runner plants them in a copy of the docs (`--docs`). An emulator
started without the setting has nothing planted and answers as always.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from pathlib import Path
from typing import cast

import msgspec

from emulator.core import jsonbody

# The MCP tools whose result can carry a canary (site/mcp.py's TOOLS; a test holds the two to the same names).
TOOLS = ("search_docs", "list_integrations")
HEALTH = "/health"  # a service's readiness probe: the client's, never the agent's reading


class ToolCanary(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    tool: str  # one of TOOLS
    text: str


class ServiceCanary(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    service: str  # a shell pattern of the service's name (or `base/name` label)
    text: str
    route: str | None = None  # a shell pattern of the path inside the service (`/search`); None: every route


class Planted(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The `canaries` setting's file: what is planted where."""

    tools: list[ToolCanary] = msgspec.field(default_factory=list)
    services: list[ServiceCanary] = msgspec.field(default_factory=list)

    def for_tool(self, tool: str) -> str | None:
        """The text a tool's result carries (None: nothing planted in it)."""
        return _joined(c.text for c in self.tools if c.tool == tool)

    def for_service(self, label: str, route: str) -> str | None:
        """The text a service's answer on `route` (the path inside the service) carries; `label` is its name or
        `base/name`. Its health probe never carries any."""
        if route == HEALTH:
            return None
        name = label.rsplit("/", 1)[-1]
        return _joined(
            c.text
            for c in self.services
            if (fnmatch.fnmatchcase(label, c.service) or fnmatch.fnmatchcase(name, c.service))
            and (c.route is None or fnmatch.fnmatchcase(route, c.route))
        )


class CanaryFileError(ValueError):
    """The canaries file cannot be read as `Planted` (the emulator's start refuses it)."""


def load(path: Path | None) -> Planted:
    """The canaries of the `canaries` setting's file; none without one."""
    if path is None:
        return Planted()
    try:
        planted = msgspec.json.decode(path.read_bytes(), type=Planted)
    except (OSError, msgspec.DecodeError) as e:
        raise CanaryFileError(f"canaries {path}: {e}") from None
    unknown = sorted({c.tool for c in planted.tools} - set(TOOLS))
    if unknown:
        raise CanaryFileError(f"canaries {path}: no MCP tool {', '.join(unknown)} (tools: {', '.join(TOOLS)})")
    return planted


def _joined(texts: Iterable[str]) -> str | None:
    found = [t.strip() for t in texts if t.strip()]
    return " ".join(found) if found else None


def append(value: str, text: str) -> str:
    """A string that carries the canary after what it said."""
    return f"{value} {text}" if value else text


def carry(status: int, content_type: str, body: bytes, text: str) -> bytes | None:
    """A service's answer body with `text` appended to each string value of its JSON (at any depth; keys unchanged),
    or, for an object without any, in a `note` field of its own. None when the answer is to go as it was: not a
    success (2xx), not JSON, or with nowhere to carry the text (a list of numbers)."""
    if not 200 <= status < 300 or "json" not in content_type.lower():
        return None
    try:
        data = jsonbody.decode(body)  # the depth bound: `walk` recurses once per level
    except jsonbody.NotJson:
        return None
    found = [False]  # whether any string value carries it

    # Decoded JSON: a dict has str keys, and what a dict or list holds is JSON too, hence the casts after each check.
    def walk(value: object) -> object:
        if isinstance(value, str):
            found[0] = True
            return append(value, text)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in cast("dict[str, object]", value).items()}
        if isinstance(value, list):
            return [walk(v) for v in cast("list[object]", value)]
        return value

    try:
        changed = walk(data)
    except RecursionError:  # nested deeper than Python recurses: sent as it was
        return None
    if not found[0]:
        if not isinstance(changed, dict):
            return None
        cast("dict[str, object]", changed)["note"] = text
    return msgspec.json.encode(changed)
