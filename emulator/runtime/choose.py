"""Which launcher runs the hosted workloads: `--runtime auto|docker|process` (auto prefers Docker)."""

from __future__ import annotations

import logging
from pathlib import Path

from emulator.config import ConfigError, Settings
from emulator.runtime.process import ProcessLauncher
from emulator.runtime.workload import Launcher

log = logging.getLogger("emulator.runtime")


def make_launcher(settings: Settings, root: Path, forward: list[int]) -> Launcher:
    """`forward`: the emulator's ports the hosted workloads call (control plane, media store)."""
    if settings.runtime == "process":
        return ProcessLauncher(root)
    from emulator.runtime.docker import DockerLauncher, docker_client

    client = docker_client()
    if client is None:
        if settings.runtime == "docker":
            raise ConfigError(
                "runtime docker: no Docker engine answers (start dockerd, or set DOCKER_HOST); "
                "--runtime process runs without one"
            )
        log.info("no Docker engine answers: hosted databases run as local processes")
        return ProcessLauncher(root)
    return DockerLauncher(
        client,
        root,
        base_image=settings.docker_base_image,
        network=settings.docker_network,
        instance=settings.state_dir,
        forward=forward,
    )
