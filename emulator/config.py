"""One settings object for the whole emulator.

Precedence, highest first: command-line flags > `EMULATOR_*` environment variables > the TOML file
(`--config`, else `<state-dir>/emulator.toml`) > defaults. Every setting has one name used in all
three places: `--ask-rate-limit`, `EMULATOR_ASK_RATE_LIMIT`, `ask_rate_limit = 10`.
"""

from __future__ import annotations

import os
import tomllib
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import msgspec

from emulator.tunnel.egress import EgressError, EgressPolicy, resolve_upstream

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DOCS = PROJECT_ROOT / "fixtures" / "site"
DEFAULT_INTEGRATIONS = PROJECT_ROOT / "fixtures" / "integrations.json"
SUPPORTED_API_VERSIONS = ("1",)


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "pxt-emulator"


class ConfigError(ValueError):
    """A setting has a value the emulator cannot use; the message names the setting."""


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
    # Hosted databases are reached as <org>-<db>.<cloud_domain> (a reserved .test name: never real DNS).
    cloud_domain: str = "pxt.test"
    state_dir: Path = msgspec.field(default_factory=default_state_dir)
    docs: Path = DEFAULT_DOCS
    integrations: Path = DEFAULT_INTEGRATIONS
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
    log_level: str = "warning"
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
    # Trials.
    trials_enabled: bool = True
    cloud_reachable: bool = True
    trial_capacity: int = 1000  # unclaimed trials the platform holds at once
    trial_network_limit: int = 10  # unclaimed trials one network may hold
    trial_network_bits: int = 24  # an IPv4 network is a /24 (an IPv6 one a /64)
    trial_lifetime: int = 172_800
    # Where hosted databases and services run: "docker" (containers with enforced limits), "process"
    # (local processes; the embedded fallback), or "auto" (Docker when an engine answers).
    runtime: str = "auto"
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
    spares: bool = True
    allowed_hosts: str = ""
    allowed_origins: str = ""

    @property
    def db_path(self) -> Path:
        return self.state_dir / "emulator.sqlite3"

    @property
    def endpoints_path(self) -> Path:
        return self.state_dir / "endpoints.json"


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
    "trial_capacity",
    "trial_network_limit",
    "trial_network_bits",
    "trial_lifetime",
    "media_quota_bytes",
    "proxy_max_relays",
}
_FLOAT = {"proxy_connect_timeout", "proxy_idle_timeout", "http_request_timeout", "receipt_hold", "submit_hold"}
_PATH = {"state_dir", "docs", "integrations"}
_BOOL = {
    "trust_forwarded",
    "watch_docs",
    "anonymous_registration",
    "service_auth_registration",
    "trials_enabled",
    "cloud_reachable",
    "spares",
}
FIELDS = tuple(f for f in Settings.__struct_fields__)


