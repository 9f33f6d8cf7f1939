"""The database tunnel, in-process on loopback: CA, proxy and direct TLS entry, PXT/1.0 handshake, relay.

Clients here are blocking sockets run in threads (`asyncio.to_thread`), as the real client is blocking code and the
tunnel shares the test's event loop. Every socket has a timeout and every wait is bounded; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import http.client
import json
import os
import socket
import ssl
import stat
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from emulator.core.address import Address
from emulator.core.faults import Verdict
from emulator.core.payloads import Payload
from emulator.tunnel import ca as ca_module
from emulator.tunnel.ca import LocalCA
from emulator.tunnel.server import Refusal, Route, TunnelServer
from emulator.tunnel.tlsfiles import SYSTEM_BUNDLE
from tests.pxt_client import ensure_client

DOMAIN = "pxt.test"
HOST = f"acme-main.{DOMAIN}"
TIMEOUT = 10.0  # any single socket operation, and any wait on the event loop
T = TypeVar("T")


# -- a stand-in for the database's server ------------------------------------------------------------------------


class Backend:
    """HTTP/1.1 keep-alive on loopback: `GET /health` answers JSON, `POST /rpc` echoes its body."""

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> Backend:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        await asyncio.wait_for(self.server.wait_closed(), TIMEOUT)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if line:
                        name, _, value = line.partition(":")
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if method == "GET" and path == "/health":
                    status, ctype, payload = "200 OK", "application/json", json.dumps({"status": "ok"}).encode()
                elif method == "POST" and path == "/rpc":
                    status, ctype, payload = "200 OK", headers.get("content-type", "application/octet-stream"), body
                else:
                    status, ctype, payload = "404 Not Found", "text/plain", b"not found"
                reply = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(payload)}\r\n\r\n"
                writer.write(reply.encode() + payload)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


class Events:
    """What the tunnel reported through on_event, with a bounded wait for one to arrive."""

    def __init__(self) -> None:
        self.items: list[tuple[str, dict[str, Any]]] = []
        self._changed = asyncio.Event()

    def __call__(self, event: Payload) -> None:
        self.items.append((event.KIND, msgspec.to_builtins(event)))  # as the journal holds it
        self._changed.set()

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [data for k, data in self.items if k == kind]

    async def wait(self, kind: str, count: int = 1) -> list[dict[str, Any]]:
        async with asyncio.timeout(TIMEOUT):
            while len(self.of(kind)) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.of(kind)


class Tunnel:
    def __init__(self, server: TunnelServer, port: int, events: Events, calls: list[tuple[str, str, str]]) -> None:
        self.server = server
        self.port = port
        self.events = events
        self.calls = calls


# -- fixtures -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> LocalCA:
    return LocalCA.load_or_create(tmp_path_factory.mktemp("tunnel") / "tls", DOMAIN)


@pytest.fixture(scope="module")
async def backend() -> AsyncIterator[Backend]:
    server = await Backend().start()
    yield server
    await server.close()


@pytest.fixture
def dead_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound, never listening, held for the test."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


async def start_tunnel(ca: LocalCA, backend: Backend, dead_port: int) -> Tunnel:
    calls: list[tuple[str, str, str]] = []

    async def authorize(org: str, db: str, credential: str) -> Route | Refusal:
        calls.append((org, db, credential))
        if org != "acme" or db not in ("main", "down", "boom"):
            return Refusal(404, f"no database {org}/{db}")
        if credential != "good":
            return Refusal(401, "the credential is not valid")
        if db == "boom":
            raise RuntimeError("the authorizer broke")
        return Route(Address("127.0.0.1", backend.port if db == "main" else dead_port), subject="user-1")

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    events = Events()
    server = TunnelServer(ca, DOMAIN, port, authorize, on_event=events)
    await server.start(sock)
    return Tunnel(server, port, events, calls)


@pytest.fixture
async def tunnel(ca: LocalCA, backend: Backend, dead_port: int) -> AsyncIterator[Tunnel]:
    t = await start_tunnel(ca, backend, dead_port)
    yield t
    await asyncio.wait_for(t.server.close(), 3 * TIMEOUT)


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    return await asyncio.wait_for(asyncio.to_thread(fn, *args), 3 * TIMEOUT)


# -- blocking client pieces, each what the real client does ----------------------------------------------------------


def recv_head(sock: socket.socket) -> bytes:
    """Everything received until a blank line or EOF, read as the client does (recv(4096) until CRLF CRLF)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf


