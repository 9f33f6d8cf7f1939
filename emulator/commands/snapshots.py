"""`emulator snapshot save|load|list|delete|export|import` and `emulator reset [--to start]`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emulator.admin import ops
from emulator.admin.client import SLOW, EmulatorError, Unreachable
from emulator.admin.wire import ResetRequest, SnapshotSave
from emulator.commands import common
from emulator.commands.common import add_json, add_locator, plain_or_exit, shown_whole


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    snap = sub.add_parser(
        "snapshot",
        help="save, load, list, delete, export and import snapshots of a running emulator",
        description="A snapshot holds everything a later load needs: the store, the keys and the CA, uploaded "
        "archives, media, and the hosted databases' data (their servers stop for the save and come back after). "
        "Snapshots are kept in <state-dir>/snapshots; an export is one .tar.gz to share or keep.",
        epilog="examples:\n  emulator snapshot save seeded\n  emulator snapshot load seeded\n"
        "  emulator snapshot export seeded seeded.tar.gz\n  emulator snapshot import seeded.tar.gz\n"
        "  emulator up --free-ports --import seeded.tar.gz --export-on-exit last-run.tar.gz",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = snap.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, text in (
        ("save", "save the running emulator as NAME (replacing a snapshot of that name)"),
        ("load", "make the running emulator what snapshot NAME holds"),
        ("delete", "delete snapshot NAME"),
    ):
        p = verbs.add_parser(verb, help=text, description=text[0].upper() + text[1:] + ".")
        add_locator(p)
        p.add_argument("name")
    listed = verbs.add_parser("list", help="list snapshots", description="List the snapshots by name.")
    add_locator(listed)
    add_json(listed)
    export = verbs.add_parser("export", help="write snapshot NAME to FILE (.tar.gz)")
    add_locator(export)
    export.add_argument("name")
    export.add_argument("file", type=Path)
    imp = verbs.add_parser("import", help="add the export FILE as a snapshot (load it with `snapshot load`)")
    add_locator(imp)
    imp.add_argument("file", type=Path)
    imp.add_argument("--name", help="the snapshot's name (default: the name it was saved under)")
    imp.add_argument("--load", action="store_true", help="load it once imported")

    reset = sub.add_parser(
        "reset",
        help="return a running emulator to an empty state (or the state it started from)",
        description="Return a running emulator to an empty state without a restart: registrations, trials, "
        "organizations, keys, secrets, sessions, databases and services (their workloads stopped and removed), "
        "media, the journal, rate-limit and idempotency windows, fault holds and rules, switches and the clock. "
        "With --to start, to the state it was started from instead (`up --import`, or the state dir it found).",
    )
    add_locator(reset)
    reset.add_argument("--to", choices=["empty", "start"], default="empty", help="the target (default empty)")
    return {"snapshot": cmd_snapshot, "reset": cmd_reset}


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return str(n)


def cmd_snapshot(args: argparse.Namespace) -> int:
    client = common.client(args)
    if args.verb == "list":
        found = plain_or_exit(client, ops.SNAPSHOTS.call())["snapshots"]
        if shown_whole(args, found, "no snapshots yet (emulator snapshot save NAME)"):
            return 0
        for s in found:
            counts = ", ".join(f"{v} {k}" for k, v in s["counts"].items() if v)
            print(f"{s['name']:<24} saved {s['created_at']}  clock {s['clock']}  {_size(s['size_bytes']):>9}  {counts}")
        return 0
    if args.verb == "save":
        s = plain_or_exit(client, ops.SNAPSHOT_SAVE.call(SnapshotSave(args.name)).within(SLOW))
        print(f"saved {s['name']} ({_size(s['size_bytes'])}; the clock read {s['clock']})")
    elif args.verb == "load":
        done = plain_or_exit(client, ops.SNAPSHOT_LOAD.call(name=args.name).within(SLOW))
        print(f"loaded {done['loaded']} in {done['seconds']:.2f} s; the clock reads {done['clock']}")
    elif args.verb == "delete":
        plain_or_exit(client, ops.SNAPSHOT_DELETE.call(name=args.name))
        print(f"deleted {args.name}")
    elif args.verb == "export":
        try:
            size = client.download(ops.SNAPSHOT_EXPORT.call(name=args.name).within(600), args.file)
        except (EmulatorError, Unreachable) as e:
            raise SystemExit(f"emulator: {e}") from None
        print(f"exported {args.name} to {args.file} ({_size(size)})")
    elif args.verb == "import":
        call = ops.SNAPSHOT_IMPORT.call(args.file, query={"name": args.name}).within(600)
        try:
            s = client.plain(call)
        except (EmulatorError, Unreachable) as e:
            raise SystemExit(f"emulator: {e}") from None
        print(f"imported {args.file} as {s['name']} (saved {s['created_at']} by emulator {s['emulator']})")
        if args.load:
            done = plain_or_exit(client, ops.SNAPSHOT_LOAD.call(name=s["name"]).within(SLOW))
            print(f"loaded {done['loaded']} in {done['seconds']:.2f} s; the clock reads {done['clock']}")
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    done = plain_or_exit(common.client(args), ops.RESET.call(ResetRequest(args.to)).within(SLOW))
    print(f"reset to {args.to} in {done['seconds']:.2f} s; the clock reads {done['clock']}")
    return 0
