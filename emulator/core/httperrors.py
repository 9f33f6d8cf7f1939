"""What every origin's error handlers share, whatever format it answers in: Litestar's refusal as a sentence, a
body that never arrived whole, and the last resort for an exception no rule raised (507 on a full disk, else the
origin's 500 with the traceback in the log). Each origin renders the `ApiError` in its clients' format."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import cast

from litestar.exceptions import HTTPException, InternalServerException

from emulator.core.errors import BAD_REQUEST, ApiError, disk_full, full_disk

log = logging.getLogger("emulator")


def http_detail(exc: HTTPException) -> str:
    """Litestar's refusal as a sentence; a parameter that failed validation is named, with what was wrong."""
    if exc.status_code == 413:
        return (
            "the request body is larger than this endpoint takes (the http_max_body_bytes setting; snapshot "
            "imports and blob uploads have their own bounds)"
        )
    extra: list[object] = exc.extra if isinstance(exc.extra, list) else []
    problems = [said for said in map(_problem, extra) if said is not None]
    return f"{exc.detail}: {'; '.join(problems)}" if problems else str(exc.detail)


def _problem(problem: object) -> str | None:
    """One of Litestar's validation problems (a dict with `key`, `message` and maybe `source`, a ParamType) as words;
    None for anything else."""
    if not isinstance(problem, dict):
        return None
    p = cast("dict[object, object]", problem)  # a dict, as checked; of anything (its values are only printed)
    if "key" not in p or "message" not in p:
        return None
    return f"{p['key']} ({getattr(p.get('source'), 'value', p.get('source')) or 'parameter'}): {p['message']}"


def log_internal_error(method: str, path: str, exc: Exception) -> None:
    """Every origin's last resort: the traceback goes to the log, never into a response."""
    log.error("unhandled error on %s %s", method, path, exc_info=exc)


_full_said = [-math.inf]  # when the log last said the disk is full (once a minute, not once a request)


def last_resort(method: str, path: str, exc: Exception, state_dir: Path, otherwise: ApiError) -> ApiError:
    """What every origin answers for an exception no rule raised: 507 naming the state dir when its disk is full
    (each origin renders it in its clients' format; the log says so once a minute, without a traceback), else
    `otherwise` (a 500) with the traceback in the log."""
    if disk_full(exc):
        if time.monotonic() - _full_said[0] > 60:
            _full_said[0] = time.monotonic()
            log.warning(
                "the disk of the state dir %s is full: writes are refused with 507 until it has room", state_dir
            )
        return full_disk(state_dir)
    log_internal_error(method, path, exc)
    return otherwise


def incomplete_body(exc: HTTPException) -> ApiError | None:
    """Litestar's refusal of a body that never arrived whole (the client went away, or the connection's deadline
    closed it): the client's doing, a 400 with no traceback. None for any other refusal."""
    if isinstance(exc, InternalServerException) and "disconnected prematurely" in str(exc.detail):
        return BAD_REQUEST("the request's body did not arrive whole: the client went away or was slow")
    return None
