"""Environment images for the Docker runtime: one image per environment digest, built locally.

The dependencies (`pixeltable[serve]` at the client's version and the project's requirements) are resolved
on this machine with uv for the base image's Python and platform, into a plain directory, and copied into
the image; nothing is installed inside a container, so a build needs no network once uv's cache holds
the packages and no registry at all when the base image is local (see `emulator base-image`). An image is
rebuilt only when its digest is new or `pxt db build-image` asks for it.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from emulator.runtime.environments import Build, BuildFailed, Builds, manifests, run_logged, uv_executable
from emulator.runtime.workload import WORKLOAD_MODULES, Log

REPOSITORY = "pxt-emulator-env"
SITE = "/opt/pxt/site"
RECIPE = "2"  # how an environment's image is made (2: with its workloads' bytecode): an older one is rebuilt
_PROBE = (
    "import json, platform, sys; "
    "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'libc': platform.libc_ver()[1], "
    "'machine': platform.machine()}))"
)


def tag_of(digest: str) -> str:
    return f"{REPOSITORY}:{digest[:24]}"


class Images(Builds):
    def __init__(self, client: Any, root: Path, base_image: str) -> None:
        super().__init__()
        self.client = client
        self.root = root
        self.base_image = base_image
        self._base: dict[str, str] | None = None

    async def base(self, log: Log) -> dict[str, str]:
        """The base image's Python version, libc and machine (pulled first if it is not here)."""
        if self._base is not None:
            return self._base
        import docker.errors

        try:
            await asyncio.to_thread(self.client.images.get, self.base_image)
        except docker.errors.ImageNotFound:
            await log(f"pulling the base image {self.base_image}")
            try:
                await asyncio.to_thread(self.client.images.pull, self.base_image)
            except docker.errors.APIError as e:
                raise BuildFailed(
                    f"the base image {self.base_image} is not on this machine and could not be pulled "
                    f"({e.explanation or e}); build one without a registry with `emulator base-image`, "
                    "or choose another with --docker-base-image"
                ) from None
        try:
            out = await asyncio.to_thread(
                self.client.containers.run,
                self.base_image,
                ["python3", "-c", _PROBE],
                remove=True,
                network_mode="none",
            )
        except docker.errors.DockerException as e:
            raise BuildFailed(f"the base image {self.base_image} has no working python3: {e}") from None
        image = await asyncio.to_thread(self.client.images.get, self.base_image)
        self._base = {**json.loads(out.decode().strip().splitlines()[-1]), "id": image.id}
        return self._base

    def ready(self, digest: str) -> bool:
        """Built, and on the base image as it is now (a rebuilt base image means rebuilt environments)."""
        import docker.errors

        try:
            image = self.client.images.get(tag_of(digest))
            base = self.client.images.get(self.base_image)
        except docker.errors.ImageNotFound:
            return False
        labels = image.labels or {}
        return labels.get("pxt-emulator.base") == base.id and labels.get("pxt-emulator.recipe") == RECIPE

    async def _build(self, build: Build) -> None:
        digest, pixeltable, python_version, log = build.digest, build.pixeltable, build.python_version, build.log
        base = await self.base(log)
        wanted = ".".join((python_version or base["python"]).split(".")[:2])
        if wanted != base["python"]:
            await log(
                f"the project was made with Python {wanted}; the base image {self.base_image} has {base['python']}, "
                "which the environment is built for"
            )
        libc = base["libc"].replace(".", "_") or "2_17"
        platform = f"{base['machine']}-manylinux_{libc}"
        await log(
            f"building image {tag_of(digest)}: pixeltable[serve]=={pixeltable} for Python {base['python']} "
            f"({platform}) on {self.base_image}"
        )
        self.root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.root) as tmp:
            context = Path(tmp)
            args = [
                uv_executable(),
                "pip",
                "install",
                "--quiet",
                "--target",
                str(context / "site"),
                "--python-version",
                base["python"],
                "--python-platform",
                platform,
                f"pixeltable[serve]=={pixeltable}",
            ]
            for manifest in manifests(build.archive, context) if build.archive else []:
                args += ["-r", str(manifest)]
                await log(f"installing the project's dependencies from {manifest.name}")
            await run_logged(args, log)
            (context / "Dockerfile").write_text(
                f"FROM {self.base_image}\n"
                f"COPY site {SITE}\n"
                f"ENV PYTHONPATH={SITE} PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1\n"
                # The bytecode of what the workloads import, in the image: a container's own writes go with it, so
                # without this every start compiles Pixeltable again (4 s instead of 1.7 s). What fails to import
                # here fails again, and is reported, when a workload starts.
                f"RUN python3 -c 'import {', '.join(WORKLOAD_MODULES)}' >/dev/null 2>&1 || true\n"
                f'LABEL pxt-emulator.environment="{digest}"\n'
            )
            (context / ".dockerignore").write_text("Dockerfile\n")
            await log("copying the environment into the image")
            await asyncio.to_thread(self._docker_build, str(context), tag_of(digest), base["id"])
        await log(f"image {tag_of(digest)} is ready")

    def _docker_build(self, context: str, tag: str, base_id: str) -> None:
        import docker.errors

        labels = {"pxt-emulator": "env", "pxt-emulator.base": base_id, "pxt-emulator.recipe": RECIPE}
        try:
            self.client.images.build(path=context, tag=tag, rm=True, forcerm=True, labels=labels)
        except docker.errors.BuildError as e:
            raise BuildFailed(f"docker build of {tag} failed: {e.msg}") from None
