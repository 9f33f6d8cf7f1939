"""`emulator image build`: the emulator as a container image (emulator/container/)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    image = sub.add_parser(
        "image",
        help="build the emulator's container image",
        description="Build the emulator as a container image from this project: its dependencies installed by this "
        "machine's pip for the base image's Python, so the build needs no registry and no network. The container "
        "listens on every interface of its own (publish its ports on 127.0.0.1), keeps its state on a volume, and "
        "takes every setting as an EMULATOR_* variable (and EMULATOR_IMPORT, EMULATOR_APPLY, "
        "EMULATOR_EXPORT_ON_EXIT).",
        epilog="examples:\n  emulator image build\n"
        "  emulator image build --tag pxt-emulator:1 --base python:3.11-slim\n"
        "  docker run -d -p 127.0.0.1:8700-8705:8700-8705 -v pxt-emulator:/var/lib/pxt-emulator pxt-emulator:local",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = image.add_subparsers(dest="verb", metavar="VERB", required=True)
    build = verbs.add_parser("build", help="build the image", description="Build the emulator's image.")
    build.add_argument("--tag", default="pxt-emulator:local", help="the image's tag (default pxt-emulator:local)")
    build.add_argument(
        "--base",
        help="the base image, with python3 (default: python:3.11-slim-bookworm if this machine has it, else the one "
        "`emulator base-image` builds)",
    )
    return {"image": cmd_image}


def cmd_image(args: argparse.Namespace) -> int:
    from emulator.container.image import ImageBuildFailed, build

    try:
        build(args.tag, args.base)
    except ImageBuildFailed as e:
        raise SystemExit(f"emulator: {e}") from None
    return 0
