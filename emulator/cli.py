"""`emulator`: start, stop, inspect and steer the local Pixeltable Cloud emulator."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from emulator import __version__
from emulator.admin.client import Locator, Unreachable, follow
from emulator.commands import behaviour, common, declared, faults, snapshots, throwaway
from emulator.commands.common import add_json, add_locator, call_or_exit, locator, print_json
from emulator.config import BOOLS, CHOICES, FIELDS, HELP, ConfigError, Settings, flag_of, load_settings
from emulator.core import runlog
from emulator.core.private import private_dir
from emulator.core.statelock import holder

DESCRIPTION = """\
Local emulator of Pixeltable Cloud: the public agent API (/ask, /mcp, /health, trials, discovery),
the identity provider (agent registration, claims, tokens), the control plane, and the emulator's
control API (/_emulator). Everything listens on 127.0.0.1 unless told otherwise.

Every setting can also come from an EMULATOR_<NAME> environment variable or from
<state-dir>/emulator.toml; flags win over the environment, which wins over the file.
"""

EPILOG = """\
examples:
  emulator up                          start in the foreground (Ctrl-C stops it)
  emulator up -d --site-port 0         start in the background on a free port
  emulator status                      what is running, where, and the emulator's clock
  emulator clock advance 48h           move the emulator's clock (due jobs run first)
  emulator events -f                   follow the event journal
  emulator tui                         the live dashboard (registrations, trials, databases, logs)
  emulator down                        stop the emulator started with -d
