"""The official MCP conformance suite's server scenarios against `/mcp`, for both revisions it serves.

`@modelcontextprotocol/conformance` (pinned) runs what a revision requires, on that revision's wire: 2025-11-25's
initialize handshake, and 2026-07-28's stateless requests (server/discover, per-request `_meta`, mirrored headers,
cache hints). /mcp offers both by default and tells them apart per request, so one emulator is tested for each.
The suite needs Node >= 22, so Node itself comes from npm next to it, in a cache dir reused across runs. `/mcp`
takes no credential (tests/test_mcp.py calls it bare), so the suite needs no token. Failures the emulator cannot
pass, because the suite calls fixture tools, resources and prompts that /mcp does not have, are listed check by
check in each revision's expected-failures file; any other failing check fails this test, and so does a listed
check that now passes.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Emulator, free_ports

SUITE_VERSION = "0.2.0-alpha.12"
NODE_VERSION = "22.23.3"  # the suite's `engines`: node >= 22; the machine's own Node may be older
PINS = {"@modelcontextprotocol/conformance": SUITE_VERSION, "node": NODE_VERSION}
# Each revision /mcp serves, and the failures expected of it (fixture tools, prompts, resources it has not).
EXPECTED = {
    "2025-11-25": Path(__file__).with_name("mcp_conformance_expected.yaml"),
    "2026-07-28": Path(__file__).with_name("mcp_conformance_expected_2026.yaml"),
}
# Checks of the stateless era that must pass, whatever the expected-failures file says: the envelope's rules.
MUST_PASS_2026 = {
    "server-stateless": (
        "sep-2575-server-implements-discover",
        "sep-2575-request-meta-invalid-missing-meta",
        "sep-2575-server-unsupported-version-error",
        "sep-2575-http-server-header-mismatch-400",
        "sep-2575-http-server-method-not-found-404",
        "sep-2575-http-server-error-jsonrpc-id",
        "sep-2575-http-server-method-not-found-404-initialize",
    ),
    "http-header-validation": ("sep-2243-server-reject-invalid-headers", "sep-2243-server-reject-error-code"),
    "caching": ("sep-2549-tools-list-caching-hints", "sep-2549-ttl-non-negative", "sep-2549-cache-scope-valid"),
}
DNS_REBINDING = "dns-rebinding-protection"
SCENARIO_TIMEOUT_MS = 30_000  # per scenario, enforced by the suite; the whole run is bounded below
RUN_TIMEOUT = 300.0
INSTALL_TIMEOUT = 600.0
# The suite only talks to the emulator on loopback: a proxy from the environment must not carry it.
_PROXY_VARS = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}
# The suite judges a baseline this way: FAILURE and WARNING fail, INFO is no verdict (see `_verdicts`).
_SEVERITY = {"FAILURE": 3, "WARNING": 2, "SUCCESS": 1}


@dataclass(frozen=True)
class Suite:
    node: Path
    script: Path


def _cache_dir() -> Path:
    return Path.home() / ".cache" / "pxt-emulator" / f"mcp-conformance-{SUITE_VERSION}"


def _suite_in(root: Path) -> Suite:
    # The package's bin has `#!/usr/bin/env node`, which would pick the machine's Node: run its script with ours.
    return Suite(
        root / "node_modules" / ".bin" / "node",
        root / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js",
    )


def _run(cmd: list[str], timeout: float, **kw: Any) -> str:
    """stdout of a command that must succeed; on failure, everything it printed."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _check(suite: Suite) -> None:
    """The install works: our Node is the pinned one and runs the pinned suite."""
    node = _run([str(suite.node), "--version"], 60).strip()
    assert node == f"v{NODE_VERSION}", f"node from npm reports {node!r}, not v{NODE_VERSION}"
    version = _run([str(suite.node), str(suite.script), "--version"], 60).strip()
    assert version == SUITE_VERSION, f"the conformance suite reports {version!r}, not {SUITE_VERSION}"


def _install(dest: Path) -> None:
    """npm install into a staging dir beside `dest`, check it, then rename it into place (atomic): an
    interrupted install leaves only a staging dir, which the next run deletes, never a `dest` to trust."""
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not on PATH: it installs Node 22 and the MCP conformance suite")
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent))
    try:
        (staging / "package.json").write_text(json.dumps({"private": True, "dependencies": PINS}, indent=2) + "\n")
        # npm's own cache goes in the staging dir too (and away with it), so nothing is written under ~/.npm.
        env = {**os.environ, "npm_config_cache": str(staging / ".npm-cache"), "npm_config_update_notifier": "false"}
        _run([npm, "install", "--no-audit", "--no-fund"], INSTALL_TIMEOUT, cwd=staging, env=env)
        shutil.rmtree(staging / ".npm-cache", ignore_errors=True)
        _check(_suite_in(staging))
        (staging / ".complete").write_text(json.dumps(PINS) + "\n")
        staging.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@pytest.fixture(scope="session")
