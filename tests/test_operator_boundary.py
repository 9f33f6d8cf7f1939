"""The operator API (`/_emulator`) answers one spelling of each path, and only within the boundary's rules.

Every operator route, read from the site's own OpenAPI document, is asked for by a generated set of other
spellings (prefixes, doubled slashes, escapes, case, trailing dots and slashes, dot segments) with every method,
on every origin's port, with and without the admin token and from a foreign page: each answer is 401, 403 or
404, none carries `Access-Control-Allow-Origin`, and nothing changed.
"""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import FROZEN_AT, Emulator

TOKEN = "an-admin-token-of-32-characters!"
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
EVIL = "https://evil.example"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    e = Emulator(
        tmp_path_factory.mktemp("guarded"),
        ["--no-watch", "--freeze-clock", FROZEN_AT],
        env={"EMULATOR_ADMIN_TOKEN": TOKEN},
    ).start()
    yield e
    e.stop()


@pytest.fixture(scope="module")
def open_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    e = Emulator(tmp_path_factory.mktemp("open"), ["--no-watch", "--freeze-clock", FROZEN_AT]).start()
    yield e
    e.stop()


def operator_routes(e: Emulator, headers: dict[str, str]) -> list[tuple[str, list[str]]]:
    """Each operator path of the site's OpenAPI document, its parameters filled in, with its methods."""
    doc = httpx.get(e.url + "/schema/openapi.json", headers=headers, timeout=20).json()
    routes = []
    templates = [t for t in doc["paths"] if t.startswith("/_emulator")]
    # a spelling that is itself another resource's path (`/_emulator/snapshots/import.` is the snapshot named
    # `import.`) is not a second spelling of anything
    _TEMPLATES[:] = [re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", t.replace(".", r"\.")) + "$") for t in templates]
    for path, item in doc["paths"].items():
        if path.startswith("/_emulator"):
            filled = re.sub(r"\{[^}]+\}", "x1", path)
            routes.append((filled, [m.upper() for m in item if m.upper() in METHODS]))
    assert len(routes) >= 40, routes  # the whole operator API, not a few
    return routes


_TEMPLATES: list[re.Pattern[str]] = []


def spellings(path: str) -> list[str]:
    """Other spellings of an operator path that a lax router or decoder could route to it."""
    rest = path.removeprefix("/_emulator")
    out = [
        "/v1" + path,
        "/v1/" + path,
        "//" + path.lstrip("/"),
        "///" + path.lstrip("/"),
        "/_emulator/" + rest,
        path + "/",
        path + "//",
        path + ".",
        "/_emulator." + rest,
        "/%2F_emulator" + rest,
        "/%5Femulator" + rest,
        "/v1/%5Femulator" + rest,
        "/_%65mulator" + rest,
        "/%5F%65mulator" + rest,
        "/_emulator%2F" + rest.lstrip("/"),
        "/_EMULATOR" + rest,
        "/_Emulator" + rest,
        path.upper(),
        "/./" + path.lstrip("/"),
        "/x/../" + path.lstrip("/"),
        "/_emulator/./" + rest.lstrip("/"),
        "/V1" + path,
        "/v1//" + path.lstrip("/"),
    ]
    if rest.count("/") > 1:
        head, _, tail = rest.rpartition("/")
        out.append(f"/_emulator{head}//{tail}")
    return [s for s in out if not any(t.match(s) for t in _TEMPLATES)]


def send(
    conn: http.client.HTTPConnection, method: str, path: str, headers: dict[str, str]
) -> tuple[int, dict[str, str]]:
    """The request with its path exactly as written (no client-side normalisation)."""
    body = b"{}" if method in ("POST", "PUT", "PATCH") else None
    sent = {**headers, "Content-Type": "application/json"} if body is not None else headers
    conn.request(method, path, body=body, headers=sent)
    r = conn.getresponse()
    r.read()
    return r.status, {k.lower(): v for k, v in r.getheaders()}


def connect(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=20)


def state_of(e: Emulator, headers: dict[str, str]) -> tuple[object, ...]:
    """What a request that got through could have changed: the clock, the switches, the snapshots, service keys."""
    with httpx.Client(base_url=e.url, headers=headers, timeout=20) as c:
        return tuple(c.get(p).json() for p in ("/_emulator/clock", "/_emulator/switches", "/_emulator/service-keys"))


def walk(e: Emulator, token_headers: dict[str, str]) -> list[str]:
    """Every route × spelling × its methods and a preflight, without the token and with it (from a foreign page
    too); every method with the token; on the other origins (which serve no operator route), each route's spellings
    read with the token: the wrong answers."""
    routes = operator_routes(e, token_headers)
    foreign = {**token_headers, "Origin": EVIL}
    plan: list[tuple[str, str, str, dict[str, str]]] = []
    for path, methods in routes:
        for n, spelled in enumerate(spellings(path)):
            # every method on one spelling in three (the rest: the route's own, a read and a preflight)
            for method in METHODS if n % 3 == 0 else sorted({*methods, "GET", "OPTIONS"}):
                plan.append((e.url, method, spelled, token_headers))
            for method in {*methods, "OPTIONS"}:
                plan += [(e.url, method, spelled, {}), (e.url, method, spelled, foreign)]
            for origin in (e.auth, e.api):
                plan.append((origin, "GET", spelled, token_headers))
        for origin in (e.auth, e.api):
            plan.append((origin, "GET", path, token_headers))
    wrong: list[str] = []
    conns = {origin: connect(origin) for origin in (e.url, e.auth, e.api)}
    for origin, method, spelled, headers in plan:
        status, head = send(conns[origin], method, spelled, headers)
        if status not in (401, 403, 404) or "access-control-allow-origin" in head:
            wrong.append(f"{method} {origin}{spelled} {sorted(headers)} -> {status} {head}")
    for conn in conns.values():
        conn.close()
    assert len(plan) > 4000
    return wrong


def test_no_other_spelling_reaches_the_operator_api(guarded: Emulator) -> None:
    token = {"Authorization": f"Bearer {TOKEN}"}
    before = state_of(guarded, token)
    wrong = walk(guarded, token)
    assert not wrong, f"{len(wrong)} spellings answered: " + "\n".join(wrong[:20])
    assert state_of(guarded, token) == before
    # the one spelling: without the token 401 (saying how to send it), with it the answer
    with httpx.Client(base_url=guarded.url, timeout=20) as c:
        refused = c.get("/_emulator/status")
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert "access-control-allow-origin" not in refused.headers
        for scheme in ("Bearer", "bearer", "BEARER"):
            assert c.get("/_emulator/status", headers={"Authorization": f"{scheme} {TOKEN}"}).status_code == 200
        assert c.get("/_emulator/status", headers={"X-Emulator-Token": TOKEN}).status_code == 200
        assert c.get("/_emulator/status", headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401


def test_without_a_token_no_page_reads_or_drives_it_by_any_spelling(open_emulator: Emulator) -> None:
    e = open_emulator
    before = state_of(e, {})
    # from a foreign page, every spelling is refused (403) or not served (404), and never readable (no CORS)
    page = {"Origin": EVIL}
    conn = connect(e.url)
    for path, _ in operator_routes(e, {}):
        for spelled in [path, *spellings(path)[::3]]:
            for method in ("GET", "POST", "OPTIONS"):
                status, head = send(conn, method, spelled, page)
                assert status in (403, 404), (method, spelled, status)
                assert "access-control-allow-origin" not in head, (method, spelled)
    # the JSON-only rule holds on every spelling: a text/plain POST with no Origin changes nothing
    for spelled in ("/_emulator/switches", "/v1/_emulator/switches", "//_emulator/switches"):
        conn.request("POST", spelled, body=b'{"trials_enabled": false}', headers={"Content-Type": "text/plain"})
        r = conn.getresponse()
        r.read()
        assert r.status in (404, 415), (spelled, r.status)
    conn.close()
    assert state_of(e, {}) == before


def test_the_public_api_still_answers_its_other_spellings(open_emulator: Emulator) -> None:
    """Only the operator API is strict: /v1 and trimmed slashes keep working for the agent API."""
    with httpx.Client(base_url=open_emulator.url, timeout=20) as c:
        for path in ("/v1/ask", "/ask", "/ask/"):
            r = c.get(path, params={"query": "embedding index"})
            assert r.status_code == 200, path
            assert r.headers["access-control-allow-origin"] == "*"


def test_the_layer_rule_is_written_once(tmp_path: Path) -> None:
    """The spelling rule lives in the boundary; the operator router checks the token itself as well."""
    from emulator.core import boundary

    assert boundary.route("//v1//_emulator/status/", strip_v1=True) == "/_emulator/status"
    assert boundary.is_operator("/_EMULATOR/x") and boundary.is_operator("/v1/_emulator")
    assert not boundary.canonical("/%5Femulator/status", "/_emulator/status")
    assert boundary.canonical("/_emulator/traces/a%40b.example", "/_emulator/traces/a@b.example")
    assert boundary.canonical("/_emulator/traces/a%2Fb", "/_emulator/traces/a/b")  # a parameter's own slash
    assert not boundary.canonical("/_emulator%2Ftraces/x", "/_emulator/traces/x")
