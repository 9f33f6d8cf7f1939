"""Every request an origin serves, as one `http.request` event: what a trace shows and the scorecard judges.

An ASGI layer outside each origin's boundary, so refusals are recorded too. It keeps what says who called and
how, never a credential: the registration and token id a bearer JWT names (read without verifying it: a
request whose token is refused must still be attributed), a fingerprint of an API key (the first hex digits
of the hash the store keeps, so a key is found again by its row), the `Idempotency-Key` and a digest of the
body, a control-plane `operation_type`, the status, `Retry-After`, an error answer's code (`error` or `code`
of its JSON) and how long the answer took in real time. A credential is looked for where a client may carry
it: the headers, a query parameter, and a token exchange's `assertion` (core/credentials.py reads them). A
secret-looking query parameter is recorded by its name only, but for the links the emulator itself hands a person
(a claim's `verification_uri`).

`after` is the last event journaled when the request began: what the request caused is journaled before it
(its answer waits for its effects), so a rule judges it against the state it saw, not the one it made.

Acknowledged means journaled: the answer of a request that published state changes (on any path, the operator
API's too) starts only once their events are written (`EventBus.flush` up to its last one), so a `kill -9` after
a client got its 2xx never loses the events of that write. A request that published nothing, or only records of
the call (`Payload.CALL_RECORD`), does not wait. The `http.request` event itself is published after the answer
and is not waited for: the journal may lack the last few of them after a `kill -9`, never a state change's event
of an acknowledged write.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
from litestar.enums import ScopeType
from litestar.types import HTTPScope, Message, Receive, ReceiveMessage, Scope, Send

from emulator.core.credentials import credentials, secret_in_query
from emulator.core.events import Caused, caused
from emulator.core.jsonbody import Json
from emulator.core.operatorpath import ADMIN_PREFIX
from emulator.core.payloads import HttpRequest, Payload

if TYPE_CHECKING:
    from _hashlib import HASH

# Not agent calls: the emulator's own API, liveness probes, a browser's icon.
_UNRECORDED = (ADMIN_PREFIX, "/health", "/favicon.ico")
_BODY_PEEK = 64 * 1024  # enough of a control-plane body to read its operation_type
_ANSWER_PEEK = 4096  # enough of an error answer to read its code
_decode_json = msgspec.json.Decoder().decode

Publish = Callable[[str | None, Payload], object]  # EventBus.publish
Durable = Callable[[int], Awaitable[None]]  # EventBus.flush: returns once the journal holds events up to that seq


@dataclass
class _Answered:
    """What an answer said that the journal keeps: its status (0 while none was sent: a dropped request), its
    `Retry-After`, and an error answer's code."""

    status: int = 0
    retry_after: str | None = None
    error_code: str | None = None


