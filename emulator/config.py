"""One settings object for the whole emulator.

Precedence, highest first: command-line flags > `EMULATOR_*` environment variables > the TOML file
(`--config`, else `<state-dir>/emulator.toml`) > defaults. Every setting has one name used in all
three places: `--ask-rate-limit`, `EMULATOR_ASK_RATE_LIMIT`, `ask_rate_limit = 10`.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Any, TypeAlias

import msgspec

from emulator import shipped
from emulator.core import canaries
from emulator.core.egress import EgressError, EgressPolicy, resolve_upstream
from emulator.core.ids import SERVICE_KEY

DEFAULT_DOCS = shipped.DOCS
DEFAULT_INTEGRATIONS = shipped.INTEGRATIONS
SUPPORTED_API_VERSIONS = ("1",)


# A TOML value as `tomllib` reads it (a settings file, a task's `task.toml`), before it is checked against a type.
TomlValue: TypeAlias = "str | int | float | bool | datetime | date | time | list[TomlValue] | dict[str, TomlValue]"
TomlTable: TypeAlias = dict[str, TomlValue]


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "pxt-emulator"


class ConfigError(ValueError):
    """A setting has a value the emulator cannot use; the message names the setting (`setting`, when it is one
    setting, so the message can also say where its value came from)."""

    def __init__(self, message: str, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


class Deprecation(msgspec.Struct, frozen=True):
    """An API version announced as deprecated: when it was (or will be), and when it goes away."""

    deprecated_at: datetime
    sunset_at: datetime | None = None


class Settings(msgspec.Struct, kw_only=True):
    host: str = "127.0.0.1"
    site_port: int = 8700
    auth_port: int = 8701
    api_port: int = 8702
    tunnel_port: int = 8704
    # The media store's S3 endpoint (the databases' home buckets).
    s3_port: int = 8705
    # Every port the emulator opens taken free (the origins' and the service gateways'), for an emulator beside
    # another: a port setting given as strongly (a flag beside `--free-ports`) or more strongly still wins.
    free_ports: bool = False
    # Hosted databases are reached as <org>-<db>.<cloud_domain> (a reserved .test name: never real DNS).
    cloud_domain: str = "pxt.test"
    state_dir: Path = msgspec.field(default_factory=default_state_dir)
    docs: Path = DEFAULT_DOCS
    integrations: Path = DEFAULT_INTEGRATIONS
    # An evaluation's attacked trial: a JSON file of canaries carried in MCP tool results and services' answers.
    canaries: Path | None = None
    # The public name of the site the docs describe (`_meta.site` of /ask answers).
    site_name: str = "pixeltable.com"
    ask_rate_limit: int = 10
    ask_rate_window: int = 60
    idempotency_ttl: int = 600
    journal_cap: int = 20_000
    # Deterministic IDs (uuid4-shaped) for reproducible runs and snapshots; None = random.
    seed: int | None = None
    # Start with the clock frozen at this instant (ISO 8601); None = follow the wall clock.
    freeze_clock: datetime | None = None
    # Trust X-Forwarded-For for the client IP (only behind a proxy you run).
    trust_forwarded: bool = False
    watch_docs: bool = True
    # One line per request and per operation at `info`; `warning` keeps only what went wrong.
    log_level: str = "info"
    deprecations: dict[str, Deprecation] = msgspec.field(default_factory=dict)
    # Identity provider (lifetimes in seconds of emulator time).
    access_token_ttl: int = 300
    assertion_ttl: int = 3600
    claim_ttl: int = 86_400
    attempt_ttl: int = 600
    refresh_token_ttl: int = 2_592_000
    registration_rate_limit: int = 60  # registrations per minute per client IP
    anonymous_registration: bool = True
    service_auth_registration: bool = True
    # ID-JAG registration (`type: identity_assertion`): off by default, as WorkOS leaves it off until a service
    # enables it; the switch also decides whether discovery advertises it.
    identity_assertion_registration: bool = False
    idjag_max_auth_age: int = 3600  # how old an ID-JAG's auth_time may be, in seconds
    # Trials.
    trials_enabled: bool = True
    cloud_reachable: bool = True
    trial_capacity: int = 1000  # unclaimed trials the platform holds at once
    trial_network_limit: int = 10  # unclaimed trials one network may hold
    trial_network_bits: int = 24  # an IPv4 network is a /24 (an IPv6 one a /64)
    trial_lifetime: int = 172_800
    # Where hosted databases and services run: "docker" (containers with enforced limits), "process"
    # (local processes; the embedded fallback), or "auto" (Docker when an engine answers).
    runtime: str = "auto"  # one of RUNTIMES
    # The image hosted environments are built on: any image with python3 (3.11 for pixeltable 0.7.21).
    docker_base_image: str = ""  # empty: the public slim image if this machine has it, else `emulator base-image`'s
    # The Docker network hosted containers join; its egress is limited to TCP 80, 443 and 5432.
    docker_network: str = "pxt-emulator"
    # A trial's media store (spec: 50 GB); at or over it the client is told `no_space_left`.
    media_quota_bytes: int = 50_000_000_000
    # The exported proxy (HTTPS_PROXY of `emulator env`) relays hosts outside the tunnel domain: `allow`,
    # `deny`, or an allow-list of host patterns (`api.example.com,*.pypi.org,127.0.0.1:8080`).
    proxy_egress: str = "allow"
    # The proxy relays go through: None = the one the environment names at start (HTTPS_PROXY, ALL_PROXY,
    # with NO_PROXY), `none` = directly, or an http:// URL.
    upstream_proxy: str | None = None
    proxy_connect_timeout: float = 10.0  # seconds to reach a target (or the upstream's CONNECT answer)
    proxy_idle_timeout: float = 300.0  # a relay with nothing sent either way for this long is closed
    proxy_max_relays: int = 256  # relayed connections open at once (503 beyond)
    # The local-only boundary: extra names the origins answer to (Host), and web pages (Origin) allowed to send
    # state-changing requests; comma-separated. Loopback names and the emulator's own origins always are.
    # A connection waiting for (the rest of) a request is closed after this many seconds without a byte.
    http_request_timeout: float = 30.0
    # A request whose body is not whole this many seconds after its first byte is cut off (408), however steadily it
    # drips; each MiB it has brought adds a second (an upload at a working speed is not cut).
    http_body_deadline: float = 30.0
    # The largest request body an endpoint takes (413 beyond); snapshot imports and blob uploads have their own.
    http_max_body_bytes: int = 10_000_000
    # A webhook try, from connecting to the last byte of the answer read (at most a few KiB of it), in seconds.
    webhook_try_timeout: float = 10.0
    # `get_receipts` of a generation a job is settling waits up to this many seconds for it (0: answers at once, as
    # the cloud does). The client polls every 5 s; held, its poll comes back the moment the job settles.
    receipt_hold: float = 20.0
    # A change's answer (`submit_update`, a lifecycle verb, `retry`) waits up to this many seconds for its job to
    # settle its receipts (0: answers at once, pending, as the cloud does). A settled receipt is not polled at all;
    # a pending one is polled first 5 s later.
    submit_hold: float = 10.0
    # Each running service keeps a spare (its next generation) and each running database a spare prepare_project,
    # imports done, waiting at the lowest CPU priority: a restart, or an update that changes no size, skips the
    # seconds of importing Pixeltable (for the memory of an idle Python each).
    profile: str = "developer"  # one of PROFILES
    spares: bool | None = None  # None: as the profile says
    build_cache: str = ""  # empty: the per-user cache (~/.cache/pxt-emulator); `off`: each state dir builds its own
    build_cache_max_gb: float = 20.0
    # A planned database update (prepare_update with a target whose environment is at hand) starts its server and
    # prepare_project ahead of the submission; what is not taken within this many seconds is stopped. 0: none.
    head_start_ttl: float = 120.0
    allowed_hosts: str = ""
    allowed_origins: str = ""
    public_host: str = ""  # empty: `host`, or 127.0.0.1 when `host` is every address
    gateway_ports: str = ""  # empty: any free port; "8710-8729": the service gateways' (a container publishes them)
    admin_token: str = ""  # empty: /_emulator needs no token (the emulator is local by construction)
    # A service key (sk_test_…) the agents API accepts besides those made with `emulator service-key create`: for a
    # CI whose service under test is configured before the emulator starts. Empty: none.
    service_api_key: str = ""
    # The MCP revisions /mcp offers (comma-separated, of MCP_REVISIONS): `2025-11-25`, the handshake era (initialize,
    # and the versions before it), and `2026-07-28`, the stateless one. Both by default: today's clients keep working.
    mcp_revisions: str = "2025-11-25,2026-07-28"
    # OAuth client_ids the identity provider knows without a metadata document (comma-separated): public clients
    # (PKCE, no secret) whose redirect URI may be any http loopback URI (RFC 8252 §7.3). Empty: none.
    loopback_clients: str = ""

    @property
    def public(self) -> str:
        """The host the URLs the emulator hands out name, where a client reaches it (outside its container): empty
        for the address each origin is bound to."""
        if self.public_host:
            return self.public_host
        return "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else ""

    @property
    def mcp_offered(self) -> tuple[str, ...]:
        """`mcp_revisions` as a tuple, in the order of MCP_REVISIONS (validated at load)."""
        named = {r.strip() for r in self.mcp_revisions.split(",")}
        return tuple(r for r in MCP_REVISIONS if r in named)

    @property
    def loopback_client_ids(self) -> frozenset[str]:
        return frozenset(c.strip() for c in self.loopback_clients.split(",") if c.strip())

    @property
    def gateway_range(self) -> range | None:
        if not self.gateway_ports:
            return None
        first, _, last = self.gateway_ports.partition("-")
        return range(int(first), int(last or first) + 1)

    @property
    def db_path(self) -> Path:
        return self.state_dir / "emulator.sqlite3"

    @property
    def endpoints_path(self) -> Path:
        return self.state_dir / "endpoints.json"

    @property
    def keeps_spares(self) -> bool:
        """`spares` as set, else as the profile says: a developer's emulator keeps them, a throwaway one does not."""
        return self.spares if self.spares is not None else self.profile == "developer"


