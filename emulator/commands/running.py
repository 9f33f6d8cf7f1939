"""`emulator up|down|status|env|logs|tui|base-image`: start an emulator, find it, read its log, stop it."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emulator import __version__, startkeys
from emulator.admin import ops
from emulator.admin.client import Locator
from emulator.commands import common
from emulator.commands.common import add_json, add_locator, locator, plain_or_exit, print_json
from emulator.config import (
    BOOLS,
    CHOICES,
    FIELDS,
    HELP,
    ConfigError,
    Settings,
    default_state_dir,
    flag_of,
    load_settings,
)
from emulator.core import runlog
from emulator.core.private import private_dir
from emulator.core.processes import running
from emulator.core.statelock import holder
from emulator.core.switches import OFF_AT_FIRST

# Each line that starts an emulator runs as printed in a test, beside an emulator on the default ports.
UP_EXAMPLES = """\
examples:
  emulator up --free-ports
      in the foreground, on a free port for every origin (Ctrl-C stops it)
  emulator up -d --state-dir s2 --free-ports
      a second emulator in the background, beside the first; it prints the command that stops it
  emulator up -d --free-ports --seed 7 --freeze-clock 2026-01-01
      reproducible IDs and a frozen clock
"""


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    up = sub.add_parser(
        "up",
        help="start the emulator",
        description="Start the emulator and print its URLs: on ports 8700-8705 unless told otherwise\n"
        "(--free-ports: a free port for every origin, for an emulator beside another). With -d it returns\n"
        "once healthy and prints the command that stops it.",
        epilog=UP_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="emulator up [-d] [--tui] [--import FILE] [--apply FILE] [--export-on-exit FILE] [--config FILE] "
        "[SETTING FLAGS]",
    )
    add_setting_flags(up)
    up.add_argument("--config", type=Path, help="settings file (default <state-dir>/emulator.toml)")
    up.add_argument(
        "--import",
        dest="import_file",
        type=Path,
        metavar="FILE",
        help="start from the export FILE (emulator snapshot export); `reset --to start` returns to it",
    )
    up.add_argument(
        "--apply",
        dest="apply_file",
        type=Path,
        metavar="FILE",
        help="apply the declared state FILE (TOML, see emulator apply) at start; `reset --to start` returns to it",
    )
    up.add_argument(
        "--export-on-exit",
        type=Path,
        metavar="FILE",
        help="when the emulator stops (Ctrl-C, SIGTERM, emulator down), export its state to FILE",
    )
    up.add_argument("-d", "--detach", action="store_true", help="run in the background and return once healthy")
    up.add_argument(
        "--tui",
        action="store_true",
        help="start in the background, then open the dashboard in this terminal; quitting it stops the emulator "
        "(with -d too, the emulator keeps running)",
    )

    for name, text in (
        ("down", "stop the emulator of a state dir (started in the background or not)"),
        ("status", "show whether the emulator runs, its endpoints and its clock"),
        ("env", "print the shell exports that point clients at the emulator"),
    ):
        add_locator(sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + "."))
    add_json(sub.choices["status"])
    logs = sub.add_parser(
        "logs",
        help="print the emulator's log (a line per request and per operation)",
        description="Print the log of the emulator of a state dir (<state-dir>/emulator.log), foreground or "
        "background. `emulator events -f` shows every event in full; `emulator tui` shows them live.",
    )
    add_locator(logs)
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    logs.add_argument("-n", "--lines", type=int, default=50, metavar="N", help="the last N lines (default 50)")

    tui = sub.add_parser(
        "tui",
        help="open the live dashboard",
        description="Open the live dashboard of a running emulator (any number can watch one emulator). "
        "Press ? in it for every key.",
    )
    add_locator(tui)
    tui.add_argument("--readonly", action="store_true", help="hide every act that changes the emulator")

    base = sub.add_parser(
        "base-image",
        help="build the Docker runtime's base image without a registry (debootstrap + docker import)",
        description="Build a Debian base image for hosted containers from a Debian mirror, with no registry.",
    )
    base.add_argument("--tag", default="pxt-emulator-base:bookworm", help="image name (default %(default)s)")
    base.add_argument("--suite", default="bookworm", help="Debian release (default %(default)s: Python 3.11)")
    base.add_argument("--mirror", default="http://deb.debian.org/debian", help="Debian mirror (default %(default)s)")
    return {
        "up": cmd_up,
        "down": cmd_down,
        "status": cmd_status,
        "env": cmd_env,
        "logs": cmd_logs,
        "tui": cmd_tui,
        "base-image": cmd_base_image,
    }


ALIASES = {"site_port": ("--port",), "watch_docs": ("--no-watch",), "deprecations": ("--deprecate",)}


def add_setting_flags(up: argparse.ArgumentParser) -> None:
    """A flag for every setting, named as the setting is (`trial_lifetime` → `--trial-lifetime`). Values stay text
    here: `load_settings` reads them as it reads the environment and the file, and names the flag in an error."""
    group = up.add_argument_group("settings (each also EMULATOR_<NAME> or a key in emulator.toml)")
    for name in FIELDS:
        text = HELP[name]
        if name in BOOLS:
            group.add_argument(flag_of(name), dest=name, action=argparse.BooleanOptionalAction, help=text)
            if name == "watch_docs":
                group.add_argument("--no-watch", dest=name, action="store_false", help=argparse.SUPPRESS)
            continue
        names = [flag_of(name), *ALIASES.get(name, ())]
        group.add_argument(*names, dest=name, metavar=name.upper(), choices=CHOICES.get(name), help=text)


# --- commands ---------------------------------------------------------------------------------------


START_FLAGS = ("import_file", "apply_file", "export_on_exit")
# The start's files from the environment when no flag names them (a container's `-e EMULATOR_IMPORT=...`).
START_VARS = {
    "import_file": "EMULATOR_IMPORT",
    "apply_file": "EMULATOR_APPLY",
    "export_on_exit": "EMULATOR_EXPORT_ON_EXIT",
}


def _settings_from(args: argparse.Namespace) -> Settings:
    skip = ("command", "detach", "argv", *START_FLAGS)
    flags = {k: v for k, v in vars(args).items() if k not in skip}
    try:
        return load_settings(flags)
    except ConfigError as e:
        raise SystemExit(f"emulator: {e}") from None


def _print_ready(endpoints: dict[str, str], settings: Settings) -> None:
    print(f"Pixeltable Cloud emulator {__version__} is up", flush=True)
    print(f"  site         {endpoints['site']}  (/ask, /mcp, /health, trials, discovery, /_emulator)")
    print(f"  auth         {endpoints['auth']}  (identity provider: /agent/identity, /oauth2/token)")
    print(f"  api          {endpoints['api']}  (control plane)")
    print(f"  tunnel       {endpoints['tunnel']}  (hosted databases; CONNECT proxy {endpoints['proxy']})")
    print(f"  s3           {endpoints['s3']}  (media store: the databases' home buckets)")
    print(f"  state        {settings.state_dir}")
    print(f"  endpoints    {settings.endpoints_path}")
    print(
        f"  log          a line per request and operation below and in {settings.state_dir / 'emulator.log'} "
        "(`emulator logs -f`); every event in full: `emulator events -f`, `emulator tui`",
        flush=True,
    )


def cmd_up(args: argparse.Namespace) -> int:
    settings = _settings_from(args)
    if args.tui:
        return _up_with_tui(args, settings)
    if args.detach:
        return _detach(args, settings)
    from emulator.core.statelock import StateDirInUse, hold
    from emulator.media.selfcheck import MediaStoreBroken

    private_dir(settings.state_dir)
    try:
        lock = hold(settings.state_dir)  # before anything in the state dir is read or written
    except StateDirInUse as e:
        print(f"emulator: {e}", file=sys.stderr)
        return 1
    # The keys and the tunnel's CA, made or checked in a child process while this one imports the server.
    keys = startkeys.spawn(settings.state_dir, settings.cloud_domain)
    from emulator.server import PortInUse, Start, serve

    paths = {k: (getattr(args, k, None) or os.environ.get(START_VARS[k]) or None) for k in START_FLAGS}
    start = Start(**{k: Path(v).expanduser().absolute() for k, v in paths.items() if v is not None})

    try:
        import uvloop

        runner = asyncio_runner(uvloop.new_event_loop)
    except ImportError:
        runner = asyncio_runner(None)
    runlog.configure(settings.log_level, settings.state_dir)
    try:
        with runner:
            runner.run(serve(settings, lambda ep: _print_ready(ep, settings), start, lock, keys))
    except (PortInUse, ConfigError, MediaStoreBroken, StateDirInUse) as e:
        print(f"emulator: {e}", file=sys.stderr)
        return 1
    finally:
        runlog.unconfigure()
    return 0


def asyncio_runner(factory: Any) -> Any:
    import asyncio

    return asyncio.Runner(loop_factory=factory)


def _detach(args: argparse.Namespace, settings: Settings) -> int:
    # The same command line without -d, with the state dir pinned so both agree where it is.
    own = [a for a in args.argv if a not in ("-d", "--detach")]
    argv = [sys.executable, "-m", "emulator", *own, "--state-dir", str(settings.state_dir)]
    private_dir(settings.state_dir)
    log_path = settings.state_dir / "emulator.log"
    with open(log_path, "ab") as logf:
        proc = subprocess.Popen(argv, stdout=logf, stderr=logf, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            print(f"emulator: it stopped at start (exit {proc.returncode}); see {log_path}", file=sys.stderr)
            reason = _last_refusal(log_path)
            if reason:
                print(reason, file=sys.stderr)
            return 1
        try:
            endpoints = json.loads(settings.endpoints_path.read_text())
        except (OSError, ValueError):
            endpoints = {}
        if endpoints.get("pid") == proc.pid:
            try:
                _print_ready(endpoints, settings)
                stop = stop_command(settings)
                print(f"  pid          {proc.pid} (stop it with `{stop}`; log {log_path})", flush=True)
            except BrokenPipeError:
                # `emulator up -d | head -2`: the reader left, the emulator is up all the same (and the lines left
                # in the buffer must not fail again at exit).
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        time.sleep(0.05)
    print(f"emulator: not healthy after 60 s; see {log_path}", file=sys.stderr)
    return 1


def stop_command(settings: Settings) -> str:
    """The command that stops the emulator of `settings` from any directory: `emulator down` finds the default state
    dir only when nothing in the environment points elsewhere (EMULATOR_URL wins over it)."""
    folder = settings.state_dir.absolute()
    pointed = any(os.environ.get(name) for name in ("EMULATOR_URL", "EMULATOR_STATE_DIR"))
    if folder == default_state_dir().absolute() and not pointed:
        return "emulator down"
    return f"emulator down --state-dir {shlex.quote(str(folder))}"


def _last_refusal(log_path: Path) -> str | None:
    """The last `emulator: ...` line a stopped start wrote to its log (why it stopped), if any."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()[-50:]
    except OSError:
        return None
    return next((line for line in reversed(lines) if line.startswith("emulator: ")), None)