class RequestJournal:
    """ASGI: one `http.request` event per request an origin answers (or drops); an answer that follows events
    its request published starts only once they are journaled."""

    def __init__(
        self,
        app: Any,
        origin: str,
        publish: Publish,
        trust_forwarded: bool = False,
        *,
        durable: Durable,
        last_seq: Callable[[], int] = lambda: 0,
        issued: frozenset[str] = frozenset(),
    ) -> None:
        self.app = app
        self.origin = origin
        self.publish = publish
        self.durable = durable
        self.trust_forwarded = trust_forwarded
        self.last_seq = last_seq  # the journal's last event number, when a request begins
        self.issued = issued  # paths whose query carries a credential the emulator issued (a claim link)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        with caused() as mine:
            if scope["path"].startswith(_UNRECORDED):
                await self.app(scope, receive, self._after_journal(mine, send))
            else:
                await self._served(scope, receive, self._after_journal(mine, send))

    def _after_journal(self, mine: Caused, send: Send) -> Send:
        """`send`, whose answer starts once the events the request published are in the journal."""

        async def send_durable(message: Message) -> None:
            if message["type"] == "http.response.start" and mine.last:
                await self.durable(mine.last)
            await send(message)

        return send_durable

    async def _served(self, scope: HTTPScope, receive: Receive, send: Send) -> None:
        began = time.monotonic()
        after = self.last_seq()
        digest: HASH | None = None  # hashlib's sha256, made at the first bytes of a body (most requests have none)
        peek = bytearray()
        answer = _Answered()
        said = bytearray()  # the start of an error answer's body

        async def receive_body() -> ReceiveMessage:
            nonlocal digest
            message = await receive()
            if message["type"] == "http.request":
                chunk = message.get("body", b"")
                if chunk:
                    if digest is None:
                        digest = hashlib.sha256()
                    digest.update(chunk)
                    if len(peek) < _BODY_PEEK:
                        peek.extend(chunk[: _BODY_PEEK - len(peek)])
            return message

        async def send_answer(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer.status = message["status"]
                for name, value in message.get("headers", ()):
                    if len(name) == 11 and name.lower() == b"retry-after":  # by length first: most are not lowercased
                        answer.retry_after = value.decode("latin-1")
            elif message["type"] == "http.response.body" and answer.status >= 400 and len(said) < _ANSWER_PEEK:
                said.extend(message.get("body", b"")[: _ANSWER_PEEK - len(said)])
            await send(message)

        try:
            await self.app(scope, receive_body, send_answer)
        finally:
            if said:
                answer.error_code = _error_code(bytes(said))
            self._record(
                scope, answer, digest.hexdigest()[:16] if digest is not None else None, bytes(peek), began, after
            )

    def _record(
        self, scope: HTTPScope, answer: _Answered, body: str | None, peek: bytes, began: float, after: int
    ) -> None:
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"] if "headers" in scope else ():
            headers.setdefault(name.lower(), value)
        client = scope["client"] if "client" in scope else None
        ip = client[0] if client else "unknown"
        if self.trust_forwarded and b"x-forwarded-for" in headers:
            ip = headers[b"x-forwarded-for"].decode("latin-1").split(",")[0].strip()
        query = (scope["query_string"] if "query_string" in scope else b"").decode("latin-1")
        issued = scope["path"] in self.issued
        form = peek if headers.get(b"content-type", b"").startswith(b"application/x-www-form-urlencoded") else b""
        who = credentials(headers, "" if issued else query, form)
        idem = headers.get(b"idempotency-key")
        db, op = _operation(peek) if self.origin == "api" and peek.startswith(b"{") else (None, None)
        served = HttpRequest(
            origin=self.origin,
            method=scope["method"],
            path=scope["path"][:512],
            status=answer.status,
            ms=round((time.monotonic() - began) * 1000, 1),
            rt=round(began, 3),  # real time (monotonic): how long an agent waited, even on a frozen clock
            after=after,
            key=who.key,
            reg=who.reg,
            user=who.user,
            token=who.token,
            token_exp=who.token_exp,
            retry_after=answer.retry_after[:32] if answer.retry_after is not None else None,
            error_code=answer.error_code or None,
            idem=idem.decode("latin-1")[:255] if idem is not None else None,
            body=body,
            secret_in_url=secret_in_query(query) if query and not issued else None,
            db=db,
            op=op,
        )
        self.publish(ip, served)


def _error_code(answer: bytes) -> str | None:
    """The code of an error answer in JSON: OAuth's `error`, the site's `{"error": {"code": …}}`, or `code`."""
    try:
        decoded: Json = _decode_json(answer)
    except (msgspec.DecodeError, ValueError):  # ValueError: bytes that are not UTF-8
        return None
    if not isinstance(decoded, dict):
        return None
    error = decoded.get("error")
    if isinstance(error, dict):
        error = error.get("code")
    code = error if isinstance(error, str) else decoded.get("code")
    return code[:64] if isinstance(code, str) else None


def _operation(body: bytes) -> tuple[str | None, str | None]:
    """The database a control-plane call names and its operation, from the start of its JSON body."""
    try:
        decoded: Json = _decode_json(body)
    except (msgspec.DecodeError, ValueError):  # ValueError: bytes that are not UTF-8 (the origin answers its 400)
        return None, None
    if not isinstance(decoded, dict):
        return None, None
    db, op = decoded.get("db"), decoded.get("operation_type")
    return (db[:64] if isinstance(db, str) else None), (op[:64] if isinstance(op, str) else None)
