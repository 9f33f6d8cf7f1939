"""Who signed an S3 request: AWS Signature Version 4, checked on the WSGI environ of the media store's endpoint.

moto accepts any key pair, so without this any caller reached any organization's bucket. The endpoint now works
out the key a request was signed with (the `Authorization` header, or a presigned URL's query) and recomputes the
signature with that key's secret, as S3 does: the canonical request (method, path, sorted query, the signed
headers, the payload hash the client declared), the string to sign over its hash, and the HMAC chain of the date,
region and service in the request's own credential scope. Chunk signatures of a streamed upload are not checked;
its seed signature, which covers the headers, is. Refusals are S3's: `AccessDenied` for an unsigned request,
`InvalidAccessKeyId`, `SignatureDoesNotMatch`, `AuthorizationHeaderMalformed`.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Callable, Mapping
from urllib.parse import quote, unquote

import msgspec

ALGORITHM = "AWS4-HMAC-SHA256"
_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=(?P<credential>[^,\s]+)\s*,\s*SignedHeaders=(?P<signed>[^,\s]+)\s*,"
    r"\s*Signature=(?P<signature>[0-9a-f]{64})\s*$"
)
_SPACES = re.compile(r"\s+")

# A WSGI environ: its CGI variables are strings (PEP 3333), its `wsgi.*` keys are not; read through `environ_text`.
Environ = Mapping[str, object]


class Signed(msgspec.Struct, frozen=True):
    """A request whose signature checked out: the key that signed it."""

    access_key: str


class Refused(msgspec.Struct, frozen=True):
    """A request that is not signed, or not signed right: S3's error code and message, and the key it named."""

    code: str
    message: str
    access_key: str = ""


def check(environ: Environ, secret_of: Callable[[str], str | None]) -> Signed | Refused:
    """Whether the request in `environ` is signed with a key that `secret_of` knows (None: an unknown key)."""
    query = query_pairs(environ_text(environ, "QUERY_STRING"))
    params = dict(query)
    header = environ_text(environ, "HTTP_AUTHORIZATION")
    if params.get("X-Amz-Algorithm") is not None or "X-Amz-Signature" in params:
        if params.get("X-Amz-Algorithm") != ALGORITHM:
            return Refused("AuthorizationQueryParametersError", f"X-Amz-Algorithm must be {ALGORITHM}")
        credential = params.get("X-Amz-Credential", "")
        signed_headers = params.get("X-Amz-SignedHeaders", "")
        signature = params.get("X-Amz-Signature", "")
        amz_date = params.get("X-Amz-Date", "")
        payload = "UNSIGNED-PAYLOAD"
        query = [(k, v) for k, v in query if k != "X-Amz-Signature"]
    elif header:
        match = _AUTH.match(header)
        if match is None:
            return Refused("AuthorizationHeaderMalformed", "The authorization header is malformed")
        credential, signed_headers, signature = match["credential"], match["signed"], match["signature"]
        amz_date = environ_text(environ, "HTTP_X_AMZ_DATE")
        payload = environ_text(environ, "HTTP_X_AMZ_CONTENT_SHA256")
        if not payload:
            return Refused("InvalidRequest", "Missing required header for this request: x-amz-content-sha256")
    else:
        return Refused("AccessDenied", "Access Denied: the request is not signed")
    parts = credential.split("/")
    if len(parts) != 5 or parts[3] != "s3" or parts[4] != "aws4_request" or not re.fullmatch(r"\d{8}", parts[1]):
        return Refused("AuthorizationHeaderMalformed", f"The credential scope is malformed: {'/'.join(parts[1:])}")
    access_key, day, region = parts[0], parts[1], parts[2]
    if not re.fullmatch(r"\d{8}T\d{6}Z", amz_date) or not amz_date.startswith(day):
        return Refused("AuthorizationHeaderMalformed", "X-Amz-Date is missing or does not match the credential's date")
    secret = secret_of(access_key)
    if secret is None:
        message = "The AWS Access Key Id you provided does not exist in our records."
        return Refused("InvalidAccessKeyId", message, access_key)
    names = signed_headers.split(";")
    if "host" not in names or names != sorted(names):
        return Refused("AuthorizationHeaderMalformed", "SignedHeaders must be sorted and include host")
    canonical = "\n".join(
        [
            environ_text(environ, "REQUEST_METHOD"),
            _canonical_path(environ),
            "&".join(f"{_encode(k)}={_encode(v)}" for k, v in sorted(query)),
            "".join(f"{name}:{_header(environ, name)}\n" for name in names),
            signed_headers,
            payload,
        ]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = f"{ALGORITHM}\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    expected = hmac.new(signing_key(secret, day, region), to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        return Refused("SignatureDoesNotMatch", MISMATCH)
    return Signed(access_key)


MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check your key and signing method."
)