def recv_all(sock: socket.socket) -> bytes:
    buf = b""
    while chunk := sock.recv(4096):
        buf += chunk
    return buf


def connect(port: int, *, proxy: bool, host: str = HOST) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    if proxy:
        sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        answer = recv_head(sock)
        assert answer == b"HTTP/1.1 200 Connection established\r\n\r\n", answer
    return sock


def open_tls(
    port: int, cafile: Path, *, proxy: bool, host: str = HOST, server_hostname: str | None = None
) -> ssl.SSLSocket:
    sock = connect(port, proxy=proxy, host=host)
    ctx = ssl.create_default_context(cafile=str(cafile))
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT  # the default from Python 3.13 on: the certificates must pass it
    try:
        return ctx.wrap_socket(sock, server_hostname=server_hostname or host)
    except BaseException:
        sock.close()
        raise


def handshake(tls: ssl.SSLSocket, target: str = "acme/main", credential: str | None = "good") -> bytes:
    frame = f"PXT/1.0 CONNECT {target}\r\n"
    if credential is not None:
        frame += f"Authorization: Bearer {credential}\r\n"
    tls.sendall((frame + "\r\n").encode())
    return recv_head(tls)


class OnSocket(http.client.HTTPConnection):
    """HTTPConnection over an established tunnel, as the real client's _TunnelHTTPConnection."""

    def __init__(self, host: str, sock: socket.socket) -> None:
        super().__init__(host, timeout=TIMEOUT)
        self.sock = sock

    def connect(self) -> None:
        raise AssertionError("a tunnel connection is never reconnected")


def keep_alive_session(port: int, cafile: Path, proxy: bool, body: bytes) -> dict[str, Any]:
    tls = open_tls(port, cafile, proxy=proxy)
    with tls:
        reply = handshake(tls)
        # the client discards whatever follows the blank line in the read that holds it: there must be nothing
        assert reply == b"PXT/1.0 200 OK\r\n\r\n", reply
        conn = OnSocket(HOST, tls)
        conn.request("GET", "/health")
        health = conn.getresponse()
        health_body = json.loads(health.read())
        conn.request("POST", "/rpc", body=body, headers={"Content-Type": "application/octet-stream"})
        echo = conn.getresponse()
        echoed = echo.read()
        san = tls.getpeercert()["subjectAltName"]  # type: ignore[index]
    return {"health": (health.status, health_body), "echo": (echo.status, echoed), "san": san}


def refused(
    port: int, cafile: Path, *, proxy: bool, server_hostname: str | None = None, **kw: Any
) -> tuple[bytes, bytes]:
    """The handshake's answer, and what followed it until the tunnel closed the connection."""
    with open_tls(port, cafile, proxy=proxy, server_hostname=server_hostname) as tls:
        return handshake(tls, **kw), recv_all(tls)


def raw_exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(data)
        return recv_all(sock)


# -- the happy paths ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("proxy", [True, False], ids=["proxy", "direct"])
async def test_keep_alive_requests_through_the_tunnel(
    tunnel: Tunnel, ca: LocalCA, backend: Backend, proxy: bool
) -> None:
    body = os.urandom(1024 * 1024)
    before = backend.connections
    result = await in_thread(keep_alive_session, tunnel.port, ca.bundle_path, proxy, body)
    assert result["health"] == (200, {"status": "ok"})
    status, echoed = result["echo"]
    assert status == 200 and echoed == body  # 1 MiB both ways, intact
    assert ("DNS", f"*.{DOMAIN}") in result["san"]
    assert backend.connections == before + 1  # both requests on one relayed connection
    assert tunnel.calls == [("acme", "main", "good")]

    connected = await tunnel.events.wait("tunnel.connected")
    assert connected == [{"org": "acme", "db": "main", "subject": "user-1", "via": "proxy" if proxy else "direct"}]
    (closed,) = await tunnel.events.wait("tunnel.closed")
    assert closed["org"] == "acme" and closed["db"] == "main"
    assert closed["bytes_up"] > len(body) and closed["bytes_down"] > len(body)


