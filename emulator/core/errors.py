"""One error type for every refusal, and the catalogue of refusals: each kind named once with its status and code.

Each surface renders an error in the format its clients parse, and shows its code only as far as they read one:
the site's envelope (and the operator API's) shows every code but narrows a 400 to the spec's four (`site/errors.py`),
the control plane names only a plan's (`cloud/app.py`; any other refusal is its status's phrase), the identity
provider every code (OAuth's, the registration protocol's and WorkOS's), pages and the gateways none.

A code belongs to one status: no two statuses share one, and a refusal known only by its status (the framework's
own, an injected fault) shows that status's code (`code_for`). tests/test_error_catalogue.py walks the catalogue.
"""

from __future__ import annotations

import errno
import sqlite3
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path


class ApiError(Exception):
    """A refusal with an HTTP status, a machine-readable code and a message a person can act on."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retryable = retryable
        self.headers = headers or {}


@dataclass(frozen=True, slots=True)
class Failure:
    """A kind of refusal; called with a message (and what a caller may need: retryable, headers), the error."""

    status: int
    code: str

    def __call__(self, message: str, *, retryable: bool = False, headers: dict[str, str] | None = None) -> ApiError:
        return ApiError(self.status, self.code, message, retryable=retryable, headers=headers)


# --- the catalogue ------------------------------------------------------------------------------------------

BAD_REQUEST = Failure(400, "bad_request")
UNAUTHORIZED = Failure(401, "unauthorized")
FORBIDDEN = Failure(403, "forbidden")
NOT_FOUND = Failure(404, "not_found")
METHOD_NOT_ALLOWED = Failure(405, "method_not_allowed")
REQUEST_TIMEOUT = Failure(408, "request_timeout")  # a request not whole by its deadline (core/httpserver.py)
CONFLICT = Failure(409, "conflict")
GONE = Failure(410, "gone")  # a claim link or sign-in code that is no more
TOO_LARGE = Failure(413, "too_large")
UNSUPPORTED_MEDIA_TYPE = Failure(415, "unsupported_media_type")
UNPROCESSABLE = Failure(422, "unprocessable")
RATE_LIMITED = Failure(429, "rate_limited")
INTERNAL = Failure(500, "internal")
UNAVAILABLE = Failure(503, "service_unavailable")
INSUFFICIENT_STORAGE = Failure(507, "insufficient_storage")

# The code of a refusal known only by its status (the framework's own, an injected fault): the catalogue's for it.
_BY_STATUS = {
    f.status: f.code
    for f in (
        BAD_REQUEST,
        UNAUTHORIZED,
        FORBIDDEN,
        NOT_FOUND,
        METHOD_NOT_ALLOWED,
        CONFLICT,
        GONE,
        REQUEST_TIMEOUT,
        TOO_LARGE,
        UNSUPPORTED_MEDIA_TYPE,
        UNPROCESSABLE,
        RATE_LIMITED,
        INTERNAL,
        UNAVAILABLE,
        INSUFFICIENT_STORAGE,
    )
}


def code_for(status: int) -> str:
    """The catalogue's code for a status; a status it has none for, its phrase (`418` → `im_a_teapot`)."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    try:
        return HTTPStatus(status).phrase.lower().replace(" ", "_").replace("-", "_").replace("'", "")
    except ValueError:
        return "error"


# The site's: a body of /ask that is not JSON.
INVALID_JSON = Failure(400, "invalid_json")

# The control plane's: a client too old to be served; a plan's refusals (`X-Pixeltable-Error-Code`).
CLIENT_TOO_OLD = Failure(400, "client_too_old")
PLAN_LIMIT = Failure(402, "PLAN_LIMIT")
STORE_FULL = Failure(402, "STORE_FULL")

# The identity provider's, which its clients read: OAuth 2.0's (RFC 6749 §5.2, RFC 6750 §3.1, RFC 8628 §3.5) ...
INVALID_REQUEST = Failure(400, "invalid_request")
INVALID_CLIENT = Failure(400, "invalid_client")
INVALID_GRANT = Failure(400, "invalid_grant")
INVALID_SCOPE = Failure(400, "invalid_scope")
INVALID_TARGET = Failure(400, "invalid_target")  # RFC 8693: a token exchange for an audience the issuer does not serve
UNSUPPORTED_GRANT_TYPE = Failure(400, "unsupported_grant_type")
UNSUPPORTED_RESPONSE_TYPE = Failure(400, "unsupported_response_type")
AUTHORIZATION_PENDING = Failure(400, "authorization_pending")
ACCESS_DENIED = Failure(400, "access_denied")
EXPIRED_TOKEN = Failure(400, "expired_token")
INVALID_TOKEN = Failure(401, "invalid_token")
SERVER_ERROR = Failure(500, "server_error")
# ... and the agent registration protocol's.
ISSUER_NOT_ENABLED = Failure(400, "issuer_not_enabled")
# An ID-JAG that needs the person: their account exists but is not linked to the upstream identity, or they signed
# in upstream too long ago (both with `WWW-Authenticate: AgentAuth error="…"`).
INTERACTION_REQUIRED = Failure(401, "interaction_required")
LOGIN_REQUIRED = Failure(401, "login_required")
INVALID_LOGIN_HINT = Failure(400, "invalid_login_hint")
INVALID_REFRESH_TOKEN = Failure(400, "invalid_refresh_token")
INVALID_CLAIM_TOKEN = Failure(401, "invalid_claim_token")
INVALID_USER_CODE = Failure(401, "invalid_user_code")
ANONYMOUS_REGISTRATION_DISABLED = Failure(403, "anonymous_registration_disabled")
SERVICE_AUTH_REGISTRATION_DISABLED = Failure(403, "service_auth_registration_disabled")
CLAIM_DENIED = Failure(403, "claim_denied")
ALREADY_CLAIMED = Failure(409, "already_claimed")
CLAIM_NOT_CONFIRMED = Failure(409, "claim_not_confirmed")
CLAIM_EXPIRED = Failure(410, "claim_expired")
CLAIM_REVOKED = Failure(410, "claim_revoked")
USER_CODE_EXPIRED = Failure(410, "user_code_expired")
RATE_LIMIT_EXCEEDED = Failure(429, "rate_limit_exceeded")
# The service side's agents API (WorkOS's `{message, code}`): a thing it names that does not exist.
ENTITY_NOT_FOUND = Failure(404, "entity_not_found")


def disk_full(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is a full disk: the OS's ENOSPC or EDQUOT, or SQLite's "database or disk
    is full"."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(cause, sqlite3.OperationalError) and "disk is full" in str(cause):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def full_disk(state_dir: Path) -> ApiError:
    """The answer while the state dir's disk is full: 507, which names it; the write did not happen."""
    return INSUFFICIENT_STORAGE(
        f"the disk of the emulator's state dir ({state_dir}) is full, so nothing was changed; free some space and "
        "send the request again",
        retryable=True,
        headers={"Retry-After": "10"},
    )
