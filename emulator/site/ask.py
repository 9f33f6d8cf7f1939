"""`GET|POST /ask`: NLWeb-style question answering over the docs corpus, as JSON or as SSE.

Rules decided here where the spec is silent (docs/explanation/fidelity.md repeats them):
- `query` wins over `q` when both are sent; NLWeb v0.54's `{"query": {"text": ...}}` is accepted.
- A POST body's fields win over the query string's; a form-encoded body is read as form fields.
- Streaming: `prefer.streaming` in the body, else `Prefer: streaming=true|false`, else the legacy
  `streaming` parameter, else `Accept: text/event-stream`. An explicit choice of streaming is
  dropped (JSON is sent) when the `Accept` header admits no event stream.
- Every request to /ask counts against the rate limit once, valid or not, except idempotent replays
  and CORS preflights.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import Annotated, Any
from urllib.parse import parse_qs, parse_qsl

import msgspec
from litestar import Request, Response, get, post
from litestar.di import NamedDependency, Provide
from litestar.enums import ScopeType
from litestar.response import Stream
from litestar.types import Receive, Scope, Send

from emulator.core import jsonbody, openapi
from emulator.core.clientip import scope_client_ip
from emulator.core.contract import errors
from emulator.core.errors import BAD_REQUEST, CONFLICT, INVALID_JSON, RATE_LIMITED, UNPROCESSABLE, ApiError
from emulator.core.httperrors import last_resort
from emulator.core.payloads import SiteAsk
from emulator.core.prerouted import raw_headers, read_body, send_whole, small_body
from emulator.site.errors import INTERNAL, bad_request, error_bytes
from emulator.site.idempotency import Answer, fingerprint, guarded, read_key
from emulator.site.state import Site, site_of

MAX_QUERY = 2000
_encode = msgspec.json.Encoder().encode


# --- wire types -----------------------------------------------------------------------------------


class AskPrefer(msgspec.Struct):
    streaming: bool | None = None


class AskRequest(msgspec.Struct):
    """The documented body of POST /ask (parsed by hand below, to give precise 400 messages)."""

    query: str | None = None
    q: str | None = None
    prefer: AskPrefer | None = None


class AskResult(msgspec.Struct, rename={"type_": "@type"}):
    type_: str
    name: str
    url: str
    description: str


class AskMeta(msgspec.Struct):
    response_type: str
    version: str
    site: str
    streaming: bool


class AskSuccess(msgspec.Struct, rename={"meta": "_meta"}):
    query_id: str
    query: str
    results: list[AskResult]
    answer: str
    meta: AskMeta


class AskInput(msgspec.Struct):
    query: str
    query_id: str
    streaming: bool
    prefer_applied: bool


# The event stream's messages (NLWeb's): one JSON object per `data:` event, `message_type` first.
class _Message(msgspec.Struct, tag_field="message_type"):
    pass


class AskBegin(_Message, tag="begin-nlweb-response", rename={"meta": "_meta"}):
    query_id: str
    query: str
    meta: AskMeta


class AskResults(_Message, tag="result"):
    content: list[AskResult]


class AskSummary(_Message, tag="summary"):
    message: str


class AskEnd(_Message, tag="end-nlweb-response"):
    query_id: str


class AskComplete(_Message, tag="complete"):
    pass


# One event of the stream, as the document shows it (`text/event-stream`, each `data:` line one of these).
AskEvent = AskBegin | AskResults | AskSummary | AskEnd | AskComplete


# --- parsing --------------------------------------------------------------------------------------


_WANTED = (b"accept", b"prefer", b"content-type", b"idempotency-key")


class AskCall(msgspec.Struct):
    """One call to /ask, as the rules need it, from Litestar's request or from AskFastPath's ASGI scope."""

    method: str
    ip: str
    headers: dict[bytes, str]  # read_headers
    query: dict[str, str]  # the query string's parameters (the last of each name)
    raw_query: str
    body: bytes


def read_headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[bytes, str]:
    """The request headers /ask reads, in one pass over the raw ASGI list (the hot path)."""
    found: dict[bytes, str] = {}
    for name, value in raw:
        if name in _WANTED and name not in found:
            found[name] = value.decode("latin-1")
    return found


class AskParams(msgspec.Struct):
    """The parameters /ask reads, from the query string, a form body or a JSON body, each as sent (any JSON): `parse`
    checks them one by one, to name the one that is wrong in its 400."""

    query: object = None  # a string, or NLWeb v0.54's {"text": ...}
    q: object = None
    prefer: object = None  # {"streaming": ...}
    streaming: object = None
    query_id: object = None


def _params(call: AskCall) -> AskParams:
    params: dict[str, object] = dict(call.query)  # then a body's fields, which win
    body, headers = call.body, call.headers
    if call.method == "POST" and body.strip():
        ctype = headers.get(b"content-type", "")
        # curl -d sends JSON labelled as a form; a body that starts like JSON is read as JSON.
        if ctype.startswith("application/x-www-form-urlencoded") and not body.lstrip().startswith((b"{", b"[")):
            form = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
            params.update({k: v[0] for k, v in form.items()})
        else:
            params.update(_json_fields(body))
    return msgspec.convert(params, AskParams)


def _json_fields(body: bytes) -> dict[str, object]:
    try:
        parsed = jsonbody.decode(body)
    except jsonbody.NotJson as e:
        raise INVALID_JSON(f"the request body is not valid JSON: {e}") from None
    if not isinstance(parsed, dict):
        raise bad_request('the request body must be a JSON object such as {"query": "..."}')
    return parsed


def _query(params: AskParams) -> str:
    name = "query" if params.query is not None else "q" if params.q is not None else None
    if name is None:
        raise bad_request("a non-empty `query` is required (or its alias `q`)")
    value = params.query if name == "query" else params.q
    if isinstance(value, dict) and "text" in value:
        value, name = value["text"], f"{name}.text"
    if not isinstance(value, str):
        raise bad_request(f"`{name}` must be a string (or an object with a `text` string)")
    text = value.strip()
    if not text:
        raise bad_request(f"a non-empty `{name}` is required")
    if len(value) > MAX_QUERY:
        raise bad_request(f"`{name}` is {len(value)} characters long; the limit is {MAX_QUERY}")
    return text


def _flag(value: object, name: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    raise bad_request(f"`{name}` must be true or false")


def _prefer_header(header: str | None) -> bool | None:
    """RFC 7240 `Prefer: streaming=true` (a bare `streaming` also means true)."""
    if not header:
        return None
    for item in header.split(","):
        token = item.split(";")[0].strip().lower()
        key, _, value = token.partition("=")
        if key.strip() == "streaming":
            value = value.strip().strip('"')
            return value in ("", "true", "1")
    return None


def _accepts_stream(accept: str) -> tuple[bool, bool]:
    """(asks for SSE, admits SSE at all)."""
    if not accept:
        return False, True
    asks = "text/event-stream" in accept
    return asks, asks or "*/*" in accept or "text/*" in accept


def parse(call: AskCall, site: Site) -> AskInput:
    headers = call.headers
    params = _params(call)
    query = _query(params)
    prefer = params.prefer
    if prefer is not None and not isinstance(prefer, dict):
        raise bad_request('`prefer` must be an object such as {"streaming": true}')
    body_choice = _flag(prefer.get("streaming"), "prefer.streaming") if prefer else None
    header_choice = _prefer_header(headers.get(b"prefer"))
    legacy_choice = _flag(params.streaming, "streaming")
    asks, admits = _accepts_stream(headers.get(b"accept", ""))
    explicit = next((c for c in (body_choice, header_choice, legacy_choice) if c is not None), None)
    streaming = asks if explicit is None else explicit and admits
    qid = params.query_id
    try:
        query_id = str(uuid.UUID(qid)) if isinstance(qid, str) else site.core.ids.uuid()
    except ValueError:
        query_id = site.core.ids.uuid()
    return AskInput(query, query_id, streaming, header_choice is not None and streaming == header_choice)


# --- answering ------------------------------------------------------------------------------------


def _results(site: Site, query: str) -> tuple[list[AskResult], str]:
    hits, answer = site.docs.lookup(query)
    return [AskResult("WebPage", h.name, site.base_url + h.path, h.description) for h in hits], answer


def _meta(site: Site, streaming: bool) -> AskMeta:
    return AskMeta("summary", "0.1", site.core.settings.site_name, streaming)


def _sse(message: _Message, retry_ms: int | None = None) -> bytes:
    # One JSON object per unnamed `data:` event, so EventSource.onmessage sees every one. A `retry:` rides in an
    # event's own block: alone in a block, SSE clients such as httpx-sse make it an event with empty data, which
    # breaks the JSON-per-event reading their documentation shows.
    retry = b"" if retry_ms is None else b"retry: %d\n" % retry_ms
    return retry + b"data: " + _encode(message) + b"\n\n"


async def _stream(site: Site, ask: AskInput) -> AsyncIterator[bytes]:
    results, answer = _results(site, ask.query)
    # An EventSource reconnects when the stream ends, after `retry` ms (3 s by default): a naive page would spend
    # the whole rate limit asking again. One rate window between reconnects keeps it inside the limit.
    begin = AskBegin(ask.query_id, ask.query, _meta(site, True))
    yield _sse(begin, retry_ms=site.core.settings.ask_rate_window * 1000)
    yield _sse(AskResults(results))
    yield _sse(AskSummary(answer))
    yield _sse(AskEnd(ask.query_id))
    yield _sse(AskComplete())


async def answer(site: Site, call: AskCall) -> Answer:
    """/ask, whole: the rate limit, idempotency, the question and its answer (a body, or an event stream), with the
    rate-limit headers; refusals in the site's error format. The route and AskFastPath both answer with it."""
    key = read_key(call.headers.get(b"idempotency-key")) if call.method == "POST" else None
    quota = None
    asked: AskInput | None = None  # what the journal says of the call: unset on a refusal or a replayed answer
    found: int | None = None

    async def produce() -> Answer:
        nonlocal quota, asked, found
        quota = site.ask_limiter.hit(call.ip)
        if not quota.allowed:
            msg = f"{quota.limit} requests per minute per IP on /ask; retry in {quota.reset} s"
            exc = RATE_LIMITED(msg, retryable=True, headers={"Retry-After": str(quota.reset)})
            return Answer(429, {"Content-Type": "application/json"}, error_bytes(exc))
        try:
            ask = parse(call, site)
        except ApiError as exc:
            return Answer(exc.status, {"Content-Type": "application/json"}, error_bytes(exc))
        asked = ask
        await site.core.faults.checkpoint("/ask")
        headers = {"Vary": "Accept, Prefer"}
        if ask.prefer_applied:
            headers["Preference-Applied"] = f"streaming={'true' if ask.streaming else 'false'}"
        if ask.streaming:
            return Answer(200, headers, stream=_stream(site, ask))
        results, answer = _results(site, ask.query)
        success = AskSuccess(ask.query_id, ask.query, results, answer, _meta(site, False))
        found = len(results)
        return Answer(200, {**headers, "Content-Type": "application/json"}, _encode(success))

    fp = ""
    if key is not None:
        fp = fingerprint(call.body, call.headers.get(b"accept", ""), call.headers.get(b"prefer", ""), call.raw_query)
    done, replayed = await guarded(site.idempotency, f"{call.ip} POST /ask", key, fp, produce)
    rate = site.ask_limiter.headers(quota if quota is not None else site.ask_limiter.peek(call.ip))
    site.core.bus.publish(
        call.ip,
        SiteAsk(
            method=call.method,
            status=done.status,
            query=asked.query if asked else None,
            streaming=bool(asked and asked.streaming),
            results=found,
            replayed=replayed,
        ),
    )
    return Answer(done.status, {**done.headers, **rate}, done.body, stream=done.stream)


