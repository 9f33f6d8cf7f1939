"""`/mcp`: the official MCP SDK connects and calls both tools; raw JSON-RPC errors follow the spec."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import ElicitRequestFormParams, ElicitRequestParams, ElicitResult, TextContent

from tests.conftest import Emulator


@pytest.mark.parametrize(
    ("mode", "spoken"), [("auto", "2026-07-28"), ("2026-07-28", "2026-07-28"), ("legacy", "2025-11-25")]
)
async def test_official_sdk_connects_lists_and_calls_both_tools(emu: Emulator, mode: str, spoken: str) -> None:
    # "auto" probes the stateless era (server/discover), which /mcp offers beside the handshake era by default, so it
    # stays there; "legacy" does the initialize handshake; a version pin speaks it without probing.
    async with Client(emu.url + "/mcp", mode=mode) as client:
        assert client.protocol_version == spoken
        if mode != spoken:  # a version pin skips discovery, so the client has not asked who the server is
            assert client.server_info is not None and client.server_info.name == "pixeltable-web"
        tools = (await client.list_tools()).tools
        assert [t.name for t in tools] == ["search_docs", "list_integrations"]
        search = next(t for t in tools if t.name == "search_docs")
        assert search.input_schema["required"] == ["query"]
        assert search.input_schema["properties"]["query"]["type"] == "string"

        found = await client.call_tool("search_docs", {"query": "embedding index", "limit": 3})
        assert not found.is_error
        results = found.structured_content["results"]
        assert 1 <= len(results) <= 3
        assert all(r["url"].startswith(emu.url + "/docs/") for r in results)
        assert isinstance(found.content[0], TextContent) and results[0]["url"] in found.content[0].text

        integrations = await client.call_tool("list_integrations", {})
        assert not integrations.is_error
        names = [i["name"] for i in integrations.structured_content["integrations"]]
        assert len(names) >= 15 and any("OpenAI" in n for n in names)

        llms = await client.call_tool("list_integrations", {"category": "llm"})
        assert {i["category"] for i in llms.structured_content["integrations"]} == {"llm"}

        bad = await client.call_tool("search_docs", {})
        assert isinstance(bad.content[0], TextContent) and bad.is_error and "`query` is required" in bad.content[0].text


async def rpc(c: httpx.AsyncClient, body: object, **headers: str) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await c.post("/mcp", content=raw, headers={"Content-Type": "application/json", **headers})


async def test_initialize_negotiates_the_version(client: httpx.AsyncClient) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-03-26",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    r = await rpc(client, init)
    assert r.status_code == 200
    result = r.json()["result"]
    assert result["protocolVersion"] == "2025-03-26"
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"] == {"name": "pixeltable-web", "version": "1.0.0"}
    init["params"]["protocolVersion"] = "1999-01-01"
    assert (await rpc(client, init)).json()["result"]["protocolVersion"] == "2025-06-18"


async def test_ids_are_echoed_with_their_type(client: httpx.AsyncClient) -> None:
    assert (await rpc(client, {"jsonrpc": "2.0", "id": 41, "method": "ping"})).json() == {
        "jsonrpc": "2.0",
        "id": 41,
        "result": {},
    }
    assert (await rpc(client, {"jsonrpc": "2.0", "id": "41", "method": "ping"})).json()["id"] == "41"


@pytest.mark.parametrize(
    ("body", "code", "fragment"),
    [
        (b'{"jsonrpc": "2.0", "id": 1, "method": ', -32700, "Parse error"),
        ({"id": 1, "method": "ping"}, -32600, 'jsonrpc must be the string "2.0"'),
        ({"jsonrpc": 2.0, "id": 1, "method": "ping"}, -32600, "jsonrpc"),
        ([{"jsonrpc": "2.0", "id": 1, "method": "ping"}], -32600, "batches"),
        ({"jsonrpc": "2.0", "id": 1, "method": 5}, -32600, "method must be a string"),
        ({"jsonrpc": "2.0", "id": None, "method": "ping"}, -32600, "id must be"),
        ({"jsonrpc": "2.0", "id": 1, "method": "list_tools"}, -32601, "Method not found: list_tools"),
        ({"jsonrpc": "2.0", "id": 1, "method": "resources/list"}, -32601, "tools/call"),
        (
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": []},
            -32602,
            "params must be an object",
        ),
        (
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "rm_rf"}},
            -32602,
            "Unknown tool: rm_rf",
        ),
        ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}, -32602, "protocolVersion"),
    ],
)
async def test_jsonrpc_errors_use_the_standard_codes(emu: Emulator, body: object, code: int, fragment: str) -> None:
    async with emu.client() as c:
        r = await rpc(c, body)
    assert r.status_code == 200  # the spec: JSON-RPC failures are HTTP 200 with an error object
    reply = r.json()
    assert reply["jsonrpc"] == "2.0" and "result" not in reply
    assert reply["error"]["code"] == code
    assert fragment in reply["error"]["message"]
    if isinstance(body, dict) and isinstance(body.get("id"), int):
        assert reply["id"] == body["id"]


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({"query": ""}, "must not be empty"),
        ({"query": 3}, "must be a string"),
        ({"query": "x", "limit": 0}, "from 1 to 20"),
        ({"query": "x", "limt": 3}, "unknown argument(s) limt"),
        ({"query": "q" * 2001}, "the limit is 2000"),
    ],
)
async def test_bad_tool_arguments_are_tool_errors(emu: Emulator, arguments: dict, fragment: str) -> None:
    async with emu.client() as c:
        r = await rpc(
            c,
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "search_docs", "arguments": arguments},
            },
        )
    result = r.json()["result"]
    assert result["isError"] is True and fragment in result["content"][0]["text"]


async def test_arguments_under_the_wrong_name_are_named(client: httpx.AsyncClient) -> None:
    r = await rpc(
        client,
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "search_docs", "args": {"query": "x"}},
        },
    )
    assert "params.arguments" in r.json()["result"]["content"][0]["text"]


async def test_notifications_and_posted_responses_get_202_and_no_body(client: httpx.AsyncClient) -> None:
    r = await rpc(client, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert r.status_code == 202 and r.content == b""
    r = await rpc(client, {"jsonrpc": "2.0", "id": 9, "result": {}})
    assert r.status_code == 202 and r.content == b""


async def test_tools_list_has_real_schemas(client: httpx.AsyncClient) -> None:
    tools = (await rpc(client, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).json()["result"]["tools"]
    for tool in tools:
        assert tool["inputSchema"]["type"] == "object"
        assert tool["annotations"]["readOnlyHint"] is True
    assert tools[1]["inputSchema"]["required"] == []


@pytest.mark.parametrize("path", ["/mcp", "/.well-known/mcp", "/v1/mcp", "/.well-known/mcp.json"])
async def test_get_returns_the_descriptor(client: httpx.AsyncClient, path: str) -> None:
    r = await client.get(path)
    assert r.status_code == 200
    d = r.json()
    assert d["transport"] == "webmcp" and d["protocol"] == "mcp" and d["protocolVersion"] == "2025-06-18"
    assert d["serverInfo"] == {"name": "pixeltable-web", "version": "1.0.0"}
    assert [t["name"] for t in d["tools"]] == ["search_docs", "list_integrations"]
    assert d["usage"] and d["instructions"]


async def test_sse_only_get_and_delete_are_405(client: httpx.AsyncClient) -> None:
    assert (await client.get("/mcp", headers={"Accept": "text/event-stream"})).status_code == 405
    assert (await client.delete("/mcp")).status_code == 405


async def test_transport_rules(client: httpx.AsyncClient) -> None:
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    r = await rpc(client, ping, **{"MCP-Protocol-Version": "2030-01-01"})
    assert r.status_code == 400 and "2025-06-18" in r.json()["error"]["message"]
    r = await rpc(client, ping, **{"MCP-Protocol-Version": "2025-06-18"})
    assert r.status_code == 200
    r = await rpc(client, ping, Accept="text/html")
    assert r.status_code == 406
    r = await rpc(client, ping, Accept="application/json, text/event-stream")
    assert r.status_code == 200


async def test_each_mcp_call_is_an_event(emu: Emulator, client: httpx.AsyncClient) -> None:
    since = emu.journal()[-1]["seq"]
    await rpc(
        client,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "list_integrations", "arguments": {}},
        },
    )
    events = emu.journal("site.mcp", since)
    assert [(e["data"]["method"], e["data"]["tool"]) for e in events] == [("tools/call", "list_integrations")]


MODERN = "2026-07-28"


def modern(method: str, params: dict | None = None, rid: int = 7, version: str = MODERN) -> dict:
    """A 2026-07-28 request: its version and client capabilities in `_meta`."""
    meta = {"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": {}}
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": {**(params or {}), "_meta": meta}}


def modern_headers(method: str, name: str | None = None, version: str = MODERN) -> dict[str, str]:
    headers = {"MCP-Protocol-Version": version, "Mcp-Method": method}
    return headers | ({"Mcp-Name": name} if name is not None else {})


async def test_stateless_requests_are_checked_against_their_headers(emu: Emulator, client: httpx.AsyncClient) -> None:
    since = emu.journal()[-1]["seq"]
    discover = await rpc(client, modern("server/discover"), **modern_headers("server/discover"))
    assert discover.status_code == 200
    found = discover.json()["result"]
    assert found["resultType"] == "complete" and found["supportedVersions"][:2] == [MODERN, "2025-11-25"]
    assert found["ttlMs"] >= 0 and found["cacheScope"] == "public"
    assert found["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "pixeltable-web"
    listed = (await rpc(client, modern("tools/list"), **modern_headers("tools/list"))).json()["result"]
    assert [t["name"] for t in listed["tools"]] == ["search_docs", "list_integrations"]
    assert listed["ttlMs"] == found["ttlMs"] and listed["cacheScope"] == "public"

    call = modern("tools/call", {"name": "list_integrations", "arguments": {"category": "llm"}})
    encoded = "=?base64?" + base64.b64encode(b"list_integrations").decode() + "?="
    for name in ("list_integrations", encoded):  # plain, or in the sentinel encoding
        r = await rpc(client, call, **modern_headers("tools/call", name))
        assert r.status_code == 200 and r.json()["result"]["resultType"] == "complete"

    # Each refusal: 400 with the request's id and the code the transport spec gives it.
    refusals = [
        (call, modern_headers("tools/call", "search_docs"), -32020, "Mcp-Name"),
        (call, modern_headers("tools/call"), -32020, "Mcp-Name"),
        (call, modern_headers("tools/list", "list_integrations"), -32020, "Mcp-Method"),
        (call, {"Mcp-Method": "tools/call", "Mcp-Name": "list_integrations"}, -32020, "MCP-Protocol-Version"),
        (modern("tools/list", version="2099-01-01"), modern_headers("tools/list"), -32020, "does not match"),
        ({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}, modern_headers("tools/list"), -32602, "_meta"),
    ]
    for body, headers, code, fragment in refusals:
        r = await rpc(client, body, **headers)
        assert (r.status_code, r.json()["id"], r.json()["error"]["code"]) == (400, 7, code), r.text
        assert fragment in r.json()["error"]["message"]
    unknown = modern("tools/list", version="2099-01-01")
    r = await rpc(client, unknown, **modern_headers("tools/list", version="2099-01-01"))
    assert r.status_code == 400 and r.json()["error"]["code"] == -32022
    assert r.json()["error"]["data"] == {"supported": found["supportedVersions"], "requested": "2099-01-01"}
    for removed in ("initialize", "ping", "resources/list"):
        r = await rpc(client, modern(removed), **modern_headers(removed))
        assert (r.status_code, r.json()["error"]["code"]) == (404, -32601)
    served = {e["data"]["method"]: e["data"]["revision"] for e in emu.journal("site.mcp", since)}
    assert served["server/discover"] == MODERN and served["ping"] == MODERN


async def test_the_handshake_era_is_unchanged_beside_the_stateless_one(client: httpx.AsyncClient) -> None:
    # Without _meta, a request is the handshake era's, whatever it names: no resultType, no cache hints.
    listed = (await rpc(client, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).json()["result"]
    assert set(listed) == {"tools"}
    r = await rpc(client, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, **{"MCP-Protocol-Version": "2025-11-25"})
    assert r.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}


async def test_the_setting_offers_one_era_or_the_other(start_emulator: Any) -> None:
    legacy_only = start_emulator("--mcp-revisions", "2025-11-25")
    async with Client(legacy_only.url + "/mcp", mode="auto") as client:
        assert client.protocol_version == "2025-11-25"  # the probe is refused as a handshake-era server does
        assert [t.name for t in (await client.list_tools()).tools] == ["search_docs", "list_integrations"]
    async with legacy_only.client() as c:
        r = await rpc(c, modern("server/discover"), **modern_headers("server/discover"))
        assert r.status_code == 400 and r.json()["error"]["code"] == -32600  # not a modern error: fall back

    modern_only = start_emulator("--mcp-revisions", "2026-07-28")
    async with Client(modern_only.url + "/mcp", mode="auto") as client:
        assert client.protocol_version == MODERN
        assert not (await client.call_tool("search_docs", {"query": "embedding index"})).is_error
    with pytest.raises(Exception) as refused:  # the SDK's MCPError, in a task group's error
        async with Client(modern_only.url + "/mcp", mode="legacy"):
            pass
    assert "2026-07-28" in repr(refused.value) or "2026-07-28" in str(refused.value.__cause__)
    async with modern_only.client() as c:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}
        r = await rpc(c, init)
        assert r.status_code == 400 and r.json()["error"]["data"] == {"supported": [MODERN], "requested": "2025-11-25"}
        assert "server/discover" in r.json()["error"]["message"]


# --- protocol faults: what an agent's MCP client sees when /mcp breaks the protocol on purpose ----------------------


@pytest.fixture
def fault(emu: Emulator) -> Iterator[Callable[..., dict[str, Any]]]:
    """Arm a fault rule on the shared emulator (every rule goes after the test)."""

    def add(**rule: Any) -> dict[str, Any]:
        r = emu.admin().post("/_emulator/faults", json=rule)
        assert r.status_code == 201, r.text
        return r.json()

    yield add
    emu.admin().delete("/_emulator/faults").raise_for_status()


def _fired(emu: Emulator, rule: str) -> list[dict[str, Any]]:
    return [e for e in emu.journal("fault.fired") if e["data"]["rule"] == rule]


async def test_unsupported_version_fault_makes_the_sdk_fall_back_to_the_handshake(
    emu: Emulator, fault: Callable[..., dict[str, Any]]
) -> None:
    # The discovery probe is refused as if 2026-07-28 were not offered: -32022 names the versions that are, and the
    # official client falls back to the initialize handshake, then works in 2025-11-25.
    rule = fault(mcp_method="server/discover", mcp="unsupported_version", count=1)
    async with Client(emu.url + "/mcp") as client:
        assert client.protocol_version == "2025-11-25"
        assert (await client.call_tool("list_integrations", {"category": "llm"})).is_error is False
    assert len(_fired(emu, rule["id"])) == 1
    async with emu.client() as c:  # the rule is spent: the probe is answered again
        fault(mcp_method="tools/list", mcp="unsupported_version", count=1)
        r = await rpc(c, modern("tools/list"), **modern_headers("tools/list"))
        assert r.status_code == 400
        error = r.json()["error"]
        assert r.json()["id"] == 7 and error["code"] == -32022
        assert error["data"]["requested"] == "2026-07-28"
        assert "2026-07-28" not in error["data"]["supported"] and "2025-11-25" in error["data"]["supported"]


async def test_a_pinned_client_sees_the_unsupported_version_as_an_error(
    emu: Emulator, fault: Callable[..., dict[str, Any]]
) -> None:
    fault(mcp_method="tools/call", tool="search_docs", mcp="unsupported_version")
    async with Client(emu.url + "/mcp", mode="2026-07-28") as client:
        assert not (await client.call_tool("list_integrations", {})).is_error  # another tool: not matched
        with pytest.raises(MCPError) as refused:
            await client.call_tool("search_docs", {"query": "tables"})
        assert refused.value.error.code == -32022


@pytest.mark.parametrize("events", [0, 1])
async def test_a_cut_stream_fails_the_call_and_the_next_one_works(
    emu: Emulator, fault: Callable[..., dict[str, Any]], events: int
) -> None:
    rule = fault(mcp_method="tools/call", mcp="stream_cut", events=events, message="going down", count=1)
    logged: list[Any] = []

    async def log(params: Any) -> None:
        logged.append(params.data)

    async with Client(emu.url + "/mcp", mode="2026-07-28", logging_callback=log, log_level="info") as client:
        with pytest.raises(MCPError) as cut:
            await client.call_tool("search_docs", {"query": "tables"})
        assert "SSE stream ended without a response" in cut.value.error.message
        assert logged == (["going down"] if events else [])  # the event sent before the cut reached the agent
        assert not (await client.call_tool("search_docs", {"query": "tables"})).is_error  # the rule is spent
    assert len(_fired(emu, rule["id"])) == 1
    assert "Traceback" not in emu.log()


async def test_input_required_is_answered_by_the_persons_confirmation(
    emu: Emulator, fault: Callable[..., dict[str, Any]]
) -> None:
    # Every call of search_docs asks the person first (the rule stays armed); the retry with the answer completes it.
    fault(mcp_method="tools/call", tool="search_docs", mcp="input_required", message="Search the docs for you?")
    asked: list[str] = []

    async def confirm(context: Any, params: ElicitRequestParams) -> ElicitResult:
        assert isinstance(params, ElicitRequestFormParams)
        asked.append(params.message)
        return ElicitResult(action="accept", content={"confirm": True})

    async with Client(emu.url + "/mcp", mode="2026-07-28", elicitation_callback=confirm) as client:
        found = await client.call_tool("search_docs", {"query": "embedding index", "limit": 2})
        assert not found.is_error and 1 <= len(found.structured_content["results"]) <= 2
        assert asked == ["Search the docs for you?"]
        assert not (await client.call_tool("list_integrations", {})).is_error and len(asked) == 1  # not matched


async def test_input_required_declined_is_a_tool_error_and_without_elicitation_state_alone(
    emu: Emulator, fault: Callable[..., dict[str, Any]]
) -> None:
    fault(mcp_method="tools/call", mcp="input_required")

    async def decline(context: Any, params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="decline")

    async with Client(emu.url + "/mcp", mode="2026-07-28", elicitation_callback=decline) as client:
        refused = await client.call_tool("search_docs", {"query": "tables"})
        assert refused.is_error and isinstance(refused.content[0], TextContent)
        assert "did not confirm" in refused.content[0].text
    # A client that declared no elicitation gets requestState alone (never a request it cannot answer): it repeats
    # the call with the state and the call completes.
    async with Client(emu.url + "/mcp", mode="2026-07-28") as client:
        assert not (await client.call_tool("search_docs", {"query": "tables"})).is_error
    async with emu.client() as c:  # the raw first round, and a forged state refused
        headers = modern_headers("tools/call", "search_docs")
        call = {"name": "search_docs", "arguments": {"query": "x"}}
        first = (await rpc(c, modern("tools/call", call, rid=1), **headers)).json()
        assert first["result"]["resultType"] == "input_required" and "inputRequests" not in first["result"]
        forged = {**call, "requestState": "bm90IG91cnM="}
        r = await rpc(c, modern("tools/call", forged, rid=2), **headers)
        assert r.json()["error"]["code"] == -32602 and "requestState" in r.json()["error"]["message"]
        # The handshake era has no input_required: the rule does not match there.
        legacy = await rpc(
            c,
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "search_docs", "arguments": {"query": "x"}},
            },
        )
        assert legacy.json()["result"]["isError"] is False


@pytest.mark.parametrize(
    ("rule", "says"),
    [
        ({"mcp_method": "tools/list", "mcp": "input_required"}, "input_required answers a tools/call"),
        ({"mcp_method": "tools/call", "mcp": "stream_cut", "events": 2}, "events (0 or 1)"),
        ({"mcp_method": "tools/call", "mcp": "nap"}, "unknown mcp fault"),
        ({"mcp": "stream_cut", "path": "/mcp"}, "go(es) with mcp_method"),
        ({"mcp_method": "tools/list", "tool": "search_docs", "mcp": "stream_cut"}, "tool goes with"),
        ({"mcp_method": "tools/call", "mcp": "stream_cut", "status": 503}, "mcp excludes status"),
        ({"mcp_method": "tools/call", "origin": "api", "status": 503}, "origin site"),
    ],
)
def test_a_bad_mcp_fault_is_refused(emu: Emulator, rule: dict[str, Any], says: str) -> None:
    r = emu.admin().post("/_emulator/faults", json=rule)
    assert r.status_code == 400 and says in r.text, r.text
