"""The per-user build cache (issue 30): environments built once per machine and shared by every emulator.

The rules first, on the cache itself (no emulator: two instances stand for two emulators, since file locks are per
open file, not per process): one builds while the other waits, a damaged or unfinished entry is rebuilt, eviction
keeps the bound and spares what an emulator holds. Then two real emulators on the process runtime, building the
same environment at once through the control plane.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.runtime.buildcache import MANIFEST, BuildCache
from emulator.testkit import Testkit
from tests.agent_flow import DATABASE_TARGET
from tests.conftest import BASE_IMAGE, Emulator
from tests.test_cloud_api import op, trial, wait_for_state


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.first = asyncio.Event()

    async def __call__(self, line: str) -> None:
        self.lines.append(line)
        self.first.set()


def maker(calls: list[Path], size: int = 1000, gate: asyncio.Event | None = None, started: asyncio.Event | None = None):
    async def build(target: Path) -> None:
        calls.append(target)
        if started is not None:
            started.set()
        if gate is not None:
            await gate.wait()
        (target / "lib").mkdir(parents=True)
        (target / "lib" / "module.py").write_bytes(b"x" * size)

    return build


async def test_two_emulators_building_one_key_build_it_once(tmp_path: Path) -> None:
    first, second = BuildCache(tmp_path, 10**9), BuildCache(tmp_path, 10**9)
    calls: list[Path] = []
    gate, started = asyncio.Event(), asyncio.Event()
    log_a, log_b = Lines(), Lines()
    a = asyncio.create_task(first.ensure("k1", maker(calls, gate=gate, started=started), log_a))
    await asyncio.wait_for(started.wait(), 30)  # the first has taken the build lock and is building
    b = asyncio.create_task(second.ensure("k1", maker(calls), log_b))
    await asyncio.wait_for(log_b.first.wait(), 30)  # the second found it taken and waits
    assert not b.done()
    gate.set()
    (entry_a, built_a), (entry_b, built_b) = await asyncio.gather(a, b)
    assert len(calls) == 1 and (built_a, built_b) == (True, False) and entry_a == entry_b
    assert "waiting for another emulator that is building k1" in log_b.lines[0]
    assert (entry_a / "lib" / "module.py").stat().st_size == 1000
    first.close()
    second.close()


@pytest.mark.parametrize("damage", ["changed", "removed", "unfinished", "foreign manifest"])
async def test_a_damaged_entry_is_rebuilt_not_used(tmp_path: Path, damage: str) -> None:
    calls: list[Path] = []
    entry, _ = await BuildCache(tmp_path, 10**9).ensure("k1", maker(calls), Lines())
    module = entry / "lib" / "module.py"
    if damage == "changed":
        module.write_bytes(b"y" * 999)
    elif damage == "removed":
        module.unlink()
    elif damage == "unfinished":
        (entry / MANIFEST).unlink()
    else:
        (entry / MANIFEST).write_text('{"key": "k2", "files": 1, "bytes": 1000, "fingerprint": "x"}')
    log = Lines()
    later = BuildCache(tmp_path, 10**9)  # another emulator: it has not checked the entry before
    assert not later.hold("k1")
    _, built = await later.ensure("k1", maker(calls), log)
    assert built and len(calls) == 2 and module.read_bytes() == b"x" * 1000
    assert any("damaged or unfinished: building it again" in line for line in log.lines)
    assert later.hold("k1")


async def test_bytecode_written_by_running_interpreters_is_not_damage(tmp_path: Path) -> None:
    calls: list[Path] = []
    entry, _ = await BuildCache(tmp_path, 10**9).ensure("k1", maker(calls), Lines())
    (entry / "lib" / "__pycache__").mkdir()
    (entry / "lib" / "__pycache__" / "module.cpython-311.pyc").write_bytes(b"compiled")
    assert BuildCache(tmp_path, 10**9).hold("k1")
    assert len(calls) == 1


async def test_eviction_keeps_the_bound_least_recently_used_first_and_spares_a_held_entry(tmp_path: Path) -> None:
    calls: list[Path] = []
    for key in ("old", "held", "recent"):  # each built by an emulator that then ended
        done = BuildCache(tmp_path, 10**9)
        await done.ensure(key, maker(calls), Lines())
        done.close()
    stamp = 1_700_000_000
    for i, key in enumerate(("held", "old", "recent")):  # used in this order: held longest ago
        os.utime(tmp_path / "envs" / key / ".used", (stamp + i, stamp + i))
    running = BuildCache(tmp_path, 10**9)
    assert running.hold("held")  # an emulator still runs from it
    newest = BuildCache(tmp_path, 3000)  # three entries of 1000 bytes fit; a fourth does not
    await newest.ensure("new", maker(calls), Lines())
    left = sorted(p.name for p in (tmp_path / "envs").iterdir() if p.is_dir())
    assert left == ["held", "new", "recent"]  # the least recently used one that nobody holds went
    assert sum(size for _, _, size in newest.entries()) == 3000
    running.close()
    newest.max_bytes = 2000
    # Holding it was a use (now the most recent but one): the one used longest ago goes; what `newest` uses stays.
    assert newest.evict() == ["recent"]
    assert sorted(p.name for p in (tmp_path / "envs").iterdir() if p.is_dir()) == ["held", "new"]
    newest.close()


async def _update_and_wait(emu: Emulator) -> list[str]:
    c, t = await trial(emu)
    try:
        body = {"org": t["org"], "db": "main", "service_mutations": [], "blob": None}
        expected = {"database": 0, "services": []}
        r = await op(
            c,
            emu,
            t["api_key"],
            operation_type="submit_update",
            database_target=DATABASE_TARGET,
            expected_generations=expected,
            **body,
        )
        assert r.status_code == 200, r.text
        for _ in range(20):  # bounded: each wait polls for up to 10 s
            try:
                await wait_for_state(c, emu, t, "AVAILABLE")
                break
            except AssertionError:
                continue
        else:
            raise AssertionError("the database never became AVAILABLE")
        logs = await op(c, emu, t["api_key"], operation_type="get_logs", org=t["org"], db="main")
        return [record["line"] for record in logs.json()["records"]]
    finally:
        await c.aclose()


async def test_two_emulators_at_once_build_the_environment_once_then_a_third_reuses_it(
    start_emulator, tmp_path: Path
) -> None:
    cache = tmp_path / "private" / "shared-cache"
    (tmp_path / "private").mkdir(mode=0o700)  # as `mktemp -d` makes one: run as root, Postgres's user must get in
    first, second = (start_emulator("--runtime", "process", "--build-cache", str(cache)) for _ in range(2))
    logs = await asyncio.gather(_update_and_wait(first), _update_and_wait(second))
    builds = [line for lines in logs for line in lines if line.startswith("building environment")]
    assert len(builds) == 1, logs
    waited = next(lines for lines in logs if not any(line.startswith("building environment") for line in lines))
    assert any("taken from the shared build cache" in line for line in waited), waited
    entries = [p for p in (cache / "envs").iterdir() if p.is_dir()]
    assert len(entries) == 1 and (entries[0] / MANIFEST).is_file()
    # A new state dir later: the environment is reused, not built again.
    third = start_emulator("--runtime", "process", "--build-cache", str(cache))
    lines = await _update_and_wait(third)
    assert not any(line.startswith("building environment") for line in lines), lines
    assert any("taken from the shared build cache" in line for line in lines), lines
    # Its database's empty Postgres cluster is a copy of the environment's template (no initdb of its own).
    assert "the database's Postgres cluster: a copy of its environment's template" in lines, lines
    assert (entries[0] / "extras" / "pgdata.complete").is_file()
    # After a reset (its databases gone), the state dir's link into the cache is checked and used, not rebuilt.
    with third.admin() as c:
        assert c.post("/_emulator/reset", json={}).status_code == 200
    lines = await _update_and_wait(third)
    assert not any(line.startswith("building environment") for line in lines), lines
    assert any("unchanged: not rebuilt" in line for line in lines), lines


def test_a_throwaway_emulator_keeps_no_spares_and_status_says_so(start_emulator, tmp_path: Path) -> None:
    """`exec` and the plugin start throwaway emulators (no spares: memory over restart speed); `up` a developer's;
    an explicit `--spares` wins over the profile. The build cache is on by default, and `off` turns it off."""
    cache = tmp_path / "c"
    with Testkit.start(tmp_path / "kit", ["--runtime", "process", "--build-cache", str(cache)]) as kit:
        runtime = kit.status().runtime
        assert (runtime.profile, runtime.spares, runtime.build_cache) == ("throwaway", False, str(cache))
    developer = start_emulator("--build-cache", "off")
    with developer.admin() as c:
        runtime = c.get("/_emulator/status").json()["runtime"]
    assert (runtime["profile"], runtime["spares"], runtime["build_cache"]) == ("developer", True, None)
    explicit = start_emulator("--profile", "throwaway", "--spares")
    with explicit.admin() as c:
        runtime = c.get("/_emulator/status").json()["runtime"]
    assert (runtime["profile"], runtime["spares"]) == ("throwaway", True)
    assert runtime["build_cache"].endswith("pxt-emulator")  # the per-user default
    out = subprocess.run(
        [sys.executable, "-m", "emulator", "status", "--state-dir", str(explicit.state_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert re.search(r"^  profile      throwaway \(spares kept; build cache /\S+pxt-emulator\)$", out, re.M), out


def test_the_bound_covers_the_engines_environment_images(tmp_path: Path) -> None:
    """On Docker the environments are the engine's images: the cache's bound removes the least recently used ones,
    never the one just built nor one a container was made from (the engine refuses that one)."""
    import io

    import docker
    import docker.errors

    from emulator.runtime.images import Images

    client = docker.from_env()
    cache = BuildCache(tmp_path, 10**9)
    made: dict[str, str] = {}
    try:
        for n, name in enumerate(("old", "used", "recent", "new")):
            digest = f"{name:0<24}"
            dockerfile = f"FROM {BASE_IMAGE}\nRUN head -c 3000000 /dev/urandom > /blob-{n}\n"
            labels = {"pxt-emulator.environment": digest, "pxt-emulator.test": "bound"}  # not `env`: not the suite's
            image, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), labels=labels, rm=True)
            assert image.id is not None
            made[name] = image.id
            cache.stamp(digest[:24])
            os.utime(cache.stamps / f"{digest[:24]}.used", (1_700_000_000 + n, 1_700_000_000 + n))
        holder = client.containers.create(made["used"], ["true"])  # a container was made from it: the engine keeps it
        try:
            # Counting only this test's images: the machine's other environment images are not the test's to remove.
            images = Images(client, tmp_path / "images", BASE_IMAGE, cache, kind="pxt-emulator.test=bound")
            cache.max_bytes = 7_000_000  # two of the four (3 MB each over the base) fit
            removed = images.evict(keep=f"{'new':0<24}")
            assert removed == [f"{'old':0<24}", f"{'recent':0<24}"]  # "used" is skipped, "new" kept: the bound holds
            left = {i.id for i in client.images.list(filters={"label": "pxt-emulator.test=bound"})}
            assert left == {made["used"], made["new"]}
        finally:
            holder.remove(force=True)
    finally:
        for image_id in made.values():
            with contextlib.suppress(docker.errors.DockerException):
                client.images.remove(image_id, force=True)


async def test_the_build_cache_command_lists_and_clears_what_no_emulator_uses(tmp_path: Path) -> None:
    calls: list[Path] = []
    for key in ("idle", "held"):
        done = BuildCache(tmp_path, 10**9)
        await done.ensure(key, maker(calls), Lines())
        done.close()
    running = BuildCache(tmp_path, 10**9)
    assert running.hold("held")

    def cli(*args: str) -> str:
        argv = [sys.executable, "-m", "emulator", "build-cache", "--build-cache", str(tmp_path), *args]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout

    listed = cli()
    assert f"build cache {tmp_path}: 2 environments" in listed
    assert re.search(r"^  held\s+0 MB  last used \S+  in use$", listed, re.M), listed
    assert re.search(r"^  idle\s+0 MB  last used \S+$", listed, re.M), listed
    cleared = json.loads(cli("--clear", "--json"))
    assert cleared["removed"] == ["idle"] and [e["key"] for e in cleared["environments"]] == ["held"]
    running.close()
    assert "removed 1 environment\n" in cli("--clear")
    assert not (tmp_path / "envs" / "held").exists()
