"""The examples run against a live emulator, so they cannot rot."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import Emulator

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_ask_agent_example(emu: Emulator) -> None:
    r = subprocess.run(
        [sys.executable, str(EXAMPLES / "ask_agent.py"), "embedding", "index"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "EMULATOR_URL": emu.url},
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert 'RateLimit: "ask";r=' in out
    assert "event begin-nlweb-response" in out and "event complete" in out
    assert "MCP server pixeltable-web speaks 2025-06-18" in out
    assert "tools: search_docs, list_integrations" in out
    assert f"{emu.url}/docs/concepts/embedding" in out


def test_trial_agent_example(emu: Emulator) -> None:
    r = subprocess.run(
        [sys.executable, str(EXAMPLES / "trial_agent.py"), "ceo@example.org"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PIXELTABLE_SITE_URL": emu.url},
    )
    assert r.returncode == 0, r.stderr + r.stdout
    out = r.stdout
    assert f"resource {emu.url} trusts {emu.auth}" in out
    assert "scopes before a claim: ['public:read', 'free_tier:read']" in out
    assert "access token for 300 s" in out
    assert re.search(r"the trial's API key works: \['agent-[0-9a-f]{6}'\]", out)
    assert "is now claimed" in out
    assert "HTTP 403: this registration was claimed" in out
