"""Runs the emulator: opens the core once, binds every origin, serves them all on one event loop.

Each origin of the real product is its own uvicorn server on its own loopback port; they share the
store, the clock and the event bus. Sockets are bound before serving, so port 0 resolves to a real
port that goes into `<state-dir>/endpoints.json` before the first request can arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from emulator import __version__, startkeys
from emulator.admin import routes as operator_api
from emulator.admin.context import STATE_KEY as OPERATOR_STATE
from emulator.admin.context import Operator
from emulator.cloud.app import boundary_error as cloud_refusal
from emulator.cloud.app import build_cloud_app
from emulator.cloud.operations import OPERATIONS
from emulator.config import ConfigError, Settings
from emulator.core import kinds, statelock
from emulator.core.boundary import Boundary
from emulator.core.clock import iso
from emulator.core.context import Core
from emulator.core.egress import EgressError, EgressPolicy, Upstream, resolve_upstream
from emulator.core.errors import ApiError
from emulator.core.httpserver import Refuse, timed_protocol
from emulator.core.listening import Listening
from emulator.core.payloads import EmulatorStarted
from emulator.core.private import private_dir, write_private
from emulator.core.ratelimit import RateLimiter
from emulator.core.runlog import EventLog
from emulator.core.secretbox import SecretBox
from emulator.core.served import RequestJournal
from emulator.core.snapshots import EXIT, START, Part
from emulator.core.tasks import cancel
from emulator.core.watch import Watch
from emulator.hosted import databases, declared, trials
from emulator.hosted.auth import Authenticator
from emulator.hosted.blobs import Blobs
from emulator.hosted.keys import trial_key
from emulator.hosted.logins import Logins
from emulator.hosted.platform import Platform
from emulator.hosted.reconciler import Reconciler
from emulator.identity.agents_api import AgentsApi
from emulator.identity.identity import Identity
from emulator.identity.sender import Sender
from emulator.identity.signing import Signer
from emulator.identity.wire import CLAIM_PAGE, Urls
from emulator.idp.routes import Idp, build_idp_app
from emulator.idp.routes import boundary_error as idp_refusal
from emulator.media import selfcheck
from emulator.media.store import MediaStore
from emulator.runtime.choose import make_launcher
from emulator.site.app import build_site_app
from emulator.site.errors import boundary_error as site_refusal
from emulator.site.idempotency import Idempotency
from emulator.site.search import DocsIndex
from emulator.site.state import Site, load_integrations
from emulator.tunnel.forward import ForwardProxy
from emulator.tunnel.server import Authorize, Refusal, Route, TunnelServer
from emulator.tunnel.tlsfiles import TlsFiles

log = logging.getLogger("emulator")


class PortInUse(RuntimeError):
    pass


# Applies a declared state (its text, its file name for messages): emulator.hosted.declared.apply, bound.
ApplyState = Callable[[str, str], Awaitable[object]]


@dataclass(frozen=True)
class Start:
    """What `emulator up` does beyond serving: start from an export, apply a declared state, export at the end."""

    import_file: Path | None = None
    apply_file: Path | None = None
    export_on_exit: Path | None = None


def key_files(settings: Settings, reload: Callable[[], None]) -> Part:
    """The snapshot part of what signs and encrypts: the keys folder and the CA (its leaf is issued again for this
    emulator's domain). A load that brings other keys than the running ones has every holder reload them."""
    keys, tls = settings.state_dir / "keys", settings.state_dir / "tls"
    ca_files = ("ca.pem", "ca-key.pem")

    async def save(folder: Path) -> None:
        def copy() -> None:
            shutil.copytree(keys, folder / "keys")
            (folder / "tls").mkdir()
            for name in ca_files:
                shutil.copy2(tls / name, folder / "tls" / name)

        await asyncio.to_thread(copy)

    async def load(folder: Path) -> None:
        def put() -> bool:
            changed = False
            pairs = [(p, keys / p.name) for p in sorted((folder / "keys").iterdir())]
            pairs += [(folder / "tls" / n, tls / n) for n in ca_files]
            for source, target in pairs:
                data = source.read_bytes()
                if not target.is_file() or target.read_bytes() != data:
                    write_private(target, data)
                    changed = True
            if changed:
                for leaf in ("server.pem", "server-key.pem"):
                    (tls / leaf).unlink(missing_ok=True)
            return changed

        if await asyncio.to_thread(put):
            reload()

    return Part("keys", save, load)


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signals to the emulator, which stops all origins together."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def bind(host: str, port: int, origin: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise PortInUse(
            f"{origin}: cannot listen on {host}:{port} ({e.strerror}); choose another port (0 picks a free one), "
            "or --free-ports for a free port for every origin"
        ) from None
    sock.set_inheritable(False)
    return sock


