"""Crash tests: `kill -9` the emulator while it takes writes on every surface at once, restart it on the same
state dir and ports, and check that every write it acknowledged is there, whole, and that it takes new ones.

The surfaces: the identity provider (registrations, token exchanges), the site's trial endpoint, the control
plane (API keys created and deleted, secrets set), the media store (objects put, overwritten and deleted
through signed URLs) and the site's `Idempotency-Key` records (replayed after the restart). A write the emulator
answered with a success must survive; a write still unanswered at the kill may be there or not, but never half
there (a trial without its key, a listed key that does not authenticate, an object with other bytes).

The second test keeps a media client writing while the emulator restarts on the same ports, as a client holding
credentials does: what the S3 endpoint acknowledges then must be kept too.

The third kills the emulator the moment a client has its answer, round after round, and checks the journal:
every trial a client got a 201 for has its `trial.created` event (acknowledged means journaled).

Everything is read back through the public API and `/_emulator`, never from the state dir's files.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import random
import subprocess
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests import agent_flow as flow
from tests.conftest import FROZEN_AT, Emulator, next_ip

ROUNDS = 3
# Limits that would refuse a load test's writes (each has tests of its own), lifted.
UNLIMITED = {
    "EMULATOR_REGISTRATION_RATE_LIMIT": "1000000",
    "EMULATOR_TRIAL_CAPACITY": "1000000",
    "EMULATOR_TRIAL_NETWORK_LIMIT": "1000000",
}
# The kill comes once every surface has this many acknowledged writes in the round, so each one is mid-stream.
KILL_AT = {"registration": 40, "token": 40, "trial": 40, "key": 30, "secret": 30, "media": 60, "replay": 40}
LOAD_LIMIT = 30.0  # seconds a round may take to get there
OPS_CAP = 400  # operations per worker per round: every loop ends by itself
ORGS = 3  # organizations whose keys, secrets and media are written
QUERIES = ["api keys", "trial organization", "embedding index", "media store", "secrets"]
RESTORED = 150  # objects a restart restores in the second test
ABSENT = ("absent", "")  # an object's state when it is not there; else (sha256 of its bytes, content type)

State = tuple[str, str]


@dataclass
class Trial:
    org: str
    api_key: str


@dataclass
class Key:
    secret: str | None  # None: a create that got no answer, found after the restart
    live: bool
    pending: str | None = None  # "create" or "delete" sent and not answered


@dataclass
class Secret:
    revision: int = 0  # the last acknowledged
    pending: bool = False


@dataclass
class Obj:
    acked: State = ABSENT
    pending: State | None = None


@dataclass
class Replay:
    ip: str
    call: dict[str, Any]
    answer: bytes | None = None  # None while unanswered


@dataclass
class Ledger:
    """Every write as the clients saw it: acknowledged, or sent and unanswered (`pending`)."""

    registrations: set[str] = field(default_factory=set)
    tokens: dict[str, list[str]] = field(default_factory=dict)  # registration -> access tokens
    trials: dict[str, Trial] = field(default_factory=dict)  # registration -> its trial
    keys: dict[tuple[str, str], Key] = field(default_factory=dict)  # (org, name)
    secrets: dict[tuple[str, str], Secret] = field(default_factory=dict)  # (org, name)
    objects: dict[tuple[str, str], Obj] = field(default_factory=dict)  # (org, object key)
    replays: dict[str, Replay] = field(default_factory=dict)  # Idempotency-Key -> the call


@dataclass
class Round:
    n: int
    e: Emulator
    ledger: Ledger
    cap: int = OPS_CAP
    killed: asyncio.Event = field(default_factory=asyncio.Event)
    loaded: asyncio.Event = field(default_factory=asyncio.Event)
    acked: Counter[str] = field(default_factory=Counter)
    unanswered: Counter[str] = field(default_factory=Counter)

    def steps(self) -> Iterable[int]:
        """A worker's iterations: up to `cap`, none once the emulator is killed."""
        return itertools.takewhile(lambda _: not self.killed.is_set(), range(self.cap))

    async def send(self, surface: str, request: Awaitable[httpx.Response], ok: int) -> httpx.Response | None:
        """One write: its success answer, or None when the emulator died first (then it may or may not have
        happened). Before the kill every write must succeed: the limits that could refuse one are lifted."""
        try:
            r = await request
        except httpx.TransportError:
            self.unanswered[surface] += 1
            return None
        assert r.status_code == ok, f"round {self.n}, {surface}: {r.status_code} {r.text[:300]}"
        self.acked[surface] += 1
        if all(self.acked[s] >= n for s, n in KILL_AT.items()):
            self.loaded.set()
        return r


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def op(c: httpx.AsyncClient, e: Emulator, key: str, /, **body: object) -> httpx.Response:
    return await c.post(e.api, json=body, headers={"X-api-key": key})


