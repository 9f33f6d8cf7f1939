"""The tunnel's TLS files as the running emulator uses them: where the CA, the leaf and the client bundle are, and a
context serving the leaf, with the standard library's `ssl` only.

Making and checking them is ca.py's (`LocalCA`), which needs cryptography: 10 MiB resident and 40 ms to import, so
`emulator up` has them made in a child process (emulator/startkeys.py) and serves the files from here.
"""

from __future__ import annotations

import contextlib
import re
import ssl
from pathlib import Path

SYSTEM_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


def normalize_domain(domain: str) -> str:
    """The domain in canonical form (lower case, no trailing dot); ValueError if it cannot carry a wildcard cert."""
    name = domain.strip().rstrip(".").lower()
    labels = name.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"not a valid DNS domain: {domain!r}")
    if len(labels) < 2:
        # OpenSSL, and so Python's ssl, refuses to match `*.<single label>`: every tunnel host would fail verification
        raise ValueError(f"the tunnel domain needs at least two labels (such as pxt.test), not {domain!r}")
    return name


class TlsFiles:
    """The CA and the current leaf for one domain, as files in `directory` (made by `LocalCA.load_or_create`)."""

    def __init__(self, directory: Path, domain: str) -> None:
        self.directory = directory
        self.domain = normalize_domain(domain)
        self.ca_cert_path = directory / "ca.pem"
        self.ca_key_path = directory / "ca-key.pem"
        self.cert_path = directory / "server.pem"
        self.key_path = directory / "server-key.pem"
        self.bundle_path = directory / "bundle.pem"

    @property
    def ca_cert_pem(self) -> bytes:
        return self.ca_cert_path.read_bytes()

    def server_context(self) -> ssl.SSLContext:
        """A fresh TLS 1.2+ server context serving the leaf; callers may adjust it (it is not shared)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.options |= ssl.OP_NO_RENEGOTIATION
        ctx.load_cert_chain(self.cert_path, self.key_path)
        return ctx


def system_cas() -> bytes:
    """The system's trusted CAs as PEM, so a client pointed at our bundle keeps reaching the rest of the internet."""
    candidates = [SYSTEM_BUNDLE]
    openssl_default = ssl.get_default_verify_paths().cafile
    if openssl_default:
        candidates.append(Path(openssl_default))
    for path in candidates:
        with contextlib.suppress(OSError):
            data = path.read_bytes()
            if b"-----BEGIN CERTIFICATE-----" in data:
                return data
    try:
        import certifi
    except ImportError:
        return b""
    with contextlib.suppress(OSError):
        return Path(certifi.where()).read_bytes()
    return b""


def client_bundle(ca_pem: bytes) -> bytes:
    """What a client trusts to reach the tunnel and still the rest of the internet: our CA, then the system's."""
    system = system_cas()
    return ca_pem + b"\n" + system if system else ca_pem