def _up_with_tui(args: argparse.Namespace, settings: Settings) -> int:
    """The emulator in the background (its output goes to its log), the dashboard in the foreground."""
    args.argv = [a for a in args.argv if a != "--tui"]
    if _detach(args, settings) != 0:
        return 1
    from tui.app import run

    pid = json.loads(settings.endpoints_path.read_text())["pid"]
    try:
        run(Locator(state_dir=settings.state_dir))
    finally:
        if not args.detach:
            _stop_child(pid)
    return 0


def _stop_child(pid: int) -> None:
    """Stop the emulator this process started, and reap it (a child that is not waited for stays a zombie)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            print(f"emulator: stopped (pid {pid})")
            return
        time.sleep(0.05)
    print(f"emulator: pid {pid} did not stop within 15 s", file=sys.stderr)


def cmd_down(args: argparse.Namespace) -> int:
    folder = common.running_state_dir(args)
    pid = holder(folder)  # the lock says who runs, not endpoints.json (a `kill -9` leaves that behind)
    if pid is None:
        # Nothing stopped: a script that stops the wrong state dir learns it (exit 1), as `kill` of no process does.
        stale = folder / "endpoints.json"
        if stale.exists():
            stale.unlink(missing_ok=True)
            print(
                f"emulator: no emulator is running in {folder} (one had ended without cleaning up; removed its stale "
                "endpoints.json)",
                file=sys.stderr,
            )
        else:
            print(
                f"emulator: no emulator is running in {folder}; nothing was stopped (another state dir: "
                "--state-dir DIR)",
                file=sys.stderr,
            )
        return 1
    if not pid:
        raise SystemExit(f"emulator: {folder} is held by a process whose pid its lock does not name")
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        # The lock is released as its teardown ends (a zombie holds none); the process itself then exits: `down`
        # answers once it has, so that nothing of the emulator runs after it ("stopped" means gone).
        if holder(folder) is None and not running(pid):
            print(f"emulator: stopped (pid {pid})")
            return 0
        time.sleep(0.05)
    print(f"emulator: pid {pid} did not stop within 10 s", file=sys.stderr)
    return 1


def cmd_status(args: argparse.Namespace) -> int:
    status = plain_or_exit(common.client(args), ops.STATUS.call())
    if args.json:
        print_json(status)
        return 0
    clock = status["clock"]
    print(f"emulator {status['version']}: running")
    for name, url in status["endpoints"].items():
        if name not in ("base_url", "runtime"):  # the runtime has a line of its own below
            print(f"  {name:<12} {url}")
    print(f"  clock        {clock['iso']}{' (frozen)' if clock['frozen'] else ''}")
    print(f"  state        {status['state_dir']}")
    print(f"  docs         {status['docs']}")
    print(f"  events       {status['events']}")
    runtime = status.get("runtime") or {}
    if runtime.get("kind"):
        unenforced = ", ".join(runtime.get("unenforced_limits") or []) or "none"
        base = f", base image {runtime['base_image']}" if runtime.get("base_image") else ""
        print(f"  runtime      {runtime['kind']}{base} (limits it cannot enforce: {unenforced})")
        spares = "spares kept" if runtime.get("spares") else "no spares"
        print(f"  profile      {runtime.get('profile')} ({spares}; build cache {runtime.get('build_cache') or 'off'})")
    proxy = status.get("proxy")
    if proxy:
        route = f"via {proxy['upstream']} (from {proxy['upstream_source']})" if proxy["upstream"] else "direct"
        print(f"  egress       {proxy['egress']} (other hosts through the proxy: {route})")
    switches = status.get("switches", {})
    off = [name for name, on in switches.items() if not on and name not in OFF_AT_FIRST]
    on = [name for name, on in switches.items() if on and name in OFF_AT_FIRST]
    print(f"  switched off {', '.join(off) if off else 'nothing'}" + (f"; on: {', '.join(on)}" if on else ""))
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    exports = common.endpoints(args).exports()
    for name, value in exports.items():
        print(f"export {name}={value}")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    folder = common.running_state_dir(args)
    try:
        for line in runlog.tail(folder / runlog.LOG_NAME, args.lines, args.follow):
            print(line, end="", flush=True)
    except FileNotFoundError:
        raise SystemExit(
            f"emulator: {folder / runlog.LOG_NAME} does not exist; has an emulator run in {folder}?"
        ) from None
    except KeyboardInterrupt:
        pass
    return 0


def cmd_tui(args: argparse.Namespace) -> int:
    from tui.app import run

    run(locator(args), readonly=args.readonly)
    return 0


def cmd_base_image(args: argparse.Namespace) -> int:
    from emulator.runtime.base_image import build

    build(args.tag, args.suite, args.mirror)
    return 0
