"""The identity provider's signing key: ES256 (P-256), generated once, kept in the state directory.

Identity assertions and access tokens are real JWTs signed with it; `/.well-known/jwks.json` publishes
the public half, so any JOSE library can verify them.
"""

from __future__ import annotations

import base64
import json
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from msgspec import UNSET, UnsetType

from emulator.core import jsonbody
from emulator.core.private import write_private

if TYPE_CHECKING:
    from joserfc.jwk import ECKey

ASSERTION_TYP = "oauth-id-jag+jwt"
ACCESS_TOKEN_TYP = "at+jwt"  # RFC 9068
_VERIFIED_KEPT = 4096  # tokens whose signature was checked, remembered (an agent presents the same one many times)
_CACHEABLE_LEN = 8192


class InvalidToken(ValueError):
    """Not a token this issuer signed (malformed, wrong signature, wrong type)."""


# The claims of the tokens this provider issues, each kind's in the order it has always signed them (a token's bytes
# follow its fields' order). Frozen: a verified token's claims are remembered and handed to every caller.
class Claims(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """What every token of this issuer says: who issued it, for whom, about whom."""

    iss: str
    aud: str
    sub: str


class AgentClaims(Claims, kw_only=True, frozen=True, omit_defaults=True):
    """An agent's identity assertion (`email` once claimed) or its access token to the site (`scope`)."""

    client_id: str
    scope: str | UnsetType = UNSET
    jti: str
    iat: int
    exp: int
    registration_type: str
    email: str | UnsetType = UNSET
    email_verified: bool | UnsetType = UNSET


class SessionClaims(Claims, kw_only=True, frozen=True, omit_defaults=True):
    """A `pxt login` session's access token to the control plane (`org_id` null: no organization chosen)."""

    email: str
    org_id: str | None
    sid: str
    iat: int
    exp: int


class PersonClaims(Claims, kw_only=True, frozen=True, omit_defaults=True):
    """A person's access token from the authorization code grant (`sub`: the user, `aud`: the resource asked for,
    `client_id`: the OAuth client the person approved)."""

    client_id: str
    scope: str
    jti: str
    iat: int
    exp: int
    email: str


class Jwk(msgspec.Struct, kw_only=True):
    """The public half of the signing key (RFC 7517), its members in the order joserfc gives them."""

    crv: str
    x: str
    y: str
    use: str = ""  # these three are the signer's own, set over whatever the key file held
    alg: str = ""
    kty: str
    kid: str = ""


class Jwks(msgspec.Struct):
    keys: list[Jwk]


class Signer:
    """Signs and verifies with the state dir's key. joserfc and cryptography (10 MiB resident, 40 ms to import) are
    imported with the key, at its first use: an emulator no agent calls never maps them (`emulator up` has the key
    made and checked in a child process, emulator/startkeys.py)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._key: ECKey | None = None
        self.kid = ""
        self._es256: Callable[[bytes], bytes] | None = None  # the key's private half, signing
        # token → (typ, claims) of a good signature: a P-256 check is most of the CPU of a token exchange or an
        # authenticated call, and the answer for the same bytes and key never changes (expiry is checked by callers)
        self._verified: OrderedDict[str, tuple[str, AgentClaims | SessionClaims | PersonClaims]] = OrderedDict()

    @classmethod
    def of(cls, state_dir: Path) -> Signer:
        """The signer of a key already made (`load_or_create`), read at its first use."""
        return cls(key_path(state_dir))

    @classmethod
    def load_or_create(cls, state_dir: Path, path: Path | None = None) -> Signer:
        """The signer of the state dir's key (or of the key at `path`), made the first time; the key is read (and so
        checked) now."""
        from joserfc.jwk import ECKey

        path = path or key_path(state_dir)
        if not path.is_file():
            key = ECKey.generate_key("P-256", parameters={"use": "sig", "alg": "ES256"}, private=True)
            key.ensure_kid()
            write_private(path, json.dumps(key.as_dict(private=True)).encode())
        signer = cls(path)
        signer._loaded()
        return signer

    def _loaded(self) -> ECKey:
        if self._key is None:
            from joserfc.jwk import ECKey

            if not self._path.is_file():  # a key made at its first use (the upstream issuer's)
                Signer.load_or_create(self._path.parent, self._path)
            key = ECKey.import_key(json.loads(self._path.read_text()))
            self._key, self.kid, self._es256 = key, key.kid or "", _es256(key)
        return self._key

    def reload(self, state_dir: Path) -> None:
        """Sign with the key now in the state dir (a loaded snapshot brought its own)."""
        other = Signer.load_or_create(state_dir, state_dir / "keys" / self._path.name)
        self._path, self._key, self.kid, self._es256 = other._path, other._key, other.kid, other._es256
        self._verified.clear()

    def sign(self, typ: str, claims: Claims) -> str:
        """A compact JWS (RFC 7515) with ES256's raw r||s signature (RFC 7518 §3.4). Made here rather than with
        joserfc's encode, which spent as long in Python as the signature itself: token exchanges 1 400 → 1 600/s.
        joserfc still verifies, and the tests verify with PyJWT too."""
        self._loaded()
        header = {"typ": typ, "alg": "ES256", "kid": self.kid}
        signing = _b64(msgspec.json.encode(header)) + b"." + _b64(msgspec.json.encode(claims))
        if self._es256 is None:
            raise ValueError("the signing key has no private half")
        return (signing + b"." + _b64(self._es256(signing))).decode()

    def verify(self, token: str) -> tuple[str, AgentClaims | SessionClaims | PersonClaims]:
        """(typ, claims) of a token signed by this key, its claims decoded strictly as the kind it is (a session's
        names its `sid`, an agent's its `registration_type`, else a person's). Expiry is the caller's business
        (emulator clock)."""
        known = self._verified.get(token)
        if known is not None:
            self._verified.move_to_end(token)
            return known
        from joserfc import jwt
        from joserfc.errors import JoseError

        try:
            jsonbody.check_token(token)  # joserfc decodes header and claims recursively: 50,000 levels would raise
            decoded = jwt.decode(token, self._loaded(), algorithms=["ES256"])
            claims = decoded.claims
            kind = SessionClaims if "sid" in claims else AgentClaims if "registration_type" in claims else PersonClaims
            verified = str(decoded.header.get("typ", "")), msgspec.convert(decoded.claims, kind)
        except (JoseError, ValueError, TypeError) as e:  # msgspec.ValidationError is a ValueError
            raise InvalidToken(str(e) or type(e).__name__) from None
        if len(token) <= _CACHEABLE_LEN:
            self._verified[token] = verified
            if len(self._verified) > _VERIFIED_KEPT:
                self._verified.popitem(last=False)
        return verified

    def decode(self, token: str) -> tuple[dict[str, object], dict[str, object]]:
        """(header, claims) of any token whose signature this key made, its claims unread: for tokens of a shape
        this issuer does not itself verify (an upstream issuer's ID-JAGs)."""
        from joserfc import jwt
        from joserfc.errors import JoseError

        try:
            jsonbody.check_token(token)
            decoded = jwt.decode(token, self._loaded(), algorithms=["ES256"])
        except (JoseError, ValueError, TypeError) as e:  # jsonbody.NotJson is a ValueError
            raise InvalidToken(str(e) or type(e).__name__) from None
        return dict(decoded.header), dict(decoded.claims)

    def jwks(self) -> Jwks:
        public = msgspec.convert(self._loaded().as_dict(private=False), Jwk)
        return Jwks([msgspec.structs.replace(public, use="sig", alg="ES256", kid=self.kid)])


def key_path(state_dir: Path) -> Path:
    return state_dir / "keys" / "idp-es256.jwk.json"


def _es256(key: ECKey) -> Callable[[bytes], bytes] | None:
    """ES256's raw r||s signature (RFC 7518 §3.4) with the key's private half; None when it has none."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    private = key.private_key
    if not isinstance(private, ec.EllipticCurvePrivateKey):
        return None
    algorithm = ec.ECDSA(hashes.SHA256())

    def sign(data: bytes) -> bytes:
        r, s = decode_dss_signature(private.sign(data, algorithm))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")

    return sign


def _b64(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")
