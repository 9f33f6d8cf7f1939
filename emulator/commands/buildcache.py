"""`emulator build-cache [--clear]`: what the per-user build cache holds, and emptying it (as `uv cache` does)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import msgspec

from emulator.commands.common import print_json
from emulator.config import ConfigError, load_settings
from emulator.core.clock import iso
from emulator.runtime.buildcache import BuildCache
from emulator.runtime.choose import build_cache_root


class CachedEnvironment(msgspec.Struct):
    key: str
    bytes: int
    last_used: str
    in_use: bool  # a running emulator holds it: neither eviction nor --clear removes it


class CacheListing(msgspec.Struct):
    root: str | None  # None: the cache is off
    max_bytes: int
    environments: list[CachedEnvironment]
    removed: list[str] | None = None  # with --clear: the keys removed


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser(
        "build-cache",
        help="list the per-user cache of built environments, or empty it (--clear)",
        description="The hosted environments every emulator of this user shares (the `build_cache` setting, "
        "`emulator up --help`): each entry's size, when it was last used, and whether a running emulator uses it. "
        "--clear removes every entry no running emulator uses. The Docker runtime's images are the engine's: "
        "`docker image prune --all --filter label=pxt-emulator=env` removes those no container uses.",
    )
    p.add_argument("--build-cache", metavar="PATH", help="the cache (default: the setting, else the per-user one)")
    p.add_argument("--clear", action="store_true", help="remove every entry no running emulator uses")
    p.add_argument("--json", action="store_true", help="print the listing as JSON")
    return {"build-cache": cmd_build_cache}


def cmd_build_cache(args: argparse.Namespace) -> int:
    try:
        settings = load_settings({"build_cache": args.build_cache})
    except ConfigError as e:
        raise SystemExit(f"emulator: {e}") from None
    root = build_cache_root(settings)
    max_bytes = int(settings.build_cache_max_gb * 1e9)
    if root is None:
        return _show(args, CacheListing(None, max_bytes, []), "the build cache is off (build_cache = off)")
    cache = BuildCache(root, max_bytes)
    removed = cache.clear() if args.clear else None
    listed = [CachedEnvironment(key, size, iso(used), cache.in_use(key)) for used, key, size in cache.entries()]
    return _show(args, CacheListing(str(root), max_bytes, listed, removed), "")


def _show(args: argparse.Namespace, listing: CacheListing, off: str) -> int:
    if args.json:
        print_json(msgspec.to_builtins(listing))
        return 0
    if off:
        print(off)
        return 0
    if listing.removed is not None:
        print(f"removed {len(listing.removed)} environment{'s' if len(listing.removed) != 1 else ''}")
    total = sum(e.bytes for e in listing.environments)
    print(
        f"build cache {listing.root}: {len(listing.environments)} environments, {total / 1e9:.2f} GB "
        f"(bound {listing.max_bytes / 1e9:g} GB)"
    )
    for e in listing.environments:
        held = "  in use" if e.in_use else ""
        print(f"  {e.key[:12]}  {e.bytes / 1e6:8.0f} MB  last used {e.last_used}{held}")
    return 0
