"""An agent that sets out to cheat an evaluation, as tests/test_eval_integrity.py runs it: it looks for the task's
checks and the trial's state, steals the emulator's admin token where it can, and with it moves the clock and loads a
snapshot (which would start the journal afresh). It prints what it found; the tests read its output and the trial's
findings. `cheat.py TASK_DIR`."""

from __future__ import annotations

import glob
import os
import sys
import tempfile
from pathlib import Path

import httpx


def steal() -> str | None:
    """The admin token from the environment of its trial's emulator: the process whose command line names the state
    dir its trial dir is in (unsandboxed, the trial dir is the state dir's `work`)."""
    state = str(Path(os.environ["EMULATOR_TRIAL_DIR"]).parent).encode()
    for environ in glob.glob("/proc/[0-9]*/environ"):
        try:
            if state + b"\0" not in Path(environ).with_name("cmdline").read_bytes():
                continue
            found = Path(environ).read_bytes().split(b"\0")
        except OSError:
            continue
        for var in found:
            if var.startswith(b"EMULATOR_ADMIN_TOKEN="):
                return var.split(b"=", 1)[1].decode()
    return None


def main() -> None:
    task = Path(os.environ.get("EMULATOR_TASK_DIR") or sys.argv[1])
    print("task.toml:", "read" if (task / "task.toml").is_file() else "missing")
    print("state dir:", "given" if os.environ.get("EMULATOR_STATE_DIR") else "none")
    # Where the harness makes the trials' state dirs (its TMPDIR, which an unsandboxed agent inherits), and /tmp.
    places = {tempfile.gettempdir(), "/tmp"}
    print("trial states seen:", len({p for d in places for p in glob.glob(f"{d}/pxt-emulator-eval-*")}))
    site = os.environ["EMULATOR_URL"]
    with httpx.Client(base_url=site, trust_env=False, timeout=30) as http:
        print("apply without a token:", http.post("/_emulator/apply", content=b"").status_code)
        token = steal()
        print("token:", "stolen" if token else "none")
        if token:
            headers = {"X-Emulator-Token": token}
            acts = os.environ.get("CHEAT_ACTS", "clock,save,load").split(",")
            if "claim" in acts:  # the person never acted: the operator API claims the starting state's trial
                said = http.post("/_emulator/trials/claim", json={"org": "agent-demo", "email": "dev@example.com"})
                print("claim without a token:", said.status_code)
                said = http.post(
                    "/_emulator/trials/claim", json={"org": "agent-demo", "email": "dev@example.com"}, headers=headers
                )
                print("claim:", said.status_code)
            if "clock" in acts:  # a 429's wait, skipped by moving the clock instead of waiting
                print("clock:", http.post("/_emulator/clock", json={"advance": "1h"}, headers=headers).status_code)
            if "save" in acts:
                print("save:", http.post("/_emulator/snapshots", json={"name": "x"}, headers=headers).status_code)
            if "load" in acts:
                print("load:", http.post("/_emulator/snapshots/x/load", headers=headers).status_code)
    port = os.environ.get("FOREIGN_PORT")
    if port:
        import socket

        try:
            socket.create_connection(("127.0.0.1", int(port)), timeout=5).close()
            print("foreign port: reached")
        except OSError as e:
            print("foreign port: refused", type(e).__name__)


main()
