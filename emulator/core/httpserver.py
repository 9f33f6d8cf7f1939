"""The HTTP protocol every origin is served with: uvicorn's (httptools), plus a deadline on incomplete requests.

uvicorn closes a connection that stays idle after a response (keep-alive timeout), but not one that opens and
sends nothing, or stops halfway through a request's headers or body: those would be held forever, and a
handful of scripts could exhaust the emulator's sockets. Here a connection waiting for (the rest of) a request
is closed once nothing has arrived for `request_timeout` seconds; while the app answers (an event stream
included) no deadline runs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from emulator.core.faults import DROP_EXTENSION


def timed_protocol(request_timeout: float) -> type[HttpToolsProtocol]:
    class TimedHttpToolsProtocol(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(request_timeout, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            # A fault that drops the connection needs the socket, which ASGI does not hand to the app.
            self.scope["extensions"] = {DROP_EXTENSION: self.transport.abort}  # type: ignore[typeddict-unknown-key]

        def data_received(self, data: bytes) -> None:
            self._arm()  # bytes of a request: it has another `request_timeout` to finish
            super().data_received(data)

        def on_message_complete(self) -> None:
            self._disarm()  # the whole request is in; the app answers without a deadline
            super().on_message_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return TimedHttpToolsProtocol
