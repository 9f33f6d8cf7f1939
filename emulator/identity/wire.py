"""The identity provider's wire types: what `/agent/identity` and its claim take (decoded whole before any rule runs)
and what they answer, in the WorkOS AuthKit agent-registration shapes (current, nested form): `{id, type,
identity{assertion, expires_at}, scopes{pre_claim, post_claim}, claim{token, expires_at, url, attempt?}}`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from emulator.core.errors import INVALID_LOGIN_HINT, INVALID_REQUEST, ApiError
from emulator.identity.states import RegType

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
# Anonymous registrations get two read-only scopes: one public, one free tier.
PRE_CLAIM_SCOPES = ["public:read", "free_tier:read"]
POST_CLAIM_SCOPES = ["public:read", "free_tier:read", "account:read", "account:write"]
IDENTITY_TYPES: list[str] = [RegType.ANONYMOUS, RegType.SERVICE_AUTH]

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
USER_CODE = re.compile(r"^\d{6}$")


CLAIM_PAGE = "/claim"  # the person's page of an agent's claim; its link carries the attempt token


@dataclass(frozen=True)
class Urls:
    site: str  # {base_url}: the protected resource
    auth: str  # {auth_url}: the issuer
    api: str  # the control plane


@dataclass(frozen=True)
class AccessGrant:
    """A verified access token."""

    jti: str
    registration_id: str
    registration_type: str
    scopes: list[str]
    expires_at: float


# --- what the provider takes: decoded whole before any rule runs; a field of the wrong type is refused as the rule
# for that field would refuse it (the same error a wrong value gets) ---------------------------------------------

T = TypeVar("T", bound=msgspec.Struct)
Refusals = dict[str, Callable[[object], ApiError]]


# Strings the document lists the values of: any string decodes, and the rules refuse the others by name (some with
# errors of their own, such as identity_assertion's issuer_not_enabled).
RegistrationType = Annotated[
    str, msgspec.Meta(extra_json_schema={"enum": ["anonymous", "service_auth", "refresh", "identity_assertion"]})
]
ClaimMethod = Annotated[str, msgspec.Meta(extra_json_schema={"enum": ["service_auth"]})]


def decode(raw: dict[str, object], kind: type[T], refusals: Refusals) -> T:
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError as e:
        found = re.search(r"`\$\.(\w+)|missing required field `(\w+)`", str(e))
        field = (found.group(1) or found.group(2)) if found else ""
        refuse = refusals.get(field)
        raise (refuse(raw.get(field)) if refuse else INVALID_REQUEST(str(e))) from None


def type_refused(value: object) -> ApiError:
    return INVALID_REQUEST(
        "type must be one of anonymous, service_auth, refresh" + (f" (got {value!r})" if value is not None else "")
    )


def _hint_refused(_: object) -> ApiError:
    return INVALID_LOGIN_HINT("login_hint must be an e-mail address")


def claim_token_refused(_: object) -> ApiError:
    return INVALID_REQUEST("claim_token is required")


class Registration(msgspec.Struct, kw_only=True):
    """POST /agent/identity: `anonymous`, `service_auth` (with `login_hint`), `refresh` (with `refresh_token`) or
    `identity_assertion` (with `assertion_type` and `assertion`, an ID-JAG)."""

    type: RegistrationType
    login_hint: str | None = None
    refresh_token: str | None = None
    assertion_type: str | None = None
    assertion: str | None = None

    @classmethod
    def of(cls, raw: dict[str, object]) -> Registration:
        if "requested_credential_type" in raw:  # a field of an old protocol: refused by name
            raise INVALID_REQUEST(
                "requested_credential_type is from an old protocol: register with {type: anonymous} or "
                "{type: service_auth, login_hint}, then exchange the assertion at /oauth2/token",
            )
        refresh = INVALID_REQUEST("type refresh needs refresh_token")
        assertion = INVALID_REQUEST("identity_assertion needs assertion_type and assertion (strings)")
        refusals: Refusals = {
            "type": type_refused,
            "login_hint": _hint_refused,
            "refresh_token": lambda _: refresh,
            "assertion_type": lambda _: assertion,
            "assertion": lambda _: assertion,
        }
        return decode(raw, cls, refusals)


class ClaimStart(msgspec.Struct, kw_only=True):
    """POST /agent/identity/claim: a new claim attempt (for an anonymous registration too)."""

    type: ClaimMethod
    claim_token: str
    login_hint: str | None = None

    @classmethod
    def of(cls, raw: dict[str, object]) -> ClaimStart:
        method = INVALID_REQUEST('the claim method is type: "service_auth" (for anonymous registrations too)')
        refusals: Refusals = {
            "type": lambda _: method,
            "login_hint": _hint_refused,
            "claim_token": claim_token_refused,
        }
        return decode(raw, cls, refusals)


class ClaimCompletion(msgspec.Struct, kw_only=True):
    """POST /agent/identity/claim/complete: the 6-digit code the person read off the claim page."""

    user_code: str  # checked first, as the code is what the person handed over
    claim_token: str

    @classmethod
    def of(cls, raw: dict[str, object]) -> ClaimCompletion:
        if "otp" in raw and "user_code" not in raw:  # an older name of the code
            raise INVALID_REQUEST("send the code as user_code")
        code = INVALID_REQUEST("user_code must be the 6 digits shown on the claim page")
        return decode(raw, cls, {"user_code": lambda _: code, "claim_token": claim_token_refused})


# --- what the provider answers (the WorkOS AuthKit agent-registration shapes; a field left UNSET is not sent) ---


class Attempt(msgspec.Struct):
    """A claim attempt: the person's page, and until when its link works."""

    verification_uri: str
    expires_at: str


