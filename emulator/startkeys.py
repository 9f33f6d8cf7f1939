"""The state dir's keys and the tunnel's CA, made the first time and checked at every start, in a child process.

Making or checking them needs cryptography, 10 MiB resident and 40 ms to import, which the emulator otherwise needs
only for its first token or secret. So `emulator up` has a child process do it, beside the rest of the start (on
another core), and reads the files when they are first used (`Signer.of`, `SecretBox.of`, `TlsFiles`). A child that
fails has it done again here, in this process, so that a start fails with the error it always did.
"""

from __future__ import annotations

import sys
from pathlib import Path


def ensure(state_dir: Path, domain: str) -> None:
    """Make what is missing and check what is there, in this process (in the order the start always made them)."""
    from emulator.hosted.secretbox import SecretBox
    from emulator.hosted.signing import Signer
    from emulator.tunnel.ca import LocalCA

    Signer.load_or_create(state_dir)
    SecretBox.load_or_create(state_dir)
    LocalCA.load_or_create(state_dir / "tls", domain)


async def ensure_in_child(state_dir: Path, domain: str) -> None:
    """`ensure` in a child process; in this one if the child fails (its error is then raised here)."""
    import asyncio  # here: the child, which runs this module, has no use for it (25 ms)

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "emulator.startkeys",
        str(state_dir),
        domain,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        code = await proc.wait()
    finally:
        if proc.returncode is None:  # cancelled (Ctrl-C during the start): the child goes with it
            proc.kill()
            await proc.wait()
    if code != 0:
        await asyncio.to_thread(ensure, state_dir, domain)


if __name__ == "__main__":
    ensure(Path(sys.argv[1]), sys.argv[2])
