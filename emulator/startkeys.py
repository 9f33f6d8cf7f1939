"""The state dir's keys and the tunnel's CA, made the first time and checked at every start, in a child process.

Making or checking them needs cryptography, 10 MiB resident and 40 ms to import, which the emulator otherwise needs
only for its first token or secret. So `emulator up` has a child process do it, beside its own imports and the rest
of its start (on another core), and reads the files when they are first used (`Signer.of`, `SecretBox.of`,
`TlsFiles`). A child that fails has it done again here, in this process, so that a start fails with the error it
always did.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess


def ensure(state_dir: Path, domain: str) -> None:
    """Make what is missing and check what is there, in this process (in the order the start always made them)."""
    from emulator.core.secretbox import SecretBox
    from emulator.identity.signing import Signer
    from emulator.tunnel.ca import LocalCA

    Signer.load_or_create(state_dir)
    SecretBox.load_or_create(state_dir)
    LocalCA.load_or_create(state_dir / "tls", domain)


def spawn(state_dir: Path, domain: str) -> subprocess.Popen[bytes]:
    """The child, started now. `emulator up` starts it as soon as it holds the state dir's lock, before it imports
    the server (a fifth of a second), so that the child is done before the start needs the files."""
    import subprocess  # here: the child has no use for it

    argv = [sys.executable, "-m", "emulator.startkeys", str(state_dir), domain]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def finish(child: subprocess.Popen[bytes] | None, state_dir: Path, domain: str) -> None:
    """Wait for the child (started here when it was not yet); `ensure` in this process if it failed, so that its
    error is raised here."""
    import asyncio  # here: the child has no use for it (25 ms)

    child = child or spawn(state_dir, domain)
    try:
        code = await asyncio.to_thread(child.wait)
    finally:
        if child.returncode is None:  # cancelled (Ctrl-C during the start): the child goes with it
            child.kill()
            child.wait()
    if code != 0:
        await asyncio.to_thread(ensure, state_dir, domain)


if __name__ == "__main__":
    ensure(Path(sys.argv[1]), sys.argv[2])
