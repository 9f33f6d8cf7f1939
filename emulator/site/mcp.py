"""`/mcp`: a read-only MCP server over Streamable HTTP (handshake era), JSON-RPC 2.0, stateless.

`GET /mcp` (and `/.well-known/mcp`, `/.well-known/mcp.json`) returns the product's descriptor; a GET
that only accepts an event stream is the transport's server-to-client stream request and gets 405, as
does DELETE (there are no sessions). `POST /mcp` takes one JSON-RPC message: requests are answered
with `application/json`, notifications and posted responses with 202 and no body. JSON-RPC failures
are HTTP 200 with an `error` object, as the product spec says; only transport rules (`Accept`,
`MCP-Protocol-Version`, idempotency conflicts) use other statuses.
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

import msgspec
from litestar import Request, Response, delete, get, post
from msgspec import UNSET, UnsetType

from emulator.core import canaries, jsonbody, openapi
from emulator.core.errors import ApiError
from emulator.core.openapi import JsonSchema
from emulator.core.payloads import SiteMcp
from emulator.site.idempotency import Answer, fingerprint, guarded, read_key
from emulator.site.state import Integration, Site, site_of

PRODUCT_PROTOCOL = "2025-06-18"
SUPPORTED_PROTOCOLS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
SERVER_INFO = {"name": "pixeltable-web", "version": "1.0.0"}
INSTRUCTIONS = (
    "Read-only tools about Pixeltable and Pixeltable Cloud. search_docs finds documentation pages for "
    "a topic; list_integrations lists the AI providers and tools Pixeltable integrates with. "
    "No tool changes any state."
)
USAGE = "POST JSON-RPC 2.0 messages (initialize, tools/list, tools/call, ping) to this endpoint."
METHODS = ("initialize", "ping", "tools/list", "tools/call")

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = (
    -32700,
    -32600,
    -32601,
    -32602,
    -32603,
)

_RESULT_ITEM = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "url": {"type": "string"},
        "description": {"type": "string"},
    },
    "required": ["name", "url", "description"],
}
# A JSON object as a client sends it (a method's params, a tool's arguments): open until the method's params type or
# the tool's input schema checks it.
JsonObject = dict[str, Any]
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
    input_schema: JsonSchema
    output_schema: JsonSchema
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


class ToolResult(msgspec.Struct, rename="camel", kw_only=True):
    """`tools/call`'s result: text for the model, the structured answer its output schema describes, and whether
    it is an error the model can correct (a bad argument) rather than a protocol error."""

    content: list[Text]
    structured_content: SearchDocsAnswer | IntegrationsAnswer | UnsetType = UNSET
    is_error: bool


class InitializeResult(msgspec.Struct, rename="camel"):
    protocol_version: str
    capabilities: dict[str, dict[str, bool]]
    server_info: dict[str, str]
    instructions: str


class ToolList(msgspec.Struct):
    tools: list[Tool]


class Nothing(msgspec.Struct):
    """`{}`: ping's result."""


_encode = msgspec.json.Encoder().encode


class JsonRpcRequest(msgspec.Struct):
    """The documented body of POST /mcp (read by hand in `dispatch`, which answers each flaw as JSON-RPC does)."""

    jsonrpc: str
    method: str
    id: str | int | None = None
    params: JsonObject | None = None  # each method's own: InitializeParams, CallParams, none for the others


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


class JsonRpcError(msgspec.Struct, omit_defaults=True):
    code: int
    message: str
    data: Any = None


class JsonRpcResponse(msgspec.Struct, omit_defaults=True):
    jsonrpc: str
    id: Any = None
    result: msgspec.Struct | None = None
    error: JsonRpcError | None = None


class McpDescriptor(msgspec.Struct, rename="camel"):
    transport: str
    protocol: str
    protocol_version: str
    server_info: dict[str, str]
    instructions: str
    tools: list[dict[str, str]]
    usage: str


