"""`POST /_emulator/apply`: make the running emulator hold a declared state (a TOML file; see
emulator.hosted.declared), all of it or none."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

from litestar import Request
from litestar.di import NamedDependency
from litestar.params import QueryParameter

from emulator.admin import ops
from emulator.admin.context import operator_of
from emulator.admin.operation import operation
from emulator.core import openapi
from emulator.core.errors import BAD_REQUEST
from emulator.hosted import declared
from emulator.hosted.declared import Applied, DeclaredState

TOML, JSON = ops.APPLY.body_media  # the body types the boundary lets through for this path
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]")


def file_name(raw: str | None) -> str:
    """The name messages start with (`FILE:LINE:`): the client's file name, printable and short, or `body`."""
    name = _UNPRINTABLE.sub("?", raw or "").strip()[-200:]
    return name or "body"


@dataclass(frozen=True)
class Declaration:
    """What `apply` was sent: its name for messages, the TOML text (for refusals' lines; empty for JSON) and the
    state, decoded strictly from either."""

    name: str
    text: str
    state: DeclaredState


FileName = Annotated[str | None, QueryParameter(name="name", description="the file name refusals point into")]


async def _declaration(request: Request[Any, Any, Any], name: FileName = None) -> Declaration:
    """The body as its Content-Type says (the boundary let only TOML or JSON through): a file's text, or the same
    state as JSON; refused in the operator's envelope, `FILE:LINE: …` (a JSON body's with no line)."""
    called = file_name(name)
    raw = await request.body()
    if request.headers.get("content-type", "").split(";", 1)[0].strip().lower() == JSON:
        return Declaration(called, "", declared.parse_json(raw, called))
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise BAD_REQUEST(f"{called}: not UTF-8 text (a TOML file is)") from None
    return Declaration(called, text, declared.parse(text, called))


def _declared_body() -> openapi.Body:
    (schema,), components = openapi.schema_of(DeclaredState)
    content: dict[str, openapi.MediaType] = {TOML: {"schema": {"type": "string"}}, JSON: {"schema": schema}}
    return openapi.Body(content, components, description="a declared state: the TOML file, or the same as JSON")


@operation(
    ops.APPLY,
    request_max_body_size=declared.MAX_BYTES,
    dependencies={"declaration": openapi.BodyDependency(_declaration, _declared_body())},
    errors=[BAD_REQUEST],
)
async def apply(request: Request[Any, Any, Any], declaration: NamedDependency[Declaration]) -> Applied:
    """Apply the declared state in the body; `?name=` is the file name refusals point into (`FILE:LINE: …`)."""
    operator = operator_of(request)
    core, box, identity = operator.core, operator.platform.box, operator.identity
    return await declared.apply(core, box, identity, declaration.text, declaration.name, decoded=declaration.state)


HANDLERS = [apply]