async def test_concurrent_tunnels(tunnel: Tunnel, ca: LocalCA) -> None:
    bodies = [os.urandom(10_000 + i) for i in range(8)]
    results = await asyncio.gather(
        *(in_thread(keep_alive_session, tunnel.port, ca.bundle_path, i % 2 == 0, b) for i, b in enumerate(bodies))
    )
    assert [r["echo"] for r in results] == [(200, b) for b in bodies]
    assert len(await tunnel.events.wait("tunnel.closed", count=8)) == 8


# -- refusals inside TLS --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("proxy", [True, False], ids=["proxy", "direct"])
@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"credential": "bad"}, b"PXT/1.0 401 the credential is not valid\r\n\r\n"),
        ({"credential": None}, b"PXT/1.0 401 a bearer credential is required\r\n\r\n"),
        (
            {"target": "acme/nope", "server_hostname": f"acme-nope.{DOMAIN}"},
            b"PXT/1.0 404 no database acme/nope\r\n\r\n",
        ),
        (
            {"target": "acme/down", "server_hostname": f"acme-down.{DOMAIN}"},
            b"PXT/1.0 503 the database is not reachable\r\n\r\n",
        ),
    ],
    ids=["wrong-credential", "no-credential", "unknown-db", "backend-down"],
)
async def test_handshake_refusals(
    tunnel: Tunnel, ca: LocalCA, proxy: bool, kw: dict[str, Any], expected: bytes
) -> None:
    answer, rest = await in_thread(lambda: refused(tunnel.port, ca.bundle_path, proxy=proxy, **kw))
    assert answer == expected
    assert rest == b""  # and the connection is closed
    (event,) = await tunnel.events.wait("tunnel.refused")
    assert event["status"] == int(expected.split()[1])
    assert "good" not in json.dumps(event) and "bad" not in json.dumps(event)  # credentials never reported


async def test_server_name_must_name_the_database(tunnel: Tunnel, ca: LocalCA) -> None:
    # the certificate covers *.pxt.test, so TLS succeeds; the tunnel still refuses a host for another database
    answer, _ = await in_thread(
        lambda: refused(tunnel.port, ca.bundle_path, proxy=False, server_hostname=f"acme-other.{DOMAIN}")
    )
    assert answer.startswith(b"PXT/1.0 403 ")
    assert tunnel.calls == []  # refused before anyone is asked about the credential


@pytest.mark.parametrize(
    "frame",
    [
        b"HELLO\r\n\r\n",
        b"PXT/1.0 CONNECT acme\r\n\r\n",
        b"PXT/2.0 CONNECT acme/main\r\n\r\n",
        b"PXT/1.0 CONNECT a/b\r\nx\r\n\r\n",
    ],
    ids=["garbage", "no-db", "wrong-version", "bad-header"],
)
async def test_malformed_handshake_is_400(tunnel: Tunnel, ca: LocalCA, frame: bytes) -> None:
    def exchange() -> bytes:
        with open_tls(tunnel.port, ca.bundle_path, proxy=True) as tls:
            tls.sendall(frame)
            return recv_all(tls)

    answer = await in_thread(exchange)
    assert answer.startswith(b"PXT/1.0 400 ") and answer.endswith(b"\r\n\r\n") and answer.count(b"\r\n") == 2


async def test_oversized_handshake_is_400(tunnel: Tunnel, ca: LocalCA) -> None:
    def exchange() -> bytes:
        with open_tls(tunnel.port, ca.bundle_path, proxy=False) as tls:
            tls.sendall(b"PXT/1.0 CONNECT acme/main\r\nX-Pad: " + b"a" * 9000)
            return recv_all(tls)

    assert (await in_thread(exchange)).startswith(b"PXT/1.0 400 ")


async def test_failing_authorizer_is_503(tunnel: Tunnel, ca: LocalCA) -> None:
    answer, _ = await in_thread(
        lambda: refused(
            tunnel.port, ca.bundle_path, proxy=True, target="acme/boom", server_hostname=f"acme-boom.{DOMAIN}"
        )
    )
    assert answer.startswith(b"PXT/1.0 503 ")