PORTS_FILE = "ports.json"


def bind_kept(host: str, port: int, origin: str, kept: dict[str, int], label: str) -> socket.socket:
    """`bind`, but an origin set to a free port (0) takes the port it had in the state dir's last run when that is
    free: clients keep what they hold by URL (the client's trial key is per control-plane URL), so a state dir's
    URLs survive a restart. An explicit port always wins; a remembered one that is taken gives way to a free one."""
    if port == 0 and kept.get(origin):
        with contextlib.suppress(PortInUse):
            return bind(host, kept[origin], label)
        log.warning("%s: port %d of the last run is taken; a free one is used (its URL changes)", label, kept[origin])
    return bind(host, port, label)


def kept_ports(state_dir: Path) -> dict[str, int]:
    try:
        raw = json.loads((state_dir / PORTS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return (
        {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, int) and 0 < v < 65536}
        if isinstance(raw, dict)
        else {}
    )


def keep_ports(state_dir: Path, socks: dict[str, socket.socket]) -> None:
    write_private(state_dir / PORTS_FILE, json.dumps({k: s.getsockname()[1] for k, s in socks.items()}).encode())


def url_of(sock: socket.socket, public: str | None = None) -> str:
    """The URL of a listening socket, as a client reaches it: at `public` (the host the emulator hands out)."""
    host, port = sock.getsockname()[:2]
    host = public or host
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


# Each origin's error format, for the 408 its protocol gives a request cut off at its deadline.
REFUSALS: dict[str, Refuse] = {"site": site_refusal, "auth": idp_refusal, "api": cloud_refusal}


def _uvicorn_config(app: Any, settings: Settings, origin: str = "", watch: Watch | None = None) -> uvicorn.Config:
    http = timed_protocol(
        settings.http_request_timeout, origin, watch, settings.http_body_deadline, REFUSALS.get(origin, site_refusal)
    )
    return uvicorn.Config(
        app,
        lifespan="off",
        ws="none",  # no origin serves WebSockets: an upgrade is a plain request, and the start imports no ws library
        # The emulator logs each request itself (runlog); uvicorn says only what went wrong, unless debugging.
        log_level="debug" if settings.log_level == "debug" else "warning",
        access_log=False,
        http=http,
        timeout_graceful_shutdown=3,
        server_header=False,
        # The client IP is the socket's; X-Forwarded-For counts only with `trust_forwarded` (Site).
        proxy_headers=False,
    )


def upstream_proxy(settings: Settings, own_ports: list[int]) -> Upstream | None:
    """The proxy relays go through; refused when it is this emulator itself (a shell set up with `emulator env`
    exports HTTPS_PROXY pointing here, and relaying to itself would loop until the relay cap)."""
    try:
        upstream = resolve_upstream(settings.upstream_proxy, os.environ)
    except EgressError as e:
        raise ConfigError(str(e)) from None
    if upstream is not None and upstream.points_at([settings.host], own_ports):
        fix = "unset it" if upstream.source != "upstream_proxy" else "name another proxy"
        raise ConfigError(
            f"{upstream.source}={upstream.display} is this emulator's own proxy (a shell set up with "
            f"`emulator env` exports it): {fix} where the emulator starts, or set upstream_proxy = none "
            "(EMULATOR_UPSTREAM_PROXY=none) to relay directly"
        )
    return upstream


def tunnel_authorizer(platform: Platform) -> Authorize:
    """The tunnel's check: the platform's, with its refusals in the tunnel's terms."""

    async def authorize(org: str, db: str, credential: str) -> Route | Refusal:
        try:
            address, who = await platform.tunnel_route(org, db, credential)
        except ApiError as e:
            return Refusal(e.status if 400 <= e.status <= 599 else 503, e.message)
        return Route(address, who)

    return authorize


async def begin_from(core: Core, start: Start, apply_state: ApplyState | None = None) -> None:
    """The state `up` was asked to start from (an export, then a declared state on top of it), kept as the target of
    `reset --to start` when it is not empty."""
    if start.import_file is not None:
        try:
            view = await core.snapshots.import_file(start.import_file)
            await core.snapshots.load(view.name, resume=False)  # serve() resumes the services once it serves
        except ApiError as e:
            raise ConfigError(f"--import {start.import_file}: {e.message}") from None
    if start.apply_file is not None and apply_state is not None:
        try:
            text = await asyncio.to_thread(start.apply_file.read_text, "utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"--apply {start.apply_file}: cannot read it as UTF-8 text ({e})") from None
        try:
            await apply_state(text, str(start.apply_file))
        except ApiError as e:
            raise ConfigError(f"--apply: {e.message}") from None  # the message starts FILE:LINE
    # A declared state is kept even when it holds nothing but the clock: `reset --to start` puts that back too.
    if start.apply_file is not None or not await core.snapshots.is_empty():
        await core.snapshots.save(START, internal=True)
        core.start_snapshot = START


async def export_on_exit(core: Core, target: Path) -> None:
    try:
        await core.snapshots.save(EXIT, internal=True)
        await core.snapshots.export_to(EXIT, target)
        log.warning("exported the emulator's state to %s", target)
    except Exception as e:
        log.error("--export-on-exit %s failed: %s", target, e)


def write_endpoints(settings: Settings, endpoints: dict[str, str]) -> None:
    record = {
        "pid": os.getpid(),
        "version": __version__,
        "started_at": iso(time.time()),
        "state_dir": str(settings.state_dir),
        **endpoints,
    }
    tmp = settings.endpoints_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(settings.endpoints_path)


def remove_endpoints(settings: Settings) -> None:
    try:
        if json.loads(settings.endpoints_path.read_text()).get("pid") == os.getpid():
            settings.endpoints_path.unlink()
    except (OSError, ValueError):
        pass


async def serve(
    settings: Settings,
    on_ready: Any = None,
    start: Start | None = None,
    lock: statelock.StateLock | None = None,
    keys: subprocess.Popen[bytes] | None = None,
) -> None:
    """Serve every origin until SIGINT/SIGTERM, holding the state dir's lock (`StateDirInUse` if another has it).
    `lock` and `keys`: that lock and the key child (`startkeys.spawn`), when the caller took and started them before
    importing this module (`emulator up`)."""
    t0 = time.perf_counter()
    private_dir(settings.state_dir)  # registrations, e-mails, key hashes, the journal: the user's own
    lock = lock or statelock.hold(settings.state_dir)  # before anything in it is read, bound or stopped
    try:
        await _serve(settings, on_ready, start or Start(), t0, keys)
    finally:
        lock.release()


def listening_of(
    settings: Settings,
    socks: dict[str, socket.socket],
    tunnel_sock: socket.socket,
    s3_sock: socket.socket,
    reconciler: Reconciler,
) -> Listening:
    """Every port this emulator listens on and the names it goes by: what a webhook may never lead to."""
    names = {"site": "site", "auth": "identity provider", "api": "control plane (and the containers' way home)"}
    ports = {sock.getsockname()[1]: names[name] for name, sock in socks.items()}
    ports[tunnel_sock.getsockname()[1]] = "database tunnel and proxy"
    ports[s3_sock.getsockname()[1]] = "media store (S3)"
    for port in settings.gateway_range or ():
        ports.setdefault(port, "service gateway port")

    def gateways() -> dict[int, str]:
        return {port: "service gateway" for _, port in reconciler.supervisor.gateways.values()}

    hosts = [settings.host, settings.public_host, *settings.allowed_hosts.split(",")]
    return Listening.of(ports, hosts, gateways)


async def _serve(
    settings: Settings, on_ready: Any, start: Start, t0: float, key_child: subprocess.Popen[bytes] | None
) -> None:
    kept = kept_ports(settings.state_dir)
    socks = {
        "site": bind_kept(settings.host, settings.site_port, "site", kept, "site"),
        "auth": bind_kept(settings.host, settings.auth_port, "auth", kept, "identity provider"),
        "api": bind_kept(settings.host, settings.api_port, "api", kept, "control plane"),
    }
    tunnel_sock = bind_kept(settings.host, settings.tunnel_port, "tunnel", kept, "database tunnel")
    tunnel_port = tunnel_sock.getsockname()[1]
    s3_sock = bind_kept(settings.host, settings.s3_port, "s3", kept, "media store (S3)")
    keep_ports(settings.state_dir, {**socks, "tunnel": tunnel_sock, "s3": s3_sock})
    try:
        upstream = upstream_proxy(settings, [s.getsockname()[1] for s in (*socks.values(), tunnel_sock, s3_sock)])
    except ConfigError:
        for sock in (*socks.values(), tunnel_sock, s3_sock):
            sock.close()
        raise
    public = settings.public or None
    urls = Urls(
        site=url_of(socks["site"], public), auth=url_of(socks["auth"], public), api=url_of(socks["api"], public)
    )
    # In a child process, while the rest starts: the keys and the tunnel's CA, made or checked (with cryptography,
    # which this process imports only at the first token or secret); the files are read at their first use.
    keys = asyncio.create_task(startkeys.finish(key_child, settings.state_dir, settings.cloud_domain))
    try:
        core = await Core.open(settings, fault_operations=frozenset(OPERATIONS))
    except BaseException:
        await cancel(keys)
        raise
    # In a child process, while the rest starts: does the media store answer with the libraries installed?
    media_check = asyncio.create_task(selfcheck.ensure_answers())
    docs = DocsIndex(core, settings.docs)
    platform: Platform | None = None
    tunnel: TunnelServer | None = None
    sender: Sender | None = None
    event_log = EventLog(core.bus)
    runtime_root = settings.state_dir / "runtime"
    way_home = [s.getsockname()[1] for s in (socks["api"], s3_sock)]
    # Asking Docker whether it answers, and then readying it (network, egress, leftovers), is mostly waiting on the
    # engine: done beside the rest of the start, which is CPU (the docs index, the keys, the three apps).
    choosing = asyncio.create_task(asyncio.to_thread(make_launcher, settings, runtime_root, way_home))
    opening: asyncio.Task[None] | None = None
    try:
        await docs.build()
        if settings.watch_docs and settings.docs.is_dir():
            docs.watch()
        idem = Idempotency(core, settings.idempotency_ttl)
        await idem.recover()
        limiter = RateLimiter(core.clock, settings.ask_rate_limit, settings.ask_rate_window, "ask")
        signer = Signer.of(settings.state_dir)
        identity = Identity(core, signer, urls)
        agents = AgentsApi(core, identity, trial_key)  # the service side's agents API
        logins = Logins(identity)
        auth = Authenticator(core, signer, urls.api)
        box = SecretBox.of(settings.state_dir)
        blobs = Blobs(core, settings.state_dir / "blobs", urls.api)
        launcher = await choosing
        boundary = Boundary.of(
            settings.host,
            [urls.site, urls.auth, urls.api],
            [*settings.allowed_hosts.split(","), settings.public_host],
            settings.allowed_origins.split(","),
            settings.admin_token,
        )
        reconciler = Reconciler(core, box, blobs, auth, urls.api, runtime_root, launcher, boundary.host_ok)
        core.listening = listening_of(settings, socks, tunnel_sock, s3_sock, reconciler)

        async def live_databases() -> list[tuple[str, str]]:
            return [(d.org_id, d.name) for d in await databases.every(core.store)]

        media = MediaStore(core, s3_sock, url_of(s3_sock, public), settings.media_quota_bytes, live_databases)
        platform = Platform(
            core, auth, box, blobs, reconciler, media, api_url=urls.api, auth_url=urls.auth, site_url=urls.site
        )
        reconciler.supervisor.watch = core.bus.watch  # before any gateway is made
        opening = asyncio.create_task(reconciler.open())
        await media.start()  # before the origins serve: the first get_bucket_credentials may come as soon as they do
        reconciler.on_database_ended(media.drop)  # a database's bucket goes with it
        core.on_reset(platform.reset)  # first: no workload may run on while its rows go
        core.on_reset(limiter.reset)
        core.after_load(idem.recover)
        core.after_load(reconciler.resume)
        core.clock.on_due(limiter.sweep)
        core.clock.on_due(idem.sweep)
        core.clock.on_due(lambda now: trials.expire(core, now, reconciler.end_org))
        ca = TlsFiles(settings.state_dir / "tls", settings.cloud_domain)
        endpoints = {
            "site": urls.site,
            "base_url": urls.site,
            "auth": urls.auth,
            "api": urls.api,
            "tunnel": f"{settings.cloud_domain}:{tunnel_port}",
            "proxy": url_of(tunnel_sock, public),
            "ca_bundle": str(ca.bundle_path),
            "runtime": reconciler.kind,
            "s3": media.endpoint,
        }
        forward = ForwardProxy(
            EgressPolicy.parse(settings.proxy_egress),
            upstream,
            on_event=lambda relay: core.bus.publish(f"{relay.host}:{relay.port}", relay),
            connect_timeout=settings.proxy_connect_timeout,
            idle_timeout=settings.proxy_idle_timeout,
            max_relays=settings.proxy_max_relays,
        )
        site = Site(
            core=core,
            docs=docs,
            base_url=urls.site,
            ask_limiter=limiter,
            idempotency=idem,
            identity=identity,
            integrations=load_integrations(settings.integrations),
            boundary=boundary,
        )
        operator = Operator(
            core=core,
            platform=platform,
            identity=identity,
            agents=agents,
            logins=logins,
            proxy=forward,
            boundary=boundary,
            started_at=time.time(),
            endpoints=endpoints,
        )
        register_limiter = RateLimiter(core.clock, settings.registration_rate_limit, 60, "register")
        core.clock.on_due(register_limiter.sweep)
        core.clock.on_due(identity.expire_unclaimed)
        core.on_reset(register_limiter.reset)
        apps = {
            name: RequestJournal(
                app,
                name,
                core.bus.publish,
                settings.trust_forwarded,
                last_seq=lambda: core.bus.last_seq,
                durable=core.bus.flush,  # an answer starts once the events its request published are journaled
                # the person's claim link carries its attempt token in its query, as the emulator issued it
                issued=frozenset({CLAIM_PAGE}) if name == "auth" else frozenset(),
            )
            for name, app in (
                ("site", build_site_app(site, operator_api.router(), {OPERATOR_STATE: operator})),
                ("auth", build_idp_app(Idp(core, identity, register_limiter, logins, agents), boundary)),
                ("api", build_cloud_app(platform, boundary)),
            )
        }
        servers = [
            (_Server(_uvicorn_config(apps[name], settings, name, core.bus.watch)), socks[name]) for name in socks
        ]

        loop = asyncio.get_running_loop()

        def stop() -> None:
            core.stopping.set()
            for server, _ in servers:
                server.should_exit = True
            core.bus.end_streams()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)

        await keys  # the tunnel serves the leaf; nothing has signed or sealed yet
        tunnel = TunnelServer(
            ca,
            settings.cloud_domain,
            tunnel_port,
            tunnel_authorizer(platform),
            on_event=lambda event: core.bus.publish(kinds.database(str(event.org), str(event.db)), event),
            forward=forward,
            fault=lambda method, path: core.faults.request("tunnel", method, path),
            watch=core.bus.watch,
        )
        await tunnel.start(tunnel_sock)

        def reload_keys() -> None:
            from emulator.tunnel.ca import LocalCA

            signer.reload(settings.state_dir)
            identity.upstream.reload(settings.state_dir)
            box.reload(settings.state_dir)
            blobs.reload_key()
            assert tunnel is not None
            tunnel.use_ca(LocalCA.load_or_create(settings.state_dir / "tls", settings.cloud_domain))

        snapshots = core.snapshots
        snapshots.sweep()  # renames: what they name is deleted once the emulator serves
        snapshots.add_part(key_files(settings, reload_keys))
        snapshots.add_part(Part("blobs", blobs.save_to, blobs.load_from))
        snapshots.add_part(Part("media", media.save_to, media.load_from))
        supervisor = reconciler.supervisor
        snapshots.add_part(Part("databases", supervisor.save_to, supervisor.load_from, pause=reconciler.paused))
        await opening  # a snapshot's or a declared state's databases are the runtime's to put back
        await begin_from(core, start, lambda text, name: declared.apply(core, box, identity, text, name))
        await media_check  # MediaStoreBroken: the emulator stops, saying which library, before anyone is served
        tasks = [asyncio.create_task(server.serve(sockets=[sock])) for server, sock in servers]
        while not all(server.started for server, _ in servers):
            if any(t.done() for t in tasks):
                break
            await asyncio.sleep(0.005)
        await core.run_due()  # what fell due while the emulator was down, before anyone is told it is up
        write_endpoints(settings, endpoints)
        await reconciler.resume()  # services that were running come back (they start in the background)
        core.start_ticker()
        event_log.start()
        # registration events to the webhook endpoints, from now on
        sender = Sender(core, box, settings.webhook_try_timeout)
        sender.start()
        core.bus.publish(
            None,
            EmulatorStarted(
                version=__version__, endpoints=endpoints, startup_ms=round((time.perf_counter() - t0) * 1000, 1)
            ),
        )
        # What the start made (modules, the docs index, the apps: some 80 000 objects, almost none of them garbage)
        # lives as long as the process: out of the collector's sight, the full collections that a busy loop sets off
        # (tens of ms every second or two under load) no longer walk it.
        gc.freeze()
        snapshots.serving()  # now, not before: what an interrupted save left may take minutes to delete
        if on_ready:
            on_ready(endpoints)
        await asyncio.gather(*tasks)
        if start.export_on_exit is not None:
            await export_on_exit(core, start.export_on_exit)
    finally:
        await event_log.stop()
        if sender is not None:
            await sender.stop()
        for step in (keys, choosing, opening):  # a start that failed before they were awaited
            if step is not None and not step.done():
                step.cancel()
            if step is not None:
                await asyncio.gather(step, return_exceptions=True)
        if not media_check.done():
            media_check.cancel()
            await asyncio.gather(media_check, return_exceptions=True)
        if tunnel is not None:
            await tunnel.close()
        tunnel_sock.close()
        if platform is not None:
            await platform.reconciler.close()
            await platform.media.close()  # after the databases, which may still write media while stopping
        s3_sock.close()
        for sock in socks.values():
            sock.close()
        remove_endpoints(settings)
        await docs.close()
        await core.close()
