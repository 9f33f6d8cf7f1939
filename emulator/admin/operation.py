"""An operator route made from its op (admin/ops.py): `@operation(ops.CLOCK_MOVE, body="move")` gives the route the
op's method and path, reads its body as the op's body type (`operator_body`: the operator's decoder, its refusals
word for word), and declares its errors; at import it checks that the handler's body parameter and its answer are
the op's types, so a route and its op cannot disagree (tests/test_operator_ops.py holds them one to one).
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Mapping
from types import UnionType
from typing import Any, TypeVar, get_args, get_origin

from litestar import Response, delete, get, post
from litestar.di import Provide
from litestar.handlers import HTTPRouteHandler
from litestar.response import File, Stream

from emulator.admin.ops import JSON, Op
from emulator.core import contract, jsonbody, openapi
from emulator.core.errors import (
    BAD_REQUEST,
    FORBIDDEN,
    TOO_LARGE,
    UNAUTHORIZED,
    UNSUPPORTED_MEDIA_TYPE,
    Failure,
)

T = TypeVar("T")

# What the operator router's guard (core/boundary.py, again in admin/routes.operator_guard) may answer on any
# operation: no or a wrong admin token, a Host or Origin that is not this machine's.
GUARDED = (UNAUTHORIZED, FORBIDDEN)
# And on one that takes a body: not its media type, too large, or not the body it reads.
WITH_BODY = (BAD_REQUEST, UNSUPPORTED_MEDIA_TYPE, TOO_LARGE)

_ROUTE = {"GET": get, "POST": post, "DELETE": delete}


def _decoder(type_: type[T]) -> Callable[[bytes], T]:
    """The one way an operator body is read: as `type_`, empty as `{}`, refused as a 400 with msgspec's words."""
    return jsonbody.decoder(type_, BAD_REQUEST, empty=b"{}")


def decode(body: bytes, type_: type[T]) -> T:
    """An operator body as `type_` (empty reads as `{}`), refused as a 400 in the operator's envelope with msgspec's
    words. A route that takes its body typed gets it read the same way, through `operator_body`."""
    return _decoder(type_)(body)


def operator_body(type_: type[T]) -> openapi.BodyDependency:
    """`dependencies={name: operator_body(T)}`: the handler's parameter `name: T` is its body, read as `decode` reads
    it (core/contract.py)."""
    return contract.body(type_, _decoder(type_))


def answered_types(annotation: Any) -> tuple[Any, ...]:
    """The types a handler's return annotation answers with (`Response[T]` is T; a union, each)."""
    if get_origin(annotation) is Response:
        (annotation,) = get_args(annotation)
    if isinstance(annotation, UnionType):
        return get_args(annotation)
    return (annotation,)


def check(op: Op[Any, Any], handler: Callable[..., Any], body: str | None) -> None:
    """The handler takes the op's body (as parameter `body`) and answers the op's type (a file or stream for an op
    whose answer is bytes or a stream); a TypeError at import when not."""
    hints = typing.get_type_hints(handler)
    where = f"{handler.__name__} ({op.method} {op.path})"
    if body is not None:
        if hints.get(body) != op.body:
            raise TypeError(f"{where} takes its body as {hints.get(body)}, its op as {op.body}")
    answered = answered_types(hints.get("return"))
    if op.stream or op.answer is bytes:
        if not all(kind in (Stream, File, bytes) for kind in answered):  # `Response[bytes]` is bytes
            raise TypeError(f"{where} answers {answered}, its op a stream or file")
    elif op.answer not in answered:
        raise TypeError(f"{where} answers {answered}, its op {op.answer}")


def operation(
    op: Op[Any, Any],
    *,
    body: str | None = None,
    status_code: int = 200,
    errors: Iterable[Failure] = (),
    dependencies: Mapping[str, Provide] | None = None,
    **options: Any,
) -> Callable[[Callable[..., Any]], HTTPRouteHandler]:
    """The route of `op`: its method and path; its body, when `body` names the handler's parameter, read typed as
    the op's body type; its answer the handler's return type (checked against the op's); `errors` the refusals it
    may answer beyond the guard's (and, with a body, a bad body's)."""

    def route(handler: Callable[..., Any]) -> HTTPRouteHandler:
        check(op, handler, body)
        needs = dict(dependencies or {})
        refusals = [*GUARDED, *errors]
        if body is not None:
            assert op.body is not None
            needs[body] = operator_body(op.body)
        if op.body is not None:
            refusals += WITH_BODY
        if op.answer_media != JSON:
            options.setdefault("media_type", op.answer_media)
        options.setdefault("operation_id", f"operator_{handler.__name__}")  # a generated client's name for it
        decorator = _ROUTE[op.method]
        return decorator(
            op.path,
            status_code=status_code,
            dependencies=needs or None,
            responses=contract.errors(*refusals),
            **options,
        )(handler)

    return route
