"""PID 1 of the emulator's container: runs `python3 -m emulator ARGS` as its child, passes SIGTERM, SIGINT and
SIGHUP on to it, reaps every process that ends in the container (a hosted database's Postgres is started detached, so
it is re-parented here when its starter exits), and exits with the emulator's status."""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def main() -> int:
    child = subprocess.Popen([sys.executable, "-m", "emulator", *sys.argv[1:]])

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
            child.returncode = os.waitstatus_to_exitcode(status)
            # What the emulator left (it stops its workloads itself): ended with it, as the container ends.
            return child.returncode if child.returncode >= 0 else 128 - child.returncode


if __name__ == "__main__":
    sys.exit(main())