RUNTIMES = ("auto", "docker", "process")
# The MCP revisions /mcp can offer: the newest of the handshake era (which also negotiates 2024-11-05 to 2025-06-18 in
# `initialize`) and the stateless era's first.
MCP_REVISIONS = ("2025-11-25", "2026-07-28")
# developer: one long-lived emulator, tuned for fast restarts; throwaway: one of many short-lived ones (`exec`, the
# pytest plugin, an evaluation's trials), tuned for memory.
PROFILES = ("developer", "throwaway")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")

_INT = {
    "site_port",
    "auth_port",
    "api_port",
    "tunnel_port",
    "s3_port",
    "ask_rate_limit",
    "ask_rate_window",
    "idempotency_ttl",
    "journal_cap",
    "seed",
    "access_token_ttl",
    "assertion_ttl",
    "claim_ttl",
    "attempt_ttl",
    "refresh_token_ttl",
    "registration_rate_limit",
    "idjag_max_auth_age",
    "trial_capacity",
    "trial_network_limit",
    "trial_network_bits",
    "trial_lifetime",
    "media_quota_bytes",
    "proxy_max_relays",
    "http_max_body_bytes",
}
_FLOAT = {
    "build_cache_max_gb",
    "head_start_ttl",
    "proxy_connect_timeout",
    "proxy_idle_timeout",
    "http_request_timeout",
    "http_body_deadline",
    "webhook_try_timeout",
    "receipt_hold",
    "submit_hold",
}
_PATH = {"state_dir", "docs", "integrations", "canaries"}
_BOOL = {
    "free_ports",
    "trust_forwarded",
    "watch_docs",
    "anonymous_registration",
    "service_auth_registration",
    "identity_assertion_registration",
    "trials_enabled",
    "cloud_reachable",
    "spares",
}
FIELDS = tuple(f for f in Settings.__struct_fields__)
ORIGIN_PORTS = ("site_port", "auth_port", "api_port", "tunnel_port", "s3_port")
# The ports `free_ports` takes free, each with its value that means "a free one".
FREE_PORT_VALUES: dict[str, int | str] = {**dict.fromkeys(ORIGIN_PORTS, 0), "gateway_ports": ""}

