"""An agent's first contact with the product, against the emulator: ask, stream, and use MCP tools.

Run `emulator up` first, then `python examples/ask_agent.py "how do I create a trial"`. Only the
standard library is used, so this runs anywhere the emulator does.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any


def site_url() -> str:
    if os.environ.get("EMULATOR_URL"):
        return os.environ["EMULATOR_URL"].rstrip("/")
    state = Path(os.environ.get("EMULATOR_STATE_DIR", Path.home() / ".local/state/pxt-emulator"))
    return json.loads((state / "endpoints.json").read_text())["site"]


def post(url: str, body: dict[str, Any], **headers: str) -> urllib.request.Request:
    data = json.dumps(body).encode()
    return urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **headers})


def ask(base: str, question: str) -> None:
    # An Idempotency-Key makes a retry after a dropped connection safe: the first answer comes back.
    req = post(f"{base}/ask", {"query": question}, **{"Idempotency-Key": str(uuid.uuid4())})
    for attempt in range(5):
        try:
            with urllib.request.urlopen(req) as resp:
                answer = json.load(resp)
                print(f"RateLimit: {resp.headers['RateLimit']}")
                break
        except urllib.error.HTTPError as e:
            if e.code != 429 or attempt == 4:
                raise
            wait = int(e.headers.get("Retry-After", "1"))
            print(f"rate limited; waiting {wait} s as Retry-After says")
            time.sleep(wait)
    print(f"\n{answer['answer']}\n")
    for result in answer["results"]:
        print(f"  {result['name']}: {result['url']}")


def stream(base: str, question: str) -> None:
    req = post(f"{base}/ask", {"query": question}, Accept="text/event-stream")
    with urllib.request.urlopen(req) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if line.startswith("data: "):
                event = json.loads(line[6:])
                print(f"  event {event['message_type']}")


def mcp(base: str, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params or {}}
    with urllib.request.urlopen(post(f"{base}/mcp", body, Accept="application/json, text/event-stream")) as r:
        reply = json.load(r)
    if "error" in reply:
        raise RuntimeError(reply["error"])
    return reply["result"]


def main() -> None:
    base = site_url()
    question = " ".join(sys.argv[1:]) or "how do I create a trial organization"
    print(f"emulator at {base}; asking: {question}")
    ask(base, question)
    print("\nthe same question as a stream:")
    stream(base, question)
    init = mcp(
        base,
        "initialize",
        {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "example", "version": "1"},
        },
    )
    print(f"\nMCP server {init['serverInfo']['name']} speaks {init['protocolVersion']}")
    print("tools:", ", ".join(t["name"] for t in mcp(base, "tools/list")["tools"]))
    found = mcp(base, "tools/call", {"name": "search_docs", "arguments": {"query": question, "limit": 3}})
    for r in found["structuredContent"]["results"]:
        print(f"  {r['name']}: {r['url']}")


if __name__ == "__main__":
    main()