async def each(items: Iterable[Any], check: Callable[[Any], Awaitable[None]], limit: int = 16) -> None:
    """Run `check` on every item, `limit` at a time."""
    gate = asyncio.Semaphore(limit)

    async def one(item: Any) -> None:
        async with gate:
            await check(item)

    await asyncio.gather(*(one(item) for item in items))


async def signer(c: httpx.AsyncClient, e: Emulator, t: Trial) -> tuple[Any, str]:
    """A boto3 client with the credentials the control plane hands out, and the home bucket: signs URLs locally,
    as the real client does once it holds credentials."""
    r = await op(c, e, t.api_key, operation_type="get_bucket_credentials", org=t.org, db="main", bucket_name="home")
    assert r.status_code == 200, r.text
    creds = r.json()
    return flow.s3_client(creds), creds["resolved_bucket_name"]


def url(s3: Any, method: str, bucket: str, key: str) -> str:
    return s3.generate_presigned_url(method, Params={"Bucket": bucket, "Key": key}, ExpiresIn=3600)


async def read_object(c: httpx.AsyncClient, s3: Any, bucket: str, key: str) -> State:
    r = await c.get(url(s3, "get_object", bucket, key))
    if r.status_code == 404:
        return ABSENT
    assert r.status_code == 200, f"{key}: {r.status_code} {r.text[:300]}"
    return sha(r.content), r.headers.get("content-type", "")


# --- the load: one worker per surface and organization, each one request at a time ----------------------------


async def agents(rd: Round) -> None:
    """An agent's first three writes: register, exchange the assertion for an access token, buy a trial."""
    e, led = rd.e, rd.ledger
    async with e.client() as c:
        for _ in rd.steps():
            r = await rd.send("registration", c.post(e.auth + "/agent/identity", json={"type": "anonymous"}), 200)
            if r is None:
                return
            reg = r.json()
            led.registrations.add(reg["id"])
            led.tokens[reg["id"]] = []
            r = await rd.send("token", flow.exchange(c, e, reg["identity"]["assertion"]), 200)
            if r is None:
                return
            token = r.json()["access_token"]
            led.tokens[reg["id"]].append(token)
            r = await rd.send("trial", flow.create_trial(c, e, token), 201)
            if r is None:
                return
            led.trials[reg["id"]] = Trial(r.json()["org"], r.json()["api_key"])


async def control_plane(rd: Round, t: Trial) -> None:
    """Create API keys (deleting every third time instead) and set secrets, in one organization."""
    e, led = rd.e, rd.ledger
    async with e.client() as c:
        for i in rd.steps():
            usable = [name for (org, name), k in led.keys.items() if org == t.org and k.live and k.secret]
            if i % 3 == 2 and usable:
                key = led.keys[(t.org, usable[0])]
                key.pending = "delete"
                r = await rd.send("key", op(c, e, t.api_key, operation_type="delete_key", name=usable[0]), 200)
                if r is None:
                    return
                key.live, key.pending = False, None
            else:
                name = f"k{rd.n}-{i}"
                key = led.keys[(t.org, name)] = Key(secret=None, live=False, pending="create")
                r = await rd.send("key", op(c, e, t.api_key, operation_type="create_key", name=name), 200)
                if r is None:
                    return
                key.secret, key.live, key.pending = r.json()["key"]["api_key"], True, None
            secret = led.secrets.setdefault((t.org, f"S{i % 6}"), Secret())
            secret.pending = True
            body = {"operation_type": "set_secret", "org": t.org, "key": f"S{i % 6}", "value": f"r{rd.n}-{i}"}
            r = await rd.send("secret", op(c, e, t.api_key, **body), 200)
            if r is None:
                return
            # One writer per secret: each answer is the next revision.
            assert r.json()["revision"] == secret.revision + 1, r.text
            secret.revision, secret.pending = r.json()["revision"], False