# `EMULATOR_*` variables that are not settings, and who reads them: any other name that is not a setting's
# (`EMULATOR_<SETTING>`) is refused at start with the nearest name, as a wrong flag or file key is. A test holds
# this list to every such name the repository uses.
NOT_SETTINGS: dict[str, str] = {
    "EMULATOR_CONFIG": "the settings file (--config)",
    "EMULATOR_URL": "the CLI and clients: the site of the emulator to talk to (`emulator env`)",
    "EMULATOR_AUTH_URL": "clients: the identity provider (`emulator env`)",
    "EMULATOR_IMPORT": "`emulator up`: the export to start from (--import)",
    "EMULATOR_APPLY": "`emulator up`: the declared state to apply at start (--apply)",
    "EMULATOR_EXPORT_ON_EXIT": "`emulator up`: where to export the state when it stops (--export-on-exit)",
    "EMULATOR_TASK_DIR": "`emulator eval` once gave the agent its task's folder; no more (a cheat's test looks for it)",
    "EMULATOR_TASK_INSTRUCTION": "`emulator eval`: the task's instruction, for the agent",
    "EMULATOR_TASK_INSTRUCTION_FILE": "`emulator eval`: the file of the task's instruction, for the agent",
    "EMULATOR_TRIAL_DIR": "`emulator eval`: the trial's own directory, for the agent",
    "EMULATOR_TRIAL_MARK": "`emulator eval`: the mark every process of a trial carries",
    "EMULATOR_TRIAL_USAGE_FILE": "`emulator eval`: where the agent may report its own tokens and dollars",
    "EMULATOR_EXAMPLES": "`emulator eval`: the shipped examples' folder, for the agent's command",
    "EMULATOR_IMAGE": "the compose example: the emulator's image",
    "EMULATOR_TEST_BASE_IMAGE": "the test suite and scripts/setup-docker.sh: the base image of hosted containers",
}

