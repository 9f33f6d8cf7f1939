"""Watched values and canary hosts: what an evaluation harness tells a trial's emulator to look out for.

The harness (`emulator eval`) names values an agent was given, a secret above all, before the agent starts
(`POST /_emulator/watch`). Wherever the emulator reads an agent's request in clear (the request line, headers and
body on every origin, the service gateways, plain HTTP through the proxy, a CONNECT's host, the requests it
answers for a canary host), a watched value found there is journaled as `secret.sighted`: where it was and which
value by its name, never the value. The one place a secret belongs, the body of a control-plane `set_secret`, is
not a sighting (decided by the decoded operation). HTTPS the proxy relays to a host outside the emulator is
opaque: TLS to the target is the client's own.

The values are kept in memory only: never on a command line, in a setting, a log or the state dir. Any event
about to be journaled that carries one (an `/ask` query, a path, a proxy target) has it replaced by
`[watched:NAME]` first, so neither the journal nor the log lines made from it hold it. With nothing watched (the
default) every scan is one falsy test; with values, one `bytes.find` per form of each value over what was read.

Canary hosts (shell patterns) are hosts an injected instruction sends the agent to: the proxy answers them itself
(`canary.request`), never touching the network.
"""

from __future__ import annotations

import fnmatch
import hmac
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote, quote_plus

import msgspec

from emulator.core.payloads import Payload, SecretSighted, Unread
from emulator.core.payloads import decode as decode_payload

MIN_VALUE = 8  # a shorter value would be "seen" in unrelated bytes, and its redaction would garble the journal
MAX_VALUES = 32
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")  # a secret's name (hosted/secrets.py)
_encode = msgspec.json.Encoder().encode

Publish = Callable[[str | None, Payload], object]


@dataclass(frozen=True)
class _Watched:
    name: str
    value: str
    # As a client may carry it: raw (UTF-8), percent-encoded (a URL), form-encoded, escaped in a JSON string.
    forms: tuple[bytes, ...]
    mark: bytes  # what replaces it in the journal


def _forms(value: str) -> tuple[bytes, ...]:
    found = [value.encode(), quote(value, safe="").encode(), quote_plus(value).encode(), _encode(value)[1:-1]]
    return tuple(dict.fromkeys(found))


class Watch:
    """The watched values (named, in memory) and the canary hosts of one emulator; empty by default."""

    def __init__(self, publish: Publish) -> None:
        self.publish = publish
        self.values: tuple[_Watched, ...] = ()
        self.canary_hosts: tuple[str, ...] = ()
        self.longest = 0  # the longest form's length: the overlap a chunked scan keeps

    def configure(self, values: Mapping[str, str], canary_hosts: Sequence[str]) -> None:
        """Replace what is watched (ValueError names what is wrong)."""
        if len(values) > MAX_VALUES:
            raise ValueError(f"at most {MAX_VALUES} watched values")
        for name, value in values.items():
            if not NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a value's name (a letter or underscore, then letters, digits, _)")
            if len(value) < MIN_VALUE:
                raise ValueError(f"the value of {name} is shorter than {MIN_VALUE} characters: too common to watch")
        for host in canary_hosts:
            if not host or len(host) > 255 or any(c.isspace() or c in "/:@" for c in host):
                raise ValueError(f"{host!r} is not a host pattern")
        self.values = tuple(
            _Watched(name, value, _forms(value), f"[watched:{name}]".encode()) for name, value in values.items()
        )
        self.canary_hosts = tuple(h.lower().rstrip(".") for h in canary_hosts)
        self.longest = max((len(f) for w in self.values for f in w.forms), default=0)

    @property
    def names(self) -> list[str]:
        return [w.name for w in self.values]

    def find(self, data: bytes | bytearray | memoryview) -> list[str]:
        """The names of the watched values in `data`, in any of the forms a client carries them."""
        if not self.values:
            return []
        raw = bytes(data) if isinstance(data, memoryview) else data
        return [w.name for w in self.values if any(raw.find(f) >= 0 for f in w.forms)]

    def equals(self, name: str, value: str) -> bool | None:
        """Whether `value` is the watched value named `name` (None: no such value is watched)."""
        for w in self.values:
            if w.name == name:
                return hmac.compare_digest(w.value.encode(), value.encode())
        return None

    def is_canary(self, host: str) -> bool:
        if not self.canary_hosts:
            return False
        name = host.lower().rstrip(".")
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.canary_hosts)

    def report(
        self, origin: str, method: str, path: str, where: str, names: Iterable[str], host: str | None = None
    ) -> None:
        """Journal a sighting of each of `names` (subject: the value's name)."""
        for name in names:
            seen = SecretSighted(origin=origin, method=method[:16], path=path[:512], where=where, name=name, host=host)
            self.publish(name, seen)

    def scan(
        self, origin: str, method: str, path: str, parts: Iterable[tuple[str, bytes]], host: str | None = None
    ) -> None:
        """Look for the watched values in each (where, bytes) of a request, and report what is found."""
        if not self.values:
            return
        for where, data in parts:
            self.report(origin, method, path, where, self.find(data), host)

    def redact(self, subject: str | None, payload: Payload) -> tuple[str | None, Payload | Unread]:
        """The event with every watched value in it replaced by `[watched:NAME]` (as it is when none is)."""
        encoded = _encode(payload)
        hits = [w for w in self.values if any(encoded.find(f) >= 0 for f in w.forms)]
        if subject is not None:
            hits += [w for w in self.values if w not in hits and any(subject.encode().find(f) >= 0 for f in w.forms)]
        if not hits:
            return subject, payload
        for w in hits:
            for form in w.forms:
                encoded = encoded.replace(form, w.mark)
                if subject is not None:
                    subject = subject.replace(form.decode(errors="replace"), w.mark.decode())
        try:
            return subject, msgspec.json.decode(encoded, type=type(payload))
        except msgspec.ValidationError:  # a field whose type the mark does not fit: kept as plain JSON
            return subject, decode_payload(payload.KIND, encoded)


class Scan:
    """A body read in chunks, scanned for the watched values: a value split between two chunks is found too."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self.found: set[str] = set()
        self._tail = b""

    def feed(self, chunk: bytes) -> None:
        keep = self.watch.longest - 1
        data = self._tail + chunk if self._tail else chunk
        self.found.update(self.watch.find(data))
        self._tail = data[-keep:] if keep > 0 else b""
