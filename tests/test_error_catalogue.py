"""Error codes match their status everywhere (issue 44, item 6).

The catalogue (`core/errors.py`) names each kind of refusal once with its status and code. Walked here: no code
belongs to two statuses; every failure, sent through every origin's formatter (the site's envelope, which the
operator API shares, the identity provider's registration, OAuth and WorkOS bodies, the control plane's plain text
and each origin's gate), shows its status's own code, beyond the documented narrowings (the site's 400s show one of
the spec's four codes; the control plane names only a plan's code, else the status's phrase); and a refusal known
only by its status (an injected fault, the framework's own) shows that status's code. Then against a running
emulator: a 503 fault armed on each origin answers `service_unavailable` in that origin's format.

Formats with no code at all are left out: the trial endpoint's `{"message"}`, MCP's JSON-RPC errors, the HTML
pages, the gateways' and the tunnel's. The operator API's 401 without its admin token (`unauthorized`, with
`WWW-Authenticate`) is checked here in-process; against a running emulator, by
tests/test_operator_boundary.py::test_no_other_spelling_reaches_the_operator_api.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from http import HTTPStatus
from typing import Any, cast

import httpx
import pytest
from litestar import Response

from emulator.cloud import app as cloud
from emulator.core import errors
from emulator.core.boundary import Boundary
from emulator.core.errors import ApiError, Failure, code_for
from emulator.core.faults import Verdict
from emulator.idp import agents, login, routes
from emulator.site import errors as site
from tests.conftest import FROZEN_AT, Emulator

CATALOGUE: dict[str, Failure] = {name: f for name, f in vars(errors).items() if isinstance(f, Failure)}
ERROR_STATUSES = [s.value for s in HTTPStatus if 400 <= s.value <= 599]
# Each status's own codes: the catalogue's failures of that status, and its code for a refusal known by status only.
OWN: dict[int, set[str]] = {}
for _f in CATALOGUE.values():
    OWN.setdefault(_f.status, {code_for(_f.status)}).add(_f.code)
NO_REQUEST = cast(Any, None)  # the formatters read nothing of the request


def _json(r: Response[Any]) -> Any:
    content = r.content
    return content if isinstance(content, dict) else json.loads(content)


# What a formatter makes of an error: its status (None for a gate's: the gate sends the error's) and the codes its
# body and headers show.
Shown = tuple[int | None, list[str]]


def _site(e: ApiError) -> Shown:
    r = site.error_response(e)
    error = _json(r)["error"]
    assert error["status"] == r.status_code
    return r.status_code, [error["code"]]


def _site_gate(e: ApiError) -> Shown:
    kind, body = site.boundary_error(e)
    assert kind == b"application/json"
    return None, [json.loads(body)["error"]["code"]]


def _registration(e: ApiError) -> Shown:
    r = routes.registration_error(NO_REQUEST, e)
    body = _json(r)
    return r.status_code, [body["code"], body["error"]]


def _idp_gate(e: ApiError) -> Shown:
    kind, body = routes.boundary_error(e)
    assert kind == b"application/json"
    shown = json.loads(body)
    return None, [shown["code"], shown["error"]]


def _oauth(e: ApiError) -> Shown:
    r = routes.oauth_error(NO_REQUEST, e)
    body = _json(r)
    assert body["error_description"] == e.message
    return r.status_code, [body["error"]]


def _device_oauth(e: ApiError) -> Shown:
    r = login.oauth_error(NO_REQUEST, e)
    return r.status_code, [_json(r)["error"]]


def _workos(e: ApiError) -> Shown:
    r = agents.workos_error(NO_REQUEST, e)
    body = _json(r)
    return r.status_code, [body["code"], body["error"]]


def _cloud(e: ApiError) -> Shown:
    r = cloud.plain_error(NO_REQUEST, e)
    assert isinstance(r.content, str) and r.content.startswith(f"{HTTPStatus(r.status_code).phrase} : ")
    header = (r.headers or {}).get("X-Pixeltable-Error-Code")
    return r.status_code, [] if header is None else [header]


def _cloud_gate(e: ApiError) -> Shown:
    kind, body = cloud.boundary_error(e)
    assert kind.startswith(b"text/plain") and body.decode().startswith(f"{HTTPStatus(e.status).phrase} : ")
    return None, []


def _as_is(f: Failure) -> list[str]:
    return [f.code]


def _site_narrowed(f: Failure) -> list[str]:
    """The site's spec shows four codes for the refusals it lists: a 400 shows one of them (`site/errors.py`)."""
    return [f.code if f.code in site.CODES or f.status != 400 else "bad_request"]


def _plan_only(f: Failure) -> list[str]:
    """The control plane names a plan's code (`X-Pixeltable-Error-Code`); any other refusal, its status's phrase."""
    return [f.code] if f.code in cloud.PLAN_CODES else []


def _phrase_only(_: Failure) -> list[str]:
    """The control plane's gate renders a body only, its status's phrase: what it refuses (a boundary's refusal, an
    injected fault) is never a plan's."""
    return []


FORMATTERS: dict[str, tuple[Callable[[ApiError], Shown], Callable[[Failure], list[str]]]] = {
    "site and operator API": (_site, _site_narrowed),
    "site gate": (_site_gate, _site_narrowed),
    "idp registration": (_registration, _as_is),
    "idp gate": (_idp_gate, _as_is),
    "idp oauth": (_oauth, _as_is),
    "idp device flow": (_device_oauth, _as_is),
    "idp workos": (_workos, _as_is),
    "cloud": (_cloud, _plan_only),
    "cloud gate": (_cloud_gate, _phrase_only),
}
# What each origin's fault gate renders an injected fault with (core/faultgate.py).
GATES = {"site": _site_gate, "auth": _idp_gate, "api": _cloud_gate}


def test_no_code_belongs_to_two_statuses() -> None:
    owner: dict[str, int] = {}
    for status in ERROR_STATUSES:
        assert owner.setdefault(code_for(status), status) == status, f"{status} and {owner[code_for(status)]}"
    for name, f in CATALOGUE.items():
        held = owner.setdefault(f.code, f.status)
        assert held == f.status, f"{name} ({f.status}) has the code {f.code!r} of {held}"
    assert len(CATALOGUE) >= 48 and len(OWN) >= 16  # the walk reads the whole catalogue


def test_a_status_names_its_own_code() -> None:
    assert (code_for(503), errors.UNAVAILABLE.code) == ("service_unavailable", "service_unavailable")
    assert (code_for(410), errors.GONE.code) == ("gone", "gone")
    assert (code_for(404), code_for(401), code_for(418)) == ("not_found", "unauthorized", "im_a_teapot")
    # the catalogue's generic failure of a status is the one a status-only refusal shows
    for f in CATALOGUE.values():
        assert code_for(f.status) in OWN[f.status]


@pytest.mark.parametrize("formatter", FORMATTERS)
def test_every_failure_shows_its_status_code_in_every_format(formatter: str) -> None:
    render, documented = FORMATTERS[formatter]
    wrong = []
    for name, f in CATALOGUE.items():
        status, codes = render(f("why it was refused"))
        if status not in (None, f.status) or set(codes) != set(documented(f)) or not set(codes) <= OWN[f.status]:
            wrong.append(f"{name} ({f.status} {f.code}) -> {status} {codes}")
    assert not wrong, wrong


@pytest.mark.parametrize("formatter", FORMATTERS)
def test_a_refusal_known_by_its_status_shows_that_status_code(formatter: str) -> None:
    render, _ = FORMATTERS[formatter]
    for status in ERROR_STATUSES:
        _, codes = render(ApiError(status, code_for(status), "m"))
        assert all(c == code_for(status) for c in codes), (formatter, status, codes)
        if formatter.startswith(("site", "idp")):
            assert codes, (formatter, status)  # these formats always show a code