async def _read_call(request: Request[Any, Any, Any]) -> AskCall:
    """The route's input, read once from the request as AskFastPath reads it from the ASGI scope (the same rules: the
    last of each query parameter, the raw query string for the idempotency fingerprint, the headers /ask reads)."""
    site = site_of(request)
    query = dict(request.query_params.items()) if request.scope["query_string"] else {}
    body = await request.body() if request.method == "POST" else b""
    headers = read_headers(request.scope["headers"])
    return AskCall(request.method, site.client_ip(request), headers, query, request.url.query or "", body)


async def _ask(site: Site, call: AskCall) -> Response[bytes] | Stream:
    done = await answer(site, call)
    headers = dict(done.headers)
    if done.stream is not None:
        headers.pop("Content-Type", None)
        return Stream(done.stream, media_type="text/event-stream", headers=headers)  # type: ignore[arg-type]
    media = headers.pop("Content-Type", "application/json")
    return Response(done.body, status_code=done.status, media_type=media, headers=headers)


class AskFastPath:
    """ASGI: `GET /ask` and `POST /ask` with a small body, answered before Litestar's router and response building
    (about half of the loop's time per call). Inside the site's gate, the fault gate and the request journal, with
    the route's own answer (`answer`), its query string parsed as Litestar parses it (`_query_string`); anything
    else goes on to the route."""

    def __init__(self, app: Any, site: Site) -> None:
        self.app = app
        self.site = site

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP or scope["path"] != "/ask" or scope["method"] not in ("GET", "POST"):
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        read = _query_string(scope["query_string"])
        if read is None or (method == "POST" and not small_body(scope)):
            await self.app(scope, receive, send)
            return
        body = b""
        if method == "POST":
            received = await read_body(receive)
            if received is None:
                return
            body = received
        ip = scope_client_ip(scope, self.site.core.settings.trust_forwarded)
        call = AskCall(method, ip, read_headers(scope["headers"]), dict(read[0]), read[1], body)
        try:
            done = await answer(self.site, call)
        except ApiError as exc:
            done = Answer(exc.status, {**exc.headers, "Content-Type": "application/json"}, error_bytes(exc))
        except Exception as exc:  # as the app's last resort does: the traceback to the log, not the client
            failed = last_resort(method, "/ask", exc, self.site.core.settings.state_dir, INTERNAL)
            done = Answer(failed.status, {**failed.headers, "Content-Type": "application/json"}, error_bytes(failed))
        fields = dict(done.headers)
        ctype = fields.pop("Content-Type", "application/json")
        if done.stream is None:
            await send_whole(send, done.status, raw_headers(fields), ctype.encode(), done.body)
            return
        raw = [*raw_headers(fields), (b"content-type", b"text/event-stream; charset=utf-8")]
        await send({"type": "http.response.start", "status": done.status, "headers": raw})
        stream: AsyncIterator[bytes] = done.stream  # type: ignore[assignment]  (Answer keeps it untyped)
        async for chunk in stream:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