async def media(rd: Round, t: Trial) -> None:
    """Put new objects, overwrite (every fifth) and delete (every seventh) earlier ones, in one home bucket."""
    e, led = rd.e, rd.ledger
    rng = random.Random(f"{t.org}-{rd.n}")
    async with e.client() as c:
        s3, bucket = await signer(c, e, t)
        for i in rd.steps():
            present = [k for (org, k), o in led.objects.items() if org == t.org and o.acked != ABSENT]
            delete, overwrite = bool(present) and i % 7 == 6, bool(present) and i % 5 == 4
            key = rng.choice(present) if delete or overwrite else f"r{rd.n}/{i:04d}.bin"
            obj = led.objects.setdefault((t.org, key), Obj())
            if delete:
                obj.pending = ABSENT
                request = c.delete(url(s3, "delete_object", bucket, key))
                r = await rd.send("media", request, 204)
            else:
                data, ctype = rng.randbytes(rng.randint(256, 24_000)), f"application/x-crash-{rd.n}-{i}"
                obj.pending = (sha(data), ctype)
                request = c.put(url(s3, "put_object", bucket, key), content=data, headers={"Content-Type": ctype})
                r = await rd.send("media", request, 200)
            if r is None:
                return
            obj.acked, obj.pending = obj.pending, None


async def replays(rd: Round, ip: str) -> None:
    """Tool calls under an Idempotency-Key: each answer is stored, to be replayed byte for byte later."""
    led = rd.ledger
    async with rd.e.client(ip) as c:
        for i in rd.steps():
            key = f"crash-{rd.n}-{ip}-{i}"
            query = {"query": QUERIES[i % len(QUERIES)], "limit": 2}
            call = {
                "jsonrpc": "2.0",
                "id": i,
                "method": "tools/call",
                "params": {"name": "search_docs", "arguments": query},
            }
            replay = led.replays[key] = Replay(ip, call)
            headers = {"Idempotency-Key": key, "Accept": "application/json"}
            r = await rd.send("replay", c.post("/mcp", json=call, headers=headers), 200)
            if r is None:
                return
            replay.answer = r.content


async def load(rd: Round, orgs: list[Trial], ips: list[str], kill: bool) -> None:
    """Every worker at once; with `kill`, SIGKILL the emulator as soon as each surface has its share of writes."""

    async def killer() -> None:
        try:
            await asyncio.wait_for(rd.loaded.wait(), LOAD_LIMIT)
        except TimeoutError:
            pass  # killed anyway; the count check below fails the round
        assert rd.e.proc is not None
        rd.e.proc.kill()  # SIGKILL: no shutdown code runs, nothing is saved on the way out
        rd.killed.set()

    async with asyncio.TaskGroup() as tg:
        for _ in range(4):
            tg.create_task(agents(rd))
        for t in orgs:
            tg.create_task(control_plane(rd, t))
            tg.create_task(media(rd, t))
        for ip in ips:
            tg.create_task(replays(rd, ip))
        if kill:
            tg.create_task(killer())
    if kill:
        assert rd.e.proc is not None
        await asyncio.to_thread(rd.e.proc.wait, 10)
        short = {s: rd.acked[s] for s, n in KILL_AT.items() if rd.acked[s] < n}
        assert not short, f"round {rd.n}: too few writes in {LOAD_LIMIT} s before the kill: {short}"
        assert rd.unanswered.total() >= 1, "the kill came between writes, not in the middle of one"


# --- after the restart: every acknowledged write is back, nothing is half there --------------------------------


