"""ID-JAG registration (draft-ietf-oauth-identity-assertion-authz-grant, in WorkOS's agent-registration profile):
the upstream identity provider the emulator also plays, and the checks an identity assertion passes before the
identity provider registers an agent with it.

The upstream issuer is `{auth_url}/upstream`, with a key of its own (`<state-dir>/keys/upstream-es256.jwk.json`,
made at its first use) published at `{auth_url}/upstream/.well-known/jwks.json`. A test person signs in there (an
ID token, `POST /_emulator/id-jag` with `id_token: true`), and the agent exchanges that ID token for an ID-JAG at
its token endpoint (RFC 8693 token exchange, `{auth_url}/upstream/oauth2/token`), as it would at the person's own
provider; or a test mints the ID-JAG directly (`emulator id-jag`, `POST /_emulator/id-jag`). It is the one issuer
this provider trusts: an ID-JAG of any other is `issuer_not_enabled`.

Checks, in order (an ID-JAG whose checks fail is never recorded, so a corrected retry is not a replay):
`typ` `oauth-id-jag+jwt`; a trusted `iss`; the signature against the issuer's key; `aud` this provider's issuer;
`exp` not passed, `iat` not in the future (60 s of skew, the emulator's clock); `sub`, `jti`, and a verified
`email`; `auth_time` present and at most `idjag_max_auth_age` old (else `login_required`). The `jti` replay check
is the registration's, in its transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec
from msgspec import UNSET, UnsetType

from emulator.core import jsonbody
from emulator.core.errors import (
    INVALID_GRANT,
    INVALID_REQUEST,
    INVALID_TARGET,
    ISSUER_NOT_ENABLED,
    LOGIN_REQUIRED,
    UNSUPPORTED_GRANT_TYPE,
    ApiError,
)
from emulator.core.ids import Ids
from emulator.identity.signing import ASSERTION_TYP, Claims, InvalidToken, Jwks, Signer

ID_JAG_TYPE = "urn:ietf:params:oauth:token-type:id-jag"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_TOKEN_LIFETIME = 3600
UPSTREAM_PATH = "/upstream"
SKEW = 60  # seconds of clock difference allowed on exp, iat and auth_time
DEFAULT_LIFETIME = 300  # an ID-JAG is short-lived: minutes, not hours


class IdJagClaims(Claims, kw_only=True, frozen=True, omit_defaults=True):
    """What an ID-JAG says: which person (`sub`, `email`), signed in when (`auth_time`), for which agent
    (`client_id`) and which authorization server (`aud`)."""

    client_id: str
    jti: str
    iat: int
    exp: int
    auth_time: int | UnsetType = UNSET
    email: str | UnsetType = UNSET
    email_verified: bool | UnsetType = UNSET
    scope: str | UnsetType = UNSET
    resource: str | UnsetType = UNSET  # the resource server the client will call (MCP's enterprise-managed flow)


class MintRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What a test asks the upstream issuer for (`POST /_emulator/id-jag`); every bad ID-JAG can be made on purpose."""

    email: str
    sub: str | None = None  # the person's id at the upstream; derived from the e-mail when not given
    email_verified: bool = True
    auth_age: float = 0  # seconds since the person signed in upstream
    auth_time: bool = True  # False: no auth_time claim at all
    expires_in: float | None = None  # seconds it lives (default: an ID-JAG 5 min, an ID token an hour); < 0: expired
    audience: str | None = None  # default: this provider's issuer
    client_id: str = "agent"
    scope: str | None = None
    resource: str | None = None  # the `resource` claim (the jwt-bearer grant at /oauth2/token needs one)
    jti: str | None = None  # a fixed jti (to replay one)
    typ: str = ASSERTION_TYP
    id_token: bool = False  # the person's ID token instead (what the agent exchanges for an ID-JAG)


class TokenExchange(msgspec.Struct, kw_only=True):
    """RFC 8693's form at the upstream's token endpoint (each field read once from the form)."""

    grant_type: str | None = None
    requested_token_type: str | None = None
    subject_token: str = ""
    subject_token_type: str | None = None
    audience: str | None = None
    scope: str | None = None
    client_id: str | None = None
    resource: str | None = None  # RFC 8693 §2.1: carried into the ID-JAG's `resource` claim


class Minted(msgspec.Struct, kw_only=True):
    id_jag: str  # the ID-JAG; with `id_token` asked for, empty
    assertion_type: str
    issuer: str
    sub: str
    jti: str
    expires_at: float
    id_token: str | None = None


class IdTokenClaims(Claims, kw_only=True, frozen=True, omit_defaults=True):
    """The person's ID token at the upstream (`aud`: the agent's client id there)."""

    iat: int
    exp: int
    auth_time: int | UnsetType = UNSET
    email: str
    email_verified: bool


