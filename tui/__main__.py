"""`python -m tui [--readonly] [--state-dir DIR] [--url URL]`: the same as `emulator tui`."""

import sys

from emulator.cli import main

sys.exit(main(["tui", *sys.argv[1:]]))