def signing_key(secret: str, day: str, region: str) -> bytes:
    """SigV4's key for one day, region and S3: the HMAC chain over the credential scope."""
    key = f"AWS4{secret}".encode()
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def presign(method: str, url: str, key: tuple[str, str], at: float, expires: int, region: str = "us-east-1") -> str:
    """A presigned URL (SigV4 query auth, `UNSIGNED-PAYLOAD`, only `host` signed) for `url` (`http://host/bucket/
    key`, path-style, the key as it should be stored), signed at `at`: the emulator's clock, so that the URL expires on
    it (`check` accepts what this makes; boto3 would sign at the wall clock)."""
    scheme, _, rest = url.partition("://")
    host, _, path = rest.partition("/")
    path = quote("/" + path, safe="/~")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(at))
    day = stamp[:8]
    scope = f"{day}/{region}/s3/aws4_request"
    query = sorted(
        [
            ("X-Amz-Algorithm", ALGORITHM),
            ("X-Amz-Credential", f"{key[0]}/{scope}"),
            ("X-Amz-Date", stamp),
            ("X-Amz-Expires", str(expires)),
            ("X-Amz-SignedHeaders", "host"),
        ]
    )
    canonical_query = "&".join(f"{_encode(k)}={_encode(v)}" for k, v in query)
    canonical = "\n".join([method.upper(), path, canonical_query, f"host:{host}\n", "host", "UNSIGNED-PAYLOAD"])
    to_sign = f"{ALGORITHM}\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    signature = hmac.new(signing_key(key[1], day, region), to_sign.encode(), hashlib.sha256).hexdigest()
    return f"{scheme}://{host}{path}?{canonical_query}&X-Amz-Signature={signature}"


def query_pairs(raw: str) -> list[tuple[str, str]]:
    """A query string's pairs, percent-decoded ('+' stays '+': S3 signs it so, unlike a form)."""
    pairs = []
    for part in raw.split("&"):
        if part:
            name, _, value = part.partition("=")
            pairs.append((unquote(name, errors="surrogateescape"), unquote(value, errors="surrogateescape")))
    return pairs


_ESCAPE = re.compile(r"%[0-9a-fA-F]{2}")


def sent_path(environ: Environ) -> str:
    """The request target's path as the client sent (and signed) it: SigV4's and SigV2's starting point."""
    raw = environ_text(environ, "RAW_URI") or environ_text(environ, "REQUEST_URI")
    if raw:
        path = raw.split("?", 1)[0]
        if "://" in path:  # an absolute-form request target
            path = "/" + path.split("://", 1)[1].partition("/")[2]
    else:  # PATH_INFO holds the decoded path's bytes as latin-1 (PEP 3333)
        path = quote(environ_text(environ, "PATH_INFO").encode("latin-1"), safe="/~")
    return path


def _canonical_path(environ: Environ) -> str:
    """The path as the client sent (and signed) it, escapes kept as they are (a key's encoded '/' is not a '/'),
    and anything a client left unencoded encoded."""
    path = sent_path(environ)
    path = _ESCAPE.sub(lambda m: m.group(0).upper(), path)
    return quote(path.encode("latin-1", "replace"), safe="/~%") or "/"  # the target's bytes, as latin-1 holds them


def _encode(value: str) -> str:
    return quote(value.encode("utf-8", "surrogateescape"), safe="-_.~")


def _header(environ: Environ, name: str) -> str:
    key = name.upper().replace("-", "_")
    value = environ_text(environ, key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{key}")
    return _SPACES.sub(" ", value.strip())


def environ_text(environ: Environ, key: str) -> str:
    """A CGI variable of the environ (a string, PEP 3333); "" when it is not there."""
    value = environ.get(key, "")
    return value if isinstance(value, str) else str(value)
