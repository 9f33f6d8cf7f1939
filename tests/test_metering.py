"""The hosted runtime's metering (runtime/metering.py) of real processes: a workload's process tree, its children
that ended included, read while it runs and not after; and Docker's stats as the engine reports them.

The hosted database's own figures, through the admin API, are test_pxt_cloud.py's (test_4), on both runtimes."""

from __future__ import annotations

import asyncio
import sys

from emulator.runtime.containers import Stats, container_usage
from emulator.runtime.metering import Meter
from emulator.runtime.process import ProcessTree
from emulator.runtime.workload import Usage

# A child that holds 60 MB and burns CPU, then ends (its time is the parent's cutime from then on); then the parent
# holds 30 MB and burns CPU itself, and waits on a pipe the test closes.
TREE = """
import subprocess, sys
subprocess.run([sys.executable, '-c', 'x = bytearray(60_000_000); sum(range(3 * 10**7))'], check=True)
y = bytearray(30_000_000)
sum(range(3 * 10**7))
print('ready', flush=True)
sys.stdin.read()
"""


async def test_a_process_tree_is_metered_while_it_runs_with_its_ended_children_and_then_no_more() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        TREE,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    tree = ProcessTree.of(proc.pid)
    meter = Meter(lambda key: {}, interval=0.1)
    meter.add(("org_1", "main"), "acme", tree)
    try:
        assert await asyncio.wait_for(proc.stdout.readline(), 60) == b"ready\n"
        await meter.final(tree)  # what the supervisor reads before it stops a workload
        running = meter.usage(("org_1", "main"))
        assert running is not None and running.running == 1
        # Both ranges' CPU, the ended child's through its parent; memory: the child's 60 MB or the parent's 30 MB.
        assert running.cpu_seconds > 0.3, running
        assert 30e6 < running.peak_memory_bytes < 400e6, running
    finally:
        proc.stdin.close()
        await proc.wait()
    assert tree.usage() is None  # reaped: nothing of it is left to read
    for _ in range(50):  # bounded: the readings end once nothing metered runs
        if not meter.reading:
            break
        await asyncio.sleep(0.1)
    assert not meter.reading
    ended = meter.usage(("org_1", "main"))
    assert ended is not None and ended.running == 0 and ended.cpu_seconds >= running.cpu_seconds
    assert [u.slug for u in meter.every()] == ["acme"]
    await meter.close()


def test_a_containers_stats_read_as_docker_stats_counts_them() -> None:
    v1: Stats = {
        "cpu_stats": {"cpu_usage": {"total_usage": 2_500_000_000}},
        "memory_stats": {"usage": 300 * 2**20, "max_usage": 400 * 2**20, "stats": {"total_inactive_file": 100 * 2**20}},
    }
    assert container_usage(v1) == Usage(2.5, 200 * 2**20)
    v2: Stats = {
        "cpu_stats": {"cpu_usage": {"total_usage": 10**9}},
        "memory_stats": {"usage": 50 * 2**20, "stats": {"inactive_file": 0}},
    }
    assert container_usage(v2) == Usage(1.0, 50 * 2**20)
    assert container_usage({"cpu_stats": {}, "memory_stats": {}}) is None  # a stopped container: no cgroup left