def parse_when(text: str, setting: str) -> datetime:
    """An ISO 8601 date or date-time; naive values are UTC."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        try:
            d = date.fromisoformat(text.strip())
        except ValueError:
            raise ConfigError(f"{setting}: {text!r} is not an ISO 8601 date or date-time") from None
        value = datetime(d.year, d.month, d.day)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def parse_deprecations(text: str) -> dict[str, Deprecation]:
    """`1=2026-12-01,2027-06-01;2=...`: version = deprecation date [, sunset date]."""
    out: dict[str, Deprecation] = {}
    for item in filter(None, (p.strip() for p in text.split(";"))):
        version, _, dates = item.partition("=")
        when = [d for d in dates.split(",") if d.strip()]
        if not version.strip() or not when or len(when) > 2:
            raise ConfigError(f"deprecations: {item!r} is not VERSION=DEPRECATION_DATE[,SUNSET_DATE]")
        out[version.strip()] = _deprecation(version.strip(), when[0], when[1] if len(when) == 2 else None)
    return out


def _deprecation(version: str, deprecated: Any, sunset: Any) -> Deprecation:
    if version not in SUPPORTED_API_VERSIONS:
        raise ConfigError(f"deprecations: version {version!r} is not served (served: 1)")
    dep = deprecated if isinstance(deprecated, datetime) else parse_when(str(deprecated), "deprecations")
    sun = None
    if sunset is not None:
        sun = sunset if isinstance(sunset, datetime) else parse_when(str(sunset), "deprecations")
        if sun < dep:
            raise ConfigError("deprecations: the sunset date must not be earlier than the deprecation date")
    return Deprecation(dep, sun)


def _coerce(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name in _INT:
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name}: {value!r} is not a whole number") from None
    if name in _FLOAT:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name}: {value!r} is not a number of seconds") from None
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
        raise ConfigError(f"{name}: {value!r} is not true or false")
    if name == "freeze_clock":
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        return parse_when(str(value), name)
    if name == "deprecations":
        if isinstance(value, str):
            return parse_deprecations(value)
        if isinstance(value, dict):
            return {str(v): _deprecation(str(v), d.get("deprecated_at"), d.get("sunset_at")) for v, d in value.items()}
        raise ConfigError("deprecations: expected a table of versions")
    return str(value)


def load_settings(flags: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> Settings:
    """Merge flags, environment and file into validated settings."""
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    env = dict(os.environ if env is None else env)
    from_env = {name: env[f"EMULATOR_{name.upper()}"] for name in FIELDS if f"EMULATOR_{name.upper()}" in env}
    state_dir = _coerce("state_dir", flags.get("state_dir") or from_env.get("state_dir") or default_state_dir())
    config_path = flags.pop("config", None) or env.get("EMULATOR_CONFIG")
    file_path = Path(config_path).expanduser() if config_path else state_dir / "emulator.toml"
    from_file: dict[str, Any] = {}
    if file_path.is_file():
        try:
            from_file = tomllib.loads(file_path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{file_path}: {e}") from None
        unknown = sorted(set(from_file) - set(FIELDS))
        if unknown:
            raise ConfigError(f"{file_path}: unknown settings {', '.join(unknown)}")
    elif config_path:
        raise ConfigError(f"config: {file_path} does not exist")
    merged: dict[str, Any] = {}
    for source in (from_file, from_env, flags):
        for name, value in source.items():
            if name in FIELDS:
                merged[name] = _coerce(name, value)
    merged["state_dir"] = state_dir
    settings = Settings(**merged)
    _validate(settings)
    return settings


def _validate(s: Settings) -> None:
    for name in ("site_port", "auth_port", "api_port", "tunnel_port", "s3_port"):
        port = getattr(s, name)
        if not 0 <= port <= 65535:
            raise ConfigError(f"{name}: {port} is not a TCP port (0 picks a free one)")
    for name in (
        "access_token_ttl",
        "assertion_ttl",
        "claim_ttl",
        "attempt_ttl",
        "refresh_token_ttl",
        "trial_lifetime",
        "registration_rate_limit",
        "trial_network_limit",
    ):
        if getattr(s, name) < 1:
            raise ConfigError(f"{name} must be at least 1")
    if s.media_quota_bytes < 0:
        raise ConfigError("media_quota_bytes must not be negative")
    if s.trial_capacity < 0:
        raise ConfigError("trial_capacity must not be negative")
    if not 8 <= s.trial_network_bits <= 32:
        raise ConfigError("trial_network_bits must be from 8 to 32")
    if s.ask_rate_limit < 1 or s.ask_rate_window < 1:
        raise ConfigError("ask_rate_limit and ask_rate_window must be at least 1")
    if s.idempotency_ttl < 1:
        raise ConfigError("idempotency_ttl must be at least 1 second")
    if s.runtime not in ("auto", "docker", "process"):
        raise ConfigError(f"runtime: {s.runtime!r} is not one of auto, docker, process")
    for name in ("proxy_connect_timeout", "proxy_idle_timeout", "http_request_timeout"):
        if not 0 < getattr(s, name) <= 86_400:
            raise ConfigError(f"{name} must be more than 0 and at most 86400 seconds")
    if not 0 <= s.receipt_hold <= 25:
        raise ConfigError("receipt_hold must be 0 to 25 seconds (the client gives get_receipts 30 s)")
    if not 0 <= s.submit_hold <= 25:
        raise ConfigError("submit_hold must be 0 to 25 seconds (the client gives a change's answer 30 s)")
    if s.proxy_max_relays < 1:
        raise ConfigError("proxy_max_relays must be at least 1")
    try:
        EgressPolicy.parse(s.proxy_egress)
        if s.upstream_proxy is not None:
            resolve_upstream(s.upstream_proxy, {})
    except EgressError as e:
        raise ConfigError(str(e)) from None
    if not s.docs.exists():
        raise ConfigError(f"docs: {s.docs} does not exist")