Query = tuple[tuple[tuple[str, str], ...], str]


def _query_string(raw: bytes) -> Query | None:
    """A query string's parameters and its text, as the route reads them through Litestar (`query_params`: latin-1,
    blank values kept; `url.query`: UTF-8); None when it is not UTF-8 (the route's to answer). A `dict` of the
    parameters keeps the last of each name, as the route does. Agents ask the same questions again (as
    DocsIndex.lookup's cache expects), so a short one is parsed once."""
    return _read_query(raw) if len(raw) > _CACHED_QUERY else _cached_query(raw)


def _read_query(raw: bytes) -> Query | None:
    if not raw:
        return (), ""
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return None
    return tuple(parse_qsl(raw.decode("latin-1"), keep_blank_values=True, separator="&")), text


_CACHED_QUERY = 512  # bytes: the cache holds at most 1024 of them
_cached_query = functools.lru_cache(maxsize=1024)(_read_query)


def _answer_shapes() -> openapi.Body:
    """/ask's 200 as the document shows it: an AskSuccess as JSON, or an event stream whose events' `data` are
    AskEvents (a component of its own)."""
    (success, event), components = openapi.schema_of(AskSuccess, AskEvent)
    components["AskEvent"] = {**event, "description": "one `data:` line of the /ask event stream"}
    stream = openapi.event_stream("AskEvent")
    return openapi.Body({openapi.JSON: openapi.MediaType(schema=success), "text/event-stream": stream}, components)


