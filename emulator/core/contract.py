"""The route toolkit: how a handler declares what it takes, what it answers and how it refuses, so that its origin's
OpenAPI document (core/openapi.py) says so and a client generated from it is typed, while the bytes on the wire stay
the project's own.

- **Body**: `dependencies={"move": body(ClockMove, read)}` and a parameter `move: ClockMove`. `read` is the
  origin's decoder (core/jsonbody.decoder: the depth bound, msgspec's strict rules, the origin's refusal in its own
  words), not Litestar's `data` (whose refusals are Litestar's). The same type is the operation's requestBody.
  (Not `data` or `body` as the name: Litestar reserves both.) A form: `form(T, read)`, `read` seeing the headers too.
- **Answer**: return the struct, or `Response[T]` when the answer sets headers; Litestar encodes it with msgspec
  (the bytes `msgspec.json.encode` gives, UNSET fields left out) and shows its schema as the 2xx.
- **Errors**: `responses=errors(BAD_REQUEST, ...)`, the failures (core/errors.py) the operation may answer; their
  body is the one the route's exception handler writes, an ErrorShape each origin declares (`error_shape`) and
  passes to `openapi.openapi_config(errors=...)`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from litestar import Request
from litestar.openapi import ResponseSpec

from emulator.core import openapi
from emulator.core.errors import Failure


def body(type_: Any, read: Callable[[bytes], object], *media_types: str) -> openapi.BodyDependency:
    """The dependency that gives a handler its body as `type_`, read by `read` (which refuses in the origin's
    words); the document shows `type_` as the requestBody in each media type (JSON by default)."""

    async def provide(request: Request[Any, Any, Any]) -> Any:
        return read(await request.body())

    (declared,) = openapi.body(type_, *media_types).values()
    return openapi.BodyDependency(provide, declared)


def form(type_: Any, read: Callable[[Mapping[str, str], bytes], object]) -> openapi.BodyDependency:
    """`body` for a posted form (`application/x-www-form-urlencoded`): `read` gets the request's headers too (the
    content type it checks, a credential sent where the form should carry it) and refuses in the origin's words."""

    async def provide(request: Request[Any, Any, Any]) -> Any:
        return read(request.headers, await request.body())

    (declared,) = openapi.body(type_, openapi.FORM).values()
    return openapi.BodyDependency(provide, declared)


def errors(*failures: Failure) -> dict[int, ResponseSpec]:
    """`responses=` for the refusals an operation may answer (one per status; the description names their codes).
    The body is left to the document's finishing (core/openapi.finish), which takes it from the route's
    exception handler, so it is the body really sent."""
    codes: dict[int, list[str]] = {}
    for failure in failures:
        codes.setdefault(failure.status, []).append(failure.code)
    return {
        status: ResponseSpec(data_container=None, description=", ".join(dict.fromkeys(named)))
        for status, named in sorted(codes.items())
    }


def error_shape(
    type_: Any,
    *writers: Callable[..., Any],
    media_type: str = openapi.JSON,
    headers: Mapping[str, str] | None = None,
    description: str = "a refusal",
) -> openapi.ErrorShape:
    """An origin's error body: `type_` (a msgspec type; `str` for text) in `media_type`, written by the exception
    handlers `writers`; `headers` it may carry (name → when)."""
    if type_ is str:
        schema, components = {"type": "string"}, {}
    else:
        (schema,), components = openapi.schema_of(type_)
    return openapi.ErrorShape(media_type, schema, components, dict(headers or {}), writers, description)
