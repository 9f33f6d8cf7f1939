"""`emulator base-image`: a Debian base image for the Docker runtime, made without any registry.

debootstrap fetches a minimal Debian (with python3 and the libraries CPython links) from a Debian mirror
into a folder, and `docker import` turns the folder into an image. Bookworm's own python3 is 3.11.2, older
than the client needs (its prepare_project calls `tarfile.extractall(filter=...)`, new in 3.11.4), so when
the emulator itself runs on a self-contained CPython 3.11 (pyenv, python.org builds) that interpreter is
copied in, at the same path, as the image's `python3`. Needs root, debootstrap and a Docker engine.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_TAG = "pxt-emulator-base:bookworm"
PACKAGES = "python3,ca-certificates,passwd"  # passwd: useradd, which the embedded Postgres runs as root


def build(tag: str, suite: str, mirror: str, print_: bool = True) -> None:
    missing = [t for t in ("debootstrap", "docker") if shutil.which(t) is None]
    if missing:
        raise SystemExit(f"emulator base-image needs {' and '.join(missing)} (apt-get install debootstrap docker.io)")
    with tempfile.TemporaryDirectory(prefix="pxt-base-") as tmp:
        root = Path(tmp) / "root"
        if print_:
            print(f"debootstrap {suite} from {mirror} …", flush=True)
        subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={PACKAGES}", suite, str(root), mirror],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        for entry in (root / "var/cache/apt/archives").glob("*.deb"):
            entry.unlink()
        copied = copy_interpreter(root)
        if print_ and copied:
            print(f"python3 in the image is this machine's CPython {sys.version.split()[0]} ({copied})", flush=True)
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(["docker", "import", "--change", 'CMD ["python3"]', "-", tag], stdin=tar.stdout, check=True)
        if tar.wait() != 0:
            raise SystemExit("emulator base-image: tar of the root folder failed")
    if print_:
        print(f"built {tag}; use it with --docker-base-image {tag}")


def copy_interpreter(root: Path) -> str | None:
    """Copy the running CPython 3.11 (without its site-packages and tests) into the image's root."""
    prefix = Path(sys.base_prefix)
    if sys.version_info[:2] != (3, 11) or str(prefix).startswith("/usr"):
        return None
    packages = prefix / "lib" / "python3.11" / "site-packages"

    def skip(folder: str, names: list[str]) -> list[str]:
        if Path(folder) == packages:
            return names
        if Path(folder) == packages.parent:
            return [n for n in names if n in ("test", "idlelib", "tkinter", "turtledemo")]
        return [n for n in names if n == "__pycache__"]

    shutil.copytree(prefix, root / prefix.relative_to("/"), symlinks=True, ignore=skip)
    link = root / "usr" / "local" / "bin" / "python3"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(prefix / "bin" / "python3")
    return str(prefix)
