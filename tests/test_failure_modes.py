"""What goes wrong outside the spec's rules ends cleanly: a clear answer in the surface's own format, an
`http.request` event in the journal, and no traceback in the log. Undecodable bytes, a body that never arrives
whole, a full disk under the state dir (a tmpfs of the test's own), and a live subscriber that sees only what
the journal holds."""

from __future__ import annotations

import asyncio
import errno
import io
import json
import logging
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from emulator.core import runlog
from tests import agent_flow as flow
from tests.conftest import Emulator


def served(e: Emulator, path: str) -> list[dict[str, Any]]:
    return [ev for ev in e.journal("http.request") if ev["data"]["path"] == path]


async def test_a_control_plane_body_that_is_not_utf8_is_a_400_and_is_journaled(emu: Emulator) -> None:
    c = emu.client()
    _, _, t = await flow.new_trial(c, emu)
    body = b'{"operation_type": "list_orgs", "x": "\xff\xfe"}'
    r = await c.post(emu.api, content=body, headers={"X-api-key": t["api_key"], "Content-Type": "application/json"})
    assert r.status_code == 400 and r.text.startswith("Bad Request : the body is not valid JSON"), r.text
    assert served(emu, "/")[-1]["data"]["status"] == 400
    assert "Traceback" not in emu.log()
    await c.aclose()


def _cut_short(url: str, path: str, body: bytes, declared: int, key: str) -> None:
    """A POST whose client goes away before the body it declared has arrived."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nX-api-key: {key}\r\n"
            f"Content-Length: {declared}\r\n\r\n"
        )
        s.sendall(head.encode() + body)
        s.shutdown(socket.SHUT_WR)
        s.recv(65536)  # the server sees the end of the body, answers (or closes), then we go


@pytest.mark.parametrize(
    ("origin", "path"),
    [("site", "/mcp"), ("site", "/ask"), ("api", "/"), ("auth", "/agent/identity"), ("auth", "/oauth2/token")],
)
async def test_a_body_that_never_arrives_whole_is_a_400_without_a_traceback(
    emu: Emulator, origin: str, path: str
) -> None:
    c = emu.client()
    _, _, t = await flow.new_trial(c, emu)  # a valid key: the control plane reads a body only after it
    await c.aclose()
    before = len(served(emu, path))
    # Large enough that /ask and /oauth2/token take their routes (their fast paths read small bodies themselves).
    body = b'{"jsonrpc": "2.0", "id": 1, '
    await asyncio.to_thread(_cut_short, emu.endpoints[origin], path, body, 200_000, t["api_key"])
    events = served(emu, path)
    for _ in range(100):  # the journal is written in the background: bounded wait
        events = served(emu, path)
        if len(events) > before:
            break
    assert len(events) == before + 1, events[-3:]
    assert events[-1]["data"]["status"] == 400, events[-1]
    assert "Traceback" not in emu.log() and "unhandled error" not in emu.log()


# --- a full disk ---------------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 48 MB tmpfs of the test's own, for the state dir: filling it fills nothing else."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m,mode=0700", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 1024 * 1024)
                f.flush()
        except OSError:
            pass
    return filler


async def _follow(url: str, seen: list[dict[str, Any]], ready: asyncio.Event) -> None:
    async with (
        httpx.AsyncClient(timeout=None) as c,
        c.stream("GET", url + "/_emulator/events", params={"kinds": "http.request"}) as stream,
    ):
        async for line in stream.aiter_lines():
            ready.set()  # the stream's first line: it is subscribed
            if line.startswith("data: "):
                seen.append(json.loads(line[6:]))


async def until(cond: Any, what: str, within: int = 300) -> None:
    for _ in range(within):
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def refused_for_room(send: Any, tries: int = 3) -> httpx.Response:
    """Send until the store refuses for want of room: SQLite may still fit a write or two in pages it holds."""
    for _ in range(tries):
        r = await send()
        assert r.status_code != 500, r.text
        if r.status_code == 507:
            return r
    raise AssertionError("the store never ran out of room")


async def test_a_full_disk_is_a_507_naming_the_state_dir_and_the_journal_catches_up(
    start_emulator: Any, small_disk: Path
) -> None:
    e: Emulator = start_emulator("--no-watch", state_dir=small_disk / "state")
    c = e.client()
    _, _, t = await flow.new_trial(c, e)
    tokens = iter([(await flow.access_token(c, e))[1] for _ in range(3)])  # agents with no trial yet
    names = iter(f"k{n}" for n in range(100))
    seen: list[dict[str, Any]] = []
    ready = asyncio.Event()
    follower = asyncio.create_task(_follow(e.url, seen, ready))
    await asyncio.wait_for(ready.wait(), 30)
    last = e.journal()[-1]["seq"]
    filler = fill(small_disk)

    # each surface answers in its own format, and names the state dir
    reg = await refused_for_room(lambda: c.post(e.auth + "/agent/identity", json={"type": "anonymous"}), 100)
    assert reg.json()["code"] == "insufficient_storage" and str(small_disk / "state") in reg.json()["message"]
    trial = await refused_for_room(lambda: flow.create_trial(c, e, next(tokens)))
    assert trial.json()["error"]["status"] == 507 and "is full" in trial.json()["error"]["message"]
    key = await refused_for_room(
        lambda: c.post(
            e.api,
            json={"operation_type": "create_key", "org": t["org"], "name": next(names)},
            headers={"X-api-key": t["api_key"]},
        )
    )
    assert key.text.startswith("Insufficient Storage : the disk of the emulator's state dir"), key.text
    assert reg.headers["retry-after"] == key.headers["retry-after"] == "10"
    # the journal cannot take them yet: a reader does not hang, and a subscriber is offered nothing it lacks
    await until(lambda: "not written yet" in e.log(), "the journal's first failed write")
    assert [ev for ev in e.journal() if ev["seq"] > last] == []
    assert [ev for ev in seen if ev["seq"] > last] == []

    filler.unlink()
    await until(lambda: len([ev for ev in e.journal("http.request") if ev["seq"] > last]) >= 3, "the journal")
    written = [ev for ev in e.journal("http.request") if ev["seq"] > last]
    assert {ev["data"]["status"] for ev in written} >= {507}
    await until(lambda: [ev["seq"] for ev in seen if ev["seq"] > last] == [ev["seq"] for ev in written], "follower")
    assert "Traceback" not in e.log()
    follower.cancel()
    await asyncio.gather(follower, return_exceptions=True)
    await c.aclose()


class _FullDisk(io.StringIO):
    """A stream on a full disk: every write fails as the OS fails it."""

    def write(self, s: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_log_that_cannot_be_written_says_so_once_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    """The state dir's disk full holds the log file too: its lines are dropped with one line said, not logging's
    "--- Logging error ---" and a traceback for each (what the full-disk test found in a loaded run)."""
    handler = runlog._Terminal(_FullDisk())  # pyright: ignore[reportPrivateUsage]
    logger = logging.getLogger("emulator.test-full-disk")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        for _ in range(3):
            logger.error("a line")
    finally:
        logger.removeHandler(handler)
    said = capsys.readouterr().err
    assert said == "emulator: the log could not be written ([Errno 28] No space left on device); lines are lost\n"
    assert "Traceback" not in said
