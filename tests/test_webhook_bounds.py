"""The webhook sender's bounds, against real receivers on loopback that each test starts: a URL that leads back
into the emulator is refused (when added, and again at the try), a try has one deadline and reads a few KiB of the
answer at most, and a stuck receiver holds up no other endpoint."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from emulator.core.listening import Listening, literal, this_machine
from tests.conftest import Emulator
from tests.test_webhooks import (
    SECRET,
    Receiver,
    add,
    admin,
    closed_port,
    deliveries,
    emulator_cli,
    register,
    tried,
    until,
)

CREATED = ["agent.registration.created"]
FROZEN = "2026-11-01T00:00:00Z"
HUGE = 200 * 1024 * 1024  # bytes a huge receiver offers


class RawReceiver:
    """A receiver on 127.0.0.1 that answers each connection with `answer(conn)` on a thread of its own, after
    reading the request; `release` ends every answer still going."""

    def __init__(self, answer: Callable[[socket.socket, RawReceiver], None]) -> None:
        self.answer = answer
        self.requests = 0
        self.sent = 0  # bytes of answers sent (as far as the socket took them)
        self.release = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"

    def _accept(self) -> None:
        while not self.release.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                got = conn.recv(65536)
                if not got:
                    return
                data += got
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                ),
                0,
            )
            while len(body) < length:
                body += conn.recv(65536)
            self.requests += 1
            try:
                self.answer(conn, self)
            except OSError:
                pass  # the emulator closed its end: what a bounded sender does

    def close(self) -> None:
        self.release.set()
        self.sock.close()


def huge(conn: socket.socket, r: RawReceiver) -> None:
    """The first request (a warm-up) a short answer; each later one 200 MB."""
    if r.requests == 1:
        conn.sendall(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
        return
    conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % HUGE)
    chunk, sent = b"x" * 65536, 0
    while sent < HUGE and not r.release.is_set():
        conn.sendall(chunk)
        sent += len(chunk)
        r.sent += len(chunk)


def drip(conn: socket.socket, r: RawReceiver) -> None:
    """The status line, a byte a second, never finished."""
    for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n":
        if r.release.wait(1.0):
            return
        conn.sendall(bytes([byte]))
    r.release.wait()


def silent(conn: socket.socket, r: RawReceiver) -> None:
    r.release.wait()


@pytest.fixture
def raw() -> Iterator[Callable[..., RawReceiver]]:
    made: list[RawReceiver] = []

    def make(answer: Callable[[socket.socket, RawReceiver], None]) -> RawReceiver:
        made.append(RawReceiver(answer))
        return made[-1]

    yield make
    for r in made:
        r.close()


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def test_a_huge_answer_is_read_no_further_than_a_few_kib(
    start_emulator: Callable[..., Emulator], raw: Callable[..., RawReceiver]
) -> None:
    e = start_emulator("--no-watch", "--freeze-clock", "2026-11-01T00:00:00Z")
    assert e.proc is not None
    pid = e.proc.pid
    r = raw(huge)
    add(e, r.url, secret=SECRET, events=CREATED)
    await register(e)  # a short answer: the baseline is the emulator with its sender at work, httpx loaded
    assert tried(e, 1)[0]["state"] == "delivered"
    before = rss_kb(pid)
    peak = [before]
    sampling = threading.Event()

    def sample() -> None:  # the peak while the try runs (a whole answer read would be hundreds of MB)
        while not sampling.wait(0.01):
            peak[0] = max(peak[0], rss_kb(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        await register(e)
        done = until(lambda: [d for d in deliveries(e) if d["tries"]][1:], "the second delivery's try")[0]
    finally:
        sampling.set()
        sampler.join(5)
    attempt = done["tries"][0]
    assert done["state"] == "delivered" and attempt["status"] == 200 and attempt["error"] is None
    grew_mb = (peak[0] - before) / 1024
    assert grew_mb < 50, f"the emulator's RSS grew {grew_mb:.0f} MB while a huge answer came"
    # It stopped reading after MAX_ANSWER bytes and closed: the receiver could send no more than socket buffers hold.
    assert r.sent < 50 * 1024 * 1024, f"the receiver sent {r.sent} of {HUGE} bytes"


async def test_a_receiver_that_drips_its_status_line_is_cut_at_the_deadline(
    start_emulator: Callable[..., Emulator], raw: Callable[..., RawReceiver]
) -> None:
    e = start_emulator("--no-watch", "--freeze-clock", "2026-11-01T00:00:00Z", "--webhook-try-timeout", "2")
    r = raw(drip)
    made = add(e, r.url, secret=SECRET, events=CREATED)
    await register(e)
    await register(e)  # a second delivery to the same endpoint: it waits for the first try, no longer
    both = until(lambda: (d := deliveries(e, endpoint=made["id"])) and all(x["tries"] for x in d) and d, "two tries")
    assert len(both) == 2 and r.requests == 2
    for d in both:
        attempt = d["tries"][0]
        assert d["state"] == "pending" and d["next_at"] == "2026-11-01T00:01:00Z"  # retried on the usual schedule
        assert attempt["status"] is None and attempt["error"] == "no complete answer within 2 s"
        # The deadline cut it (not an earlier failure), and not much after it (a busy machine's event loop lags).
        assert 1900 <= attempt["ms"] < 8000, attempt
    journal = e.journal(kinds="webhook.failed")
    assert [j["data"]["error"] for j in journal] == ["no complete answer within 2 s"] * 2


async def test_a_stuck_endpoint_never_delays_another_and_a_stop_ends_its_try(
    start_emulator: Callable[..., Emulator], raw: Callable[..., RawReceiver]
) -> None:
    e = start_emulator("--no-watch", "--freeze-clock", "2026-11-01T00:00:00Z", "--webhook-try-timeout", "120")
    stuck = raw(silent)
    with Receiver() as fine:
        held = add(e, stuck.url, secret=SECRET, events=CREATED)
        add(e, fine.url, secret=SECRET, events=CREATED)
        await register(e)
        await register(e)
        until(lambda: len(fine.got) == 2 and stuck.requests == 1, "the other endpoint's two deliveries")
    assert stuck.requests == 1  # its first try is still waiting for an answer; the second waits behind it
    assert all(not d["tries"] for d in deliveries(e, endpoint=held["id"]))
    # A stop does not wait for the try's deadline (120 s): the worker is cancelled with its connection.
    began = time.monotonic()
    assert e.stop() == 0
    assert time.monotonic() - began < 12


def test_a_url_at_any_of_the_emulators_own_origins_is_refused(emu: Emulator) -> None:
    ports = {
        name: urlsplit(emu.endpoints[name] if "//" in emu.endpoints[name] else "//" + emu.endpoints[name]).port
        for name in ("site", "auth", "api", "s3", "proxy", "tunnel")
    }
    assert all(ports.values()) and len(set(ports.values())) == 5  # the proxy is the tunnel's port
    spellings = [
        "127.0.0.1",
        "localhost",
        "LocalHost.",
        "[::1]",
        "0.0.0.0",
        "127.9.8.7",
        "2130706433",
        "0x7f000001",
        "127.1",
        "[::ffff:127.0.0.1]",
        "agent.localhost",
    ]
    with emu.admin() as c:
        for name, port in ports.items():
            for host in spellings:
                url = f"http://{host}:{port}/v1/_emulator/registrations/agent_reg_x/revoke"
                r = c.post("/_emulator/webhooks", json={"url": url})
                assert r.status_code == 400, (name, url, r.text)
                message = r.json()["error"]["message"]
                assert "this emulator's own" in message and f":{port}" in message, message
    # https and the default port are the same rule: only the emulator's ports are refused.
    assert (
        admin(emu, "POST", "/_emulator/webhooks", json={"url": f"https://localhost:{ports['api']}/x"}).status_code
        == 400
    )
    other = admin(emu, "POST", "/_emulator/webhooks", json={"url": f"http://127.0.0.1:{closed_port()}/hook"})
    assert other.status_code == 201, other.text
    assert admin(emu, "DELETE", f"/_emulator/webhooks/{other.json()['id']}").status_code == 200
    assert admin(emu, "GET", "/_emulator/webhooks").json()["webhooks"] == []
    # The CLI says why.
    cli = emulator_cli(emu, "webhook", "add", f"http://localhost:{ports['site']}/_emulator/reset")
    assert cli.returncode != 0 and "this emulator's own site" in cli.stderr, cli.stderr
    # So does a declared state, pointing into the file.
    text = f'[[webhooks]]\nurl = "http://[::1]:{ports["api"]}/hook"\nsecret = "{SECRET}"\n'
    applied = admin(
        emu, "POST", "/_emulator/apply", content=text.encode(), headers={"Content-Type": "application/toml"}
    )
    assert applied.status_code == 400, applied.text
    message = applied.json()["error"]["message"]
    assert "webhooks" in message and "this emulator's own control plane" in message, message
    assert admin(emu, "GET", "/_emulator/webhooks").json()["webhooks"] == []


async def test_an_endpoint_that_leads_into_the_emulator_only_at_delivery_is_not_sent(
    start_emulator: Callable[..., Emulator], tmp_path: Path
) -> None:
    """Stored while its port was free, then the emulator starts on that port: the try refuses it, sends nothing
    and records why."""
    state = tmp_path / "moved"
    port = closed_port()
    first = start_emulator("--no-watch", "--freeze-clock", "2026-11-01T00:00:00Z", state_dir=state)
    made = add(first, f"http://localhost:{port}/_emulator/reset", secret=SECRET, events=CREATED)
    assert first.stop() == 0
    e = start_emulator(
        "--no-watch", "--freeze-clock", "2026-11-01T00:00:00Z", "--site-port", str(port), state_dir=state
    )
    assert urlsplit(e.url).port == port
    await register(e)
    found = tried(e, 1, endpoint=made["id"])[0]
    attempt = found["tries"][0]
    assert attempt["status"] is None and attempt["error"].startswith("not sent: localhost"), attempt
    assert f":{port} is this emulator's own site" in attempt["error"]
    assert found["state"] == "pending"  # a failed try, retried on the schedule (and refused again)
    # Nothing reached the site: of its requests journaled, none is the webhook's path.
    served = [j["data"] for j in e.journal(kinds="http.request")]
    assert served and not any("/_emulator/reset" in str(d) for d in served)


def test_the_check_knows_every_spelling_of_this_machine() -> None:
    gateways: dict[int, str] = {}
    own = Listening.of({8700: "site"}, ["Emulator.Internal.", "", "0.0.0.0"], lambda: gateways)
    for host in ("127.0.0.1", "LOCALHOST", "::1", "0", "0x7f.1", "017700000001", "emulator.internal", "x.localhost"):
        assert own.refusal(host, 8700) is not None, host
    assert own.refusal("127.0.0.1", 8799) is None  # not one of its ports
    assert own.refusal("receiver.example", 8700) is None  # a name that resolves elsewhere, or not yet
    assert own.refusal("receiver.example", 8700, ["192.0.2.7"]) is None
    why = own.refusal("rebound.example", 8700, ["192.0.2.7", "127.0.0.1"])  # any one address is enough
    assert why is not None and "rebound.example (127.0.0.1):8700 is this emulator's own site" in why
    assert own.refusal("127.0.0.1", 8711) is None
    gateways[8711] = "service gateway"  # opened since the start
    assert "own service gateway" in (own.refusal("127.0.0.1", 8711) or "")
    assert literal("2130706433") == literal("127.0.0.1") and literal("receiver.example") is None
    mapped, elsewhere = literal("::ffff:127.0.0.1"), literal("192.0.2.7")
    assert mapped is not None and this_machine(mapped)
    assert elsewhere is not None and not this_machine(elsewhere)
