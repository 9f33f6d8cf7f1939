"""The documentation site's generated reference pages (docs/gen_reference.py), rendered as the build renders them."""

from __future__ import annotations

import importlib.util
import io
from functools import cache
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


@cache
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def page(name: str) -> str:
    """The Markdown of `reference/NAME.md` (every page but the OpenAPI one, which needs a running emulator)."""
    out = io.StringIO()
    generator().PAGES[name](out)
    return out.getvalue()


def table_rows(markdown: str) -> list[list[str]]:
    """The cells of every table row (the header's and the rule's left out), code spans unwrapped."""
    rows = []
    for line in markdown.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            rows.append([c.strip().strip("`") for c in line.strip().strip("|").split(" | ")])
    return rows
