"""The operator API's table (emulator/admin/ops.py) and its routes are one to one, and an op's call is the request the
route takes: the route modules read their paths from the table, and every client calls an op, so a route without an
op (or an op without a route) is a path no client can reach, or one it calls in vain."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest
from litestar import Litestar
from litestar.response import File, Stream

from emulator.admin import ops, routes
from emulator.admin.client import EmulatorError
from emulator.admin.operation import answered_types, operation
from emulator.admin.wire import ClockMove, ClockView, Switches
from emulator.core import openapi
from emulator.core.operatorpath import ADMIN_PREFIX
from emulator.core.switches import SWITCHES

METHODS = {"GET", "POST", "DELETE", "PUT", "PATCH"}


def _routed() -> set[tuple[str, str]]:
    """(method, path template) of every operator route, as the app that mounts the operator router routes them."""
    app = Litestar(route_handlers=[routes.router()], openapi_config=None)
    return {(m, route.path) for route in app.routes for m in route.methods & METHODS}


def test_routes_and_ops_are_one_to_one() -> None:
    table = [(op.method, op.path) for op in ops.every()]
    assert len(table) == len(set(table)), "two ops name one route"
    routed = _routed()
    assert routed == set(table), (
        f"routes without an op: {routed - set(table)}; ops without a route: {set(table) - routed}"
    )
    assert len(table) == 56
    assert all(path.startswith(ADMIN_PREFIX + "/") for _, path in table)


def test_each_handler_reads_its_path_from_its_op() -> None:
    """A handler's own path (what its decorator was given) is an op's: no route module writes one of its own."""
    by_path = {(op.method, op.path) for op in ops.every()}
    for handler in routes.HANDLERS:
        for path in handler.paths:
            assert {(m, path) for m in handler.http_methods} <= by_path, handler.handler_name


def test_a_call_fills_and_escapes_its_path() -> None:
    call = ops.SNAPSHOT_LOAD.call(name="a b/c")
    assert (call.method, call.path) == ("POST", "/_emulator/snapshots/a%20b%2Fc/load")
    assert call.content == b"{}"  # a POST without a body sends an empty object
    # A `path` parameter keeps its slashes (an API key's name, ORG/NAME).
    assert ops.TRACE.call(who="acme/ci").path == "/_emulator/traces/acme/ci"
    with pytest.raises(TypeError, match="takes name"):
        ops.SNAPSHOT_LOAD.call()


def test_a_call_carries_its_body_query_and_answer_type(tmp_path: Path) -> None:
    move = ops.CLOCK_MOVE.call(ClockMove(advance="48h"))
    assert move.media == "application/json"
    assert isinstance(move.content, bytes)
    assert msgspec.json.decode(move.content) == {"advance": "48h", "set": None, "freeze": None}
    assert move.answer is ClockView
    answer = b'{"now": 0, "iso": "1970-01-01T00:00:00Z", "frozen": false, "offset": 0}'
    assert move.decode(answer) == ClockView(0, "1970-01-01T00:00:00Z", False, 0)
    journal = ops.JOURNAL.call(query={"since": 3, "kinds": None, "limit": 5})
    assert journal.target == "/_emulator/journal?since=3&limit=5"  # None is left out
    assert ops.STATUS.call().content is None  # a GET has no body
    state = tmp_path / "world.toml"
    apply = ops.APPLY.call(state, query={"name": "world"})
    assert (apply.content, apply.media) == (state, "application/toml")
    # The one route whose answer follows its body: a hold answers the fault list.
    hold = ops.FAULT_ADD.call({"hold": "/ask"}).answered_as(ops.FAULTS.answer)
    assert hold.answer is ops.FAULTS.answer and hold.path == ops.FAULT_ADD.path


def test_an_error_answer_is_one_emulator_error() -> None:
    body = b'{"error": {"code": "not_found", "message": "no snapshot \'x\'"}}'
    e = EmulatorError.of(404, body)
    assert (e.status, e.code, e.message, str(e)) == (404, "not_found", "no snapshot 'x'", "no snapshot 'x'")
    # Not the operator's envelope (Litestar's own refusal of a path parameter): its body is the message.
    other = EmulatorError.of(400, b'{"status_code": 400, "detail": "Validation failed"}')
    assert (other.status, other.code) == (400, "")
    assert "Validation failed" in other.message
    assert EmulatorError.of(502, b"").message == "HTTP 502"


def _handlers() -> dict[tuple[str, str], Any]:
    return {(m, path): h for h in routes.HANDLERS for path in h.paths for m in h.http_methods}


def test_each_handler_takes_its_ops_body_and_answers_its_ops_type() -> None:
    """A handler reads its body as the op's body type (a typed body dependency: the type the client encodes) and
    answers the op's answer type (its return annotation: what Litestar encodes and the document shows), so the
    client decodes what the route sends. An op whose body is bytes (a file: apply, import) reads it itself, through
    a dependency the document shows; one whose answer is bytes or a stream returns a file or a stream."""
    handlers = _handlers()
    for op in ops.every():
        handler = handlers[(op.method, op.path)]
        hints = typing.get_type_hints(handler.fn)
        bodies = {
            name: dependency
            for name, dependency in handler.resolve_dependencies().items()
            if isinstance(dependency, openapi.BodyDependency)
        }
        if op.body is None:
            assert not bodies, handler.handler_name
        else:
            (name,) = bodies  # one body, read typed, shown in the document
            if op.body is not bytes:
                assert hints[name] == op.body, handler.handler_name
        answered = answered_types(hints["return"])
        if op.answer is bytes or op.stream:
            assert set(answered) <= {bytes, File, Stream}, handler.handler_name
            assert handler.opt.get("openapi_answer") or handler.media_type == op.answer_media, handler.handler_name
        else:
            assert op.answer in answered, handler.handler_name


def test_a_route_that_disagrees_with_its_op_is_refused_at_import() -> None:
    async def wrong(move: ClockView) -> ClockView:
        raise AssertionError

    with pytest.raises(TypeError, match="takes its body as"):
        operation(ops.CLOCK_MOVE, body="move")(wrong)

    async def answers_other(move: ClockMove) -> Switches:
        raise AssertionError

    with pytest.raises(TypeError, match="answers"):
        operation(ops.CLOCK_MOVE, body="move")(answers_other)


def test_the_switches_answer_names_every_switch_in_order() -> None:
    assert tuple(Switches.__struct_fields__) == SWITCHES
