"""Where the agent under evaluation runs: apart from the grader.

`namespace` (the default on Linux) runs it under bubblewrap (`bwrap`, the sandbox Flatpak uses; Debian's package
`bubblewrap`) in namespaces of its own: a network with loopback alone, into which only its trial emulator's
client-facing ports are relayed (relay.py), so it reaches no other trial's emulator and nothing else on the machine;
its own PID namespace, so that every process it starts ends with it (the namespace's init is killed, and the kernel
kills the rest, whatever they did to their environment or session) and it sees no process of the harness's or the
emulator's; a user of its own (uid 1000 inside, the caller outside); a file system that is read-only but for its
scratch directory (its HOME), with a /tmp of its own and the trial state, the task directories and the report folder
covered. What it keeps seeing: the rest of the machine's files, read-only (the Python it runs, the current
directory). Cost: about 0.15 s more of the agent's time per trial (benchmarks/evaluation.py).

`none` (the default elsewhere) runs it as a plain process group, as before: there an agent that sets out to cheat
can read other trials' files, reach their emulators and outlive its trial. The report says where each trial ran.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal

import emulator

Sandbox = Literal["namespace", "none"]
SANDBOXES: tuple[Sandbox, ...] = ("namespace", "none")
INSIDE = Path("/tmp/trial")  # the agent's scratch directory, its HOME, as it sees it
RELAY_INSIDE = "/tmp/.emulator-relay"
PACKAGE_ROOT = Path(emulator.__file__).resolve().parent.parent  # the emulator's code (a clone, or site-packages)


def default() -> Sandbox:
    return "namespace" if sys.platform.startswith("linux") else "none"


def unavailable(sandbox: Sandbox) -> str | None:
    """Why `sandbox` cannot run here (None: it can), found by starting one."""
    if sandbox == "none":
        return None
    if not sys.platform.startswith("linux"):
        return "the namespace sandbox needs Linux; use --sandbox none (the agent then runs unconfined)"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return (
            "the namespace sandbox needs bubblewrap (`bwrap`): install it (Debian/Ubuntu: apt install bubblewrap; "
            "Fedora: dnf install bubblewrap), or run with --sandbox none (the agent then runs unconfined)"
        )
    probe = subprocess.run(
        [bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        said = probe.stderr.decode(errors="replace").strip()
        return (
            f"bubblewrap cannot make a sandbox here ({said}); run with --sandbox none (the agent then runs unconfined)"
        )
    return None


def command(agent: str, *, scratch: Path, relay: Path, ports: list[int], cwd: Path, cover: list[Path]) -> list[str]:
    """The argv that runs the shell command `agent` in the namespace sandbox: `scratch` (writable) at INSIDE,
    `relay`'s sockets at RELAY_INSIDE, `cwd` and the Python and the emulator's code it needs visible (read-only) even
    when they are under /tmp, and each of `cover` hidden under an empty file system."""
    bwrap = shutil.which("bwrap") or "bwrap"
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/run"]
    shown: list[Path] = []
    for path in (Path(sys.prefix), Path(sys.base_prefix), PACKAGE_ROOT, cwd):
        path = path.resolve()
        if _under(path, Path("/tmp")) or _under(path, Path("/run")):
            if not any(_under(path, s) for s in shown):
                shown.append(path)
                argv += ["--ro-bind", str(path), str(path)]
    for path in cover:
        if path.is_dir():
            argv += ["--tmpfs", str(path.resolve())]
        elif path.exists():
            argv += ["--ro-bind", "/dev/null", str(path.resolve())]
    argv += ["--bind", str(scratch), str(INSIDE), "--bind", str(relay), RELAY_INSIDE]
    where = cwd if not any(_under(cwd.resolve(), c.resolve()) for c in cover) else INSIDE
    # Not root inside (uid 1000 in a user namespace of its own, the caller outside): a client that does more as
    # root (the real client's embedded Postgres adds a user, then chmods its data dir's parents) runs as a user's.
    argv += ["--chdir", str(where), "--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000"]
    argv += ["--die-with-parent", "--new-session"]
    argv += [sys.executable, "-m", "emulator.eval.relay", RELAY_INSIDE, ",".join(map(str, ports)), "--"]
    return [*argv, "/bin/sh", "-c", agent]


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents
