"""`/mcp`: a read-only MCP server over Streamable HTTP, JSON-RPC 2.0, without sessions, in both eras.

`GET /mcp` (and `/.well-known/mcp`, `/.well-known/mcp.json`) returns the product's descriptor; a GET
that only accepts an event stream is the transport's server-to-client stream request and gets 405, as
does DELETE (there are no sessions). `POST /mcp` takes one JSON-RPC message: requests are answered
with `application/json`, notifications and posted responses with 202 and no body.

Two eras, chosen per request as MCP 2026-07-28's backward-compatibility section describes (`era_of`), among the
revisions the `mcp_revisions` setting offers:
- the handshake era (2024-11-05 to 2025-11-25): `initialize`, then requests with `MCP-Protocol-Version`; JSON-RPC
  failures are HTTP 200 with an `error` object, as the product spec says; only transport rules (`Accept`,
  `MCP-Protocol-Version`, idempotency conflicts) use other statuses.
- the stateless era (2026-07-28): no `initialize`; each request carries its version and client capabilities in
  `params._meta` and its version, method and name in headers (`check_modern`), and is answered on its own:
  `server/discover`, results with `resultType`, the server's identity in `_meta`, list results with cache hints.
  Refusals of the envelope are 400 (-32020 header mismatch, -32022 unsupported version, -32602 bad `_meta`), an
  unknown or removed method 404 (-32601); every error echoes the request's id.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal, TypeVar, cast

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec
from litestar.params import HeaderParameter
from litestar.response import Stream
from msgspec import UNSET, UnsetType

from emulator.config import MCP_REVISIONS
from emulator.core import canaries, jsonbody, openapi
from emulator.core.contract import body, error_shape, errors
from emulator.core.errors import BAD_REQUEST, CONFLICT, UNPROCESSABLE, ApiError
from emulator.core.faultgate import drop
from emulator.core.faults import Verdict
from emulator.core.payloads import SiteMcp
from emulator.site.idempotency import Answer, fingerprint, guarded, read_key
from emulator.site.state import Accept, Integration, Site, site_of

PRODUCT_PROTOCOL = "2025-06-18"
# The handshake era's versions (negotiated in `initialize`) and the stateless era's (declared on each request).
SUPPORTED_PROTOCOLS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_PROTOCOLS = ("2026-07-28",)
LEGACY_ERA, MODERN_ERA = MCP_REVISIONS
# What a request without MCP-Protocol-Version speaks, as the transport spec lets a server assume.
DEFAULT_PROTOCOL = "2025-03-26"
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
# Where list results and discovery may be cached: the tools never change while the emulator runs and /mcp answers
# everyone alike (no credential), so five minutes, shareable.
CACHE_TTL_MS = 300_000
CACHE_SCOPE = "public"
# Whose `Mcp-Name` header mirrors which param (the transport spec's standard request headers).
NAMED_BY = {"tools/call": "name", "resources/read": "uri", "prompts/get": "name"}
# Methods of the handshake era that 2026-07-28 removed: named as such in their -32601.
REMOVED_METHODS = ("initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe")
SERVER_INFO = {"name": "pixeltable-web", "version": "1.0.0"}
INSTRUCTIONS = (
    "Read-only tools about Pixeltable and Pixeltable Cloud. search_docs finds documentation pages for "
    "a topic; list_integrations lists the AI providers and tools Pixeltable integrates with. "
    "No tool changes any state."
)
USAGE = "POST JSON-RPC 2.0 messages (initialize, tools/list, tools/call, ping) to this endpoint."
METHODS = ("initialize", "ping", "tools/list", "tools/call")
MODERN_METHODS = ("server/discover", "tools/list", "tools/call")

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = (
    -32700,
    -32600,
    -32601,
    -32602,
    -32603,
)
# The codes 2026-07-28 reserves (-32020 to -32099) that /mcp answers.
HEADER_MISMATCH, UNSUPPORTED_VERSION = -32020, -32022

_RESULT_ITEM = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "url": {"type": "string"},
        "description": {"type": "string"},
    },
    "required": ["name", "url", "description"],
}
# A JSON object as a client sends it (a method's params, a tool's arguments): open until the method's params type
# (`_params`) or the tool's input schema (`_check_args`, which narrows each value) checks it.
JsonObject = dict[str, object]
P = TypeVar("P", bound=msgspec.Struct)


class ToolAnnotations(msgspec.Struct, rename="camel", frozen=True):
    read_only_hint: bool
    idempotent_hint: bool
    open_world_hint: bool


class Tool(msgspec.Struct, rename="camel", frozen=True, kw_only=True):
    """A tool as `tools/list` describes it."""

    name: str
    title: str
    description: str
    input_schema: dict[str, Any]  # a JSON Schema; msgspec describes the struct, so of a type it reads
    output_schema: dict[str, Any]
    annotations: ToolAnnotations


_READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
TOOLS: list[Tool] = [
    Tool(
        name="search_docs",
        title="Search the documentation",
        description="Search the Pixeltable documentation and return the most relevant pages (title, URL, "
        "summary) with a short answer built from them.",
        input_schema={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "Topic, keywords or a question",
                    "minLength": 1,
                    "maxLength": 2000,
                },
                "limit": {
                    "type": "integer",
                    "description": "How many pages to return (default 5)",
                    "minimum": 1,
                    "maximum": 20,
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "answer": {"type": "string"},
                "results": {"type": "array", "items": _RESULT_ITEM},
            },
            "required": ["query", "answer", "results"],
        },
        annotations=_READ_ONLY,
    ),
    Tool(
        name="list_integrations",
        title="List integrations",
        description="List the AI providers and tools Pixeltable integrates with, optionally for one "
        "category (llm, embeddings, vision, audio, annotation, storage, data, tooling).",
        input_schema={
            "type": "object",
            "properties": {
                "category": {"type": "string", "description": "Only integrations of this category"},
            },
            "required": [],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {"integrations": {"type": "array", "items": {"type": "object"}}},
            "required": ["integrations"],
        },
        annotations=_READ_ONLY,
    ),
]


class SearchDocsArgs(msgspec.Struct, frozen=True):
    """search_docs' arguments, once its input schema has checked them."""

    query: str
    limit: int = 5


class ListIntegrationsArgs(msgspec.Struct, frozen=True):
    """list_integrations' arguments, once its input schema has checked them."""

    category: str | None = None


class FoundPage(msgspec.Struct, frozen=True):
    """A documentation page search_docs found."""

    name: str
    url: str
    description: str


class SearchDocsAnswer(msgspec.Struct, frozen=True):
    """search_docs' structured content (its output schema)."""

    query: str
    answer: str
    results: list[FoundPage]


class IntegrationsAnswer(msgspec.Struct, frozen=True):
    """list_integrations' structured content (its output schema)."""

    integrations: list[Integration]


class Text(msgspec.Struct):
    type: Literal["text"]
    text: str


class ResultMeta(msgspec.Struct, frozen=True):
    """A 2026-07-28 result's `_meta`: the server says who it is on each result."""

    server_info: dict[str, str] = msgspec.field(name="io.modelcontextprotocol/serverInfo")


MODERN_META = ResultMeta(SERVER_INFO)


class _ToolResult(msgspec.Struct, rename="camel", kw_only=True):
    """`tools/call`'s result: text for the model, the structured answer its output schema describes, and whether
    it is an error the model can correct (a bad argument) rather than a protocol error. One type per tool (and one
    for the errors), so each one's structured content has its own schema."""

    content: list[Text]
    # 2026-07-28 only (unset, so absent, in the handshake era): "complete", and the server's identity.
    result_type: str | UnsetType = UNSET
    meta: ResultMeta | UnsetType = msgspec.field(default=UNSET, name="_meta")


class SearchDocsResult(_ToolResult, kw_only=True):
    structured_content: SearchDocsAnswer
    is_error: bool = False


class IntegrationsResult(_ToolResult, kw_only=True):
    structured_content: IntegrationsAnswer
    is_error: bool = False


class ToolError(_ToolResult, kw_only=True):
    is_error: bool = True


class InitializeResult(msgspec.Struct, rename="camel"):
    protocol_version: str
    capabilities: dict[str, dict[str, bool]]
    server_info: dict[str, str]
    instructions: str


class ToolList(msgspec.Struct, rename="camel", kw_only=True):
    tools: list[Tool]
    # 2026-07-28 only (unset, so absent, in the handshake era): "complete", cache hints, the server's identity.
    result_type: str | UnsetType = UNSET
    ttl_ms: int | UnsetType = UNSET
    cache_scope: str | UnsetType = UNSET
    meta: ResultMeta | UnsetType = msgspec.field(default=UNSET, name="_meta")


class DiscoverResult(msgspec.Struct, rename="camel", kw_only=True):
    """`server/discover`'s result (2026-07-28): the versions and capabilities this server offers, and who it is."""

    result_type: str = "complete"
    supported_versions: list[str]
    capabilities: dict[str, dict[str, bool]]
    instructions: str
    ttl_ms: int = CACHE_TTL_MS
    cache_scope: str = CACHE_SCOPE
    meta: ResultMeta = msgspec.field(default=MODERN_META, name="_meta")


class ElicitForm(msgspec.Struct, rename="camel", kw_only=True):
    """An `elicitation/create` request's params (form mode): what to ask the person, and the answer's schema."""

    mode: str = "form"
    message: str
    requested_schema: dict[str, Any]


class ElicitRequest(msgspec.Struct, kw_only=True):
    method: str = "elicitation/create"
    params: ElicitForm


class InputRequiredResult(msgspec.Struct, rename="camel", kw_only=True):
    """A 2026-07-28 `input_required` result: what the client must ask the person (only when it declared
    `elicitation`), and the state it echoes when it repeats the call with the answers."""

    result_type: str = "input_required"
    input_requests: dict[str, ElicitRequest] | UnsetType = UNSET
    request_state: str
    meta: ResultMeta = msgspec.field(default=MODERN_META, name="_meta")


class Nothing(msgspec.Struct):
    """`{}`: ping's result."""


_encode = msgspec.json.Encoder().encode


RequestId = str | int


class JsonRpcRequest(msgspec.Struct):
    """The documented body of POST /mcp (read by `read_message`, which answers each flaw as JSON-RPC does)."""

    jsonrpc: str
    method: str
    id: RequestId | None = None
    # Each method's own (InitializeParams, CallParams, none for the others), read as JsonObject. `Any` as the document
    # shows it (`"type": "object"`): msgspec documents no `object`.
    params: dict[str, Any] | None = None


class InitializeParams(msgspec.Struct, rename="camel"):
    """What `initialize` reads of its params (the client's capabilities and info are not read)."""

    protocol_version: str