class ClaimOffer(msgspec.Struct, kw_only=True):
    token: str
    expires_at: str
    url: str
    attempt: Attempt | UnsetType = UNSET  # a service_auth registration's first attempt


class Scopes(msgspec.Struct, kw_only=True):
    pre_claim: list[str] | UnsetType = UNSET  # an anonymous registration's, before a claim
    post_claim: list[str]


class RefreshToken(msgspec.Struct):
    value: str
    expires_at: str


class Grant(msgspec.Struct, kw_only=True):
    """An identity assertion to exchange at /oauth2/token, and (after a claim or refresh) the next refresh token."""

    assertion: str
    expires_at: str
    refresh_token: RefreshToken | UnsetType = UNSET


class Registered(msgspec.Struct, kw_only=True):
    id: str
    type: str
    identity: Grant | UnsetType = UNSET  # anonymous and an accepted ID-JAG: usable at once
    scopes: Scopes
    claim: ClaimOffer | UnsetType = UNSET  # none for an ID-JAG's: it is its person's already


class NeedsInteraction(ApiError):
    """An ID-JAG whose verified e-mail is an account not yet linked to its upstream identity: 401
    `interaction_required`, with the claim (and its attempt) the person completes to link them."""

    def __init__(self, offer: Registered) -> None:
        super().__init__(
            401,
            "interaction_required",
            "an account with this e-mail exists but is not linked to this identity: the person approves the claim at "
            "claim.attempt.verification_uri, then the agent completes it at /agent/identity/claim/complete",
            headers={"WWW-Authenticate": 'AgentAuth error="interaction_required"'},
        )
        self.offer = offer


class Refreshed(msgspec.Struct):
    id: str
    type: Literal["refresh"]
    identity: Grant


class ClaimStarted(msgspec.Struct):
    id: str
    type: Literal["service_auth"]
    attempt: Attempt


class Claimed(msgspec.Struct):
    id: str
    status: Literal["claimed"]
    identity: Grant


class AccessToken(msgspec.Struct):
    """The jwt-bearer grant's answer (RFC 6749 §5.1)."""

    access_token: str
    token_type: Literal["Bearer"]
    expires_in: int
    scope: str


def valid_email(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 254 and bool(_EMAIL.match(value.strip()))
