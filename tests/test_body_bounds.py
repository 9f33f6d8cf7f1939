"""Request bodies are bounded on every origin: a total deadline from a request's first byte to its body's last (a
body that drips is cut off with 408, its descriptor freed), a size bound (413 in the origin's format), and JSON
nested deeper than the decoders' bound (bodies, and a token's header or claims) is a clean 400, never a
RecursionError."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests import agent_flow as flow
from tests.conftest import FROZEN_AT, Emulator

DEADLINE = 2.0  # the emulator's http_body_deadline here
SLACK = 6.0  # a busy machine's; a body that drips every 0.5 s would otherwise be held indefinitely
MAX_BODY = 262_144  # above a 50,000-deep token (133 KB as base64)
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"
DEEP = 50_000


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    e = Emulator(
        tmp_path_factory.mktemp("bounded"),
        [
            "--no-watch",
            "--freeze-clock",
            FROZEN_AT,
            "--identity-assertion-registration",
            "--http-body-deadline",
            str(DEADLINE),
            "--http-max-body-bytes",
            str(MAX_BODY),
        ],
    ).start()
    yield e
    e.stop()


@pytest.fixture(scope="module")
def api_key(bounded: Emulator) -> str:
    """A trial's key: the control plane reads a body only from a caller it knows."""

    async def make() -> str:
        async with bounded.client() as c:
            _, _, trial = await flow.new_trial(c, bounded)
            return str(trial["api_key"])

    return asyncio.run(make())


def _origin(e: Emulator, name: str) -> str:
    return {"site": e.url, "auth": e.auth, "api": e.api}[name]


def _head(url: str, path: str, length: int = 100, key: str = "") -> tuple[tuple[str, int], bytes]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\nContent-Type: application/json\r\n"
        + (f"X-api-key: {key}\r\n" if key else "")
        + f"Content-Length: {length}\r\n\r\n"
    )
    return (parts.hostname, parts.port), head.encode()


def drip(url: str, path: str, key: str = "", every: float = 0.5, give_up: float = 15.0) -> tuple[float, bytes]:
    """Send a request's head announcing 100 bytes of body, then one byte every `every` seconds until the emulator
    answers or closes: (seconds until it closed, what it answered)."""
    address, head = _head(url, path, key=key)
    began = time.monotonic()
    answer = b""
    with socket.create_connection(address, timeout=5) as sock:
        sock.sendall(head)
        sock.settimeout(every)
        while time.monotonic() - began < give_up:
            try:
                sock.sendall(b" ")  # JSON whitespace: never a whole body
            except OSError:
                pass  # closed for writing: the answer (if any) is still to be read
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break  # reset: closed
            if not chunk:
                break
            answer += chunk
        return time.monotonic() - began, answer


@pytest.mark.parametrize(
    ("origin", "path"),
    [("site", "/mcp"), ("site", "/ask"), ("auth", "/agent/identity"), ("api", "/")],
)
def test_a_dripping_body_is_cut_off_at_its_deadline_with_408(
    bounded: Emulator, api_key: str, origin: str, path: str
) -> None:
    took, answer = drip(_origin(bounded, origin), path, api_key if origin == "api" else "")
    assert took < DEADLINE + SLACK, f"held {took:.1f} s"
    assert took >= DEADLINE - 0.5  # the deadline, not an earlier refusal
    status, _, body = answer.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 408 "), answer
    assert b"connection: close" in status.lower()
    if origin == "site":  # the site's envelope
        error = json.loads(body)["error"]
        assert error["status"] == 408 and error["code"] == "request_timeout"  # the code says what the status does
    elif origin == "auth":  # the identity provider's {code, message, error}
        refused = json.loads(body)
        assert refused["code"] == refused["error"] == "request_timeout" and "http_body_deadline" in refused["message"]
    else:  # the control plane's plain text
        assert body.startswith(b"Request Timeout : ") and b"http_body_deadline" in body


def test_a_dripping_request_head_is_cut_off_too(bounded: Emulator) -> None:
    """The deadline runs from the request's first byte: a head that never ends is cut as well."""
    address, _ = _head(bounded.url, "/ask")
    began = time.monotonic()
    with socket.create_connection(address, timeout=5) as sock:
        sock.sendall(b"POST /ask HTTP/1.1\r\n")
        sock.settimeout(0.5)
        closed = False
        while time.monotonic() - began < 15 and not closed:
            try:
                sock.sendall(b"X-Slow: 1\r\n")
                closed = sock.recv(65536) == b""
            except TimeoutError:
                continue
            except OSError:
                closed = True
    assert closed and time.monotonic() - began < DEADLINE + SLACK


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_dripping_connections_free_their_descriptors_after_the_deadline(bounded: Emulator) -> None:
    assert bounded.proc is not None
    pid = bounded.proc.pid
    before = _fds(pid)
    address, head = _head(bounded.url, "/mcp")
    socks = []
    for _ in range(200):
        sock = socket.create_connection(address, timeout=5)
        sock.sendall(head)
        sock.setblocking(False)
        socks.append(sock)
    try:
        time.sleep(0.5)
        held = _fds(pid)
        assert held >= before + 150, (before, held)  # the measure sees them
        began, after = time.monotonic(), held
        while time.monotonic() - began < DEADLINE + SLACK + 4:
            for sock in socks:
                try:
                    sock.send(b" ")
                except OSError:
                    pass
            after = _fds(pid)
            if after <= before + 10:
                break
            time.sleep(0.5)
        assert after <= before + 10, (before, held, after)
    finally:
        for sock in socks:
            sock.close()


