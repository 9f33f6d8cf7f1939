"""What an ended workload could leave behind, looked for the way a person would: in the process table, in the
Docker engine, and on disk. Tests call `leftovers` after whatever ended the workloads (a trial's expiry, a
reset, a restart after `kill -9`) and expect it to find nothing."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from tests.conftest import Emulator


def tag(e: Emulator) -> str:
    """The label value the Docker runtime gives this emulator's containers (a digest of its state dir)."""
    return hashlib.sha256(str(e.state_dir.resolve()).encode()).hexdigest()[:10]


def processes(state_dir: Path, *, but: int | None = None) -> list[str]:
    """Processes whose command line names the state dir (hosted servers, services, spares, their Postgres; on
    the Docker runtime none: theirs run in containers), other than `but` (the emulator itself)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == but:
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue  # gone meanwhile
        if str(state_dir) in cmdline:
            found.append(f"process {proc.name}: {cmdline[:160]}")
    return found


def containers(e: Emulator) -> list[str]:
    """The engine's containers of this emulator, running or not."""
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"label=pxt-emulator={tag(e)}", "--format", "{{.Names}} {{.Status}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [f"container {line}" for line in out.splitlines() if line.strip()]


def leftovers(e: Emulator, *, databases: bool = True) -> list[str]:
    """Everything of a hosted workload still there: processes, containers, sockets, database directories, disks,
    buckets (the media store's copies on disk: a bucket with none is made again at the next start). `databases`:
    look for database directories too (a reset or an expiry removes them; a stop keeps them)."""
    found = processes(e.state_dir, but=e.proc.pid if e.proc is not None else None)
    if e.runtime == "docker":
        found += containers(e)
    runtime = e.state_dir / "runtime"
    record = runtime / "sockets"
    if record.is_file():
        found += [f"socket {p}" for p in Path(record.read_text()).glob("*/*.sock")]
    if databases:
        found += [f"directory {d}" for d in sorted((runtime / "databases").glob("*/*"))]
        found += [f"disk {d}" for d in sorted((runtime / "disks").glob("*.img"))]
    found += [
        f"bucket {m.stem} ({len(json.loads(m.read_text()))} objects)" for m in (e.state_dir / "media").glob("*.json")
    ]
    return found