# What each setting does, in a line: the help of its flag (`emulator up --help`). A test holds this, the flags
# and the site's settings reference (generated from it) to the same names.
HELP: dict[str, str] = {
    "host": "address every origin listens on (default 127.0.0.1)",
    "site_port": "port of the site origin (default 8700; 0 picks a free one)",
    "auth_port": "port of the identity provider (default 8701; 0 = free)",
    "api_port": "port of the control plane (default 8702; 0 = free)",
    "tunnel_port": "port of the database tunnel and its CONNECT proxy (default 8704; 0 = free)",
    "s3_port": "port of the media store's S3 endpoint (default 8705; 0 = free)",
    "free_ports": "take a free port for every origin and service gateway: an emulator beside another (default "
    "off; a port flag given with it still wins)",
    "cloud_domain": "hosted databases are <org>-<db>.DOMAIN (default pxt.test, never real DNS)",
    "state_dir": "where state is kept (default ~/.local/state/pxt-emulator)",
    "docs": "folder of markdown or HTML docs that /ask and search_docs answer from (default: the shipped corpus)",
    "integrations": "JSON file of the integrations /ask and MCP list (default: the shipped one)",
    "canaries": "JSON file of injection canaries that MCP tool results and hosted services' JSON answers carry "
    "(written by `emulator eval` for an attacked trial; default none)",
    "site_name": "the public name of the site the docs describe (default pixeltable.com)",
    "ask_rate_limit": "requests per window per client IP on /ask (default 10)",
    "ask_rate_window": "the /ask rate-limit window in seconds (default 60)",
    "idempotency_ttl": "seconds an Idempotency-Key answer is replayed (default 600)",
    "journal_cap": "events kept in the journal (default 20000)",
    "seed": "make IDs and secrets reproducible (tests, snapshots)",
    "freeze_clock": "start with the clock frozen at this ISO 8601 instant",
    "trust_forwarded": "take the client IP from X-Forwarded-For (only behind your own proxy; default off)",
    "watch_docs": "reindex the docs when their files change (default on)",
    "log_level": "info (a line per request and operation; the default), warning, error, critical or debug",
    "deprecations": "announce API version V deprecated (Deprecation, Sunset headers): V=DATE[,SUNSET]",
    "access_token_ttl": "seconds an access token lives (default 300)",
    "assertion_ttl": "seconds an identity assertion lives (default 3600)",
    "claim_ttl": "seconds a registration may be claimed (default 86400)",
    "attempt_ttl": "seconds a claim link and its user code live (default 600)",
    "refresh_token_ttl": "seconds a refresh token lives (default 2592000)",
    "registration_rate_limit": "registrations per minute per client IP (default 60)",
    "anonymous_registration": "the anonymous_registration switch at start (default on)",
    "service_auth_registration": "the service_auth_registration switch at start (default on)",
    "identity_assertion_registration": "the identity_assertion_registration (ID-JAG) switch at start (default off)",
    "idjag_max_auth_age": "seconds an ID-JAG's auth_time may be old before login_required (default 3600)",
    "trials_enabled": "the trials_enabled switch at start (default on)",
    "cloud_reachable": "the cloud_reachable switch at start (default on)",
    "trial_capacity": "unclaimed trials the platform holds at once (default 1000; 429 beyond)",
    "trial_network_limit": "unclaimed trials one network may hold (default 10)",
    "trial_network_bits": "prefix length of an IPv4 network for trial_network_limit (default 24)",
    "trial_lifetime": "seconds an unclaimed trial lives (default 172800, 48 hours)",
    "runtime": "where hosted databases and services run: auto (Docker when an engine answers), docker, process",
    "docker_base_image": "base image of hosted environments (default python:3.11-slim-bookworm if this machine has "
    "it, else pxt-emulator-base:bookworm if `emulator base-image` built it, else the public image pulled)",
    "docker_network": "the Docker network hosted containers join (default pxt-emulator)",
    "media_quota_bytes": "a trial's media store in bytes (default 50000000000); at or over it: no_space_left",
    "proxy_egress": "what the exported proxy relays outside the tunnel domain: allow (default), deny, or host "
    "patterns such as api.example.com,*.pypi.org,127.0.0.1:8080",
    "upstream_proxy": "http:// proxy that relays go through, or none (default: HTTPS_PROXY/ALL_PROXY at start)",
    "proxy_connect_timeout": "seconds to reach a relay's target (default 10; 504 beyond)",
    "proxy_idle_timeout": "seconds a relay with nothing sent either way is kept (default 300)",
    "proxy_max_relays": "relayed connections open at once (default 256; 503 beyond)",
    "http_request_timeout": "seconds a connection may wait for (the rest of) a request (default 30)",
    "http_body_deadline": "seconds from a request's first byte to its body's last, plus one per MiB of body "
    "(default 30; 408 and the connection closed beyond)",
    "http_max_body_bytes": "largest request body in bytes an endpoint takes (default 10000000; 413 beyond); snapshot "
    "imports (50 GiB) and blob uploads (2 GiB) have their own bounds",
    "webhook_try_timeout": "seconds a webhook try may take, from connecting to the last byte of the answer read "
    "(default 10)",
    "receipt_hold": "seconds get_receipts waits for a settling job (0 to 25; default 20)",
    "submit_hold": "seconds a change's answer waits for its job to settle (0 to 25; default 10)",
    "profile": "developer (the default of `up`: spares kept for fast restarts) or throwaway (the default of `exec` "
    "and the pytest plugin: no spares, a fraction of the memory per emulator, restarts take seconds longer)",
    "spares": "keep a spare of each running service and database for fast restarts (default: on in the developer "
    "profile, off in the throwaway one; ~230 MB each)",
    "build_cache": "where built hosted environments are kept for every emulator of this user (default "
    "$XDG_CACHE_HOME/pxt-emulator, else ~/.cache/pxt-emulator); off: each state dir builds its own",
    "build_cache_max_gb": "size bound of the build cache in GB; the least recently used entries go first (default 20)",
    "head_start_ttl": "seconds the server and prepare_project started ahead of a planned database update wait for "
    "its submission (default 120; 0: no head starts)",
    "allowed_hosts": "comma-separated extra names the origins answer to (Host)",
    "allowed_origins": "comma-separated web origins allowed to send state-changing requests (Origin)",
    "public_host": "the host the URLs the emulator hands out name, where its clients reach it (default: host, or "
    "127.0.0.1 when host is 0.0.0.0): a container's published address, or its service name in a compose network",
    "gateway_ports": "FIRST-LAST: the ports the service gateways listen on (default: any free port); a container "
    "publishes them",
    "admin_token": "a token every /_emulator call must carry (Authorization: Bearer, or X-Emulator-Token), for an "
    "emulator others can reach; `emulator env` and the CLI pass it (EMULATOR_ADMIN_TOKEN). A flag shows in `ps`: "
    "give it as EMULATOR_ADMIN_TOKEN or in the config file instead",
    "mcp_revisions": "the MCP revisions /mcp offers, comma-separated: 2025-11-25 (the initialize handshake, and the "
    "versions before it) and 2026-07-28 (stateless: server/discover, per-request _meta); default both, negotiated per "
    "request",
    "loopback_clients": "OAuth client_ids the identity provider's authorization code grant knows without a client ID "
    "metadata document, comma-separated: public (PKCE) clients whose redirect URI may be any http loopback URI, such "
    "as the MCP conformance suite's authorization-code-grant run with --client-id (default none)",
    "service_api_key": "a service key (sk_test_…) the identity provider's agents API (/agents/*) also accepts, for a "
    "service configured before the emulator starts (default none)",
}
CHOICES: dict[str, tuple[str, ...]] = {"runtime": RUNTIMES, "log_level": LOG_LEVELS, "profile": PROFILES}
BOOLS = frozenset(_BOOL)  # on/off settings: `--spares` and `--no-spares`


