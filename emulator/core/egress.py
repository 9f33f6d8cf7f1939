"""What the exported proxy may reach outside the tunnel domain, and through which upstream proxy.

The proxy in `emulator env`'s HTTPS_PROXY carries all of a shell's HTTPS traffic, not only the client's
tunnels: an agent's model API, `pip install`, boto3. So hosts outside the tunnel domain are relayed, as
LocalStack's DNS forwards what it does not answer itself. Two rules decide how:

* the egress policy (setting `proxy_egress`): `allow` (everything), `deny` (nothing), or an allow-list of
  host patterns, so a sandboxed test can make sure an agent reaches only the hosts it names;
* the upstream proxy: the one the emulator's own environment names when it starts (HTTPS_PROXY,
  https_proxy, ALL_PROXY, all_proxy, with that environment's NO_PROXY), or the `upstream_proxy` setting
  (`none` to go directly). A corporate proxy is chained this way; the emulator then never resolves the
  target's name itself.
"""

from __future__ import annotations

import base64
import fnmatch
import ipaddress
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# The environment variables an HTTPS client reads for its proxy, in the order curl and requests prefer them.
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
_LABEL = r"[A-Za-z0-9_][A-Za-z0-9_-]{0,62}"
_HOST = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?|\[[0-9A-Fa-f:.]+\]")
_PATTERN = re.compile(r"(\*|(?:\*\.)?[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\])(?::([0-9]{1,5}|\*))?")


class EgressError(ValueError):
    """A proxy setting (or the environment's proxy variable) the emulator cannot use; the message names it."""


def strip_brackets(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def valid_host(host: str) -> bool:
    """A DNS name or an IP literal (IPv6 in brackets), as a CONNECT target may name it."""
    if not host or len(host) > 255 or _HOST.fullmatch(host) is None:
        return False
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return False
    return True


def is_loopback(host: str) -> bool:
    name = strip_brackets(host).lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class EgressPolicy:
    """`allow`, `deny`, or an allow-list of `host[:port]` patterns (`*.example.com`, `pypi.org:443`)."""

    mode: str  # "allow" | "deny" | "list"
    patterns: tuple[tuple[str, str], ...] = ()  # (host pattern, port or "*")

    @classmethod
    def parse(cls, text: str) -> EgressPolicy:
        value = text.strip()
        if value.lower() in ("allow", "deny"):
            return cls(value.lower())
        patterns: list[tuple[str, str]] = []
        for item in filter(None, (p.strip() for p in value.split(","))):
            m = _PATTERN.fullmatch(item)
            if m is None:
                raise EgressError(
                    f"proxy_egress: {item!r} is not a host pattern (allow, deny, or a comma-separated list "
                    "such as api.example.com,*.pypi.org,127.0.0.1:8080)"
                )
            port = m.group(2) or "*"
            if port != "*" and not 1 <= int(port) <= 65535:
                raise EgressError(f"proxy_egress: {item!r} has no valid port")
            patterns.append((strip_brackets(m.group(1)).lower().rstrip("."), port))
        if not patterns:
            raise EgressError("proxy_egress: expected allow, deny, or a comma-separated list of host patterns")
        return cls("list", tuple(patterns))

    def allows(self, host: str, port: int) -> bool:
        if self.mode != "list":
            return self.mode == "allow"
        name = strip_brackets(host).lower().rstrip(".")
        return any(
            fnmatch.fnmatchcase(name, pattern) and (want == "*" or int(want) == port) for pattern, want in self.patterns
        )

    def describe(self) -> str:
        if self.mode != "list":
            return self.mode
        return ",".join(p if port == "*" else f"{p}:{port}" for p, port in self.patterns)


@dataclass(frozen=True)
class Upstream:
    """An HTTP proxy that relayed connections go through (CONNECT host:port), and where it was named."""

    host: str
    port: int
    source: str  # the setting or environment variable that named it
    authorization: str | None = None  # a Proxy-Authorization value, from the URL's user:password
    no_proxy: str = ""  # hosts that go directly (the environment's NO_PROXY)

    @property
    def display(self) -> str:
        """The proxy's address for status and events: never its credentials."""
        return f"http://{self.host}:{self.port}"

    def bypassed_for(self, host: str, port: int) -> bool:
        """True when host:port goes directly: a loopback target (the upstream's loopback is another machine's),
        or one that NO_PROXY names."""
        if is_loopback(host):
            return True
        return no_proxy_names(self.no_proxy, host, port)

    def points_at(self, hosts: Iterable[str], ports: Iterable[int]) -> bool:
        """Whether this upstream is one of the given listening addresses (the emulator's own)."""
        ports = set(ports)
        if self.port not in ports:
            return False
        own = {strip_brackets(h).lower() for h in hosts}
        name = strip_brackets(self.host).lower()
        if name in own:
            return True
        if is_loopback(name):  # the emulator listens on loopback, or on every address (0.0.0.0, ::)
            return any(is_loopback(h) or h in ("0.0.0.0", "::", "") for h in own)
        return False


def no_proxy_names(no_proxy: str, host: str, port: int) -> bool:
    """Whether NO_PROXY names host:port, as curl and Python's urllib read it: `*` (every host), or comma-separated
    `name[:port]` entries, each matching the name itself and its subdomains (a leading dot is optional)."""
    name = strip_brackets(host).lower().rstrip(".")
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        want, _, want_port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        want = strip_brackets(want).lstrip(".").rstrip(".")
        if want_port and want_port != str(port):
            continue
        if name == want or name.endswith("." + want):
            return True
    return False


def parse_upstream(url: str, source: str, no_proxy: str = "") -> Upstream:
    text = url.strip()
    if "://" not in text:
        text = "http://" + text  # curl's reading of a bare host:port
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError:
        raise EgressError(f"{source}: {url!r} is not a proxy URL") from None
    if parts.scheme.lower() != "http":
        raise EgressError(
            f"{source}: {parts.scheme}:// proxies are not supported for relaying; name an http:// proxy, "
            "or set upstream_proxy = none (or EMULATOR_UPSTREAM_PROXY=none) to connect directly"
        )
    if not parts.hostname:
        raise EgressError(f"{source}: {url!r} names no host")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    authorization = None
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        authorization = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    return Upstream(host, port or 80, source, authorization, no_proxy)


def resolve_upstream(setting: str | None, environ: Mapping[str, str]) -> Upstream | None:
    """The upstream proxy: the `upstream_proxy` setting when given (`none` = direct), else the first proxy
    variable of the environment the emulator started in."""
    no_proxy = environ.get("NO_PROXY") or environ.get("no_proxy") or ""
    if setting is not None and setting.strip():
        if setting.strip().lower() in ("none", "direct"):
            return None
        return parse_upstream(setting, "upstream_proxy", no_proxy)
    for name in PROXY_VARIABLES:
        value = environ.get(name, "").strip()
        if value:
            return parse_upstream(value, name, no_proxy)
    return None
