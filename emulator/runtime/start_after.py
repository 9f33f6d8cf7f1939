"""Run a module once a file exists, its imports done first: a standby `prepare_project`.

Run by the environment's own Python (stdlib and pixeltable only, nothing of the emulator), as
`python -c <this file's source> MODULE ARGS...` with `PXT_EMULATOR_START_AFTER=FILE`. After an update, the
emulator starts the database's next `prepare_project` this way; at the next update it makes FILE, and the
module (unchanged) runs with pixeltable already imported: seconds sooner. It gives up when the emulator that
started it is gone (its parent changed) or after a day.
"""

import os
import runpy
import sys
import time

import pixeltable  # noqa: F401  # pyright: ignore[reportMissingImports]  (the environment's; what the module imports first)


def main() -> None:
    module, args = sys.argv[1], sys.argv[2:]
    after = os.environ.pop("PXT_EMULATOR_START_AFTER", "")
    parent, deadline = os.getppid(), time.monotonic() + 86_400
    while after and not os.path.exists(after):
        if os.getppid() != parent or time.monotonic() > deadline:
            sys.exit("no update came for this standby prepare_project")
        time.sleep(0.02)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


main()