async def verify(e: Emulator, led: Ledger, orgs: list[Trial], ips: list[str]) -> None:
    """Check the whole ledger (every round so far) against the restarted emulator; unanswered writes are resolved
    to what is found, so the next round holds them to it."""
    async with httpx.AsyncClient(base_url=e.url, timeout=20) as admin, e.client() as c:
        assert (await admin.get("/health")).status_code == 200

        # Identity provider: registrations and their tokens.
        regs = {r["id"]: r for r in (await admin.get("/_emulator/registrations")).json()["registrations"]}
        lost = sorted(led.registrations - regs.keys())
        assert not lost, f"{len(lost)} acknowledged registrations lost, e.g. {lost[:3]}"
        short = {
            r: (len(ts), regs[r]["tokens_issued"]) for r, ts in led.tokens.items() if regs[r]["tokens_issued"] < len(ts)
        }
        assert not short, f"acknowledged token exchanges lost (registration: acknowledged, stored): {short}"

        # Trials: each acknowledged one is there with its key and database; no organization is half made.
        orgs_now = {o["org"]: o for o in (await admin.get("/_emulator/orgs")).json()["orgs"]}
        wrong = {reg: (t.org, regs[reg]["trial"]) for reg, t in led.trials.items() if regs[reg]["trial"] != t.org}
        assert not wrong, f"acknowledged trials lost (registration: acknowledged, stored): {wrong}"
        dangling = [r["id"] for r in regs.values() if r["trial_org_id"] is not None and r["trial"] is None]
        assert not dangling, f"registrations pointing at no organization: {dangling}"
        half = [
            o["org"]
            for o in orgs_now.values()
            if o["trial"] and ("trial" not in o["api_keys"] or "main" not in [d["db"] for d in o["databases"]])
        ]
        assert not half, f"trial organizations without their key or database: {half}"

        async def trial_key_works(t: Trial) -> None:
            r = await flow.list_orgs(c, e, t.api_key)
            assert r.status_code == 200 and r.json()["orgs"][0]["org"] == t.org, f"{t.org}'s trial key: {r.text}"

        await each(led.trials.values(), trial_key_works)

        # Every acknowledged access token is still honoured: a second trial is 409 (the token passed), never 401;
        # a registration whose trial request went unanswered may get one now (a new write, kept from now on).
        async def token_works(item: tuple[str, str]) -> None:
            reg, token = item
            r = await flow.create_trial(c, e, token)
            assert r.status_code in ((409,) if reg in led.trials else (201, 409)), f"token of {reg}: {r.text}"
            if r.status_code == 201:
                led.trials[reg] = Trial(r.json()["org"], r.json()["api_key"])

        await each([(reg, token) for reg, ts in led.tokens.items() for token in ts], token_works)

        for t in orgs:
            await verify_keys(c, e, led, t)
            await verify_secrets(c, e, led, t)
            await verify_media(c, e, led, t)
    await verify_replays(e, led, ips)


async def verify_keys(c: httpx.AsyncClient, e: Emulator, led: Ledger, t: Trial) -> None:
    """Acknowledged keys are listed and authenticate, acknowledged deletions are gone and refused, and an unanswered
    create or delete is all or nothing: a listed key authenticates, an unlisted one is refused."""
    r = await op(c, e, t.api_key, operation_type="list_keys")
    assert r.status_code == 200, r.text
    listed = {k["name"] for k in r.json()["keys"]}
    mine = {name: k for (org, name), k in led.keys.items() if org == t.org}
    assert listed <= mine.keys() | {"trial"}, f"{t.org}: keys nobody asked for: {listed - mine.keys() - {'trial'}}"
    wrong = [n for n, k in mine.items() if k.pending is None and (n in listed) != k.live]
    assert not wrong, f"{t.org}: acknowledged key writes lost (created and missing, or deleted and back): {wrong}"

    async def consistent(item: tuple[str, Key]) -> None:
        name, k = item
        if k.secret is not None:
            status = (await flow.list_orgs(c, e, k.secret)).status_code
            assert status == (200 if name in listed else 401), f"{t.org}: key {name} listed={name in listed}: {status}"
        k.live, k.pending = name in listed, None

    await each(mine.items(), consistent)