def parse_when(text: str, setting: str) -> datetime:
    """An ISO 8601 date or date-time; naive values are UTC."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        try:
            d = date.fromisoformat(text.strip())
        except ValueError:
            raise ConfigError(f"{setting}: {text!r} is not an ISO 8601 date or date-time", setting) from None
        value = datetime(d.year, d.month, d.day)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def parse_deprecations(text: str) -> dict[str, Deprecation]:
    """`1=2026-12-01,2027-06-01;2=...`: version = deprecation date [, sunset date]."""
    out: dict[str, Deprecation] = {}
    for item in filter(None, (p.strip() for p in text.split(";"))):
        version, _, dates = item.partition("=")
        when = [d for d in dates.split(",") if d.strip()]
        if not version.strip() or not when or len(when) > 2:
            raise ConfigError(f"deprecations: {item!r} is not VERSION=DEPRECATION_DATE[,SUNSET_DATE]", "deprecations")
        out[version.strip()] = _deprecation(version.strip(), when[0], when[1] if len(when) == 2 else None)
    return out


def _deprecation(version: str, deprecated: Any, sunset: Any) -> Deprecation:
    if version not in SUPPORTED_API_VERSIONS:
        raise ConfigError(f"deprecations: version {version!r} is not served (served: 1)", "deprecations")
    dep = deprecated if isinstance(deprecated, datetime) else parse_when(str(deprecated), "deprecations")
    sun = None
    if sunset is not None:
        sun = sunset if isinstance(sunset, datetime) else parse_when(str(sunset), "deprecations")
        if sun < dep:
            raise ConfigError(
                "deprecations: the sunset date must not be earlier than the deprecation date", "deprecations"
            )
    return Deprecation(dep, sun)


def _coerce(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name in _INT:
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name}: {value!r} is not a whole number", name) from None
    if name in _FLOAT:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name}: {value!r} is not a number of seconds", name) from None
    if name in _PATH:
        return Path(str(value)).expanduser()
    if name in _BOOL:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in {"1", "true", "yes", "on"}:
            return True
        if text in {"0", "false", "no", "off"}:
            return False
        raise ConfigError(f"{name}: {value!r} is not true or false", name)
    if name == "freeze_clock":
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        return parse_when(str(value), name)
    if name == "deprecations":
        if isinstance(value, str):
            return parse_deprecations(value)
        if isinstance(value, dict):
            return {str(v): _deprecation(str(v), d.get("deprecated_at"), d.get("sunset_at")) for v, d in value.items()}
        raise ConfigError("deprecations: expected a table of versions", "deprecations")
    return str(value)


def toml_types(name: str) -> tuple[type, ...]:
    """The TOML types a value of setting `name` has in a table of settings that is checked before use (a task's
    `[emulator.settings]`): what `_coerce` makes the setting's type of without reading a string as a number or a
    switch. Exact types: a bool is no whole number here."""
    if name in _BOOL:
        return (bool,)
    if name in _INT:
        return (int,)
    if name in _FLOAT:
        return (int, float)
    return (str,)


def check_values(values: Mapping[str, object]) -> None:
    """Settings given by name, coerced and validated as `load_settings` does with the rest at their defaults:
    ConfigError names the first bad one (a task's settings, before any trial starts with them)."""
    _validate(Settings(**{name: _coerce(name, value) for name, value in values.items()}))


def flag_of(name: str) -> str:
    """A setting's command-line flag: `ask_rate_limit` → `--ask-rate-limit`."""
    return "--" + name.replace("_", "-")


def env_of(name: str) -> str:
    return f"EMULATOR_{name.upper()}"


def load_settings(flags: Mapping[str, object] | None = None, env: dict[str, str] | None = None) -> Settings:
    """Merge flags, environment and file into validated settings. A bad value's message says where it came from:
    the flag, the environment variable or the file."""
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    env = dict(os.environ if env is None else env)
    _refuse_unknown_variables(env)
    from_env = {name: env[env_of(name)] for name in FIELDS if env_of(name) in env}
    config_flag = flags.pop("config", None)
    config_path = str(config_flag) if config_flag else env.get("EMULATOR_CONFIG")
    where: dict[str, str] = {}  # each setting's source, as a person would look for it
    try:
        state_dir = _coerce("state_dir", flags.get("state_dir") or from_env.get("state_dir") or default_state_dir())
        file_path = Path(config_path).expanduser() if config_path else state_dir / "emulator.toml"
        from_file = _read_file(file_path, required=bool(config_path))
        where |= {name: str(file_path) for name in from_file}
        where |= {name: env_of(name) for name in from_env}
        where |= {name: flag_of(name) for name in flags}
        # Settings' keyword arguments, each of its setting's type (`_coerce` makes it so).
        merged: dict[str, Any] = {}
        for source in (from_file, from_env, flags):
            for name, value in source.items():
                if name in FIELDS:
                    merged[name] = _coerce(name, value)
        merged["state_dir"] = state_dir
        if merged.get("free_ports"):
            # A port set where free_ports is, or somewhere stronger (flags > environment > file), wins.
            rank = {"file": 0, "env": 1, "flag": 2}
            strength = {n: rank["file"] for n in from_file} | {n: rank["env"] for n in from_env}
            strength |= {n: rank["flag"] for n in flags}
            for name, free in FREE_PORT_VALUES.items():
                if strength.get(name, -1) < strength["free_ports"]:
                    merged[name] = free
        settings = Settings(**merged)
        _validate(settings)
    except ConfigError as e:
        if e.setting in where:
            raise ConfigError(f"{e} (set by {where[e.setting]})", e.setting) from None
        raise
    return settings


def _refuse_unknown_variables(env: dict[str, str]) -> None:
    """An `EMULATOR_*` variable that names no setting (and is none of NOT_SETTINGS) is a typo that would otherwise
    be ignored silently: refused, with the nearest name."""
    settings = {env_of(name): name for name in FIELDS}
    unknown = sorted(k for k in env if k.startswith("EMULATOR_") and k not in settings and k not in NOT_SETTINGS)
    if not unknown:
        return
    prefix = len("EMULATOR_")  # compared without it: every name shares it, which would make any two look close
    known = [k[prefix:] for k in (*settings, *NOT_SETTINGS)]
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name[prefix:], known, n=1, cutoff=0.75)
        hints.append(f"{name} (did you mean EMULATOR_{close[0]}?)" if close else name)
    raise ConfigError(
        f"environment: {', '.join(hints)} {'is not a setting' if len(hints) == 1 else 'are not settings'}; an "
        "EMULATOR_<NAME> variable must name one (`emulator up --help` lists every setting)"
    )


