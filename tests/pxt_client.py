"""The real client: `pixeltable==0.7.21` and its `pxt` CLI from PyPI, in a virtualenv of its own.

The virtualenv is built once and cached (`PXT_CLIENT_VENV`, default ~/.cache/pxt-emulator/client-0.7.21);
a marker file says it is complete, so an interrupted install is redone rather than trusted.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

from emulator.runtime.process import postmaster_of

VERSION = "0.7.21"
# `serve`: the client itself loads an app's routers (fastapi) for `pxt service update`.
REQUIREMENT = f"pixeltable[serve]=={VERSION}"


def venv_dir() -> Path:
    default = Path.home() / ".cache" / "pxt-emulator" / f"client-{VERSION}"
    return Path(os.environ.get("PXT_CLIENT_VENV", default))


def ensure_client() -> Path:
    """Path of the `pxt` executable, installing the client first if needed (bounded: 30 minutes)."""
    return install_client(venv_dir(), REQUIREMENT)


def install_client(venv: Path, requirement: str) -> Path:
    """The `pxt` of `requirement` in the virtualenv `venv`, installed once."""
    return install_venv(venv, requirement) / "bin" / "pxt"


def install_venv(venv: Path, requirement: str, python: str = sys.executable) -> Path:
    """The virtualenv `venv` (of `python`) with `requirement` installed once, and again if the requirement changed;
    a lock beside it lets parallel workers wait for one install."""
    marker = venv / ".complete"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.is_file() or marker.read_text().strip() != requirement:
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=300)
            pip = [str(venv / "bin" / "pip"), "install", "--quiet", requirement]  # pip: the machine's index config
            subprocess.run(pip, check=True, timeout=1800)
            marker.write_text(requirement + "\n")
    return venv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Pxt:
    """Runs `pxt` with its own home and daemon port, and the environment `emulator env` printed."""

    def __init__(self, exe: Path, home: Path, env: dict[str, str]) -> None:
        self.exe = exe
        home.mkdir(parents=True, exist_ok=True)
        # The caller's own proxy and key settings must not leak in; then exactly what `emulator env` printed.
        inherited = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PIXELTABLE_API_KEY", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy")
        }
        self.env = {**inherited, **env, "PIXELTABLE_HOME": str(home), "PXT_PORT": str(free_port())}

    def __call__(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.exe), *args], capture_output=True, text=True, timeout=timeout, env=self.env)

    def stop_daemon(self) -> None:
        """Stop the client's daemon and the embedded Postgres its home holds (which outlives it)."""
        # --force: a test that failed mid-command can leave a request in flight; the daemon must still go.
        self("daemon", "stop", "--force", timeout=60)
        pid = postmaster_of(Path(self.env["PIXELTABLE_HOME"]) / "pgdata")
        if pid is not None:
            os.kill(pid, signal.SIGINT)