@pytest.mark.parametrize("origin", GATES)
def test_an_injected_fault_shows_its_status_code_in_the_origins_format(origin: str) -> None:
    for status in ERROR_STATUSES:
        error = Verdict("f1", status, "injected", 5 if status in (429, 503) else None, False).error()
        assert (error.status, error.code, error.retryable) == (status, code_for(status), status in (429, 503))
        _, codes = GATES[origin](error)
        assert all(c == code_for(status) for c in codes), (origin, status, codes)
    unset = Verdict("f1", None, "injected", None, False).error()  # a rule with no status answers 503
    assert (unset.status, unset.code) == (503, "service_unavailable")


def test_the_operator_api_without_its_token_is_401_unauthorized_with_www_authenticate() -> None:
    refused = Boundary(frozenset(), frozenset(), "an-admin-token").check("GET", "/_emulator/status", {})
    assert refused is not None and refused.headers["WWW-Authenticate"].startswith("Bearer")
    status, codes = _site(refused)
    assert (status, codes) == (401, ["unauthorized"])


# --- against a running emulator: a 503 fault on each origin -------------------------------------------------


@pytest.fixture(scope="module")
def ce(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    e = Emulator(tmp_path_factory.mktemp("catalogue"), ["--no-watch", "--freeze-clock", FROZEN_AT]).start()
    yield e
    e.stop()


@pytest.fixture
def faulted(ce: Emulator) -> Iterator[Emulator]:
    yield ce
    ce.admin().delete("/_emulator/faults").raise_for_status()  # a rule left by a failed test fires no further


def arm(e: Emulator, origin: str, path: str) -> None:
    rule = {"origin": origin, "path": path, "status": 503, "retry_after": 7, "count": 1, "message": "down for a test"}
    r = e.admin().post("/_emulator/faults", json=rule)
    assert r.status_code == 201, r.text


def site_code(r: httpx.Response) -> list[str]:
    error = r.json()["error"]
    assert error["status"] == 503 and error["retryable"] is True and error["message"] == "down for a test"
    return [error["code"]]


def idp_code(r: httpx.Response) -> list[str]:
    body = r.json()  # the registration protocol's body: WorkOS reads `code`, OAuth `error`
    assert body["message"] == "down for a test"
    return [body["code"], body["error"]]


def oauth_code(r: httpx.Response) -> list[str]:
    """OAuth's format (RFC 6749 §5.2), as the token endpoint answers its own refusals: the gate's answer too."""
    assert r.json() == {"error": "service_unavailable", "error_description": "down for a test"}
    return [r.json()["error"]]


def trial_message(r: httpx.Response) -> list[str]:
    """The trial endpoint's own format, `{"message"}`, which names no code: the status is the code it shows."""
    assert r.json() == {"message": "down for a test"}
    return ["service_unavailable"]


def cloud_code(r: httpx.Response) -> list[str]:
    assert r.headers["content-type"].startswith("text/plain")
    assert r.text == "Service Unavailable : down for a test"  # the status's phrase: the code it shows
    assert "x-pixeltable-error-code" not in r.headers  # named only for a plan's refusal
    return ["service_unavailable"]


@pytest.mark.parametrize(
    ("origin", "method", "path", "read"),
    [
        ("site", "GET", "/ask?q=tables", site_code),
        ("site", "POST", "/api/v1/trial-orgs", trial_message),
        ("auth", "POST", "/agent/identity", idp_code),
        ("auth", "POST", "/oauth2/token", oauth_code),
        ("auth", "POST", "/oauth2/revoke", oauth_code),
        ("auth", "POST", "/user_management/authenticate", oauth_code),
        ("auth", "GET", "/agents/registrations/reg_1", idp_code),
        ("api", "POST", "/", cloud_code),
    ],
)
async def test_a_503_fault_says_service_unavailable_on_each_origin(
    faulted: Emulator, origin: str, method: str, path: str, read: Callable[[httpx.Response], list[str]]
) -> None:
    arm(faulted, origin, path.partition("?")[0])
    base = {"site": faulted.url, "auth": faulted.auth, "api": faulted.api}[origin]
    async with faulted.client() as c:
        r = await c.request(method, base + path, json={})
        assert r.status_code == 503 and r.headers["retry-after"] == "7"
        assert set(read(r)) == {"service_unavailable"}
        again = await c.request(method, base + path, json={})  # the rule fired once: the origin answers itself
        assert again.status_code != 503
