"""`emulator image build`: the emulator as a container image, from the project on this machine.

The build context is made here, not in the Dockerfile: `app/` holds the `emulator` and `tui` packages as this
machine runs them (an installed wheel's, or a checkout's), their shipped data with them (emulator/shipped.py: the docs
corpus, integrations, tasks and examples), and `site/` their dependencies, installed by this machine's pip (its index,
proxy and certificates) for the base image's Python and platform; a marker file says the context is this one (the
Dockerfile stops at once, naming this command, without it). The image then needs
no network and no package manager to build: the base image that `scripts/setup-docker.sh` makes without any registry
works as well as the public slim Python image (`BASE`, a build argument of the Dockerfile).
"""

from __future__ import annotations

import importlib.metadata
import platform
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from emulator import shipped

DISTRIBUTION = "pxt-cloud-emulator"
DEFAULT_TAG = "pxt-emulator:local"
APP_PACKAGES = ("emulator", "tui")
# The Dockerfile's first instruction copies it: a context without it (the repository root) stops the build at once.
CONTEXT_MARKER = "made by emulator image build"
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache")
PIP_TIMEOUT = 1800.0


class ImageBuildFailed(RuntimeError):
    """The image could not be built: what failed, in a line a person can act on."""


def dependencies() -> list[str]:
    """The emulator's runtime requirements: the installed distribution's metadata (its extras' left out), or, for a
    checkout run without installing it (`PYTHONPATH` at the clone), the checkout's pyproject.toml."""
    try:
        requires = importlib.metadata.requires(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        requires = None
    if requires is not None:
        return [req for req in requires if "extra ==" not in req]
    pyproject = _package_dir("emulator").parent / "pyproject.toml"
    if not pyproject.is_file():
        raise ImageBuildFailed(f"{DISTRIBUTION} is not installed and no pyproject.toml is beside the emulator package")
    return list(tomllib.loads(pyproject.read_text())["project"]["dependencies"])


def _package_dir(package: str) -> Path:
    return Path(str(resources.files(package))).resolve()


def python_of(client: Any, base: str) -> tuple[int, int]:
    """The base image's Python version: the packages in site/ are installed for it."""
    out = client.containers.run(
        base, ["python3", "-c", "import sys; print(sys.version_info[0], sys.version_info[1])"], remove=True
    )
    major, minor = out.decode().split()
    return int(major), int(minor)


def prepare(context: Path, python: tuple[int, int], note: Callable[[str], None]) -> None:
    """The build context: the Dockerfile, its marker, app/ (the packages) and site/ (their dependencies, for
    `python`)."""
    app = context / "app"
    app.mkdir(parents=True)
    for package in APP_PACKAGES:
        # Links are followed: a checkout's emulator/fixtures and emulator/examples are copied as the files they name.
        shutil.copytree(_package_dir(package), app / package, ignore=_SKIP)
    if python == sys.version_info[:2]:
        # Its bytecode, for the image's Python (this one): else every container start compiles the emulator (0.3 s).
        # The copies keep their sources' times, which the bytecode records.
        compiled = subprocess.run([sys.executable, "-m", "compileall", "-q", str(app)], capture_output=True, text=True)
        if compiled.returncode != 0:
            raise ImageBuildFailed(f"compileall: {compiled.stdout.strip()[-2000:]}")
    shutil.copy2(shipped.DOCKERFILE, context / "Dockerfile")
    (context / CONTEXT_MARKER).write_text("the build context `emulator image build` makes\n")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target"]
    pip += [str(context / "site")]
    if python != sys.version_info[:2] or platform.machine() != "x86_64":
        # Another Python (or machine) than this one: wheels for the image's, never built here.
        pip += ["--python-version", f"{python[0]}.{python[1]}", "--only-binary=:all:"]
    note(f"installing the emulator's dependencies for Python {python[0]}.{python[1]} into the image's site/")
    done = subprocess.run([*pip, *dependencies()], capture_output=True, text=True, timeout=PIP_TIMEOUT)
    if done.returncode != 0:
        raise ImageBuildFailed(f"pip could not install the dependencies: {done.stderr.strip()[-2000:]}")


def build(tag: str = DEFAULT_TAG, base: str | None = None, note: Callable[[str], None] = print) -> str:
    """Build the image `tag` from `base` (default: the base image the Docker runtime uses here); its id."""
    import docker
    import docker.errors

    from emulator.runtime.choose import default_base_image
    from emulator.runtime.engine import Engine

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as e:
        raise ImageBuildFailed(f"no Docker engine answers ({e}); start one (scripts/setup-docker.sh)") from None
    if base is None:
        engine = Engine.from_env()
        base = default_base_image(engine) if engine is not None else "python:3.11-slim-bookworm"
    note(f"building {tag} from {base}")
    try:
        python = python_of(client, base)
    except docker.errors.DockerException as e:
        raise ImageBuildFailed(f"the base image {base} does not run python3: {e}") from None
    with tempfile.TemporaryDirectory(prefix="pxt-emulator-image-") as tmp:
        prepare(Path(tmp), python, note)
        image_id = ""
        try:
            for chunk in client.api.build(path=tmp, tag=tag, buildargs={"BASE": base}, rm=True, decode=True):
                if "error" in chunk:
                    raise ImageBuildFailed(f"docker build: {chunk['error'].strip()}")
                if "aux" in chunk and "ID" in chunk["aux"]:
                    image_id = chunk["aux"]["ID"]
        except docker.errors.DockerException as e:
            raise ImageBuildFailed(f"docker build: {e}") from None
    size = client.images.get(tag).attrs.get("Size", 0)
    note(f"built {tag} ({image_id[7:19] or '?'}, {size / 2**20:.0f} MiB)")
    return image_id
