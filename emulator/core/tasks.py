"""Background tasks of the emulator (ticker, journal writer, docs watcher), and work in threads that a stop ends."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def cancel(task: asyncio.Task[None] | None) -> None:
    """Stop a background task and wait until it has stopped."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def until_stopped(work: Awaitable[T], stop: threading.Event) -> T:
    """Await `work` (which runs in a thread and gives way soon after `stop` is set). Cancelled meanwhile (the
    emulator stopping), it sets `stop` and lets the cancellation go on only once `work` has ended: nothing still
    writes into what the caller deletes next, and the process's exit, which joins its threads, is not held up."""
    done = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        stop.set()
        while not done.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({done})
        with contextlib.suppress(BaseException):
            done.result()  # what it raised on giving way is not news
        raise