class Exchanged(msgspec.Struct, kw_only=True):
    """RFC 8693's answer, as the ID-JAG draft gives it: the ID-JAG in `access_token`, `token_type` `N_A`."""

    access_token: str
    issued_token_type: str
    token_type: str
    expires_in: int
    scope: str | UnsetType = UNSET


@dataclass(frozen=True)
class Verified:
    """An ID-JAG that passed every check but the replay check."""

    iss: str
    sub: str
    email: str
    jti: str
    exp: float
    client_id: str = ""
    resource: str | None = None  # the `resource` claim, when it has one


class Upstream:
    """The upstream identity provider the emulator plays: its key, its JWKS, the ID-JAGs it mints."""

    def __init__(self, state_dir: Path, auth_url: str, ids: Ids) -> None:
        self.issuer = auth_url + UPSTREAM_PATH
        self.audience = auth_url  # the authorization server an ID-JAG is for: this provider
        self.signer = Signer(upstream_key_path(state_dir))
        self._ids = ids

    def reload(self, state_dir: Path) -> None:
        self.signer.reload(state_dir)

    def jwks(self) -> Jwks:
        return self.signer.jwks()

    def mint(self, ask: MintRequest, now: float) -> Minted:
        if ask.id_token:
            return self._sign_in(ask, now)
        sub = _sub(ask)
        exp = int(now + (ask.expires_in if ask.expires_in is not None else DEFAULT_LIFETIME))
        claims = IdJagClaims(
            iss=self.issuer,
            aud=ask.audience or self.audience,
            sub=sub,
            client_id=ask.client_id,
            jti=ask.jti or self._ids.ident("jag_"),
            iat=int(now),
            exp=exp,
            auth_time=int(now - ask.auth_age) if ask.auth_time else UNSET,
            email=ask.email.strip(),
            email_verified=ask.email_verified,
            scope=ask.scope if ask.scope is not None else UNSET,
            resource=ask.resource if ask.resource is not None else UNSET,
        )
        token = self.signer.sign(ask.typ, claims)
        return Minted(
            id_jag=token, assertion_type=ID_JAG_TYPE, issuer=self.issuer, sub=sub, jti=claims.jti, expires_at=exp
        )

    def _sign_in(self, ask: MintRequest, now: float) -> Minted:
        """The person signs in at the upstream: their ID token, for the agent `client_id`."""
        sub = _sub(ask)
        exp = int(now + (ask.expires_in if ask.expires_in is not None else ID_TOKEN_LIFETIME))
        claims = IdTokenClaims(
            iss=self.issuer,
            aud=ask.client_id,
            sub=sub,
            iat=int(now),
            exp=exp,
            auth_time=int(now - ask.auth_age) if ask.auth_time else UNSET,
            email=ask.email.strip(),
            email_verified=ask.email_verified,
        )
        token = self.signer.sign("JWT", claims)
        return Minted(
            id_jag="", assertion_type=ID_TOKEN_TYPE, issuer=self.issuer, sub=sub, jti="", expires_at=exp, id_token=token
        )

    def exchange(self, form: TokenExchange, now: float) -> Exchanged:
        """RFC 8693 at the upstream's token endpoint: the person's ID token → an ID-JAG for the authorization server
        named by `audience` (this provider: the one the upstream serves). Refusals are RFC 6749's."""
        if form.grant_type != TOKEN_EXCHANGE:
            raise UNSUPPORTED_GRANT_TYPE(f"grant_type must be {TOKEN_EXCHANGE}")
        if form.requested_token_type != ID_JAG_TYPE:
            raise INVALID_REQUEST(f"requested_token_type must be {ID_JAG_TYPE}")
        if form.subject_token_type != ID_TOKEN_TYPE:
            raise INVALID_REQUEST(f"subject_token_type must be {ID_TOKEN_TYPE} (the person's ID token)")
        if form.audience != self.audience:
            raise INVALID_TARGET(f"this issuer makes ID-JAGs for {self.audience} only, not {form.audience!r}")
        try:
            header, raw = self.signer.decode(form.subject_token)
            person = msgspec.convert(raw, IdTokenClaims)
        except (InvalidToken, msgspec.ValidationError) as e:
            raise INVALID_GRANT(f"the subject_token is not an ID token of {self.issuer}: {e}") from None
        if header.get("typ") == ASSERTION_TYP or person.iss != self.issuer:
            raise INVALID_GRANT(f"the subject_token is not an ID token of {self.issuer}")
        if person.exp <= now:
            raise INVALID_GRANT("the ID token has expired: the person signs in again")
        if form.client_id is not None and form.client_id != person.aud:
            raise INVALID_GRANT(f"the ID token was issued to {person.aud!r}, not {form.client_id!r}")
        ask = MintRequest(
            email=person.email,
            sub=person.sub,
            email_verified=person.email_verified,
            auth_age=now - person.auth_time if isinstance(person.auth_time, int) else 0,
            auth_time=isinstance(person.auth_time, int),
            client_id=person.aud,
            scope=form.scope,
            resource=form.resource,
        )
        minted = self.mint(ask, now)
        return Exchanged(
            access_token=minted.id_jag,
            issued_token_type=ID_JAG_TYPE,
            token_type="N_A",
            expires_in=int(minted.expires_at - now),
            scope=form.scope if form.scope is not None else UNSET,
        )

    def check(self, assertion_type: str, token: str, now: float, max_auth_age: int) -> Verified:
        """Every check but replay; each refusal is the error the agent-registration profile names."""
        if assertion_type != ID_JAG_TYPE:
            if assertion_type == "verified_email":  # the pre-0.6 protocol's shape
                raise INVALID_REQUEST("assertion_type verified_email is gone: use {type: service_auth, login_hint}")
            raise INVALID_REQUEST(f"assertion_type must be {ID_JAG_TYPE}")
        header, unverified = _peek(token)
        typ = header.get("typ")
        if not isinstance(typ, str) or typ.lower() != ASSERTION_TYP:
            raise INVALID_GRANT(f"the assertion's typ is {typ!r}, not {ASSERTION_TYP}")
        iss = unverified.get("iss")
        if iss != self.issuer:
            raise ISSUER_NOT_ENABLED(f"the issuer {iss!r} is not trusted here; the trusted issuer is {self.issuer}")
        try:
            _, raw = self.signer.decode(token)
        except InvalidToken as e:
            raise INVALID_GRANT(
                f"the assertion's signature does not verify against {self.issuer}'s keys: {e}"
            ) from None
        try:
            claims = msgspec.convert(raw, IdJagClaims)
        except msgspec.ValidationError as e:
            raise INVALID_GRANT(f"the assertion's claims are not an ID-JAG's: {e}") from None
        if claims.aud != self.audience:
            raise INVALID_GRANT(f"the assertion is for {claims.aud!r}, not this provider ({self.audience})")
        if claims.exp + SKEW <= now:
            raise INVALID_GRANT("the assertion has expired; get a new one from the identity provider")
        if claims.iat > now + SKEW:
            raise INVALID_GRANT("the assertion's iat is in the future")
        if not claims.sub or not claims.jti:
            raise INVALID_GRANT("the assertion needs sub and jti")
        if claims.email_verified is not True or not isinstance(claims.email, str) or "@" not in claims.email:
            raise INVALID_GRANT("the assertion must carry a verified e-mail (email and email_verified: true)")
        if claims.auth_time is UNSET:
            raise login_required("the assertion has no auth_time", max_auth_age)
        if claims.auth_time > now + SKEW:
            raise INVALID_GRANT("the assertion's auth_time is in the future")
        age = int(now - claims.auth_time)
        if age > max_auth_age:
            raise login_required(
                f"the person signed in {age} s ago; at most {max_auth_age} s is accepted", max_auth_age
            )
        resource = claims.resource if isinstance(claims.resource, str) else None
        return Verified(
            claims.iss, claims.sub, claims.email.strip(), claims.jti, float(claims.exp), claims.client_id, resource
        )


