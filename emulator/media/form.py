"""A browser-form upload (S3's POST Object, what boto3's `generate_presigned_post` prepares): who signed its policy,
and whether the form keeps to it.

The form carries a policy document (base64 JSON: an `expiration` and a list of conditions) and a signature over
that base64 text, SigV2's (`AWSAccessKeyId`, `signature`: HMAC-SHA1) or SigV4's (`x-amz-algorithm`,
`x-amz-credential`, `x-amz-date`, `x-amz-signature`: the scope's signing key over the policy). As S3 does, the
policy's expiration is read on the emulator's clock, every condition must hold (`{"field": value}`, `["eq",
"$field", value]`, `["starts-with", "$field", prefix]`, `["content-length-range", min, max]`, and `bucket` names the
bucket posted to), and every field but the signature's own, `policy`, `file` and `x-ignore-*` must be named by a
condition. Field names are matched without regard to case. Refusals are S3's: 403 `AccessDenied` ("Invalid
according to Policy: ..."), `SignatureDoesNotMatch`, `InvalidAccessKeyId`; 400 `InvalidPolicyDocument`,
`InvalidArgument`, `EntityTooLarge`, `EntityTooSmall`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Callable, Mapping
from datetime import datetime

import msgspec

from emulator.media.sigv4 import ALGORITHM, MISMATCH, Refused, Signed, signing_key

# The fields no condition has to name: the signature's own, the policy, the file and what the form says to ignore.
_EXEMPT = frozenset({"policy", "signature", "awsaccesskeyid", "x-amz-signature", "file"})


class Posted(msgspec.Struct, frozen=True):
    """What a form brought: its fields (names lowercased, the first value of each), and its file's name and size."""

    fields: dict[str, str]
    file_name: str | None
    file_size: int | None


def check(
    posted: Posted, bucket: str, secret_of: Callable[[str], str | None], now: float
) -> tuple[Signed, str] | Refused:
    """Whether the form posted to `bucket` is signed with a key `secret_of` knows and keeps to its policy; if so the
    key that signed it and the object key it writes (`${filename}` replaced by the file's name, as S3 does)."""
    fields = posted.fields
    if "key" not in fields:
        message = (
            "Bucket POST must contain a field named 'key'.  If it is specified, please check the order of the fields."
        )
        return Refused("InvalidArgument", message)
    if posted.file_size is None:
        return Refused("InvalidArgument", "POST requires exactly one file upload per request.")
    verdict = _signature(fields, secret_of)
    if isinstance(verdict, Refused):
        return verdict
    policy = _policy(fields["policy"])
    if isinstance(policy, Refused):
        return policy
    expiration, conditions = policy
    if now > expiration:
        return Refused("AccessDenied", "Invalid according to Policy: Policy expired.")
    named: set[str] = set()
    for condition in conditions:
        refused = _holds(condition, fields, bucket, posted.file_size, named)
        if refused is not None:
            return refused
    extra = sorted(n for n in fields if n not in _EXEMPT and n not in named and not n.startswith("x-ignore-"))
    if extra:
        return Refused("AccessDenied", f"Invalid according to Policy: Extra input fields: {', '.join(extra)}")
    name = (posted.file_name or "").replace("\\", "/").rsplit("/", 1)[-1]
    return verdict, fields["key"].replace("${filename}", name)


