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
import os
import tempfile
from pathlib import Path
from typing import Any

from emulator.runtime.buildcache import BuildCache, evict_lru
from emulator.runtime.environments import Build, BuildFailed, Builds, manifests, run_logged, uv_executable
from emulator.runtime.workload import WORKLOAD_MODULES, Log

REPOSITORY = "pxt-emulator-env"
BUILDER_LABEL = "pxt-emulator.builder-pid"  # whose build container: one left by a dead emulator is removed
SITE = "/opt/pxt/site"
# How an environment's image is made (2: with its workloads' bytecode; 3: committed, with no volume declared by the
# copy's mount): an older one is rebuilt.
RECIPE = "3"
_PROBE = (
    "import json, platform, sys; "
    "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'libc': platform.libc_ver()[1], "
    "'machine': platform.machine()}))"
)


def tag_of(digest: str) -> str:
    return f"{REPOSITORY}:{digest[:24]}"


class Images(Builds):
    def __init__(
        self, client: Any, root: Path, base_image: str, cache: BuildCache | None = None, kind: str = "pxt-emulator=env"
    ) -> None:
        """`kind`: the label of the images the cache's bound counts (every emulator's environment images)."""
        super().__init__()
        self.kind = kind
        self.client = client
        self.root = root
        self.base_image = base_image
        self.cache = cache  # only its build locks: the images themselves are the engine's, shared by every emulator
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
        ok = labels.get("pxt-emulator.base") == base.id and labels.get("pxt-emulator.recipe") == RECIPE
        if ok and self.cache is not None:
            self.cache.stamp(digest[:24])
        return ok

    async def _build(self, build: Build) -> bool:
        if self.cache is None:
            await self._make(build)
            return True
        # Another emulator of this user may be building the same image: it builds, this one waits and uses it.
        async with self.cache.exclusive(f"image-{build.digest[:24]}", build.log):
            if not build.force and await asyncio.to_thread(self.ready, build.digest):
                await build.log(f"image {tag_of(build.digest)}: built meanwhile by another emulator")
                return False
            await self._make(build)
            await asyncio.to_thread(self.cache.stamp, build.digest[:24])
        await asyncio.to_thread(self.evict, build.digest[:24])
        return True

    def evict(self, keep: str) -> list[str]:
        """The build cache's bound over the engine's environment images: the least recently used go first, except
        `keep` and any image a container (running or not, of any emulator) was made from, which the engine refuses
        to remove. An image's size is what it adds to its base image."""
        import docker.errors

        assert self.cache is not None
        try:
            base = self.client.images.get(self.base_image).attrs.get("Size", 0)
            images = self.client.images.list(filters={"label": self.kind})
        except docker.errors.DockerException:
            return []
        by_digest, found = {}, []
        for image in images:
            digest = (image.labels or {}).get("pxt-emulator.environment", "")[:24]
            by_digest[digest] = image
            found.append((self.cache.last_used(digest), digest, max(0, image.attrs.get("Size", 0) - base)))

        def remove(digest: str) -> bool:
            if digest == keep:
                return False
            try:
                self.client.images.remove(by_digest[digest].id)
            except docker.errors.DockerException:
                return False  # in use by a container, or removed meanwhile by another emulator
            return True

        return evict_lru(found, self.cache.max_bytes, remove)

    async def _make(self, build: Build) -> None:
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
            await log("copying the environment into the image")
            await asyncio.to_thread(self._commit, context / "site", digest, base["id"])
        await log(f"image {tag_of(digest)} is ready")

    def _commit(self, site: Path, digest: str, base_id: str) -> None:
        """The environment as one layer on the base image: a container of the base image copies it in from a
        read-only mount and imports what the workloads import (their bytecode goes with it: a container's own
        writes are lost, so without it every start compiles Pixeltable again, 4 s instead of 1.7 s), then it is
        committed. `docker build` would send the 600 MB as a build context, unpack it, checksum it and copy it
        again: 21 s a build on two cores, against about half that here."""
        import docker.errors
        import docker.types

        labels = {"pxt-emulator": "env", "pxt-emulator.base": base_id, "pxt-emulator.recipe": RECIPE}
        labels["pxt-emulator.environment"] = digest
        # What fails to import here fails again, and is reported, when a workload starts; a failed or empty copy
        # (a daemon that does not see this machine's files) fails now.
        script = (
            f'[ -n "$(ls -A /mnt/environment)" ] || exit 4; mkdir -p {SITE} && cp -a /mnt/environment/. {SITE}/ '
            f"|| exit 3; python3 -c 'import {', '.join(WORKLOAD_MODULES)}' >/dev/null 2>&1; exit 0"
        )
        env = {"PYTHONPATH": SITE, "PYTHONUNBUFFERED": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        container = None
        try:
            config = self.client.images.get(self.base_image).attrs.get("Config") or {}
            container = self.client.containers.create(
                self.base_image,
                ["sh", "-c", script],  # as the workloads' containers run: through the base image's own entry point
                user="0",
                environment=env,
                network_mode="none",
                # A mount, not `volumes=`: that one is also declared in the container's config, which the commit
                # would carry into the image, and every workload container would get an anonymous volume.
                mounts=[docker.types.Mount("/mnt/environment", str(site), type="bind", read_only=True)],
                labels={"pxt-emulator": "build", BUILDER_LABEL: str(os.getpid())},
            )
            container.start()
            status = container.wait(timeout=1800).get("StatusCode")
            if status != 0:
                out = container.logs(tail=20).decode(errors="replace").strip()
                raise BuildFailed(f"copying the environment into the image failed ({status}): {out}")
            # The image keeps the base image's own command and user, not the copy's.
            changes = [f"CMD {json.dumps(config.get('Cmd') or ['python3'])}"]
            if config.get("User"):
                changes.append(f"USER {config['User']}")
            changes += [f"LABEL {name}={json.dumps(value)}" for name, value in labels.items()]
            repository, tag = tag_of(digest).rsplit(":", 1)
            container.commit(repository=repository, tag=tag, changes=changes)
        except BuildFailed:
            raise
        except Exception as e:  # the engine's refusals and its client's timeouts alike
            raise BuildFailed(f"making the image {tag_of(digest)} failed: {e}") from None
        finally:
            if container is not None:
                try:
                    container.remove(force=True)
                except docker.errors.DockerException:
                    pass
