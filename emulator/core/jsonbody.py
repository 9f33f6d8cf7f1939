"""Decoding request bodies: every way a body can fail to be JSON becomes one error type."""

from __future__ import annotations

from typing import Any

import msgspec


class NotJson(ValueError):
    """The body is not valid JSON (syntax, encoding, nesting depth) or not of the expected shape."""


def decode(body: bytes, type: Any = Any) -> Any:
    try:
        return msgspec.json.decode(body, type=type)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise NotJson(str(e)) from None
    except RecursionError:
        raise NotJson("JSON nested too deeply") from None