def _signature(fields: Mapping[str, str], secret_of: Callable[[str], str | None]) -> Signed | Refused:
    """The key that signed the policy (SigV4's fields or SigV2's), its signature recomputed."""
    if "x-amz-algorithm" in fields or "x-amz-credential" in fields or "x-amz-signature" in fields:
        if fields.get("x-amz-algorithm") != ALGORITHM:
            return Refused("InvalidArgument", f"x-amz-algorithm must be {ALGORITHM}")
        missing = [n for n in ("x-amz-credential", "x-amz-date", "x-amz-signature", "policy") if not fields.get(n)]
        if missing:
            return Refused("InvalidArgument", f"Bucket POST must contain a field named '{missing[0]}'.")
        parts = fields["x-amz-credential"].split("/")
        if len(parts) != 5 or parts[3] != "s3" or parts[4] != "aws4_request" or not re.fullmatch(r"\d{8}", parts[1]):
            return Refused("InvalidArgument", f"The credential scope is malformed: {'/'.join(parts[1:])}")
        access_key, day, region = parts[0], parts[1], parts[2]
        if not fields["x-amz-date"].startswith(day):
            return Refused("InvalidArgument", "x-amz-date does not match the credential's date")
        secret = secret_of(access_key)
        if secret is None:
            return _unknown(access_key)
        expected = hmac.new(signing_key(secret, day, region), fields["policy"].encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, fields["x-amz-signature"]):
            return Refused("SignatureDoesNotMatch", MISMATCH)
        return Signed(access_key)
    if "awsaccesskeyid" in fields or "signature" in fields:
        missing = [n for n in ("awsaccesskeyid", "signature", "policy") if not fields.get(n)]
        if missing:
            name = {"awsaccesskeyid": "AWSAccessKeyId"}.get(missing[0], missing[0])
            return Refused("InvalidArgument", f"Bucket POST must contain a field named '{name}'.")
        secret = secret_of(fields["awsaccesskeyid"])
        if secret is None:
            return _unknown(fields["awsaccesskeyid"])
        digest = hmac.new(secret.encode(), fields["policy"].encode(), hashlib.sha1).digest()
        if not hmac.compare_digest(base64.b64encode(digest).decode(), fields["signature"]):
            return Refused("SignatureDoesNotMatch", MISMATCH)
        return Signed(fields["awsaccesskeyid"])
    return Refused("AccessDenied", "Access Denied: the form is not signed (no policy signature)")


def _unknown(access_key: str) -> Refused:
    return Refused(
        "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.", access_key
    )


def _policy(encoded: str) -> tuple[float, list[object]] | Refused:
    """The policy's expiration (a timestamp) and conditions, or S3's refusal of a document it cannot read."""
    try:
        document = json.loads(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError):
        return Refused("InvalidPolicyDocument", "Invalid Policy: Invalid JSON.")
    if not isinstance(document, dict):
        return Refused("InvalidPolicyDocument", "Invalid Policy: Invalid JSON.")
    raw, conditions = document.get("expiration"), document.get("conditions", [])
    if not isinstance(raw, str):
        return Refused("InvalidPolicyDocument", "Invalid Policy: Policy missing expiration.")
    try:
        expiration = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return Refused("InvalidPolicyDocument", f"Invalid Policy: Invalid 'expiration' value: '{raw}'")
    if expiration.tzinfo is None or not isinstance(conditions, list):
        return Refused("InvalidPolicyDocument", "Invalid Policy: Invalid 'expiration' or 'conditions'.")
    return expiration.timestamp(), conditions


def _holds(condition: object, fields: Mapping[str, str], bucket: str, size: int, named: set[str]) -> Refused | None:
    """None when the condition holds for the form (the fields it names added to `named`); else S3's refusal."""
    if isinstance(condition, dict):
        for name, value in condition.items():
            if not isinstance(name, str) or not isinstance(value, str):
                return _invalid(condition)
            if not _equals(name.lower(), value, fields, bucket, named):
                return _failed(["eq", f"${name}", value])
        return None
    if not isinstance(condition, list) or len(condition) != 3 or not isinstance(condition[0], str):
        return _invalid(condition)
    op = condition[0].lower()
    if op == "content-length-range":
        low, high = condition[1], condition[2]
        if not isinstance(low, int) or not isinstance(high, int):
            return _invalid(condition)
        if size > high:
            return Refused("EntityTooLarge", "Your proposed upload exceeds the maximum allowed size")
        if size < low:
            return Refused("EntityTooSmall", "Your proposed upload is smaller than the minimum allowed size")
        return None
    subject, value = condition[1], condition[2]
    if op not in ("eq", "starts-with") or not isinstance(subject, str) or not subject.startswith("$"):
        return _invalid(condition)
    if not isinstance(value, str):
        return _invalid(condition)
    name = subject[1:].lower()
    if op == "eq":
        holds = _equals(name, value, fields, bucket, named)
    else:
        named.add(name)
        actual = bucket if name == "bucket" else fields.get(name)
        holds = actual is not None and actual.startswith(value)
    return None if holds else _failed(condition)


def _equals(name: str, value: str, fields: Mapping[str, str], bucket: str, named: set[str]) -> bool:
    named.add(name)
    return (bucket if name == "bucket" else fields.get(name)) == value


def _failed(condition: object) -> Refused:
    return Refused("AccessDenied", f"Invalid according to Policy: Policy Condition failed: {json.dumps(condition)}")


def _invalid(condition: object) -> Refused:
    return Refused("InvalidPolicyDocument", f"Invalid Policy: Invalid Condition: {json.dumps(condition)[:200]}")
