"""Who a request says it is, read from what it carries, without keeping any secret: the registration and token id a
bearer JWT names (read without verifying it: a request whose token is refused must still be attributed), a
fingerprint of an API key (the first hex digits of the hash the store keeps, so a key is found again by its row),
and the name of a secret-looking query parameter. Pure functions over bytes and text, no web framework: the
origins' request journal (core/served.py) and the database gateways (gateway/server.py) share them.
"""

from __future__ import annotations

from urllib.parse import unquote_plus

import msgspec
from msgspec import UNSET

from emulator.core import jsonbody
from emulator.core.ids import key_fingerprint
from emulator.core.payloads import Credentials

# Query parameters that carry a credential when an agent puts one in a URL.
_SECRET_PARAMS = frozenset(
    {"key", "api_key", "apikey", "x-api-key", "token", "access_token", "id_token", "refresh_token", "assertion"}
    | {"secret", "client_secret", "password", "authorization"}
)


class SeenClaims(msgspec.Struct):
    """The claims attribution reads of a JWT it has not verified. Each is kept as the token has it (any JSON): a
    token is attributed however odd its claims, `sub` and `jti` as text, `exp` only when it is a number."""

    sub: object = ""
    jti: object = ""
    exp: object = None
    registration_type: object = UNSET  # on an agent's access token (only its presence is read)


_decode_claims = msgspec.json.Decoder(SeenClaims).decode


def jwt_claims(token: str) -> SeenClaims | None:
    """A JWT's claims, unverified (attribution only; the origin verifies), or None if it is not one."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = jsonbody.b64url(parts[1])
        jsonbody.check_depth(claims)
        return _decode_claims(claims)
    except (ValueError, msgspec.DecodeError):  # ValidationError (claims not an object), NotJson (too deep) are ones
        return None


def secret_in_query(query: str) -> str | None:
    """The name of a query parameter that looks like a credential (by its name or its value's shape)."""
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if name.lower() in _SECRET_PARAMS or value.startswith(("pxtk_", "eyJ")):
            return name[:64]
    return None


def credentials(headers: dict[bytes, bytes], query: str = "", form: bytes = b"") -> Credentials:
    """Who a request says it is, without any secret: registration, token id and expiry, key fingerprint. From its
    headers first, then a credential in its query string, then a token exchange's `assertion` (a form body)."""
    api_key = headers.get(b"x-api-key")
    bearer = headers.get(b"authorization", b"")
    token = bearer[7:].strip().decode("latin-1") if bearer[:7].lower() == b"bearer " else ""
    if api_key:
        return Credentials(key=key_fingerprint(api_key.decode("latin-1").strip()))
    if token.startswith("pxtk_"):
        return Credentials(key=key_fingerprint(token))
    if token:
        return _token(token)
    if query:
        carried = _carried(query)
        if carried.startswith("pxtk_"):
            return Credentials(key=key_fingerprint(carried))
        if carried:
            return _token(carried)
    if form:
        assertion = next((v for k, v in _pairs(form.decode("latin-1")) if k == "assertion"), None)
        claims = jwt_claims(assertion) if assertion else None
        if claims is not None and str(claims.sub).startswith("agent_reg_"):
            return Credentials(reg=str(claims.sub)[:64])  # the registration exchanging its own assertion
    return Credentials()


def _token(token: str) -> Credentials:
    claims = jwt_claims(token)
    if claims is None:
        return Credentials(token="opaque")
    sub = str(claims.sub)[:64]
    exp = claims.exp
    # An agent's access token names its registration; a `pxt login` session names its person.
    agent = claims.registration_type is not UNSET
    return Credentials(
        reg=sub if agent else None,
        user=None if agent else sub,
        token=str(claims.jti)[:64],
        token_exp=exp if isinstance(exp, int | float) else None,
    )


def _carried(query: str) -> str:
    """The first value in a query string that is a key or a token (`pxtk_…`, `eyJ…`, once decoded), or "". Only a
    value that starts with `p`, `e` or an escape can decode to one: the rest (most queries) are not decoded."""
    for pair in query.split("&"):
        value = pair.partition("=")[2]
        if value[:1] in _MAY_CARRY:
            decoded = unquote_plus(value)
            if decoded.startswith(("pxtk_", "eyJ")):
                return decoded
    return ""


_MAY_CARRY = frozenset("pe%")


def _pairs(query: str) -> list[tuple[str, str]]:
    return [(name, unquote_plus(value)) for name, _, value in (p.partition("=") for p in query.split("&") if p)]