async def verify_secrets(c: httpx.AsyncClient, e: Emulator, led: Ledger, t: Trial) -> None:
    """Acknowledged secrets are listed, and setting one again answers the revision after the last acknowledged one
    (or after the unanswered one, if that was kept): an acknowledged update was not rolled back."""
    r = await op(c, e, t.api_key, operation_type="list_all_secrets", org=t.org)
    listed = {s["key"] for s in r.json()["secrets"]}
    mine = {name: s for (org, name), s in led.secrets.items() if org == t.org}
    missing = [n for n, s in mine.items() if s.revision and n not in listed]
    assert not missing, f"{t.org}: acknowledged secrets lost: {missing}"
    for name, s in mine.items():
        body = {"operation_type": "set_secret", "org": t.org, "key": name, "value": "after the restart"}
        revision = (await op(c, e, t.api_key, **body)).json()["revision"]
        assert s.revision + 1 <= revision <= s.revision + 1 + s.pending, (
            f"{t.org}: secret {name} acknowledged at revision {s.revision} (one more unanswered: {s.pending}), "
            f"set again it says {revision}"
        )
        s.revision, s.pending = revision, False


async def verify_media(c: httpx.AsyncClient, e: Emulator, led: Ledger, t: Trial) -> None:
    """Each object downloads with the bytes and content type of its last acknowledged write (or of the unanswered
    one), an acknowledged delete stays deleted, and the bucket holds nothing else."""
    s3, bucket = await signer(c, e, t)
    mine = {key: o for (org, key), o in led.objects.items() if org == t.org}
    found: dict[str, State] = {}

    async def read(key: str) -> None:
        found[key] = await read_object(c, s3, bucket, key)

    await each(mine, read)
    wrong = {k: (o.acked, o.pending, found[k]) for k, o in mine.items() if found[k] not in {o.acked, o.pending}}
    assert not wrong, f"{t.org}: objects (acknowledged, unanswered, found): {wrong}"
    listed = {
        obj["Key"]
        for page in await asyncio.to_thread(lambda: list(s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)))
        for obj in page.get("Contents", [])
    }
    assert listed == {k for k, state in found.items() if state != ABSENT}, f"{t.org}: listing and reads disagree"
    for key, o in mine.items():
        o.acked, o.pending = found[key], None


async def verify_replays(e: Emulator, led: Ledger, ips: list[str]) -> None:
    """An acknowledged answer comes back byte for byte, marked as a replay; an unanswered one is answered now
    (its claim was released at start, not left pending: no 409)."""
    for ip in ips:
        async with e.client(ip) as c:

            async def replay(item: tuple[str, Replay]) -> None:
                key, rep = item
                headers = {"Idempotency-Key": key, "Accept": "application/json"}
                r = await c.post("/mcp", json=rep.call, headers=headers)
                assert r.status_code == 200, f"{key}: {r.status_code} {r.text[:200]}"
                if rep.answer is not None:
                    assert r.headers.get("idempotent-replayed") == "true" and r.content == rep.answer, (
                        f"{key}: the acknowledged answer was not kept"
                    )
                rep.answer = r.content

            await each([(k, r) for k, r in led.replays.items() if r.ip == ip], replay)


# --- the test ---------------------------------------------------------------------------------------------------


def port(address: str) -> str:
    return str(urlsplit(address if "//" in address else f"//{address}").port)


