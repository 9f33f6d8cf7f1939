"""Moments of a trial: a task's `[[emulator.moments]]`, each a clock move or a fault at a given number of seconds
after the agent starts, done by the harness through the trial's operator API as the trial runs.

    [[emulator.moments]]
    at = 5                # seconds after the agent starts (wall time: the agent's own pace decides what it meets)
    advance = "2h"        # the clock moves on (POST /_emulator/clock's `advance`: seconds, or 90s, 15m, 48h, 2d)
    [[emulator.moments]]
    at = 10
    fault = { path = "/ask", status = 503, retry_after = 2, count = 1 }   # a fault rule, as POST /_emulator/faults

The runner asks `due` on each turn of its loop which moments have come, and does each with `act`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import msgspec

from emulator.core.clock import parse_duration
from emulator.core.faults import FaultSpec, Rule
from emulator.testkit import Testkit


class Moment(msgspec.Struct, forbid_unknown_fields=True):
    """At `at` seconds after the agent starts, exactly one of: `advance` the clock (a duration as the clock API
    takes it), or arm a `fault` (a rule as the faults API takes it)."""

    at: float
    advance: str | float | None = None
    fault: FaultSpec | None = None


def problems(moment: Moment) -> list[str]:
    """What is wrong with a moment, checked as the clock and faults APIs would check it (no emulator needed)."""
    from emulator.core.errors import ApiError
    from emulator.core.faults import checked

    found = [] if moment.at > 0 else [f"at must be more than 0 seconds (after the agent starts), not {moment.at:g}"]
    if (moment.advance is None) == (moment.fault is None):
        found.append("say exactly one of `advance` (a clock move) or `fault` (a fault rule)")
    if moment.advance is not None:
        try:
            seconds = parse_duration(str(moment.advance))
        except ValueError as e:
            found.append(f"advance: {e}")
        else:
            if seconds <= 0:
                found.append(f"advance: {moment.advance!r} must move the clock forward (more than 0 seconds)")
    if moment.fault is not None:
        try:
            checked(moment.fault)
        except ApiError as e:
            found.append(e.message)
    return found


def due(moments: Sequence[Moment], elapsed_seconds: float, done: Collection[int]) -> list[tuple[int, Moment]]:
    """The moments whose time has come `elapsed_seconds` after the agent started and that are not `done` (indices
    into `moments`), in the order they fall due (ties in the task's order), each with its index: the caller adds
    the index to `done` once it has acted."""
    ready = [(i, m) for i, m in enumerate(moments) if i not in done and m.at <= elapsed_seconds]
    return sorted(ready, key=lambda pair: (pair[1].at, pair[0]))


def act(kit: Testkit, moment: Moment) -> str:
    """Do one moment on the trial's emulator (EmulatorError when it refuses); a line that says what was done."""
    when = f"at {moment.at:g} s"
    if moment.advance is not None:
        clock = kit.clock.advance(moment.advance)
        return f"{when}: the clock advanced {moment.advance} to {clock.iso}"
    assert moment.fault is not None, "a moment is a clock move or a fault (problems() says so at load)"
    if moment.fault.hold is not None:
        kit.faults.hold(moment.fault.hold, moment.fault.count or 1)
        return f"{when}: holding the next {moment.fault.count or 1} request(s) to {moment.fault.hold}"
    armed = kit.faults.add(**msgspec.to_builtins(moment.fault))
    return f"{when}: fault {armed.id} armed: {Rule(armed.id, moment.fault).describe()}"