async def test_a_fault_refuses_or_drops_a_session(ca: LocalCA, backend: Backend, dead_port: int) -> None:
    """The emulator's fault rules reach the tunnel as a hook: a status refuses the handshake in the tunnel's own
    terms, a drop closes the session without an answer, and no verdict lets it through."""
    verdicts = iter([Verdict("f1", 503, "injected fault f1", None, False), Verdict("f2", None, "", None, True), None])
    seen: list[tuple[str, str]] = []

    async def fault(method: str, path: str) -> Verdict | None:
        seen.append((method, path))
        return next(verdicts)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]

    async def authorize(org: str, db: str, credential: str) -> Route | Refusal:
        return Route(Address("127.0.0.1", backend.port), subject="user-1")

    server = TunnelServer(ca, DOMAIN, port, authorize, fault=fault)
    await server.start(sock)
    try:
        answer, _ = await in_thread(lambda: refused(port, ca.bundle_path, proxy=True))
        assert answer == b"PXT/1.0 503 injected fault f1\r\n\r\n"
        answer, rest = await in_thread(lambda: refused(port, ca.bundle_path, proxy=True))
        assert answer == b"" and rest == b""  # dropped: nothing at all
        session = await in_thread(keep_alive_session, port, ca.bundle_path, True, b"ping")
        assert session["echo"][0] == 200
        assert seen == [("CONNECT", "/acme/main")] * 3
    finally:
        await asyncio.wait_for(server.close(), 3 * TIMEOUT)


# -- the proxy's own rules ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    ["acme-main.pxt.test:{other}", "a.b.pxt.test:{port}", "pxt.test:{port}", "ACME-MAIN.PXT.TEST.:{other}"],
)
async def test_connect_in_the_tunnel_domain_never_leaves(tunnel: Tunnel, backend: Backend, target: str) -> None:
    target = target.format(port=tunnel.port, other=tunnel.port + 1)
    before = backend.connections
    answer = await in_thread(raw_exchange, tunnel.port, f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    # closed after the body
    assert answer.endswith(f"in {DOMAIN} this proxy only reaches <org>-<db>.{DOMAIN}:{tunnel.port}\n".encode())
    assert backend.connections == before and tunnel.calls == []  # nothing was reached
    assert tunnel.events.of("proxy.relay") == []


@pytest.mark.parametrize(
    "target",
    ["example.com:443", "127.0.0.1:{backend}", "acme-main.pxt.test.example.com:{port}", "[::1]:{port}"],
)
async def test_other_hosts_are_refused_by_default(tunnel: Tunnel, backend: Backend, target: str) -> None:
    """A TunnelServer given no forward proxy relays nothing (the emulator gives it one with its policy)."""
    target = target.format(backend=backend.port, port=tunnel.port)
    before = backend.connections
    answer = await in_thread(raw_exchange, tunnel.port, f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert answer.endswith(b"; change proxy_egress (emulator up --proxy-egress allow, or add the host to its list)\n")
    assert backend.connections == before and tunnel.calls == []


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", b"405"),
        (b"CONNECT\r\n\r\n", b"400"),
        (b"CONNECT acme-main.pxt.test HTTP/1.1\r\n\r\n", b"400"),
        (b"CONNECT acme-main.pxt.test:443 SPDY/3\r\n\r\n", b"400"),
        (b"\x00\x01garbage\r\n\r\n", b"400"),
        (b"CONNECT x:1 HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 9000 + b"\r\n\r\n", b"400"),
    ],
    ids=["get", "no-target", "no-port", "not-http", "binary", "oversized"],
)
async def test_bad_proxy_requests(tunnel: Tunnel, request_bytes: bytes, status: bytes) -> None:
    answer = await in_thread(raw_exchange, tunnel.port, request_bytes)
    assert answer.startswith(b"HTTP/1.1 " + status + b" ")
    if status == b"405":
        assert b"\r\nAllow: CONNECT\r\n" in answer


# -- certificates ---------------------------------------------------------------------------------------------------


async def test_hostname_is_verified(tunnel: Tunnel, ca: LocalCA, tmp_path: Path) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match="match"):
        await in_thread(lambda: open_tls(tunnel.port, ca.bundle_path, proxy=False, server_hostname="other.example"))
    # and the chain is: a client that trusts some other CA refuses the certificate
    other = LocalCA.load_or_create(tmp_path / "other-ca", DOMAIN)
    with pytest.raises(ssl.SSLCertVerificationError):
        await in_thread(lambda: open_tls(tunnel.port, other.ca_cert_path, proxy=True))