async def test_acknowledged_writes_survive_kill_9_under_load(
    start_emulator: Callable[..., Emulator], tmp_path: Path
) -> None:
    state = tmp_path / "crashed"
    base = ["--no-watch", "--freeze-clock", FROZEN_AT]
    e: Emulator = start_emulator(*base, state_dir=state, env=UNLIMITED)
    # The same ports every time, as with the default settings: clients keep their URLs across the restart.
    same_ports = [
        *("--site-port", port(e.url), "--auth-port", port(e.auth), "--api-port", port(e.api)),
        *("--tunnel-port", port(e.endpoints["proxy"]), "--s3-port", port(e.endpoints["s3"])),
    ]
    led = Ledger()
    orgs: list[Trial] = []
    async with e.client() as c:
        for _ in range(ORGS):
            reg, token, made = await flow.new_trial(c, e)
            orgs.append(Trial(made["org"], made["api_key"]))
            led.registrations.add(reg["id"])
            led.tokens[reg["id"]] = [token]
            led.trials[reg["id"]] = orgs[-1]
    ips = [next_ip(), next_ip()]  # a replay is scoped to the client's address: the same ones after the restart

    for n in range(1, ROUNDS + 2):
        final = n > ROUNDS  # a short load that runs to its end, then a kill with nothing in flight
        rd = Round(n, e, led, cap=5 if final else OPS_CAP)
        t0 = time.monotonic()
        await load(rd, orgs, ips, kill=not final)
        if final:
            assert not rd.unanswered, rd.unanswered  # the restarted emulator took new writes on every surface
            assert e.proc is not None
            e.proc.kill()
            await asyncio.to_thread(e.proc.wait, 10)
        loaded = time.monotonic() - t0
        e = start_emulator(*base, *same_ports, state_dir=state, env=UNLIMITED)
        await verify(e, led, orgs, ips)
        print(
            f"round {n}: {loaded:.1f} s of load, acknowledged {dict(rd.acked)}, unanswered {dict(rd.unanswered)}; "
            f"restart and checks {time.monotonic() - t0 - loaded:.1f} s"
        )


async def test_media_writes_taken_during_a_restart_are_kept(
    start_emulator: Callable[..., Emulator], tmp_path: Path
) -> None:
    """A client holding credentials writes on through a restart on the same ports (the default settings): whatever
    the S3 endpoint acknowledges while the emulator starts must be there once it is up, and after the next kill."""
    state = tmp_path / "restarting"
    base = ["--no-watch", "--freeze-clock", FROZEN_AT]
    e: Emulator = start_emulator(*base, state_dir=state)
    same_ports = ["--api-port", port(e.api), "--s3-port", port(e.endpoints["s3"])]
    rng = random.Random(7)
    async with e.client() as c:
        _, _, made = await flow.new_trial(c, e)
        s3, bucket = await signer(c, e, Trial(made["org"], made["api_key"]))

        # Objects for the restart to bring back, so that it takes a moment.
        async def put(key: str) -> None:
            r = await c.put(url(s3, "put_object", bucket, key), content=rng.randbytes(2000))
            assert r.status_code == 200, r.text

        await each([f"old/{i:03d}" for i in range(RESTORED)], put, limit=4)
    assert e.proc is not None
    e.proc.kill()
    await asyncio.to_thread(e.proc.wait, 10)

    # Overwrite those objects and add new ones while the emulator starts again, until it says it is up.
    starting = asyncio.create_task(asyncio.to_thread(start_emulator, *base, *same_ports, state_dir=state))
    acked: dict[str, State] = {}
    async with httpx.AsyncClient(timeout=10) as c:
        for i in itertools.count():
            if starting.done():
                break
            key = f"old/{i % RESTORED:03d}" if i % 2 else f"new/{i:05d}"
            data, ctype = rng.randbytes(1000), f"application/x-restart-{i}"
            try:
                r = await c.put(url(s3, "put_object", bucket, key), content=data, headers={"Content-Type": ctype})
            except httpx.TransportError:
                await asyncio.sleep(0.005)  # not listening yet
                continue
            if r.status_code == 200:  # anything else (a 503 while restoring, say) acknowledges nothing
                acked[key] = (sha(data), ctype)
        e = await starting

        async def undone() -> list[str]:
            found = {key: await read_object(c, s3, bucket, key) for key in acked}
            return sorted(key for key, state in acked.items() if found[key] != state)

        lost = await undone()
        assert not lost, (
            f"{len(lost)} of {len(acked)} writes acknowledged while the emulator started are not there once it is up "
            f"(the restore put older bytes back, or nothing): {lost[:5]}"
        )
        assert e.proc is not None
        e.proc.kill()
        await asyncio.to_thread(e.proc.wait, 10)
        e = start_emulator(*base, *same_ports, state_dir=state)
        lost = await undone()
        assert not lost, (
            f"{len(lost)} of {len(acked)} writes acknowledged while the emulator started are lost at the next "
            f"kill -9 (never written through to disk): {lost[:5]}"
        )


