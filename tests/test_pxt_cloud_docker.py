"""The compatibility suite's steps (test_pxt_cloud.py) on the Docker runtime: containers with enforced limits.

A module of its own, so a parallel run (pytest-xdist's `loadfile`) gives it a worker while the process
variant and the rest of the suite run on another.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.pxt_client import ensure_client
from tests.test_pxt_cloud import *  # noqa: F403 (the same steps, collected again here)
from tests.test_pxt_cloud import Session, open_session


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    exe = ensure_client()
    # Environment images outlive an emulator (they are the build cache): start without them, so the steps see
    # real builds. A test fails here, not skips, when no engine answers.
    images = subprocess.run(
        ["docker", "images", "-q", "--filter", "label=pxt-emulator=env"], capture_output=True, text=True, check=True
    ).stdout.split()
    if images:
        subprocess.run(["docker", "rmi", "-f", *images], capture_output=True, check=False)
    yield from open_session(tmp_path_factory.mktemp("cloud-docker"), exe, "--runtime", "docker")
