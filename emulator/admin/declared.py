"""`POST /_emulator/apply`: make the running emulator hold a declared state (a TOML file; see
emulator.hosted.declared), all of it or none."""

from __future__ import annotations

import re
from typing import Any

from litestar import Request, Response, post

from emulator.admin import ops
from emulator.admin.context import operator_of
from emulator.admin.emulator import json_response
from emulator.core import openapi
from emulator.core.errors import BAD_REQUEST
from emulator.hosted import declared

TOML = "application/toml"  # the one body type the boundary lets through for this path
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]")


def file_name(raw: str | None) -> str:
    """The name messages start with (`FILE:LINE:`): the client's file name, printable and short, or `body`."""
    name = _UNPRINTABLE.sub("?", raw or "").strip()[-200:]
    return name or "body"


@post(
    ops.APPLY.path,
    status_code=200,
    request_max_body_size=declared.MAX_BYTES,
    opt={
        **openapi.raw_body(TOML, {"type": "string"}, description="a declared state (TOML)"),
        **openapi.query(name=str),
    },
)
async def apply(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Apply the declared state in the body; `?name=` is the file name refusals point into (`FILE:LINE: …`)."""
    operator = operator_of(request)
    name = file_name(request.query_params.get("name"))
    try:
        text = (await request.body()).decode()
    except UnicodeDecodeError:
        raise BAD_REQUEST(f"{name}: not UTF-8 text (a TOML file is)") from None
    applied = await declared.apply(operator.core, operator.platform.box, operator.identity, text, name)
    return json_response(applied)


HANDLERS = [apply]