# --- acknowledged means journaled -------------------------------------------------------------------------------

JOURNAL_ROUNDS = 5
WRITERS = 8  # concurrent clients, each one request at a time on its own connection
JOURNAL_KILL_AT = 24  # acknowledged trials in a round when the writer that got the last one kills the emulator


async def journaled_trials(e: Emulator) -> dict[str, tuple[str, str]]:
    """Every `trial.created` event in the journal: registration -> (org slug, org id)."""
    found: dict[str, tuple[str, str]] = {}
    since = 0
    async with httpx.AsyncClient(base_url=e.url, timeout=20) as admin:
        while True:
            params = {"kinds": "trial.created", "since": since, "limit": 5000}
            page = (await admin.get("/_emulator/journal", params=params)).json()
            for event in page["events"]:
                found[event["data"]["registration"]] = (event["subject"], event["data"]["org_id"])
            if len(page["events"]) < 5000:
                return found
            since = page["events"][-1]["seq"]


async def test_every_acknowledged_trial_is_journaled_after_kill_9(
    start_emulator: Callable[..., Emulator], tmp_path: Path
) -> None:
    """Acknowledged means journaled: `WRITERS` clients create trials through the real API (register, exchange,
    `POST /api/v1/trial-orgs`), the one that gets the round's `JOURNAL_KILL_AT`th 201 kills the emulator at once
    (SIGKILL, from the client's side of the answer), and after a restart on the same state dir every trial a client
    got a 201 for has its `trial.created` event, naming its organization: 0 missing, round after round. (The
    journal used to queue events for a writer task: the last batch of an answered request could die with it.)"""
    state = tmp_path / "journaled"
    base = ["--no-watch", "--freeze-clock", FROZEN_AT]
    acked: dict[str, tuple[str, str]] = {}  # registration -> (org slug, org id), as the 201s said
    e: Emulator = start_emulator(*base, state_dir=state, env=UNLIMITED)
    for n in range(1, JOURNAL_ROUNDS + 1):
        proc = e.proc
        assert proc is not None
        in_round = 0

        async def writer(e: Emulator = e, proc: subprocess.Popen[bytes] = proc, n: int = n) -> None:
            nonlocal in_round
            async with e.client() as c:
                for _ in range(OPS_CAP):
                    try:
                        reg = await flow.register(c, e)
                        r = await flow.exchange(c, e, reg["identity"]["assertion"])
                        assert r.status_code == 200, r.text
                        r = await flow.create_trial(c, e, r.json()["access_token"])
                    except httpx.TransportError:
                        return  # the emulator is gone: this write may or may not have happened
                    assert r.status_code == 201, f"round {n}: {r.status_code} {r.text[:300]}"
                    acked[reg["id"]] = (r.json()["org"], r.json()["org_id"])
                    in_round += 1
                    if in_round == JOURNAL_KILL_AT:
                        proc.kill()  # SIGKILL right on the answer: no shutdown code runs, nothing is flushed

        await asyncio.gather(*(writer() for _ in range(WRITERS)))
        await asyncio.to_thread(proc.wait, 10)
        assert in_round >= JOURNAL_KILL_AT, f"round {n}: the emulator died after {in_round} trials, before the kill"

        e = start_emulator(*base, state_dir=state, env=UNLIMITED)  # the next round's emulator, on the same state
        journal = await journaled_trials(e)
        missing = {reg: made for reg, made in acked.items() if reg not in journal}
        assert not missing, (
            f"round {n}: {len(missing)} of {len(acked)} acknowledged trials have no trial.created event: "
            f"{list(missing.items())[:4]}"
        )
        wrong = {reg: (made, journal[reg]) for reg, made in acked.items() if journal[reg] != made}
        assert not wrong, f"round {n}: trial.created names another organization than the 201 did: {wrong}"
        print(f"round {n}: {in_round} trials acknowledged before and during the kill; {len(acked)} journaled in all")
