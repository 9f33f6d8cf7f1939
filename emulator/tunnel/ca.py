"""A local certificate authority for the database tunnel, created once in a directory and reused.

The real client verifies the tunnel's certificate against the CAs it trusts (`ssl.create_default_context()`,
which honours SSL_CERT_FILE), with SNI and hostname checks for `<org>-<db>.<domain>`. So the emulator keeps a
CA of its own, issues a wildcard leaf for `*.<domain>` from it, and writes a bundle (this CA, then the system's
CAs) that clients point SSL_CERT_FILE / REQUESTS_CA_BUNDLE at without losing the rest of their HTTPS.

The CA lives for ten years and is never replaced while it is usable, so a bundle handed out once stays valid;
the leaf lives for a year and is reissued whenever it is expired, close to expiry, issued by another CA, or
does not cover the domain. Validity uses the real wall clock, as TLS peers do, never the emulator's clock.

This module needs cryptography; the running emulator serves the files through tlsfiles.py, and `emulator up` has
them made or checked here in a child process (emulator/startkeys.py).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import secrets
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from emulator.core.private import private_dir, write_private
from emulator.tunnel.tlsfiles import TlsFiles, client_bundle

CA_VALIDITY = dt.timedelta(days=3650)
LEAF_VALIDITY = dt.timedelta(days=365)
# a leaf this close to expiry is reissued at the next start, so a long-running emulator never serves an expired one
LEAF_RENEW_BEFORE = dt.timedelta(days=30)
# a CA this close to expiry could not cover a fresh leaf for long; it is replaced (clients must re-trust the bundle)
CA_RENEW_BEFORE = dt.timedelta(days=60)
# certificates are back-dated a little so a peer whose clock runs slightly behind still accepts them
_BACKDATE = dt.timedelta(hours=1)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _write_public(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        tmp.write_bytes(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _load_pair(cert_path: Path, key_path: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
    """The certificate and its key, or None when either is missing, unreadable or they do not belong together."""
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError):
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
        return None
    return cert, key


def issue_ca(now: dt.datetime | None = None) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    now = now or _now()
    key = ec.generate_private_key(ec.SECP256R1())
    # a random suffix keeps two emulator CAs on one machine distinguishable in trust stores and error messages
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Pixeltable Cloud Emulator"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"Pixeltable Cloud Emulator Local CA {secrets.token_hex(4)}"),
        ]
    )
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def issue_leaf(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    domain: str,
    now: dt.datetime | None = None,
    *,
    wildcard: bool = True,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A server certificate for `domain` and `*.domain` (`domain` alone without `wildcard`); never outlives the CA
    that signs it."""
    now = now or _now()
    key = ec.generate_private_key(ec.SECP256R1())
    not_after = min(now + LEAF_VALIDITY, ca_cert.not_valid_after_utc)
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    names = [domain, f"*.{domain}"] if wildcard else [domain]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, domain)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def host_leaf_pem(files: TlsFiles, host: str) -> tuple[bytes, bytes]:
    """A certificate (PEM, then its key's) for `host` alone, issued by the CA in `files`: what the proxy serves for a
    canary host (core/watch.py), which a client trusting the emulator's bundle accepts. Never written to disk here."""
    pair = _load_pair(files.ca_cert_path, files.ca_key_path)
    if pair is None:
        raise ValueError(f"no usable CA in {files.directory}")
    cert, key = issue_leaf(pair[0], pair[1], host, wildcard=False)
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def leaf_names(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {name.lower() for name in san.get_values_for_type(x509.DNSName)}


def _ca_usable(cert: x509.Certificate, now: dt.datetime) -> bool:
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    except x509.ExtensionNotFound:
        return False
    return constraints.ca and cert.not_valid_before_utc <= now < cert.not_valid_after_utc - CA_RENEW_BEFORE


def _leaf_usable(cert: x509.Certificate, ca_cert: x509.Certificate, domain: str, now: dt.datetime) -> bool:
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (InvalidSignature, ValueError, TypeError):
        return False
    if not cert.not_valid_before_utc <= now < cert.not_valid_after_utc - LEAF_RENEW_BEFORE:
        return False
    return {domain, f"*.{domain}"} <= leaf_names(cert)


class LocalCA(TlsFiles):
    """The CA and the current leaf for one domain, as files in `directory` (see the module docstring)."""

    @classmethod
    def load_or_create(cls, directory: Path, domain: str) -> LocalCA:
        """Reuse the CA in `directory` (creating it the first time), make sure the leaf covers `domain`, and write
        the client bundle. Safe against another process doing the same on the same directory at once."""
        ca = cls(Path(directory), domain)
        private_dir(ca.directory)  # holds private keys
        with open(ca.directory / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                ca._ensure()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        return ca

    def _ensure(self) -> None:
        now = _now()
        pair = _load_pair(self.ca_cert_path, self.ca_key_path)
        if pair is None or not _ca_usable(pair[0], now):
            pair = issue_ca(now)
            write_private(self.ca_key_path, _key_pem(pair[1]))
            _write_public(self.ca_cert_path, pair[0].public_bytes(serialization.Encoding.PEM))
        ca_cert, ca_key = pair
        os.chmod(self.ca_key_path, 0o600)

        leaf = _load_pair(self.cert_path, self.key_path)
        if leaf is None or not _leaf_usable(leaf[0], ca_cert, self.domain, now):
            cert, key = issue_leaf(ca_cert, ca_key, self.domain, now)
            write_private(self.key_path, _key_pem(key))
            _write_public(self.cert_path, cert.public_bytes(serialization.Encoding.PEM))
        os.chmod(self.key_path, 0o600)

        # rewritten each start, as the system store may have changed; only when different, to keep mtimes stable
        bundle = client_bundle(self.ca_cert_path.read_bytes())
        try:
            current = self.bundle_path.read_bytes()
        except OSError:
            current = None
        if current != bundle:
            _write_public(self.bundle_path, bundle)