"""


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="emulator",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    root.add_argument("--version", action="version", version=f"emulator {__version__}")
    sub = root.add_subparsers(dest="command", metavar="COMMAND")

    up = sub.add_parser(
        "up",
        help="start the emulator",
        description="Start the emulator and print its URLs.",
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
        ("down", "stop an emulator started in the background"),
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

    clock = sub.add_parser(
        "clock",
        help="read or move the emulator's clock",
        description="Read or move the emulator's clock. Moving it runs every job that falls due "
        "(expiries, replay windows) before the command returns.",
    )
    add_locator(clock)
    clock.add_argument("action", nargs="?", default="show", choices=["show", "advance", "set", "freeze", "resume"])
    clock.add_argument("value", nargs="?", help="advance: 90s, 15m, 48h, 2d; set/freeze: ISO 8601 instant")
    # `clock advance -1h` is a value (refused by the emulator with a reason), not an unknown flag.
    clock._negative_number_matcher = re.compile(r"^-\d")

    approve = sub.add_parser(
        "approve-claim",
        help="play the person approving an agent's claim; prints the user code",
        description="Sign in as EMAIL on a pending claim's verification page and approve it (or --deny). "
        "Prints the 6-digit user code the agent needs for /agent/identity/claim/complete.",
    )
    add_locator(approve)
    approve.add_argument("claim", help="the claim's verification_uri, or the registration id (agent_reg_…)")
    approve.add_argument("--email", required=True, help="the person's e-mail")
    approve.add_argument("--deny", action="store_true", help="deny the claim instead")
    add_json(approve)

    login = sub.add_parser(
        "approve-login",
        help="play the person approving a `pxt login` sign-in",
        description="Approve (or --deny) the pxt login sign-in that shows CODE, signed in as EMAIL. "
        "Without CODE, the only pending sign-in is approved.",
    )
    add_locator(login)
    login.add_argument("code", nargs="?", help="the code pxt login prints (XXXX-XXXX)")
    login.add_argument("--email", required=True, help="the person's e-mail")
    login.add_argument("--deny", action="store_true", help="deny the sign-in instead")

    claim = sub.add_parser(
        "claim-trial",
        help="play the person who opens a trial's claim_url",
        description="Sign in as EMAIL and become the admin of a trial organization; it then never expires.",
    )
    add_locator(claim)
    claim.add_argument("org", help="the trial's organization slug (agent-…)")
    claim.add_argument("--email", required=True, help="the person's e-mail")

    switch = sub.add_parser(
        "switch",
        help="show or flip the platform switches",
        description="Show the switches, or set one: anonymous_registration, service_auth_registration, "
        "trials_enabled, cloud_reachable.",
    )
    add_locator(switch)
    switch.add_argument("name", nargs="?")
    switch.add_argument("value", nargs="?", choices=["on", "off"])
    add_json(switch)

    for name, text in (
        ("trials", "list trial organizations and their time left"),
        ("registrations", "list agent registrations"),
    ):
        listing = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        add_locator(listing)
        add_json(listing)

    tui = sub.add_parser(
        "tui",
        help="open the live dashboard",
        description="Open the live dashboard of a running emulator (any number can watch one emulator). "
        "Press ? in it for every key.",
    )
    add_locator(tui)
    tui.add_argument("--readonly", action="store_true", help="hide every act that changes the emulator")

    db = sub.add_parser(
        "db",
        help="list hosted databases, or stop or start one",
        description="List hosted databases with their states, or stop or start one as the operator "
        "(the same generation, receipt and events as pxt db stop/start).",
    )
    add_locator(db)
    db.add_argument("action", nargs="?", default="list", choices=["list", "stop", "start"])
    db.add_argument("org", nargs="?", help="the organization's slug")
    db.add_argument("db", nargs="?", help="the database's name (default main)")
    add_json(db)

    events = sub.add_parser("events", help="print the event journal", description="Print the event journal.")
    add_locator(events)
    events.add_argument("-f", "--follow", action="store_true", help="keep printing new events")
    events.add_argument("--since", type=int, default=0, help="only events after this number")
    events.add_argument("--kinds", default="", help="comma-separated kind prefixes, e.g. site.ask,clock")
    events.add_argument("--json", action="store_true", help="one JSON object per line")

    for module in EXTENSIONS:
        COMMANDS.update(module.register(sub))

    base = sub.add_parser(
        "base-image",
        help="build the Docker runtime's base image without a registry (debootstrap + docker import)",
        description="Build a Debian base image for hosted containers from a Debian mirror, with no registry.",
    )
    base.add_argument("--tag", default="pxt-emulator-base:bookworm", help="image name (default %(default)s)")
    base.add_argument("--suite", default="bookworm", help="Debian release (default %(default)s: Python 3.11)")
    base.add_argument("--mirror", default="http://deb.debian.org/debian", help="Debian mirror (default %(default)s)")
    return root


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
    from emulator.core.statelock import StateDirInUse
    from emulator.media.selfcheck import MediaStoreBroken
    from emulator.server import PortInUse, Start, serve

    paths = {k: (getattr(args, k, None) or None) for k in START_FLAGS}
    start = Start(**{k: Path(v).expanduser().absolute() for k, v in paths.items() if v is not None})

    try:
        import uvloop

        runner = asyncio_runner(uvloop.new_event_loop)
    except ImportError:
        runner = asyncio_runner(None)
    private_dir(settings.state_dir)
    runlog.configure(settings.log_level, settings.state_dir)
    try:
        with runner:
            runner.run(serve(settings, on_ready=lambda ep: _print_ready(ep, settings), start=start))
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
            if endpoints.get("pid") == proc.pid:
                _print_ready(endpoints, settings)
                print(f"  pid          {proc.pid} (stop it with `emulator down`; log {log_path})")
                return 0
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    print(f"emulator: not healthy after 60 s; see {log_path}", file=sys.stderr)
    return 1


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
        stale = folder / "endpoints.json"
        if stale.exists():
            stale.unlink(missing_ok=True)
            print(
                f"emulator: it was not running in {folder} (it had ended without cleaning up; removed its stale "
                "endpoints.json)"
            )
        else:
            print(f"emulator: it was not running in {folder}")
        return 0
    if not pid:
        raise SystemExit(f"emulator: {folder} is held by a process whose pid its lock does not name")
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if holder(folder) is None:  # released when it has stopped (a zombie holds no lock)
            print(f"emulator: stopped (pid {pid})")
            return 0
        time.sleep(0.05)
    print(f"emulator: pid {pid} did not stop within 10 s", file=sys.stderr)
    return 1


def cmd_status(args: argparse.Namespace) -> int:
    endpoints = common.endpoints(args)
    status = call_or_exit(endpoints["site"] + "/_emulator/status")
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
    proxy = status.get("proxy")
    if proxy:
        route = f"via {proxy['upstream']} (from {proxy['upstream_source']})" if proxy["upstream"] else "direct"
        print(f"  egress       {proxy['egress']} (other hosts through the proxy: {route})")
    off = [name for name, on in status.get("switches", {}).items() if not on]
    print(f"  switched off {', '.join(off) if off else 'nothing'}")
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    endpoints = common.endpoints(args)
    if "api" not in endpoints:
        endpoints = {**endpoints, **call_or_exit(endpoints["site"] + "/_emulator/status")["endpoints"]}
    exports = common.exports(endpoints)
    for name, value in exports.items():
        print(f"export {name}={value}")
    return 0


FELL_DUE = ("trial.expired", "db.state", "service.state", "media.uploads_expired", "idp.claim")
"""Events a clock move can cause, as `clock advance` reports them (requests that came meanwhile are not)."""


def cmd_clock(args: argparse.Namespace) -> int:
    site = common.endpoints(args)["site"]
    body: dict[str, Any] | None = None
    if args.action == "advance":
        if not args.value:
            raise SystemExit("emulator: clock advance needs a duration such as 90s, 15m, 48h or 2d")
        if re.fullmatch(r"[+-]?\d+(\.\d+)?", args.value.strip()):
            raise SystemExit(
                f"emulator: {args.value} has no unit: say {args.value}s, {args.value}m, {args.value}h or {args.value}d"
            )
        body = {"advance": args.value}
    elif args.action == "set":
        if not args.value:
            raise SystemExit("emulator: clock set needs an ISO 8601 instant")
        body = {"set": args.value}
    elif args.action == "freeze":
        body = {"freeze": True, **({"set": args.value} if args.value else {})}
    elif args.action == "resume":
        body = {"freeze": False}
    before = call_or_exit(site + "/_emulator/status")["events"] if body else 0
    state = call_or_exit(site + "/_emulator/clock", body)
    print(f"{state['iso']}{' (frozen)' if state['frozen'] else ''}")
    if body and ("advance" in body or "set" in body):
        query = f"since={before}&kinds={','.join(FELL_DUE)}&limit=5000"
        due = call_or_exit(f"{site}/_emulator/journal?{query}")["events"]
        for event in due:
            print(f"  {describe_event(event)}")
        if not due:
            print("  nothing fell due (tokens, assertions and links past their lifetime are refused from now on)")
    return 0


def describe_event(event: dict[str, Any]) -> str:
    return runlog.describe(event["kind"], event.get("subject"), event["data"])


def cmd_events(args: argparse.Namespace) -> int:
    site = common.endpoints(args)["site"]

    def show(event: dict[str, Any]) -> None:
        if args.json:
            print(json.dumps(event), flush=True)
        else:
            print(f"{event['seq']:>6} {event['iso']} {describe_event(event)}", flush=True)

    query = f"since={args.since}" + (f"&kinds={args.kinds}" if args.kinds else "")
    if not args.follow:
        for event in call_or_exit(f"{site}/_emulator/journal?{query}&limit=5000")["events"]:
            show(event)
        return 0
    try:
        for event in follow(f"{site}/_emulator/events?{query}"):
            show(event)
    except KeyboardInterrupt:
        pass
    except Unreachable as e:
        raise SystemExit(f"emulator: the event stream ended ({e})") from None
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


def cmd_approve_claim(args: argparse.Namespace) -> int:
    site = common.endpoints(args)["site"]
    key = "registration" if args.claim.startswith("agent_reg_") else "claim"
    path = "/_emulator/claims/deny" if args.deny else "/_emulator/claims/approve"
    answer = call_or_exit(site + path, {key: args.claim, "email": args.email})
    if args.json:
        print_json(answer)
    elif args.deny:
        print(f"denied: {answer['registration']} stays unclaimed")
    else:
        print(
            f"user code {answer['user_code']} (shown once): the agent completes the claim of "
            f"{answer['registration']} with it (POST /agent/identity/claim/complete) until {answer['expires_at']}"
        )
    return 0


def cmd_approve_login(args: argparse.Namespace) -> int:
    site = common.endpoints(args)["site"]
    code = args.code
    if code is None:
        pending = call_or_exit(site + "/_emulator/logins")["pending"]
        if len(pending) != 1:
            raise SystemExit(f"emulator: {len(pending)} sign-ins are pending; name the code")
        code = pending[0]["user_code"]
    answer = call_or_exit(
        site + "/_emulator/logins/approve", {"user_code": code, "email": args.email, "deny": args.deny}
    )
    print(f"{answer['user_code']}: {'approved' if answer['approved'] else 'denied'} as {answer['email']}")
    return 0


def cmd_claim_trial(args: argparse.Namespace) -> int:
    answer = call_or_exit(
        common.endpoints(args)["site"] + "/_emulator/trials/claim", {"org": args.org, "email": args.email}
    )
    print(f"{answer['org']} is claimed by {answer['email']}; it no longer expires")
    return 0


def cmd_tui(args: argparse.Namespace) -> int:
    from tui.app import run

    run(locator(args), readonly=args.readonly)
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    site = common.endpoints(args)["site"]
    if args.action == "list":
        found = call_or_exit(site + "/_emulator/databases")["databases"]
        if args.json:
            print_json(found)
            return 0
        if not found:
            print("no hosted databases yet (`pxt db update pxt://ORG:main` creates one)")
        for d in found:
            note = f"  {d['failure_reason']}" if d.get("failure_reason") else ""
            print(f"{d['org']:<16} {d['db']:<12} {d['state']:<12} generation {d['generation']}{note}")
        return 0
    if not args.org:
        raise SystemExit(f"emulator: db {args.action} needs ORG [DB]")
    db = args.db or "main"
    answer = call_or_exit(f"{site}/_emulator/databases/{args.org}/{db}/{args.action}", {})
    if args.json:
        print_json(answer)
        return 0
    print(f"{answer['org']}:{db}: {args.action} accepted (generation {answer['receipt']['generation']})")
    return 0


def cmd_switch(args: argparse.Namespace) -> int:
    site = common.endpoints(args)["site"]
    if args.name and not args.value:
        raise SystemExit("emulator: switch NAME needs on or off")
    body = {args.name: args.value == "on"} if args.name else None
    switches = call_or_exit(site + "/_emulator/switches", body)
    if args.json:
        print_json(switches)
        return 0
    for name, value in switches.items():
        print(f"{name:<28} {'on' if value else 'off'}")
    return 0


def cmd_trials(args: argparse.Namespace) -> int:
    found = call_or_exit(common.endpoints(args)["site"] + "/_emulator/trials")["trials"]
    if args.json:
        print_json(found)
        return 0
    if not found:
        print("no trial organizations yet (an agent creates one with POST /api/v1/trial-orgs, or `pxt new`)")
    for t in found:
        left = f"{t['seconds_left'] // 3600}h{t['seconds_left'] % 3600 // 60:02d}m left" if t["expires_at"] else ""
        print(f"{t['org']:<14} {t['state']:<10} {left:<12} keys: {', '.join(t['api_keys'])}")
    return 0


def cmd_registrations(args: argparse.Namespace) -> int:
    found = call_or_exit(common.endpoints(args)["site"] + "/_emulator/registrations")["registrations"]
    if args.json:
        print_json(found)
        return 0
    if not found:
        print("no agent registrations yet (an agent registers with POST /agent/identity on the identity provider)")
    for r in found:
        who = r["claimed_email"] or r["login_hint"] or ""
        print(
            f"{r['id']}  {r['type']:<12} {r['status']:<10} tokens {r['tokens_issued']:<3} "
            f"trial {r['trial'] or '-':<14} {who}"
        )
    return 0


def cmd_base_image(args: argparse.Namespace) -> int:
    from emulator.runtime.base_image import build

    build(args.tag, args.suite, args.mirror)
    return 0


COMMANDS = {
    "base-image": cmd_base_image,
    "approve-claim": cmd_approve_claim,
    "approve-login": cmd_approve_login,
    "claim-trial": cmd_claim_trial,
    "tui": cmd_tui,
    "db": cmd_db,
    "switch": cmd_switch,
    "trials": cmd_trials,
    "registrations": cmd_registrations,
    "up": cmd_up,
    "down": cmd_down,
    "status": cmd_status,
    "env": cmd_env,
    "clock": cmd_clock,
    "events": cmd_events,
    "logs": cmd_logs,
}


EXTENSIONS: tuple[Any, ...] = (snapshots, throwaway, faults, declared, behaviour)
"""Modules of `emulator.commands` whose subcommands `emulator` offers (see that package)."""


def main(argv: list[str] | None = None) -> int:
    p = parser()
    argv = sys.argv[1:] if argv is None else argv
    args, extra = p.parse_known_args(argv)
    if not args.command:
        if extra:
            p.error(f"unrecognized arguments: {' '.join(extra)}")
        p.print_help()
        return 2
    if extra:
        _refuse_unknown(subcommand(p, args.command), extra)
    args.argv = argv
    try:
        return COMMANDS[args.command](args)
    except BrokenPipeError:
        # `emulator status | head`: the reader left; say nothing more (and not at exit either).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def subcommand(p: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    actions = (a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return next(actions).choices[name]


def _refuse_unknown(p: argparse.ArgumentParser, extra: list[str]) -> None:
    """A wrong flag is reported with the usage of the subcommand it was given to, and the nearest right one."""
    known = [o for a in p._actions for o in a.option_strings]
    first = next((e for e in extra if e.startswith("-")), extra[0])
    close = difflib.get_close_matches(first.split("=")[0], known, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close and first.startswith("--") else ""
    p.error(f"unrecognized arguments: {' '.join(extra)}{hint}")


if __name__ == "__main__":
    sys.exit(main())