def test_certificates(ca: LocalCA) -> None:
    leaf = x509.load_pem_x509_certificate(ca.cert_path.read_bytes())
    root = x509.load_pem_x509_certificate(ca.ca_cert_path.read_bytes())
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == {DOMAIN, f"*.{DOMAIN}"}
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku
    leaf.verify_directly_issued_by(root)
    constraints = root.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca and constraints.path_length == 0
    usage = root.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    now = dt.datetime.now(dt.UTC)
    assert root.not_valid_after_utc - now > dt.timedelta(days=3000)
    assert dt.timedelta(days=300) < leaf.not_valid_after_utc - now <= dt.timedelta(days=366)

    bundle = ca.bundle_path.read_bytes()
    assert bundle.startswith(ca.ca_cert_path.read_bytes())
    if SYSTEM_BUNDLE.is_file():
        assert bundle.count(b"-----BEGIN CERTIFICATE-----") > 1  # the system's CAs follow ours


def test_ca_is_created_once_and_reused(tmp_path: Path) -> None:
    directory = tmp_path / "tls"
    first = LocalCA.load_or_create(directory, DOMAIN)
    ca_pem, leaf_pem = first.ca_cert_path.read_bytes(), first.cert_path.read_bytes()
    second = LocalCA.load_or_create(directory, DOMAIN)
    assert second.ca_cert_path.read_bytes() == ca_pem
    assert second.cert_path.read_bytes() == leaf_pem  # still good: not reissued either
    for key in (first.ca_key_path, first.key_path):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700

    # another domain gets a new leaf from the same CA
    moved = LocalCA.load_or_create(directory, "elsewhere.test")
    assert moved.ca_cert_path.read_bytes() == ca_pem
    leaf = x509.load_pem_x509_certificate(moved.cert_path.read_bytes())
    assert ca_module.leaf_names(leaf) == {"elsewhere.test", "*.elsewhere.test"}


def test_expired_leaf_is_reissued_by_the_same_ca(tmp_path: Path) -> None:
    ca = LocalCA.load_or_create(tmp_path / "tls", DOMAIN)
    ca_pem = ca.ca_cert_path.read_bytes()
    root = x509.load_pem_x509_certificate(ca_pem)
    root_key = serialization.load_pem_private_key(ca.ca_key_path.read_bytes(), password=None)
    assert isinstance(root_key, ca_module.ec.EllipticCurvePrivateKey)
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=400)
    stale, _ = ca_module.issue_leaf(root, root_key, DOMAIN, now=long_ago)
    stale_pem = stale.public_bytes(serialization.Encoding.PEM)
    ca.cert_path.write_bytes(stale_pem)  # its key no longer matches either: both reasons to reissue

    again = LocalCA.load_or_create(tmp_path / "tls", DOMAIN)
    assert again.ca_cert_path.read_bytes() == ca_pem
    fresh = x509.load_pem_x509_certificate(again.cert_path.read_bytes())
    assert fresh.not_valid_after_utc > dt.datetime.now(dt.UTC) + dt.timedelta(days=300)
    again.server_context()  # the new pair loads


def test_domain_must_take_a_wildcard(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="two labels"):
        LocalCA.load_or_create(tmp_path / "tls", "localhost")


# -- lifecycle ------------------------------------------------------------------------------------------------------


async def test_close_ends_open_tunnels(ca: LocalCA, backend: Backend, dead_port: int) -> None:
    t = await start_tunnel(ca, backend, dead_port)

    def open_one() -> ssl.SSLSocket:
        tls = open_tls(t.port, ca.bundle_path, proxy=True)
        assert handshake(tls) == b"PXT/1.0 200 OK\r\n\r\n"
        return tls

    tls = await in_thread(open_one)
    with tls:
        await t.events.wait("tunnel.connected")
        await asyncio.wait_for(t.server.close(), 3 * TIMEOUT)
        assert await in_thread(recv_all, tls) == b""  # the tunnel was closed under the client
    with pytest.raises(ConnectionRefusedError):
        await in_thread(socket.create_connection, ("127.0.0.1", t.port), TIMEOUT)
    await t.events.wait("tunnel.closed")


