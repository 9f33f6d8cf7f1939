"""Decoding JSON from outside (request bodies, the header and claims of a token): every way it can fail to be JSON
becomes one error type, and nesting deeper than MAX_DEPTH is refused before any decoder recurses into it.

Python's and msgspec's decoders recurse once per level: 50,000 levels raise RecursionError (a 500 and a traceback
where nobody catches it). `check_depth` measures the depth without recursing, in C (strings cut out, every other
byte but brackets dropped, the rest matched once against pairs nested at most MAX_DEPTH deep), in time linear in
the body; the rest of the emulator decodes only after it (`decode`, `token_parts`).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias, TypeVar, overload

import msgspec

MAX_DEPTH = 64  # no body or token the emulator takes nests deeper than a handful of levels

T = TypeVar("T")

# Any JSON value, what `decode` gives without a type, for what is open by nature (a JSON Schema, an OpenAPI
# document, a service's answer). The containers are read-only (covariant), so that a list of schemas or a dict of
# strings is a Json; code that changes one narrows it first (`isinstance(v, dict)`: decoded JSON is dicts and lists).
# For the type checker only: at run time it is a string, so no msgspec struct can have a field of it.
Json: TypeAlias = "str | int | float | bool | Sequence[Json] | Mapping[str, Json] | None"


class NotJson(ValueError):
    """The body is not valid JSON (syntax, encoding, nesting depth) or not of the expected shape."""


# A string, or one never closed (to the end: its decoder refuses it). Once at a quote it cannot fail, and its repeats
# are possessive: one walk of the text, whatever it holds.
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.DOTALL)
_BRACKETS = bytes.maketrans(b"[{]}", b"(())")  # with every other byte dropped: the nesting alone
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[{]}")


def _paired_within(depth: int) -> re.Pattern[bytes]:
    """Pairs of brackets nested at most `depth` deep, and nothing else: a pattern with one level per level (no
    recursion), its repeats possessive, so the engine walks the text once and keeps no backtracking state."""
    pattern = ""
    for _ in range(depth):
        pattern = rf"(?:\({pattern}\))*+"
    return re.compile(pattern.encode())


_PAIRED = _paired_within(MAX_DEPTH)


def check_depth(data: bytes | str) -> None:
    """Raise NotJson when `data` nests arrays and objects deeper than MAX_DEPTH (brackets inside strings do not
    count), or, having more than MAX_DEPTH brackets, does not pair them (not JSON either way)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:  # most bodies: too few brackets to be too deep
        return
    if b'"' in raw:
        raw = _STRING.sub(b"", raw)
    if _PAIRED.fullmatch(raw.translate(_BRACKETS, _NOT_BRACKETS)) is None:
        raise NotJson(f"JSON nested deeper than {MAX_DEPTH} levels (or its brackets do not pair)")


@overload
def decode(body: bytes | str) -> object: ...
@overload
def decode(body: bytes | str, type: type[T]) -> T: ...
def decode(body: bytes | str, type: Any = Any) -> Any:
    """`body` decoded strictly as `type` (msgspec's rules: no extra coercion), after the depth bound; without a type,
    any JSON value (`object`: the caller narrows it). NotJson for anything else, with msgspec's words for it."""
    check_depth(body)
    try:
        return msgspec.json.decode(body, type=type)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise NotJson(str(e)) from None
    except RecursionError:  # deeper than the interpreter's limit although within MAX_DEPTH: not possible today
        raise NotJson("JSON nested too deeply") from None


def decoder(type_: type[T], refuse: Callable[[str], Exception], *, empty: bytes = b"null") -> Callable[[bytes], T]:
    """A request body's reader: `decode(body, type_)`, an empty body read as `empty`, and what NotJson says raised as
    `refuse(message)`, the origin's own refusal (its error format and words). What routes' typed bodies go through
    (core/contract.body)."""

    def read(body: bytes) -> T:
        try:
            return decode(body or empty, type_)
        except NotJson as e:
            raise refuse(str(e)) from None

    return read


def b64url(part: str) -> bytes:
    """A base64url segment of a JWS (unpadded), decoded; ValueError (binascii.Error) when it is not one."""
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


JsonObject = dict[str, object]


def token_parts(token: str) -> tuple[JsonObject, JsonObject] | None:
    """The header and claims of a compact JWS (three dot-separated parts), decoded as JSON objects with the depth
    bound, the signature unchecked; None when it is not three parts. NotJson when a part is not a base64url JSON
    object."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        header, claims = b64url(parts[0]), b64url(parts[1])
    except ValueError as e:
        raise NotJson(f"not base64url: {e}") from None
    return decode(header, JsonObject), decode(claims, JsonObject)


def check_token(token: str) -> None:
    """Raise NotJson when a JWS's header or claims nest deeper than MAX_DEPTH: before a JOSE library (which decodes
    them with the standard library's recursive decoder) sees it. Anything else is left to that library."""
    parts = token.split(".")
    for part in parts[:2] if len(parts) == 3 else ():
        try:
            raw = b64url(part)
        except ValueError:
            return  # not base64url: the library refuses it
        check_depth(raw)