def _read_file(path: Path, required: bool) -> TomlTable:
    if not path.is_file():
        if required:
            raise ConfigError(f"config: {path} does not exist")
        return {}
    try:
        found = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: {e}") from None
    unknown = sorted(set(found) - set(FIELDS))
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name.replace("-", "_"), FIELDS, n=1, cutoff=0.75)
            hints.append(f"{name} (did you mean {close[0]}?)" if close else name)
        raise ConfigError(f"{path}: unknown settings {', '.join(hints)}; `emulator up --help` lists every setting")
    return found


def _validate(s: Settings) -> None:
    def check(ok: bool, setting: str, message: str) -> None:
        if not ok:
            raise ConfigError(f"{setting}{' ' if message.startswith('must') else ': '}{message}", setting)

    for name in ORIGIN_PORTS:
        port = getattr(s, name)
        check(0 <= port <= 65535, name, f"{port} is not a TCP port (0 picks a free one)")
    for name in (
        "access_token_ttl",
        "assertion_ttl",
        "claim_ttl",
        "attempt_ttl",
        "refresh_token_ttl",
        "trial_lifetime",
        "registration_rate_limit",
        "idjag_max_auth_age",
        "trial_network_limit",
        "ask_rate_limit",
        "ask_rate_window",
        "journal_cap",
    ):
        check(getattr(s, name) >= 1, name, "must be at least 1")
    check(s.media_quota_bytes >= 0, "media_quota_bytes", "must not be negative")
    check(s.trial_capacity >= 0, "trial_capacity", "must not be negative")
    check(8 <= s.trial_network_bits <= 32, "trial_network_bits", "must be from 8 to 32")
    check(s.idempotency_ttl >= 1, "idempotency_ttl", "must be at least 1 second")
    check(s.runtime in RUNTIMES, "runtime", f"{s.runtime!r} is not one of {', '.join(RUNTIMES)}")
    check(s.profile in PROFILES, "profile", f"{s.profile!r} is not one of {', '.join(PROFILES)}")
    check(s.log_level in LOG_LEVELS, "log_level", f"{s.log_level!r} is not one of {', '.join(LOG_LEVELS)}")
    for name in ("proxy_connect_timeout", "proxy_idle_timeout", "http_request_timeout", "http_body_deadline"):
        check(0 < getattr(s, name) <= 86_400, name, "must be more than 0 and at most 86400 seconds")
    check(0 < s.webhook_try_timeout <= 300, "webhook_try_timeout", "must be more than 0 and at most 300 seconds")
    check(0 <= s.receipt_hold <= 25, "receipt_hold", "must be 0 to 25 seconds (the client gives get_receipts 30 s)")
    check(0 <= s.head_start_ttl <= 3600, "head_start_ttl", "must be 0 to 3600 seconds")
    check(0 <= s.submit_hold <= 25, "submit_hold", "must be 0 to 25 seconds (the client gives a change's answer 30 s)")
    check(s.proxy_max_relays >= 1, "proxy_max_relays", "must be at least 1")
    # Bodies up to 16 KiB are read before the router (core/prerouted.py): a smaller bound would not hold for them.
    check(s.http_max_body_bytes >= 65_536, "http_max_body_bytes", "must be at least 65536 (64 KiB)")
    ports = re.fullmatch(r"(\d{1,5})(?:-(\d{1,5}))?", s.gateway_ports) if s.gateway_ports else None
    check(
        not s.gateway_ports or (ports is not None and 1 <= int(ports[1]) <= int(ports[2] or ports[1]) <= 65535),
        "gateway_ports",
        f"{s.gateway_ports!r} is not FIRST-LAST, two TCP ports (e.g. 8710-8729)",
    )
    check(
        re.fullmatch(r"[A-Za-z0-9.:\[\]-]*", s.public_host) is not None,
        "public_host",
        f"{s.public_host!r} is not a host name or address",
    )
    check(
        not s.service_api_key or SERVICE_KEY.match(s.service_api_key) is not None,
        "service_api_key",
        "must be sk_test_ followed by 16 to 128 letters, digits or underscores",
    )
    check(
        not s.admin_token or len(s.admin_token) >= 16,
        "admin_token",
        "must be at least 16 characters (one others cannot guess)",
    )
    named = [r.strip() for r in s.mcp_revisions.split(",") if r.strip()]
    check(
        bool(named) and all(r in MCP_REVISIONS for r in named),
        "mcp_revisions",
        f"{s.mcp_revisions!r} is not a comma-separated list of {', '.join(MCP_REVISIONS)} (at least one)",
    )
    try:
        EgressPolicy.parse(s.proxy_egress)
    except EgressError as e:
        raise ConfigError(str(e), "proxy_egress") from None
    try:
        if s.upstream_proxy is not None:
            resolve_upstream(s.upstream_proxy, {})
    except EgressError as e:
        raise ConfigError(str(e), "upstream_proxy") from None
    check(s.docs.exists(), "docs", f"{s.docs} does not exist")
    try:
        canaries.load(s.canaries)
    except canaries.CanaryFileError as e:
        raise ConfigError(str(e), "canaries") from None
