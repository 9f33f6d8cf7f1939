"""The posted forms (`application/x-www-form-urlencoded`) the identity provider's endpoints take, read into each
operation's type (core/contract.form: the same type is the operation's requestBody), and RFC 6749's error body, in
which the OAuth endpoints refuse them.

Two readings, as the endpoints' clients send them:
- `oauth_form`: the OAuth endpoints' (RFC 6749 §3.2, RFC 7009, RFC 8693): only in its media type, UTF-8, and each
  field of the type sent at most once (RFC 6749 §3.1: "parameters MUST NOT be included more than once").
- `page_form`: what a person's browser posts (the claim page, the sign-in page, `pxt login`'s device endpoints):
  the first value of each field, in any media type; the pages' types give every field a default (a page answers
  what is missing itself).

Fields are read in the type's order, a missing one as null, so the first wrong or missing field is the one refused,
by the refusal the route names for it (`refusals`, as the registration bodies' are: identity.decode).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, TypeVar
from urllib.parse import parse_qs

import msgspec

from emulator.core import contract, html, openapi
from emulator.core.errors import INVALID_REQUEST
from emulator.identity.wire import Refusals, decode

T = TypeVar("T", bound=msgspec.Struct)

# A person's decision on a page: any other value approves, as the pages always read it; the document lists the two.
Decision = Annotated[str, msgspec.Meta(extra_json_schema={"enum": ["approve", "deny"]})]


class OAuthError(msgspec.Struct):
    """An `/oauth2/*` (and `pxt login` device endpoint) error, RFC 6749's."""

    error: str
    error_description: str


def oauth_fields(content_type: str, body: bytes, names: tuple[str, ...]) -> dict[str, str]:
    """An OAuth endpoint's form: refused unless in its media type and UTF-8, or with one of `names` sent twice."""
    if not content_type.startswith(openapi.FORM):
        raise INVALID_REQUEST(
            "this endpoint takes application/x-www-form-urlencoded (not "
            + (content_type or "an empty content type")
            + ")",
        )
    try:
        parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise INVALID_REQUEST("the form is not UTF-8") from None
    for name in names:
        if len(parsed.get(name, ())) > 1:
            raise INVALID_REQUEST(f"{name} was sent more than once")
    return {name: values[0] for name, values in parsed.items()}


def names(type_: type[msgspec.Struct]) -> tuple[str, ...]:
    return tuple(field.encode_name for field in msgspec.structs.fields(type_))


def of(fields: Mapping[str, str], type_: type[T], refusals: Refusals) -> T:
    """`fields` as `type_`, read in its field order (a required one missing read as null): the first field that is
    wrong or missing is refused, by `refusals` (else as invalid_request, in msgspec's words)."""
    ordered: dict[str, object] = {}
    for field in msgspec.structs.fields(type_):
        if field.encode_name in fields:
            ordered[field.encode_name] = fields[field.encode_name]
        elif field.required:
            ordered[field.encode_name] = None
    return decode(ordered, type_, refusals)


def oauth_form(type_: type[T], refusals: Refusals | None = None) -> openapi.BodyDependency:
    """`dependencies={name: oauth_form(T)}`: the handler's `name: T` is its OAuth form."""
    read = oauth_reader(type_, refusals)
    return contract.form(type_, lambda headers, raw: read(headers.get("content-type", ""), raw))


def oauth_reader(type_: type[T], refusals: Refusals | None = None) -> Callable[[str, bytes], T]:
    """(content type, body) → the form as `type_`, refused as `oauth_form`'s is (for a caller outside the router)."""
    fields, refused = names(type_), refusals or {}
    return lambda content_type, raw: of(oauth_fields(content_type, raw, fields), type_, refused)


def page_form(type_: type[T], refusals: Refusals | None = None) -> openapi.BodyDependency:
    """`dependencies={name: page_form(T)}`: a form as a browser (or `pxt login`) posts it, as `type_`."""
    refused = refusals or {}

    def read(_: Mapping[str, str], raw: bytes) -> T:
        return of(html.form_fields(raw), type_, refused)

    return contract.form(type_, read)