_QUERY_TEXT = Annotated[str, msgspec.Meta(max_length=MAX_QUERY, description="the question (or its alias `q`)")]


def _opt(*headers: openapi.Parameter) -> dict[str, object]:
    """/ask's parameters (the query string's, and `headers`) and answer, for the document."""
    params = openapi.query(query=_QUERY_TEXT, q=_QUERY_TEXT, streaming=bool, query_id=uuid.UUID)
    for listed in params.values():
        listed.extend(headers)
    return {**params, **openapi.custom_answer(_answer_shapes())}


_PREFER = openapi.Parameter(name="Prefer", in_="header", required=False, schema={"type": "string"})
_KEY = openapi.Parameter(
    name="Idempotency-Key", in_="header", required=False, schema={"type": "string", "minLength": 1, "maxLength": 256}
)
_ASK_ERRORS = errors(BAD_REQUEST, INVALID_JSON, RATE_LIMITED)
# The call, read as AskFastPath reads it; on POST, the body the document shows (AskRequest) comes in it.
_CALL = Provide(_read_call)
(_ASK_BODY,) = openapi.body(AskRequest, required=False).values()
_POSTED_CALL = openapi.BodyDependency(_read_call, _ASK_BODY)


@get(["/ask"], dependencies={"call": _CALL}, responses=_ASK_ERRORS, opt=_opt(_PREFER))
async def ask_get(request: Request[Any, Any, Any], call: NamedDependency[AskCall]) -> Response[bytes] | Stream:
    return await _ask(site_of(request), call)


@post(
    ["/ask"],
    status_code=200,
    dependencies={"call": _POSTED_CALL},
    responses=errors(BAD_REQUEST, INVALID_JSON, CONFLICT, UNPROCESSABLE, RATE_LIMITED),  # and replays' conflicts
    opt=_opt(_PREFER, _KEY),
)
async def ask_post(request: Request[Any, Any, Any], call: NamedDependency[AskCall]) -> Response[bytes] | Stream:
    return await _ask(site_of(request), call)


HANDLERS = [ask_get, ask_post]