# --- the size bound ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize(("origin", "path"), [("site", "/mcp"), ("auth", "/agent/identity"), ("api", "/")])
async def test_a_body_over_the_bound_is_413_in_the_origin_s_format(
    bounded: Emulator, api_key: str, origin: str, path: str, chunked: bool
) -> None:
    big = b'{"x": "' + b"a" * MAX_BODY + b'"}'

    async def pieces():  # no length announced: the bound holds while it streams
        for i in range(0, len(big), 8192):
            yield big[i : i + 8192]

    async with bounded.client() as c:
        content = pieces() if chunked else big
        headers = {"Content-Type": "application/json"} | ({"X-api-key": api_key} if origin == "api" else {})
        r = await c.post(_origin(bounded, origin) + path, content=content, headers=headers)
        assert r.status_code == 413, r.text
        if origin == "site":
            error = r.json()["error"]
            assert error["status"] == 413 and error["code"] == "too_large" and "http_max_body_bytes" in error["message"]
        elif origin == "auth":
            refused = r.json()
            assert refused["code"] == refused["error"] and "http_max_body_bytes" in refused["message"]
        else:
            assert r.headers["content-type"].startswith("text/plain")
            assert r.text.startswith("Request Entity Too Large : ") and "http_max_body_bytes" in r.text
        assert (await c.get(bounded.url + "/health")).status_code == 200


async def test_archives_have_their_own_larger_bound(bounded: Emulator) -> None:
    """A snapshot import and a blob upload are larger than http_max_body_bytes by nature: not refused for size."""
    blob = b"\0" * (MAX_BODY * 2)
    async with bounded.client() as c:
        imported = await c.post(
            "/_emulator/snapshots/import", content=blob, headers={"Content-Type": "application/gzip"}
        )
        assert imported.status_code not in (413, 500) and imported.status_code < 500, imported.text
        sha = "0" * 64
        put = await c.put(f"{bounded.api}/blobs/org/{sha}", content=blob)
        assert put.status_code not in (413, 500), put.text


# --- nesting --------------------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _deep_object() -> bytes:
    return b'{"a":' + b"[" * DEEP + b"]" * DEEP + b"}"


def _no_traceback(e: Emulator) -> None:
    for name in ("emulator.log", "test-emulator.log"):
        path = e.state_dir / name
        text = path.read_text() if path.exists() else ""
        assert "RecursionError" not in text and "Traceback" not in text, text[-3000:]


@pytest.mark.parametrize("where", ["header", "claims"])
async def test_an_id_jag_nested_50000_deep_is_a_clean_400(bounded: Emulator, where: str) -> None:
    header = _deep_object() if where == "header" else b'{"alg":"ES256","typ":"oauth-id-jag+jwt"}'
    claims = _deep_object() if where == "claims" else b'{"iss":"x","sub":"y"}'
    token = f"{_b64(header)}.{_b64(claims)}.{_b64(b'sig')}"
    body = {"type": "identity_assertion", "assertion_type": ID_JAG, "assertion": token}
    async with bounded.client() as c:
        r = await c.post(bounded.auth + "/agent/identity", json=body)
        assert r.status_code == 400, r.text
        refused = r.json()
        assert refused["code"] == refused["error"] == "invalid_grant" and "nested deeper" in refused["message"]
        # The same token as an ID token at the upstream issuer's exchange, and as a bearer on the control plane.
        form = {
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
            "requested_token_type": ID_JAG,
            "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
            "subject_token": token,
            "audience": bounded.auth,
        }
        exchanged = await c.post(bounded.auth + "/upstream/oauth2/token", data=form)
        assert exchanged.status_code == 400 and exchanged.json()["error"] == "invalid_grant", exchanged.text
        bearer = await c.post(
            bounded.api + "/", json={"operation_type": "list_orgs"}, headers={"Authorization": f"Bearer {token}"}
        )
        assert 400 <= bearer.status_code < 500, bearer.text
    _no_traceback(bounded)


NESTED = b"[" * DEEP + b"]" * DEEP


