"""The real `pxt` client as the reference agents run it: a home and a daemon port of the trial's own (in the
directory `emulator eval` gives each trial, EMULATOR_TRIAL_DIR), so trials side by side never share a daemon, and
its daemon and embedded Postgres stopped when the agent is done. `PXT` names the executable (else `pxt` on PATH).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
from pathlib import Path
from types import TracebackType

DB = "main"

# A route that shows which provider key the service's process sees (a real one would call the provider with it).
KEY_ROUTE = """

@pxt.udf
def provider_key(text: str) -> str:
    import os
    return 'sees ' + os.environ.get('DEMO_PROVIDER_KEY', 'unset')[-4:]


class Probe(TableModel, name='probe'):
    text: pxt.String
    key_seen = provider_key(text)


ingest.add_compute_route(Probe, path='/key', inputs=[Probe.text], outputs=[Probe.key_seen])
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Pxt:
    def __init__(self) -> None:
        work = Path(os.environ["EMULATOR_TRIAL_DIR"])
        self.project = work / "project"
        self.project.mkdir(parents=True, exist_ok=True)
        self.home = work / "pxt-home"
        self.exe = os.environ.get("PXT", "pxt")
        self.env = {**os.environ, "PIXELTABLE_HOME": str(self.home), "PXT_PORT": str(free_port())}
        self.org = ""

    def __call__(self, *args: str, ok: bool = True) -> str:
        shown = [re.sub(r"=.*", "=<not shown>", a) if args[0] == "secret" else a for a in args]  # a secret's value
        print("$ pxt", " ".join(shown), flush=True)
        done = subprocess.run(
            [self.exe, *args], capture_output=True, text=True, env=self.env, cwd=self.project, timeout=900
        )
        out = done.stdout + done.stderr
        print(re.sub(r"pxtk_\w+", "pxtk_<not shown>", out.rstrip()), flush=True)  # a key is shown once, to us
        if ok and done.returncode != 0:
            raise SystemExit(f"pxt {' '.join(args)} failed ({done.returncode})")
        return out

    @property
    def db(self) -> str:
        return f"pxt://{self.org}:{DB}"

    def new_trial(self) -> str:
        found = re.search(r"organization (agent-[0-9a-f]{6})", self("new"))
        if found is None:
            raise SystemExit("pxt new printed no organization")
        self.org = found.group(1)
        return self.org

    def new_project(self, *, with_key: bool = False) -> None:
        """A trial, and in the project folder the client's example project (with the /key route and the secret
        DEMO_PROVIDER_KEY from the agent's environment, `with_key`), not deployed yet."""
        self.new_trial()
        self("init")
        self("service", "example", "--out", "app.py")
        if with_key:
            app = self.project / "app.py"
            app.write_text(app.read_text() + KEY_ROUTE)
            self("secret", "set", self.db, f"DEMO_PROVIDER_KEY={os.environ['DEMO_PROVIDER_KEY']}")

    def endpoint(self, service: str) -> str:
        """The service's URL as `pxt service list` prints it: the listing is where it is read, never built."""
        found = re.search(rf"^{re.escape(self.db)}/{service}\s+(\S+)\s", self("service", "list", self.db), re.M)
        if found is None:
            raise SystemExit(f"no {service} in pxt service list")
        return found.group(1)

    def create_key(self, name: str) -> str:
        found = re.search(r"^(pxtk_\w+)$", self("key", "create", name), re.M)
        if found is None:
            raise SystemExit("pxt key create printed no key")
        return found.group(1)

    def __enter__(self) -> Pxt:
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        """The daemon, then the embedded Postgres its home holds (which outlives it)."""
        subprocess.run([self.exe, "daemon", "stop", "--force"], capture_output=True, env=self.env, timeout=60)
        try:
            os.kill(int((self.home / "pgdata" / "postmaster.pid").read_text().split()[0]), signal.SIGINT)
        except (OSError, ValueError, IndexError):
            pass
