"""Who signed an S3 request with Signature Version 2 (HMAC-SHA1): a presigned URL's query (`AWSAccessKeyId`,
`Signature`, `Expires`), which is what boto3 and s3fs make by default in us-east-1, or an `Authorization: AWS
key:signature` header (boto3's `signature_version="s3"`).

S3 still takes both in the regions that had them. The string to sign is S3's: the method, `Content-MD5`,
`Content-Type`, the date (a presigned URL's `Expires`; a header-signed request's `Date`, or nothing when it sends
`x-amz-date`), the `x-amz-*` headers (a presigned URL may carry them in its query), and the resource: the path as
the client sent it and the subresources S3 signs. Expiry is not checked here: `store._refuse_expired` reads
`Expires` on the emulator's clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Callable
from urllib.parse import unquote

from emulator.media.sigv4 import MISMATCH, Environ, Refused, Signed, environ_text, query_pairs, sent_path

# The query parameters S3 signs as part of the resource (botocore's list, which is S3's).
SUBRESOURCES = frozenset(
    {
        "accelerate",
        "acl",
        "analytics",
        "cors",
        "defaultObjectAcl",
        "delete",
        "inventory",
        "lifecycle",
        "location",
        "logging",
        "metrics",
        "notification",
        "object-lock",
        "partNumber",
        "policy",
        "replication",
        "requestPayment",
        "response-cache-control",
        "response-content-disposition",
        "response-content-encoding",
        "response-content-language",
        "response-content-type",
        "response-expires",
        "restore",
        "select",
        "select-type",
        "storageClass",
        "tagging",
        "torrent",
        "uploadId",
        "uploads",
        "versionId",
        "versioning",
        "versions",
        "website",
    }
)
_HEADER = re.compile(r"^AWS (?P<key>[^:\s]+):(?P<signature>\S+)$")


def signed_with_v2(environ: Environ) -> bool:
    """Whether the request claims a SigV2 signature (its query's or its header's)."""
    params = dict(query_pairs(environ_text(environ, "QUERY_STRING")))
    return (
        "AWSAccessKeyId" in params
        or "Signature" in params
        or environ_text(environ, "HTTP_AUTHORIZATION").startswith("AWS ")
    )


def check(environ: Environ, secret_of: Callable[[str], str | None]) -> Signed | Refused:
    """Whether the SigV2-signed request in `environ` is signed with a key that `secret_of` knows."""
    query = query_pairs(environ_text(environ, "QUERY_STRING"))
    params = dict(query)
    header = environ_text(environ, "HTTP_AUTHORIZATION")
    if "AWSAccessKeyId" in params or "Signature" in params:
        access_key, signature, expires = params.get("AWSAccessKeyId"), params.get("Signature"), params.get("Expires")
        if not access_key or not signature or not expires:
            message = "Query-string authentication requires the Signature, Expires and AWSAccessKeyId parameters"
            return Refused("AccessDenied", message)
        date = expires
    else:
        match = _HEADER.match(header)
        if match is None:
            return Refused(
                "InvalidArgument", "Authorization header is invalid -- one and only one ' ' (space) required"
            )
        access_key, signature = match["key"], match["signature"]
        date = "" if environ_text(environ, "HTTP_X_AMZ_DATE") else environ_text(environ, "HTTP_DATE")
        if not date and not environ_text(environ, "HTTP_X_AMZ_DATE"):
            return Refused("AccessDenied", "AWS authentication requires a valid Date or x-amz-date header")
    secret = secret_of(access_key)
    if secret is None:
        message = "The AWS Access Key Id you provided does not exist in our records."
        return Refused("InvalidAccessKeyId", message, access_key)
    digest = hmac.new(secret.encode(), string_to_sign(environ, query, date).encode(), hashlib.sha1).digest()
    if not hmac.compare_digest(base64.b64encode(digest).decode(), signature):
        return Refused("SignatureDoesNotMatch", MISMATCH)
    return Signed(access_key)


def string_to_sign(environ: Environ, query: list[tuple[str, str]], date: str) -> str:
    """S3's SigV2 string to sign for the request (a presigned URL's `x-amz-*`, `Content-Type` and `Content-MD5`
    query parameters count as the headers they stand for, as boto3 moves them there)."""
    in_query = {k.lower(): v for k, v in query}
    amz: dict[str, list[str]] = {}
    for key, value in environ.items():
        if key.startswith("HTTP_X_AMZ_") and isinstance(value, str):
            amz.setdefault(key[5:].lower().replace("_", "-"), []).append(value.strip())
    for name, value in in_query.items():
        if name.startswith("x-amz-") and name not in amz:
            amz[name] = [value.strip()]
    lines = [
        environ_text(environ, "REQUEST_METHOD"),
        environ_text(environ, "HTTP_CONTENT_MD5") or in_query.get("content-md5", ""),
        environ_text(environ, "CONTENT_TYPE") or in_query.get("content-type", ""),
        date,
        *(f"{name}:{','.join(amz[name])}" for name in sorted(amz)),
    ]
    return "\n".join([*lines, _resource(environ)])


def _resource(environ: Environ) -> str:
    """The path as the client sent (and signed) it, and the subresources S3 signs, sorted, their values decoded."""
    path = sent_path(environ)
    if path.count("/") == 1 and len(path) > 1:  # a bucket alone: S3 (and boto3) sign it as `/bucket/`
        path += "/"
    # As signed: a name as it stands in the query, its value decoded, `=` kept when the query has one.
    subs = [part.split("=", 1) for part in environ_text(environ, "QUERY_STRING").split("&")]
    subs = sorted((s for s in subs if s[0] in SUBRESOURCES), key=lambda s: s[0])
    if not subs:
        return path
    return path + "?" + "&".join(s[0] if len(s) == 1 else f"{s[0]}={unquote(s[1])}" for s in subs)
