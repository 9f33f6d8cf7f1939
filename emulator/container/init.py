"""PID 1 of the emulator's container: runs `python3 -m emulator ARGS` as its child, passes SIGTERM, SIGINT and
SIGHUP on to it, reaps every process that ends in the container (a hosted database's Postgres is started detached, so
it is re-parented here when its starter exits), and exits with the emulator's status.

It is also the health check's probe: a thread asks the emulator's `/health` every PROBE_EVERY seconds and keeps
HEALTH_FILE while the answer is 200, so the image's HEALTHCHECK is `test -f` in /bin/sh (a Python start per check
cost 7 % of a core at idle). And it puts the build cache on the state volume unless told otherwise
(EMULATOR_BUILD_CACHE), so a new container on the same volume finds the environments an earlier one built."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

HEALTH_FILE = Path("/tmp/pxt-emulator.healthy")
PROBE_EVERY = 2.0  # seconds: what the health check sees is at most this old
PROBE_TIMEOUT = 2.0


def healthy(port: int) -> bool:
    """Whether the emulator's site answers /health with 200 (on loopback, past any proxy the environment names)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=PROBE_TIMEOUT)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def probe(port: int, stop: threading.Event) -> None:
    while not stop.is_set():
        with contextlib.suppress(OSError):  # /tmp full or read-only: the check fails, as it should
            if healthy(port):
                HEALTH_FILE.touch()
            else:
                HEALTH_FILE.unlink(missing_ok=True)
        stop.wait(PROBE_EVERY)


def main() -> int:
    state = os.environ.get("EMULATOR_STATE_DIR", "/var/lib/pxt-emulator")
    os.environ.setdefault("EMULATOR_BUILD_CACHE", os.path.join(state, "build-cache"))
    HEALTH_FILE.unlink(missing_ok=True)  # a restarted container's file is not this emulator's health
    child = subprocess.Popen([sys.executable, "-m", "emulator", *sys.argv[1:]])
    stop = threading.Event()
    port = int(os.environ.get("EMULATOR_SITE_PORT") or 8700)
    threading.Thread(target=probe, args=(port, stop), daemon=True, name="health").start()

    def forward(signum: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    while True:
        try:
            pid, status = os.wait()  # any child: the emulator, or an orphan handed to PID 1
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue
        if pid == child.pid:
            stop.set()
            with contextlib.suppress(OSError):
                HEALTH_FILE.unlink(missing_ok=True)
            child.returncode = os.waitstatus_to_exitcode(status)
            # What the emulator left (it stops its workloads itself): ended with it, as the container ends.
            return child.returncode if child.returncode >= 0 else 128 - child.returncode


if __name__ == "__main__":
    sys.exit(main())