class CallParams(msgspec.Struct):
    """`tools/call`'s params. `arguments` is any JSON here: it is checked once the tool is known, and a wrong one is
    the model's to correct (an `isError` result), not a protocol error. `args` and `input` are where a client that
    misplaced the arguments put them (it is told where they go)."""

    name: str
    arguments: object = UNSET
    args: object = UNSET
    input: object = UNSET


# --- the answers: one envelope per method's result, and the error -------------------------------------------------


class UnsupportedVersion(msgspec.Struct, frozen=True):
    """-32022's data: the versions to retry with, and the one asked for."""

    supported: list[str]
    requested: str


class JsonRpcError(msgspec.Struct):
    code: int
    message: str
    data: UnsupportedVersion | UnsetType = UNSET


class JsonRpcFailure(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A JSON-RPC error (an HTTP 200 but for transport rules); no `id` when the message's could not be read."""

    jsonrpc: str
    id: RequestId | None = None
    error: JsonRpcError


class _Answered(msgspec.Struct):
    jsonrpc: str
    id: RequestId


class Initialized(_Answered):
    result: InitializeResult


class ToolsListed(_Answered):
    result: ToolList


class DocsSearched(_Answered):
    result: SearchDocsResult


class IntegrationsListed(_Answered):
    result: IntegrationsResult


class ToolRefused(_Answered):
    result: ToolError


class Pong(_Answered):
    result: Nothing


class Discovered(_Answered):
    result: DiscoverResult


class InputAsked(_Answered):
    result: InputRequiredResult


Answered = Initialized | Discovered | ToolsListed | DocsSearched | IntegrationsListed | ToolRefused | Pong | InputAsked
# As the document lists them: a generated client tries them in turn, so the most demanding come first.
ANSWERS = (
    JsonRpcFailure,
    Initialized,
    Discovered,
    ToolsListed,
    InputAsked,
    DocsSearched,
    IntegrationsListed,
    ToolRefused,
    Pong,
)


# --- a posted message, as read ----------------------------------------------------------------------------------


class Call(msgspec.Struct, frozen=True, tag=True):
    """A request to answer: its id, method and params (an object)."""

    id: RequestId
    method: str
    params: JsonObject


class Notice(msgspec.Struct, frozen=True, tag=True):
    """A notification (its method), or a response the client posted (no method): accepted, nothing to answer."""

    method: str | None


class Flawed(msgspec.Struct, frozen=True, tag=True):
    """A message JSON-RPC refuses (answered as a 200 with its `error`), and its method when it named one."""

    failure: JsonRpcFailure
    method: str | None = None


class Posted(msgspec.Struct, frozen=True):
    """POST /mcp's body as read: what the message is, the `name` a tools/call sent (whatever its JSON type, for the
    journal), and the body itself (the idempotency fingerprint's)."""

    message: Call | Notice | Flawed
    raw: bytes
    tool: object = UNSET


class ToolSummary(msgspec.Struct, frozen=True):
    name: str
    description: str


class McpDescriptor(msgspec.Struct, rename="camel"):
    transport: str
    protocol: str
    protocol_version: str
    server_info: dict[str, str]
    instructions: str
    tools: list[ToolSummary]
    usage: str


class CardServer(msgspec.Struct, kw_only=True):
    """The server as its card lists it (the card's own mix of spellings)."""

    name: str
    transport: str
    url: str
    protocol_version: str = msgspec.field(name="protocolVersion")
    read_only: bool
    instructions: str
    tools: list[ToolSummary]
    usage: str


class ServerCard(msgspec.Struct, kw_only=True):
    """`/.well-known/mcp/server-card.json`."""

    name: str
    description: str
    url: str
    version: str
    servers: list[CardServer]


class _Failure(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def descriptor() -> McpDescriptor:
    return McpDescriptor(
        transport="webmcp",
        protocol="mcp",
        protocol_version=PRODUCT_PROTOCOL,
        server_info=SERVER_INFO,
        instructions=INSTRUCTIONS,
        tools=[ToolSummary(t.name, t.description) for t in TOOLS],
        usage=USAGE,
    )


# --- methods --------------------------------------------------------------------------------------


def _params(params: JsonObject, type_: type[P], problem: str) -> P:
    """A method's params as its type, or the JSON-RPC invalid-params error `problem`."""
    try:
        return msgspec.convert(params, type_)
    except msgspec.ValidationError:
        raise _Failure(INVALID_PARAMS, problem) from None


def _initialize(params: JsonObject) -> InitializeResult:
    requested = _params(params, InitializeParams, "initialize needs params.protocolVersion (a string)").protocol_version
    # Echo a version we speak; otherwise offer ours and let the client decide.
    version = requested if requested in SUPPORTED_PROTOCOLS else PRODUCT_PROTOCOL
    return InitializeResult(version, {"tools": {"listChanged": False}}, SERVER_INFO, INSTRUCTIONS)


def _tool_error(text: str) -> ToolError:
    # Argument problems are tool execution errors (isError), so a model can correct itself.
    return ToolError(content=[Text("text", text)])


def _check_args(tool: Tool, args: JsonObject) -> str | None:
    schema = tool.input_schema
    props: dict[str, dict[str, Any]] = schema["properties"]
    unknown = sorted(set(args) - set(props))
    if unknown:
        known = ", ".join(props) or "none"
        return f"{tool.name}: unknown argument(s) {', '.join(unknown)}; arguments are: {known}"
    for name in schema["required"]:
        if name not in args:
            return f"{tool.name}: `{name}` is required"
    for name, value in args.items():
        rule = props[name]
        if rule["type"] == "string":
            if not isinstance(value, str):
                return f"{tool.name}: `{name}` must be a string"
            if len(value.strip()) < rule.get("minLength", 0):
                return f"{tool.name}: `{name}` must not be empty"
            if len(value) > rule.get("maxLength", 1 << 30):
                return f"{tool.name}: `{name}` is {len(value)} characters; the limit is {rule['maxLength']}"
        elif rule["type"] == "integer":
            if not isinstance(value, int) or isinstance(value, bool):
                return f"{tool.name}: `{name}` must be a whole number"
            if not rule["minimum"] <= value <= rule["maximum"]:
                return f"{tool.name}: `{name}` must be from {rule['minimum']} to {rule['maximum']}"
    return None


def _search_docs(site: Site, checked: JsonObject) -> SearchDocsResult:
    args = msgspec.convert(checked, SearchDocsArgs)
    query = args.query.strip()
    hits, answer = site.docs.lookup(query, limit=args.limit)
    planted = site.core.planted.for_tool("search_docs")
    if planted is not None:  # an attacked trial's canary, in the answer the model reads
        answer = canaries.append(answer, planted)
    results = [FoundPage(h.name, site.base_url + h.path, h.description) for h in hits]
    lines = [answer, ""] + [f"- {r.name}: {r.url}\n  {r.description}" for r in results]
    structured = SearchDocsAnswer(query, answer, results)
    return SearchDocsResult(content=[Text("text", "\n".join(lines).strip())], structured_content=structured)


def _list_integrations(site: Site, checked: JsonObject) -> IntegrationsResult | ToolError:
    category = msgspec.convert(checked, ListIntegrationsArgs).category
    items = [i for i in site.integrations if category is None or i.category == category.strip().lower()]
    if category is not None and not items:
        known = ", ".join(sorted({i.category or "" for i in site.integrations}))
        return _tool_error(f"list_integrations: no integrations in category {category!r}; categories: {known}")
    planted = site.core.planted.for_tool("list_integrations")
    if planted is not None and items:  # an attacked trial's canary, in the first integration's description
        first = items[0]
        said = "" if first.description is UNSET else first.description
        items = [msgspec.structs.replace(first, description=canaries.append(said, planted)), *items[1:]]
    text = "\n".join(f"- {i.name} ({_shown(i.category)}): {i.description or ''}" for i in items)
    return IntegrationsResult(content=[Text("text", text)], structured_content=IntegrationsAnswer(items))


def _shown(field: str | UnsetType) -> str | None:
    return None if field is UNSET else field  # a field the integrations file leaves out reads "None"


_TOOL_IMPLS = {"search_docs": _search_docs, "list_integrations": _list_integrations}


def _call_tool(site: Site, params: JsonObject) -> SearchDocsResult | IntegrationsResult | ToolError:
    call = _params(params, CallParams, "tools/call needs params.name (a string)")
    name = call.name
    tool = next((t for t in TOOLS if t.name == name), None)
    if tool is None:
        raise _Failure(INVALID_PARAMS, f"Unknown tool: {name}; tools: {', '.join(_TOOL_IMPLS)}")
    if call.arguments is UNSET and (call.args is not UNSET or call.input is not UNSET):
        return _tool_error(f"{name}: pass the tool's arguments in params.arguments")
    args = call.arguments or {}
    if not isinstance(args, dict):
        return _tool_error(f"{name}: params.arguments must be an object")
    checked = cast(JsonObject, args)  # decoded JSON: an object's keys are strings
    problem = _check_args(tool, checked)
    if problem:
        return _tool_error(problem)
    return _TOOL_IMPLS[name](site, checked)


def read_message(raw: bytes) -> Posted:
    """POST /mcp's body, read: a call to answer, a notice, or a message JSON-RPC refuses (never an exception: every
    flaw is answered as JSON-RPC answers it)."""
    try:
        message = jsonbody.decode(raw)
    except jsonbody.NotJson as e:
        return Posted(Flawed(_failure(None, PARSE_ERROR, f"Parse error: {e}")), raw)
    read = _classify(message)
    tool: object = UNSET
    if read.method == "tools/call" and isinstance(message, dict):
        params = message.get("params")
        tool = params.get("name") if isinstance(params, dict) else None
    return Posted(read, raw, tool)


def _classify(message: object) -> Call | Notice | Flawed:
    if isinstance(message, list):
        return Flawed(_failure(None, INVALID_REQUEST, "batches are not accepted (removed in MCP 2025-06-18)"))
    if not isinstance(message, dict):
        return Flawed(_failure(None, INVALID_REQUEST, "a JSON-RPC message must be a JSON object"))
    msg_id = message.get("id")
    rid = msg_id if isinstance(msg_id, (str, int)) and not isinstance(msg_id, bool) else None
    if message.get("jsonrpc") != "2.0":
        return Flawed(_failure(rid, INVALID_REQUEST, 'jsonrpc must be the string "2.0"'))
    method = message.get("method")
    if method is None and ("result" in message or "error" in message):
        return Notice(None)  # a response posted by the client: accepted, nothing to answer
    if not isinstance(method, str):
        return Flawed(_failure(rid, INVALID_REQUEST, "method must be a string"))
    if "id" not in message:
        return Notice(method)
    if rid is None:
        return Flawed(_failure(None, INVALID_REQUEST, "id must be a string or an integer (not null)"), method)
    params = message.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return Flawed(_failure(rid, INVALID_PARAMS, "params must be an object"), method)
    return Call(rid, method, params)


def dispatch(site: Site, call: Call) -> Answered | JsonRpcFailure:
    """A call's answer: its method's result in its envelope, or the JSON-RPC error."""
    method, rid = call.method, call.id
    try:
        if method == "initialize":
            return Initialized("2.0", rid, _initialize(call.params))
        if method == "ping":
            return Pong("2.0", rid, Nothing())
        if method == "tools/list":
            return ToolsListed("2.0", rid, ToolList(tools=TOOLS))
        if method == "tools/call":
            result = _call_tool(site, call.params)
            if isinstance(result, SearchDocsResult):
                return DocsSearched("2.0", rid, result)
            if isinstance(result, IntegrationsResult):
                return IntegrationsListed("2.0", rid, result)
            return ToolRefused("2.0", rid, result)
        raise _Failure(METHOD_NOT_FOUND, f"Method not found: {method}; this server answers {', '.join(METHODS)}")
    except _Failure as f:
        return _failure(rid, f.code, f.message)


def _failure(
    rid: RequestId | None, code: int, message: str, data: UnsupportedVersion | UnsetType = UNSET
) -> JsonRpcFailure:
    return JsonRpcFailure(jsonrpc="2.0", id=rid, error=JsonRpcError(code, message, data))


# --- the stateless era (2026-07-28) -----------------------------------------------------------------------------


class Headers(msgspec.Struct, frozen=True):
    """The request headers the transport mirrors from the body (None: absent), as sent (OWS trimmed)."""

    version: str | None = None
    method: str | None = None
    name: str | None = None


def offered_versions(offered: tuple[str, ...]) -> list[str]:
    """Every protocol version the offered revisions speak, newest first (discovery's and -32022's list)."""
    versions: list[str] = []
    if MODERN_ERA in offered:
        versions += reversed(MODERN_PROTOCOLS)
    if LEGACY_ERA in offered:
        versions += reversed(SUPPORTED_PROTOCOLS)
    return versions


def _meta_of(message: Call | Notice | Flawed) -> object:
    return message.params.get("_meta") if isinstance(message, Call) else None


def era_of(offered: tuple[str, ...], headers: Headers, message: Call | Notice | Flawed) -> str:
    """Which era serves a request. With both offered, as 2026-07-28 says a dual-era server chooses: a request that
    declares its version in `_meta`, or names in its header a version the handshake era does not know, is modern;
    one without either (`initialize` above all) or with a handshake-era version is legacy."""
    if MODERN_ERA not in offered:
        return LEGACY_ERA
    if LEGACY_ERA not in offered:
        return MODERN_ERA
    meta = _meta_of(message)
    if isinstance(meta, dict) and META_VERSION in meta:
        return MODERN_ERA
    if headers.version is None or headers.version in SUPPORTED_PROTOCOLS:
        return LEGACY_ERA
    return MODERN_ERA


def _unsupported(rid: RequestId, requested: str, offered: tuple[str, ...]) -> JsonRpcFailure:
    supported = offered_versions(offered)
    hint = "" if LEGACY_ERA in offered else " (this server has no initialize handshake: send server/discover)"
    message = f"Unsupported protocol version {requested!r}; supported: {', '.join(supported)}{hint}"
    return _failure(rid, UNSUPPORTED_VERSION, message, UnsupportedVersion(supported, requested))


def _header_value(value: str) -> str | None:
    """A mirrored header's value: as sent, or the text a `=?base64?…?=` sentinel encodes (None: not decodable)."""
    if not (value.startswith("=?base64?") and value.endswith("?=")):
        return value
    try:
        return base64.b64decode(value[len("=?base64?") : -len("?=")], validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def check_modern(call: Call, headers: Headers, offered: tuple[str, ...]) -> JsonRpcFailure | None:
    """A 2026-07-28 request's envelope, checked as the transport spec orders it: the version (header, then
    `_meta`), the mirrored headers against the body, `_meta`'s required fields. None: the request may be served."""
    rid, method = call.id, call.method
    meta = call.params.get("_meta")
    declared = isinstance(meta, dict) and META_VERSION in meta
    if not declared and (headers.version is None or headers.version in SUPPORTED_PROTOCOLS):
        # A handshake-era request where only the stateless era is offered.
        asked = call.params.get("protocolVersion") if method == "initialize" else headers.version
        return _unsupported(rid, asked if isinstance(asked, str) else DEFAULT_PROTOCOL, offered)
    if headers.version is None:
        return _failure(rid, HEADER_MISMATCH, "Header mismatch: the MCP-Protocol-Version header is required")
    if headers.version not in MODERN_PROTOCOLS:
        return _unsupported(rid, headers.version, offered)
    if headers.method is None:
        return _failure(rid, HEADER_MISMATCH, "Header mismatch: the Mcp-Method header is required")
    if headers.method != method:
        return _failure(
            rid, HEADER_MISMATCH, f"Header mismatch: Mcp-Method {headers.method!r} does not match the body's {method!r}"
        )
    field = NAMED_BY.get(method)
    if field is not None:
        named = call.params.get(field)
        if headers.name is None:
            return _failure(
                rid, HEADER_MISMATCH, f"Header mismatch: {method} needs an Mcp-Name header (params.{field})"
            )
        sent = _header_value(headers.name)
        if sent is None:
            return _failure(rid, HEADER_MISMATCH, "Header mismatch: Mcp-Name is not valid =?base64?…?= UTF-8")
        if sent != named:
            return _failure(
                rid, HEADER_MISMATCH, f"Header mismatch: Mcp-Name {sent!r} does not match params.{field} {named!r}"
            )
    if not isinstance(meta, dict):
        return _failure(rid, INVALID_PARAMS, f"params._meta is required (an object with {META_VERSION})")
    checked = cast(JsonObject, meta)
    version = checked.get(META_VERSION)
    if not isinstance(version, str):
        return _failure(rid, INVALID_PARAMS, f"params._meta needs {META_VERSION} (a string)")
    if not isinstance(checked.get(META_CAPABILITIES), dict):
        return _failure(rid, INVALID_PARAMS, f"params._meta needs {META_CAPABILITIES} (an object)")
    if version != headers.version:
        return _failure(
            rid,
            HEADER_MISMATCH,
            f"Header mismatch: MCP-Protocol-Version {headers.version!r} does not match _meta's {version!r}",
        )
    return None


def dispatch_modern(site: Site, call: Call, offered: tuple[str, ...]) -> Answered | JsonRpcFailure:
    """A checked 2026-07-28 call's answer: its result, with `resultType` and the server's identity, or the error."""
    method, rid = call.method, call.id
    if method == "server/discover":
        capabilities = {"tools": {"listChanged": False}}
        return Discovered(
            "2.0",
            rid,
            DiscoverResult(
                supported_versions=offered_versions(offered), capabilities=capabilities, instructions=INSTRUCTIONS
            ),
        )
    if method == "tools/list":
        listed = ToolList(
            tools=TOOLS, result_type="complete", ttl_ms=CACHE_TTL_MS, cache_scope=CACHE_SCOPE, meta=MODERN_META
        )
        return ToolsListed("2.0", rid, listed)
    if method == "tools/call":
        if "requestState" in call.params or "inputResponses" in call.params:
            asked = _second_round(call)
            if asked is not None:
                return asked
        answer = dispatch(site, call)
        if isinstance(answer, (DocsSearched, IntegrationsListed, ToolRefused)):
            done = msgspec.structs.replace(answer.result, result_type="complete", meta=MODERN_META)
            return msgspec.structs.replace(answer, result=done)
        return answer
    removed = f" ({method} was removed in 2026-07-28)" if method in REMOVED_METHODS else ""
    return _failure(
        rid, METHOD_NOT_FOUND, f"Method not found: {method}{removed}; this server answers {', '.join(MODERN_METHODS)}"
    )


# --- input_required (2026-07-28's multi-round trip), as a fault rule provokes it -------------------------------------

INPUT_KEY = "confirm"  # the one input request's key, and its form's one field
# No tool of /mcp needs the person, so what a fault rule asks is a confirmation.
CONFIRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {INPUT_KEY: {"type": "boolean", "title": "Go on with the call"}},
    "required": [INPUT_KEY],
}


class _State(msgspec.Struct, frozen=True):
    """What `requestState` carries (tampering can do no worse than fail the call: the tools only read, so it is
    not signed): the tool asked about, and the question (None: state only, the client declared no elicitation)."""

    tool: str
    ask: str | None


def _encode_state(state: _State) -> str:
    return base64.urlsafe_b64encode(_encode(state)).decode()


def _decode_state(raw: object, tool: object) -> _State:
    try:
        state = msgspec.json.decode(base64.urlsafe_b64decode(str(raw).encode()), type=_State)
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise _Failure(INVALID_PARAMS, "params.requestState is not one this server issued") from None
    if not isinstance(raw, str) or state.tool != tool:
        raise _Failure(INVALID_PARAMS, "params.requestState is not one this server issued for this tool")
    return state


def input_required(call: Call, message: str | None) -> InputAsked:
    """The first round: ask the person (an elicitation, if the client declared it can), and the state to echo."""
    tool = str(call.params.get("name"))
    meta = cast(JsonObject, call.params.get("_meta") or {})
    capabilities = meta.get(META_CAPABILITIES)
    can_ask = isinstance(capabilities, dict) and "elicitation" in capabilities
    ask = (message or f"{tool} needs your confirmation to go on.") if can_ask else None
    return _asking(call.id, _State(tool, ask))


def _asking(rid: RequestId, state: _State) -> InputAsked:
    requests: dict[str, ElicitRequest] | UnsetType = UNSET
    if state.ask is not None:
        requests = {INPUT_KEY: ElicitRequest(params=ElicitForm(message=state.ask, requested_schema=CONFIRM_SCHEMA))}
    return InputAsked("2.0", rid, InputRequiredResult(input_requests=requests, request_state=_encode_state(state)))


def _second_round(call: Call) -> InputAsked | ToolRefused | JsonRpcFailure | None:
    """A tools/call repeated with `requestState` (and the answers): asked again when an answer is missing, refused
    when the person declined, else None: the call goes on as any other."""
    try:
        state = _decode_state(call.params.get("requestState"), call.params.get("name"))
    except _Failure as f:
        return _failure(call.id, f.code, f.message)
    if state.ask is None:
        return None
    responses = call.params.get("inputResponses")
    answer = responses.get(INPUT_KEY) if isinstance(responses, dict) else None
    action = answer.get("action") if isinstance(answer, dict) else None
    if action not in ("accept", "decline", "cancel"):
        return _asking(call.id, state)  # the answer is missing: ask again, as the spec advises
    content = answer.get("content") if isinstance(answer, dict) else None
    if action == "accept" and isinstance(content, dict) and content.get(INPUT_KEY) is not False:
        return None
    refused = _tool_error(f"{state.tool}: not run; the person did not confirm (elicitation {action})")
    return ToolRefused("2.0", call.id, msgspec.structs.replace(refused, result_type="complete", meta=MODERN_META))


def answer_modern(
    site: Site, call: Call, headers: Headers, offered: tuple[str, ...]
) -> tuple[int, Answered | JsonRpcFailure]:
    """A 2026-07-28 request's HTTP status and answer: 400 for a refused envelope, 404 (-32601) for a method this
    server does not have, else 200 (a tool's unknown name, -32602, stays a JSON-RPC error in a 200)."""
    refused = check_modern(call, headers, offered)
    if refused is not None:
        return 400, refused
    reply = dispatch_modern(site, call, offered)
    missing = isinstance(reply, JsonRpcFailure) and reply.error.code == METHOD_NOT_FOUND
    return (404 if missing else 200), reply


# --- HTTP -----------------------------------------------------------------------------------------


def _transport_error(status: int, code: int, message: str) -> Response[bytes]:
    return Response(_encode(_failure(None, code, message)), status_code=status, media_type="application/json")


def _no_sessions() -> Response[Any]:
    """405, no body: the transport's standalone stream and session deletion, which this stateless server has not."""
    return Response(b"", status_code=405, headers={"Allow": "GET, POST"})


@get(["/mcp", "/mcp/", "/.well-known/mcp", "/.well-known/mcp.json"])
async def mcp_get(
    request: Request[Any, Any, Any],
    accept: Accept = "",
) -> Response[McpDescriptor]:
    wants_json = not accept or any(t in accept for t in ("application/json", "text/html", "*/*"))
    if request.url.path.startswith("/mcp") and "text/event-stream" in accept and not wants_json:
        return _no_sessions()
    return Response(descriptor())


@get("/.well-known/mcp/server-card.json")
async def mcp_server_card(request: Request[Any, Any, Any]) -> ServerCard:
    url = site_of(request).base_url + "/mcp"
    server = CardServer(
        name=SERVER_INFO["name"],
        transport="http",
        url=url,
        protocol_version=PRODUCT_PROTOCOL,
        read_only=True,
        instructions=INSTRUCTIONS,
        tools=descriptor().tools,
        usage=USAGE,
    )
    return ServerCard(
        name=SERVER_INFO["name"], description=INSTRUCTIONS, url=url, version=SERVER_INFO["version"], servers=[server]
    )


@delete(["/mcp", "/mcp/"], status_code=405, include_in_schema=False)  # an operation that is not: no document entry
async def mcp_delete() -> Response[Any]:
    return _no_sessions()


def on_api_error(request: Request[Any, Any, Any], exc: ApiError) -> Response[bytes]:
    """Refusals on /mcp (a bad Idempotency-Key, a replay conflict) as JSON-RPC error bodies."""
    return Response(
        _encode(_failure(None, INVALID_REQUEST, exc.message)),
        status_code=exc.status,
        media_type="application/json",
        headers=exc.headers,
    )


# /mcp's refusals as the document shows them: a JSON-RPC error (its transport rules' statuses; JSON-RPC's own
# errors are 200s, among the answers).
REFUSAL = error_shape(JsonRpcFailure, on_api_error, description="a refusal of the transport, as a JSON-RPC error")


def _answers() -> openapi.Body:
    schemas, components = openapi.schema_of(*ANSWERS)
    return openapi.Body({openapi.JSON: openapi.MediaType(schema={"oneOf": schemas})}, components)


@post(
    ["/mcp", "/mcp/"],
    status_code=200,
    exception_handlers={ApiError: on_api_error},
    dependencies={"posted": body(JsonRpcRequest, read_message)},
    responses={
        202: ResponseSpec(None, description="a notification, or a response the client posted: accepted, no body"),
        406: ResponseSpec(None, description="not_acceptable: the client must accept application/json"),
        **errors(BAD_REQUEST, CONFLICT, UNPROCESSABLE),
    },
    opt=openapi.custom_answer(_answers()),
)
async def mcp_post(
    request: Request[Any, Any, Any],
    posted: NamedDependency[Posted],
    accept: Accept = "",
    protocol: Annotated[str | None, HeaderParameter(name="mcp-protocol-version")] = None,
    mcp_method: Annotated[str | None, HeaderParameter(name="mcp-method")] = None,
    mcp_name: Annotated[str | None, HeaderParameter(name="mcp-name")] = None,
    idempotency_key: Annotated[str | None, HeaderParameter(name="idempotency-key")] = None,
) -> Response[bytes]:
    site = site_of(request)
    if accept and not any(t in accept for t in ("application/json", "*/*", "application/*")):
        return _transport_error(
            406,
            INVALID_REQUEST,
            "Not Acceptable: the client must accept application/json (and text/event-stream)",
        )
    offered = site.core.settings.mcp_offered
    headers = Headers(_trimmed(protocol), _trimmed(mcp_method), _trimmed(mcp_name))
    era = era_of(offered, headers, posted.message)
    if era == LEGACY_ERA and protocol is not None and protocol.strip() not in SUPPORTED_PROTOCOLS:
        return _transport_error(
            400,
            INVALID_REQUEST,
            f"Bad Request: unsupported MCP-Protocol-Version {protocol.strip()!r}; "
            f"supported: {', '.join(SUPPORTED_PROTOCOLS)}",
        )
    ip = site.client_ip(request)
    if isinstance(posted.message, Call) and site.core.faults.armed and not _answering(posted.message, era):
        call = posted.message
        name = call.params.get("name") if call.method == "tools/call" else None
        verdict = await site.core.faults.request(
            "site",
            "POST",
            "/mcp",
            mcp_method=call.method,
            tool=name if isinstance(name, str) else None,
            modern=era == MODERN_ERA,
        )
        if verdict is not None:
            faulted, error = await _faulted(request, call, verdict, era, headers, offered)
            status = faulted.status_code or 200
            event = SiteMcp(
                status=status, replayed=False, tool=posted.tool, method=call.method, error=error, revision=era
            )
            site.core.bus.publish(ip, event)
            return faulted
    key = read_key(idempotency_key)
    # What the journal says of the call: unset on a replayed answer (produce does not run).
    tool: object = UNSET
    called: str | UnsetType | None = UNSET
    error: int | UnsetType | None = UNSET

    async def produce() -> Answer:
        nonlocal tool, called, error
        await site.core.faults.checkpoint("/mcp")
        message = posted.message
        tool, called = posted.tool, message.method
        if isinstance(message, Notice):
            return Answer(202, {})
        status = 200
        if isinstance(message, Flawed):
            reply = message.failure
        elif era == MODERN_ERA:
            status, reply = answer_modern(site, message, headers, offered)
        else:
            reply = dispatch(site, message)
        error = reply.error.code if isinstance(reply, JsonRpcFailure) else None
        return Answer(status, {"Content-Type": "application/json"}, _encode(reply))

    fp = fingerprint(_canonical(posted.raw)) if key is not None else ""
    answer, replayed = await guarded(site.idempotency, f"{ip} POST /mcp", key, fp, produce)
    served = UNSET if replayed else era
    event = SiteMcp(status=answer.status, replayed=replayed, tool=tool, method=called, error=error, revision=served)
    site.core.bus.publish(ip, event)
    media = answer.headers.pop("Content-Type", None)
    return Response(answer.body, status_code=answer.status, media_type=media, headers=answer.headers)


def _answering(call: Call, era: str) -> bool:
    """A 2026-07-28 tools/call repeated with the answers an `input_required` asked for: it completes the call, so no
    fault rule matches it again."""
    return era == MODERN_ERA and call.method == "tools/call" and "requestState" in call.params


def _requested(call: Call, headers: Headers, era: str) -> str:
    """The protocol version a request asks for (what -32022 says was requested)."""
    meta = call.params.get("_meta")
    declared = meta.get(META_VERSION) if isinstance(meta, dict) else None
    asked = call.params.get("protocolVersion") if call.method == "initialize" else headers.version or declared
    if isinstance(asked, str):
        return asked
    return MODERN_PROTOCOLS[-1] if era == MODERN_ERA else DEFAULT_PROTOCOL


async def _faulted(
    request: Request[Any, Any, Any], call: Call, verdict: Verdict, era: str, headers: Headers, offered: tuple[str, ...]
) -> tuple[Response[bytes], int | None]:
    """A fault rule's answer to a /mcp request: an HTTP status (as a JSON-RPC error), a dropped connection, or a
    protocol fault (`verdict.mcp`); and the JSON-RPC error code it answers, for the journal."""
    if verdict.drop:
        await drop(request.scope)
        return Response(b"", status_code=502), None  # never sent: the connection is gone
    if verdict.mcp is None:
        raise verdict.error()
    if verdict.mcp == "unsupported_version":  # as if the client's revision were not offered
        rest = tuple(r for r in offered if r != era)
        return _json_answer(400, _unsupported(call.id, _requested(call, headers, era), rest)), UNSUPPORTED_VERSION
    if verdict.mcp == "stream_cut":
        return _cut_stream(request, verdict), None
    refused = check_modern(call, headers, offered)  # input_required: a 2026-07-28 tools/call (faults sees to it)
    if refused is not None:
        return _json_answer(400, refused), refused.error.code
    return _json_answer(200, input_required(call, verdict.message or None)), None


def _json_answer(status: int, reply: Answered | JsonRpcFailure) -> Response[bytes]:
    return Response(_encode(reply), status_code=status, media_type="application/json")


class LogParams(msgspec.Struct):
    level: str
    logger: str
    data: str


class LogNotice(msgspec.Struct):
    """`notifications/message`: the event a cut stream may carry before it is cut."""

    jsonrpc: str
    method: str
    params: LogParams


def _cut_stream(request: Request[Any, Any, Any], verdict: Verdict) -> Response[bytes]:
    """An event stream that is cut: after a comment (so the answer's head is out), and `verdict.events` events, the
    connection closes before the call's response, as a server or a proxy that dies mid-answer does."""
    scope = request.scope

    async def events() -> AsyncIterator[bytes]:
        yield b": stream opened\n\n"
        if verdict.events:
            notice = LogNotice(
                "2.0",
                "notifications/message",
                LogParams(
                    "info",
                    SERVER_INFO["name"],
                    verdict.message or f"injected fault {verdict.rule}: the stream will be cut",
                ),
            )
            yield b"event: message\ndata: " + _encode(notice) + b"\n\n"
        await drop(scope)

    return cast(
        Response[bytes],
        Stream(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}),
    )


def _trimmed(header: str | None) -> str | None:
    return None if header is None else header.strip()  # a field value's surrounding whitespace is not its own


def _canonical(body: bytes) -> bytes:
    """The same JSON-RPC message in any key order or spacing is the same request."""
    try:
        return json.dumps(jsonbody.decode(body), sort_keys=True, separators=(",", ":")).encode()
    except (jsonbody.NotJson, RecursionError):
        return body


HANDLERS = [mcp_get, mcp_server_card, mcp_delete, mcp_post]
