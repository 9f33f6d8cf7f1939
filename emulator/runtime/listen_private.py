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
"""

import os
import runpy
import sys
import time
from typing import Any

import uvicorn

_UNREACHABLE = "http://127.0.0.1:9"  # what the file server's address reads as: nothing listens there


def main() -> None:
    path, module, args = sys.argv[1], sys.argv[2], sys.argv[3:]
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
    after = os.environ.pop("PXT_EMULATOR_START_AFTER", "")
    deadline = time.monotonic() + 3600  # the emulator stops a server it no longer wants; this bounds it anyway
    while after and not os.path.exists(after):
        if time.monotonic() > deadline:
            sys.exit("the project was not prepared in time")
        time.sleep(0.02)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


main()