@pytest.mark.parametrize(
    ("origin", "path", "ctype", "body"),
    [
        ("auth", "/agent/identity", "application/json", NESTED),
        ("auth", "/agent/identity", "application/json", b'{"type": "anonymous", "x": ' + NESTED + b"}"),
        ("site", "/_emulator/clock", "application/json", NESTED),
        ("site", "/_emulator/switches", "application/json", NESTED),
        ("site", "/_emulator/apply", "application/toml", b"a = " + NESTED),
        ("site", "/ask", "application/json", b'{"query": ' + NESTED + b"}"),
        ("api", "/", "application/json", NESTED),
    ],
)
async def test_a_deeply_nested_body_is_a_400(
    bounded: Emulator, api_key: str, origin: str, path: str, ctype: str, body: bytes
) -> None:
    headers = {"Content-Type": ctype} | ({"X-api-key": api_key} if origin == "api" else {})
    async with bounded.client() as c:
        r = await c.post(_origin(bounded, origin) + path, content=body, headers=headers)
    assert r.status_code == 400, r.text
    assert "Traceback" not in r.text
    _no_traceback(bounded)


async def test_a_deeply_nested_mcp_message_is_a_parse_error(bounded: Emulator) -> None:
    """/mcp's format for a body it cannot decode is JSON-RPC's parse error (HTTP 200, as tests/test_mcp.py pins)."""
    async with bounded.client() as c:
        r = await c.post("/mcp", content=NESTED, headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and r.json()["error"]["code"] == -32700 and "nested deeper" in r.text
    _no_traceback(bounded)


def test_the_depth_check_is_exact_for_json_and_ignores_brackets_in_strings() -> None:
    from emulator.core.jsonbody import MAX_DEPTH, NotJson, check_depth, decode

    check_depth(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH)
    with pytest.raises(NotJson):
        check_depth(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))
    with pytest.raises(NotJson):
        check_depth(b'{"a":' * (MAX_DEPTH + 1) + b"1" + b"}" * (MAX_DEPTH + 1))
    inside = b'["' + b"[{" * 500 + b'\\"]"]'
    assert decode(inside) == ["[{" * 500 + '"]']
    assert decode(b"[" + b"[]," * 10_000 + b"[]]") == [[]] * 10_001
    with pytest.raises(NotJson):
        check_depth(b"[" * 10_000)  # never closed: refused before a decoder recurses


# --- the media store (S3 on its own port) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def media_trial(bounded: Emulator) -> dict[str, str]:
    """A trial of its own (its key and organization), for presigned URLs of its bucket."""

    async def make() -> dict[str, str]:
        async with bounded.client() as c:
            _, _, trial = await flow.new_trial(c, bounded)
            return {"api_key": str(trial["api_key"]), "org": str(trial["org"])}

    return asyncio.run(make())


def _presigned_put(e: Emulator, trial: dict[str, str], key: str) -> str:
    body = {"operation_type": "get_presigned_url", "org": trial["org"], "db": "main", "bucket_name": "home"}
    body |= {"key": key, "method": "put", "expiration": 600}
    r = httpx.post(e.api, json=body, headers={"X-api-key": trial["api_key"]}, timeout=20)
    assert r.status_code == 200, r.text
    return str(r.json()["url"])


def _s3_drip(url: str, head_only: bool, every: float = 0.5, give_up: float = 15.0) -> tuple[float, bytes]:
    """A PUT to the media store that never becomes whole: its head dripped a byte at a time (`head_only`), or its
    head whole and its announced 100 bytes of body dripped. (seconds until the store closed, what it answered)."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    target = parts.path + ("?" + parts.query if parts.query else "")
    head = f"PUT {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Length: 100\r\n\r\n".encode()
    began = time.monotonic()
    answer = b""
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
        if head_only:
            sock.sendall(head[:-4])  # never the blank line that ends the head
            pending = b"X-Drip: " + b"a" * 1000
        else:
            sock.sendall(head)
            pending = b"x" * 1000
        sock.settimeout(every)
        while time.monotonic() - began < give_up and pending:
            try:
                sock.sendall(pending[:1])
                pending = pending[1:]
            except OSError:
                pass
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            answer += chunk
        return time.monotonic() - began, answer


@pytest.mark.parametrize("head_only", [True, False], ids=["head", "body"])
def test_the_media_store_cuts_a_dripping_request_at_its_deadline(
    bounded: Emulator, media_trial: dict[str, str], head_only: bool
) -> None:
    url = _presigned_put(bounded, media_trial, "drip.bin")
    took, _ = _s3_drip(url, head_only)
    assert DEADLINE - 0.5 <= took < DEADLINE + SLACK, f"held {took:.1f} s"
    # and the store still answers: the cut request took nothing with it
    assert httpx.put(_presigned_put(bounded, media_trial, "after.bin"), content=b"ok", timeout=20).status_code == 200


def test_the_media_store_refuses_a_body_over_s3s_single_put_bound(
    bounded: Emulator, media_trial: dict[str, str]
) -> None:
    url = _presigned_put(bounded, media_trial, "huge.bin")
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    target = parts.path + "?" + parts.query
    with socket.create_connection((parts.hostname, parts.port), timeout=20) as sock:
        sock.sendall(f"PUT {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Length: {6 * 1024**3}\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):  # the store closes once it answered
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400") and b"<Code>EntityTooLarge</Code>" in answer, answer[:300]
