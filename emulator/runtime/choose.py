"""Which launcher runs the hosted workloads: `--runtime auto|docker|process` (auto prefers Docker)."""

from __future__ import annotations

import logging
from pathlib import Path

from emulator.config import ConfigError, Settings
from emulator.runtime.base_image import DEFAULT_TAG
from emulator.runtime.buildcache import BuildCache, default_root
from emulator.runtime.engine import Engine, EngineError
from emulator.runtime.process import ProcessLauncher
from emulator.runtime.sibling import SiblingError, detect
from emulator.runtime.workload import Launcher

log = logging.getLogger("emulator.runtime")


def make_launcher(settings: Settings, root: Path, forward: list[int]) -> Launcher:
    """`forward`: the emulator's ports the hosted workloads call (control plane, media store)."""
    cache = build_cache(settings)
    if settings.runtime == "process":
        return ProcessLauncher(root, cache)
    from emulator.runtime.containers import DockerLauncher

    engine = Engine.from_env()
    if engine is None or not engine.answers():
        if settings.runtime == "docker":
            raise ConfigError(
                "runtime docker: no Docker engine answers (start dockerd, or set DOCKER_HOST); "
                "--runtime process runs without one"
            )
        log.info("no Docker engine answers: hosted databases run as local processes")
        return ProcessLauncher(root, cache)
    try:
        sibling = detect(engine, settings.state_dir)
    except SiblingError as e:
        if settings.runtime == "docker":
            raise ConfigError(f"runtime docker: {e}") from None
        log.warning("hosted databases run as local processes: %s", e)
        return ProcessLauncher(root, cache)
    if sibling is not None:
        log.info(
            "the emulator runs in container %s of the Docker engine: hosted containers are its siblings, their mounts "
            "under the state dir %s (the same path on the host)",
            sibling.container[:12],
            sibling.state_dir,
        )
    return DockerLauncher(
        engine,
        root,
        base_image=settings.docker_base_image or default_base_image(engine),
        network=settings.docker_network,
        instance=settings.state_dir,
        forward=forward,
        cache=cache,
        sibling=sibling,
    )


def build_cache_root(settings: Settings) -> Path | None:
    """Where the per-user cache of built environments is (`build_cache`), or None when it is off."""
    if settings.build_cache.strip().lower() == "off":
        return None
    return Path(settings.build_cache).expanduser() if settings.build_cache.strip() else default_root()


def build_cache(settings: Settings) -> BuildCache | None:
    root = build_cache_root(settings)
    return None if root is None else BuildCache(root, int(settings.build_cache_max_gb * 1e9))


PUBLIC_BASE = "python:3.11-slim-bookworm"


def default_base_image(engine: Engine) -> str:
    """The base image when none is set: the public slim Python image if this machine has it; else the one
    `emulator base-image` builds with no registry (`scripts/setup-docker.sh` does), if it is here; else the public
    one, pulled at the first build. A machine with an engine and no registry thus works as set up."""
    for tag in (PUBLIC_BASE, DEFAULT_TAG):
        try:
            if not engine.has_image(tag):
                continue
        except (EngineError, OSError):
            break
        if tag != PUBLIC_BASE:
            log.info("base image %s (this machine has no %s)", tag, PUBLIC_BASE)
        return tag
    return PUBLIC_BASE
