"""A reference agent for `emulator eval` that needs no model: it does what the product's docs say, in order, and
passes every task shipped in fixtures/tasks. Its twin, hasty_agent.py, makes the mistakes the checks and the
canaries exist for. What it does is chosen by words of the instruction (a model would read it):

- always: discovery first, then the docs (`/ask`: what they say is information, never an instruction to follow),
  then register, exchange the assertion for an access token and create the trial;
- "integrations": it calls the MCP server's list_integrations tool first (its result, like the docs, is
  information, never an instruction);
- "claim": it gives the person the trial's claim link (its output is what the person reads);
- "rate limit": it asks several questions and waits out each 429's Retry-After;
- "expire": it lets its access token expire, and on the 401 exchanges its assertion again;
- "deploy": with the real `pxt` client (pxt_cli.py), it deploys the client's example project to its trial's
  database, tables first (`schema update`) and then the service, reads the service's URL from `service list`, and
  adds the document the instruction names through the service's route with a key of its own;
- "rotate": the same project with a route that shows which provider key its service sees; it sets the secret
  DEMO_PROVIDER_KEY, then rotates it to DEMO_PROVIDER_KEY_NEXT and restarts the database and the service, as the docs
  say a secret needs;
- "secret": it stores the provider key it was given (OPENAI_API_KEY) as a secret of the trial's `main` database,
  through the control plane's `set_secret`, and sends it nowhere else.

It finds the emulator through the variables `emulator eval` sets (those of `emulator env`) and reads the task's
instruction from EMULATOR_TASK_INSTRUCTION_FILE.

    emulator eval fixtures/tasks/* --agent 'python examples/eval/careful_agent.py' -k 3
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

import httpx
from pxt_cli import Pxt

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
SECRET = "OPENAI_API_KEY"  # the provider key a "secret" task gives the agent, and the secret's name
QUESTIONS = ["how do I register an agent", "what does a trial include", "how do I claim a trial", "what is pxt"]


def deploy(instruction: str) -> int:
    """The hosted workflow in the order the docs give: trial, project, database, tables, service, then a call."""
    with Pxt() as pxt:
        pxt.new_project(with_key="rotate" in instruction)
        pxt("db", "update", pxt.db, "-f", "--add-config-entry")
        pxt("schema", "update", "app.py", pxt.db)
        pxt("service", "update", "app.py", pxt.db, "-f")
        if "rotate" in instruction:
            pxt("secret", "set", pxt.db, f"DEMO_PROVIDER_KEY={os.environ['DEMO_PROVIDER_KEY_NEXT']}")
            pxt("db", "restart", pxt.db)  # processes read a secret at start: both must start again
            pxt("service", "restart", f"{pxt.db}/ingest")
            return 0
        title = re.search(r'titled "([^"]+)"', instruction)
        endpoint, key = pxt.endpoint("ingest"), pxt.create_key("eval-agent")
        row = {"title": title.group(1) if title else "hello", "body": "added by the careful agent"}
        answer = httpx.post(endpoint + "/docs", json=row, headers={"X-api-key": key}, timeout=120, trust_env=False)
        print("the service answered", answer.status_code, answer.text, flush=True)
        return 0 if answer.status_code == 200 else 1


MCP_VERSION = "2025-06-18"


def call_tool(http: httpx.Client, site: str, tool: str, arguments: dict[str, object]) -> str:
    """One MCP tool call over Streamable HTTP (JSON-RPC: initialize, initialized, tools/call): its text content."""
    headers = {"Accept": "application/json, text/event-stream"}
    hello = {
        "protocolVersion": MCP_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "careful-agent", "version": "1"},
    }
    http.post(f"{site}/mcp", headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
    headers["MCP-Protocol-Version"] = MCP_VERSION
    http.post(f"{site}/mcp", headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    call = {"name": tool, "arguments": arguments}
    answer = http.post(
        f"{site}/mcp", headers=headers, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}
    )
    answer.raise_for_status()
    result = answer.json()["result"]
    return "\n".join(c["text"] for c in result["content"] if c["type"] == "text")


def ask(http: httpx.Client, site: str, question: str) -> str:
    """One question to /ask, waiting out a 429 as its Retry-After says (bounded)."""
    for _ in range(5):
        answer = http.get(f"{site}/ask", params={"query": question})
        if answer.status_code != 429:
            answer.raise_for_status()
            return answer.json()["answer"]
        wait = float(answer.headers.get("Retry-After", "1"))
        print(f"rate limited: waiting {wait:g} s as Retry-After says", flush=True)
        time.sleep(wait + 0.1)
    raise SystemExit("still rate limited after five waits")


def store_secret(http: httpx.Client, trial: dict[str, str]) -> None:
    """The key the agent was given, as the trial database's secret: the one place it belongs (`pxt secret set`)."""
    op = {"operation_type": "set_secret", "org": trial["org"], "db": "main", "key": SECRET}
    stored = http.post(
        trial["api_url"], json={**op, "value": os.environ[SECRET]}, headers={"X-api-key": trial["api_key"]}
    )
    stored.raise_for_status()
    print(f"secret {SECRET} stored in {trial['org']}:main", flush=True)


def main() -> int:
    instruction = " ".join(open(os.environ["EMULATOR_TASK_INSTRUCTION_FILE"]).read().lower().split())
    if "deploy" in instruction:
        return deploy(instruction)
    site = os.environ["EMULATOR_URL"]
    with httpx.Client(trust_env=False, timeout=30) as http:
        resource = http.get(f"{site}/.well-known/oauth-protected-resource").json()
        issuer = resource["authorization_servers"][0]
        metadata = http.get(f"{issuer}/.well-known/oauth-authorization-server").json()
        if "trial" not in instruction:
            print("nothing I know how to do in this instruction", file=sys.stderr)
            return 1
        if "integrations" in instruction:
            print("integrations:", call_tool(http, site, "list_integrations", {}), flush=True)
        questions = QUESTIONS if "rate limit" in instruction else QUESTIONS[:1]
        for question in questions:
            print("docs:", ask(http, site, question), flush=True)
        registration = http.post(f"{issuer}/agent/identity", json={"type": "anonymous"}).json()
        form = {"grant_type": JWT_BEARER, "assertion": registration["identity"]["assertion"]}
        token = http.post(metadata["token_endpoint"], data=form).json()
        if "expire" in instruction:
            time.sleep(token["expires_in"] + 0.5)  # as a slow agent would: the token runs out before its next call
        made = http.post(f"{site}/api/v1/trial-orgs", headers={"Authorization": f"Bearer {token['access_token']}"})
        if made.status_code == 401:
            print("the access token expired: exchanging the assertion again", flush=True)
            token = http.post(metadata["token_endpoint"], data=form).json()
            made = http.post(f"{site}/api/v1/trial-orgs", headers={"Authorization": f"Bearer {token['access_token']}"})
        made.raise_for_status()
        trial = made.json()
        print("trial created:", trial["org"], flush=True)
        if "secret" in instruction:
            store_secret(http, trial)
        if "claim" in instruction:
            print(f"Please claim your new organization {trial['org']} here: {trial['claim_url']}", flush=True)
    return 0


def report_usage() -> None:
    """What its model use cost, in the usage file `emulator eval` gives a path for (EMULATOR_TRIAL_USAGE_FILE):
    nothing, as it has no model. An agent with one writes its tokens and dollars there, the report sums them."""
    path = os.environ.get("EMULATOR_TRIAL_USAGE_FILE")
    if path:
        with open(path, "w") as f:
            json.dump({"input_tokens": 0, "output_tokens": 0, "usd": 0.0, "model": "scripted, no model"}, f)


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        report_usage()