def other_issuer(token: str, own: str) -> bool:
    """Whether a jwt-bearer assertion names an issuer other than this provider (`own`): an ID-JAG from a person's
    identity provider, not a registration's own assertion. Anything that does not parse is left to the latter."""
    try:
        found = jsonbody.token_parts(token)
    except jsonbody.NotJson:
        return False
    if found is None:
        return False
    iss = found[1].get("iss")
    return isinstance(iss, str) and iss != own


def _sub(ask: MintRequest) -> str:
    """The person's id at the upstream: the one asked for, else one made from the e-mail (the same every time)."""
    return ask.sub or "user-" + ask.email.strip().lower()


def login_required(why: str, max_age: int) -> ApiError:
    return LOGIN_REQUIRED(
        f"{why}: the person signs in again at their identity provider, which then issues a fresh ID-JAG",
        headers={"WWW-Authenticate": f'AgentAuth error="login_required", max_age="{max_age}"'},
    )


def _peek(token: str) -> tuple[dict[str, object], dict[str, object]]:
    """A JWS's header and claims before its signature is checked: which issuer's key to check it with."""
    try:
        found = jsonbody.token_parts(token)
    except jsonbody.NotJson as e:  # nesting too deep among them: decoded with the depth bound, never recursed into
        raise INVALID_GRANT(f"the assertion is not a JWT (its header or claims are not base64url JSON: {e})") from None
    if found is None:
        raise INVALID_GRANT("the assertion is not a JWT (three dot-separated parts)")
    return found  # each decoded as a JSON object (anything else is NotJson, above)


def upstream_key_path(state_dir: Path) -> Path:
    return state_dir / "keys" / "upstream-es256.jwk.json"
