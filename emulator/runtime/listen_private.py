"""Run a hosted server module reachable only through a Unix socket, instead of the TCP address it is given.

Run by the environment's own Python (stdlib, uvicorn and pixeltable only, nothing of the emulator), as
`python -c <this file's source> SOCKET MODULE ARGS...`. The module itself runs unchanged (the real
`proxy_daemon` and `pod_runner`); what differs is where it listens:

- its uvicorn binds SOCKET (in a directory only this user can enter) and ignores host and port;
- Pixeltable's own file server (every process starts one on a loopback port, serving the whole file system,
  for notebooks to show media) is not started: in the cloud it sits on the pod's loopback, out of everyone's
  reach, and here it would be open to any local program.

With `PXT_EMULATOR_START_AFTER=FILE` in its environment, the process imports pixeltable and then waits until FILE
exists before it runs the module: a server started while `prepare_project` unpacks its project has done its
imports (seconds) by the time the project is there.

With `PXT_EMULATOR_SPARE=1`, the process is a spare: it imports pixeltable and what the module imports at a low CPU
priority (with `eager`, a head start, at its normal one), then waits for `go.json` beside its socket, which the
emulator writes when it wants a new generation of the service: the environment that generation gets (`env`, and the
names to `unset`: a secret deleted since). The process takes that environment and its normal priority and runs the
module as a cold start would, its imports (most of a start) already done.
"""

import importlib
import json
import os
import runpy
import sys
import threading
import time
from typing import Any

import uvicorn

_UNREACHABLE = "http://127.0.0.1:9"  # what the file server's address reads as: nothing listens there


def main() -> None:
    path, module, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    spare = os.environ.pop("PXT_EMULATOR_SPARE", "")
    go = os.path.join(os.path.dirname(path), "go.json") if spare else ""
    released = spare_priority(go, low=spare != "eager") if go else None
    init = uvicorn.Config.__init__

    def private(self: uvicorn.Config, app: object, *a: object, **kw: object) -> None:
        kw["uds"] = path  # uvicorn then binds this socket and ignores host and port
        init(self, app, *a, **kw)  # type: ignore[arg-type]

    uvicorn.Config.__init__ = private  # type: ignore[method-assign]

    from pixeltable.env import Env  # pyright: ignore[reportMissingImports]  (the environment's, not ours)

    def no_file_server(self: Any) -> None:
        self._httpd = None
        self._http_address = _UNREACHABLE

    if hasattr(Env, "_start_web_server"):
        Env._start_web_server = no_file_server  # type: ignore[method-assign]
    if released is not None:
        importlib.import_module(module)  # all it imports; its own code runs again, as __main__, once released
        del sys.modules[module]
        become(go, released)
    after = os.environ.pop("PXT_EMULATOR_START_AFTER", "")
    deadline = time.monotonic() + 3600  # the emulator stops a server it no longer wants; this bounds it anyway
    while after and not os.path.exists(after):
        if time.monotonic() > deadline:
            sys.exit("the project was not prepared in time")
        time.sleep(0.02)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def priority(nice: int) -> None:
    """This process's CPU weight against the machine's other sessions (each hosted process leads its own, and the
    kernel's autogroup shares CPU between sessions; going back to 0 needs no privilege). In a container the
    engine's CPU shares do this instead, and the write changes nothing."""
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:
        pass


def spare_priority(go: str, *, low: bool = True) -> threading.Event:
    """A spare imports at the lowest priority until `go` appears, and at its normal one from then on: a spare
    released before its imports are done finishes them at speed (an eager one, `low` False, a head start whose
    release is seconds away, keeps its normal priority). The event is set once `go` is there."""
    if low:
        priority(19)
    released = threading.Event()
    deadline = time.monotonic() + 86400  # the emulator stops a spare it no longer wants; this bounds it anyway

    def watch() -> None:
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.02)
        priority(0)
        released.set()

    threading.Thread(target=watch, daemon=True, name="spare").start()
    return released


def become(go: str, released: threading.Event) -> None:
    """Wait to be released, then take the environment the emulator gives the new generation."""
    released.wait()
    if not os.path.exists(go):
        sys.exit("no generation was started from this spare")
    with open(go) as f:
        wanted = json.load(f)
    os.unlink(go)  # it holds the service's secrets
    for name in wanted.get("unset", []):
        os.environ.pop(name, None)
    os.environ.update(wanted["env"])


main()