# -- the real client ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client_python() -> Path:
    """The real client's interpreter, its virtualenv built here when missing (as the other real-client tests do)."""
    return ensure_client().parent / "python"


# Runs the client's own tunnel code: Env.proxy_endpoint() turns PIXELTABLE_CLOUD_HOST into <org>-<db>.<domain>:<port>,
# and TunnelTransport does the rest (HTTPS_PROXY, CONNECT, TLS against SSL_CERT_FILE, PXT/1.0, pooled HTTP/1.1).
CLIENT_SCRIPT = r"""
import json
from pixeltable.env import Env
from pixeltable.service.management_client import Credential
from pixeltable.service.proxy_client import TunnelTransport

host, port = Env.proxy_endpoint(None, 'acme', 'main')  # uses no instance state, only the config
body = bytes(range(256)) * 4096

def transport(value):
    return TunnelTransport('acme', 'main', lambda: Credential('api_key', value, 'the test'), host=host, port=port)

good = transport('good')
try:
    health = json.loads(good._request('GET', '/health'))
    echoed = good.post(body)
finally:
    good.close()
bad = transport('bad')
try:
    bad._request('GET', '/health')
    refusal = None
except Exception as e:
    refusal = f'{type(e).__name__}: {e}'
finally:
    bad.close()
print(json.dumps({'endpoint': [host, port], 'health': health, 'echo_ok': echoed == body, 'refusal': refusal}))
"""


async def test_real_client_through_https_proxy(
    tunnel: Tunnel, ca: LocalCA, backend: Backend, tmp_path: Path, client_python: Path
) -> None:
    dropped = {"https_proxy", "http_proxy", "all_proxy", "no_proxy", "pixeltable_api_key", "ssl_cert_dir"}
    env = {k: v for k, v in os.environ.items() if k.lower() not in dropped and not k.startswith("PIXELTABLE_")}
    env |= {
        "HTTPS_PROXY": f"http://127.0.0.1:{tunnel.port}",
        "PIXELTABLE_CLOUD_HOST": f"{DOMAIN}:{tunnel.port}",
        "SSL_CERT_FILE": str(ca.bundle_path),
        "PIXELTABLE_HOME": str(tmp_path / "pxt-home"),
        # should a failure make the client ask the control plane whether the db is stopped, it asks nobody
        "PIXELTABLE_API_URL": "http://127.0.0.1:9/api",
        "XDG_RUNTIME_DIR": str(tmp_path),
    }
    before = backend.connections
    proc = await asyncio.create_subprocess_exec(
        str(client_python),
        "-c",
        CLIENT_SCRIPT,
        env=env,
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        # the client retries transient failures for up to 90 s: allow that, so a failure shows its own error
        out, err = await asyncio.wait_for(proc.communicate(), 150)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err.decode(errors="replace")[-4000:]
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert result["endpoint"] == [HOST, tunnel.port]
    assert result["health"] == {"status": "ok"}
    assert result["echo_ok"] is True
    # a refusal reads as the control plane's would, with our reason in it, and is not retried
    assert (
        result["refusal"]
        == "ExternalServiceError: The API key from the test was rejected: the credential is not valid."
    )
    connected = tunnel.events.of("tunnel.connected")
    assert [e["via"] for e in connected] == ["proxy"]  # through HTTPS_PROXY, one pooled tunnel for both requests
    assert backend.connections == before + 1
    assert [c[2] for c in tunnel.calls] == ["good", "bad"]


def test_tunnel_domain_must_match_the_certificate(ca: LocalCA) -> None:
    async def never(org: str, db: str, credential: str) -> Route | Refusal:
        raise AssertionError("not called")

    with pytest.raises(ValueError, match="certificate"):
        TunnelServer(ca, "elsewhere.test", 443, never)
