"""The unmodified `pxt` CLI of pixeltable 0.7.21 against the emulator, configured only by `emulator env`."""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import re
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.conftest import Emulator
from tests.pxt_client import Pxt, ensure_client


@pytest.fixture(scope="session")
def pxt_exe() -> Path:
    return ensure_client()


def emulator_env(e: Emulator) -> dict[str, str]:
    """The exports `emulator env` prints, parsed the way a shell's eval would use them."""
    out = subprocess.run(
        [sys.executable, "-m", "emulator", "env", "--state-dir", str(e.state_dir)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    pairs = dict(re.findall(r"^export (\w+)=(\S+)$", out, re.M))
    assert pairs["PIXELTABLE_SITE_URL"] == e.url and pairs["PIXELTABLE_API_URL"] == e.api
    return pairs


@pytest.fixture
def pxt(pxt_exe: Path, start_emulator, tmp_path: Path) -> Iterator[tuple[Pxt, Emulator]]:
    e: Emulator = start_emulator("--no-watch")  # a running clock: the client compares expiry with its own
    client = Pxt(pxt_exe, tmp_path / "pxt-home", emulator_env(e))
    yield client, e
    client.stop_daemon()


def trials(e: Emulator) -> dict[str, dict]:
    return {t["org"]: t for t in httpx.get(e.url + "/_emulator/trials").json()["trials"]}


def test_pxt_new_creates_a_trial_and_its_key_works_until_it_expires(pxt: tuple[Pxt, Emulator]) -> None:
    run, e = pxt
    r = run("new")
    assert r.returncode == 0, r.stderr + r.stdout
    m = re.search(
        r"Created a free Pixeltable Cloud trial: organization (agent-[0-9a-f]{6}), with database main\.", r.stdout
    )
    assert m, r.stdout
    org = m.group(1)
    assert f"pxt://{org}:main" in r.stdout
    assert re.search(rf"Claim it at {re.escape(e.url)}/claim/tcl_[0-9a-f]+, or it is deleted at ", r.stdout)
    assert f"send the trial's API key to {e.api}." in r.stdout
    assert "warning" not in r.stderr
    assert trials(e)[org]["state"] == "unclaimed"

    again = run("new")
    assert again.returncode == 0 and "already has a Pixeltable Cloud trial" in again.stdout
    assert list(trials(e)) == [org]  # nothing new was created

    who = run("whoami")
    assert who.returncode == 0 and f"Trial pxt://{org}:main on {e.api}" in who.stdout

    e.advance("48h1s")
    assert org not in trials(e)
    rejected = run("whoami")
    assert rejected.returncode != 0
    assert "was rejected: the API key is not valid" in rejected.stdout + rejected.stderr


def test_pxt_new_reports_the_sites_refusal(pxt: tuple[Pxt, Emulator]) -> None:
    run, e = pxt
    httpx.post(e.url + "/_emulator/switches", json={"trials_enabled": False}).raise_for_status()
    r = run("new")
    assert r.returncode != 0
    assert f"{e.url} cannot create a trial right now: trials are not available on this host." in r.stdout + r.stderr
    httpx.post(e.url + "/_emulator/switches", json={"anonymous_registration": False, "trials_enabled": True})
    r = run("new")
    assert r.returncode != 0 and f"Trial databases are not available from {e.url}." in r.stdout + r.stderr


def self_signed(tmp_path: Path, ip: str) -> tuple[Path, Path]:
    """A certificate and key for `ip`, made here: the test's own HTTPS server, trusted only by the test."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ip)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "origin.pem", tmp_path / "origin.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello from the test's own server, path {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


FETCH = r"""
import sys, ssl, urllib.request, requests
url, cafile = sys.argv[1], sys.argv[2]
ctx = ssl.create_default_context(cafile=cafile)
print(urllib.request.urlopen(url + 'urllib', context=ctx, timeout=30).read().decode())
print(requests.get(url + 'requests', verify=cafile, timeout=30).text)
"""


def test_the_shell_of_emulator_env_still_reaches_other_hosts(pxt: tuple[Pxt, Emulator], tmp_path: Path) -> None:
    """`eval "$(emulator env)"`, then the real client works and so does the rest of the shell's HTTPS: here a
    loopback server of the test's own (127.0.0.2 is not in the exported NO_PROXY, so it goes through the proxy),
    reached with urllib and requests from the client's own virtualenv."""
    run, e = pxt
    assert run("new").returncode == 0
    assert run("whoami").returncode == 0
    ip = "127.0.0.2"
    cert, key = self_signed(tmp_path, ip)
    server = http.server.ThreadingHTTPServer((ip, 0), _Hello)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"https://{ip}:{server.server_address[1]}/"
        python = run.exe.parent / "python"
        r = subprocess.run(
            [str(python), "-c", FETCH, url, str(cert)], capture_output=True, text=True, timeout=120, env=run.env
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == [
            "hello from the test's own server, path /urllib",
            "hello from the test's own server, path /requests",
        ]
    finally:
        server.shutdown()
        server.server_close()
    assert run.env["HTTPS_PROXY"] == e.endpoints["proxy"]
    relayed = [ev["data"] for ev in e.journal(kinds="proxy.relay")]
    assert [(d["host"], d["route"], d["status"]) for d in relayed] == [(ip, "direct", 200)] * 2