def conformance() -> Suite:
    """Node 22 and the pinned suite, installed once into the cache dir (a lock keeps parallel runs apart)."""
    dest = _cache_dir()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for leftover in dest.parent.glob(f".{dest.name}.*.partial"):
            shutil.rmtree(leftover, ignore_errors=True)
        marker = dest / ".complete"
        if not (marker.is_file() and json.loads(marker.read_text()) == PINS):
            shutil.rmtree(dest, ignore_errors=True)
            _install(dest)
    return _suite_in(dest)


def _load_results(out: Path) -> dict[str, list[dict[str, Any]]]:
    """scenario → its checks, from the `server-<scenario>-<timestamp>/checks.json` the suite writes."""
    results: dict[str, list[dict[str, Any]]] = {}
    for path in out.glob("server-*/checks.json"):
        match = re.fullmatch(r"server-(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z", path.parent.name)
        assert match, f"unexpected result dir {path.parent.name}"
        results[match.group(1)] = json.loads(path.read_text())
    return results


def _verdicts(checks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """check id → its most severe occurrence (ids repeat in loops; INFO is no verdict), as the suite judges."""
    worst: dict[str, dict[str, Any]] = {}
    for check in checks:
        rank = _SEVERITY.get(check["status"], 0)
        if rank and rank >= _SEVERITY.get(worst.get(check["id"], {}).get("status", ""), 0):
            worst[check["id"]] = check
    return worst


def _judge(results: dict[str, list[dict[str, Any]]], expected: list[str]) -> list[str]:
    """Every scenario run, scored or not (the suite scores only the revision's required ones): unexpected
    failures, listed checks that pass, and entries that name a scenario that did not run."""
    whole = {e for e in expected if ":" not in e}
    per_check = {e for e in expected if ":" in e}
    problems: list[str] = []
    for scenario, checks in sorted(results.items()):
        verdicts = _verdicts(checks)
        for check_id, check in verdicts.items():
            entry = f"{scenario}:{check_id}"
            if check["status"] != "SUCCESS" and scenario not in whole and entry not in per_check:
                reason = check.get("errorMessage") or check.get("details") or check.get("description")
                problems.append(f"unexpected {check['status']}: {entry}: {reason}")
        if scenario in whole and all(c["status"] == "SUCCESS" for c in verdicts.values()):
            problems.append(f"stale expected failure (the scenario passes; remove it): {scenario}")
    for entry in sorted(per_check):
        scenario, check_id = entry.split(":", 1)
        verdict = _verdicts(results.get(scenario, [])).get(check_id)
        if verdict is not None and verdict["status"] == "SUCCESS":
            problems.append(f"stale expected failure (the check passes; remove it): {entry}")
    for scenario in sorted({e.split(":", 1)[0] for e in expected} - results.keys()):
        problems.append(f"expected failure for a scenario that did not run: {scenario}")
    return problems


@pytest.mark.parametrize("revision", sorted(EXPECTED))
def test_mcp_conformance_server_scenarios(emu: Emulator, conformance: Suite, tmp_path: Path, revision: str) -> None:
    expected: list[str] = yaml.safe_load(EXPECTED[revision].read_text())["server"]
    assert not [e for e in expected if e.split(":", 1)[0] == DNS_REBINDING], "DNS rebinding protection must pass"
    out = tmp_path / "results"
    cmd = [str(conformance.node), str(conformance.script), "server", "--url", f"{emu.url}/mcp"]
    cmd += ["--requirements", revision, "--expected-failures", str(EXPECTED[revision])]
    cmd += ["--timeout", str(SCENARIO_TIMEOUT_MS), "--output-dir", str(out)]
    env = {k: v for k, v in os.environ.items() if k.lower() not in _PROXY_VARS}
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the conformance suite did not finish within {RUN_TIMEOUT:.0f} s:\n{e.stdout}\n{e.stderr}")
    output = f"$ {' '.join(cmd)}\n{run.stdout}\n{run.stderr}"

    results = _load_results(out)
    problems: list[str] = []
    # The suite's own verdict on the scenarios the revision requires (its exit code: 1 on an unexpected
    # failure or a stale entry, also on a malformed expected-failures file).
    if run.returncode != 0:
        problems.append(f"the suite exited with {run.returncode}")
    # A scenario that crashes is reported in the suite's summary but writes no checks.json: count them.
    announced = re.search(r"^Running .* \((\d+) scenarios\) against ", run.stdout, re.M)
    ran = re.findall(r"^=== Running scenario: (\S+) ===$", run.stdout, re.M)
    if announced is None or len(ran) != int(announced.group(1)) or set(ran) != results.keys():
        count = announced and announced.group(1)
        problems.append(f"scenarios announced: {count}; run: {ran}; with results: {sorted(results)}")
    problems += _judge(results, expected)
    # DNS rebinding protection, directly: a foreign Host/Origin is refused with a 4xx, our own is served.
    dns = _verdicts(results.get(DNS_REBINDING, []))
    rejected = dns.get("localhost-host-rebinding-rejected", {})
    accepted = dns.get("localhost-host-valid-accepted", {})
    if not (rejected.get("status") == accepted.get("status") == "SUCCESS"):
        problems.append(f"{DNS_REBINDING} did not pass: {json.dumps(dns, indent=1)[:2000]}")
    elif not 400 <= rejected["details"]["statusCode"] < 500:
        problems.append(f"{DNS_REBINDING}: the foreign Host got {rejected['details']['statusCode']}, not a 4xx")
    if revision == "2026-07-28":
        for scenario, must in MUST_PASS_2026.items():
            verdicts = _verdicts(results.get(scenario, []))
            failed = [c for c in must if verdicts.get(c, {}).get("status") != "SUCCESS"]
            if failed:
                problems.append(f"{scenario}: the stateless envelope's checks {failed} did not all pass")
    assert not problems, "\n".join(problems) + "\n\n" + output


def test_mcp_conformance_authorization_server_metadata(emu: Emulator, conformance: Suite, tmp_path: Path) -> None:
    """The suite's `authorization` command against the identity provider's issuer: its server metadata scenario
    passes (authorization_endpoint, response_types_supported, code_challenge_methods_supported). Its
    authorization-code-grant scenario is test_mcp_conformance_authorization_code_grant's."""
    out = tmp_path / "results"
    scenario = "authorization-server-metadata-endpoint"
    cmd = [str(conformance.node), str(conformance.script), "authorization", "--url", emu.auth]
    cmd += ["--scenario", scenario, "--output-dir", str(out)]
    env = {k: v for k, v in os.environ.items() if k.lower() not in _PROXY_VARS}
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    output = f"$ {' '.join(cmd)}\n{run.stdout}\n{run.stderr}"
    found = list(out.glob(f"authorization-server-{scenario}-*/checks.json"))
    assert run.returncode == 0 and len(found) == 1, output
    checks = json.loads(found[0].read_text())
    assert checks and all(c["status"] == "SUCCESS" for c in checks), output + json.dumps(checks, indent=2)[:4000]


CONFORMANCE_CLIENT = "conformance-client"


def test_mcp_conformance_authorization_code_grant(start_emulator: Any, conformance: Suite, tmp_path: Path) -> None:
    """The suite's authorization-code-grant scenario, with a client the `loopback_clients` setting pre-registers (the
    suite's client has no metadata document): it prints the authorization URL and waits for its loopback callback;
    this test is the person's browser (the sign-in page, its form posted back, the redirect followed), and the suite
    exchanges the code with PKCE and checks the token response."""
    import httpx

    from tests.test_authorization_code import hidden_fields

    emu = start_emulator("--no-watch", "--loopback-clients", CONFORMANCE_CLIENT)
    out = tmp_path / "results"
    scenario = "authorization-code-grant"
    cmd = [str(conformance.node), str(conformance.script), "authorization", "--url", emu.auth]
    cmd += ["--client-id", CONFORMANCE_CLIENT, "--resource", emu.url]  # every scenario: this one reads the metadata's
    cmd += ["--port", free_ports(1)[0], "--output-dir", str(out)]
    env = {k: v for k, v in os.environ.items() if k.lower() not in _PROXY_VARS}
    suite = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    printed: list[str] = []
    try:
        assert suite.stdout is not None
        for line in suite.stdout:  # the suite prints the URL, then waits (5 minutes at most) for the callback
            printed.append(line)
            if line.startswith(emu.auth + "/oauth2/authorize?"):
                break
        else:
            raise AssertionError("the suite printed no authorization URL:\n" + "".join(printed))
        with httpx.Client(timeout=20, trust_env=False) as browser:
            page = browser.get(line.strip())
            assert page.status_code == 200, page.text
            form = {**hidden_fields(page.text), "email": "conformance@example.com", "decision": "approve"}
            r = browser.post(emu.auth + "/oauth2/authorize", data=form, headers={"Origin": emu.auth})
            assert r.status_code == 303, r.text
            assert browser.get(r.headers["location"]).status_code == 200  # the suite's callback server
        rest, err = suite.communicate(timeout=120)
    finally:
        if suite.poll() is None:
            suite.kill()
            suite.wait()
    output = f"$ {' '.join(cmd)}\n{''.join(printed)}{rest}\n{err}"
    found = list(out.glob(f"authorization-server-{scenario}-*/checks.json"))
    assert suite.returncode == 0 and len(found) == 1, output
    checks = json.loads(found[0].read_text())
    assert checks and all(c["status"] == "SUCCESS" for c in checks), output + json.dumps(checks, indent=2)[:4000]