class _Failure(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def descriptor() -> McpDescriptor:
    return McpDescriptor(
        transport="webmcp",
        protocol="mcp",
        protocol_version=PRODUCT_PROTOCOL,
        server_info=SERVER_INFO,
        instructions=INSTRUCTIONS,
        tools=[{"name": t.name, "description": t.description} for t in TOOLS],
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


def _tool_error(text: str) -> ToolResult:
    # Argument problems are tool execution errors (isError), so a model can correct itself.
    return ToolResult(content=[Text("text", text)], is_error=True)


def _check_args(tool: Tool, args: JsonObject) -> str | None:
    schema = tool.input_schema
    props: dict[str, JsonSchema] = schema["properties"]
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


def _search_docs(site: Site, checked: JsonObject) -> ToolResult:
    args = msgspec.convert(checked, SearchDocsArgs)
    query = args.query.strip()
    hits, answer = site.docs.lookup(query, limit=args.limit)
    planted = site.core.planted.for_tool("search_docs")
    if planted is not None:  # an attacked trial's canary, in the answer the model reads
        answer = canaries.append(answer, planted)
    results = [FoundPage(h.name, site.base_url + h.path, h.description) for h in hits]
    lines = [answer, ""] + [f"- {r.name}: {r.url}\n  {r.description}" for r in results]
    structured = SearchDocsAnswer(query, answer, results)
    return ToolResult(content=[Text("text", "\n".join(lines).strip())], structured_content=structured, is_error=False)


def _list_integrations(site: Site, checked: JsonObject) -> ToolResult:
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
    return ToolResult(content=[Text("text", text)], structured_content=IntegrationsAnswer(items), is_error=False)


def _shown(field: str | UnsetType) -> str | None:
    return None if field is UNSET else field  # a field the integrations file leaves out reads "None"


_TOOL_IMPLS = {"search_docs": _search_docs, "list_integrations": _list_integrations}


def _call_tool(site: Site, params: JsonObject) -> ToolResult:
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
    problem = _check_args(tool, args)
    if problem:
        return _tool_error(problem)
    return _TOOL_IMPLS[name](site, args)


def dispatch(site: Site, message: Any) -> tuple[JsonRpcResponse | None, str | None]:
    """One JSON-RPC message → (response or None for a notification, method name for the journal)."""
    if isinstance(message, list):
        return _failure(None, INVALID_REQUEST, "batches are not accepted (removed in MCP 2025-06-18)"), None
    if not isinstance(message, dict):
        return _failure(None, INVALID_REQUEST, "a JSON-RPC message must be a JSON object"), None
    msg_id = message.get("id")
    valid_id = isinstance(msg_id, (str, int)) and not isinstance(msg_id, bool)
    rid = msg_id if valid_id else None
    if message.get("jsonrpc") != "2.0":
        return _failure(rid, INVALID_REQUEST, 'jsonrpc must be the string "2.0"'), None
    method = message.get("method")
    if method is None and ("result" in message or "error" in message):
        return None, None  # a response posted by the client: accepted, nothing to answer
    if not isinstance(method, str):
        return _failure(rid, INVALID_REQUEST, "method must be a string"), None
    if "id" not in message:
        return None, method  # a notification
    if not valid_id:
        return _failure(None, INVALID_REQUEST, "id must be a string or an integer (not null)"), method
    params = message.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return _failure(msg_id, INVALID_PARAMS, "params must be an object"), method
    try:
        if method == "initialize":
            result = _initialize(params)
        elif method == "ping":
            result = Nothing()
        elif method == "tools/list":
            result = ToolList(TOOLS)
        elif method == "tools/call":
            result = _call_tool(site, params)
        else:
            raise _Failure(METHOD_NOT_FOUND, f"Method not found: {method}; this server answers {', '.join(METHODS)}")
    except _Failure as f:
        return _failure(msg_id, f.code, f.message, f.data), method
    return JsonRpcResponse("2.0", msg_id, result=result), method


def _failure(rid: Any, code: int, message: str, data: Any = None) -> JsonRpcResponse:
    return JsonRpcResponse("2.0", rid, error=JsonRpcError(code, message, data))


# --- HTTP -----------------------------------------------------------------------------------------


def _transport_error(status: int, code: int, message: str) -> Response[bytes]:
    return Response(_encode(_failure(None, code, message)), status_code=status, media_type="application/json")


@get(["/mcp", "/mcp/", "/.well-known/mcp", "/.well-known/mcp.json"])
async def mcp_get(request: Request[Any, Any, Any]) -> Response[bytes]:
    accept = request.headers.get("accept", "")
    wants_json = not accept or any(t in accept for t in ("application/json", "text/html", "*/*"))
    if request.url.path.startswith("/mcp") and "text/event-stream" in accept and not wants_json:
        # The transport's standalone server-to-client stream: this stateless server has none.
        return Response(b"", status_code=405, headers={"Allow": "GET, POST"})
    return Response(_encode(descriptor()), media_type="application/json")


@get("/.well-known/mcp/server-card.json")
async def mcp_server_card(request: Request[Any, Any, Any]) -> Response[bytes]:
    site = site_of(request)
    d = descriptor()
    card = {
        "name": SERVER_INFO["name"],
        "description": INSTRUCTIONS,
        "url": site.base_url + "/mcp",
        "version": SERVER_INFO["version"],
        "servers": [
            {
                "name": SERVER_INFO["name"],
                "transport": "http",
                "url": site.base_url + "/mcp",
                "protocolVersion": PRODUCT_PROTOCOL,
                "read_only": True,
                "instructions": INSTRUCTIONS,
                "tools": d.tools,
                "usage": USAGE,
            }
        ],
    }
    return Response(_encode(card), media_type="application/json")


@delete(["/mcp", "/mcp/"], status_code=405)
async def mcp_delete() -> Response[bytes]:
    return Response(b"", status_code=405, headers={"Allow": "GET, POST"})


def on_api_error(request: Request[Any, Any, Any], exc: ApiError) -> Response[bytes]:
    """Refusals on /mcp (a bad Idempotency-Key, a replay conflict) as JSON-RPC error bodies."""
    return Response(
        _encode(_failure(None, INVALID_REQUEST, exc.message)),
        status_code=exc.status,
        media_type="application/json",
        headers=exc.headers,
    )


@post(
    ["/mcp", "/mcp/"],
    status_code=200,
    exception_handlers={ApiError: on_api_error},
    opt=openapi.body(JsonRpcRequest),
)
async def mcp_post(request: Request[Any, Any, Any]) -> Response[bytes]:
    site = site_of(request)
    accept = request.headers.get("accept", "")
    if accept and not any(t in accept for t in ("application/json", "*/*", "application/*")):
        return _transport_error(
            406,
            INVALID_REQUEST,
            "Not Acceptable: the client must accept application/json (and text/event-stream)",
        )
    version = request.headers.get("mcp-protocol-version")
    if version is not None and version.strip() not in SUPPORTED_PROTOCOLS:
        return _transport_error(
            400,
            INVALID_REQUEST,
            f"Bad Request: unsupported MCP-Protocol-Version {version.strip()!r}; "
            f"supported: {', '.join(SUPPORTED_PROTOCOLS)}",
        )
    body = await request.body()
    key = read_key(request.headers.get("idempotency-key"))
    ip = site.client_ip(request)
    # What the journal says of the call: unset on a replayed answer (produce does not run).
    tool: Any = UNSET
    called: str | UnsetType | None = UNSET
    error: int | UnsetType | None = UNSET

    async def produce() -> Answer:
        nonlocal tool, called, error
        await site.core.faults.checkpoint("/mcp")
        try:
            message = jsonbody.decode(body)
        except jsonbody.NotJson as e:
            reply: JsonRpcResponse | None = _failure(None, PARSE_ERROR, f"Parse error: {e}")
            method = None
        else:
            reply, method = dispatch(site, message)
            if method == "tools/call" and isinstance(message, dict):
                tool = (message.get("params") or {}).get("name")
        called = method
        if reply is None:
            return Answer(202, {})
        error = reply.error.code if reply.error else None
        return Answer(200, {"Content-Type": "application/json"}, _encode(reply))

    fp = fingerprint(_canonical(body)) if key is not None else ""
    answer, replayed = await guarded(site.idempotency, f"{ip} POST /mcp", key, fp, produce)
    site.core.bus.publish(ip, SiteMcp(status=answer.status, replayed=replayed, tool=tool, method=called, error=error))
    media = answer.headers.pop("Content-Type", None)
    return Response(answer.body, status_code=answer.status, media_type=media, headers=answer.headers)


def _canonical(body: bytes) -> bytes:
    """The same JSON-RPC message in any key order or spacing is the same request."""
    try:
        return json.dumps(jsonbody.decode(body), sort_keys=True, separators=(",", ":")).encode()
    except (jsonbody.NotJson, RecursionError):
        return body


HANDLERS = [mcp_get, mcp_server_card, mcp_delete, mcp_post]
